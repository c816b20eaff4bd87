//! Slash commands of the interactive front-ends, and the sessions they save.
//!
//! [`parse`] turns a typed line into a [`Command`]; [`Conversation`] holds
//! what the REPL and the TUI share (the agent, the current provider, the
//! queue of text typed while the model answers) and runs commands, prompts
//! and queued input the same way for both. Commands talk to the agent only
//! through [`Op`]s; provider switches build the new backend with
//! `connect.rs`. `/image` keeps images for the next prompt ([`Attachments`],
//! `attach.rs`), which then goes to the agent as one user message carrying
//! them. Saved sessions and the `--continue` session live in the
//! session store (`crate::store`, under the XDG data directory), written
//! atomically; profiles come from config.json (`crate::config::profile`).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agent::{AgentHandle, Op, ToolsOp};
use crate::commands;
use crate::config::profile::{self, Profile};
use crate::config::resolve::Settings;
use crate::config::{self, ProviderConfig};
use crate::core::Session;
use crate::store::{self, Store};

use super::attach::Attachments;
use crate::frontend::connect::{self, OpenError};

/// How long a command waits for the agent to answer a query.
const AGENT_REPLY_TIMEOUT: Duration = Duration::from_secs(5);

const HELP: &str = "\
Commands:
  /help                         this list
  /clear                        forget the conversation
  /provider [list|use NAME|next] show or switch providers
  /model [list|NAME]            show or switch the model
  /tools [list|enable GLOB|disable GLOB]
  /config [KEY [VALUE]]         show or change config.json
  /save [ID]                    save the conversation (again under its ID)
  /load ID                      load a saved conversation
  /sessions [list|delete ID]    list or delete saved conversations
  /profile [list|use NAME]      list profiles or switch (for this session)
  /image [PATH|URL|clear]       attach an image to your next message; alone: list them
  /quit, exit, quit             leave
Keys: Esc or Ctrl-C cancels a reply, Esc Esc clears the line, Up/Down recall, Ctrl-D exits.";

/// Every command's name, for Tab completion (the editor completes a line's
/// first word from these).
pub const NAMES: [&str; 12] = [
    "/help",
    "/clear",
    "/provider",
    "/model",
    "/tools",
    "/config",
    "/save",
    "/load",
    "/sessions",
    "/profile",
    "/image",
    "/quit",
];

/// A parsed slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    Clear,
    ProviderList,
    ProviderUse(String),
    ProviderNext,
    Model(Option<String>),
    ModelList,
    Tools(ToolsChange),
    Config(Vec<String>),
    Save(Option<String>),
    Load(String),
    Sessions,
    DeleteSession(String),
    Profiles,
    UseProfile(String),
    Image(ImageCommand),
    Quit,
}

/// `/image` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageCommand {
    /// `/image`: the pending attachments.
    List,
    /// `/image clear`: drop them.
    Clear,
    /// `/image PATH` or `/image URL`: attach one to the next message.
    Attach(String),
}

/// `/tools` arguments, kept apart from the agent's [`ToolsOp`] so parsing stays pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolsChange {
    List,
    Enable(String),
    Disable(String),
}

/// Parses a line: `None` when it is a prompt, not a command.
pub fn parse(line: &str) -> Option<Result<Command, String>> {
    let line = line.trim();
    if line == "exit" || line == "quit" {
        return Some(Ok(Command::Quit));
    }
    let rest = line.strip_prefix('/')?;
    if let Some(argument) = image_argument(rest) {
        return Some(Ok(Command::Image(argument)));
    }
    let words: Vec<&str> = rest.split_whitespace().collect();
    Some(parse_words(&words))
}

/// `/image`'s argument: the rest of the line is one path (spaces and all), as
/// typed or as a terminal pastes a dropped file (quoted, or spaces escaped).
fn image_argument(rest: &str) -> Option<ImageCommand> {
    let argument = rest.strip_prefix("image")?;
    if !argument.is_empty() && !argument.starts_with(char::is_whitespace) {
        return None;
    }
    Some(match argument.trim() {
        "" => ImageCommand::List,
        "clear" => ImageCommand::Clear,
        path => ImageCommand::Attach(unquote(path)),
    })
}

/// `'a b.png'`, `"a b.png"` and `a\ b.png` all name `a b.png`.
fn unquote(path: &str) -> String {
    for quote in ['\'', '"'] {
        if let Some(inner) = path.strip_prefix(quote).and_then(|p| p.strip_suffix(quote)) {
            return inner.to_string();
        }
    }
    path.replace("\\ ", " ")
}

fn parse_words(words: &[&str]) -> Result<Command, String> {
    let owned = |w: &&str| w.to_string();
    Ok(match words {
        ["help"] | ["?"] => Command::Help,
        ["clear"] => Command::Clear,
        ["provider"] | ["provider", "list"] => Command::ProviderList,
        ["provider", "next"] => Command::ProviderNext,
        ["provider", "use", name] => Command::ProviderUse(name.to_string()),
        ["model"] => Command::Model(None),
        ["model", "list"] => Command::ModelList,
        ["model", name] => Command::Model(Some(name.to_string())),
        ["tools"] | ["tools", "list"] => Command::Tools(ToolsChange::List),
        ["tools", "enable", glob] => Command::Tools(ToolsChange::Enable(glob.to_string())),
        ["tools", "disable", glob] => Command::Tools(ToolsChange::Disable(glob.to_string())),
        ["config", args @ ..] if args.len() <= 2 => {
            Command::Config(args.iter().map(owned).collect())
        }
        ["save"] => Command::Save(None),
        ["save", name] => Command::Save(Some(name.to_string())),
        ["load", name] => Command::Load(name.to_string()),
        ["sessions"] | ["sessions", "list"] => Command::Sessions,
        ["sessions", "delete", id] => Command::DeleteSession(id.to_string()),
        ["profile"] | ["profile", "list"] | ["profiles"] => Command::Profiles,
        ["profile", "use", name] => Command::UseProfile(name.to_string()),
        ["quit"] | ["exit"] => Command::Quit,
        [] => return Err("empty command; /help lists them".into()),
        [name, ..] => {
            return Err(format!(
                "unknown or malformed command '/{name}'; /help lists them"
            ))
        }
    })
}

/// What starting a line led to, for the front-end to show.
#[derive(Debug, PartialEq, Eq)]
pub enum Started {
    /// A prompt went to the agent; its events follow.
    Prompt,
    /// A command ran; these lines are its output.
    Output(Vec<String>),
    Quit,
}

/// The state the REPL and TUI share.
pub struct Conversation<'a> {
    pub agent: &'a AgentHandle,
    pub settings: &'a Settings,
    pub provider: ProviderConfig,
    /// Lines typed while the model answered, sent in order afterwards.
    pub queue: VecDeque<String>,
    pub busy: bool,
    /// The id the conversation was last saved under or loaded from.
    pub session_id: Option<String>,
    pub profile: Profile,
    pub store: Store,
    /// Images `/image` attached, sent with the next prompt.
    pub attachments: Attachments,
}

impl<'a> Conversation<'a> {
    pub fn new(agent: &'a AgentHandle, settings: &'a Settings, provider: ProviderConfig) -> Self {
        Conversation {
            agent,
            settings,
            provider,
            queue: VecDeque::new(),
            busy: false,
            session_id: None,
            profile: settings.profile.clone(),
            store: Store::user(),
            attachments: Attachments::default(),
        }
    }

    /// Starts a line now (the agent is idle): a command, or a prompt (with
    /// the images attached since the last one).
    pub fn start(&mut self, line: &str) -> Started {
        match parse(line) {
            Some(Ok(Command::Quit)) => Started::Quit,
            Some(Ok(command)) => Started::Output(self.run(command)),
            Some(Err(message)) => Started::Output(vec![message]),
            None => {
                let message = self.attachments.take_into(line.to_string());
                self.busy = self.agent.send(Op::Prompt(message));
                Started::Prompt
            }
        }
    }

    /// The next queued line, once the agent is idle.
    pub fn next_queued(&mut self) -> Option<String> {
        if self.busy {
            return None;
        }
        self.queue.pop_front()
    }

    fn run(&mut self, command: Command) -> Vec<String> {
        let result = match command {
            Command::Help => Ok(HELP.lines().map(String::from).collect()),
            Command::Clear => {
                self.agent.send(Op::Clear);
                Ok(vec!["[Conversation cleared]".into()])
            }
            Command::ProviderList => Ok(self.provider_list()),
            Command::ProviderUse(name) => self.use_provider_named(&name),
            Command::ProviderNext => self.use_next_provider(),
            Command::Model(None) => Ok(self.model_lines()),
            Command::Model(Some(model)) => self.use_model(model),
            Command::ModelList => self.model_list(),
            Command::Tools(change) => self.tools(change),
            Command::Config(words) => self.config(&words),
            Command::Save(id) => self.save(id),
            Command::Load(id) => self.load(&id),
            Command::Sessions => self.sessions(),
            Command::DeleteSession(id) => self.delete_session(&id),
            Command::Profiles => self.profiles(),
            Command::UseProfile(name) => self.use_profile(&name),
            Command::Image(command) => Ok(image(&mut self.attachments, command)),
            Command::Quit => Ok(Vec::new()),
        };
        result.unwrap_or_else(|message| vec![format!("error: {message}")])
    }

    fn provider_list(&self) -> Vec<String> {
        let current = &self.provider.name;
        self.settings
            .providers
            .iter()
            .map(|p| {
                let mark = if &p.name == current { "*" } else { " " };
                let model = p.model.as_deref().unwrap_or("?");
                format!("{mark} {} ({}, {model})", p.name, p.kind.as_str())
            })
            .collect()
    }

    fn use_provider_named(&mut self, name: &str) -> Result<Vec<String>, String> {
        let provider = self
            .settings
            .providers
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| format!("no provider named '{name}'; /provider list shows them"))?;
        self.switch_to(provider.clone())
    }

    fn use_next_provider(&mut self) -> Result<Vec<String>, String> {
        let providers = &self.settings.providers;
        let index = providers.iter().position(|p| p.name == self.provider.name);
        let next = index.map_or(0, |i| (i + 1) % providers.len().max(1));
        let provider = providers
            .get(next)
            .ok_or("no providers configured")?
            .clone();
        self.switch_to(provider)
    }

    fn use_model(&mut self, model: String) -> Result<Vec<String>, String> {
        let mut provider = self.provider.clone();
        provider.model = Some(model);
        self.switch_to(provider)
    }

    /// Builds the provider's backend and hands it to the agent; the conversation stays.
    fn switch_to(&mut self, provider: ProviderConfig) -> Result<Vec<String>, String> {
        let backend = connect::open_provider(self.settings, &provider)
            .map_err(|OpenError::Usage(message)| message)?;
        if !self.agent.send(Op::SetBackend(backend)) {
            return Err("the agent has stopped".into());
        }
        self.provider = provider;
        Ok(vec![format!("[Switched to {}]", self.status_left())])
    }

    fn model_lines(&self) -> Vec<String> {
        vec![format!(
            "model: {} (switch with /model NAME)",
            self.provider.model.as_deref().unwrap_or("?")
        )]
    }

    /// What the current provider offers, the current model marked.
    fn model_list(&self) -> Result<Vec<String>, String> {
        let models = connect::list_models(self.settings, &self.provider)?;
        if models.is_empty() {
            return Ok(vec![format!(
                "provider {} lists no models",
                self.provider.name
            )]);
        }
        let current = self.provider.model.as_deref().unwrap_or("");
        let is_current = |m: &str| {
            m == current
                || std::path::Path::new(current)
                    .file_stem()
                    .is_some_and(|s| s == m)
        };
        Ok(models
            .iter()
            .map(|m| format!("{} {m}", if is_current(m) { "*" } else { " " }))
            .collect())
    }

    fn tools(&self, change: ToolsChange) -> Result<Vec<String>, String> {
        let op = match change {
            ToolsChange::List => ToolsOp::List,
            ToolsChange::Enable(glob) => ToolsOp::Enable(glob),
            ToolsChange::Disable(glob) => ToolsOp::Disable(glob),
        };
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.agent.send(Op::Tools(op, tx));
        let names = rx
            .recv_timeout(AGENT_REPLY_TIMEOUT)
            .map_err(|_| "the agent did not answer")?;
        let mut lines = vec![format!("enabled tools: {}", names.join(", "))];
        let servers = crate::mcp::status_lines();
        if !servers.is_empty() {
            lines.push("MCP servers:".into());
            lines.extend(servers.into_iter().map(|line| format!("  {line}")));
        }
        Ok(lines)
    }

    fn config(&self, words: &[String]) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        commands::config::run_config(words, &self.settings.config_path, &mut out)
            .map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .map(String::from)
            .collect())
    }

    fn save(&mut self, id: Option<String>) -> Result<Vec<String>, String> {
        let id = id
            .or_else(|| self.session_id.clone())
            .unwrap_or_else(store::new_id);
        crate::util::names::check_name("session id", &id)?;
        let session = snapshot(self.agent).ok_or("the agent did not answer")?;
        let mut saved = store::SavedSession::new(&id, session);
        saved.provider = Some(self.provider.name.clone());
        saved.model = self.provider.model.clone();
        let path = self.store.save(&saved).map_err(|e| e.to_string())?;
        self.session_id = Some(id.clone());
        Ok(vec![format!("[Saved as {id} ({})]", path.display())])
    }

    fn load(&mut self, id: &str) -> Result<Vec<String>, String> {
        let saved = self.store.load(id).map_err(|e| e.to_string())?;
        let count = saved.session.messages.len();
        let prompt = self.profile.system_prompt(&self.settings.system_prompt);
        self.agent.send(Op::Restore(saved.into_session(&prompt)));
        self.session_id = Some(id.to_string());
        Ok(vec![format!("[Loaded {id}: {count} messages]")])
    }

    fn sessions(&self) -> Result<Vec<String>, String> {
        let (list, errors) = self.store.list().map_err(|e| e.to_string())?;
        let mut lines: Vec<String> = list
            .iter()
            .map(|s| {
                let when = crate::util::time::strftime(
                    "%Y-%m-%d %H:%M",
                    i64::try_from(s.saved_at).unwrap_or(0),
                );
                format!("{}  {when}  {:>4} msgs  {}", s.id, s.messages, s.title)
            })
            .collect();
        lines.extend(errors.iter().map(|e| format!("error: {e}")));
        if lines.is_empty() {
            lines.push(format!(
                "no saved sessions in {}",
                self.store.dir().display()
            ));
        }
        Ok(lines)
    }

    fn delete_session(&mut self, id: &str) -> Result<Vec<String>, String> {
        self.store.delete(id).map_err(|e| e.to_string())?;
        if self.session_id.as_deref() == Some(id) {
            self.session_id = None;
        }
        Ok(vec![format!("[Deleted {id}]")])
    }

    fn profiles(&self) -> Result<Vec<String>, String> {
        let file = config::load(&self.settings.config_path).map_err(|e| e.to_string())?;
        Ok(profile::all(&file)
            .iter()
            .map(|p| {
                let mark = if p.name == self.profile.name {
                    "*"
                } else {
                    " "
                };
                let tools = if p.tools.is_empty() {
                    "all tools".to_string()
                } else {
                    p.tools.join(",")
                };
                format!("{mark} {} ({tools})", p.name)
            })
            .collect())
    }

    /// Switches profile for this session; `shepherd profile use` makes it the default.
    fn use_profile(&mut self, name: &str) -> Result<Vec<String>, String> {
        let file = config::load(&self.settings.config_path).map_err(|e| e.to_string())?;
        let chosen = profile::find(&file, name).map_err(|e| e.to_string())?;
        let op = Op::ApplyProfile {
            system_prompt: chosen.system_prompt(&self.settings.system_prompt),
            tools: chosen.tools.clone(),
        };
        if !self.agent.send(op) {
            return Err("the agent has stopped".into());
        }
        self.profile = chosen;
        Ok(vec![format!("[Profile {name}]")])
    }

    /// `provider | model`, the left of the TUI's status bar.
    pub fn status_left(&self) -> String {
        format!(
            "{} | {}",
            self.provider.name,
            self.provider.model.as_deref().unwrap_or("?")
        )
    }
}

/// Runs `/image`: attach, list or clear; every outcome is a line to show.
fn image(attachments: &mut Attachments, command: ImageCommand) -> Vec<String> {
    match command {
        ImageCommand::List => attachments.list(),
        ImageCommand::Clear => {
            let dropped = attachments.clear();
            vec![format!(
                "[{dropped} attachment{} dropped]",
                if dropped == 1 { "" } else { "s" }
            )]
        }
        ImageCommand::Attach(source) => match attachments.attach(&source) {
            Ok(line) => vec![line],
            Err(error) => vec![format!("error: {error}")],
        },
    }
}

/// A copy of the agent's session, once the queued operations before it ran.
pub fn snapshot(agent: &AgentHandle) -> Option<Session> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    agent.send(Op::Snapshot(tx));
    rx.recv_timeout(AGENT_REPLY_TIMEOUT).ok()
}

/// The `--continue` session id for a working directory: one per directory.
pub fn continue_id(cwd: &Path) -> String {
    format!("last-{:016x}", fnv1a(cwd.as_os_str().as_encoded_bytes()))
}

/// Where builds before the session store kept the `--continue` file (read
/// once as a fallback, never written).
pub fn legacy_continue_path(cwd: &Path) -> PathBuf {
    crate::util::dirs::state_dir()
        .join("sessions")
        .join(format!("{}.json", continue_id(cwd)))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &str, expected: Option<Result<Command, String>>) {
        assert_eq!(parse(line), expected, "parsing {line:?}");
    }

    #[test]
    fn commands_parse() {
        use Command::*;
        check("/help", Some(Ok(Help)));
        check(" /clear ", Some(Ok(Clear)));
        check("/provider", Some(Ok(ProviderList)));
        check("/provider list", Some(Ok(ProviderList)));
        check("/provider next", Some(Ok(ProviderNext)));
        check("/provider use local", Some(Ok(ProviderUse("local".into()))));
        check("/model", Some(Ok(Model(None))));
        check("/model list", Some(Ok(ModelList)));
        check("/model gpt-4o", Some(Ok(Model(Some("gpt-4o".into())))));
        check(
            "/tools disable web*",
            Some(Ok(Tools(ToolsChange::Disable("web*".into())))),
        );
        check(
            "/tools enable bash",
            Some(Ok(Tools(ToolsChange::Enable("bash".into())))),
        );
        check("/config", Some(Ok(Config(vec![]))));
        check(
            "/config stats true",
            Some(Ok(Config(vec!["stats".into(), "true".into()]))),
        );
        check("/save", Some(Ok(Save(None))));
        check("/load mine", Some(Ok(Load("mine".into()))));
        check("/sessions", Some(Ok(Sessions)));
        check("/sessions delete x", Some(Ok(DeleteSession("x".into()))));
        check("/profile", Some(Ok(Profiles)));
        check("/profile list", Some(Ok(Profiles)));
        check("/profile use ro", Some(Ok(UseProfile("ro".into()))));
        check("/quit", Some(Ok(Quit)));
        check("exit", Some(Ok(Quit)));
        check("quit", Some(Ok(Quit)));
    }

    #[test]
    fn prompts_and_bad_commands() {
        check("hello /help", None);
        check("exit now", None);
        assert!(matches!(parse("/bogus"), Some(Err(m)) if m.contains("/bogus")));
        assert!(matches!(parse("/provider use"), Some(Err(_))));
        assert!(matches!(parse("/"), Some(Err(_))));
    }

    #[test]
    fn image_commands_parse() {
        let attach = |path: &str| Some(Ok(Command::Image(ImageCommand::Attach(path.into()))));
        check("/image", Some(Ok(Command::Image(ImageCommand::List))));
        check(" /image  ", Some(Ok(Command::Image(ImageCommand::List))));
        check(
            "/image clear",
            Some(Ok(Command::Image(ImageCommand::Clear))),
        );
        check("/image cat.png", attach("cat.png"));
        check("/image  my pics/a b.png ", attach("my pics/a b.png"));
        check("/image 'my pics/a b.png'", attach("my pics/a b.png"));
        check("/image \"a b.png\"", attach("a b.png"));
        check("/image a\\ b.png", attach("a b.png"));
        check("/image ./clear", attach("./clear"));
        check(
            "/image https://example.com/x.png",
            attach("https://example.com/x.png"),
        );
        assert!(matches!(parse("/images"), Some(Err(m)) if m.contains("/images")));
        check("look at /image x", None);
    }

    #[test]
    fn every_command_name_is_known_and_in_the_help() {
        for name in NAMES {
            // Alone, or with the one argument it needs (`/load ID`).
            let known = [name.to_string(), format!("{name} x")]
                .iter()
                .any(|line| matches!(parse(line), Some(Ok(_))));
            assert!(known, "{name} does not parse");
            assert!(
                HELP.contains(&format!("  {name}")),
                "{name} missing from /help"
            );
        }
    }

    #[test]
    fn image_attaches_lists_and_clears() {
        let dir = crate::util::fs::test_support::TempDir::new("slash-image");
        let path = dir.0.join("a.png");
        std::fs::write(&path, crate::core::image::test_png(4, 3, [7, 14, 21])).unwrap();
        let path = path.to_string_lossy().into_owned();
        let mut pending = Attachments::default();
        let shown = image(&mut pending, ImageCommand::Attach(path.clone()));
        assert_eq!(shown, vec![format!("attached: {path} (4x3, image/png)")]);
        let listed = image(&mut pending, ImageCommand::List);
        assert_eq!(listed, vec![format!("1. {path} (4x3, image/png)")]);
        let missing = image(
            &mut pending,
            ImageCommand::Attach("/nonexistent/b.png".into()),
        );
        assert!(
            missing[0].starts_with("error: cannot read the image"),
            "{missing:?}"
        );
        assert_eq!(
            image(&mut pending, ImageCommand::Clear),
            vec!["[1 attachment dropped]"]
        );
        assert!(image(&mut pending, ImageCommand::List)[0].starts_with("no images attached"));
        assert_eq!(
            image(&mut pending, ImageCommand::Clear),
            vec!["[0 attachments dropped]"]
        );
    }

    #[test]
    fn continue_id_differs_per_directory_and_is_a_valid_id() {
        let a = continue_id(Path::new("/work/a"));
        let b = continue_id(Path::new("/work/b"));
        assert_ne!(a, b);
        assert_eq!(a, continue_id(Path::new("/work/a")));
        assert!(crate::util::names::check_name("session id", &a).is_ok());
        assert!(legacy_continue_path(Path::new("/work/a")).ends_with(format!("sessions/{a}.json")));
    }
}

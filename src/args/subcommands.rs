//! The subcommand table: every `shepherd COMMAND ACTION` with its usage lines,
//! summary and own options, and the help text generated from it.
//!
//! [`COMMANDS`] is the one source for the top-level `--help`'s command list,
//! each command's and action's `--help`, the usage lines the handlers in
//! `commands` print with their errors, the shell completions and the man page
//! (`args::complete`). The handlers still parse their own words; a test there
//! keeps each handler and its row in step.
//!
//! Adding a command is one row here (plus its `Subcommand` variant and its
//! handler): [`help_request`] then answers `--help`/`-h` for it and its actions
//! with no further code.

use super::Subcommand;

/// What a word can be completed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// Free text: nothing to offer.
    Any,
    /// A file or directory path.
    File,
    /// One of a fixed list.
    Choices(&'static [&'static str]),
    /// Names read from config.json at completion time (`shepherd completions names KIND`).
    Names(NameKind),
}

/// The lists of configured names the completion scripts ask the binary for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    Providers,
    Profiles,
    McpServers,
    ConfigKeys,
    ProviderFields,
}

impl NameKind {
    pub const ALL: [NameKind; 5] = [
        NameKind::Providers,
        NameKind::Profiles,
        NameKind::McpServers,
        NameKind::ConfigKeys,
        NameKind::ProviderFields,
    ];

    /// The word `shepherd completions names KIND` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            NameKind::Providers => "providers",
            NameKind::Profiles => "profiles",
            NameKind::McpServers => "mcp-servers",
            NameKind::ConfigKeys => "config-keys",
            NameKind::ProviderFields => "provider-fields",
        }
    }

    pub fn parse(word: &str) -> Option<NameKind> {
        NameKind::ALL.into_iter().find(|k| k.as_str() == word)
    }
}

/// Which word orders an action accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `ACTION OPERANDS...` only.
    ActionFirst,
    /// `ACTION NAME` or `NAME ACTION`.
    Either,
    /// `NAME ACTION OPERANDS...` only; the operands follow the action word.
    NameFirst,
}

/// An option of one action (`provider add --type TYPE`).
#[derive(Debug, Clone, Copy)]
pub struct ActionFlag {
    pub long: &'static str,
    pub short: Option<char>,
    /// The value's name in help, `None` for a switch.
    pub value: Option<&'static str>,
    pub values: Values,
    pub help: &'static str,
}

/// One action of a command (`provider add`).
#[derive(Debug, Clone, Copy)]
pub struct Action {
    pub name: &'static str,
    /// Usage lines, each after `shepherd COMMAND `.
    pub usage: &'static [&'static str],
    pub summary: &'static str,
    pub form: Form,
    /// What the positional words after the action word are, in order.
    pub operands: &'static [Values],
    pub flags: &'static [ActionFlag],
    /// The words after the operands are another program's command line
    /// (`mcp add NAME CMD ARGS...`): its `--help` is not ours.
    pub runs_command: bool,
    /// Left out of help and completions (machine-facing).
    pub hidden: bool,
}

/// One subcommand (`provider`) and its actions.
#[derive(Debug, Clone, Copy)]
pub struct Command {
    pub name: &'static str,
    pub summary: &'static str,
    /// What the word right after the command names besides an action (`provider NAME show`).
    pub operand: Values,
    pub actions: &'static [Action],
    /// A line after the action list, about other spellings.
    pub note: &'static str,
    pub hidden: bool,
}

const fn action(
    name: &'static str,
    usage: &'static [&'static str],
    form: Form,
    operands: &'static [Values],
    summary: &'static str,
) -> Action {
    Action {
        name,
        usage,
        summary,
        form,
        operands,
        flags: &[],
        runs_command: false,
        hidden: false,
    }
}

const fn with_flags(base: Action, flags: &'static [ActionFlag]) -> Action {
    Action { flags, ..base }
}

const fn opt(
    long: &'static str,
    value: &'static str,
    values: Values,
    help: &'static str,
) -> ActionFlag {
    ActionFlag {
        long,
        short: None,
        value: Some(value),
        values,
        help,
    }
}

use Form::{ActionFirst, Either, NameFirst};
use NameKind as N;
use Values::{Any, Names};

const PROVIDER: Values = Names(N::Providers);
const PROFILE: Values = Names(N::Profiles);
const MCP_SERVER: Values = Names(N::McpServers);
const CONFIG_KEY: Values = Names(N::ConfigKeys);

#[rustfmt::skip]
const PROVIDER_ADD_FLAGS: &[ActionFlag] = &[
    opt("type", "TYPE", Values::Choices(&super::BACKEND_NAMES), "Backend type (default openai)"),
    opt("model", "MODEL", Any, "Model name"),
    opt("api-key", "KEY", Any, "API key (argv is visible in ps; prefer *_API_KEY)"),
    opt("base-url", "URL", Any, "Base URL of the API"),
    opt("api-base", "URL", Any, "Same as --base-url"),
    opt("priority", "N", Any, "1 or more; lower is tried first (default 100)"),
    opt("context-size", "N", Any, "Context window in tokens"),
    opt("model-path", "PATH", Values::File, "GGUF model file (llamacpp)"),
];

#[rustfmt::skip]
const PROVIDER_ACTIONS: &[Action] = &[
    action("list", &["[list]"], ActionFirst, &[], "List the providers; * marks the one tried first (the default action)"),
    with_flags(action("add", &["add NAME [--type TYPE] [--model M] [--api-key K] [--base-url URL]", "    [--priority N] [--context-size N] [--model-path PATH]"], ActionFirst, &[Any], "Add a provider"), PROVIDER_ADD_FLAGS),
    action("show", &["show NAME"], Either, &[PROVIDER], "Show a provider's settings (the API key masked)"),
    action("use", &["use NAME"], Either, &[PROVIDER], "Make NAME the preferred provider"),
    action("remove", &["remove NAME"], Either, &[PROVIDER], "Remove a provider"),
    action("set", &["NAME set FIELD VALUE"], NameFirst, &[Names(N::ProviderFields), Any], "Change one field; an empty VALUE clears it"),
];

#[rustfmt::skip]
const MCP_ADD_FLAGS: &[ActionFlag] = &[
    ActionFlag { long: "env", short: Some('e'), value: Some("K=V"), values: Any, help: "Environment for the server (repeatable; also after the command)" },
    opt("startup-timeout", "S", Any, "Seconds the server may take to start"),
    opt("call-timeout", "S", Any, "Seconds one tool call may take"),
    opt("url", "URL", Any, "An HTTP server instead of a command"),
    opt("header", "K=V", Any, "An HTTP header for --url (repeatable)"),
    opt("bearer-token", "T", Any, "Bearer token for --url (prefer ${VAR})"),
];

#[rustfmt::skip]
const MCP_ACTIONS: &[Action] = &[
    action("list", &["[list]"], ActionFirst, &[], "List the MCP servers (the default action)"),
    Action { runs_command: true, ..with_flags(action("add", &["add NAME [-e K=V]... [--startup-timeout S] [--call-timeout S] CMD [ARGS...] [-e K=V]...", "add NAME --url URL [--header K=V]... [--bearer-token T]"], ActionFirst, &[Any, Values::File], "Add (or replace) an MCP server run as a command or reached by URL"), MCP_ADD_FLAGS) },
    action("show", &["show NAME"], Either, &[MCP_SERVER], "Show a server's settings (secrets masked)"),
    action("test", &["test NAME"], Either, &[MCP_SERVER], "Connect to a server and list its tools"),
    action("enable", &["enable NAME"], Either, &[MCP_SERVER], "Start the server with every chat again"),
    action("disable", &["disable NAME"], Either, &[MCP_SERVER], "Keep the server but do not start it"),
    action("remove", &["remove NAME"], Either, &[MCP_SERVER], "Remove a server"),
];

#[rustfmt::skip]
const PROFILE_FLAGS: &[ActionFlag] = &[
    opt("tools", "GLOB[,GLOB]", Any, "The tools the profile offers (empty: all)"),
    opt("mcp", "SERVER[,SERVER]", MCP_SERVER, "The MCP servers the profile starts"),
    opt("guidelines", "TEXT", Any, "Guidelines added to the system prompt"),
];

#[rustfmt::skip]
const PROFILE_ACTIONS: &[Action] = &[
    action("list", &["[list]"], ActionFirst, &[], "List the profiles; * marks the one used by default (the default action)"),
    with_flags(action("add", &["add NAME [--tools GLOB[,GLOB]] [--mcp SERVER[,SERVER]] [--guidelines TEXT]"], ActionFirst, &[Any], "Add a profile"), PROFILE_FLAGS),
    with_flags(action("edit", &["edit NAME [--tools ...] [--mcp ...] [--guidelines TEXT]   (an empty value clears)"], ActionFirst, &[PROFILE], "Change a profile"), PROFILE_FLAGS),
    action("show", &["show NAME"], Either, &[PROFILE], "Show a profile"),
    action("use", &["use NAME"], Either, &[PROFILE], "Use NAME by default"),
    action("remove", &["remove NAME"], Either, &[PROFILE], "Remove a profile"),
];

#[rustfmt::skip]
const CONFIG_ACTIONS: &[Action] = &[
    action("show", &["[show] [KEY]"], ActionFirst, &[CONFIG_KEY], "List every setting, or show KEY (the default action)"),
    action("set", &["[set] KEY VALUE"], ActionFirst, &[CONFIG_KEY, Any], "Change a setting; an empty VALUE restores the default"),
];

#[rustfmt::skip]
const PS_ACTIONS: &[Action] = &[
    action("list", &["[list]"], ActionFirst, &[], "List this user's running shepherd servers: kind, address, pid (the default action)"),
];

#[rustfmt::skip]
const PULL_ACTIONS: &[Action] = &[
    action("pull", &["URL|FILE [--sha256 HEX] [--name NAME.gguf] [--max-size SIZE]"], ActionFirst, &[], "Fetch (or copy) a GGUF model into models_dir: resumable, checked whole and against --sha256, named by the URL's last segment or --name; --max-size (bytes, or K/M/G/T, KiB/MiB/GiB/TiB) caps a download whose server announces no length (default 512GiB)"),
];

#[rustfmt::skip]
const COMPLETIONS_ACTIONS: &[Action] = &[
    action("bash", &["bash"], ActionFirst, &[], "Print the bash completion script"),
    action("zsh", &["zsh"], ActionFirst, &[], "Print the zsh completion script"),
    action("fish", &["fish"], ActionFirst, &[], "Print the fish completion script"),
    Action { hidden: true, ..action("names", &["names KIND"], ActionFirst, &[], "Print configured names, one a line (used by the scripts)") },
];

#[rustfmt::skip]
const MODELS_ACTIONS: &[Action] = &[
    action("list", &["[list]"], ActionFirst, &[], "List the GGUF files in models_dir and the model cache: size, architecture, parameters, quantisation, context, template, the vision projector beside each; projectors listed apart (the default action)"),
];

#[rustfmt::skip]
const SESSIONS_EXPORT_FLAGS: &[ActionFlag] = &[
    opt("format", "FORMAT", Values::Choices(&["md", "json"]), "Markdown (the default) or JSON"),
];

#[rustfmt::skip]
const SESSIONS_ACTIONS: &[Action] = &[
    action("list", &["[list]"], ActionFirst, &[], "List the saved sessions, newest first (the default action)"),
    action("show", &["show ID"], ActionFirst, &[Any], "Show a session's conversation"),
    action("delete", &["delete ID"], ActionFirst, &[Any], "Delete a session"),
    with_flags(action("export", &["export ID [--format md|json]"], ActionFirst, &[Any], "Write a session to stdout as Markdown or JSON"), SESSIONS_EXPORT_FLAGS),
];

#[rustfmt::skip]
const BENCH_FLAGS: &[ActionFlag] = &[
    ActionFlag { long: "n-prompt", short: Some('p'), value: Some("N"), values: Values::Any, help: "Prompt tokens decoded as one prompt (default 512; 0 skips the test)" },
    ActionFlag { long: "n-gen", short: Some('n'), value: Some("N"), values: Values::Any, help: "Tokens generated one at a time (default 128; 0 skips the test)" },
    ActionFlag { long: "n-depth", short: Some('d'), value: Some("N"), values: Values::Any, help: "Tokens already in the cache before each test, not timed (default 0)" },
    ActionFlag { long: "repetitions", short: Some('r'), value: Some("N"), values: Values::Any, help: "Timed runs of each test after one warm-up (default 5)" },
    ActionFlag { long: "output", short: Some('o'), value: Some("FORMAT"), values: Values::Choices(&["md", "jsonl"]), help: "A Markdown table (the default) or one JSON object a test, llama-bench's fields" },
];

#[rustfmt::skip]
const BENCH_ACTIONS: &[Action] = &[
    with_flags(action("run", &["[run] [-p N] [-n N] [-d N] [-r N] [-o md|jsonl]"], ActionFirst, &[], "Run the tests (the default action)"), BENCH_FLAGS),
];

/// Every subcommand, in the order `--help` lists them.
#[rustfmt::skip]
pub const COMMANDS: &[Command] = &[
    Command { name: "provider", summary: "Manage providers (APIs and local models)", operand: PROVIDER, actions: PROVIDER_ACTIONS, note: "NAME show|use|remove works as well as show|use|remove NAME.", hidden: false },
    Command { name: "config", summary: "Show or change settings", operand: CONFIG_KEY, actions: CONFIG_ACTIONS, note: "The action word is optional: 'shepherd config KEY VALUE' sets KEY.", hidden: false },
    Command { name: "profile", summary: "Manage profiles (tools, MCP servers, guidelines)", operand: PROFILE, actions: PROFILE_ACTIONS, note: "NAME show|use|remove works as well as show|use|remove NAME.", hidden: false },
    Command { name: "mcp", summary: "Manage MCP servers", operand: MCP_SERVER, actions: MCP_ACTIONS, note: "NAME show|test|enable|disable|remove works as well as ACTION NAME.", hidden: false },
    Command { name: "models", summary: "List the local GGUF models (-m NAME runs one by name or prefix)", operand: Any, actions: MODELS_ACTIONS, note: "", hidden: false },
    Command { name: "sessions", summary: "List, show, delete and export saved sessions (/save, --continue)", operand: Any, actions: SESSIONS_ACTIONS, note: "", hidden: false },
    Command { name: "ps", summary: "List this user's running shepherd servers (from their token files)", operand: Any, actions: PS_ACTIONS, note: "", hidden: false },
    Command { name: "pull", summary: "Fetch a GGUF model into models_dir (resumable, sha256-checked)", operand: Any, actions: PULL_ACTIONS, note: "", hidden: false },
    Command { name: "completions", summary: "Print a shell completion script (bash, zsh, fish)", operand: Any, actions: COMPLETIONS_ACTIONS, note: "", hidden: false },
    Command { name: "bench", summary: "Measure the local model as llama-bench does: prompt and generation tokens/s", operand: Any, actions: BENCH_ACTIONS, note: "Model and placement come from the usual flags before 'bench': -m FILE --gpu-layers N --flash-attn on|off --threads N.", hidden: false },
    Command { name: "man", summary: "Print the man page (roff)", operand: Any, actions: &[], note: "", hidden: true },
];

/// The row for `name`.
pub fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name == name)
}

impl Command {
    pub fn action(&self, name: &str) -> Option<&'static Action> {
        self.actions.iter().find(|a| a.name == name)
    }

    /// The actions shown in help and completions.
    pub fn visible_actions(&self) -> impl Iterator<Item = &'static Action> {
        self.actions.iter().filter(|a| !a.hidden)
    }
}

impl Action {
    fn flag(&self, word: &str) -> Option<&'static ActionFlag> {
        let flags: &'static [ActionFlag] = self.flags;
        if let Some(long) = word.strip_prefix("--") {
            return flags.iter().find(|f| f.long == long);
        }
        let mut chars = word.strip_prefix('-')?.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => flags.iter().find(|f| f.short == Some(c)),
            _ => None,
        }
    }
}

/// The command names the parser accepts, for its error message.
pub fn command_names() -> String {
    let names: Vec<String> = COMMANDS
        .iter()
        .filter(|c| !c.hidden)
        .map(|c| format!("'{}'", c.name))
        .collect();
    names.join(", ")
}

/// What a `--help` asked about.
#[derive(Debug, Clone, Copy)]
pub struct HelpTopic {
    pub command: &'static Command,
    pub action: Option<&'static Action>,
}

/// The help a command line asks for, if it asks: `--help`/`-h` anywhere in the
/// subcommand's words (not as an option's value, not after `--`, not inside the
/// command line `mcp add` runs), a first word `help`, or a top-level `--help`
/// before the subcommand (`top_help`).
pub fn help_request(sub: &Subcommand, top_help: bool) -> Option<HelpTopic> {
    let command = find(sub.name())?;
    let words = sub.words();
    let (action, asked) = match words.first().map(String::as_str) {
        Some("help") => (words.get(1).and_then(|w| command.action(w)), true),
        _ => {
            let action = words.iter().take(2).find_map(|w| command.action(w));
            (action, scan_for_help(words, action))
        }
    };
    (asked || top_help).then_some(HelpTopic { command, action })
}

/// Whether `--help` or `-h` stands as a word of its own among `words`.
fn scan_for_help(words: &[String], action: Option<&Action>) -> bool {
    let mut positionals = 0;
    let mut iter = words.iter();
    while let Some(word) = iter.next() {
        match word.as_str() {
            "--help" | "-h" => return true,
            "--" => return false,
            w if w.starts_with('-') && !w.contains('=') => {
                // An option of the action that takes a value takes the next word, whatever it is.
                if action
                    .and_then(|a| a.flag(w))
                    .is_some_and(|f| f.value.is_some())
                {
                    iter.next();
                }
            }
            w if w.starts_with('-') => {}
            _ => {
                positionals += 1;
                // `mcp add NAME CMD`: from CMD on, the words are the server's.
                if action.is_some_and(|a| a.runs_command) && positionals > 2 {
                    return false;
                }
            }
        }
    }
    false
}

/// The usage lines of a command: `Usage: shepherd provider [list]` and one per action form.
pub fn usage(name: &str) -> String {
    let Some(command) = find(name) else {
        return String::new();
    };
    let lines: Vec<&str> = command
        .visible_actions()
        .flat_map(|a| a.usage.iter().copied())
        .collect();
    usage_lines(command.name, &lines, "")
}

fn usage_lines(command: &str, lines: &[&str], empty: &str) -> String {
    let mut out = String::new();
    if lines.is_empty() {
        return format!("Usage: shepherd {command}{empty}");
    }
    for (i, line) in lines.iter().enumerate() {
        let lead = if i == 0 { "Usage:" } else { "      " };
        // A line that starts with spaces continues the one before it.
        match line.strip_prefix("    ") {
            Some(rest) => out.push_str(&format!(
                "{lead} {:width$}{rest}",
                "",
                width = command.len() + 14
            )),
            None => out.push_str(&format!("{lead} shepherd {command} {line}")),
        }
        if i + 1 < lines.len() {
            out.push('\n');
        }
    }
    out
}

/// The text `shepherd COMMAND [ACTION] --help` prints.
pub fn help_text(topic: HelpTopic) -> String {
    match topic.action {
        Some(action) => action_help(topic.command, action),
        None => command_help(topic.command),
    }
}

fn command_help(command: &Command) -> String {
    let mut out = format!("{}\n\n{}.\n", usage(command.name), command.summary);
    let actions: Vec<&Action> = command.visible_actions().collect();
    if !actions.is_empty() {
        out.push_str("\nActions:\n");
        let width = actions.iter().map(|a| a.name.len()).max().unwrap_or(0);
        for a in &actions {
            out.push_str(&format!("  {:width$}  {}\n", a.name, a.summary));
        }
    }
    if !command.note.is_empty() {
        out.push_str(&format!("\n{}\n", command.note));
    }
    if !actions.is_empty() {
        out.push_str(&format!(
            "\nRun 'shepherd {} ACTION --help' for an action's own usage.\n",
            command.name
        ));
    }
    out
}

fn action_help(command: &Command, action: &Action) -> String {
    let mut out = format!(
        "{}\n\n{}.\n",
        usage_lines(command.name, action.usage, ""),
        action.summary
    );
    if !action.flags.is_empty() {
        out.push_str("\nOptions:\n");
        let labels: Vec<String> = action.flags.iter().map(action_flag_label).collect();
        let width = labels.iter().map(String::len).max().unwrap_or(0);
        for (label, f) in labels.iter().zip(action.flags) {
            out.push_str(&format!("  {label:width$}  {}\n", f.help));
        }
    }
    out
}

/// `-e, --env K=V` as shown in an action's help.
pub fn action_flag_label(f: &ActionFlag) -> String {
    let short = f.short.map(|c| format!("-{c}, ")).unwrap_or_default();
    let value = f.value.map(|v| format!(" {v}")).unwrap_or_default();
    format!("{short}--{}{value}", f.long)
}

/// The `Commands:` part of the top-level `--help`.
pub fn commands_help() -> String {
    let visible: Vec<&Command> = COMMANDS.iter().filter(|c| !c.hidden).collect();
    let width = visible.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut out = String::from("Commands (each answers --help):\n");
    for c in visible {
        out.push_str(&format!("  {:width$}  {}\n", c.name, c.summary));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(words: &[&str]) -> Option<(&'static str, Option<&'static str>)> {
        let low = crate::args::parse(words).expect("parses");
        let sub = low.subcommand.expect("a subcommand");
        help_request(&sub, low.help).map(|t| (t.command.name, t.action.map(|a| a.name)))
    }

    #[test]
    fn help_anywhere_in_the_words_names_the_action() {
        assert_eq!(topic(&["provider", "--help"]), Some(("provider", None)));
        assert_eq!(topic(&["provider", "-h"]), Some(("provider", None)));
        assert_eq!(
            topic(&["provider", "add", "--help"]),
            Some(("provider", Some("add")))
        );
        assert_eq!(
            topic(&["provider", "add", "x", "--type", "ollama", "-h"]),
            Some(("provider", Some("add")))
        );
        assert_eq!(
            topic(&["provider", "x", "set", "-h"]),
            Some(("provider", Some("set")))
        );
        assert_eq!(
            topic(&["provider", "help", "add"]),
            Some(("provider", Some("add")))
        );
        assert_eq!(topic(&["--help", "mcp"]), Some(("mcp", None)));
        assert_eq!(
            topic(&["config", "set", "--help"]),
            Some(("config", Some("set")))
        );
    }

    #[test]
    fn help_as_a_value_or_inside_a_server_command_is_not_help() {
        assert_eq!(topic(&["provider", "add", "x", "--model", "-h"]), None);
        assert_eq!(topic(&["provider", "add", "x", "--model=-h"]), None);
        assert_eq!(
            topic(&["mcp", "add", "fs", "npx", "server", "--help"]),
            None
        );
        assert_eq!(topic(&["mcp", "add", "fs", "-e", "-h", "npx"]), None);
        assert_eq!(topic(&["mcp", "add", "fs", "--", "npx", "-h"]), None);
        assert_eq!(topic(&["provider", "list"]), None);
    }

    #[test]
    fn every_action_has_usage_naming_it() {
        for c in COMMANDS {
            assert!(
                c.summary.len() > 5 && !c.summary.ends_with('.'),
                "{}",
                c.name
            );
            for a in c.actions {
                let help = help_text(HelpTopic {
                    command: c,
                    action: Some(a),
                });
                assert!(
                    help.starts_with(&format!("Usage: shepherd {} ", c.name)),
                    "{help}"
                );
                assert!(help.contains(a.name), "{help}");
            }
        }
    }

    #[test]
    fn the_parser_knows_every_command() {
        for c in COMMANDS {
            let low = crate::args::parse([c.name]).expect("a command parses");
            assert_eq!(low.subcommand.map(|s| s.name()), Some(c.name));
        }
    }
}

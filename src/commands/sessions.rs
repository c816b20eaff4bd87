//! `shepherd sessions list|show ID|delete ID|export ID [--format md|json]`:
//! the saved conversations of the session store ([`crate::store`]), the same
//! files `/save`, `/load` and `--continue` use.
//!
//! Ids are checked by the store ([`crate::util::names::check_name`]) before
//! they become file names. Text from a session is untrusted (model output,
//! tool results): the listing's previews always go through the caller's
//! [`Visible`] (the front-end's terminal sanitizer), and `show` and the
//! Markdown export do too when [`Output::terminal`] says stdout is one; the
//! JSON export is the file's content, exact.

use super::{CommandError, Output};
use crate::core::{Message, Role};
use crate::store::{SavedSession, Store, StoreError};

impl From<StoreError> for CommandError {
    fn from(error: StoreError) -> CommandError {
        match error {
            StoreError::InvalidId(message) => CommandError::Usage(message),
            other => CommandError::Failed(other.to_string()),
        }
    }
}

/// Runs `shepherd sessions ARGS...` over `store`.
pub fn run(args: &[String], store: &Store, out: &mut Output<'_>) -> Result<(), CommandError> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        [] | ["list"] => list(store, out),
        ["help"] | ["-h"] | ["--help"] => {
            Ok(write!(out.out, "{}", super::command_help("sessions"))?)
        }
        ["show", id] => show(&store.load(id)?, out),
        ["delete", id] | ["rm", id] => {
            store.delete(id)?;
            Ok(writeln!(out.out, "deleted session '{id}'")?)
        }
        ["export", id, rest @ ..] => {
            let format = export_format(rest)?;
            export(&store.load(id)?, format, out)
        }
        _ => Err(CommandError::Usage(format!(
            "unknown sessions command\n{}",
            crate::args::subcommands::usage("sessions")
        ))),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Markdown,
    Json,
}

/// `[--format md|json]`, also as `--format=json`.
fn export_format(rest: &[&str]) -> Result<Format, CommandError> {
    let value = match rest {
        [] => return Ok(Format::Markdown),
        ["--format", value] => *value,
        [one] => one.strip_prefix("--format=").unwrap_or(one),
        _ => "",
    };
    match value {
        "md" | "markdown" => Ok(Format::Markdown),
        "json" => Ok(Format::Json),
        _ => Err(CommandError::Usage(format!(
            "expected --format md|json\n{}",
            crate::args::subcommands::usage("sessions")
        ))),
    }
}

fn when(saved_at: u64) -> String {
    let unix = i64::try_from(saved_at).unwrap_or(0);
    crate::util::time::strftime("%Y-%m-%d %H:%M", unix)
}

fn list(store: &Store, out: &mut Output<'_>) -> Result<(), CommandError> {
    let (summaries, errors) = store.list()?;
    if summaries.is_empty() && errors.is_empty() {
        writeln!(out.out, "no saved sessions in {}", store.dir().display())?;
        return Ok(());
    }
    let width = summaries
        .iter()
        .map(|s| s.id.len())
        .max()
        .unwrap_or(2)
        .max(2);
    if !summaries.is_empty() {
        writeln!(
            out.out,
            "{:width$}  MODIFIED (UTC)    MSGS  FIRST MESSAGE",
            "ID"
        )?;
    }
    for s in &summaries {
        let title = (out.visible)(&s.title);
        let when = when(s.saved_at);
        writeln!(
            out.out,
            "{:width$}  {when}  {:>4}  {title}",
            s.id, s.messages
        )?;
    }
    for error in errors {
        writeln!(out.out, "error: {}", (out.visible)(&error.to_string()))?;
    }
    Ok(())
}

fn show(saved: &SavedSession, out: &mut Output<'_>) -> Result<(), CommandError> {
    let mut text = format!(
        "session {} (saved {} UTC, {} messages{})\n",
        saved.id,
        when(saved.saved_at),
        saved.session.messages.len(),
        origin(saved)
    );
    if !saved.session.system_prompt.is_empty() {
        text.push_str(&format!("\n[system]\n{}\n", saved.session.system_prompt));
    }
    for message in &saved.session.messages {
        text.push_str(&show_message(message));
    }
    out.write_text(&text)
}

/// `, provider P, model M` for what is recorded.
fn origin(saved: &SavedSession) -> String {
    let mut text = String::new();
    if let Some(provider) = &saved.provider {
        text.push_str(&format!(", provider {provider}"));
    }
    if let Some(model) = &saved.model {
        text.push_str(&format!(", model {model}"));
    }
    text
}

fn show_message(message: &Message) -> String {
    let label = match (message.role, &message.tool_name) {
        (Role::Tool, Some(name)) => format!("tool {name}"),
        (role, _) => role.as_str().to_string(),
    };
    let mut text = format!("\n[{label}]\n");
    if let Some(thinking) = message.thinking.as_deref().filter(|t| !t.is_empty()) {
        text.push_str(&format!("(thinking) {thinking}\n"));
    }
    let content = shown_content(message);
    if !content.is_empty() {
        text.push_str(&format!("{content}\n"));
    }
    for call in &message.tool_calls {
        text.push_str(&format!("-> {} {}\n", call.name, call.arguments));
    }
    text
}

/// The text of a message with each image's summary where it stood.
fn shown_content(message: &Message) -> String {
    crate::core::image::inline_summaries(&message.content, &message.images)
}

fn export(saved: &SavedSession, format: Format, out: &mut Output<'_>) -> Result<(), CommandError> {
    match format {
        Format::Json => {
            let json = serde_json::to_string_pretty(saved)
                .map_err(|e| CommandError::Failed(e.to_string()))?;
            Ok(writeln!(out.out, "{json}")?)
        }
        Format::Markdown => out.write_text(&markdown(saved)),
    }
}

/// The conversation as Markdown: a heading per message, tool calls and
/// results in code blocks fenced longer than any backtick run they hold.
fn markdown(saved: &SavedSession) -> String {
    let mut md = format!(
        "# Session {}\n\nSaved {} UTC, {} messages{}.\n",
        saved.id,
        when(saved.saved_at),
        saved.session.messages.len(),
        origin(saved)
    );
    if !saved.session.system_prompt.is_empty() {
        md.push_str(&format!("\n## System\n\n{}\n", saved.session.system_prompt));
    }
    for message in &saved.session.messages {
        md.push_str(&markdown_message(message));
    }
    md
}

fn markdown_message(message: &Message) -> String {
    let mut md = match (message.role, &message.tool_name) {
        (Role::Tool, name) => format!("\n## Tool result: {}\n\n", name.as_deref().unwrap_or("?")),
        (Role::User, _) => "\n## User\n\n".to_string(),
        (Role::Assistant, _) => "\n## Assistant\n\n".to_string(),
        (Role::System, _) => "\n## System\n\n".to_string(),
    };
    if let Some(thinking) = message.thinking.as_deref().filter(|t| !t.is_empty()) {
        let quoted: Vec<String> = thinking.lines().map(|l| format!("> {l}")).collect();
        md.push_str(&format!("> **Thinking**\n>\n{}\n\n", quoted.join("\n")));
    }
    let content = shown_content(message);
    match message.role {
        Role::Tool => md.push_str(&fenced("", &content)),
        _ if !content.is_empty() => md.push_str(&format!("{content}\n")),
        _ => {}
    }
    for call in &message.tool_calls {
        let args = serde_json::to_string_pretty(&call.arguments).unwrap_or_default();
        md.push_str(&format!("\n**Tool call** `{}`\n\n", call.name));
        md.push_str(&fenced("json", &args));
    }
    md
}

/// `text` in a code block whose fence is longer than any backtick run inside.
fn fenced(lang: &str, text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}{lang}\n{}\n{fence}\n", text.trim_end_matches('\n'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Session, ToolCall};
    use std::borrow::Cow;

    fn shown(text: &str) -> Cow<'_, str> {
        Cow::Owned(text.replace('\x1b', "\\x1b"))
    }

    fn store(tag: &str) -> Store {
        let dir =
            std::env::temp_dir().join(format!("shepherd-sessions-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Store::at(dir)
    }

    fn conversation() -> Session {
        let mut session = Session::new("Be brief.");
        let call = ToolCall {
            id: "c1".into(),
            name: "list_directory".into(),
            arguments: serde_json::json!({"path": "."}),
        };
        session.messages = vec![
            Message::user("What is in\nthe \x1b[2Jdir?"),
            Message {
                tool_calls: vec![call.clone()],
                ..Message::assistant("")
            },
            Message::tool_result(&call, "a.txt\n```b```"),
            Message::assistant("Two files."),
        ];
        session
    }

    /// Runs the command; returns (result, stdout).
    fn run_words(
        store: &Store,
        words: &[&str],
        terminal: bool,
    ) -> (Result<(), CommandError>, String) {
        let args: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        let mut buf = Vec::new();
        let mut out = Output {
            out: &mut buf,
            visible: shown,
            terminal,
        };
        let result = run(&args, store, &mut out);
        (result, String::from_utf8(buf).expect("utf-8"))
    }

    #[test]
    fn list_shows_id_time_count_and_a_clean_preview() {
        let store = store("list");
        let (_, empty) = run_words(&store, &["list"], false);
        assert!(empty.contains("no saved sessions"), "{empty}");
        store.save_session("chat-1", &conversation()).expect("save");
        let (result, text) = run_words(&store, &[], false);
        assert!(result.is_ok());
        let line = text.lines().nth(1).expect("a row");
        assert!(line.starts_with("chat-1  "), "{line}");
        assert!(line.contains("   4  What is in the \\x1b[2Jdir?"), "{line}");
        assert!(
            !text.contains('\x1b'),
            "the preview is sanitized even in a pipe"
        );
        let _ = std::fs::remove_dir_all(store.dir());
    }

    #[test]
    fn show_and_export_render_the_conversation() {
        let store = store("show");
        store.save_session("s", &conversation()).expect("save");
        let (_, shown_text) = run_words(&store, &["show", "s"], true);
        assert!(shown_text.contains("[system]\nBe brief."), "{shown_text}");
        assert!(
            shown_text.contains("-> list_directory {\"path\":\".\"}"),
            "{shown_text}"
        );
        assert!(
            shown_text.contains("[tool list_directory]\na.txt"),
            "{shown_text}"
        );
        assert!(!shown_text.contains('\x1b'), "sanitized on a terminal");
        let (_, piped) = run_words(&store, &["show", "s"], false);
        assert!(piped.contains('\x1b'), "exact text to a pipe");
        let (_, md) = run_words(&store, &["export", "s"], false);
        assert!(md.starts_with("# Session s\n"), "{md}");
        assert!(md.contains("## User\n\nWhat is in"), "{md}");
        assert!(
            md.contains("**Tool call** `list_directory`\n\n```json\n{\n  \"path\": \".\"\n}\n```"),
            "{md}"
        );
        assert!(
            md.contains("## Tool result: list_directory\n\n````\na.txt\n```b```\n````"),
            "{md}"
        );
        assert!(md.contains("## Assistant\n\nTwo files."), "{md}");
        let (_, json) = run_words(&store, &["export", "s", "--format", "json"], false);
        let value: serde_json::Value = serde_json::from_str(&json).expect("JSON");
        assert_eq!(value["id"], "s");
        assert_eq!(
            value["session"]["messages"].as_array().map(Vec::len),
            Some(4)
        );
        let (_, same) = run_words(&store, &["export", "s", "--format=json"], false);
        assert_eq!(same, json);
        let (bad, _) = run_words(&store, &["export", "s", "--format", "html"], false);
        assert_eq!(bad.map_err(|e| e.exit_code()), Err(2));
        let _ = std::fs::remove_dir_all(store.dir());
    }

    #[test]
    fn delete_removes_and_a_missing_or_bad_id_is_a_clear_error() {
        let store = store("delete");
        store.save_session("gone", &conversation()).expect("save");
        let (result, text) = run_words(&store, &["delete", "gone"], false);
        assert!(
            result.is_ok() && text.contains("deleted session 'gone'"),
            "{text}"
        );
        assert!(!store.exists("gone"));
        let missing = run_words(&store, &["delete", "gone"], false).0.unwrap_err();
        assert_eq!(missing.exit_code(), 1);
        assert_eq!(missing.to_string(), "no saved session 'gone'");
        for bad in ["../x", "-rf", ".."] {
            let error = run_words(&store, &["show", bad], false).0.unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad}: {error}");
        }
        let (help, text) = run_words(&store, &["--help"], false);
        assert!(help.is_ok() && text.starts_with("Usage: shepherd sessions"));
        let _ = std::fs::remove_dir_all(store.dir());
    }
}

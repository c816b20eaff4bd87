//! `shepherd mcp ...`: list, add, show, test, enable, disable and remove the
//! MCP servers in config.json.
//!
//! Like `provider`, it takes the words after `mcp`, loads the file, changes
//! it and saves it atomically. `test` connects exactly as a chat would and
//! lists the tools under their `server:tool` names.

use std::io::Write;
use std::path::Path;

use super::{mask_key, CommandError};
use crate::config::mcp::{validate_server, McpServerConfig};
use crate::config::{self, ConfigFile};
use crate::mcp::hub::Server;
use crate::mcp::tool::McpTool;
use crate::tools::Tool;

fn mcp_usage() -> String {
    crate::args::subcommands::usage("mcp")
}

#[derive(Debug, PartialEq, Eq)]
enum Action<'a> {
    List,
    Help,
    Add(&'a str, &'a [String]),
    Show(&'a str),
    Test(&'a str),
    Enable(&'a str, bool),
    Remove(&'a str),
}

fn usage(message: impl Into<String>) -> CommandError {
    CommandError::Usage(message.into())
}

fn action(args: &[String]) -> Result<Action<'_>, CommandError> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    Ok(match words.as_slice() {
        [] | ["list"] => Action::List,
        ["help"] | ["-h"] | ["--help"] => Action::Help,
        ["add", name, _, ..] => Action::Add(name, &args[2..]),
        ["add", ..] => {
            return Err(usage(format!(
                "mcp add needs a name and a command or --url\n{}",
                mcp_usage()
            )))
        }
        ["show", name] | [name, "show"] | [name] => Action::Show(name),
        ["test", name] | [name, "test"] => Action::Test(name),
        ["enable", name] | [name, "enable"] => Action::Enable(name, true),
        ["disable", name] | [name, "disable"] => Action::Enable(name, false),
        ["remove", name] | [name, "remove"] => Action::Remove(name),
        _ => return Err(usage(format!("unknown mcp command\n{}", mcp_usage()))),
    })
}

/// Runs `shepherd mcp ARGS...` against the config file at `path`.
pub fn run(args: &[String], path: &Path, out: &mut dyn Write) -> Result<(), CommandError> {
    let action = action(args)?;
    if action == Action::Help {
        write!(out, "{}", super::command_help("mcp"))?;
        return Ok(());
    }
    let mut file = config::load(path)?;
    match action {
        Action::List => return list(&file, out),
        Action::Show(name) => return show(name, find(&file, name)?, out),
        Action::Test(name) => return test(name, find(&file, name)?, out),
        Action::Add(name, rest) => {
            let server = parse_add(rest)?;
            validate_server(name, &server).map_err(usage)?;
            let verb = if file.mcp_servers.contains_key(name) {
                "replaced"
            } else {
                "added"
            };
            writeln!(out, "{verb} MCP server '{name}': {}", server.target())?;
            file.mcp_servers.insert(name.to_string(), server);
        }
        Action::Enable(name, on) => {
            find(&file, name)?;
            if let Some(server) = file.mcp_servers.get_mut(name) {
                server.enabled = (!on).then_some(false);
            }
            let state = if on { "enabled" } else { "disabled" };
            writeln!(out, "MCP server '{name}' {state}")?;
        }
        Action::Remove(name) => {
            find(&file, name)?;
            file.mcp_servers.remove(name);
            writeln!(out, "removed MCP server '{name}'")?;
        }
        Action::Help => {}
    }
    config::validate(&file).map_err(usage)?;
    config::save(path, &file)?;
    Ok(())
}

fn find<'a>(file: &'a ConfigFile, name: &str) -> Result<&'a McpServerConfig, CommandError> {
    file.mcp_servers.get(name).ok_or_else(|| {
        let known: Vec<&str> = file.mcp_servers.keys().map(String::as_str).collect();
        if known.is_empty() {
            usage(format!("unknown MCP server '{name}'; none are configured"))
        } else {
            usage(format!(
                "unknown MCP server '{name}'; known servers: {}",
                known.join(", ")
            ))
        }
    })
}

fn list(file: &ConfigFile, out: &mut dyn Write) -> Result<(), CommandError> {
    if file.mcp_servers.is_empty() {
        writeln!(
            out,
            "No MCP servers configured. Add one with: shepherd mcp add NAME CMD [ARGS...]"
        )?;
        return Ok(());
    }
    let width = file.mcp_servers.keys().map(String::len).max().unwrap_or(0);
    for (name, server) in &file.mcp_servers {
        let state = if server.is_enabled() {
            ""
        } else {
            " (disabled)"
        };
        writeln!(
            out,
            "{name:width$}  {:5}  {}{state}",
            server.transport_name(),
            server.target()
        )?;
    }
    Ok(())
}

/// A value as shown: `${VAR}` references as written, literal secrets masked.
fn shown(value: &str) -> String {
    if value.starts_with("${") && value.ends_with('}') {
        value.to_string()
    } else {
        mask_key(value)
    }
}

fn show(name: &str, server: &McpServerConfig, out: &mut dyn Write) -> Result<(), CommandError> {
    writeln!(out, "name: {name}")?;
    writeln!(out, "transport: {}", server.transport_name())?;
    match &server.url {
        Some(url) => writeln!(out, "url: {url}")?,
        None => writeln!(out, "command: {}", server.target())?,
    }
    for (key, value) in &server.env {
        writeln!(out, "env {key}={}", shown(value))?;
    }
    for (key, value) in &server.headers {
        writeln!(out, "header {key}: {}", shown(value))?;
    }
    if let Some(token) = &server.bearer_token {
        writeln!(out, "bearer_token: {}", shown(token))?;
    }
    writeln!(
        out,
        "startup_timeout: {} s",
        server.startup_timeout().as_secs()
    )?;
    writeln!(out, "call_timeout: {} s", server.call_timeout().as_secs())?;
    writeln!(out, "enabled: {}", server.is_enabled())?;
    Ok(())
}

/// Connects, prints what the server is and lists its tools.
fn test(name: &str, server: &McpServerConfig, out: &mut dyn Write) -> Result<(), CommandError> {
    let (client, tools, _ends) = crate::mcp::hub::connect(name, server).map_err(|e| {
        CommandError::Io(std::io::Error::other(format!(
            "MCP server '{name}' ({}): {e}",
            server.target()
        )))
    })?;
    let info = &client.info;
    writeln!(
        out,
        "connected to '{name}': {} {} (protocol {}), {} tools",
        info.name,
        info.version,
        info.protocol_version,
        tools.len()
    )?;
    if let Some(instructions) = info.instructions.as_deref().and_then(|i| i.lines().next()) {
        writeln!(out, "instructions: {instructions}")?;
    }
    let server = std::sync::Arc::new(Server::detached(name, server.clone()));
    for info in tools {
        let tool = McpTool::new(server.clone(), info);
        let marker = if tool.side_effecting(&serde_json::Value::Null) {
            ""
        } else {
            " [read-only]"
        };
        let description = tool.description().lines().next().unwrap_or("");
        writeln!(out, "  {}{marker}  {description}", tool.name())?;
    }
    client.close();
    Ok(())
}

/// Parses the words after `add NAME`.
fn parse_add(words: &[String]) -> Result<McpServerConfig, CommandError> {
    let mut server = McpServerConfig::default();
    let mut rest = words;
    let mut command: Vec<String> = Vec::new();
    while let Some((word, tail)) = rest.split_first() {
        let value = || {
            tail.first()
                .cloned()
                .ok_or_else(|| usage(format!("{word} needs a value")))
        };
        match word.as_str() {
            "-e" | "--env" => insert_pair(&mut server.env, &value()?)?,
            "--header" => insert_pair(&mut server.headers, &value()?)?,
            "--url" => server.url = Some(value()?),
            "--bearer-token" => server.bearer_token = Some(value()?),
            "--startup-timeout" => server.startup_timeout = Some(seconds(&value()?)?),
            "--call-timeout" => server.call_timeout = Some(seconds(&value()?)?),
            "--" => {
                command = tail.to_vec();
                break;
            }
            option if option.starts_with('-') => {
                return Err(usage(format!("unknown mcp add option '{option}'")))
            }
            _ => {
                command = trailing_env(rest, &mut server)?;
                break;
            }
        }
        rest = &tail[1..];
    }
    if let Some((program, args)) = command.split_first() {
        server.command = Some(program.clone());
        server.args = args.to_vec();
    }
    Ok(server)
}

/// `CMD ARGS... -e K=V -e K2=V2`: the trailing `-e` pairs are environment,
/// everything before them is the command line.
fn trailing_env(
    words: &[String],
    server: &mut McpServerConfig,
) -> Result<Vec<String>, CommandError> {
    let mut end = words.len();
    while end >= 3 && (words[end - 2] == "-e" || words[end - 2] == "--env") {
        insert_pair(&mut server.env, &words[end - 1])?;
        end -= 2;
    }
    Ok(words[..end].to_vec())
}

fn insert_pair(
    map: &mut std::collections::BTreeMap<String, String>,
    pair: &str,
) -> Result<(), CommandError> {
    match pair.split_once('=') {
        Some((key, value)) if !key.is_empty() => {
            map.insert(key.to_string(), value.to_string());
            Ok(())
        }
        _ => Err(usage(format!("expected KEY=VALUE, got '{pair}'"))),
    }
}

fn seconds(text: &str) -> Result<u64, CommandError> {
    text.parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| usage(format!("expected a number of seconds, got '{text}'")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::fs::test_support::temp_dir;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    fn run_words(text: &str, path: &Path) -> Result<String, CommandError> {
        let mut out = Vec::new();
        run(&words(text), path, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn add_parses_commands_env_and_urls() {
        let s = parse_add(&words("-e A=1 npx -y pkg --flag -e B=2")).unwrap();
        assert_eq!(s.command.as_deref(), Some("npx"));
        assert_eq!(s.args, ["-y", "pkg", "--flag"]);
        assert_eq!(s.env.len(), 2);
        let s = parse_add(&words("--url http://h/mcp --header X-K=v --call-timeout 5")).unwrap();
        assert_eq!(s.url.as_deref(), Some("http://h/mcp"));
        assert_eq!(s.headers["X-K"], "v");
        assert_eq!(s.call_timeout, Some(5));
        let s = parse_add(&words("-- -weird -e A=1")).unwrap();
        assert_eq!(s.command.as_deref(), Some("-weird"));
        assert!(parse_add(&words("-e NOEQUALS x")).is_err());
        assert!(parse_add(&words("--bogus x")).is_err());
    }

    #[test]
    fn add_show_disable_remove_round_trip() {
        let path = temp_dir("mcp-cmd").join("config.json");
        let added =
            run_words("add files -e TOKEN=abcdefghijklmnop server --root .", &path).unwrap();
        assert!(
            added.contains("added MCP server 'files': server --root ."),
            "{added}"
        );
        let listed = run_words("list", &path).unwrap();
        assert!(listed.contains("files  stdio  server --root ."), "{listed}");
        let shown = run_words("files show", &path).unwrap();
        assert!(shown.contains("env TOKEN=abcd...mnop"), "{shown}");
        assert!(!shown.contains("abcdefghijklmnop"), "{shown}");
        run_words("files disable", &path).unwrap();
        assert!(run_words("list", &path).unwrap().contains("(disabled)"));
        run_words("remove files", &path).unwrap();
        assert!(run_words("list", &path).unwrap().contains("No MCP servers"));
        let err = run_words("nope test", &path).unwrap_err();
        assert!(
            err.to_string().contains("unknown MCP server 'nope'"),
            "{err}"
        );
        assert!(run_words("add bad --url ftp://x", &path).is_err());
    }
}

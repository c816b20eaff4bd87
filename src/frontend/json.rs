//! The `--json` line protocol: prompts in as JSON lines, one JSON object per event out.
//!
//! Input lines are `{"type":"user","content":"..."}`, or `{"type":"mcp_status"}`
//! which is answered with an `mcp_status` object listing each MCP server's
//! state and tool count; anything else gets an `error` object and is skipped.
//! Output objects are `text`, `thinking`,
//! `codeblock`, `tool_use`, `tool_result`, `system`, `error`, `stats` and, at
//! the end of each prompt, `end_turn` with the finish reason and token totals.

use std::io::{self, BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::AgentHandle;
use crate::core::{Event, FinishReason, Stats};

/// One output line.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum JsonOut<'a> {
    Text {
        content: &'a str,
    },
    Thinking {
        content: &'a str,
    },
    Codeblock {
        content: &'a str,
    },
    ToolUse {
        name: &'a str,
        id: &'a str,
        params: &'a Value,
    },
    ToolResult {
        name: &'a str,
        id: &'a str,
        success: bool,
        summary: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a str>,
    },
    System {
        content: &'a str,
    },
    Error {
        message: &'a str,
        error_type: &'a str,
    },
    Stats(&'a Stats),
    /// Each MCP server's state and tool count; answers `{"type":"mcp_status"}`.
    McpStatus {
        servers: Vec<crate::mcp::ServerStatus>,
    },
    EndTurn {
        turns: u64,
        finish_reason: &'a str,
        total_tokens: u64,
        prompt_tokens: u64,
        completion_tokens: u64,
    },
}

/// One input line.
#[derive(Deserialize)]
struct JsonIn {
    #[serde(rename = "type")]
    kind: String,
    content: Option<String>,
}

/// Token totals gathered from the stats events of a session.
#[derive(Default)]
struct Totals {
    turns: u64,
    context_used: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
}

fn write_line(out: &mut impl Write, item: &JsonOut<'_>) -> io::Result<()> {
    let line = serde_json::to_string(item).map_err(io::Error::other)?;
    writeln!(out, "{line}")?;
    out.flush()
}

fn event_line(out: &mut impl Write, event: &Event, totals: &mut Totals) -> io::Result<()> {
    let item = match event {
        Event::Content(text) => JsonOut::Text { content: text },
        Event::Thinking(text) => JsonOut::Thinking { content: text },
        Event::CodeBlock(text) => JsonOut::Codeblock { content: text },
        Event::ToolCall(call) => JsonOut::ToolUse {
            name: &call.name,
            id: &call.id,
            params: &call.arguments,
        },
        Event::ToolResult(r) => JsonOut::ToolResult {
            name: &r.name,
            id: &r.id,
            success: r.success,
            summary: &r.summary,
            error: (!r.success).then_some(r.content.as_str()),
        },
        Event::System(text) => JsonOut::System { content: text },
        Event::Error { kind, message } => JsonOut::Error {
            message,
            error_type: kind.as_str(),
        },
        Event::Stats(stats) => {
            totals.context_used = stats.context_used;
            totals.prompt_tokens += stats.prompt_tokens;
            totals.completion_tokens += stats.completion_tokens;
            JsonOut::Stats(stats)
        }
        Event::Stop(reason) => {
            totals.turns += 1;
            JsonOut::EndTurn {
                turns: totals.turns,
                finish_reason: reason.as_str(),
                total_tokens: totals.context_used,
                prompt_tokens: totals.prompt_tokens,
                completion_tokens: totals.completion_tokens,
            }
        }
        Event::UserPrompt(_) => return Ok(()),
    };
    write_line(out, &item)
}

/// Whether an input line asks for the MCP status rather than running a prompt.
fn is_status_request(line: &str) -> bool {
    serde_json::from_str::<JsonIn>(line).is_ok_and(|input| input.kind == "mcp_status")
}

/// Parses one input line into a prompt, or says what is wrong with it.
fn parse_input(line: &str) -> Result<String, String> {
    let input: JsonIn =
        serde_json::from_str(line).map_err(|e| format!("input is not valid JSON: {e}"))?;
    if input.kind != "user" {
        return Err(format!(
            "unsupported input type {:?} (expected \"user\")",
            input.kind
        ));
    }
    match input.content {
        Some(content) if !content.trim().is_empty() => Ok(content),
        _ => Err("input has no \"content\"".into()),
    }
}

/// Runs the JSON protocol over `input` (or the single `prompt`). Returns whether every turn succeeded.
pub fn run(
    agent: &AgentHandle,
    prompt: Option<String>,
    input: impl BufRead,
    stop: &AtomicBool,
) -> bool {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut totals = Totals::default();
    let mut ok = true;
    let mut run_one = |prompt: String, out: &mut io::StdoutLock<'_>| {
        let reason = agent.run_prompt(prompt, |event| event_line(out, event, &mut totals));
        reason != FinishReason::Error
    };
    if let Some(prompt) = prompt {
        return run_one(prompt, &mut out);
    }
    for line in input.lines() {
        let Ok(line) = line else { break };
        if stop.load(Ordering::SeqCst) {
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        if is_status_request(&line) {
            let servers = crate::mcp::statuses();
            if write_line(&mut out, &JsonOut::McpStatus { servers }).is_err() {
                break;
            }
            continue;
        }
        match parse_input(&line) {
            Ok(prompt) => ok &= run_one(prompt, &mut out),
            Err(message) => {
                ok = false;
                let item = JsonOut::Error {
                    message: &message,
                    error_type: "invalid_input",
                };
                if write_line(&mut out, &item).is_err() {
                    break;
                }
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_lines_are_checked() {
        assert_eq!(
            parse_input(r#"{"type":"user","content":"hi"}"#),
            Ok("hi".into())
        );
        assert!(parse_input("hi").unwrap_err().contains("not valid JSON"));
        assert!(parse_input(r#"{"type":"bot","content":"x"}"#)
            .unwrap_err()
            .contains("unsupported"));
        assert!(parse_input(r#"{"type":"user"}"#)
            .unwrap_err()
            .contains("content"));
    }

    #[test]
    fn every_event_is_one_json_object() {
        let mut out = Vec::new();
        let mut totals = Totals::default();
        let events = [
            Event::Content("a\nb".into()),
            Event::Stats(Stats {
                prompt_tokens: 5,
                completion_tokens: 2,
                context_used: 7,
                ..Stats::default()
            }),
            Event::Stop(FinishReason::Stop),
        ];
        for e in &events {
            event_line(&mut out, e, &mut totals).unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["type"], "text");
        assert_eq!(lines[0]["content"], "a\nb");
        assert_eq!(lines[2]["type"], "end_turn");
        assert_eq!(lines[2]["total_tokens"], 7);
        assert_eq!(lines[2]["finish_reason"], "stop");
    }
}

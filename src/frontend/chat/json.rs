//! The `--json` line protocol: prompts in as JSON lines, one JSON object per event out.
//!
//! Input lines are `{"type":"user","content":"..."}` (prompts, queued while
//! a turn runs), `{"type":"approval","id":"...","decision":"allow"|"deny"|"always"}`
//! (the answer to an `approval_required` event) and `{"type":"mcp_status"}`
//! (answered at once with an `mcp_status` object listing each MCP server's
//! state and tool count); anything else gets an `error` object and is skipped. Output objects are `text`, `thinking`, `codeblock`,
//! `tool_use`, `approval_required`, `tool_result`, `system`, `error`, `stats`
//! and, at the end of each prompt, `end_turn` with the finish reason and token
//! totals. While the in-process model loads, `loading` lines (`frontend/progress.rs`) carry its
//! progress (0.0 to 1.0).
//!
//! Input is read on its own thread (`shepherd-json-in`) and the loop
//! `select!`s over input lines and agent events, so an approval can be
//! answered while a turn waits for it. Once input ends nobody can answer, so
//! later approval requests are refused at once.

use std::collections::VecDeque;
use std::io::{self, BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::{never, select, Receiver};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::stats_line::StatsLine;
use crate::agent::{AgentHandle, Op};
use crate::core::{Event, FinishReason, Message};
use crate::tools::approval::Answer;

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
    /// Answer with an `approval` input line carrying the same `id`.
    ApprovalRequired {
        id: &'a str,
        name: &'a str,
        tool_call_id: &'a str,
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
    Stats(StatsLine<'a>),
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
    id: Option<String>,
    decision: Option<String>,
}

/// What an input line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Input {
    Prompt(String),
    Approval { id: String, answer: Answer },
    McpStatus,
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
            JsonOut::Stats(stats.into())
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
        Event::ApprovalRequired(request) => JsonOut::ApprovalRequired {
            id: &request.id,
            name: &request.call.name,
            tool_call_id: &request.call.id,
            params: &request.call.arguments,
        },
        Event::UserPrompt(_)
        | Event::Logprobs(_)
        | Event::Prefilled { .. }
        | Event::Progress(_) => return Ok(()),
    };
    write_line(out, &item)
}

/// Parses one input line, or says what is wrong with it.
fn parse_input(line: &str) -> Result<Input, String> {
    let input: JsonIn =
        serde_json::from_str(line).map_err(|e| format!("input is not valid JSON: {e}"))?;
    match input.kind.as_str() {
        "user" => match input.content {
            Some(content) if !content.trim().is_empty() => Ok(Input::Prompt(content)),
            _ => Err("input has no \"content\"".into()),
        },
        "approval" => {
            let id = input.id.ok_or("approval has no \"id\"")?;
            let answer = match input.decision.as_deref() {
                Some("allow") => Answer::Allow,
                Some("always") => Answer::Always,
                Some("deny") => Answer::Deny,
                _ => {
                    return Err(
                        "approval needs \"decision\": \"allow\", \"always\" or \"deny\"".into(),
                    )
                }
            };
            Ok(Input::Approval { id, answer })
        }
        "mcp_status" => Ok(Input::McpStatus),
        other => Err(format!(
            "unsupported input type {other:?} (expected \"user\", \"approval\" or \"mcp_status\")"
        )),
    }
}

/// Reads stdin lines on a thread of their own; the channel closes at end of input.
pub fn stdin_lines() -> Receiver<String> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let spawned = std::thread::Builder::new()
        .name("shepherd-json-in".into())
        .spawn(move || {
            for line in io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    if spawned.is_err() {
        eprintln!("shepherd: cannot start the input thread");
    }
    rx
}

/// The protocol loop's state.
struct Protocol<'a, W: Write> {
    agent: &'a AgentHandle,
    out: W,
    totals: Totals,
    ok: bool,
    busy: bool,
    /// Input that waits for the running turn, answered in the order it came.
    queue: VecDeque<Queued>,
}

/// An input line that waits while a turn runs.
enum Queued {
    Prompt(String),
    /// Answered in order, so it reports the state after the turns before it.
    McpStatus,
}

impl<W: Write> Protocol<'_, W> {
    fn start(&mut self, message: Message) {
        self.busy = self.agent.send(Op::Prompt(message));
        self.ok &= self.busy;
    }

    fn error(&mut self, message: &str) -> io::Result<()> {
        self.ok = false;
        let item = JsonOut::Error {
            message,
            error_type: "invalid_input",
        };
        write_line(&mut self.out, &item)
    }

    fn on_line(&mut self, line: &str) -> io::Result<()> {
        if line.trim().is_empty() {
            return Ok(());
        }
        match parse_input(line) {
            Ok(Input::Prompt(prompt)) if self.busy => self.queue.push_back(Queued::Prompt(prompt)),
            Ok(Input::Prompt(prompt)) => self.start(Message::user(prompt)),
            Ok(Input::Approval { id, answer }) => {
                let answered = self
                    .agent
                    .approvals()
                    .is_some_and(|approvals| approvals.answer(&id, answer).is_ok());
                if !answered {
                    return self.error(&format!("no approval with id {id:?} is pending"));
                }
            }
            Ok(Input::McpStatus) if self.busy => self.queue.push_back(Queued::McpStatus),
            Ok(Input::McpStatus) => return self.mcp_status(),
            Err(message) => return self.error(&message),
        }
        Ok(())
    }

    /// Writes the event; at the end of a turn starts the next queued prompt.
    fn on_event(&mut self, event: &Event) -> io::Result<()> {
        event_line(&mut self.out, event, &mut self.totals)?;
        if let Event::Stop(reason) = event {
            self.ok &= *reason != FinishReason::Error;
            self.busy = false;
            while let Some(queued) = self.queue.pop_front() {
                match queued {
                    Queued::McpStatus => self.mcp_status()?,
                    Queued::Prompt(prompt) => {
                        self.start(Message::user(prompt));
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    fn mcp_status(&mut self) -> io::Result<()> {
        let servers = crate::mcp::statuses();
        write_line(&mut self.out, &JsonOut::McpStatus { servers })
    }
}

/// Runs the JSON protocol over `lines` (or the single `prompt` of `-e`, with
/// its `--image`s, still taking approval lines from `lines`). Returns whether
/// every turn succeeded.
pub fn run(
    agent: &AgentHandle,
    prompt: Option<Message>,
    lines: Receiver<String>,
    stop: &AtomicBool,
) -> bool {
    let stdout = io::stdout();
    let mut protocol = Protocol {
        agent,
        out: stdout.lock(),
        totals: Totals::default(),
        ok: true,
        busy: false,
        queue: VecDeque::new(),
    };
    let one_shot = prompt.is_some();
    if let Some(prompt) = prompt {
        protocol.start(prompt);
    }
    let events = agent.events().clone();
    let mut lines = lines;
    let mut input_open = true;
    loop {
        let idle = !protocol.busy && protocol.queue.is_empty();
        if idle && (one_shot || !input_open || stop.load(Ordering::SeqCst)) {
            return protocol.ok;
        }
        let written = select! {
            recv(lines) -> line => match line {
                Ok(line) => protocol.on_line(&line),
                Err(_) => {
                    // Nobody is left to answer approvals: refuse them at once.
                    if let Some(approvals) = agent.approvals() {
                        approvals.close();
                    }
                    input_open = false;
                    lines = never();
                    Ok(())
                }
            },
            recv(events) -> event => match event {
                Ok(event) => protocol.on_event(&event),
                Err(_) => return false,
            },
        };
        // A closed stdout: stop the turn and leave.
        if written.is_err() {
            agent.cancel();
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Stats;

    #[test]
    fn input_lines_are_checked() {
        assert_eq!(
            parse_input(r#"{"type":"user","content":"hi"}"#),
            Ok(Input::Prompt("hi".into()))
        );
        assert_eq!(
            parse_input(r#"{"type":"approval","id":"7","decision":"deny"}"#),
            Ok(Input::Approval {
                id: "7".into(),
                answer: Answer::Deny
            })
        );
        assert!(
            parse_input(r#"{"type":"approval","id":"7","decision":"yes please"}"#)
                .unwrap_err()
                .contains("decision")
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

//! The plain front-end: one prompt from `-e` (with its `--image`s), or one
//! prompt per input line.
//!
//! Used for scripting (`-e`, piped stdin) and, until the full-screen terminal
//! front-end takes over, for interactive use with a `> ` prompt. Answers go to
//! stdout through the shared [`Renderer`]; the result is whether every turn
//! ended without an error, which `main` turns into the exit code. Control
//! characters in the text are spelled out on a terminal and kept exactly in
//! a pipe or file ([`ExactText::for_stdio`]).

use std::io::{self, BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::agent::{AgentHandle, Op};
use crate::core::{FinishReason, Message};

use super::render::{ExactText, RenderOptions, Renderer};

/// Words that end an interactive session.
const EXIT_WORDS: [&str; 2] = ["exit", "quit"];

fn run_message(agent: &AgentHandle, message: Message, options: RenderOptions) -> FinishReason {
    let mut renderer = Renderer::new(io::stdout().lock(), io::stderr(), options)
        .with_exact_text(ExactText::for_stdio());
    agent.run_message(message, |event| renderer.render(event))
}

/// Runs a single message (`-e` and its `--image`s). Returns whether it succeeded.
pub fn run_once(agent: &AgentHandle, message: Message, options: RenderOptions) -> bool {
    run_message(agent, message, options) != FinishReason::Error
}

/// Runs one prompt per line of `input` until EOF, `exit`, or `stop` is set
/// (by a signal). Returns whether every turn succeeded.
pub fn run_lines(
    agent: &AgentHandle,
    input: impl BufRead,
    options: RenderOptions,
    stop: &AtomicBool,
) -> bool {
    let interactive = io::stdin().is_terminal() && io::stderr().is_terminal();
    let mut ok = true;
    let mut lines = input.lines();
    loop {
        if interactive {
            eprint!("> ");
            let _ = io::stderr().flush();
        }
        let Some(Ok(line)) = lines.next() else { break };
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let prompt = clean_prompt(&line);
        if prompt.is_empty() {
            continue;
        }
        if EXIT_WORDS.contains(&prompt.as_str()) {
            break;
        }
        if prompt == "/clear" {
            agent.send(Op::Clear);
            continue;
        }
        ok &= run_message(agent, Message::user(prompt), options) != FinishReason::Error;
        if stop.load(Ordering::SeqCst) {
            break;
        }
    }
    ok
}

/// Strips control characters (other than tab) that would confuse the model or a terminal.
fn clean_prompt(line: &str) -> String {
    line.chars()
        .filter(|c| !c.is_control() || *c == '\t')
        .collect::<String>()
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_removed() {
        assert_eq!(clean_prompt("  hi\x1b[31m there\r"), "hi[31m there");
        assert_eq!(clean_prompt("\x07"), "");
        assert_eq!(clean_prompt("ünïcode ✓"), "ünïcode ✓");
    }
}

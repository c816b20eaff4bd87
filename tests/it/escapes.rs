//! Terminal output is text, not control: a reply full of escape sequences
//! (OSC 52 clipboard write, screen clear, cursor moves, OSC 8 link, 8-bit
//! CSI, bidi override, carriage return) is shown spelled out in `-e` on a
//! terminal, the REPL and the TUI, and kept byte for byte in a pipe and in
//! `--json`.
//!
//! The terminal tests run shepherd in a tmux pane and record the raw bytes it
//! writes with `pipe-pane`, before tmux interprets them, so they can assert
//! that none of the reply's sequences reached the terminal, not only that
//! the screen looks right.

use std::path::PathBuf;

use serde_json::json;

use crate::fake_openai::{chunk, text_stream, tool_call_stream, Canned, FakeOpenAi};
use crate::harness::{poll_until, Sandbox};
use crate::terminal::{fake_args, Tmux, SCREEN_DEADLINE};

/// The hostile reply as the upstream streams it, cut inside sequences.
const PIECES: [&str; 6] = [
    "clip:\x1b]5",
    "2;c;aGVsbG8=\x07:end\nclear:\x1b",
    "[2J:end\nhome:\x1b[H:up:\x1b[3A:end\n",
    "link:\x1b]8;;http://evil.example/\x1b\\here\x1b]8;;\x1b",
    "\\:end\ncsi8:\u{9b}31m:end\n",
    "bidi:\u{202e}gnp.exe\u{202c}:end\ncr:hidden\rshown:END",
];

/// The reply's lines as the screen must show them.
const SHOWN: [&str; 7] = [
    r"clip:\x1b]52;c;aGVsbG8=\x07:end",
    r"clear:\x1b[2J:end",
    r"home:\x1b[H:up:\x1b[3A:end",
    r"link:\x1b]8;;http://evil.example/\x1b\here\x1b]8;;\x1b\:end",
    "csi8:<U+009B>31m:end",
    "bidi:<U+202E>gnp.exe<U+202C>:end",
    r"cr:hidden\rshown:END",
];

/// The reply's sequences, none of which shepherd writes itself: none may
/// appear raw in what reached the terminal.
const RAW_FORBIDDEN: [&str; 9] = [
    "\x1b]52;",
    "\x1b[2J",
    "\x1b[H",
    "\x1b[3A",
    "\x1b]8;",
    "\x07",
    "\u{9b}",
    "\u{202e}",
    "hidden\rshown",
];

fn hostile_reply() -> Canned {
    Canned::sse(&text_stream(&PIECES))
}

/// Where `pipe-pane` records the pane's raw output.
fn raw_log(sandbox: &Sandbox) -> PathBuf {
    sandbox.root.path().join("raw-output")
}

/// Waits until the raw output holds `marker`, then returns all of it.
fn raw_output_with(sandbox: &Sandbox, marker: &str) -> String {
    let path = raw_log(sandbox);
    let read = || String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned();
    let arrived = poll_until(SCREEN_DEADLINE, || read().contains(marker));
    assert!(
        arrived,
        "{marker:?} never reached the terminal: {:?}",
        read()
    );
    read()
}

/// The screen shows every line of the reply spelled out, and the raw bytes
/// hold none of its sequences.
fn assert_shown_not_obeyed(tmux: &Tmux, raw: &str) {
    for sequence in RAW_FORBIDDEN {
        assert!(
            !raw.contains(sequence),
            "{sequence:?} reached the terminal raw: {raw:?}"
        );
    }
    assert!(raw.contains(r"\x1b]52;c;aGVsbG8=\x07"), "{raw:?}");
    tmux.wait_for("the reply spelled out", |_| {
        SHOWN.iter().all(|line| tmux.joined_screen().contains(line))
    });
}

#[test]
fn one_shot_on_a_terminal_shows_escape_sequences_instead_of_obeying_them() {
    let mut chunks = vec![chunk(
        json!({"role": "assistant", "reasoning_content": "think\x1b[2J"}),
        None,
    )];
    chunks.extend(text_stream(&PIECES));
    let fake = FakeOpenAi::start(vec![Canned::sse(&chunks)]);
    let sandbox = Sandbox::new("escapes-e");
    let tmux = Tmux::start_held(
        &sandbox,
        &fake_args(&fake.base_url, &["--thinking", "-e", "go"]),
    );
    tmux.pipe_output_to(&raw_log(&sandbox));
    tmux.release();
    let raw = raw_output_with(&sandbox, "shown:END");
    assert_shown_not_obeyed(&tmux, &raw);
    assert!(
        tmux.joined_screen().contains(r"think\x1b[2J"),
        "{}",
        tmux.screen()
    );
}

#[test]
fn one_shot_on_a_terminal_shows_an_upstream_error_body_spelled_out() {
    let message = "bad\x1b]52;c;aGk=\x07 request\x1b[2J";
    let body = json!({"error": {"message": message, "type": "invalid_request_error"}});
    let fake = FakeOpenAi::start(vec![Canned::json(400, body)]);
    let sandbox = Sandbox::new("escapes-error");
    let tmux = Tmux::start_held(&sandbox, &fake_args(&fake.base_url, &["-e", "go"]));
    tmux.pipe_output_to(&raw_log(&sandbox));
    tmux.release();
    let raw = raw_output_with(&sandbox, "request");
    assert!(
        !raw.contains("\x1b]52;") && !raw.contains("\x1b[2J"),
        "{raw:?}"
    );
    tmux.wait_text(r"bad\x1b]52;c;aGk=\x07 request\x1b[2J");
}

#[test]
fn repl_shows_escape_sequences_in_replies_and_tool_arguments_instead_of_obeying_them() {
    let fake = FakeOpenAi::start(vec![
        hostile_reply(),
        Canned::sse(&tool_call_stream(
            "call_w",
            "write",
            // Shown raw, the carriage return and erase-line would leave only
            // "rm -rf ~" visible: the approval question must show all of it.
            json!({"file_path": "notes.txt\r\x1b[2Krm -rf ~", "content": "x"}),
        )),
        Canned::sse(&text_stream(&["Not written."])),
    ]);
    let sandbox = Sandbox::new("escapes-repl");
    let tmux = Tmux::start(&sandbox, &fake_args(&fake.base_url, &[]));
    tmux.wait_for("the prompt", |s| s.trim_end().ends_with('>'));
    tmux.pipe_output_to(&raw_log(&sandbox));
    tmux.type_text("go");
    tmux.key("Enter");
    let raw = raw_output_with(&sandbox, "shown:END");
    assert_shown_not_obeyed(&tmux, &raw);

    tmux.wait_for("a fresh prompt", |s| s.trim_end().ends_with('>'));
    tmux.type_text("write it");
    tmux.key("Enter");
    tmux.wait_text("? allow write?");
    tmux.wait_text(r"* write(file_path=notes.txt\r\x1b[2Krm -rf ~, content=x)");
    tmux.type_text("n");
    let raw = raw_output_with(&sandbox, "Not written.");
    assert!(
        !raw.contains("\x1b[2K") && !raw.contains("txt\r"),
        "{raw:?}"
    );
    let written = std::fs::read_dir(sandbox.work()).map_or(0, Iterator::count);
    assert_eq!(written, 0, "the denied write ran");
}

#[test]
fn tui_shows_escape_sequences_instead_of_obeying_them() {
    let fake = FakeOpenAi::start(vec![hostile_reply()]);
    let sandbox = Sandbox::new("escapes-tui");
    let tmux = Tmux::start(&sandbox, &fake_args(&fake.base_url, &["--tui"]));
    tmux.wait_text("cmdline | test");
    // The TUI cleared the screen when it started; from here on, only its
    // own drawing may reach the terminal.
    tmux.pipe_output_to(&raw_log(&sandbox));
    tmux.type_text("go");
    tmux.key("Enter");
    let raw = raw_output_with(&sandbox, "shown:END");
    assert_shown_not_obeyed(&tmux, &raw);
}

#[test]
fn one_shot_into_a_pipe_and_json_keep_the_exact_text() {
    let reply = PIECES.concat();
    let fake = FakeOpenAi::start(vec![hostile_reply(), hostile_reply()]);
    let sandbox = Sandbox::new("escapes-pipe");
    let run = sandbox.run(&fake_args(&fake.base_url, &["-e", "go"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert_eq!(run.stdout, format!("{reply}\n"));

    let run = sandbox.run(&fake_args(&fake.base_url, &["--json", "-e", "go"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let text: String = run
        .json_lines()
        .iter()
        .filter(|line| line["type"] == "text")
        .map(|line| line["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(text, reply);
}

//! The output filter's tests: each rule on small texts, and every family's
//! documented output (`format_cases.json`) whole and split at every byte.

use super::*;
use serde_json::{json, Value};

fn names() -> Vec<String> {
    ["read", "bash"].map(String::from).to_vec()
}

/// Adjacent events of the same text kind merged, since chunking changes granularity.
fn coalesce(events: Vec<Event>) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    for event in events {
        match (out.last_mut(), event) {
            (Some(Event::Content(a)), Event::Content(b))
            | (Some(Event::Thinking(a)), Event::Thinking(b))
            | (Some(Event::CodeBlock(a)), Event::CodeBlock(b)) => a.push_str(&b),
            (_, event) => out.push(event),
        }
    }
    out
}

fn run(chunks: &[&str]) -> (Vec<Event>, FilterOutput) {
    let mut filter = OutputFilter::new(names());
    let mut events = Vec::new();
    for chunk in chunks {
        assert_eq!(filter.push(chunk, &mut events), Flow::Continue);
    }
    assert_eq!(filter.finish(&mut events), Flow::Continue);
    (coalesce(events), filter.into_output())
}

fn c(text: &str) -> Event {
    Event::Content(text.into())
}
fn t(text: &str) -> Event {
    Event::Thinking(text.into())
}
fn code(text: &str) -> Event {
    Event::CodeBlock(text.into())
}

/// Checks the events and calls, then that every way of chunking the input
/// (one split at every char boundary, every byte offset rounded to a char
/// boundary, one char at a time) gives the same result.
fn check(input: &str, expected: &[Event], calls: &[(&str, Value)]) {
    let whole = run(&[input]);
    assert_eq!(whole.0, expected, "events for {input:?}");
    let got_calls: Vec<(String, Value)> = whole
        .1
        .tool_calls
        .iter()
        .map(|c| (c.name.clone(), c.arguments.clone()))
        .collect();
    let want_calls: Vec<(String, Value)> = calls
        .iter()
        .map(|(n, a)| (n.to_string(), a.clone()))
        .collect();
    assert_eq!(got_calls, want_calls, "calls for {input:?}");
    for byte in 0..=input.len() {
        let mut at = byte;
        while !input.is_char_boundary(at) {
            at -= 1;
        }
        assert_eq!(
            run(&[&input[..at], &input[at..]]),
            whole,
            "{input:?} split at {at}"
        );
    }
    let chars: Vec<String> = input.chars().map(String::from).collect();
    let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(run(&chars), whole, "{input:?} char by char");
}

/// Markup inside reasoning is reasoning: a call a model writes while thinking
/// never runs, and the block's end is still found after it, whether the model
/// opened the block or the prompt did (there a call at the start of a line that
/// the block never closes after is the model acting: Qwen3.5 never closes it).
#[test]
fn a_call_inside_reasoning_is_reasoning() {
    let call = r#"<tool_call>{"name": "bash", "arguments": {"command": "rm -rf ~"}}</tool_call>"#;
    let input = format!("<think>I could run {call} but no</think>Done.");
    check(
        &input,
        &[t(&format!("I could run {call} but no")), c("Done.")],
        &[],
    );
    // In a block the prompt opened; the same whole and split at every byte.
    let reasoning = |text: &str| {
        let read = |chunks: &[&str]| {
            let mut filter = OutputFilter::new(names());
            filter.after_prompt(PromptEnd::Reasoning(&["</think>"]));
            let mut events = Vec::new();
            for chunk in chunks {
                filter.push(chunk, &mut events);
            }
            filter.finish(&mut events);
            filter.into_output()
        };
        let whole = read(&[text]);
        for at in (1..text.len()).filter(|&at| text.is_char_boundary(at)) {
            assert_eq!(read(&[&text[..at], &text[at..]]), whole, "{text:?} at {at}");
        }
        whole
    };
    let opened = reasoning(&format!("Maybe {call} later\n</think>\nNo call."));
    assert!(opened.tool_calls.is_empty(), "{opened:?}");
    assert!(opened.thinking.contains("rm -rf"));
    assert_eq!(opened.content.trim(), "No call.");
    // At the start of a line, then the block closes: still reasoning (DeepSeek
    // R1 distills think about calls that way).
    let considered = reasoning(&format!("I could run\n{call}\nbut no.\n</think>\nAnswer."));
    assert!(considered.tool_calls.is_empty(), "{considered:?}");
    assert!(considered.thinking.contains("but no."));
    assert_eq!(considered.content.trim(), "Answer.");
    // At the start of a line, and the block never closes: the model acts.
    let acting = reasoning(&format!("Need to look.\n{call}"));
    assert_eq!(acting.tool_calls.len(), 1);
    assert_eq!(acting.thinking.trim(), "Need to look.");
}

/// Prose that quotes a format runs nothing: a plain-word marker inside a
/// sentence, or any call marker inside inline code, is text.
#[test]
fn a_quoted_marker_is_text() {
    let tools = vec!["get_time".to_string()];
    let read = |text: &str| {
        let mut filter = OutputFilter::new(tools.clone());
        let mut events = Vec::new();
        filter.push(text, &mut events);
        filter.finish(&mut events);
        filter.into_output()
    };
    for text in [
        "To call it, write `<function=get_time>` then the JSON {\"tz\": \"UTC\"} and stop.",
        "Write <function=get_time>{}</function> to ask the time; that is all.",
        "Hermes models write `<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>` here.",
    ] {
        let out = read(text);
        assert!(out.tool_calls.is_empty(), "{text}: {out:?}");
        assert_eq!(out.content, text);
    }
    // The same markup at the start of a line is a call.
    let out = read("<function=get_time>{}</function>");
    assert_eq!(out.tool_calls.len(), 1);
}

/// A reply cut inside a call (the length limit, a stop string) yields no
/// runnable call: the call is kept with its arguments as far as written, the
/// filter says it was cut, and a notice names it; split at every byte alike.
/// Ended by the model itself, the same text is a call (formats whose call has
/// no closing tag end it with the turn).
#[test]
fn a_call_the_text_was_cut_inside_is_never_a_call_to_run() {
    let cases: &[(&str, &str, &str)] = &[
        // Qwen3-Coder's XML parameters, cut inside a value.
        (
            "Checking.\n<tool_call>\n<function=bash>\n<parameter=command>\nrm -rf /tm",
            "bash",
            r#"{"command":"rm -rf /tm"#,
        ),
        // Hermes JSON, cut inside the arguments: they do not parse.
        (
            "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"rm -rf /tm",
            "bash",
            r#"{"command": "rm -rf /tm"#,
        ),
    ];
    for &(text, name, arguments) in cases {
        for at in 0..=text.len() {
            if !text.is_char_boundary(at) {
                continue;
            }
            let mut filter = OutputFilter::new(names());
            let mut events = Vec::new();
            for chunk in [&text[..at], &text[at..]] {
                assert_eq!(filter.push(chunk, &mut events), Flow::Continue);
            }
            assert_eq!(filter.finish_as(TextEnd::Cut, &mut events), Flow::Continue);
            assert!(filter.cut_call(), "{text:?} split at {at}");
            let notices: Vec<&Event> = events
                .iter()
                .filter(|e| matches!(e, Event::System(_)))
                .collect();
            assert!(
                matches!(notices[..], [Event::System(n)] if n.contains(name) && n.contains("not run")),
                "{text:?} split at {at}: {notices:?}"
            );
            let calls = filter.take_tool_calls();
            assert_eq!(calls.len(), 1, "{text:?} split at {at}");
            assert_eq!(calls[0].name, name);
            assert_eq!(
                calls[0].arguments,
                Value::String(arguments.into()),
                "{text:?}"
            );
            assert!(
                !filter.content().contains("rm -rf"),
                "{:?}",
                filter.content()
            );
        }
        // The model's own end: the XML call is whole as far as it goes (its
        // closing tags are the end of the turn); the cut JSON is no call.
        let mut filter = OutputFilter::new(names());
        let mut events = Vec::new();
        filter.push(text, &mut events);
        filter.finish_as(TextEnd::Model, &mut events);
        assert!(!filter.cut_call());
    }
    // Whole calls before the cut stay whole; text after them cut is no call.
    let mut filter = OutputFilter::new(names());
    let mut events = Vec::new();
    filter.push(
        "<tool_call>\n{\"name\": \"read\", \"arguments\": {}}\n</tool_call>\nand then",
        &mut events,
    );
    filter.finish_as(TextEnd::Cut, &mut events);
    assert!(!filter.cut_call());
    assert_eq!(filter.take_tool_calls().len(), 1);
}

#[test]
fn plain_text_passes_through() {
    check("héllo ✓ 日本 🦀", &[c("héllo ✓ 日本 🦀")], &[]);
    check("a < b and x <thin y", &[c("a < b and x <thin y")], &[]);
    check("", &[], &[]);
}

#[test]
fn think_blocks_become_thinking() {
    check(
        "<think>plan ✓</think>Answer",
        &[t("plan ✓"), c("Answer")],
        &[],
    );
    check("<thinking>a</thinking>b", &[t("a"), c("b")], &[]);
    check("<think>unclosed 🦀", &[t("unclosed 🦀")], &[]);
    check(
        "<think><tool_call>{\"name\":\"read\"}</tool_call></think>",
        &[t("<tool_call>{\"name\":\"read\"}</tool_call>")],
        &[],
    );
}

#[test]
fn code_fences_become_code_blocks() {
    check(
        "Look:\n```rust\nfn main() {}\n```\nDone",
        &[c("Look:\n"), code("fn main() {}\n"), c("\nDone")],
        &[],
    );
    check(
        "inline ```x``` stays text",
        &[c("inline ```x``` stays text")],
        &[],
    );
    check(
        "```\n<tool_call>{\"name\":\"read\"}</tool_call>\n```",
        &[code("<tool_call>{\"name\":\"read\"}</tool_call>\n")],
        &[],
    );
    check("```py\nprint('日本')", &[code("print('日本')")], &[]);
}

#[test]
fn markup_tool_calls_are_collected_not_shown() {
    check(
        "Reading.\n<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"日本.txt\"}}\n</tool_call>",
        &[c("Reading.\n")],
        &[("read", json!({"path":"日本.txt"}))],
    );
    check(
        "<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n</function>\n</tool_call>after",
        &[c("after")],
        &[("bash", json!({"command":"ls"}))],
    );
    check(
        "<function_calls><invoke name=\"read\"><parameter name=\"path\">a</parameter></invoke></function_calls>",
        &[],
        &[("read", json!({"path":"a"}))],
    );
    check(
        "<tool>{\"name\":\"bash\"}</tool>",
        &[],
        &[("bash", json!({}))],
    );
    // Generation often stops on the closing tag.
    check(
        "<tool_call>{\"name\":\"read\",\"arguments\":{}}",
        &[],
        &[("read", json!({}))],
    );
}

#[test]
fn unknown_or_broken_markup_is_shown_as_text() {
    let warned = |text: &str| {
        vec![
            Event::System(
                "the model wrote a tool call that names no available tool or could not \
                 be parsed; it is shown as text"
                    .into(),
            ),
            c(text),
        ]
    };
    let unknown = "<tool_call>{\"name\":\"rm\"}</tool_call>";
    check(unknown, &warned(unknown), &[]);
    let broken = "<tool_call>not json</tool_call>";
    check(broken, &warned(broken), &[]);
}

#[test]
fn bare_json_calls_at_line_start() {
    check(
        "Sure:\n{\"name\": \"bash\", \"parameters\": {\"command\": \"echo }\"}}",
        &[c("Sure:\n")],
        &[("bash", json!({"command":"echo }"}))],
    );
    check("{not json} text", &[c("{not json} text")], &[]);
    check("x {\"name\":\"bash\"}", &[c("x {\"name\":\"bash\"}")], &[]);
    check("{\"name\":\"nope\"} y", &[c("{\"name\":\"nope\"} y")], &[]);
    check("{\"name\":\"bash\"", &[c("{\"name\":\"bash\"")], &[]);
}

#[test]
fn visible_text_keeps_fences_and_drops_calls_and_thinking() {
    let (_, out) = run(&["<think>hm</think>Hi\n```sh\nls\n```\n<tool>{\"name\":\"bash\"}</tool>"]);
    assert_eq!(out.content, "Hi\n```sh\nls\n```\n");
    assert_eq!(out.thinking, "hm");
    assert_eq!(out.tool_calls[0].id, "call_0");
}

/// One row of `format_cases.json`: a family's model output and what it means.
#[derive(serde::Deserialize)]
struct FormatCase {
    family: String,
    source: String,
    #[serde(default)]
    opened_reasoning: bool,
    tools: Vec<String>,
    text: String,
    content: String,
    reasoning: String,
    calls: Vec<CaseCall>,
}

#[derive(serde::Deserialize)]
struct CaseCall {
    name: String,
    arguments: Value,
}

/// What the filter made of `chunks` for `case`: content, reasoning (both trimmed) and calls.
fn read_case(case: &FormatCase, chunks: &[&str]) -> (String, String, Vec<(String, Value)>) {
    let mut filter = OutputFilter::new(case.tools.clone());
    // How the family's generation prompt ends.
    let prompt = if case.opened_reasoning {
        // With the opening marker whose closer the answer holds.
        let opener = MARKERS
            .iter()
            .filter(|m| matches!(m.opener, Opener::Think(close) if close.iter().any(|c| case.text.contains(c))))
            .map(|m| m.tag)
            .next()
            .unwrap_or("<think>");
        format!("<|im_start|>assistant\n{opener}\n")
    } else if case.family == "gpt-oss" {
        "<|start|>user<|message|>hi<|end|><|start|>assistant".to_string()
    } else if case.family == "functionary-v3.2" {
        "<|start_header_id|>assistant<|end_header_id|>\n\n>>>".to_string()
    } else {
        String::new()
    };
    if let Some(end) = format::prompt_end(&prompt) {
        filter.after_prompt(end);
    }
    let mut events = Vec::new();
    for chunk in chunks {
        filter.push(chunk, &mut events);
    }
    filter.finish(&mut events);
    let out = filter.into_output();
    let calls = out.tool_calls.into_iter().map(|c| (c.name, c.arguments));
    (
        out.content.trim().to_string(),
        out.thinking.trim().to_string(),
        calls.collect(),
    )
}

/// Every family's documented output (src/stream/format_cases.json, taken from
/// llama.cpp's tests/test-chat.cpp and the families' templates) gives the right
/// content, reasoning and calls, whole, split at every byte offset (rounded to a
/// character), and one character at a time.
#[test]
fn every_family_in_the_format_table_parses() {
    let cases: Vec<FormatCase> =
        serde_json::from_str(include_str!("../format_cases.json")).expect("format_cases.json");
    let mut failed = Vec::new();
    let mut families = std::collections::BTreeSet::new();
    for case in &cases {
        families.insert(case.family.as_str());
        let want = (
            case.content.trim().to_string(),
            case.reasoning.trim().to_string(),
            case.calls
                .iter()
                .map(|c| (c.name.clone(), c.arguments.clone()))
                .collect::<Vec<_>>(),
        );
        let whole = read_case(case, &[&case.text]);
        if whole != want {
            failed.push(format!(
                "{} ({}): got {whole:?}, want {want:?}",
                case.family, case.source
            ));
            continue;
        }
        let text = case.text.as_str();
        for byte in 0..=text.len() {
            let mut at = byte;
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let split = read_case(case, &[&text[..at], &text[at..]]);
            assert_eq!(split, whole, "{} split at {at}", case.family);
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(
            read_case(case, &chars),
            whole,
            "{} char by char",
            case.family
        );
    }
    println!(
        "format table: {} of {} cases, {} families",
        cases.len() - failed.len(),
        cases.len(),
        families.len()
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn cancel_stops_at_once() {
    let mut filter = OutputFilter::new(names());
    let mut count = 0;
    let mut sink = |_event: Event| {
        count += 1;
        Flow::Cancel
    };
    assert_eq!(filter.push("<think>a</think>b", &mut sink), Flow::Cancel);
    assert_eq!(count, 1);
}

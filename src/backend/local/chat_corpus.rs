//! llama.cpp's chat parser corpus as a test: every parse case of `tests/test-chat.cpp`
//! in the llama.cpp tree that `make test` unpacks (the tree above
//! `SHEPHERD_TEMPLATE_CORPUS`), read out of the C++ source at test time by
//! `scripts/chat_corpus.py`, goes through the output filter the way an in-process
//! answer does: the case's template renders the generation prompt (with the case's
//! messages, tools and `enable_thinking`), [`format::prompt_end`] and the template's
//! learnt call syntax set the filter up, and the model output is pushed whole and
//! split at every byte. Content and reasoning (trimmed) and the calls (names, and
//! arguments as JSON values) must equal llama.cpp's expectation.
//!
//! Each case is right, a deliberate difference (listed in [`DIFFERENCES`] with why,
//! and in docs/FAMILIES.md), not applicable (an assistant prefill continued, a
//! response-format case, a partial stream's snapshot: shepherd's filter has no such
//! state), or wrong. The tally goes to stderr past the harness's capture.
//! Call ids are not compared: shepherd gives calls its own.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

use super::{call_syntax, prepare, template_corpus};
use crate::core::{Event, Flow, Message, Role, ToolCall, ToolSpec};
use crate::stream::filter::OutputFilter;
use crate::stream::format;
use crate::stream::syntax;
use crate::template;

#[derive(Deserialize)]
struct Case {
    template: String,
    line: u32,
    input: String,
    reasoning_format: Option<String>,
    enable_thinking: Option<bool>,
    tools: Vec<CorpusTool>,
    continue_final_message: Option<String>,
    messages: Option<Vec<CorpusMessage>>,
    json_schema: bool,
    is_partial: bool,
    expect: Expected,
}

#[derive(Deserialize)]
struct CorpusTool {
    name: String,
    description: String,
    parameters: Value,
}

#[derive(Deserialize)]
struct CorpusMessage {
    role: String,
    content: String,
    #[serde(default)]
    reasoning: String,
    #[serde(default)]
    calls: Vec<CorpusCall>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

#[derive(Deserialize, Clone)]
struct CorpusCall {
    name: String,
    arguments: String,
    #[serde(default)]
    id: String,
}

#[derive(Deserialize)]
struct Expected {
    content: String,
    reasoning: String,
    calls: Vec<CorpusCall>,
}

/// What the filter made of a case: content, reasoning (both trimmed) and calls.
#[derive(Debug, PartialEq)]
struct Read {
    content: String,
    reasoning: String,
    calls: Vec<(String, Value)>,
}

/// Cases shepherd reads otherwise on purpose: (template, line in test-chat.cpp, why).
/// docs/FAMILIES.md lists them too.
const DIFFERENCES: &[(&str, u32, &str)] = &[
    (
        "google-gemma-4-31B-it",
        3173,
        "a stray `<|channel>` before `<|channel>thought` is shown: alone it would be a \
         prefix of Gemma 4's reasoning marker, and no marker of the table is another's \
         prefix, so that each is known the moment it is complete",
    ),
    (
        "Apriel-1.6-15b-Thinker-fixed",
        6211,
        "the words the prompt opened the reasoning with (\"Here are my reasoning \
         steps:\") are not repeated in the reasoning: the model did not write them",
    ),
    (
        "Apriel-1.6-15b-Thinker-fixed",
        6219,
        "the words the prompt opened the reasoning with are not repeated (as above)",
    ),
    (
        "openai-gpt-oss-120b",
        6547,
        "a message to a built-in tool nobody offered (`container.exec`) is shown as text \
         with a notice; llama.cpp drops it",
    ),
    (
        "openai-gpt-oss-120b",
        6556,
        "a message to a built-in tool nobody offered (`python`) is shown as text with a \
         notice; llama.cpp drops it",
    ),
];

/// A case's outcome.
enum Outcome {
    Right,
    Different(&'static str),
    NotApplicable(&'static str),
    Wrong(String),
}

fn arguments(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

fn expected(case: &Case) -> Read {
    let calls = case.expect.calls.iter();
    Read {
        content: case.expect.content.trim().to_string(),
        reasoning: case.expect.reasoning.trim().to_string(),
        calls: calls
            .map(|c| (c.name.clone(), arguments(&c.arguments)))
            .collect(),
    }
}

fn tool_specs(case: &Case) -> Vec<ToolSpec> {
    let spec = |t: &CorpusTool| ToolSpec {
        name: t.name.clone(),
        description: t.description.clone(),
        parameters: t.parameters.clone(),
    };
    case.tools.iter().map(spec).collect()
}

fn message(m: &CorpusMessage) -> Message {
    let mut message = match m.role.as_str() {
        "assistant" => Message::assistant(m.content.as_str()),
        "tool" => {
            let mut result = Message::user(m.content.as_str());
            result.role = Role::Tool;
            result.tool_call_id = m.tool_call_id.clone();
            result
        }
        _ => Message::user(m.content.as_str()),
    };
    if !m.reasoning.is_empty() {
        message.thinking = Some(m.reasoning.clone());
    }
    let call = |(i, c): (usize, &CorpusCall)| ToolCall {
        id: match c.id.is_empty() {
            true => format!("call_{i}"),
            false => c.id.clone(),
        },
        name: c.name.clone(),
        arguments: arguments(&c.arguments),
    };
    message.tool_calls = m.calls.iter().enumerate().map(call).collect();
    message
}

/// The end of the turn in a rendered probe: the first end-of-turn text of the
/// corpus's families (the in-process backend asks the model's own tokens).
fn turn_end(tail: &str) -> usize {
    const ENDS: &[&str] = &[
        "<|im_end|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "</s>",
        "<|end|>",
        "<end_of_turn>",
        "<turn|>",
        "<|endoftext|>",
        "<|END_OF_TURN_TOKEN|>",
        "<｜end▁of▁sentence｜>",
        "<|return|>",
        "<|call|>",
        "<|im_end_of_turn|>",
        "<|eot|>",
        "<|role_end|>",
        "<|message_sep|>",
    ];
    ENDS.iter()
        .filter_map(|end| tail.find(end))
        .min()
        .unwrap_or(tail.len())
}

/// The generation prompt a case's template renders for its messages and tools.
fn generation_prompt(template: &template::ChatTemplate, case: &Case, tools: &[ToolSpec]) -> String {
    let messages: Vec<Message> = match &case.messages {
        Some(messages) => messages.iter().map(message).collect(),
        None => vec![Message::user("Hey there!")],
    };
    let conversation = template::conversation("", &messages);
    let mut prepared = prepare(template, &conversation, tools);
    // llama.cpp passes `enable_thinking` to every template, true unless asked otherwise.
    let thinking = case.enable_thinking.unwrap_or(true);
    let extra = &mut prepared.context.extra;
    extra.insert("enable_thinking".into(), Value::Bool(thinking));
    prepared.render().unwrap_or_default()
}

/// What the filter makes of `chunks` after `prompt`.
fn read(
    chunks: &[&str],
    prompt: &str,
    tools: &[ToolSpec],
    learnt: Option<format::LearntCall>,
) -> Read {
    let mut filter = OutputFilter::for_tools(tools);
    if let Some(end) = format::prompt_end(prompt) {
        filter.after_prompt(end);
    }
    if let Some(learnt) = learnt {
        filter.learn(learnt);
    }
    let mut ignore = |_: Event| Flow::Continue;
    for chunk in chunks {
        filter.push(chunk, &mut ignore);
    }
    filter.finish(&mut ignore);
    let out = filter.into_output();
    Read {
        content: out.content.trim().to_string(),
        reasoning: out.thinking.trim().to_string(),
        calls: out
            .tool_calls
            .into_iter()
            .map(|c| (c.name, c.arguments))
            .collect(),
    }
}

fn outcome(case: &Case, template: &template::ChatTemplate) -> Outcome {
    if case.continue_final_message.is_some() {
        return Outcome::NotApplicable("an assistant prefill continued");
    }
    if case.json_schema {
        return Outcome::NotApplicable("a response-format case");
    }
    if case.is_partial {
        return Outcome::NotApplicable("a partial stream's snapshot");
    }
    if let Some((_, _, why)) = DIFFERENCES
        .iter()
        .find(|(t, line, _)| *t == case.template && *line == case.line)
    {
        return Outcome::Different(why);
    }
    let tools = tool_specs(case);
    let prompt = generation_prompt(template, case, &tools);
    let learnt = call_syntax(template, turn_end)
        .as_ref()
        .and_then(syntax::CallSyntax::learnt);
    let text = case.input.as_str();
    let whole = read(&[text], &prompt, &tools, learnt);
    let want = expected(case);
    // llama.cpp's default `reasoning_format` (none) leaves reasoning in the content;
    // shepherd always separates the reasoning it recognises.
    let unparsed = matches!(
        case.reasoning_format.as_deref(),
        None | Some("COMMON_REASONING_FORMAT_NONE")
    );
    let separated = !whole.reasoning.is_empty() && want.reasoning.is_empty();
    if whole != want && unparsed && separated && whole.calls == want.calls {
        return Outcome::Different(
            "reasoning_format none (llama.cpp's default) keeps reasoning in the content; \
             shepherd always separates the reasoning it recognises",
        );
    }
    if whole != want {
        let tail: String = prompt
            .chars()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        return Outcome::Wrong(format!(
            "after a prompt ending {tail:?}\n      got {whole:?}\n      want {want:?}"
        ));
    }
    for byte in 1..text.len() {
        if !text.is_char_boundary(byte) {
            continue;
        }
        let split = read(&[&text[..byte], &text[byte..]], &prompt, &tools, learnt);
        if split != whole {
            return Outcome::Wrong(format!("split at byte {byte}: got {split:?}"));
        }
    }
    Outcome::Right
}

fn corpus(tree: &Path) -> Vec<Case> {
    let python = std::env::var("SHEPHERD_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/chat_corpus.py");
    let out = Command::new(python)
        .arg(script)
        .arg(tree)
        .output()
        .expect("python3 runs scripts/chat_corpus.py");
    let _ = std::io::stderr().write_all(&out.stderr);
    assert!(out.status.success(), "chat_corpus.py failed");
    serde_json::from_slice(&out.stdout).expect("chat_corpus.py prints a JSON list")
}

#[derive(Default)]
struct Tally {
    right: usize,
    different: Vec<String>,
    not_applicable: BTreeMap<&'static str, usize>,
    wrong: Vec<String>,
    /// Per template: (right, applicable).
    by_template: BTreeMap<String, (usize, usize)>,
}

#[test]
fn every_case_of_llama_cpps_chat_corpus_reads_as_llama_cpp_reads_it() {
    let Some(dir) = std::env::var_os(template_corpus::CORPUS_VAR).map(PathBuf::from) else {
        let skipped = format!(
            "chat corpus: skipped, {} is not set (make test sets it)\n",
            template_corpus::CORPUS_VAR
        );
        let _ = std::io::stderr().write_all(skipped.as_bytes());
        return;
    };
    let tree = dir.join("../..");
    let cases = corpus(&tree);
    assert!(cases.len() >= 400, "only {} cases read", cases.len());
    let mut templates = BTreeMap::new();
    let mut tally = Tally::default();
    for case in &cases {
        let template = templates.entry(case.template.clone()).or_insert_with(|| {
            let path = dir.join(format!("{}.jinja", case.template));
            let source = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            template_corpus::load(&case.template, &source)
        });
        let outcome = outcome(case, template);
        let place = format!("{} (test-chat.cpp:{})", case.template, case.line);
        let counts = tally.by_template.entry(case.template.clone()).or_default();
        match outcome {
            Outcome::Right => {
                tally.right += 1;
                counts.0 += 1;
                counts.1 += 1;
            }
            Outcome::Different(why) => tally.different.push(format!("{place}: {why}")),
            Outcome::NotApplicable(why) => *tally.not_applicable.entry(why).or_default() += 1,
            Outcome::Wrong(what) => {
                counts.1 += 1;
                tally.wrong.push(format!(
                    "{place}: {}\n      {what}",
                    case.input.escape_debug()
                ));
            }
        }
    }
    let mut summary = format!(
        "chat corpus: {} cases; {} right, {} deliberate differences, {} wrong; not applicable: {:?}\n",
        cases.len(),
        tally.right,
        tally.different.len(),
        tally.wrong.len(),
        tally.not_applicable
    );
    for (template, (right, applicable)) in &tally.by_template {
        summary.push_str(&format!("  {template}: {right}/{applicable}\n"));
    }
    for different in &tally.different {
        summary.push_str(&format!("  different: {different}\n"));
    }
    for wrong in &tally.wrong {
        summary.push_str(&format!("  WRONG {wrong}\n"));
    }
    let _ = std::io::stderr().write_all(summary.as_bytes());
    assert!(tally.wrong.is_empty(), "{} cases wrong", tally.wrong.len());
}

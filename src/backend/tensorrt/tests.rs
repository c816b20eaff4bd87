//! The TensorRT-LLM backend against the scripted test library
//! (`tests/trtllm_testlib/trtllm_testlib.c`, feature `tensorrt-testlib`).
//!
//! Each test builds its own engine directory: a small Llama-2-style tokenizer
//! (SentencePiece `▁` spaces, byte fallback, so spaces and multi-byte characters
//! are decoded the hard way), a ChatML template, an engine `config.json`, and the
//! script the test library plays. The library logs every call to `testlib.log`
//! in the same directory, which the tests read to check what the backend sent.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{json, Value};

use super::*;
use crate::core::error::ErrorKind;

const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Words that become whole tokens (with their `▁` space) in the fixture vocabulary.
const WORDS: [&str; 12] = [
    "▁Hello", "▁world", "▁how", "▁are", "▁you", "▁It", "▁is", "▁noon", "▁abc", "▁h", "llo", "▁tell",
];

const SPECIALS: [&str; 7] = [
    "<unk>",
    "<s>",
    "</s>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
];

/// A Llama-2-style tokenizer.json: byte-fallback BPE over `▁`-spaced text.
fn tokenizer_json() -> Value {
    let mut vocab = serde_json::Map::new();
    let add = |vocab: &mut serde_json::Map<String, Value>, token: &str| {
        if !vocab.contains_key(token) {
            let id = vocab.len();
            vocab.insert(token.to_string(), json!(id));
        }
    };
    for special in SPECIALS {
        add(&mut vocab, special);
    }
    for byte in 0..=255u8 {
        add(&mut vocab, &format!("<0x{byte:02X}>"));
    }
    add(&mut vocab, "▁");
    for c in (0x21u8..0x7F).map(char::from) {
        add(&mut vocab, &c.to_string());
    }
    let mut merges = Vec::new();
    for word in WORDS {
        let chars: Vec<char> = word.chars().collect();
        for end in 2..=chars.len() {
            let left: String = chars[..end - 1].iter().collect();
            let right = chars[end - 1].to_string();
            let merged: String = chars[..end].iter().collect();
            if !vocab.contains_key(&merged) {
                merges.push(format!("{left} {right}"));
                add(&mut vocab, &merged);
            }
        }
    }
    let added: Vec<Value> = SPECIALS
        .iter()
        .enumerate()
        .map(|(id, content)| {
            json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
        ]},
        "pre_tokenizer": null,
        "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}
        ]},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>",
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                  "vocab": vocab, "merges": merges}
    })
}

/// A test's engine directory, removed when the test ends.
pub(crate) struct EngineDir(PathBuf);

impl std::ops::Deref for EngineDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for EngineDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh engine directory playing `script`.
pub(crate) fn engine(name: &str, script: &str) -> EngineDir {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "shepherd-trt-{}-{}-{name}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let write = |file: &str, value: &Value| {
        std::fs::write(dir.join(file), serde_json::to_string_pretty(value).unwrap()).unwrap()
    };
    write("tokenizer.json", &tokenizer_json());
    write(
        "tokenizer_config.json",
        &json!({"bos_token": {"content": "<s>"}, "eos_token": "<|im_end|>", "chat_template": CHATML}),
    );
    write("generation_config.json", &json!({"eos_token_id": [4, 2]}));
    write(
        "config.json",
        &json!({"build_config": {"max_seq_len": 256, "max_input_len": 220}, "pretrained_config": {}}),
    );
    std::fs::write(dir.join("testlib.script"), script).unwrap();
    EngineDir(dir)
}

pub(crate) fn backend(dir: &Path) -> TensorRtBackend {
    TensorRtBackend::new(TensorRtConfig::new(dir.to_path_buf())).expect("the test engine loads")
}

pub(crate) fn tokenizer(dir: &Path) -> EngineTokenizer {
    EngineTokenizer::load(dir).unwrap()
}

/// The ids of `text` as the model would generate it (no `▁` added in front).
pub(crate) fn ids(dir: &Path, text: &str) -> Vec<u32> {
    let tok = tokenizer(dir);
    let mut ids = tok.encode(text).unwrap();
    // The Prepend normalizer adds a `▁` before the text; a reply's first word has its own.
    if ids.first() == tok.token_id("▁").as_ref() {
        ids.remove(0);
    }
    ids
}

/// A `chunk` (or `final REASON`) script line.
pub(crate) fn line(head: &str, ids: &[u32]) -> String {
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    format!("{head} {}\n", list.join(" "))
}

pub(crate) fn log(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("testlib.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

pub(crate) fn field<'a>(line: &'a str, name: &str) -> &'a str {
    let key = format!(" {name}=");
    let start = line
        .find(&key)
        .unwrap_or_else(|| panic!("{name} in {line}"))
        + key.len();
    line[start..].split(' ').next().unwrap()
}

fn question(text: &str) -> Session {
    let mut session = Session::new("You are helpful.");
    session.messages.push(Message::user(text));
    session
}

pub(crate) fn sampling(max_tokens: u32, stop: &[&str]) -> Sampling {
    Sampling {
        max_tokens: Some(max_tokens),
        stop: stop.iter().map(|s| s.to_string()).collect(),
        ..Sampling::default()
    }
}

fn ask(
    llm: &mut TensorRtBackend,
    sampling: &Sampling,
    sink: &mut dyn EventSink,
) -> Result<Reply, BackendError> {
    let request = GenerateRequest {
        tools: &[],
        tool_choice: &ToolChoice::Auto,
        sampling,
        stream: true,
    };
    llm.generate(&question("Hi"), &request, sink)
}

pub(crate) fn contents(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Content(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

fn stats(events: &[Event]) -> Stats {
    events
        .iter()
        .find_map(|e| match e {
            Event::Stats(s) => Some(s.clone()),
            _ => None,
        })
        .expect("a stats event")
}

#[test]
fn streamed_reply_keeps_spaces_at_chunk_boundaries() {
    let probe = engine("probe", "");
    let reply_ids = ids(&probe, "Hello world, how are you?");
    assert!(reply_ids.len() >= 6, "{reply_ids:?}");
    // One token per response: every word's `▁` space arrives at a chunk boundary.
    let mut script = String::from("request\n");
    for id in &reply_ids {
        script += &line("chunk", &[*id]);
    }
    script += &line("final end_id", &[4]);
    let dir = engine("stream", &script);
    let mut llm = backend(&dir);
    let mut events = Vec::new();
    let reply = ask(&mut llm, &sampling(64, &[]), &mut events).unwrap();
    assert_eq!(contents(&events).concat(), "Hello world, how are you?");
    assert!(
        contents(&events).len() > 3,
        "streamed, not one block: {events:?}"
    );
    assert_eq!(reply.content, "Hello world, how are you?");
    assert_eq!(reply.finish, FinishReason::Stop);
    let enqueued = log(&dir)
        .into_iter()
        .find(|l| l.starts_with("enqueue"))
        .unwrap();
    assert_eq!(field(&enqueued, "end_id"), "4");
    assert_eq!(field(&enqueued, "stop_token_ids"), "2");
    assert_eq!(field(&enqueued, "streaming"), "1");
    assert_eq!(field(&enqueued, "max_tokens"), "64");
    let n_prompt: u64 = field(&enqueued, "n_tokens").parse().unwrap();
    let prompt_start = field(&enqueued, "tokens")
        .split(',')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        prompt_start, "3",
        "the ChatML template's <|im_start|> comes first"
    );
    let stats = stats(&events);
    assert_eq!(stats.prompt_tokens, n_prompt);
    assert_eq!(
        stats.completion_tokens,
        reply_ids.len() as u64,
        "the end id is not counted"
    );
    assert_eq!(stats.context_used, n_prompt + reply_ids.len() as u64);
    assert_eq!(stats.context_size, 256);
    assert_eq!(
        reply.usage.unwrap().completion_tokens,
        reply_ids.len() as u64
    );
}

#[test]
fn multibyte_characters_split_across_responses_come_out_whole() {
    let text = "héllo 🦀 wörld";
    let probe = engine("probe", "");
    let reply_ids = ids(&probe, text);
    let tok = tokenizer(&probe);
    assert!(
        reply_ids.contains(&tok.token_id("<0xC3>").unwrap()),
        "é is spelled in byte tokens: {reply_ids:?}"
    );
    // Every split point of the reply into two responses gives the same text.
    for cut in 0..=reply_ids.len() {
        let script = format!(
            "request\n{}{}",
            line("chunk", &reply_ids[..cut]),
            line("final end_id", &reply_ids[cut..])
        );
        let dir = engine("utf8", &script);
        let mut llm = backend(&dir);
        let mut events = Vec::new();
        let reply = ask(&mut llm, &sampling(64, &[]), &mut events).unwrap();
        let shown = contents(&events);
        assert_eq!(shown.concat(), text, "cut at {cut}: {shown:?}");
        assert!(!shown.concat().contains('\u{FFFD}'), "cut at {cut}");
        assert_eq!(reply.content, text);
    }
}

#[test]
fn stop_string_spanning_tokens_ends_the_reply_and_the_request() {
    let probe = engine("probe", "");
    // "abc END tail": E, N and D are single-character tokens in separate responses.
    let reply_ids = ids(&probe, "abc END tail");
    let mut script = String::from("request\n");
    for id in &reply_ids {
        script += &line("chunk", &[*id]);
    }
    let dir = engine("stop", &script);
    let mut llm = backend(&dir);
    let mut events = Vec::new();
    let reply = ask(&mut llm, &sampling(64, &["END"]), &mut events).unwrap();
    assert_eq!(contents(&events).concat(), "abc ");
    assert_eq!(reply.finish, FinishReason::Stop);
    assert!(!reply.content.contains('E'), "{reply:?}");
    assert!(
        log(&dir).iter().any(|l| l == "cancel id=1"),
        "{:?}",
        log(&dir)
    );
}

#[test]
fn end_of_turn_token_inside_a_chunk_ends_the_reply() {
    let probe = engine("probe", "");
    let mut chunk = ids(&probe, "It is noon");
    chunk.push(2); // `</s>`: an end id from generation_config.json, not the executor's end id
    chunk.extend(ids(&probe, "garbage"));
    let dir = engine(
        "eot",
        &format!("request\n{}wait_cancel\n", line("chunk", &chunk)),
    );
    let mut llm = backend(&dir);
    let mut events = Vec::new();
    let reply = ask(&mut llm, &sampling(64, &[]), &mut events).unwrap();
    assert_eq!(reply.content, "It is noon");
    assert_eq!(reply.finish, FinishReason::Stop);
    assert!(log(&dir).iter().any(|l| l == "cancel id=1"));
}

#[test]
fn a_session_with_an_image_is_refused_before_the_executor_sees_it() {
    let probe = engine("probe", "");
    let reply_ids = ids(&probe, "A cat");
    // The executor would answer: only the refusal keeps it from being asked.
    let dir = engine(
        "image",
        &format!("request\n{}", line("final end_id", &reply_ids)),
    );
    let mut llm = backend(&dir);
    let mut session = question("What is this?");
    let image =
        crate::core::Image::from_bytes(crate::core::image::test_png(4, 4, [1, 2, 3])).unwrap();
    session.messages[0]
        .images
        .push(crate::core::ImagePart { at: 0, image });
    let request = GenerateRequest {
        tools: &[],
        tool_choice: &ToolChoice::Auto,
        sampling: &sampling(4, &[]),
        stream: true,
    };
    let mut events = Vec::new();
    match llm.generate(&session, &request, &mut events) {
        Err(BackendError::Invalid { message, .. }) => {
            assert!(message.contains("takes no images"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn max_tokens_cuts_the_reply_with_length() {
    let probe = engine("probe", "");
    let reply_ids = ids(&probe, "Hello world how are you");
    let dir = engine(
        "length",
        &format!("request\n{}", line("final end_id", &reply_ids)),
    );
    let mut llm = backend(&dir);
    let mut events = Vec::new();
    let reply = ask(&mut llm, &sampling(2, &[]), &mut events).unwrap();
    assert_eq!(reply.finish, FinishReason::Length);
    assert_eq!(reply.content, "Hello world");
    assert_eq!(stats(&events).completion_tokens, 2);
}

#[test]
fn cancel_from_the_sink_stops_mid_stream() {
    let probe = engine("probe", "");
    let reply_ids = ids(&probe, "Hello world how are you");
    let script = format!(
        "request\n{}{}{}",
        line("chunk", &reply_ids[..1]),
        line("chunk", &reply_ids[1..2]),
        line("final end_id", &reply_ids[2..])
    );
    let dir = engine("cancel", &script);
    let mut llm = backend(&dir);
    let mut seen = Vec::new();
    let mut sink = |event: Event| {
        let is_content = matches!(event, Event::Content(_));
        seen.push(event);
        if is_content {
            Flow::Cancel
        } else {
            Flow::Continue
        }
    };
    let reply = ask(&mut llm, &sampling(64, &[]), &mut sink).unwrap();
    assert_eq!(reply.finish, FinishReason::Cancelled);
    assert_eq!(contents(&seen), ["Hello"]);
    assert!(log(&dir).iter().any(|l| l == "cancel id=1"));
    assert_eq!(stats(&seen).completion_tokens, 1);
}

/// A sink whose user presses cancel after the first text was shown, once the
/// backend has asked twice more: by then it has waited on a silent executor.
struct CancelAfterText {
    events: Vec<Event>,
    asked_after_text: std::cell::Cell<u32>,
}

impl EventSink for CancelAfterText {
    fn emit(&mut self, event: Event) -> Flow {
        self.events.push(event);
        Flow::Continue
    }

    fn cancelled(&self) -> bool {
        if !self.events.iter().any(|e| matches!(e, Event::Content(_))) {
            return false;
        }
        self.asked_after_text.set(self.asked_after_text.get() + 1);
        self.asked_after_text.get() > 2
    }
}

#[test]
fn cancel_while_the_executor_is_silent_is_seen_between_responses() {
    let probe = engine("probe", "");
    let first = ids(&probe, "Hello");
    let dir = engine(
        "silent",
        &format!("request\n{}wait_cancel\n", line("chunk", &first)),
    );
    let mut llm = backend(&dir);
    let mut sink = CancelAfterText {
        events: Vec::new(),
        asked_after_text: std::cell::Cell::new(0),
    };
    let reply = ask(&mut llm, &sampling(64, &[]), &mut sink).unwrap();
    assert_eq!(reply.finish, FinishReason::Cancelled);
    assert_eq!(contents(&sink.events).concat(), "Hello");
    assert!(log(&dir).iter().any(|l| l == "cancel id=1"));
}

#[test]
fn slow_responses_are_waited_for() {
    let probe = engine("probe", "");
    let reply_ids = ids(&probe, "Hello world");
    // Longer than one poll slice, so the backend times out and waits again.
    let script = format!(
        "request\n{}delay_ms 120\n{}",
        line("chunk", &reply_ids[..1]),
        line("final end_id", &reply_ids[1..])
    );
    let dir = engine("slow", &script);
    let mut llm = backend(&dir);
    let mut events = Vec::new();
    let reply = ask(&mut llm, &sampling(64, &[]), &mut events).unwrap();
    assert_eq!(reply.content, "Hello world");
    assert_eq!(reply.finish, FinishReason::Stop);
}

#[test]
fn executor_errors_are_typed_and_keep_their_message() {
    let probe = engine("probe", "");
    let first = ids(&probe, "Hello");
    let dir = engine(
        "error",
        &format!(
            "request\n{}error CUDA out of memory\n",
            line("chunk", &first)
        ),
    );
    let mut llm = backend(&dir);
    let err = ask(&mut llm, &sampling(64, &[]), &mut Vec::new()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    assert!(err.to_string().contains("CUDA out of memory"), "{err}");

    let dir = engine("enqueue-error", "request\nenqueue_error queue is full\n");
    let mut llm = backend(&dir);
    let err = ask(&mut llm, &sampling(64, &[]), &mut Vec::new()).unwrap_err();
    assert!(err.to_string().contains("queue is full"), "{err}");

    let dir = engine("create-error", "create_error no CUDA device\n");
    let err = TensorRtBackend::new(TensorRtConfig::new(dir.to_path_buf()))
        .err()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("no CUDA device"), "{err}");
}

#[test]
fn prompt_that_does_not_fit_is_a_typed_overflow_before_enqueueing() {
    let dir = engine("overflow", "request\nfinal end_id\n");
    let mut llm = backend(&dir);
    let request = GenerateRequest {
        tools: &[],
        tool_choice: &ToolChoice::Auto,
        sampling: &sampling(64, &[]),
        stream: true,
    };
    let mut events = Vec::new();
    // Each word is several tokens here: far over the 256-token context.
    let err = llm
        .generate(
            &question(&"tell me more ".repeat(60)),
            &request,
            &mut events,
        )
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ContextOverflow, "{err}");
    assert!(err.tokens_over().unwrap() > 0);
    assert!(events.is_empty());
    // max_tokens is a cap, not a reservation: far past the context it is no error.
    let small = question("Hi");
    let capped = sampling(100_000, &[]);
    let request = GenerateRequest {
        sampling: &capped,
        ..request
    };
    assert!(llm.prepare(&small, &request).is_ok());
    // A prompt that fits, but not with the answer's reserve (a quarter of this
    // 256-token context), overflows by what it lacks.
    let (fits, err) = (1..200)
        .map(|n| (n, llm.prepare(&question(&"more ".repeat(n)), &request)))
        .find_map(|(n, prepared)| prepared.err().map(|err| (n - 1, err)))
        .expect("some length overflows");
    let last = llm
        .prepare(&question(&"more ".repeat(fits)), &request)
        .unwrap();
    assert!(last.prompt_tokens() <= 256 - 64, "{}", last.prompt_tokens());
    let over = err.tokens_over().expect("by how much");
    assert!((1..=4).contains(&over), "{err}");
    assert!(
        !log(&dir).iter().any(|l| l.starts_with("enqueue")),
        "{:?}",
        log(&dir)
    );
}

#[test]
fn engine_limits_read_current_and_older_configs() {
    let dir = engine("limits", "");
    let check = |config: Value, expected: Option<(u32, Option<u32>)>| {
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        let got = engine_limits(&dir)
            .ok()
            .map(|l| (l.max_seq_len, l.max_input_len));
        assert_eq!(got, expected, "{config}");
    };
    check(
        json!({"build_config": {"max_seq_len": 4096, "max_input_len": 1024}}),
        Some((4096, Some(1024))),
    );
    check(
        json!({"builder_config": {"max_input_len": 1000, "max_output_len": 24}}),
        Some((1024, Some(1000))),
    );
    check(
        json!({"pretrained_config": {"max_position_embeddings": 2048}}),
        Some((2048, None)),
    );
    check(json!({"pretrained_config": {}}), None);
}

#[test]
fn special_tokens_and_template_come_from_the_engine_dir() {
    let dir = engine("tokens", "");
    let tok = tokenizer(&dir);
    assert_eq!(
        (tok.bos_text.as_str(), tok.eos_text.as_str()),
        ("<s>", "<|im_end|>")
    );
    assert_eq!(tok.eos_id, Some(4));
    assert_eq!(tok.end_ids, BTreeSet::from([2, 4]));
    assert_eq!(tok.chat_template.as_deref(), Some(CHATML));
    // A chat_template.jinja file wins over tokenizer_config.json.
    std::fs::write(
        dir.join("chat_template.jinja"),
        "{{ messages[0]['content'] }}",
    )
    .unwrap();
    assert_eq!(
        tokenizer(&dir).chat_template.as_deref(),
        Some("{{ messages[0]['content'] }}")
    );
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    let err = EngineTokenizer::load(&dir).err().unwrap();
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
}

#[test]
fn marker_tokens_reach_the_filter_and_other_special_tokens_stay_out() {
    let probe = engine("probe", "");
    let tok = tokenizer(&probe);
    let (think, end_think) = (
        tok.token_id("<think>").unwrap(),
        tok.token_id("</think>").unwrap(),
    );
    let start = tok.token_id("<|im_start|>").unwrap();
    let mut reply_ids = vec![think];
    reply_ids.extend(ids(&probe, "Hello"));
    reply_ids.push(end_think);
    reply_ids.push(start);
    reply_ids.extend(ids(&probe, "world"));
    let mut script = String::from("request\n");
    for id in &reply_ids {
        script += &line("chunk", &[*id]);
    }
    script += &line("final end_id", &[4]);
    let dir = engine("markers", &script);
    let mut llm = backend(&dir);
    let mut events = Vec::new();
    let reply = ask(&mut llm, &sampling(64, &[]), &mut events).unwrap();
    assert_eq!(reply.thinking.trim(), "Hello");
    assert_eq!(reply.content.trim(), "world", "{events:?}");
}

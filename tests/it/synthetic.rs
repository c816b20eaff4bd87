//! `scripts/synthetic_gguf.py`: a random-weight GGUF with SmolLM2's shape and its
//! real tokenizer (what the GPU check writes on a box with no model hub) loads in
//! shepherd, generates exactly what it is asked for, and `shepherd bench` measures it.

use std::path::PathBuf;
use std::process::Command;

use crate::harness::{Sandbox, TempDir};
use crate::models::smollm2;

/// Runs the writer (standard library only: any python3) with `args`.
pub(crate) fn writer(args: &[&std::ffi::OsStr]) {
    let python = std::env::var("SHEPHERD_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/synthetic_gguf.py");
    let status = Command::new(python)
        .arg(script)
        .args(args)
        .status()
        .expect("run synthetic_gguf.py");
    assert!(status.success(), "synthetic_gguf.py {args:?} failed");
}

/// A model of `shape` with the tokenizer of `tokenizer`, written into `dir`.
fn write_model(dir: &TempDir, shape: &str, tokenizer: &std::path::Path) -> PathBuf {
    let out = dir.path().join(format!("{shape}.gguf"));
    writer(&[
        "--like".as_ref(),
        shape.as_ref(),
        "--tokenizer-from".as_ref(),
        tokenizer.as_ref(),
        out.as_ref(),
    ]);
    out
}

#[test]
fn a_synthetic_smollm2_shape_loads_and_generates_what_is_asked() {
    let dir = TempDir::new("synthetic-gguf");
    let model = write_model(&dir, "smollm2-135m", &smollm2());
    let sandbox = Sandbox::new("synthetic-run");
    let model = model.to_str().expect("UTF-8");
    let mut args = vec!["-m", model];
    args.extend(["--threads", crate::harness::MODEL_THREADS]);
    args.extend("--json --notools --no-prompt-cache --temperature 0 --max-tokens 12 -e".split(' '));
    args.push("Say something.");
    let run = sandbox.run(&args, "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let stats = run.json_stats();
    // The writer silences the end-of-turn rows, so the reply runs to the cap.
    assert_eq!(stats["completion_tokens"], 12, "{stats}");
    assert!(stats["prompt_tokens"].as_u64().unwrap() > 5, "{stats}");

    // The same file through `shepherd bench`: one line per test, llama-bench's fields.
    let bench = sandbox.run(
        &[
            "-m",
            model,
            "--threads",
            crate::harness::MODEL_THREADS,
            "bench",
            "-p",
            "32",
            "-n",
            "4",
            "-r",
            "1",
            "-o",
            "jsonl",
        ],
        "",
    );
    assert_eq!(bench.status, Some(0), "{}", bench.stderr);
    let lines = bench.json_lines();
    let tests: Vec<&str> = lines.iter().map(|l| l["test"].as_str().unwrap()).collect();
    assert_eq!(tests, ["pp32", "tg4"], "{}", bench.stdout);
    for line in &lines {
        assert!(line["avg_ts"].as_f64().unwrap() > 0.0, "{line}");
        assert_eq!(line["samples_ts"].as_array().unwrap().len(), 1, "{line}");
    }
}

#[test]
fn the_writer_is_deterministic_and_the_tokenizer_alone_travels() {
    let dir = TempDir::new("synthetic-tokenizer");
    let tokenizer = dir.path().join("tokenizer.gguf");
    writer(&[
        "--extract-tokenizer".as_ref(),
        smollm2().as_ref(),
        tokenizer.as_ref(),
    ]);
    let size = std::fs::metadata(&tokenizer).unwrap().len();
    assert!(size < 4_000_000, "the tokenizer alone is {size} bytes");
    // A model from the small file is the model from the whole one, byte for byte.
    let from_model = write_model(&dir, "smollm2-135m", &smollm2());
    let copy = dir.path().join("copy.gguf");
    std::fs::rename(&from_model, &copy).unwrap();
    let from_tokenizer = write_model(&dir, "smollm2-135m", &tokenizer);
    assert!(std::fs::read(&copy).unwrap() == std::fs::read(&from_tokenizer).unwrap());
}

/// The templates directory of llama.cpp's corpus (`make test` fetches it and names it
/// in `SHEPHERD_TEMPLATE_CORPUS`); `None` under a plain `cargo test`.
pub(crate) fn template_corpus() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("SHEPHERD_TEMPLATE_CORPUS")?);
    assert!(
        dir.is_dir(),
        "SHEPHERD_TEMPLATE_CORPUS={} is no directory",
        dir.display()
    );
    Some(dir)
}

const LLAMA_3_1: &str = "meta-llama-Llama-3.1-8B-Instruct.jinja";
const GPT_OSS: &str = "openai-gpt-oss-120b.jinja";

/// Families whose templates frame turns and calls with special tokens: the template
/// file and the markers the tokenizer must know as control tokens.
const MARKED_FAMILIES: [(&str, &[&str]); 7] = [
    // shepherd's own made-up family (tests/fixtures/templates): its call tag is in no
    // marker table, so it must be learnt from the template.
    (
        "learnt-fn.jinja",
        &[
            "<|sys|>", "<|usr|>", "<|bot|>", "<|out|>", "<|stop|>", "<|fn|>", "<|/fn|>",
        ],
    ),
    (
        "Qwen-Qwen2.5-7B-Instruct.jinja",
        &["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"],
    ),
    (
        LLAMA_3_1,
        &[
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|python_tag|>",
        ],
    ),
    (
        GPT_OSS,
        &[
            "<|start|>",
            "<|end|>",
            "<|message|>",
            "<|channel|>",
            "<|constrain|>",
            "<|return|>",
            "<|call|>",
        ],
    ),
    (
        "Mistral-Small-3.2-24B-Instruct-2506.jinja",
        &[
            "[INST]",
            "[/INST]",
            "[TOOL_CALLS]",
            "[ARGS]",
            "[CALL_ID]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[SYSTEM_PROMPT]",
            "[/SYSTEM_PROMPT]",
        ],
    ),
    (
        "moonshotai-Kimi-K2.jinja",
        &[
            "<|im_system|>",
            "<|im_user|>",
            "<|im_assistant|>",
            "<|im_middle|>",
            "<|im_end|>",
            "<|tool_calls_section_begin|>",
            "<|tool_calls_section_end|>",
            "<|tool_call_begin|>",
            "<|tool_call_argument_begin|>",
            "<|tool_call_end|>",
        ],
    ),
    (
        "deepseek-ai-DeepSeek-V3.1.jinja",
        &[
            "<｜User｜>",
            "<｜Assistant｜>",
            "<｜tool▁calls▁begin｜>",
            "<｜tool▁calls▁end｜>",
            "<｜tool▁call▁begin｜>",
            "<｜tool▁call▁end｜>",
            "<｜tool▁sep｜>",
            "<｜tool▁output▁begin｜>",
            "<｜tool▁output▁end｜>",
            "<think>",
            "</think>",
        ],
    ),
];

/// Writes a synthetic model in `dir` carrying `file`'s template (shepherd's own
/// fixtures first, then llama.cpp's corpus) and these special tokens.
fn family_model(dir: &TempDir, corpus: &std::path::Path, file: &str, specials: &[&str]) -> PathBuf {
    let tokenizer = smollm2();
    let model = dir.path().join(file.replace(".jinja", ".gguf"));
    let own = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/templates");
    let template = match own.join(file) {
        path if path.is_file() => path,
        _ => corpus.join(file),
    };
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "--like".as_ref(),
        "smollm2-135m".as_ref(),
        "--tokenizer-from".as_ref(),
        tokenizer.as_os_str(),
        "--chat-template".as_ref(),
        template.as_os_str(),
    ];
    for special in specials {
        args.push("--special".as_ref());
        args.push(std::ffi::OsStr::new(special));
    }
    args.push(model.as_os_str());
    writer(&args);
    model
}

/// A conversation with a tool call (with reasoning) and its result, then a second
/// round, sent through the OpenAI API to the in-process backend: every turn after the
/// first renders through the family's own template and special tokens.
#[test]
fn multi_turn_tool_conversations_render_with_special_token_templates() {
    let Some(corpus) = template_corpus() else {
        println!("SHEPHERD_TEMPLATE_CORPUS unset: skipped (make test sets it)");
        return;
    };
    let dir = TempDir::new("synthetic-families");
    for (file, specials) in MARKED_FAMILIES {
        converse(&family_model(&dir, &corpus, file, specials), file);
    }
}

/// A server on `model`, healthy: the child, its base URL, an agent and its log.
fn serve(
    model: &std::path::Path,
    family: &str,
    sandbox: &Sandbox,
) -> (
    std::process::Child,
    String,
    ureq::Agent,
    std::sync::Arc<std::sync::Mutex<String>>,
) {
    let model = model.to_str().expect("UTF-8");
    let args = [
        "--server",
        "--port",
        "0",
        "--backend",
        "llamacpp",
        "-m",
        model,
        "--threads",
        crate::harness::MODEL_THREADS,
        "--context-size",
        "4096",
        "--no-prompt-cache",
        "--debug=llm",
    ];
    let mut child = sandbox.spawn(&args);
    let (address, log) = crate::harness::wait_listening(&mut child);
    let base = format!("http://{}", address.trim_start_matches("http://"));
    let agent = crate::harness::http_agent(std::time::Duration::from_secs(120));
    let healthy = || {
        agent
            .get(&format!("{base}/health"))
            .call()
            .is_ok_and(|r| r.status() == 200)
    };
    let ready = crate::harness::poll_until(std::time::Duration::from_secs(60), healthy);
    assert!(
        ready,
        "{family}: never healthy; log: {}",
        log.lock().unwrap()
    );
    (child, base, agent, log)
}

/// The get_weather tool both conversations offer.
fn weather_tool() -> serde_json::Value {
    serde_json::json!([{"type": "function", "function": {"name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}])
}

/// Posts a chat request that must be answered (200, `what` and the server's log
/// otherwise): the reply.
fn chat_ok(
    agent: &ureq::Agent,
    base: &str,
    body: &serde_json::Value,
    what: &str,
    log: &std::sync::Mutex<String>,
) -> serde_json::Value {
    let (status, text) = chat(agent, base, body);
    assert_eq!(status, 200, "{what}: {text}\nlog: {}", log.lock().unwrap());
    serde_json::from_str(&text).expect("JSON")
}

/// Posts a chat request: its status and body.
fn chat(agent: &ureq::Agent, base: &str, body: &serde_json::Value) -> (u16, String) {
    let response = agent
        .post(&format!("{base}/v1/chat/completions"))
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .expect("post");
    let status = response.status().as_u16();
    (status, response.into_body().read_to_string().expect("body"))
}

/// Three turns, each with two parallel calls and their two results, through
/// `--server` on models carrying templates that cannot hold two calls in one message
/// (Llama 3.1 raises), want roles to alternate (Gemma 2 has no tool role), or hold
/// them (Qwen3, gpt-oss): every turn renders and is answered, none is a 500.
#[test]
fn parallel_calls_render_for_three_turns_in_every_family() {
    use serde_json::json;
    let Some(corpus) = template_corpus() else {
        println!("SHEPHERD_TEMPLATE_CORPUS unset: skipped (make test sets it)");
        return;
    };
    let marked = |file: &str| {
        let family = MARKED_FAMILIES.iter().find(|(f, _)| *f == file);
        family.expect("a marked family").1
    };
    let families: [(&str, &[&str]); 4] = [
        (LLAMA_3_1, marked(LLAMA_3_1)),
        (
            "google-gemma-2-2b-it.jinja",
            &["<start_of_turn>", "<end_of_turn>"],
        ),
        (
            "Qwen-Qwen3-0.6B.jinja",
            &[
                "<|im_start|>",
                "<|im_end|>",
                "<tool_call>",
                "</tool_call>",
                "<think>",
                "</think>",
            ],
        ),
        (GPT_OSS, marked(GPT_OSS)),
    ];
    let dir = TempDir::new("synthetic-parallel");
    let tools = weather_tool();
    for (file, specials) in families {
        let model = family_model(&dir, &corpus, file, specials);
        let sandbox = Sandbox::new("synthetic-parallel");
        let (mut child, base, agent, log) = serve(&model, file, &sandbox);
        let mut messages = Vec::new();
        for turn in 0..3 {
            messages.push(json!({"role": "user", "content": "Weather in Paris and Rome?"}));
            let call = |n: usize, city: &str| {
                json!({"id": format!("call_{turn}_{n}"), "type": "function",
                       "function": {"name": "get_weather",
                                    "arguments": json!({"city": city}).to_string()}})
            };
            messages.push(json!({"role": "assistant", "content": "",
                                 "tool_calls": [call(0, "Paris"), call(1, "Rome")]}));
            messages.push(
                json!({"role": "tool", "tool_call_id": format!("call_{turn}_0"),
                                 "content": "Sunny, 22 C"}),
            );
            messages.push(
                json!({"role": "tool", "tool_call_id": format!("call_{turn}_1"),
                                 "content": "Rain, 14 C"}),
            );
            let body = json!({"model": "m", "messages": messages, "tools": tools,
                              "max_tokens": 2, "temperature": 0});
            let reply = chat_ok(&agent, &base, &body, &format!("{file} turn {turn}"), &log);
            let answer = reply["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or("");
            messages.push(json!({"role": "assistant", "content": answer}));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Against a server on `model`: a conversation with a call and its result, then a
/// follow-up; then a call forced with `tool_choice`, which must come out whole in
/// the family's own syntax (the template's probe found one: the log says so).
fn converse(model: &std::path::Path, family: &str) {
    use serde_json::json;
    let sandbox = Sandbox::new("synthetic-family");
    let (mut child, base, agent, log) = serve(model, family, &sandbox);
    let tools = weather_tool();
    let mut messages = vec![
        json!({"role": "system", "content": "You are terse."}),
        json!({"role": "user", "content": "Weather in Paris?"}),
        json!({"role": "assistant", "content": "", "reasoning_content": "The user wants the weather.",
               "tool_calls": [{"id": "call_0", "type": "function",
                   "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}),
        json!({"role": "tool", "tool_call_id": "call_0", "content": "18 C, clear"}),
    ];
    for round in 0..2 {
        let body = json!({"model": "m", "messages": messages, "tools": tools,
                          "max_tokens": 6, "temperature": 0});
        let reply = chat_ok(
            &agent,
            &base,
            &body,
            &format!("{family} round {round}"),
            &log,
        );
        let answer = &reply["choices"][0]["message"];
        assert_eq!(answer["role"], "assistant", "{family}: {reply}");
        assert_eq!(reply["usage"]["completion_tokens"], 6, "{family}: {reply}");
        messages.push(
            json!({"role": "assistant", "content": answer["content"].as_str().unwrap_or("")}),
        );
        messages.push(json!({"role": "user", "content": "And tomorrow?"}));
    }
    // A forced call: random weights, but the grammar makes it a whole, valid call.
    let count = json!([{"type": "function", "function": {"name": "count",
        "description": "Counts.",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}},
                       "required": ["n"]}}}]);
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "Count."}],
                      "tools": count, "tool_choice": "required", "max_tokens": 200,
                      "temperature": 0});
    let (_, text) = chat(&agent, &base, &body);
    let reply: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let choice = &reply["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{family}: {reply}");
    let call = &choice["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "count", "{family}: {reply}");
    let arguments: serde_json::Value =
        serde_json::from_str(call["arguments"].as_str().expect("arguments text")).expect("JSON");
    assert!(arguments["n"].is_i64(), "{family}: {reply}");
    // The same forced call cut halfway: finish reason `length`, and no call whose
    // arguments read whole (a client must not run it).
    let whole = reply["usage"]["completion_tokens"].as_u64().expect("usage");
    let mut cut = body.clone();
    cut["max_tokens"] = json!((whole / 2).max(1));
    let (_, text) = chat(&agent, &base, &cut);
    let reply: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let choice = &reply["choices"][0];
    assert_eq!(choice["finish_reason"], "length", "{family}: {reply}");
    for call in choice["message"]["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let written = call["function"]["arguments"].as_str().unwrap_or("");
        assert_ne!(
            serde_json::from_str::<serde_json::Value>(written).ok(),
            Some(arguments.clone()),
            "{family}: a cut call reads whole: {reply}"
        );
    }
    let log = log.lock().unwrap().clone();
    assert!(
        log.contains("the template's tool-call syntax: Some(CallSyntax"),
        "{family}: no call syntax found; log: {log}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// `/infill` on a model with fill-in-the-middle tokens (SmolLM2's shape and
/// tokenizer, with Qwen's FIM tokens added): llama-server's layout, token for
/// token, `[PRE] prefix [SUF] suffix [MID]`, where the user's code is text even
/// when it spells a FIM token; other files come before it. A model without
/// those tokens answers 501.
#[test]
fn infill_lays_out_the_fim_tokens_and_keeps_markup_in_code_as_text() {
    use crate::api_server::ApiServer;
    use serde_json::{json, Value};
    let dir = TempDir::new("synthetic-fim");
    let tokenizer = smollm2();
    let model = dir.path().join("fim.gguf");
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "--like".as_ref(),
        "smollm2-135m".as_ref(),
        "--tokenizer-from".as_ref(),
        tokenizer.as_os_str(),
    ];
    for special in ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"] {
        args.push("--special".as_ref());
        args.push(special.as_ref());
    }
    args.push(model.as_os_str());
    writer(&args);
    let server = ApiServer::with_gguf(&model, &["--no-prompt-cache", "--context-size", "2048"]);
    let count = |text: &str| {
        let (status, tokens) = server.post("/tokenize", &json!({ "content": text }));
        assert_eq!(status, 200, "{tokens}");
        tokens["tokens"].as_array().expect("tokens").len() as u64
    };
    let infill = |body: Value| {
        let (status, answer) = server.post("/infill", &body);
        assert_eq!(status, 200, "{body}: {answer}");
        answer
    };
    let (prefix, suffix) = ("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n");
    let base = json!({"input_prefix": prefix, "input_suffix": suffix, "n_predict": 4,
                      "temperature": 0, "return_tokens": true});
    let answer = infill(base.clone());
    // The writer silences end tokens, so the answer runs to n_predict.
    assert_eq!(answer["tokens_predicted"], json!(4), "{answer}");
    assert_eq!(
        answer["tokens"].as_array().map(Vec::len),
        Some(4),
        "{answer}"
    );
    // SmolLM2's tokenizer has StarCoder's `<repo_name>`, which llama.cpp takes
    // for the FIM repository token (and no file separator it knows): the
    // project's name comes first, as llama-server writes it (`[REP]myproject\n`;
    // /tokenize reads the marker).
    let framing = count("<repo_name>myproject\n");
    let laid_out = framing + 3 + count(prefix) + count(suffix);
    assert_eq!(answer["tokens_evaluated"], json!(laid_out), "{answer}");

    // Markup in the code is text: /tokenize reads `<|fim_middle|>` as one
    // token, the infill's prefix as the characters it is.
    let marked = "x = '<|fim_middle|>'";
    let mut body = base.clone();
    body["input_prefix"] = json!(marked);
    let answer = infill(body);
    let as_text = answer["tokens_evaluated"].as_u64().unwrap() - framing - 3 - count(suffix);
    assert!(as_text > count(marked), "{answer}: markup became a token");

    // Other files and a prompt text lengthen what is read.
    let mut body = base.clone();
    body["input_extra"] = json!([{"filename": "util.py", "text": "X = 1\n"}]);
    body["prompt"] = json!("a");
    let longer = infill(body)["tokens_evaluated"].as_u64().unwrap();
    // Without a file separator a file follows a plain-text one, not its name.
    let file = count("\n\n--- snippet ---\n\n") + count("X = 1\n");
    assert_eq!(longer, laid_out + file + count("a"));

    for (body, param) in [
        (json!({"input_suffix": suffix}), "input_prefix"),
        (
            json!({"input_prefix": prefix, "input_suffix": 3}),
            "input_suffix",
        ),
        (
            json!({"input_prefix": prefix, "input_suffix": suffix, "input_extra": [{"filename": "a"}]}),
            "input_extra[0].text",
        ),
    ] {
        let (status, error) = server.post("/infill", &body);
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["param"], json!(param), "{error}");
    }
    drop(server);
    let plain = ApiServer::with_model(&["--no-prompt-cache"]);
    let (status, error) = plain.post("/infill", &base);
    assert_eq!(status, 501, "{error}");
}

//! llama-server's reports beside the answer on `shepherd --server` with SmolLM2
//! and a small `--n_batch`, so a prompt takes several batches: the prompt's
//! progress (`return_progress`), the figures on every chunk
//! (`timings_per_token`) on chat completions, `/completion` and
//! `/v1/responses`; the generation rate over the decode steps after the first
//! token; and `__verbose` (`--verbose`, or a request's `verbose`).

use std::time::Duration;

use serde_json::{json, Value};

use crate::api_server::ApiServer;

/// The batch the servers here decode a prompt in.
const BATCH: u64 = 32;

/// A prompt that takes several batches of [`BATCH`] tokens.
fn long_prompt() -> String {
    "This is a test. ".repeat(12)
}

fn server(extra: &[&str]) -> ApiServer {
    let mut args = vec![
        "--n_batch",
        "32",
        "--context-size",
        "1024",
        "--parallel",
        "1",
    ];
    args.extend_from_slice(extra);
    ApiServer::with_model_unprompted(&args)
}

/// The JSON `data:` payloads of a streamed answer (not `[DONE]`).
fn stream(server: &ApiServer, path: &str, body: &Value) -> Vec<Value> {
    let response = crate::harness::http_agent(Duration::from_secs(120))
        .post(&server.url(path))
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .expect("post");
    assert_eq!(response.status().as_u16(), 200, "{body}");
    let text = response.into_body().read_to_string().expect("body");
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).expect("a JSON event"))
        .collect()
}

fn chat(content: &str, extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 6,
        "temperature": 0,
        "stream": true,
    });
    let fields = extra.as_object().expect("an object").clone();
    body.as_object_mut().expect("an object").extend(fields);
    body
}

/// Checks that `reports` (`prompt_progress` objects) are llama-server's: the
/// first before any decode (processed == cache), then one per batch, each
/// further on, the last with the whole prompt. Returns the first.
fn check_progress(reports: &[Value]) -> Value {
    let first = reports.first().expect("progress reports").clone();
    let number = |report: &Value, key: &str| report[key].as_u64().expect(key);
    let total = number(&first, "total");
    let cache = number(&first, "cache");
    assert!(total > 0, "{first}");
    assert_eq!(number(&first, "processed"), cache, "{reports:?}");
    let mut last = cache;
    for report in &reports[1..] {
        assert_eq!(number(report, "total"), total, "{reports:?}");
        assert_eq!(number(report, "cache"), cache, "{reports:?}");
        let processed = number(report, "processed");
        assert!(processed > last, "{reports:?}");
        assert!(processed - last <= BATCH, "{reports:?}");
        last = processed;
    }
    assert_eq!(last, total, "{reports:?}");
    let batches = (total - cache).div_ceil(BATCH);
    assert_eq!(reports.len() as u64, 1 + batches, "{reports:?}");
    first
}

#[test]
fn return_progress_reports_the_prompt_batch_by_batch_from_before_its_first() {
    let server = server(&[]);
    let body = chat(&long_prompt(), json!({"return_progress": true}));
    for round in 0..2 {
        let chunks = stream(&server, "/v1/chat/completions", &body);
        let reports: Vec<Value> = chunks
            .iter()
            .filter_map(|c| c.get("prompt_progress").cloned())
            .collect();
        let first = check_progress(&reports);
        let (total, cache) = (first["total"].as_u64(), first["cache"].as_u64());
        if round == 0 {
            assert!(reports.len() >= 3, "several batches: {reports:?}");
            assert_eq!(cache, Some(0), "{first}");
        } else {
            // The same prompt again: all of it but the last token from the cache.
            assert_eq!(cache, total.map(|t| t - 1), "{first}");
            assert_eq!(reports.len(), 2, "{reports:?}");
        }
        // Every report comes before the answer's text, as an opening delta.
        let first_text = chunks
            .iter()
            .position(|c| c["choices"][0]["delta"]["content"].is_string())
            .expect("some text");
        let last_report = chunks
            .iter()
            .rposition(|c| c.get("prompt_progress").is_some())
            .expect("a report");
        assert!(last_report < first_text, "{chunks:?}");
        for chunk in chunks.iter().filter(|c| c.get("prompt_progress").is_some()) {
            let delta = &chunk["choices"][0]["delta"];
            assert_eq!(
                delta,
                &json!({"role": "assistant", "content": null}),
                "{chunk}"
            );
            assert!(chunk.get("timings").is_none(), "not asked for: {chunk}");
        }
    }
}

#[test]
fn timings_per_token_puts_the_figures_on_every_chunk_and_nothing_comes_unasked() {
    let server = server(&[]);
    let body = chat(
        "Say hello.",
        json!({"timings_per_token": true, "stream_options": {"include_usage": true}}),
    );
    let chunks = stream(&server, "/v1/chat/completions", &body);
    // The opening: the role and a null content, without figures.
    let opening = &chunks[0];
    assert_eq!(
        opening["choices"][0]["delta"],
        json!({"role": "assistant", "content": null}),
        "{opening}"
    );
    assert!(opening.get("timings").is_none(), "{opening}");
    let mut predicted = 0;
    for chunk in &chunks[1..] {
        let timings = chunk.get("timings").unwrap_or_else(|| panic!("{chunk}"));
        assert!(timings["prompt_per_second"].is_number(), "{chunk}");
        assert!(timings["predicted_per_second"].is_number(), "{chunk}");
        let n = timings["predicted_n"].as_u64().expect("predicted_n");
        assert!(n >= predicted && n <= 6, "{chunks:?}");
        predicted = n;
        if let Some(delta) = chunk["choices"].get(0).map(|c| &c["delta"]) {
            assert!(delta.get("role").is_none(), "{chunk}");
        }
        assert!(chunk.get("prompt_progress").is_none(), "{chunk}");
    }
    assert!(predicted > 0, "{chunks:?}");
    let usage = chunks.last().expect("the usage chunk");
    assert_eq!(usage["choices"], json!([]), "{usage}");

    // Without the fields: figures only at the finish, no progress.
    let plain = stream(
        &server,
        "/v1/chat/completions",
        &chat("Say hello.", json!({})),
    );
    let finish = plain.len() - 1;
    for (i, chunk) in plain.iter().enumerate() {
        assert_eq!(chunk.get("timings").is_some(), i == finish, "{plain:?}");
        assert!(chunk.get("prompt_progress").is_none(), "{chunk}");
    }
}

#[test]
fn completion_progress_carries_figures_from_zero_and_they_never_go_back() {
    let server = server(&[]);
    let body = json!({
        "prompt": long_prompt(), "n_predict": 4, "temperature": 0, "stream": true,
        "timings_per_token": true, "return_progress": true,
    });
    let chunks = stream(&server, "/completion", &body);
    let progress: Vec<&Value> = chunks
        .iter()
        .filter(|c| c.get("prompt_progress").is_some())
        .collect();
    let reports: Vec<Value> = progress
        .iter()
        .map(|c| c["prompt_progress"].clone())
        .collect();
    check_progress(&reports);
    let first = &progress[0]["timings"];
    assert_eq!(first["prompt_n"], json!(0), "{first}");
    assert_eq!(first["prompt_ms"], json!(0.0), "{first}");
    assert_eq!(first["predicted_n"], json!(0), "{first}");
    assert_eq!(first["predicted_ms"], json!(0.0), "{first}");
    let mut prompt_ms = 0.0;
    for chunk in &chunks {
        let timings = chunk["timings"]
            .as_object()
            .unwrap_or_else(|| panic!("{chunk}"));
        for (key, value) in timings {
            assert!(value.as_f64().is_some_and(|v| v >= 0.0), "{key}: {chunk}");
        }
        let ms = timings["prompt_ms"].as_f64().expect("prompt_ms");
        assert!(ms >= prompt_ms, "{chunks:?}");
        prompt_ms = ms;
    }
    assert!(prompt_ms > 0.0, "{chunks:?}");
}

#[test]
fn the_generation_rate_leaves_out_the_first_token() {
    let server = server(&[]);
    let timings = |n_predict: u64| {
        let body = json!({"prompt": "I believe", "n_predict": n_predict, "temperature": 0,
                          "ignore_eos": true});
        let (status, answer) = server.post("/completion", &body);
        assert_eq!(status, 200, "{answer}");
        answer["timings"].clone()
    };
    // The first token comes from the prompt's logits: no decode step, no rate.
    let one = timings(1);
    assert_eq!(one["predicted_n"], json!(1), "{one}");
    assert_eq!(one["predicted_per_second"], json!(0.0), "{one}");
    assert_eq!(one["predicted_per_token_ms"], json!(0.0), "{one}");
    let sixteen = timings(16);
    assert_eq!(sixteen["predicted_n"], json!(16), "{sixteen}");
    let ms = sixteen["predicted_ms"].as_f64().expect("predicted_ms");
    let rate = sixteen["predicted_per_second"].as_f64().expect("a rate");
    assert!((rate - 1e3 / ms * 15.0).abs() < 1e-6, "{sixteen}");
}

#[test]
fn responses_streams_report_progress_and_figures() {
    let server = server(&[]);
    let body = json!({
        "input": long_prompt(), "max_output_tokens": 8, "temperature": 0, "stream": true,
        "timings_per_token": true, "return_progress": true,
    });
    let events = stream(&server, "/v1/responses", &body);
    let reports: Vec<Value> = events
        .iter()
        .filter_map(|e| {
            let report = e.get("prompt_progress")?;
            assert_eq!(e["type"], json!("response.in_progress"), "{e}");
            Some(report.clone())
        })
        .collect();
    check_progress(&reports);
    let deltas: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == json!("response.output_text.delta"))
        .collect();
    assert!(!deltas.is_empty(), "{events:?}");
    for delta in deltas {
        assert!(
            delta["timings"]["predicted_per_second"].is_number(),
            "{delta}"
        );
    }
    // The last event: `response.completed` (`.incomplete` when the length cut it).
    let completed = events.last().expect("events");
    let kind = completed["type"].as_str().unwrap_or_default();
    assert!(
        ["response.completed", "response.incomplete"].contains(&kind),
        "{completed}"
    );
    assert!(
        completed["timings"]["prompt_per_second"].is_number(),
        "{completed}"
    );
    assert!(completed["response"]["usage"].is_object(), "{completed}");
}

#[test]
fn verbose_answers_carry_the_rendered_prompt_only_when_asked() {
    let messages = json!([
        {"role": "system", "content": "Book"},
        {"role": "user", "content": "What is the best book"},
    ]);
    let ask = |server: &ApiServer, verbose: Option<bool>| {
        let mut body = json!({"messages": messages, "max_tokens": 2, "temperature": 0});
        if let Some(verbose) = verbose {
            body["verbose"] = json!(verbose);
        }
        let (status, answer) = server.post("/v1/chat/completions", &body);
        assert_eq!(status, 200, "{answer}");
        answer
    };
    let plain = server(&[]);
    let (status, applied) = plain.post("/apply-template", &json!({"messages": messages}));
    assert_eq!(status, 200, "{applied}");
    let rendered = applied["prompt"].as_str().expect("a prompt").to_string();
    assert!(ask(&plain, None).get("__verbose").is_none());
    assert!(ask(&plain, Some(false)).get("__verbose").is_none());
    let asked = ask(&plain, Some(true));
    assert_eq!(asked["__verbose"]["prompt"], json!(rendered), "{asked}");
    drop(plain);

    let verbose = server(&["--verbose"]);
    let answer = ask(&verbose, None);
    let native = &answer["__verbose"];
    assert_eq!(native["prompt"], json!(rendered), "{answer}");
    assert_eq!(
        native["content"], answer["choices"][0]["message"]["content"],
        "{answer}"
    );
    assert_eq!(native["stop"], json!(true), "{answer}");
    assert!(native["timings"].is_object(), "{answer}");
    assert!(ask(&verbose, Some(false)).get("__verbose").is_none());
}

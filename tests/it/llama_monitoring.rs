//! llama-server's monitoring names on `shepherd --server` with SmolLM2, as
//! the Prometheus dashboards, exporters and web UI written for it read them:
//! the `llamacpp:*` series of `GET /metrics` (names, types, help lines, values
//! that move with the work done), the `Process-Start-Time-Unix` header, the
//! fields of `GET /slots` while a request runs and after it, and the native
//! `POST /embedding` (and `/embeddings` with `content`) shape.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::api_server::ApiServer;

const PROMPT: &str = "1, 2, 3, 4,";

/// llama-server's counters and gauges (tools/server/server-task.cpp).
const COUNTERS: [&str; 10] = [
    "llamacpp:prompt_tokens_total",
    "llamacpp:prompt_tokens_cached_total",
    "llamacpp:prompt_seconds_total",
    "llamacpp:tokens_predicted_total",
    "llamacpp:tokens_predicted_seconds_total",
    "llamacpp:n_decode_total",
    "llamacpp:n_tokens_max",
    "llamacpp:spec_decode_num_draft_tokens_total",
    "llamacpp:spec_decode_num_accepted_tokens_total",
    "llamacpp:spec_decode_num_drafts_total",
];
const GAUGES: [&str; 5] = [
    "llamacpp:prompt_tokens_seconds",
    "llamacpp:predicted_tokens_seconds",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    "llamacpp:n_busy_slots_per_decode",
];

/// `GET /metrics` as llama-server's test reads it: each unlabelled `llamacpp:`
/// sample with the type its `# TYPE` line gives.
fn llamacpp_metrics(server: &ApiServer) -> (String, HashMap<String, (String, f64)>) {
    let (status, text) = server.get("/metrics");
    assert_eq!(status, 200, "{text}");
    let mut types = HashMap::new();
    let mut out = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("a type");
            types.insert(name.to_string(), kind.to_string());
        } else if line.starts_with("llamacpp:") && !line.contains('{') {
            let (name, value) = line.split_once(' ').expect("a sample");
            let kind = types.get(name).unwrap_or_else(|| panic!("{name}: no TYPE"));
            let value: f64 = value.parse().expect("a number");
            out.insert(name.to_string(), (kind.clone(), value));
        }
    }
    (text, out)
}

fn value(metrics: &HashMap<String, (String, f64)>, name: &str) -> f64 {
    metrics.get(name).unwrap_or_else(|| panic!("no {name}")).1
}

fn complete(server: &ApiServer, body: Value) -> Value {
    let (status, answer) = server.post("/completion", &body);
    assert_eq!(status, 200, "{body}: {answer}");
    answer
}

/// The `Process-Start-Time-Unix` header of a request to `path` (a GET without
/// a body), and the answer's status.
fn start_time_header(server: &ApiServer, method: &str, path: &str) -> (u16, u64) {
    let agent = crate::harness::http_agent(Duration::from_secs(60));
    let response = match method {
        "GET" => agent.get(&server.url(path)).call(),
        _ => agent.post(&server.url(path)).send("{"),
    }
    .expect("an answer");
    let header = response
        .headers()
        .get("process-start-time-unix")
        .unwrap_or_else(|| panic!("{method} {path}: no Process-Start-Time-Unix"));
    let secs = header.to_str().unwrap().parse().expect("unix seconds");
    (response.status().as_u16(), secs)
}

#[test]
fn metrics_carry_llama_servers_names_and_move_with_the_work() {
    let before_start = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let server = ApiServer::with_model(&["--context-size", "2048"]);

    // Every answer says when the server started, in Unix seconds.
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    for (method, path, status) in [
        ("GET", "/metrics", 200),
        ("GET", "/health", 200),
        ("GET", "/nope", 404),
        ("POST", "/completion", 400),
    ] {
        let (got, secs) = start_time_header(&server, method, path);
        assert_eq!(got, status, "{method} {path}");
        assert!(
            before_start.as_secs() <= secs && secs <= now.as_secs(),
            "{method} {path}: {secs} is not between {before_start:?} and {now:?}"
        );
    }

    let (text, fresh) = llamacpp_metrics(&server);
    for name in COUNTERS {
        assert_eq!(
            fresh.get(name).map(|m| m.0.as_str()),
            Some("counter"),
            "{name}: {text}"
        );
        assert!(text.contains(&format!("# HELP {name} ")), "{name}: {text}");
    }
    for name in GAUGES {
        assert_eq!(
            fresh.get(name).map(|m| m.0.as_str()),
            Some("gauge"),
            "{name}: {text}"
        );
        assert!(text.contains(&format!("# HELP {name} ")), "{name}: {text}");
    }
    // shepherd's own names are still there.
    assert!(
        text.contains("shepherd_completion_tokens_total 0"),
        "{text}"
    );
    assert_eq!(value(&fresh, "llamacpp:tokens_predicted_total"), 0.0);

    // One completion: its tokens, its time, the decodes it took.
    let body = json!({"prompt": PROMPT, "n_predict": 8, "temperature": 0});
    let first = complete(&server, body.clone());
    let (_, after) = llamacpp_metrics(&server);
    let timings = &first["timings"];
    let prompt_n = timings["prompt_n"].as_f64().expect("prompt_n");
    let predicted_n = timings["predicted_n"].as_f64().expect("predicted_n");
    assert!(prompt_n > 0.0 && predicted_n > 0.0, "{first}");
    assert_eq!(value(&after, "llamacpp:prompt_tokens_total"), prompt_n);
    assert_eq!(
        value(&after, "llamacpp:tokens_predicted_total"),
        predicted_n
    );
    assert!(value(&after, "llamacpp:prompt_seconds_total") > 0.0);
    assert!(value(&after, "llamacpp:tokens_predicted_seconds_total") > 0.0);
    let decodes = value(&after, "llamacpp:n_decode_total");
    assert!(decodes >= 1.0, "{decodes} decodes for {predicted_n} tokens");
    assert_eq!(
        value(&after, "llamacpp:n_tokens_max"),
        first["tokens_evaluated"].as_f64().unwrap() + predicted_n
    );
    let busy = value(&after, "llamacpp:n_busy_slots_per_decode");
    assert!(busy > 0.0 && busy <= 1.0, "{busy}");
    assert_eq!(value(&after, "llamacpp:requests_processing"), 0.0);
    assert_eq!(value(&after, "llamacpp:requests_deferred"), 0.0);
    // The throughputs average over the window since the last scrape.
    assert!(value(&after, "llamacpp:prompt_tokens_seconds") > 0.0);
    assert!(value(&after, "llamacpp:predicted_tokens_seconds") > 0.0);
    let (_, scraped) = llamacpp_metrics(&server);
    assert_eq!(value(&scraped, "llamacpp:predicted_tokens_seconds"), 0.0);
    assert_eq!(value(&scraped, "llamacpp:prompt_tokens_seconds"), 0.0);

    // The same prompt again: its tokens come from the cache, counted apart.
    let second = complete(&server, body);
    let cache_n = second["timings"]["cache_n"].as_f64().expect("cache_n");
    assert!(cache_n > 0.0, "{second}");
    let (_, again) = llamacpp_metrics(&server);
    assert_eq!(
        value(&again, "llamacpp:prompt_tokens_cached_total"),
        cache_n
    );
    assert_eq!(
        value(&again, "llamacpp:prompt_tokens_total"),
        prompt_n + second["timings"]["prompt_n"].as_f64().unwrap()
    );

    // An embedding costs decodes and prompt tokens, and predicts none.
    let (status, embedded) = server.post("/embedding", &json!({"content": "hello world"}));
    assert_eq!(status, 200, "{embedded}");
    let (_, last) = llamacpp_metrics(&server);
    assert!(value(&last, "llamacpp:n_decode_total") > value(&again, "llamacpp:n_decode_total"));
    assert!(
        value(&last, "llamacpp:prompt_tokens_total")
            > value(&again, "llamacpp:prompt_tokens_total")
    );
    assert_eq!(
        value(&last, "llamacpp:tokens_predicted_total"),
        value(&again, "llamacpp:tokens_predicted_total")
    );
}

/// The one slot's entry of `GET /slots`.
fn slot(server: &ApiServer) -> Value {
    let (status, slots) = server.get("/slots");
    assert_eq!(status, 200, "{slots}");
    let slots: Value = serde_json::from_str(&slots).expect("JSON");
    assert_eq!(slots.as_array().map(Vec::len), Some(1), "{slots}");
    slots[0].clone()
}

#[test]
fn slots_show_llama_servers_fields_while_a_request_runs_and_after() {
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let idle = slot(&server);
    assert_eq!(idle["id"], json!(0), "{idle}");
    assert_eq!(idle["n_ctx"], json!(2048), "{idle}");
    assert_eq!(idle["is_processing"], json!(false), "{idle}");
    assert!(idle["speculative"].is_boolean(), "{idle}");
    assert!(idle.get("id_task").is_none(), "no request yet: {idle}");

    // A grammar no token the model likes fits masks the whole vocabulary at
    // every token, so the request holds its slot long enough to be seen.
    let costly = format!("root ::= w+\nw ::= {}", vec!["\"~\""; 200].join(" | "));
    let body = json!({"prompt": PROMPT, "n_predict": 3, "temperature": 0.5,
                      "top_k": 7, "repeat_last_n": 32, "grammar": costly});
    let running = std::thread::scope(|scope| {
        let request = scope.spawn(|| complete(&server, body.clone()));
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut seen = None;
        while seen.is_none() && !request.is_finished() {
            let now = slot(&server);
            if now["is_processing"] == json!(true) && now.get("id_task").is_some() {
                seen = Some(now);
            }
            assert!(Instant::now() < deadline, "the request never ran");
        }
        request.join().expect("the request");
        seen.expect("the slot was never seen serving the request")
    });
    let next = &running["next_token"][0];
    assert_eq!(next["has_next_token"], json!(true), "{running}");
    let decoded = next["n_decoded"].as_i64().expect("n_decoded");
    assert_eq!(next["n_remain"].as_i64(), Some(3 - decoded), "{running}");
    assert_eq!(running["n_decoded"].as_i64(), Some(decoded), "{running}");
    let params = &running["params"];
    assert_eq!(params["n_predict"], json!(3), "{running}");
    assert_eq!(params["max_tokens"], json!(3), "{running}");
    assert_eq!(params["top_k"], json!(7), "{running}");
    assert_eq!(params["repeat_last_n"], json!(32), "{running}");
    assert_eq!(params["temperature"], json!(0.5), "{running}");

    // Idle again: the last request's figures stay, with nothing to come.
    let done = slot(&server);
    assert_eq!(done["is_processing"], json!(false), "{done}");
    assert_eq!(done["id_task"], running["id_task"], "{done}");
    assert_eq!(
        done["next_token"],
        json!([{"has_next_token": false, "has_new_line": false, "n_remain": -1, "n_decoded": 0}]),
        "{done}"
    );
    let processed = done["n_prompt_tokens_processed"]
        .as_u64()
        .expect("processed");
    assert!(processed > 0, "{done}");
    assert_eq!(done["n_prompt_tokens_cache"], json!(0), "{done}");
    assert_eq!(done["n_prompt_tokens"], done["n_cached"], "{done}");
    assert!(
        done["n_prompt_tokens"].as_u64().unwrap() >= processed,
        "{done}"
    );

    // The next request has the next id.
    complete(&server, json!({"prompt": PROMPT, "n_predict": 2}));
    let later = slot(&server);
    assert!(
        later["id_task"].as_u64() > done["id_task"].as_u64(),
        "{later}"
    );
    assert_eq!(later["params"]["n_predict"], json!(2), "{later}");
    assert!(
        later["n_prompt_tokens_cache"].as_u64().unwrap() > 0,
        "{later}"
    );
}

#[test]
fn embedding_answers_in_llama_servers_own_shape() {
    let server = ApiServer::with_model(&[]);
    let (status, oai) = server.post("/v1/embeddings", &json!({"input": "hello world"}));
    assert_eq!(status, 200, "{oai}");
    let vector = oai["data"][0]["embedding"].clone();
    let n_embd = vector.as_array().expect("a vector").len();
    assert!(n_embd > 1, "{oai}");

    let close = |a: &Value, b: &Value| {
        let (a, b) = (a.as_array().unwrap(), b.as_array().unwrap());
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() < 1e-4)
    };
    for path in ["/embedding", "/embeddings"] {
        let (status, one) = server.post(path, &json!({"content": "hello world"}));
        assert_eq!(status, 200, "{path}: {one}");
        let list = one.as_array().unwrap_or_else(|| panic!("{path}: {one}"));
        assert_eq!(list.len(), 1, "{one}");
        assert_eq!(list[0]["index"], json!(0), "{one}");
        let vectors = list[0]["embedding"].as_array().expect("a list of vectors");
        assert_eq!(vectors.len(), 1, "pooled: one vector: {one}");
        assert!(close(&vectors[0], &vector), "{path}: not the same vector");
    }
    let (status, two) = server.post("/embedding", &json!({"content": ["a", "hello world"]}));
    assert_eq!(status, 200, "{two}");
    let list = two.as_array().expect("a list");
    assert_eq!(list.len(), 2, "{two}");
    assert_eq!(
        (list[0]["index"].clone(), list[1]["index"].clone()),
        (json!(0), json!(1))
    );
    assert!(close(&list[1]["embedding"][0], &vector), "{two}");
    // llama-server's route reads `input` too.
    let (status, input) = server.post("/embedding", &json!({"input": "hello world"}));
    assert_eq!(status, 200, "{input}");
    assert!(close(&input[0]["embedding"][0], &vector), "{input}");
    // `/embeddings` with `input` stays OpenAI's, as the SDKs given the root send it.
    let (status, sdk) = server.post("/embeddings", &json!({"input": "hello world"}));
    assert_eq!(status, 200, "{sdk}");
    assert_eq!(sdk["object"], json!("list"), "{sdk}");

    for (body, param) in [
        (json!({}), "content"),
        (json!({"content": ""}), "content"),
        (json!({"content": 7}), "content"),
        (json!({"content": [[1], [99_999_999]]}), "content[1]"),
        (json!({"content": "a", "pooling": "none"}), "pooling"),
        (
            json!({"content": "a", "embd_normalize": 1}),
            "embd_normalize",
        ),
    ] {
        let (status, error) = server.post("/embedding", &body);
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["param"], json!(param), "{body}: {error}");
    }
    let (status, error) = server.post("/embedding", &json!({"content": "a", "embd_normalize": 2}));
    assert_eq!(status, 200, "{error}");
}

//! A fake OpenAI-compatible upstream: a real HTTP server on 127.0.0.1:0 that
//! serves a script of canned responses in order and records every request.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde_json::{json, Value};

/// One canned HTTP response.
#[derive(Clone, Debug)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When set, the response waits until the test sends on (or drops) its sender.
    pub hold: Option<crossbeam_channel::Receiver<()>>,
}

impl Canned {
    /// An SSE stream of `data:` events, terminated by `[DONE]`.
    pub fn sse(chunks: &[Value]) -> Canned {
        let mut body = String::new();
        for chunk in chunks {
            body.push_str(&format!("data: {chunk}\n\n"));
        }
        body.push_str("data: [DONE]\n\n");
        Canned::sse_raw(&body)
    }

    /// An SSE body exactly as given.
    pub fn sse_raw(body: &str) -> Canned {
        Canned {
            status: 200,
            headers: vec![("Content-Type".into(), "text/event-stream".into())],
            body: body.as_bytes().to_vec(),
            hold: None,
        }
    }

    pub fn json(status: u16, value: Value) -> Canned {
        Canned {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: value.to_string().into_bytes(),
            hold: None,
        }
    }

    /// This response waits for `release` (a send, or its sender dropped).
    pub fn held(mut self, release: crossbeam_channel::Receiver<()>) -> Canned {
        self.hold = Some(release);
        self
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Canned {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A request the fake received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    pub body_len: usize,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The running fake. Stops when dropped.
pub struct FakeOpenAi {
    pub base_url: String,
    server: Arc<tiny_http::Server>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    thread: Option<JoinHandle<()>>,
}

impl FakeOpenAi {
    pub fn start(script: Vec<Canned>) -> FakeOpenAi {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind fake server"));
        let port = server.server_addr().to_ip().expect("ip listener").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let server = server.clone();
            let requests = requests.clone();
            std::thread::spawn(move || serve(&server, script, &requests))
        };
        FakeOpenAi {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            server,
            requests,
            thread: Some(thread),
        }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().expect("requests lock").clone()
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(server: &tiny_http::Server, script: Vec<Canned>, requests: &Mutex<Vec<Recorded>>) {
    let mut script = script.into_iter();
    for mut request in server.incoming_requests() {
        let mut raw = Vec::new();
        let _ = request.as_reader().read_to_end(&mut raw);
        let recorded = Recorded {
            method: request.method().to_string(),
            path: request.url().to_string(),
            headers: request
                .headers()
                .iter()
                .map(|h| (h.field.to_string(), h.value.to_string()))
                .collect(),
            body: serde_json::from_slice(&raw).unwrap_or(Value::Null),
            body_len: raw.len(),
        };
        requests.lock().expect("requests lock").push(recorded);
        let canned = script.next().unwrap_or_else(|| {
            Canned::json(
                500,
                json!({"error": {"message": "fake server: script exhausted", "type": "server_error"}}),
            )
        });
        if let Some(release) = &canned.hold {
            let _ = release.recv();
        }
        let mut response =
            tiny_http::Response::from_data(canned.body).with_status_code(canned.status);
        for (name, value) in canned.headers {
            if let Ok(header) = tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
                response.add_header(header);
            }
        }
        let _ = request.respond(response);
    }
}

/// A `chat.completion.chunk` with one choice.
pub fn chunk(delta: Value, finish_reason: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "test",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
    })
}

/// Text deltas followed by a `stop` chunk.
pub fn text_stream(pieces: &[&str]) -> Vec<Value> {
    let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    chunks.extend(pieces.iter().map(|p| chunk(json!({"content": p}), None)));
    chunks.push(chunk(json!({}), Some("stop")));
    chunks
}

/// The usage chunk sent when `stream_options.include_usage` is on.
pub fn usage_chunk(prompt: u64, completion: u64) -> Value {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "test",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    })
}

/// A tool-call delta fragment.
pub fn tool_delta(index: u64, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
    let mut function = json!({"arguments": args});
    if let Some(name) = name {
        function["name"] = json!(name);
    }
    let mut call = json!({"index": index, "function": function});
    if let Some(id) = id {
        call["id"] = json!(id);
        call["type"] = json!("function");
    }
    chunk(json!({"tool_calls": [call]}), None)
}

/// A single whole tool call followed by the `tool_calls` finish.
pub fn tool_call_stream(id: &str, name: &str, args: Value) -> Vec<Value> {
    vec![
        chunk(json!({"role": "assistant", "content": null}), None),
        tool_delta(0, Some(id), Some(name), &args.to_string()),
        chunk(json!({}), Some("tool_calls")),
    ]
}

/// Asserts the history invariant every provider enforces: each tool message
/// answers a tool call of the assistant message before it, with the same id,
/// and every call is answered.
pub fn assert_tool_results_answer_calls(body: &Value) {
    let messages = body["messages"].as_array().expect("messages array");
    let mut open: Vec<String> = Vec::new();
    for message in messages {
        match message["role"].as_str() {
            Some("assistant") => {
                assert!(open.is_empty(), "unanswered tool calls {open:?} in {body}");
                open = message["tool_calls"]
                    .as_array()
                    .map(|calls| {
                        calls
                            .iter()
                            .map(|c| c["id"].as_str().unwrap_or_default().to_string())
                            .collect()
                    })
                    .unwrap_or_default();
            }
            Some("tool") => {
                let id = message["tool_call_id"].as_str().unwrap_or_default();
                let pos = open.iter().position(|o| o == id);
                assert!(
                    pos.is_some(),
                    "tool result {id} answers no open call in {body}"
                );
                open.remove(pos.unwrap_or(0));
            }
            _ => assert!(open.is_empty(), "unanswered tool calls {open:?} in {body}"),
        }
    }
}

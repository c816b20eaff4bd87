//! The OpenAI backend against a fake Chat Completions server: requests on the
//! wire, streamed and whole replies, tool calls, retries, caps and cancels.

use super::*;
use crate::backend::hosted::SseReply;
use crate::backend::{fake, Backend, Sampling};
use crate::backend::{Reply, Usage};
use crate::core::ToolSpec;
use crate::core::{Event, FinishReason, Flow, Stats};
use crate::stream::filter::OutputFilter;
use crate::stream::tests_support::sse_fixture;
use crossbeam_channel::{Receiver, Sender};
use serde_json::json;
use std::thread::JoinHandle;
use std::time::Instant;

/// A response the fake server will give.
struct Canned {
    status: u16,
    headers: Vec<(&'static str, &'static str)>,
    body: Vec<u8>,
}

fn sse(name: &str) -> Canned {
    Canned {
        status: 200,
        headers: vec![("Content-Type", "text/event-stream")],
        body: sse_fixture(name),
    }
}

fn json_response(status: u16, body: Value) -> Canned {
    Canned {
        status,
        headers: vec![("Content-Type", "application/json")],
        body: body.to_string().into_bytes(),
    }
}

/// A request the fake server received.
#[derive(Debug, Clone, PartialEq)]
struct Recorded {
    url: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A real HTTP server on 127.0.0.1:0 that answers with `responses` in
/// order, recording every request, then stops.
struct FakeServer {
    base_url: String,
    requests: Receiver<Recorded>,
    thread: Option<JoinHandle<()>>,
}

impl FakeServer {
    fn start(responses: Vec<Canned>) -> Self {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("bind loopback");
        let addr = server.server_addr().to_ip().expect("an IP listener");
        let (tx, rx) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name("fake-openai".into())
            .spawn(move || serve(server, responses, tx))
            .expect("spawn server thread");
        FakeServer {
            base_url: format!("http://{addr}/v1"),
            requests: rx,
            thread: Some(thread),
        }
    }

    /// Every request received, once the server answered them all.
    fn finish(mut self) -> Vec<Recorded> {
        if let Some(thread) = self.thread.take() {
            thread.join().expect("server thread");
        }
        self.requests.try_iter().collect()
    }
}

fn serve(server: tiny_http::Server, responses: Vec<Canned>, tx: Sender<Recorded>) {
    for canned in responses {
        let Ok(mut request) = server.recv() else {
            return;
        };
        let mut body = String::new();
        request
            .as_reader()
            .read_to_string(&mut body)
            .expect("request body");
        let headers = request
            .headers()
            .iter()
            .map(|h| (h.field.to_string(), h.value.to_string()))
            .collect();
        let recorded = Recorded {
            url: request.url().to_string(),
            headers,
            body: serde_json::from_str(&body).unwrap_or(Value::Null),
        };
        tx.send(recorded).expect("test still listening");
        let mut response =
            tiny_http::Response::from_data(canned.body).with_status_code(canned.status);
        for (name, value) in canned.headers {
            let header = tiny_http::Header::from_bytes(name, value).expect("valid header");
            response.add_header(header);
        }
        // The client may have gone (e.g. after a cancel); that is not the server's failure.
        let _ = request.respond(response);
    }
}

fn config(base_url: impl Into<String>, model: impl Into<String>) -> OpenAiConfig {
    OpenAiConfig {
        api: ApiSettings::new(base_url, model),
        azure: None,
        max_tokens_param: MaxTokensParam::default(),
    }
}

fn backend(base_url: &str) -> OpenAiBackend {
    let mut config = config(base_url, "test-model");
    config.api.api_key = Some("sk-test-123".into());
    config.api.context_size = 4096;
    OpenAiBackend::new(config)
}

fn session() -> Session {
    let mut session = Session::new("Be brief.");
    session.messages.push(Message::user("hi"));
    session
}

fn tools() -> Vec<ToolSpec> {
    ["read", "bash"]
        .map(|name| ToolSpec {
            name: name.into(),
            description: format!("the {name} tool"),
            parameters: json!({"type":"object"}),
        })
        .to_vec()
}

fn generate(
    server: &FakeServer,
    stream: bool,
    events: &mut Vec<Event>,
) -> Result<Reply, BackendError> {
    let tools = tools();
    let sampling = Sampling {
        max_tokens: Some(100),
        temperature: Some(0.5),
        ..Sampling::default()
    };
    let request = GenerateRequest {
        tools: &tools,
        tool_choice: &ToolChoice::Auto,
        sampling: &sampling,
        stream,
    };
    backend(&server.base_url).generate(&session(), &request, events)
}

fn text_of(events: &[Event], pick: fn(&Event) -> Option<&str>) -> String {
    events.iter().filter_map(pick).collect()
}

fn content(event: &Event) -> Option<&str> {
    match event {
        Event::Content(text) => Some(text),
        _ => None,
    }
}

fn thinking(event: &Event) -> Option<&str> {
    match event {
        Event::Thinking(text) => Some(text),
        _ => None,
    }
}

fn stats(events: &[Event]) -> Vec<&Stats> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Stats(stats) => Some(stats),
            _ => None,
        })
        .collect()
}

#[test]
fn models_are_listed_with_the_key() {
    let body =
        json!({"object": "list", "data": [{"id": "gpt-a", "object": "model"}, {"id": "gpt-b"}]});
    let server = FakeServer::start(vec![json_response(200, body)]);
    let models = backend(&format!("{}/", server.base_url)).list_models();
    assert_eq!(models.expect("models"), ["gpt-a", "gpt-b"]);
    let request = &server.finish()[0];
    assert_eq!(request.url, "/v1/models");
    assert_eq!(request.header("authorization"), Some("Bearer sk-test-123"));
}

#[test]
fn plain_text_stream_with_usage_and_a_well_formed_request() {
    let server = FakeServer::start(vec![sse("text.sse")]);
    let mut events = Vec::new();
    let reply = generate(&server, true, &mut events).expect("reply");
    assert_eq!(reply.content, "héllo ✓ 日本 🦀");
    assert_eq!(text_of(&events, content), "héllo ✓ 日本 🦀");
    assert_eq!(reply.finish, FinishReason::Stop);
    assert_eq!(
        reply.usage,
        Some(Usage {
            prompt_tokens: 12,
            completion_tokens: 5
        })
    );
    let stats = stats(&events);
    assert_eq!(stats.len(), 1);
    assert_eq!((stats[0].context_used, stats[0].context_size), (17, 4096));
    let requests = server.finish();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.url, "/v1/chat/completions");
    assert_eq!(request.header("Authorization"), Some("Bearer sk-test-123"));
    assert_eq!(request.body["model"], "test-model");
    assert_eq!(
        request.body["messages"],
        json!([{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}])
    );
    assert_eq!(request.body["stream"], true);
    assert_eq!(
        request.body["stream_options"],
        json!({"include_usage": true})
    );
    assert_eq!(request.body["max_tokens"], 100);
    assert_eq!(request.body["temperature"], 0.5);
    assert_eq!(request.body["tool_choice"], "auto");
    assert_eq!(request.body["tools"][1]["function"]["name"], "bash");
    assert!(request.body.get("top_p").is_none() && request.body.get("stop").is_none());
}

#[test]
fn reasoning_deltas_and_think_tags_become_thinking() {
    let server = FakeServer::start(vec![sse("reasoning.sse")]);
    let mut events = Vec::new();
    let reply = generate(&server, true, &mut events).expect("reply");
    assert_eq!(text_of(&events, thinking), "Let me think about ✓ it.inline");
    assert_eq!(reply.thinking, "Let me think about ✓ it.inline");
    assert_eq!(reply.content, "Answer: 42");
    // llama-server timings stand in for usage.
    assert_eq!(
        reply.usage,
        Some(Usage {
            prompt_tokens: 20,
            completion_tokens: 8
        })
    );
    assert_eq!(stats(&events)[0].decode_tps, Some(40.25));
    server.finish();
}

#[test]
fn parallel_tool_calls_split_across_chunks() {
    let server = FakeServer::start(vec![sse("tool_calls.sse")]);
    let mut events = Vec::new();
    let reply = generate(&server, true, &mut events).expect("reply");
    assert_eq!(reply.content, "Checking both.");
    assert_eq!(reply.finish, FinishReason::ToolCalls);
    let calls: Vec<(&str, &str, &Value)> = reply
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), &c.arguments))
        .collect();
    assert_eq!(
        calls,
        [
            ("call_Ab12", "read", &json!({"path": "日本.txt"})),
            ("call_Cd34", "bash", &json!({"command": "ls"})),
        ]
    );
    assert_eq!(
        reply.usage,
        Some(Usage {
            prompt_tokens: 40,
            completion_tokens: 30
        })
    );
    server.finish();
}

#[test]
fn every_fixture_decodes_the_same_split_at_every_offset() {
    fake::check_splits("openai", "sse", |reader, sink| {
        let names = fake::tools().into_iter().map(|t| t.name).collect();
        let state = ReplyStream::new(OutputFilter::new(names), 0);
        hosted::read_sse(reader, state, sink, "test")
    });
}

#[test]
fn mid_stream_error_is_typed_and_not_retried_after_output() {
    let server = FakeServer::start(vec![sse("midstream_error.sse")]);
    let mut events = Vec::new();
    let error = generate(&server, true, &mut events).expect_err("an error");
    assert!(
        matches!(&error, BackendError::Http { message, .. } if message == "The server is overloaded")
    );
    assert_eq!(text_of(&events, content), "partial");
    assert_eq!(server.finish().len(), 1);
}

#[test]
fn stream_without_done_but_with_finish_is_accepted() {
    let server = FakeServer::start(vec![sse("no_done.sse")]);
    let reply = generate(&server, true, &mut Vec::new()).expect("reply");
    assert_eq!(
        (reply.content.as_str(), reply.finish),
        ("no done marker", FinishReason::Length)
    );
    server.finish();
}

#[test]
fn truncated_stream_is_a_protocol_error() {
    let truncated = Canned {
        status: 200,
        headers: vec![("Content-Type", "text/event-stream")],
        body: b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"cut\"}}]}\n\n".to_vec(),
    };
    let server = FakeServer::start(vec![truncated]);
    let error = generate(&server, true, &mut Vec::new()).expect_err("an error");
    assert!(matches!(error, BackendError::Protocol(_)), "{error:?}");
    server.finish();
}

#[test]
fn rate_limit_is_retried_after_retry_after_with_the_same_request() {
    let limited = Canned {
        status: 429,
        headers: vec![("Content-Type", "application/json"), ("Retry-After", "1")],
        body: br#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#.to_vec(),
    };
    let server = FakeServer::start(vec![limited, sse("text.sse")]);
    let mut events = Vec::new();
    let started = Instant::now();
    let reply = generate(&server, true, &mut events).expect("reply after retry");
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));
    assert_eq!(reply.content, "héllo ✓ 日本 🦀");
    let notices: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::System(_)))
        .collect();
    assert!(
        matches!(notices[..], [Event::System(ref m)] if m.starts_with("retrying in 1.0s: HTTP 429")),
        "{notices:?}"
    );
    let requests = server.finish();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0], requests[1]);
}

#[test]
fn context_overflow_carries_token_counts() {
    let body = json!({"error": {
        "message": "This model's maximum context length is 4096 tokens. However, your messages resulted in 5000 tokens.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}});
    let server = FakeServer::start(vec![json_response(400, body)]);
    let error = generate(&server, true, &mut Vec::new()).expect_err("an error");
    assert!(
        matches!(
            error,
            BackendError::ContextOverflow {
                prompt_tokens: Some(5000),
                limit: Some(4096),
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.tokens_over(), Some(904));
    assert_eq!(server.finish().len(), 1);
}

#[test]
fn closed_port_is_a_connect_error_naming_the_url() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    drop(listener);
    let mut config = config(format!("http://127.0.0.1:{port}/v1"), "m");
    config.api.max_retries = 0;
    let tools = tools();
    let request = GenerateRequest {
        tools: &tools,
        tool_choice: &ToolChoice::Auto,
        sampling: &Sampling::default(),
        stream: true,
    };
    let error = OpenAiBackend::new(config)
        .generate(&session(), &request, &mut Vec::new())
        .expect_err("nothing listens");
    match error {
        BackendError::Connect(message) => {
            assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}")
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
}

#[test]
fn non_streaming_completion_with_native_and_text_calls() {
    let body = json!({"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "reasoning_content": "hmm",
            "content": "Sure.\n<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"pwd\"}}</tool_call>",
            "tool_calls": [{"id": "call_x", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}]}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}});
    let server = FakeServer::start(vec![json_response(200, body)]);
    let mut events = Vec::new();
    let reply = generate(&server, false, &mut events).expect("reply");
    assert_eq!(reply.content, "Sure.\n");
    assert_eq!(reply.thinking, "hmm");
    let calls: Vec<(&str, &str)> = reply
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    assert_eq!(calls, [("call_x", "read"), ("call_1", "bash")]);
    assert_eq!(reply.tool_calls[1].arguments, json!({"command": "pwd"}));
    let requests = server.finish();
    assert_eq!(requests[0].body["stream"], false);
    assert!(requests[0].body.get("stream_options").is_none());
}

#[test]
fn cancel_keeps_the_partial_text() {
    let server = FakeServer::start(vec![sse("text.sse")]);
    let tools = tools();
    let request = GenerateRequest {
        tools: &tools,
        tool_choice: &ToolChoice::Auto,
        sampling: &Sampling::default(),
        stream: true,
    };
    let mut sink = |_event: Event| Flow::Cancel;
    let reply = backend(&server.base_url)
        .generate(&session(), &request, &mut sink)
        .expect("a cancelled reply");
    assert_eq!(
        (reply.content.as_str(), reply.finish),
        ("héllo ✓ ", FinishReason::Cancelled)
    );
    server.finish();
}

#[test]
fn history_with_tool_calls_and_results_on_the_wire() {
    let mut session = session();
    let call = ToolCall {
        id: "call_9".into(),
        name: "read".into(),
        arguments: json!({"path": "x"}),
    };
    let mut assistant = Message::assistant("");
    assistant.tool_calls.push(call.clone());
    session.messages.push(assistant);
    session
        .messages
        .push(Message::tool_result(&call, "contents"));
    let config = config("https://api.openai.com/v1", "gpt");
    let sampling = Sampling {
        top_k: Some(5),
        stop: vec!["END".into()],
        ..Sampling::default()
    };
    let request = GenerateRequest {
        tools: &[],
        tool_choice: &ToolChoice::Required,
        sampling: &sampling,
        stream: false,
    };
    let wire =
        serde_json::to_value(build_request(&config, true, &session, &request).expect("request"))
            .expect("serialisable");
    assert_eq!(
        wire["messages"][2],
        json!({"role": "assistant", "content": null,
        "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"x\"}"}}]})
    );
    assert_eq!(
        wire["messages"][3],
        json!({"role": "tool", "content": "contents", "tool_call_id": "call_9"})
    );
    assert!(
        wire.get("top_k").is_none()
            && wire.get("tools").is_none()
            && wire.get("tool_choice").is_none()
    );
    assert_eq!(wire["stop"], json!(["END"]));
    let named = ToolChoice::Named("bash".into());
    assert_eq!(
        serde_json::to_value(wire_tool_choice(&named)).expect("serialisable"),
        json!({"type": "function", "function": {"name": "bash"}})
    );
}

#[test]
fn azure_endpoint_and_key_header() {
    let mut config = config("https://res.openai.azure.com/", "gpt");
    config.azure = Some(AzureDeployment {
        deployment: "dep1".into(),
        api_version: "2024-06-01".into(),
    });
    config.max_tokens_param = MaxTokensParam::MaxCompletionTokens;
    let backend = OpenAiBackend::new(config.clone());
    assert_eq!(backend.endpoint(), "https://res.openai.azure.com/openai/deployments/dep1/chat/completions?api-version=2024-06-01");
    let sampling = Sampling {
        max_tokens: Some(7),
        ..Sampling::default()
    };
    let request = GenerateRequest {
        tools: &[],
        tool_choice: &ToolChoice::Auto,
        sampling: &sampling,
        stream: true,
    };
    let wire =
        serde_json::to_value(build_request(&config, true, &session(), &request).expect("request"))
            .expect("serialisable");
    assert_eq!(
        (wire.get("max_tokens"), &wire["max_completion_tokens"]),
        (None, &json!(7))
    );
}

fn generate_with(
    server: &FakeServer,
    model: &str,
    session: &Session,
) -> Result<Reply, BackendError> {
    let mut config = config(&server.base_url, model);
    config.api.api_key = Some("sk-test-123".into());
    let sampling = Sampling::default();
    let request = fake::request(&[], &sampling, true);
    OpenAiBackend::new(config).generate(session, &request, &mut Vec::new())
}

/// The bytes a `data:` URL carries, after checking its type.
fn data_url_bytes(url: &Value, mime: &str) -> Vec<u8> {
    let url = url.as_str().expect("a URL string");
    let payload = url
        .strip_prefix(&format!("data:{mime};base64,"))
        .expect("a base64 data URL of the type");
    fake::base64_of(&json!(payload))
}

#[test]
fn images_go_as_image_url_parts_and_a_tool_results_images_in_a_user_message_after_it() {
    let image = fake::png_image();
    let server = FakeServer::start(vec![sse("text.sse")]);
    generate_with(&server, "gpt-4o", &fake::image_session(&image)).expect("reply");
    let body = &server.finish()[0].body;
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 6, "{body}");
    let user = &messages[1]["content"];
    assert_eq!(user[0], json!({"type": "text", "text": "look:"}));
    assert_eq!(user[1]["type"], "image_url");
    assert_eq!(user[2], json!({"type": "text", "text": " what is it?"}));
    assert_eq!(
        data_url_bytes(&user[1]["image_url"]["url"], "image/png"),
        *image.bytes
    );
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        messages[3],
        json!({"role": "tool", "content": "a screenshot", "tool_call_id": "call_1"})
    );
    assert_eq!(messages[4]["role"], "user");
    let after = &messages[4]["content"];
    assert_eq!(
        after[0],
        json!({"type": "text", "text": "The images returned by the read call call_1:"})
    );
    assert_eq!(
        data_url_bytes(&after[1]["image_url"]["url"], "image/png"),
        *image.bytes
    );
    assert_eq!(messages[5], json!({"role": "user", "content": "and now?"}));
}

#[test]
fn a_gif_goes_as_a_png_of_its_first_frame() {
    let image = fake::gif_image();
    let server = FakeServer::start(vec![sse("text.sse")]);
    generate_with(&server, "gpt-4o", &fake::image_session(&image)).expect("reply");
    let body = &server.finish()[0].body;
    let bytes = data_url_bytes(
        &body["messages"][1]["content"][1]["image_url"]["url"],
        "image/png",
    );
    let sent = crate::core::Image::from_bytes(bytes).expect("a PNG");
    let pixels = |image: &crate::core::Image| image.rgb().map(|rgb| rgb.data).expect("decodes");
    assert_eq!((sent.width, sent.height), (2, 1));
    assert_eq!(pixels(&sent), pixels(&image));
}

#[test]
fn a_text_only_model_refuses_images_before_sending() {
    let image = fake::png_image();
    for model in [
        "gpt-3.5-turbo",
        "deepseek-chat",
        "openrouter/openai/o3-mini",
    ] {
        let server = FakeServer::start(Vec::new());
        let result = generate_with(&server, model, &fake::image_session(&image));
        fake::assert_refused_for_images(result, model);
        assert_eq!(server.finish(), Vec::new(), "{model}: nothing sent");
        assert!(!backend_for(model).takes_images(), "{model}");
    }
    for model in ["gpt-4o", "gpt-4.1-mini", "o3", "test-model"] {
        assert!(backend_for(model).takes_images(), "{model}");
    }
    // A text-only model still takes a session without images.
    let server = FakeServer::start(vec![sse("text.sse")]);
    generate_with(&server, "gpt-3.5-turbo", &session()).expect("reply");
    assert_eq!(server.finish().len(), 1);
}

fn backend_for(model: &str) -> OpenAiBackend {
    OpenAiBackend::new(config("http://127.0.0.1:9", model))
}

#[test]
fn an_image_without_its_bytes_is_refused_before_sending() {
    let mut image = fake::png_image();
    image.bytes = Default::default();
    let server = FakeServer::start(Vec::new());
    let error =
        generate_with(&server, "gpt-4o", &fake::image_session(&image)).expect_err("refused");
    assert!(
        matches!(&error, BackendError::Invalid { message, .. } if message.contains("has no bytes")),
        "{error:?}"
    );
    assert_eq!(server.finish(), Vec::new());
}

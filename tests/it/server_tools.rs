//! `shepherd --server --use-tools` in front of a fake Anthropic upstream.
//!
//! The server runs its own tools through the agent's loop, so what holds for
//! the agent holds here too: the assistant turn that asked for a tool is sent
//! back with its thinking block and signature, unchanged, and a context
//! overflow evicts old turns and retries instead of failing the request.
//!
//! The upstream is the tiny_http fake of `fake_openai` replaying streams
//! written from Anthropic's documented Messages SSE format; it records every
//! request, so the tests check what shepherd sent on each round.

use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::fake_openai::{Canned, FakeOpenAi};
use crate::harness::{poll_until, Sandbox};

/// The servers' token: a server that runs tools is started with one.
const TOKEN: &str = "T-server-tools";
const THOUGHT: &str = "The user wants the time; get_time tells it.";
const SIGNATURE: &str = "EqQBCgIYAhIkZmFrZS1zaWduYXR1cmUtdGhhdC1tdXN0LXN0YXktdW5jaGFuZ2Vk";
const ANSWER: &str = "It is noon.";

/// A running `shepherd --server --use-tools`, killed on drop.
struct Server {
    child: Child,
    base: String,
    log: Arc<Mutex<String>>,
    _sandbox: Sandbox,
}

impl Server {
    fn start(upstream: &FakeOpenAi) -> Server {
        let sandbox = Sandbox::new("server-tools");
        let args = [
            "--server",
            "--port",
            "0",
            "--use-tools",
            "--auth-token",
            TOKEN,
            "--backend",
            "anthropic",
            "--api-base",
            &upstream.base_url,
            "-m",
            "test",
            "--api-key",
            "k-123",
            "--context-size",
            "8192",
        ];
        let mut child = sandbox.spawn(&args);
        let (address, log) = crate::harness::wait_listening(&mut child);
        let server = Server {
            child,
            base: address.trim_end_matches('/').to_string(),
            log,
            _sandbox: sandbox,
        };
        let healthy = poll_until(Duration::from_secs(60), || server.health() == 200);
        assert!(healthy, "never healthy; log: {}", server.log());
        server
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn health(&self) -> u16 {
        agent()
            .get(&format!("{}/health", self.base))
            .call()
            .map_or(0, |response| response.status().as_u16())
    }

    /// A non-streamed chat completion, with the token.
    fn chat(&self, messages: Value) -> (u16, Value) {
        let body = json!({"model": "test", "messages": messages});
        let response = agent()
            .post(&format!("{}/v1/chat/completions", self.base))
            .header("Content-Type", "application/json")
            .header("Authorization", &format!("Bearer {TOKEN}"))
            .send(body.to_string())
            .expect("post to the server");
        let status = response.status().as_u16();
        let text = response.into_body().read_to_string().expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent() -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build();
    ureq::Agent::new_with_config(config)
}

/// A named-event Anthropic SSE body.
fn anthropic_sse(events: &[Value]) -> Canned {
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect();
    Canned::sse_raw(&body)
}

/// Round 1: a signed thinking block, then a call of the built-in `get_time`.
fn thinking_then_get_time() -> Canned {
    anthropic_sse(&[
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "test", "stop_reason": null, "usage": {"input_tokens": 60, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": THOUGHT}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": SIGNATURE}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_time", "name": "get_time", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 30}}),
        json!({"type": "message_stop"}),
    ])
}

fn text(answer: &str) -> Canned {
    anthropic_sse(&[
        json!({"type": "message_start", "message": {"id": "msg_2", "type": "message", "role": "assistant", "content": [], "model": "test", "stop_reason": null, "usage": {"input_tokens": 90, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": answer}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ])
}

/// Anthropic's context overflow: a 400 `invalid_request_error`.
fn prompt_too_long() -> Canned {
    Canned::json(
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 8300 tokens > 8192 maximum"}}),
    )
}

/// The assistant turn that asked for `get_time` and the tool result after it,
/// as shepherd sent them upstream: both must be in `messages`, in order.
fn assert_signed_tool_turn(body: &Value) {
    let messages = body["messages"].as_array().expect("messages");
    let at = messages
        .iter()
        .position(|m| m["role"] == "assistant" && m["content"].to_string().contains("toolu_time"))
        .unwrap_or_else(|| panic!("no assistant turn with the call in {body}"));
    assert_eq!(
        messages[at]["content"],
        json!([
            {"type": "thinking", "thinking": THOUGHT, "signature": SIGNATURE},
            {"type": "tool_use", "id": "toolu_time", "name": "get_time", "input": {}},
        ]),
        "the thinking block and its signature go back unchanged, before the call"
    );
    let result = &messages[at + 1];
    assert_eq!(result["role"], "user", "{body}");
    assert_eq!(result["content"][0]["type"], "tool_result", "{body}");
    assert_eq!(result["content"][0]["tool_use_id"], "toolu_time", "{body}");
}

fn answer_text(reply: &Value) -> &str {
    reply["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
}

#[test]
fn server_tool_round_sends_back_thinking_and_its_signature() {
    let upstream = FakeOpenAi::start(vec![thinking_then_get_time(), text(ANSWER)]);
    let server = Server::start(&upstream);
    let (status, reply) = server.chat(json!([{"role": "user", "content": "What time is it?"}]));
    assert_eq!(status, 200, "{reply}; log: {}", server.log());
    assert!(answer_text(&reply).ends_with(ANSWER), "{reply}");
    let requests = upstream.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_eq!(requests[1].path, "/v1/messages");
    assert_signed_tool_turn(&requests[1].body);
}

#[test]
fn server_tool_round_evicts_and_retries_on_context_overflow() {
    let upstream = FakeOpenAi::start(vec![
        thinking_then_get_time(),
        prompt_too_long(),
        text(ANSWER),
    ]);
    let server = Server::start(&upstream);
    let old_question = "An old question about something else entirely.";
    let (status, reply) = server.chat(json!([
        {"role": "user", "content": old_question},
        {"role": "assistant", "content": "An old answer."},
        {"role": "user", "content": "What time is it?"},
    ]));
    assert_eq!(status, 200, "{reply}; log: {}", server.log());
    assert!(answer_text(&reply).ends_with(ANSWER), "{reply}");
    let requests = upstream.requests();
    assert_eq!(
        requests.len(),
        3,
        "a retry after the overflow: {requests:?}"
    );
    let (failed, retried) = (&requests[1].body, &requests[2].body);
    let count = |body: &Value| body["messages"].as_array().map_or(0, Vec::len);
    assert_eq!(count(failed), 5, "{failed}");
    assert_eq!(count(retried), 3, "the old turn was evicted: {retried}");
    assert!(failed.to_string().contains(old_question));
    assert!(!retried.to_string().contains(old_question), "{retried}");
    assert!(
        retried["messages"][0]
            .to_string()
            .contains("What time is it?"),
        "the current question stays first: {retried}"
    );
    assert_signed_tool_turn(retried);
}

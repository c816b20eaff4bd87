//! Unit tests: the wire shapes, the hub's dropping of slow observers, prompt
//! bodies and the last answer of a turn.

use serde_json::{json, Value};

use super::hub::Hub;
use super::jobs::last_answer;
use super::routes::parse_prompt;
use crate::core::error::ErrorKind;
use crate::core::{Event, FinishReason, Message, Session, Stats, ToolCall, ToolResultEvent};
use crate::frontend::serve::http::Request;

fn line(event: &Event) -> Value {
    let hub = Hub::new(4);
    serde_json::from_str(&hub.publish(7, event).unwrap()).unwrap()
}

#[test]
fn every_event_has_its_typed_shape() {
    let call = ToolCall {
        id: "c1".into(),
        name: "bash".into(),
        arguments: json!({"command": "ls"}),
    };
    let failed = ToolResultEvent {
        id: "c1".into(),
        name: "bash".into(),
        success: false,
        summary: "exit 1".into(),
        content: "boom".into(),
    };
    let cases = [
        (
            Event::Content("hi".into()),
            json!({"type": "delta", "content": "hi"}),
        ),
        (
            Event::Thinking("hm".into()),
            json!({"type": "thinking", "content": "hm"}),
        ),
        (
            Event::CodeBlock("x".into()),
            json!({"type": "codeblock", "content": "x"}),
        ),
        (
            Event::ToolCall(call),
            json!({"type": "tool_call", "name": "bash", "args": {"command": "ls"}, "id": "c1"}),
        ),
        (
            Event::ToolResult(failed),
            json!({"type": "tool_result", "name": "bash", "id": "c1", "success": false,
                   "summary": "exit 1", "content": "boom", "error": "boom"}),
        ),
        (
            Event::Error {
                kind: ErrorKind::Http,
                message: "bad".into(),
            },
            json!({"type": "error", "message": "bad", "error_type": "http_error"}),
        ),
        (
            Event::Stop(FinishReason::ToolCalls),
            json!({"type": "response_complete", "finish_reason": "tool_calls"}),
        ),
    ];
    for (event, expected) in cases {
        let mut got = line(&event);
        assert_eq!(got["seq"], 1);
        assert_eq!(got["request_id"], 7);
        let object = got.as_object_mut().unwrap();
        object.remove("seq");
        object.remove("request_id");
        assert_eq!(got, expected);
    }
    let stats = line(&Event::Stats(Stats {
        prompt_tokens: 3,
        ..Stats::default()
    }));
    assert_eq!(
        (stats["type"].clone(), stats["prompt_tokens"].clone()),
        (json!("stats"), json!(3))
    );
}

#[test]
fn a_slow_observer_is_dropped_and_others_keep_every_event() {
    let hub = Hub::new(2);
    let (_, _, slow) = hub.subscribe();
    let (_, _, fast) = hub.subscribe();
    let mut seen = Vec::new();
    for n in 0..5 {
        hub.publish(1, &Event::Content(n.to_string()));
        seen.push(fast.recv().unwrap());
    }
    assert_eq!(hub.observers(), 1);
    let seqs: Vec<u64> = seen
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    assert_eq!(
        slow.iter().count(),
        2,
        "the slow one got its buffer, then the end"
    );
}

fn post(body: &str, content_type: Option<&str>) -> Request {
    let mut headers = Vec::new();
    if let Some(t) = content_type {
        headers.push(("Content-Type".to_string(), t.to_string()));
    }
    Request {
        method: "POST".into(),
        path: "/request".into(),
        query: String::new(),
        headers,
        body: body.as_bytes().to_vec(),
        peer: "127.0.0.1:1".parse().unwrap(),
    }
}

#[test]
fn prompt_bodies() {
    let ok = |body, t| parse_prompt(&post(body, t)).map(|b| (b.message.content, b.stream, b.queue));
    assert_eq!(
        ok("just text", None),
        Ok(("just text".into(), false, false))
    );
    assert_eq!(
        ok(r#"{"prompt":"p","stream":true}"#, None),
        Ok(("p".into(), true, false))
    );
    assert_eq!(
        ok(r#"{"prompt":"p","async":true}"#, Some("application/json")),
        Ok(("p".into(), false, true))
    );
    let err = |body, t| parse_prompt(&post(body, t)).err().unwrap();
    assert!(err("{broken", Some("application/json")).starts_with("invalid JSON"));
    assert!(err("not json", Some("application/json")).starts_with("invalid JSON"));
    assert!(err(r#"{"prompt": 5}"#, None).starts_with("invalid JSON"));
    assert_eq!(err(r#"{"stream": true}"#, None), "missing prompt");
    assert_eq!(err("   ", None), "missing prompt");
}

#[test]
fn prompt_images_are_decoded_or_refused() {
    let png = crate::core::image::test_png(2, 3, [7, 14, 21]);
    let url = format!(
        "data:image/png;base64,{}",
        crate::util::base64::encode(&png)
    );
    let body = serde_json::json!({"prompt": "what is it?", "images": [url, url]}).to_string();
    let parsed = parse_prompt(&post(&body, None)).expect("accepted");
    assert_eq!(parsed.message.content, "what is it?");
    assert_eq!(parsed.message.images.len(), 2);
    let part = &parsed.message.images[0];
    assert_eq!((part.at, part.image.width, part.image.height), (0, 2, 3));
    assert_eq!(part.image.mime, "image/png");
    // An image alone is a prompt.
    let alone = serde_json::json!({"images": [url]}).to_string();
    assert_eq!(
        parse_prompt(&post(&alone, None))
            .unwrap()
            .message
            .images
            .len(),
        1
    );

    let err = |images: serde_json::Value| {
        let body = serde_json::json!({"prompt": "p", "images": images}).to_string();
        parse_prompt(&post(&body, None)).err().expect("refused")
    };
    let text = format!(
        "data:text/plain;base64,{}",
        crate::util::base64::encode(b"hi")
    );
    assert!(err(serde_json::json!([url, text])).starts_with("images[1]: unsupported image type"));
    let truncated = format!(
        "data:image/png;base64,{}",
        crate::util::base64::encode(&png[..30])
    );
    assert!(err(serde_json::json!([truncated])).contains("does not decode"));
    assert!(err(serde_json::json!(["/etc/passwd"])).contains("data:image/"));
    assert!(err(serde_json::json!("not a list")).starts_with("invalid JSON"));
    let many = vec![url.clone(); crate::core::image::MAX_IMAGES + 1];
    assert!(err(serde_json::json!(many)).contains("at most 64"));
}

#[test]
fn last_answer_is_the_final_assistant_text_of_the_turn() {
    let mut session = Session::new("s");
    session.messages = vec![
        Message::user("old"),
        Message::assistant("old answer"),
        Message::user("new"),
        Message::assistant("looking"),
        Message::assistant("found it"),
    ];
    assert_eq!(last_answer(&session), "found it");
    session.messages.truncate(3);
    assert_eq!(last_answer(&session), "");
}

//! The tool server's wire format: JSON-RPC 2.0, one JSON object per
//! line over TCP. Shared by the server (`frontend::tool_server`) and the
//! client that runs tools through it ([`super::remote`]).
//!
//! Methods: `listTools` → `[{name, description, parameters}]`;
//! `executeTool {name, arguments}` → the tool's text. Two additions of ours:
//! `auth {token}` opens a connection to a server that requires a token, and
//! `sideEffecting {name, arguments}` → bool tells a client whether a call
//! needs its user's approval. A tool that runs and fails answers with the
//! error [`TOOL_FAILED`] carrying `{content, summary}` in `data`.
//!
//! Framing: [`read_line`] reads capped lines and [`frame`] says what a line
//! is before any JSON-RPC meaning is given to it, so the server can tell a
//! JSON-RPC client from another protocol talking to its port (a web page's
//! `fetch` arrives as an HTTP request line and header lines).

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
/// The connection has not authenticated, or the token is wrong.
pub const UNAUTHORIZED: i64 = -32001;
/// Too many connections: the server answers once and closes.
pub const BUSY: i64 = -32002;
/// The server's approval policy refuses the call.
pub const DENIED: i64 = -32003;
/// The tool ran and reported a failure; `data` holds `{content, summary}`.
pub const TOOL_FAILED: i64 = -32010;

/// A request as a client sends it (the tool server's client and the MCP
/// client); without an `id` it is a notification.
#[derive(Serialize)]
pub struct Request<'a> {
    pub jsonrpc: &'static str,
    pub method: &'a str,
    #[serde(skip_serializing_if = "Value::is_null")]
    pub params: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
}

impl<'a> Request<'a> {
    /// A call that expects an answer with `id`.
    pub fn call(method: &'a str, params: Value, id: u64) -> Request<'a> {
        Request {
            jsonrpc: "2.0",
            method,
            params,
            id: Some(id),
        }
    }

    /// A notification: no answer expected.
    pub fn notification(method: &'a str, params: Value) -> Request<'a> {
        Request {
            jsonrpc: "2.0",
            method,
            params,
            id: None,
        }
    }

    /// The request as a JSON value (it has only string keys: cannot fail).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A request object as a server reads it, checked ([`parse_request`]).
pub struct ParsedRequest {
    /// `None` for a notification.
    pub id: Option<Value>,
    pub method: String,
    pub params: Value,
}

/// What makes an object a request: `jsonrpc` 2.0 and a string `method`; the
/// one check behind [`is_request_shaped`] and [`parse_request`].
fn names_a_method(object: &serde_json::Map<String, Value>) -> Result<(), &'static str> {
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err("jsonrpc must be \"2.0\"");
    }
    if !object.get("method").is_some_and(Value::is_string) {
        return Err("method must be a string");
    }
    Ok(())
}

/// Checks a request's envelope; the error answer carries the id when it
/// could be read.
pub fn parse_request(value: Value) -> Result<ParsedRequest, Box<Response>> {
    let refuse = |id: Value, message: &str| {
        Box::new(Response::err(id, RpcError::new(INVALID_REQUEST, message)))
    };
    let Value::Object(mut object) = value else {
        return Err(refuse(Value::Null, "a request must be a JSON object"));
    };
    let id = object.remove("id");
    let usable_id = match &id {
        None => Value::Null,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id.clone(),
        Some(_) => return Err(refuse(Value::Null, "id must be a string, number or null")),
    };
    names_a_method(&object).map_err(|message| refuse(usable_id.clone(), message))?;
    let Some(Value::String(method)) = object.remove("method") else {
        return Err(refuse(usable_id, "method must be a string"));
    };
    let params = object.remove("params").unwrap_or(Value::Null);
    if !matches!(params, Value::Null | Value::Object(_) | Value::Array(_)) {
        return Err(refuse(usable_id, "params must be an object or an array"));
    }
    Ok(ParsedRequest { id, method, params })
}

/// A response: exactly one of `result` and `error`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Response {
    pub jsonrpc: String,
    pub id: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
}

impl Response {
    pub fn ok(id: Value, result: Value) -> Response {
        Response {
            jsonrpc: "2.0".into(),
            id,
            result: Some(result),
            error: None,
        }
    }

    pub fn err(id: Value, error: RpcError) -> Response {
        Response {
            jsonrpc: "2.0".into(),
            id,
            result: None,
            error: Some(error),
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
}

/// One entry of `listTools`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ToolEntry {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub parameters: Value,
}

/// `data` of a [`TOOL_FAILED`] error.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Failure {
    pub content: String,
    #[serde(default)]
    pub summary: String,
}

/// What a received line is, before any JSON-RPC meaning is given to it.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// Nothing but whitespace.
    Blank,
    /// An HTTP request line (`POST / HTTP/1.1`) or header line (`Host: x`):
    /// another protocol is talking to this port.
    Http,
    /// Not JSON; the parser's message.
    NotJson(String),
    Json(Value),
}

/// Classifies one line (without its `\n`).
pub fn frame(line: &[u8]) -> Frame {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Frame::Blank;
    }
    if is_http_request_line(line) || is_header_line(line) {
        return Frame::Http;
    }
    match crate::util::json::parse_strict(line) {
        Ok(value) => Frame::Json(value),
        Err(error) => Frame::NotJson(error.to_string()),
    }
}

/// Whether a JSON value has the shape of a request (or a batch of them):
/// what the first line of a connection must be.
pub fn is_request_shaped(value: &Value) -> bool {
    match value {
        Value::Object(object) => names_a_method(object).is_ok(),
        Value::Array(items) => {
            !items.is_empty()
                && items
                    .iter()
                    .all(|item| item.is_object() && is_request_shaped(item))
        }
        _ => false,
    }
}

/// `METHOD target HTTP/…`: a method token, a space, and ` HTTP/` further on.
fn is_http_request_line(line: &[u8]) -> bool {
    let method = token_len(line);
    method > 0
        && line.get(method) == Some(&b' ')
        && line.windows(6).any(|window| window == b" HTTP/")
}

/// `Name: value`: a header-name token directly followed by a colon. No JSON
/// text has this shape (a JSON line starts with `{`, `[`, `"`, a digit, `-`,
/// or a literal that a colon cannot follow).
fn is_header_line(line: &[u8]) -> bool {
    let name = token_len(line);
    name > 0 && line.get(name) == Some(&b':')
}

/// Length of the RFC 9110 token (`tchar`s) at the start of `line`.
fn token_len(line: &[u8]) -> usize {
    line.iter()
        .take_while(|b| crate::util::net::is_http_tchar(**b))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_tell_http_from_json_rpc() {
        let http = [
            "POST / HTTP/1.1\r",
            "GET /x?y=1 HTTP/1.0",
            "OPTIONS * HTTP/1.1",
            "PRI * HTTP/2.0",
            "Host: 127.0.0.1:9876\r",
            "Content-Length: 12",
            "origin:http://evil.example",
        ];
        for line in http {
            assert_eq!(frame(line.as_bytes()), Frame::Http, "{line}");
        }
        for line in ["", "\r", " \t "] {
            assert_eq!(frame(line.as_bytes()), Frame::Blank, "{line:?}");
        }
        for line in ["{\"a\": \"b: c\"}", "[1]", "7", "null", "\"Host: x\""] {
            assert!(matches!(frame(line.as_bytes()), Frame::Json(_)), "{line}");
        }
        for line in ["not json", "GET /", "{", "\u{feff}{}"] {
            assert!(
                matches!(frame(line.as_bytes()), Frame::NotJson(_)),
                "{line}"
            );
        }
        assert!(matches!(frame(&[0xff, b'{']), Frame::NotJson(_)));
    }

    #[test]
    fn request_shapes() {
        let request = serde_json::json!({"jsonrpc": "2.0", "method": "listTools", "id": 1});
        assert!(is_request_shaped(&request));
        assert!(is_request_shaped(&serde_json::json!([request.clone()])));
        for value in [
            serde_json::json!([]),
            serde_json::json!([request, 1]),
            serde_json::json!({"jsonrpc": "2.0", "id": 1}),
            serde_json::json!({"jsonrpc": "1.0", "method": "listTools"}),
            serde_json::json!({"jsonrpc": "2.0", "method": 7}),
            serde_json::json!("listTools"),
        ] {
            assert!(!is_request_shaped(&value), "{value}");
        }
    }

    #[test]
    fn responses_have_result_or_error() {
        let ok = serde_json::to_value(Response::ok(Value::from(1), Value::from("x"))).unwrap();
        assert_eq!(
            ok,
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": "x"})
        );
        let err = Response::err(Value::Null, RpcError::new(PARSE_ERROR, "bad"));
        let err = serde_json::to_value(err).unwrap();
        assert_eq!(
            err,
            serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "bad"}})
        );
    }
}

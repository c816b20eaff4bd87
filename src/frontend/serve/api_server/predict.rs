//! Vertex AI's prediction route, as llama-server serves it when started with
//! `AIP_MODE=PREDICTION` (`AIP_PREDICT_ROUTE`, `/predict` by default; the
//! environment is read in `config::resolve`).
//!
//! `POST {"instances": [...]}`: each instance is a request body for one of
//! this server's routes, named by its `@requestFormat` (a route's camelCase
//! name, `chatCompletions` for `/v1/chat/completions`, or the route's path).
//! Each runs through [`ApiServer::handle`](super::ApiServer), the same handler
//! a client's request reaches, on its own thread, with a responder that gives
//! the answer back ([`Responder::capture`]); the answer is
//! `{"predictions": [...]}` with each instance's answer body in order (an
//! error's body too: one failed instance does not fail the others). A
//! `stream` field is set to false, as llama-server does: a prediction is whole.

use std::thread::{Scope, ScopedJoinHandle};

use crossbeam_channel::Receiver;
use serde_json::Value;

use super::error::ApiError;
use super::fields::json_body;
use super::wire::llama as lwire;
use crate::frontend::serve::http::{Captured, Handler, Request, Responder};

/// The most instances one request may carry (llama-server's limit).
const MAX_INSTANCES: usize = 128;

/// The routes an instance may name, llama-server's `POST` routes this server
/// serves. Where two give the same camelCase name the first is meant
/// (`/embeddings` answers both of llama-server's embedding shapes).
const ROUTES: [&str; 22] = [
    "/completion",
    "/completions",
    "/v1/completions",
    "/chat/completions",
    "/v1/chat/completions",
    "/chat/completions/input_tokens",
    "/v1/chat/completions/input_tokens",
    "/v1/responses",
    "/responses",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/infill",
    "/embedding",
    "/embeddings",
    "/v1/embeddings",
    "/rerank",
    "/reranking",
    "/v1/rerank",
    "/v1/reranking",
    "/tokenize",
    "/detokenize",
    "/apply-template",
];

/// A route's `@requestFormat` name, as llama-server derives it: `/v1` and the
/// leading slash dropped, then camelCase at each `/`, `-` or `_`
/// (`/v1/chat/completions` is `chatCompletions`, `/apply-template` is
/// `applyTemplate`).
fn format_name(path: &str) -> String {
    let path = path
        .strip_prefix("/v1")
        .filter(|_| path.len() > 3)
        .unwrap_or(path);
    let path = path.strip_prefix('/').unwrap_or(path);
    let mut name = String::with_capacity(path.len());
    let mut upper = false;
    for c in path.chars().take_while(|&c| c != ':') {
        match c {
            '/' | '-' | '_' => upper = true,
            c if upper => {
                name.push(c.to_ascii_uppercase());
                upper = false;
            }
            c => name.push(c),
        }
    }
    name
}

/// The route `format` names: a camelCase name (the first route with it), or a path.
fn route_of(format: &str) -> Option<&'static str> {
    (ROUTES.iter().find(|route| format_name(route) == format))
        .or_else(|| ROUTES.iter().find(|route| **route == format))
        .copied()
}

/// The body's instances: an array of at most [`MAX_INSTANCES`].
fn instances(body: &[u8]) -> Result<Vec<Value>, ApiError> {
    let value = json_body(body)?;
    let Value::Object(mut object) = value else {
        return Err(ApiError::invalid("", "request body must be a JSON object"));
    };
    let Some(Value::Array(instances)) = object.remove("instances") else {
        return Err(ApiError::invalid(
            "instances",
            "request body must include an array field named instances",
        ));
    };
    if instances.len() > MAX_INSTANCES {
        return Err(ApiError::invalid(
            "instances",
            format!("instances array exceeds maximum size of {MAX_INSTANCES}"),
        ));
    }
    Ok(instances)
}

/// An instance as the request its `@requestFormat` names: the route and the body.
fn instance_request(instance: Value) -> Result<(&'static str, Vec<u8>), ApiError> {
    let Value::Object(mut payload) = instance else {
        return Err(ApiError::invalid("", "each instance must be a JSON object"));
    };
    let Some(Value::String(format)) = payload.remove("@requestFormat") else {
        return Err(ApiError::invalid(
            "@requestFormat",
            "each instance must include a string @requestFormat",
        ));
    };
    let route = route_of(&format).ok_or_else(|| {
        ApiError::invalid(
            "@requestFormat",
            format!("no handler registered for @requestFormat: {format}"),
        )
    })?;
    if payload.contains_key("stream") {
        payload.insert("stream".into(), Value::Bool(false));
    }
    let body = serde_json::to_vec(&Value::Object(payload)).unwrap_or_default();
    Ok((route, body))
}

/// An answer body as a prediction: its JSON, else its text.
fn prediction(captured: Captured) -> Value {
    if captured.body.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(&captured.body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&captured.body).into_owned()))
}

fn error_prediction(error: &ApiError) -> Value {
    serde_json::to_value(error.openai_body()).unwrap_or_default()
}

/// An instance on its way: the thread running it and where its answer comes,
/// or why it never ran.
enum Running<'scope> {
    Started(ScopedJoinHandle<'scope, ()>, Receiver<Captured>),
    Refused(ApiError),
}

impl Running<'_> {
    /// The instance's prediction, once its thread is done.
    fn prediction(self) -> Value {
        match self {
            Running::Refused(error) => error_prediction(&error),
            Running::Started(thread, answered) => {
                let _ = thread.join();
                match answered.try_recv() {
                    Ok(captured) => prediction(captured),
                    Err(_) => error_prediction(&ApiError::invalid(
                        "",
                        "predict route does not support streaming responses",
                    )),
                }
            }
        }
    }
}

impl super::ApiServer {
    /// Vertex AI's `POST /predict`: every instance through its route at once,
    /// each on a thread of its own (the answer waits for the slowest).
    pub(super) fn predict(&self, request: &Request, responder: Responder) {
        let instances = match instances(&request.body) {
            Ok(instances) => instances,
            Err(error) => return self.refuse(responder, &error),
        };
        let predictions: Vec<Value> = std::thread::scope(|scope| {
            let running: Vec<Running> = (instances.into_iter())
                .map(|instance| self.start_instance(scope, request, &responder, instance))
                .collect();
            running.into_iter().map(Running::prediction).collect()
        });
        responder.json(200, &lwire::Predictions { predictions });
    }

    /// Starts one instance as a request of its own, answered back to this one
    /// and watching this request's client.
    fn start_instance<'scope>(
        &'scope self,
        scope: &'scope Scope<'scope, '_>,
        outer: &Request,
        responder: &Responder,
        instance: Value,
    ) -> Running<'scope> {
        let (route, body) = match instance_request(instance) {
            Ok(request) => request,
            Err(error) => return Running::Refused(error),
        };
        let (answer, answered) = responder.capture("POST", route);
        let request = Request {
            method: "POST".into(),
            path: route.into(),
            query: outer.query.clone(),
            headers: outer.headers.clone(),
            body,
            peer: outer.peer,
        };
        let thread = std::thread::Builder::new().name("shepherd-predict".into());
        match thread.spawn_scoped(scope, move || self.handle(request, answer)) {
            Ok(thread) => Running::Started(thread, answered),
            Err(error) => Running::Refused(ApiError::new(
                500,
                "server_error",
                format!("cannot start a thread for the instance: {error}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn request_formats_are_llama_servers_camel_case_names_or_paths() {
        assert_eq!(format_name("/v1/chat/completions"), "chatCompletions");
        assert_eq!(format_name("/apply-template"), "applyTemplate");
        assert_eq!(
            format_name("/v1/messages/count_tokens"),
            "messagesCountTokens"
        );
        assert_eq!(format_name("/slots/:id_slot"), "slots");
        assert_eq!(route_of("chatCompletions"), Some("/chat/completions"));
        assert_eq!(route_of("embeddings"), Some("/embeddings"));
        assert_eq!(route_of("rerank"), Some("/rerank"));
        assert_eq!(route_of("/v1/embeddings"), Some("/v1/embeddings"));
        assert_eq!(route_of("predict"), None);
        assert_eq!(route_of("/predict"), None);
        assert_eq!(route_of("/slots"), None);
    }

    #[test]
    fn instances_become_their_routes_requests_without_streaming() {
        let (route, body) = instance_request(
            json!({"@requestFormat": "chatCompletions", "stream": true, "max_tokens": 8}),
        )
        .unwrap();
        assert_eq!(route, "/chat/completions");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body, json!({"stream": false, "max_tokens": 8}));
        for bad in [
            json!([1]),
            json!({"max_tokens": 8}),
            json!({"@requestFormat": 1}),
            json!({"@requestFormat": "nope"}),
        ] {
            assert_eq!(
                instance_request(bad.clone()).unwrap_err().status,
                400,
                "{bad}"
            );
        }
        assert!(instances(br#"{"instances": [{}, {}]}"#).is_ok_and(|i| i.len() == 2));
        for bad in [&b"[]"[..], b"{}", br#"{"instances": {}}"#, b"{"] {
            assert_eq!(instances(bad).unwrap_err().status, 400);
        }
        let many = json!({"instances": vec![json!({}); MAX_INSTANCES + 1]}).to_string();
        assert_eq!(instances(many.as_bytes()).unwrap_err().status, 400);
    }

    #[test]
    fn answers_become_predictions_as_json_or_text() {
        let captured = |body: &[u8]| Captured {
            status: 200,
            body: body.to_vec(),
        };
        assert_eq!(prediction(captured(br#"{"a": 1}"#)), json!({"a": 1}));
        assert_eq!(prediction(captured(b"plain")), json!("plain"));
        assert_eq!(prediction(captured(b"")), Value::Null);
    }
}

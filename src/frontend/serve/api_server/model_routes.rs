//! llama-server's routes that ask the in-process model without generating:
//! `POST /tokenize`, `/detokenize`, `/apply-template`, the prompt counts
//! (`/v1/messages/count_tokens`, `/v1/chat/completions/input_tokens`,
//! `/v1/responses/input_tokens`), `GET /props` and `/slots` (with its slot
//! actions). The bodies are read and answered by [`super::local`]; a backend
//! without the in-process model answers 501.

use std::sync::atomic::Ordering;

use super::error::ApiError;
use super::wire::llama as wire;
use super::{anthropic, local, openai, responses, ApiServer};
use crate::frontend::serve::http::{Request, Responder};

/// Which route counts a prompt's tokens: their requests and answers differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CountRoute {
    Chat,
    Messages,
    Responses,
}

impl ApiServer {
    pub(super) fn tokenize(&self, request: &Request, responder: Responder) {
        self.metrics
            .tokenize_requests
            .fetch_add(1, Ordering::Relaxed);
        let Some((_, model, responder)) = self.local_model("/tokenize", responder) else {
            return;
        };
        match local::tokenize(model, &request.body) {
            Ok(tokens) => responder.json(200, &tokens),
            Err(error) => self.refuse(responder, &error),
        }
    }
    /// Anthropic's `POST /v1/messages/count_tokens` and llama-server's
    /// `POST /v1/chat/completions/input_tokens` and `/v1/responses/input_tokens` (a
    /// chat completion or Responses request): the request's prompt as the model
    /// would read it (template and tools included), `{"input_tokens": N}` (with
    /// llama-server's `object` on the OpenAI routes); errors in the route's dialect.
    pub(super) fn count_tokens(&self, request: &Request, responder: Responder, route: CountRoute) {
        self.metrics
            .tokenize_requests
            .fetch_add(1, Ordering::Relaxed);
        let path = match route {
            CountRoute::Messages => "/v1/messages/count_tokens",
            CountRoute::Chat => "/v1/chat/completions/input_tokens",
            CountRoute::Responses => "/v1/responses/input_tokens",
        };
        let Some((loaded, model, responder)) = self.local_model(path, responder) else {
            return;
        };
        let work = match route {
            CountRoute::Messages => anthropic::parse_count(&request.body, &loaded.defaults),
            CountRoute::Chat => {
                openai::parse(&request.body, &loaded.defaults).map(|parsed| parsed.work)
            }
            CountRoute::Responses => {
                responses::parse(&request.body, &loaded.defaults, &self.responses)
                    .map(|parsed| parsed.work)
            }
        };
        let counted = work.and_then(|work| {
            model
                .count_chat(&work.session, work.tools)
                .map_err(|e| local::from_model(e, "messages"))
        });
        match (counted, route) {
            (Ok(n), CountRoute::Messages) => {
                responder.json(200, &serde_json::json!({ "input_tokens": n }))
            }
            (Ok(n), _) => responder.json(
                200,
                &serde_json::json!({ "object": "response.input_tokens", "input_tokens": n }),
            ),
            (Err(error), CountRoute::Messages) => {
                responder.json_with(error.status, &error.anthropic_body(), &error.headers())
            }
            (Err(error), _) => self.refuse(responder, &error),
        }
    }
    pub(super) fn detokenize(&self, request: &Request, responder: Responder) {
        self.metrics
            .tokenize_requests
            .fetch_add(1, Ordering::Relaxed);
        let Some((_, model, responder)) = self.local_model("/detokenize", responder) else {
            return;
        };
        match local::detokenize(model, &request.body) {
            Ok(content) => responder.json(200, &content),
            Err(error) => self.refuse(responder, &error),
        }
    }
    /// `GET /slots` (a 501 with `--no-slots`, llama-server's words), and
    /// `POST /slots/{id}?action=...` (see [`local::slot_action`]).
    pub(super) fn slots(&self, request: &Request, responder: Responder) {
        if request.method == "GET" && !self.slots {
            let message = "This server does not support slots endpoint. Start it with `--slots`";
            return self.refuse(
                responder,
                &ApiError::new(501, "not_supported_error", message),
            );
        }
        let Some((_, model, responder)) = self.local_model("/slots", responder) else {
            return;
        };
        let answer = match request.method.as_str() {
            "GET" => local::slots(model),
            _ => {
                let id = request.path.trim_start_matches("/slots/");
                local::slot_action(model, id, request)
            }
        };
        match answer {
            Ok(body) => responder.json(200, &body),
            Err(error) => self.refuse(responder, &error),
        }
    }
    pub(super) fn props(&self, responder: Responder) {
        let Some((loaded, model, responder)) = self.local_model("/props", responder) else {
            return;
        };
        responder.json(200, &local::props(model, &loaded.defaults));
    }

    /// `POST /apply-template`.
    pub(super) fn apply_template(&self, request: &Request, responder: Responder) {
        self.metrics
            .tokenize_requests
            .fetch_add(1, Ordering::Relaxed);
        let Some((loaded, model, responder)) = self.local_model("/apply-template", responder)
        else {
            return;
        };
        let rendered = openai::parse(&request.body, &loaded.defaults).and_then(|parsed| {
            // llama-server's `add_generation_prompt`: true unless false.
            let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
            let generation_prompt = match body.get("add_generation_prompt") {
                None => true,
                Some(serde_json::Value::Bool(add)) => *add,
                Some(_) => {
                    return Err(ApiError::invalid(
                        "add_generation_prompt",
                        "'add_generation_prompt' must be true or false",
                    ))
                }
            };
            let work = parsed.work;
            let kwargs = work.sampling.chat_template_kwargs;
            model
                .render_chat(&work.session, work.tools, kwargs, generation_prompt)
                .map_err(|e| local::from_model(e, "messages"))
        });
        match rendered {
            Ok(prompt) => responder.json(200, &wire::Applied { prompt }),
            Err(error) => self.refuse(responder, &error),
        }
    }
}

//! The Responses API's stored responses: what `previous_response_id`,
//! `GET /v1/responses/{id}` and `DELETE /v1/responses/{id}` read.
//!
//! Each answer of `/v1/responses` whose request did not say `store: false` is
//! kept in memory with its conversation (the input items it was given, the
//! earlier ones of a chain included, then its output items), so a request that
//! names it as `previous_response_id` reads that conversation before its own
//! input, as OpenAI's does. The store is bounded twice, and the oldest answers
//! go first past either bound: by count (`--responses-store N`, 0 keeps
//! none) and by bytes ([`MAX_BYTES`]), so no client grows the server's memory
//! without end. Nothing survives a restart.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use serde_json::{json, Value};

use super::error::ApiError;
use crate::frontend::serve::http::Responder;

/// The most bytes (as JSON) the stored answers and their conversations take.
pub const MAX_BYTES: usize = 64 << 20;

/// One stored answer.
#[derive(Debug)]
pub struct Stored {
    /// The `response` object as it was answered.
    pub response: Value,
    /// Its input items (a chain's earlier ones first), then its output items.
    pub conversation: Vec<Value>,
    bytes: usize,
}

#[derive(Debug, Default)]
struct Inner {
    /// Ids, oldest first.
    order: VecDeque<String>,
    entries: HashMap<String, Arc<Stored>>,
    bytes: usize,
}

/// The stored answers, shared by every connection's thread.
#[derive(Debug)]
pub struct Store {
    limit: usize,
    max_bytes: usize,
    inner: Mutex<Inner>,
}

impl Store {
    /// A store of at most `limit` answers and [`MAX_BYTES`].
    pub fn new(limit: usize) -> Store {
        Store::bounded(limit, MAX_BYTES)
    }

    fn bounded(limit: usize, max_bytes: usize) -> Store {
        Store {
            limit,
            max_bytes,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Whether answers are kept at all (`--responses-store 0` keeps none).
    pub fn enabled(&self) -> bool {
        self.limit > 0
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding it leaves a consistent map: each
        // change below is whole before the next begins.
        crate::util::sync::lock(&self.inner)
    }

    /// Keeps an answer, dropping the oldest past either bound; one larger than
    /// the byte bound alone is not kept.
    pub fn keep(&self, id: &str, response: Value, conversation: Vec<Value>) {
        let bytes = response.to_string().len()
            + conversation
                .iter()
                .map(|item| item.to_string().len())
                .sum::<usize>();
        if !self.enabled() || bytes > self.max_bytes {
            return;
        }
        let stored = Arc::new(Stored {
            response,
            conversation,
            bytes,
        });
        let mut inner = self.lock();
        if let Some(old) = inner.entries.insert(id.to_string(), stored) {
            inner.bytes -= old.bytes;
            inner.order.retain(|kept| kept != id);
        }
        inner.order.push_back(id.to_string());
        inner.bytes += bytes;
        while inner.order.len() > self.limit || inner.bytes > self.max_bytes {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some(gone) = inner.entries.remove(&oldest) {
                inner.bytes -= gone.bytes;
            }
        }
    }

    /// Keeps a finished `response` with its conversation: the input `items` it
    /// read, then its output items.
    pub fn keep_response(&self, id: &str, response: &impl Serialize, items: &[Value]) {
        let Ok(response) = serde_json::to_value(response) else {
            return;
        };
        let mut conversation = items.to_vec();
        if let Some(Value::Array(output)) = response.get("output") {
            conversation.extend(output.iter().cloned());
        }
        self.keep(id, response, conversation);
    }

    pub fn get(&self, id: &str) -> Option<Arc<Stored>> {
        self.lock().entries.get(id).cloned()
    }

    /// Drops an answer; whether it was there.
    pub fn delete(&self, id: &str) -> bool {
        let mut inner = self.lock();
        let Some(gone) = inner.entries.remove(id) else {
            return false;
        };
        inner.bytes -= gone.bytes;
        inner.order.retain(|kept| kept != id);
        true
    }
}

/// The 404 of a `previous_response_id` not (or no longer) stored, in OpenAI's words.
pub fn previous_not_found(id: &str) -> ApiError {
    let mut error = ApiError::new(
        404,
        "invalid_request_error",
        format!("Previous response with id '{id}' not found."),
    );
    error.param = Some("previous_response_id".into());
    error.code = Some("previous_response_not_found".into());
    error
}

impl super::ApiServer {
    /// `GET /v1/responses/{id}` (the stored `response`) and `DELETE` (drops it);
    /// a 404 for an id not stored.
    pub(super) fn stored_response(&self, method: &str, id: &str, responder: Responder) {
        let found = match method {
            "DELETE" => self
                .responses
                .delete(id)
                .then(|| json!({"id": id, "object": "response", "deleted": true})),
            _ => self.responses.get(id).map(|stored| stored.response.clone()),
        };
        match found {
            Some(body) => responder.json(200, &body),
            None => {
                let mut error = ApiError::new(
                    404,
                    "invalid_request_error",
                    format!("Response with id '{id}' not found."),
                );
                error.code = Some("response_not_found".into());
                responder.json_with(404, &error.openai_body(), &[]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(text: &str) -> Vec<Value> {
        vec![json!({"role": "user", "content": text})]
    }

    #[test]
    fn the_oldest_go_first_past_the_count() {
        let store = Store::new(2);
        for id in ["a", "b", "c"] {
            store.keep(id, json!({"id": id}), item(id));
        }
        assert!(store.get("a").is_none());
        assert_eq!(store.get("b").unwrap().response["id"], "b");
        assert_eq!(store.get("c").unwrap().conversation, item("c"));
        assert!(store.delete("b") && !store.delete("b"));
        assert!(store.get("b").is_none());
        store.keep("d", json!({}), item("d"));
        assert!(store.get("c").is_some() && store.get("d").is_some());
    }

    #[test]
    fn the_oldest_go_first_past_the_bytes_and_a_huge_answer_is_not_kept() {
        let one = json!({"id": "x"}).to_string().len()
            + item("x").iter().map(|i| i.to_string().len()).sum::<usize>();
        let store = Store::bounded(100, 2 * one);
        for id in ["a", "b", "c"] {
            store.keep(id, json!({"id": id}), item(id));
        }
        assert!(store.get("a").is_none());
        assert!(store.get("b").is_some() && store.get("c").is_some());
        store.keep("big", json!({"id": "x".repeat(3 * one)}), Vec::new());
        assert!(store.get("big").is_none() && store.get("c").is_some());
        assert_eq!(store.lock().bytes, 2 * one);
    }

    #[test]
    fn zero_keeps_none() {
        let store = Store::new(0);
        store.keep("a", json!({}), Vec::new());
        assert!(!store.enabled() && store.get("a").is_none());
    }
}

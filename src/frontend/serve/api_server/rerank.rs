//! llama-server's reranking route, `POST /rerank` (also `/reranking`,
//! `/v1/rerank`, `/v1/reranking`), for a server started with `--pooling rank`
//! (`--reranking`) on a reranker model; without it a 501 says how to start one.
//!
//! Two request shapes, told apart as llama-server tells them, by `texts`:
//! Jina's and Cohere's (`query`, `documents`, `top_n`, `return_documents`),
//! answered `{model, object, usage, results: [{index, relevance_score,
//! document?}]}`; and Hugging Face TEI's (`query`, `texts`, `return_text`),
//! answered with the bare list `[{index, score, text?}]`. Either way the
//! results are sorted by score, best first (ties in input order), and cut to
//! `top_n`.
//!
//! Each query and document pair is one [`EmbedInput::Pair`] through the model's
//! one embedding path ([`LocalModel::embed`]), which tokenizes it as
//! llama-server does and reads the model's score from the rank pooling.

use serde_json::Value;

use super::error::ApiError;
use super::fields::{json_body, Fields};
use super::local::{from_model, MAX_INPUTS};
use super::wire::llama as lwire;
use super::Defaults;
use crate::backend::llamacpp::{EmbedInput, LocalModel, ModelError, NOT_RERANKING};
use crate::frontend::serve::http::{Request, Responder};
use crate::llama::Pooling;

/// The fields a rerank request may carry; others are ignored, as llama-server
/// ignores them.
const KNOWN: [&str; 7] = [
    "query",
    "documents",
    "texts",
    "top_n",
    "return_documents",
    "return_text",
    "model",
];

/// Which API a request speaks, and so the answer's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Jina's and Cohere's (`documents`): an object with `results`.
    Jina,
    /// Hugging Face TEI's (`texts`): a bare list.
    Tei,
}

/// A checked rerank request.
#[derive(Debug, PartialEq)]
pub struct RerankRequest {
    pub shape: Shape,
    pub query: String,
    pub documents: Vec<String>,
    /// How many results come back (all of them by default).
    pub top_n: usize,
    /// Each result carries its document (`return_documents`, `return_text`).
    pub with_text: bool,
    pub model: String,
    pub ignored: Vec<String>,
}

/// One scored document.
struct Scored {
    index: usize,
    score: f32,
}

/// Checks a rerank body. `query` must be a string; the documents (`documents`,
/// else `texts`) a non-empty array of strings, or of Jina's `{"text": ...}`
/// objects; `top_n` a count.
pub fn parse(body: &[u8], defaults: &Defaults) -> Result<RerankRequest, ApiError> {
    let value = json_body(body)?;
    let f = Fields::of(&value, "")?;
    let shape = if f.has("texts") {
        Shape::Tei
    } else {
        Shape::Jina
    };
    let query = match f.get("query") {
        None => return Err(ApiError::invalid("query", "\"query\" must be provided")),
        Some(Value::String(query)) => query.clone(),
        Some(_) => return Err(ApiError::invalid("query", "\"query\" must be a string")),
    };
    let field = match (f.get("documents"), shape) {
        (Some(v), _) if !v.is_null() => "documents",
        (_, Shape::Tei) => "texts",
        (_, Shape::Jina) => "documents",
    };
    let documents = documents(f.get(field), field)?;
    let top_n = f.integer("top_n", 0, i64::MAX)?;
    let with_text = match shape {
        Shape::Jina => f.bool("return_documents")?,
        Shape::Tei => f.bool("return_text")?,
    };
    Ok(RerankRequest {
        shape,
        query,
        top_n: top_n.map_or(documents.len(), |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        }),
        documents,
        with_text: with_text.unwrap_or(false),
        model: f.str("model")?.unwrap_or(&defaults.model).to_string(),
        ignored: super::fields::unknown_fields(&value, &KNOWN, &[]),
    })
}

/// The documents: each a string or `{"text": "..."}`.
fn documents(value: Option<&Value>, field: &str) -> Result<Vec<String>, ApiError> {
    let wrong = || {
        ApiError::invalid(
            field,
            format!("\"{field}\" must be a non-empty string array (strings, or objects with a string \"text\")"),
        )
    };
    let items = match value {
        Some(Value::Array(items)) if !items.is_empty() => items,
        _ => return Err(wrong()),
    };
    if items.len() > MAX_INPUTS {
        return Err(ApiError::invalid(
            field,
            format!("\"{field}\" may hold at most {MAX_INPUTS} documents"),
        ));
    }
    items
        .iter()
        .map(|item| match item {
            Value::String(text) => Ok(text.clone()),
            Value::Object(object) => match object.get("text") {
                Some(Value::String(text)) => Ok(text.clone()),
                _ => Err(wrong()),
            },
            _ => Err(wrong()),
        })
        .collect()
}

/// Every document's score against the query, sorted best first (ties keep
/// their order) and cut to `top_n`, with the tokens read.
fn score(model: &LocalModel, request: &RerankRequest) -> Result<(Vec<Scored>, u64), ApiError> {
    let pairs = (request.documents.iter())
        .map(|document| EmbedInput::Pair {
            query: request.query.clone(),
            document: document.clone(),
        })
        .collect();
    let field = match request.shape {
        Shape::Jina => "documents",
        Shape::Tei => "texts",
    };
    let outputs = model.embed(pairs).map_err(|e| from_model(e, field))?;
    let n_tokens = outputs.iter().map(|o| o.n_tokens as u64).sum();
    let mut scored = (outputs.into_iter().enumerate())
        .map(|(index, output)| match output.vector.first() {
            Some(&score) => Ok(Scored { index, score }),
            None => Err(from_model(
                ModelError::Failed("the model gave no score".into()),
                field,
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    scored.sort_by(|a, b| b.score.total_cmp(&a.score));
    scored.truncate(request.top_n);
    Ok((scored, n_tokens))
}

impl super::ApiServer {
    /// `POST /rerank` and its other spellings (`route`, for the messages).
    pub(super) fn rerank(&self, route: &str, request: &Request, responder: Responder) {
        let Some((loaded, model, responder)) = self.local_model(route, responder) else {
            return;
        };
        if model.props().pooling != Pooling::Rank {
            let error = ApiError::new(501, "not_supported_error", NOT_RERANKING);
            return self.refuse(responder, &error);
        }
        let parsed = match parse(&request.body, &loaded.defaults) {
            Ok(parsed) => parsed,
            Err(error) => return self.refuse(responder, &error),
        };
        super::log_ignored(route, &parsed.ignored);
        let (scored, n_tokens) = match score(model, &parsed) {
            Ok(scored) => scored,
            Err(error) => return self.refuse(responder, &error),
        };
        let text = |index: usize| parsed.with_text.then(|| parsed.documents[index].as_str());
        match parsed.shape {
            Shape::Tei => {
                let list: Vec<lwire::TeiRanked> = (scored.iter())
                    .map(|s| lwire::TeiRanked {
                        index: s.index,
                        score: s.score,
                        text: text(s.index),
                    })
                    .collect();
                responder.json(200, &list);
            }
            Shape::Jina => responder.json(
                200,
                &lwire::Reranked {
                    model: &parsed.model,
                    object: "list",
                    usage: lwire::RerankUsage {
                        prompt_tokens: n_tokens,
                        total_tokens: n_tokens,
                    },
                    results: (scored.iter())
                        .map(|s| lwire::Ranked {
                            index: s.index,
                            relevance_score: s.score,
                            document: text(s.index).map(|text| lwire::DocumentText { text }),
                        })
                        .collect(),
                },
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(body: Value) -> Result<RerankRequest, ApiError> {
        parse(body.to_string().as_bytes(), &Defaults::default())
    }

    #[test]
    fn both_shapes_and_their_fields_are_read() {
        let jina = check(json!({"query": "q", "documents": ["a", {"text": "b"}], "top_n": 1, "return_documents": true, "extra": 1})).unwrap();
        assert_eq!(jina.shape, Shape::Jina);
        assert_eq!(
            (jina.query.as_str(), jina.documents.as_slice()),
            ("q", &["a".to_string(), "b".to_string()][..])
        );
        assert_eq!((jina.top_n, jina.with_text), (1, true));
        assert_eq!(jina.ignored, ["extra"]);
        let tei =
            check(json!({"query": "q", "texts": ["a", "b", "c"], "return_text": true})).unwrap();
        assert_eq!((tei.shape, tei.top_n, tei.with_text), (Shape::Tei, 3, true));
        // `return_documents` is Jina's: TEI's answer carries text only with `return_text`.
        let tei = check(json!({"query": "q", "texts": ["a"], "return_documents": true})).unwrap();
        assert!(!tei.with_text);
    }

    #[test]
    fn malformed_rerank_requests_are_400s_naming_the_field() {
        let cases = [
            (json!({"documents": ["a"]}), "query"),
            (json!({"query": 1, "documents": ["a"]}), "query"),
            (json!({"query": "q", "documents": []}), "documents"),
            (json!({"query": "q", "documents": null}), "documents"),
            (json!({"query": "q", "documents": 123}), "documents"),
            (json!({"query": "q", "documents": [1, 2, 3]}), "documents"),
            (
                json!({"query": "q", "documents": [{"content": "a"}]}),
                "documents",
            ),
            (json!({"query": "q"}), "documents"),
            (json!({"query": "q", "texts": []}), "texts"),
            (
                json!({"query": "q", "documents": ["a"], "top_n": -1}),
                "top_n",
            ),
            (
                json!({"query": "q", "documents": ["a"], "return_documents": "yes"}),
                "return_documents",
            ),
        ];
        for (body, param) in cases {
            let error = check(body.clone()).expect_err("a 400");
            assert_eq!(error.status, 400, "{body}");
            assert_eq!(error.param.as_deref(), Some(param), "{body}: {error:?}");
        }
        assert_eq!(parse(b"[", &Defaults::default()).unwrap_err().status, 400);
    }
}

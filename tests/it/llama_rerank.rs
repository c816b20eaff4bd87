//! llama-server's reranking, Vertex AI's `/predict` and `--no-slots` on
//! `shepherd --server` with SmolLM2, as llama.cpp's server tests call them
//! (`test_rerank.py`, `test_compat_gcp.py`, `test_basic.py`). SmolLM2 is no
//! reranker: under `--reranking` its score is its last token's first output,
//! which is enough to check the plumbing (shapes, order, `top_n`, determinism),
//! not relevance.

use serde_json::{json, Value};

use crate::api_server::ApiServer;

const QUERY: &str = "Machine learning is";
const DOCUMENTS: [&str; 4] = [
    "A machine is a physical system that uses power to apply forces and control movement.",
    "Learning is the process of acquiring new understanding, knowledge and skills.",
    "Machine learning is a field of study in artificial intelligence.",
    "Paris, capitale de la France, est une grande ville europeenne.",
];

fn rerank(server: &ApiServer, route: &str, body: Value) -> Value {
    let (status, answer) = server.post(route, &body);
    assert_eq!(status, 200, "{route} {body}: {answer}");
    answer
}

/// `(index, score)` of each result, in the order given.
fn ranking(results: &Value, score: &str) -> Vec<(u64, f64)> {
    (results.as_array().expect("a list").iter())
        .map(|r| {
            (
                r["index"].as_u64().expect("index"),
                r[score].as_f64().expect("score"),
            )
        })
        .collect()
}

fn token_count(server: &ApiServer, text: &str) -> u64 {
    let (status, tokens) = server.post("/tokenize", &json!({ "content": text }));
    assert_eq!(status, 200, "{tokens}");
    tokens["tokens"].as_array().expect("tokens").len() as u64
}

/// A 400 with an error object.
fn refused(server: &ApiServer, route: &str, body: Value) {
    let (status, answer) = server.post(route, &body);
    assert_eq!(status, 400, "{route} {body}: {answer}");
    assert!(answer["error"]["message"].is_string(), "{body}: {answer}");
}

#[test]
fn reranking_scores_pairs_in_jina_and_tei_shapes_and_chat_still_answers() {
    let server = ApiServer::with_model(&["--reranking", "--context-size", "2048"]);
    let jina = rerank(
        &server,
        "/rerank",
        json!({"query": QUERY, "documents": DOCUMENTS}),
    );
    let all = ranking(&jina["results"], "relevance_score");
    let mut indices: Vec<u64> = all.iter().map(|(i, _)| *i).collect();
    indices.sort_unstable();
    assert_eq!(indices, [0, 1, 2, 3], "{jina}");
    assert!(
        all.windows(2).all(|w| w[0].1 >= w[1].1),
        "best first: {jina}"
    );
    assert!(
        all.iter().any(|(_, s)| *s != all[0].1),
        "different documents, different scores: {jina}"
    );
    assert_eq!(jina["object"], json!("list"), "{jina}");
    assert!(jina["results"][0].get("document").is_none(), "{jina}");
    // Every pair is the query's tokens then the document's (SmolLM2 adds no
    // BOS, EOS or SEP), and the usage counts them all.
    let expected: u64 = (DOCUMENTS.iter())
        .map(|d| token_count(&server, QUERY) + token_count(&server, d))
        .sum();
    assert_eq!(
        jina["usage"]["prompt_tokens"].as_u64(),
        Some(expected),
        "{jina}"
    );
    assert_eq!(
        jina["usage"]["total_tokens"],
        jina["usage"]["prompt_tokens"]
    );

    // The same request again gives the same scores; `top_n` keeps the best;
    // `return_documents` and `{"text": ...}` documents as Jina's API has them.
    let again = rerank(
        &server,
        "/v1/rerank",
        json!({"query": QUERY, "documents": DOCUMENTS}),
    );
    assert_eq!(ranking(&again["results"], "relevance_score"), all);
    let objects: Vec<Value> = DOCUMENTS.iter().map(|d| json!({ "text": d })).collect();
    let top = rerank(
        &server,
        "/reranking",
        json!({"query": QUERY, "documents": objects, "top_n": 2, "return_documents": true}),
    );
    assert_eq!(ranking(&top["results"], "relevance_score"), all[..2]);
    for result in top["results"].as_array().unwrap() {
        let index = result["index"].as_u64().unwrap() as usize;
        assert_eq!(result["document"]["text"], json!(DOCUMENTS[index]), "{top}");
    }
    let beyond = rerank(
        &server,
        "/v1/reranking",
        json!({"query": QUERY, "documents": DOCUMENTS, "top_n": 99}),
    );
    assert_eq!(beyond["results"].as_array().unwrap().len(), 4);

    // TEI's shape: a bare list, the same scores.
    let tei = rerank(
        &server,
        "/rerank",
        json!({"query": QUERY, "texts": DOCUMENTS}),
    );
    assert_eq!(ranking(&tei, "score"), all, "{tei}");
    let tei_top = rerank(
        &server,
        "/rerank",
        json!({"query": QUERY, "texts": DOCUMENTS, "top_n": 2, "return_text": true}),
    );
    assert_eq!(ranking(&tei_top, "score"), all[..2]);
    let best = all[0].0 as usize;
    assert_eq!(tei_top[0]["text"], json!(DOCUMENTS[best]), "{tei_top}");

    // Malformed requests, as llama-server's test_invalid_rerank_req sends them.
    for documents in [json!([]), Value::Null, json!(123), json!([1, 2, 3])] {
        refused(
            &server,
            "/rerank",
            json!({"query": QUERY, "documents": documents}),
        );
    }
    refused(&server, "/rerank", json!({"documents": DOCUMENTS}));
    refused(
        &server,
        "/rerank",
        json!({"query": 7, "documents": DOCUMENTS}),
    );
    // Scores are no embeddings.
    refused(&server, "/v1/embeddings", json!({"input": "hello"}));

    // Rank pooling matters only while embeddings are on: chat is unchanged.
    let (status, chat) = server.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 8}),
    );
    assert_eq!(status, 200, "{chat}");
    let content = chat["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or("");
    assert!(!content.is_empty(), "{chat}");
}

#[test]
fn without_rank_pooling_rerank_is_a_501_and_no_slots_hides_slots() {
    let server = ApiServer::with_model(&["--no-slots", "--metrics"]);
    let (status, answer) = server.post("/rerank", &json!({"query": QUERY, "documents": DOCUMENTS}));
    assert_eq!(status, 501, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("--reranking"), "{answer}");
    let (status, slots) = server.get("/slots");
    assert_eq!(status, 501, "{slots}");
    let slots: Value = serde_json::from_str(&slots).expect("JSON");
    assert!(
        slots["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("--slots"),
        "{slots}"
    );
    // `--metrics` is accepted; /metrics is served either way. Without Vertex
    // AI's environment there is no /predict.
    assert_eq!(server.get("/metrics").0, 200);
    assert_eq!(server.post("/predict", &json!({"instances": []})).0, 404);
}

#[test]
fn vertex_predict_runs_each_instance_through_its_route() {
    let server = ApiServer::with_model_env(&["--parallel", "2"], &[("AIP_MODE", "PREDICTION")]);
    let chat = |text: &str| {
        json!({"@requestFormat": "chatCompletions", "max_tokens": 8, "stream": true,
               "messages": [{"role": "user", "content": text}]})
    };
    let body = json!({"instances": [
        chat("Say hello"),
        chat("Say world"),
        {"@requestFormat": "/tokenize", "content": "hello"},
        {"@requestFormat": "noSuchRoute"},
    ]});
    let (status, answer) = server.post("/predict", &body);
    assert_eq!(status, 200, "{answer}");
    let predictions = answer["predictions"].as_array().expect("predictions");
    assert_eq!(predictions.len(), 4, "{answer}");
    for prediction in &predictions[..2] {
        let message = &prediction["choices"][0]["message"];
        assert_eq!(message["role"], json!("assistant"), "{prediction}");
        assert!(
            !message["content"].as_str().unwrap_or("").is_empty(),
            "{prediction}"
        );
    }
    assert_eq!(
        predictions[2]["tokens"].as_array().map(Vec::len),
        Some(token_count(&server, "hello") as usize)
    );
    assert!(
        predictions[3]["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("noSuchRoute"),
        "{answer}"
    );
    let (status, answer) = server.post("/predict", &json!({"instances": 1}));
    assert_eq!(status, 400, "{answer}");
}

//! What llama.cpp's own server test suite (`make compat-suite`) checks of
//! llama-server and shepherd once did differently, on `shepherd --server` with
//! SmolLM2: `/completion` with several prompts and `{"prompt_string": ...}`
//! objects, `post_sampling_probs` and `ignore_eos`; `/v1/embeddings` inputs of
//! content parts; `--alias` lists; `/v1/chat/completions/input_tokens`; two
//! assistant turns at the end of a chat, or `continue_final_message` with
//! `add_generation_prompt`; one final assistant turn continued from its last word.

use serde_json::{json, Value};

use crate::api_server::{curl_post, have_curl, sse_events, ApiServer};

const PROMPT: &str = "1, 2, 3, 4,";

fn ids(server: &ApiServer, text: &str) -> Vec<Value> {
    let (status, tokens) = server.post("/tokenize", &json!({ "content": text }));
    assert_eq!(status, 200, "{tokens}");
    tokens["tokens"].as_array().expect("tokens").clone()
}

fn complete(server: &ApiServer, body: Value) -> Value {
    let (status, answer) = server.post("/completion", &body);
    assert_eq!(status, 200, "{body}: {answer}");
    answer
}

/// A 2x2 grey PNG, base64.
const PNG_2X2: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAADklEQVR4nGNoAAMGCAUAKg4GARWeQtcAAAAASUVORK5CYII=";

#[test]
fn completion_answers_several_prompts_and_prompt_objects_as_llama_server_does() {
    let server = ApiServer::with_model(&["--context-size", "2048", "--parallel", "2"]);
    let one = complete(
        &server,
        json!({"prompt": PROMPT, "n_predict": 6, "temperature": 0}),
    );
    let content = one["content"].as_str().expect("content").to_string();
    // llama-server's multimodal prompt object, text only: the same answer.
    let object = complete(
        &server,
        json!({"prompt": {"prompt_string": PROMPT}, "n_predict": 6, "temperature": 0}),
    );
    assert_eq!(object["content"], json!(content), "{object}");
    // Several prompts (ids, text, an object): a list of answers in order.
    let prompts = json!([ids(&server, PROMPT), PROMPT, {"prompt_string": PROMPT}]);
    let many = complete(
        &server,
        json!({"prompt": prompts, "n_predict": 6, "temperature": 0}),
    );
    let list = many.as_array().expect("a list of answers");
    assert_eq!(list.len(), 3, "{many}");
    for (i, answer) in list.iter().enumerate() {
        assert_eq!(answer["index"], json!(i), "{answer}");
        assert_eq!(answer["content"], json!(content), "{answer}");
        assert_eq!(answer["prompt"], json!(PROMPT), "{answer}");
        assert_eq!(answer["tokens_predicted"], one["tokens_predicted"]);
    }
    // Its multimodal data: as many <__media__> markers as images, else a 400;
    // an image to a model without a projector is the backend's 400.
    let (status, error) = server.post(
        "/completion",
        &json!({"prompt": {"prompt_string": PROMPT, "multimodal_data": [PNG_2X2]}}),
    );
    assert_eq!(status, 400, "{error}");
    assert_eq!(
        error["error"]["param"],
        json!("prompt.multimodal_data"),
        "{error}"
    );
    let marked = format!("<__media__>{PROMPT}");
    let (status, error) = server.post(
        "/completion",
        &json!({"prompt": {"prompt_string": marked, "multimodal_data": [PNG_2X2]}}),
    );
    assert_eq!(status, 400, "{error}");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no vision projector"), "{error}");
    // No one field is at fault (it once named "grammar").
    assert_eq!(error["error"]["param"], Value::Null, "{error}");

    if !have_curl() {
        eprintln!("skipped the streamed half: no curl");
        return;
    }
    let body =
        json!({"prompt": [PROMPT, PROMPT], "n_predict": 6, "temperature": 0, "stream": true});
    let streamed = curl_post(&server.url("/completion"), &body.to_string(), &["-N"]);
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    let chunks: Vec<Value> = sse_events(&streamed.body)
        .iter()
        .map(|(_, data)| serde_json::from_str(data).expect("JSON chunk"))
        .collect();
    for index in 0..2 {
        let own: Vec<&Value> = chunks.iter().filter(|c| c["index"] == index).collect();
        let text: String = own.iter().filter_map(|c| c["content"].as_str()).collect();
        assert_eq!(text, content, "{own:?}");
        let stops = own.iter().filter(|c| c["stop"] == json!(true)).count();
        assert_eq!(stops, 1, "{own:?}");
    }
    assert!(chunks.iter().all(|c| c["index"] == 0 || c["index"] == 1));
}

#[test]
fn post_sampling_probs_are_probabilities_in_llama_servers_shape() {
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let request = |post: bool| json!({"prompt": PROMPT, "n_predict": 4, "temperature": 0, "n_probs": 5, "post_sampling_probs": post});
    let logs = complete(&server, request(false));
    let probs = complete(&server, request(true));
    let logs = logs["completion_probabilities"]
        .as_array()
        .expect("logprobs");
    let probs = probs["completion_probabilities"].as_array().expect("probs");
    assert_eq!(logs.len(), probs.len());
    for (l, p) in logs.iter().zip(probs) {
        assert_eq!(l["id"], p["id"], "{p}");
        assert!(
            p.get("logprob").is_none() && p.get("top_logprobs").is_none(),
            "{p}"
        );
        let prob = p["prob"].as_f64().expect("prob");
        let logprob = l["logprob"].as_f64().expect("logprob");
        assert!(prob > 0.0 && prob <= 1.0, "{p}");
        assert!((prob - logprob.exp()).abs() < 1e-4, "{p} vs {l}");
        let top = p["top_probs"].as_array().expect("top_probs");
        assert_eq!(top.len(), 5, "{p}");
        assert!(top
            .iter()
            .all(|t| t["prob"].as_f64().is_some_and(|x| x > 0.0)));
        assert_eq!(top[0]["id"], p["id"], "{p}");
    }
}

#[test]
fn ignore_eos_bans_the_end_tokens_and_lists_the_bias() {
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    // A finished chat turn: the model would end it at once.
    let prompt = "<|im_start|>user\nSay yes.<|im_end|>\n<|im_start|>assistant\nYes.<|im_end|>";
    let request = |ignore: bool| json!({"prompt": prompt, "n_predict": 8, "temperature": 0, "ignore_eos": ignore});
    let plain = complete(&server, request(false));
    assert_eq!(
        plain["generation_settings"]["logit_bias"],
        json!([]),
        "{plain}"
    );
    let ignoring = complete(&server, request(true));
    let biases = ignoring["generation_settings"]["logit_bias"]
        .as_array()
        .expect("logit_bias");
    assert!(!biases.is_empty(), "{ignoring}");
    assert!(biases
        .iter()
        .all(|b| b["bias"].is_null() && b["token"].is_u64()));
    assert_eq!(ignoring["tokens_predicted"], json!(8), "{ignoring}");
    assert_eq!(ignoring["stop_type"], json!("limit"), "{ignoring}");
}

#[test]
fn embeddings_take_content_part_inputs_as_llama_server_does() {
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let parts =
        json!({"content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]});
    let (status, answer) = server.post(
        "/v1/embeddings",
        &json!({"input": ["hello world", parts.clone()]}),
    );
    assert_eq!(status, 200, "{answer}");
    let data = answer["data"].as_array().expect("data");
    assert_eq!(data.len(), 2, "{answer}");
    assert_eq!(data[0]["embedding"], data[1]["embedding"]);
    let (status, alone) = server.post("/v1/embeddings", &json!({ "input": parts }));
    assert_eq!(status, 200, "{alone}");
    assert_eq!(alone["data"][0]["embedding"], data[0]["embedding"]);
    for input in [
        json!({"content": "string"}),
        json!([{"content": [{"type": "unknown"}]}]),
        json!([{"content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]),
        json!([{"text": "no content"}]),
    ] {
        let (status, error) = server.post("/v1/embeddings", &json!({ "input": input }));
        assert_eq!(status, 400, "{input}: {error}");
        assert!(error["error"]["message"].is_string(), "{error}");
    }
}

#[test]
fn several_aliases_and_tags_are_listed_as_llama_server_lists_them() {
    let server = ApiServer::with_model(&[
        "--context-size",
        "2048",
        "--alias",
        "tinyllama-2,fim,code",
        "--tags",
        "chat,fim,small",
    ]);
    for route in ["/models", "/v1/models"] {
        let (status, models) = server.get(route);
        assert_eq!(status, 200, "{models}");
        let models: Value = serde_json::from_str(&models).expect("JSON");
        let model = &models["data"][0];
        // llama-server keeps them in a set: sorted, the first the id.
        assert_eq!(
            model["aliases"],
            json!(["code", "fim", "tinyllama-2"]),
            "{models}"
        );
        assert_eq!(model["tags"], json!(["chat", "fim", "small"]), "{models}");
        assert_eq!(model["id"], json!("code"), "{models}");
    }
    for alias in ["code", "fim", "tinyllama-2"] {
        let (status, model) = server.get(&format!("/v1/models/{alias}"));
        assert_eq!(status, 200, "{alias}: {model}");
        let request = json!({"model": alias, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
        let (status, answer) = server.post("/v1/chat/completions", &request);
        assert_eq!(status, 200, "{alias}: {answer}");
    }
    assert_eq!(server.get("/v1/models/other").0, 404);
}

#[test]
fn chat_input_tokens_counts_the_prompt_a_chat_request_reads() {
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let chat = json!({"messages": [
        {"role": "system", "content": "Book"},
        {"role": "user", "content": "What is the best book"},
    ]});
    let (status, counted) = server.post("/v1/chat/completions/input_tokens", &chat);
    assert_eq!(status, 200, "{counted}");
    let n = counted["input_tokens"].as_u64().expect("input_tokens");
    assert!(n > 5, "{counted}");
    // llama-server's unprefixed spelling, and Anthropic's count of the same turns.
    let (status, again) = server.post("/chat/completions/input_tokens", &chat);
    assert_eq!((status, &again), (200, &counted));
    let anthropic = json!({"system": "Book", "messages": [{"role": "user", "content": "What is the best book"}]});
    let (status, theirs) = server.post("/v1/messages/count_tokens", &anthropic);
    assert_eq!((status, &theirs), (200, &json!({"input_tokens": n})));
    // llama-server names the object on its OpenAI count routes (Anthropic's has none).
    assert_eq!(
        counted["object"],
        json!("response.input_tokens"),
        "{counted}"
    );
    let responses = json!({"instructions": "Book", "input": "What is the best book"});
    let (status, answered) = server.post("/v1/responses/input_tokens", &responses);
    assert_eq!((status, &answered), (200, &counted));
    let (status, error) = server.post("/v1/chat/completions/input_tokens", &json!({"messages": 5}));
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], json!("messages"), "{error}");
}

#[test]
fn two_assistant_turns_at_the_end_are_a_400_as_llama_server_answers() {
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let turn = |role: &str| json!({"role": role, "content": "test"});
    let two = json!([turn("user"), turn("assistant"), turn("assistant")]);
    for route in [
        "/v1/chat/completions",
        "/chat/completions",
        "/apply-template",
    ] {
        let (status, error) = server.post(route, &json!({"messages": two, "max_tokens": 2}));
        assert_eq!(status, 400, "{route}: {error}");
        assert_eq!(error["error"]["param"], json!("messages"), "{error}");
    }
    // Continuing the final turn and opening a new one: the same 400.
    let both = json!({
        "messages": [turn("user"), turn("assistant")], "max_tokens": 2,
        "add_generation_prompt": true, "continue_final_message": true
    });
    let (status, error) = server.post("/v1/chat/completions", &both);
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], json!("continue_final_message"));
    // One final assistant turn is a prefill; two apart are history.
    for messages in [
        json!([turn("user"), turn("assistant")]),
        json!([turn("assistant"), turn("user"), turn("assistant")]),
    ] {
        let request = json!({"messages": messages, "max_tokens": 2});
        let (status, answer) = server.post("/v1/chat/completions", &request);
        assert_eq!(status, 200, "{messages}: {answer}");
    }
}

#[test]
fn a_final_assistant_turn_is_continued_from_its_last_word() {
    let server = ApiServer::with_model(&["--context-size", "2048", "--chat-template", "llama3"]);
    let opening = "<|start_header_id|>user<|end_header_id|>\n\nWhat is the best book<|eot_id|>\
                   <|start_header_id|>assistant<|end_header_id|>\n\n";
    for (prefill, continued) in [
        (json!("Whill"), "Whill"),
        (
            json!([{"type": "text", "text": "Wh"}, {"type": "text", "text": "ill"}]),
            "Wh\n\nill",
        ),
    ] {
        let messages = json!([
            {"role": "system", "content": "Book"},
            {"role": "user", "content": "What is the best book"},
            {"role": "assistant", "content": prefill},
        ]);
        // The template's opening of the assistant's turn, then its text, unclosed.
        let (status, rendered) = server.post("/apply-template", &json!({ "messages": messages }));
        assert_eq!(status, 200, "{rendered}");
        let prompt = rendered["prompt"].as_str().expect("prompt");
        assert!(
            prompt.ends_with(&format!("{opening}{continued}")),
            "{prompt:?}"
        );
        // The answer is decoded after that prompt (llama-server's `__verbose`).
        let request = json!({"messages": messages, "max_tokens": 2, "verbose": true});
        let (status, answer) = server.post("/v1/chat/completions", &request);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["__verbose"]["prompt"], json!(prompt), "{answer}");
    }
    // A turn ending with the user's message is opened as before.
    let (_, fresh) = server.post(
        "/apply-template",
        &json!({"messages": [{"role": "user", "content": "What is the best book"}]}),
    );
    assert!(
        fresh["prompt"].as_str().expect("prompt").ends_with(opening),
        "{fresh}"
    );
}

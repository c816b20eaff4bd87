//! llama-server's own routes on `shepherd --server` with SmolLM2, as the
//! scripts written against llama-server call them (curl and plain HTTP):
//! `POST /completion` whole and streamed, with text, token-id and mixed
//! prompts and its stop fields; `POST /apply-template`; and an OpenAI stream
//! that goes straight to a tool call.

use serde_json::{json, Value};

use crate::api_server::{curl_post, have_curl, sse_events, ApiServer};

const PROMPT: &str = "1, 2, 3, 4,";

fn ids(server: &ApiServer, text: &str) -> Vec<i64> {
    let (status, tokens) = server.post("/tokenize", &json!({ "content": text }));
    assert_eq!(status, 200, "{tokens}");
    tokens["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_i64().expect("an id"))
        .collect()
}

fn complete(server: &ApiServer, body: Value) -> Value {
    let (status, answer) = server.post("/completion", &body);
    assert_eq!(status, 200, "{body}: {answer}");
    answer
}

#[test]
fn completion_answers_in_llama_servers_own_shape() {
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let whole = complete(
        &server,
        json!({"prompt": PROMPT, "n_predict": 8, "temperature": 0, "cache_prompt": true}),
    );
    let content = whole["content"].as_str().expect("content").to_string();
    assert!(content.starts_with(" 5"), "{whole}");
    assert_eq!(whole["stop"], json!(true), "{whole}");
    assert_eq!(whole["tokens"], json!([]), "{whole}");
    assert_eq!(whole["prompt"], json!(PROMPT), "{whole}");
    assert_eq!(
        whole["generation_settings"]["n_predict"],
        json!(8),
        "{whole}"
    );
    assert_eq!(
        whole["tokens_evaluated"].as_u64(),
        Some(ids(&server, PROMPT).len() as u64),
        "{whole}"
    );
    let predicted = whole["tokens_predicted"]
        .as_u64()
        .expect("tokens_predicted");
    assert!((1..=8).contains(&predicted), "{whole}");
    assert_eq!(whole["timings"]["predicted_n"].as_u64(), Some(predicted));
    assert!(
        whole["timings"]["predicted_ms"].as_f64().is_some(),
        "{whole}"
    );
    let expected_type = if predicted == 8 { "limit" } else { "eos" };
    assert_eq!(whole["stop_type"], json!(expected_type), "{whole}");

    // A stop string: the text ends before it and the answer names it.
    let stopped = complete(
        &server,
        json!({"prompt": PROMPT, "n_predict": 8, "temperature": 0, "stop": [","]}),
    );
    assert_eq!(stopped["content"], json!(" 5"), "{stopped}");
    assert_eq!(stopped["stop_type"], json!("word"), "{stopped}");
    assert_eq!(stopped["stopping_word"], json!(","), "{stopped}");

    // The prompt as token ids, and as ids then text: the same greedy answer.
    let prompt_ids = ids(&server, PROMPT);
    let by_ids = complete(
        &server,
        json!({"prompt": prompt_ids, "n_predict": 8, "temperature": 0}),
    );
    assert_eq!(by_ids["content"], json!(content), "{by_ids}");
    assert_eq!(by_ids["prompt"], json!(PROMPT), "{by_ids}");
    let mut head: Vec<Value> = ids(&server, "1, 2, 3,")
        .into_iter()
        .map(Value::from)
        .collect();
    head.push(json!(" 4,"));
    let mixed = complete(
        &server,
        json!({"prompt": head, "n_predict": 8, "temperature": 0}),
    );
    assert_eq!(mixed["content"], json!(content), "{mixed}");

    // n_probs and return_tokens: each token's id, text and log-probability with
    // its likeliest alternatives, greedy's choice first among them.
    let probs = complete(
        &server,
        json!({"prompt": PROMPT, "n_predict": 4, "temperature": 0, "n_probs": 2, "return_tokens": true}),
    );
    let list = probs["completion_probabilities"]
        .as_array()
        .expect("completion_probabilities");
    assert_eq!(Some(list.len() as u64), probs["tokens_predicted"].as_u64());
    let ids_listed: Vec<&Value> = list.iter().map(|p| &p["id"]).collect();
    assert_eq!(json!(ids_listed), probs["tokens"], "{probs}");
    for p in list {
        let top = p["top_logprobs"].as_array().expect("top_logprobs");
        assert_eq!(top.len(), 2, "{p}");
        assert_eq!(top[0]["id"], p["id"], "{p}");
        assert!(p["logprob"].as_f64().is_some_and(|l| l <= 0.0), "{p}");
    }
    let spelled: String = list.iter().filter_map(|p| p["token"].as_str()).collect();
    assert_eq!(json!(spelled), probs["content"], "{probs}");
    assert!(
        content.starts_with(spelled.as_str()),
        "{spelled:?} vs {content:?}"
    );

    for (body, param) in [
        (json!({"prompt": PROMPT, "n_probs": 101}), "n_probs"),
        (json!({"prompt": [99_999_999]}), "prompt"),
        (json!({"prompt": {"text": PROMPT}}), "prompt"),
        (json!({"n_predict": 3}), "prompt"),
    ] {
        let (status, error) = server.post("/completion", &body);
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["param"], json!(param), "{body}: {error}");
    }

    if !have_curl() {
        eprintln!("skipped the streamed half: no curl");
        return;
    }
    let body = json!({"prompt": PROMPT, "n_predict": 8, "temperature": 0, "stream": true});
    let streamed = curl_post(&server.url("/completion"), &body.to_string(), &["-N"]);
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    assert!(
        streamed.headers.contains("text/event-stream"),
        "{}",
        streamed.headers
    );
    assert!(!streamed.body.contains("[DONE]"), "{}", streamed.body);
    let chunks: Vec<Value> = sse_events(&streamed.body)
        .iter()
        .map(|(_, data)| serde_json::from_str(data).expect("JSON chunk"))
        .collect();
    let (last, pieces) = chunks.split_last().expect("chunks");
    assert!(
        pieces.iter().all(|c| c["stop"] == json!(false)),
        "{pieces:?}"
    );
    let text: String = pieces
        .iter()
        .filter_map(|c| c["content"].as_str())
        .collect();
    assert_eq!(text, content);
    assert_eq!(last["stop"], json!(true), "{last}");
    assert_eq!(last["content"], json!(""), "{last}");
    assert_eq!(last["tokens_predicted"].as_u64(), Some(predicted), "{last}");
    assert!(last["timings"]["predicted_n"].is_u64(), "{last}");
}

#[test]
fn apply_template_renders_the_prompt_a_chat_request_reads() {
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let messages = json!([{"role": "user", "content": "Name a colour."}]);
    let (status, applied) = server.post("/apply-template", &json!({ "messages": messages }));
    assert_eq!(status, 200, "{applied}");
    let prompt = applied["prompt"].as_str().expect("prompt");
    assert!(
        prompt.contains("<|im_start|>user\nName a colour.<|im_end|>"),
        "{prompt:?}"
    );
    assert!(prompt.ends_with("<|im_start|>assistant\n"), "{prompt:?}");
    // The configured system prompt is every request's default.
    assert!(
        prompt.starts_with("<|im_start|>system\nYou are a helpful assistant.<|im_end|>"),
        "{prompt:?}"
    );
    // What a chat request with the same messages reads, token for token.
    let (status, chat) = server.post(
        "/v1/chat/completions",
        &json!({"messages": messages, "max_tokens": 1}),
    );
    assert_eq!(status, 200, "{chat}");
    assert_eq!(
        chat["usage"]["prompt_tokens"].as_u64(),
        Some(ids(&server, prompt).len() as u64),
        "{chat}"
    );
    let (status, error) = server.post("/apply-template", &json!({"messages": []}));
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], json!("messages"), "{error}");
    // Without the assistant's opening, as llama-server renders it for a prefill.
    let body = json!({"messages": messages, "add_generation_prompt": false});
    let (status, applied) = server.post("/apply-template", &body);
    assert_eq!(status, 200, "{applied}");
    let closed = applied["prompt"].as_str().expect("prompt");
    assert_eq!(
        format!("{closed}<|im_start|>assistant\n"),
        prompt,
        "{closed:?}"
    );
    let body = json!({"messages": messages, "add_generation_prompt": "no"});
    let (status, error) = server.post("/apply-template", &body);
    assert_eq!(status, 400, "{error}");
    assert_eq!(
        error["error"]["param"],
        json!("add_generation_prompt"),
        "{error}"
    );
    // No system message given, none configured, no tools here: the template's own
    // default, as llama-server renders it, not the agent's prompt.
    let bare = ApiServer::with_model_unprompted(&["--context-size", "2048"]);
    let (status, applied) = bare.post("/apply-template", &json!({ "messages": messages }));
    assert_eq!(status, 200, "{applied}");
    let prompt = applied["prompt"].as_str().expect("prompt");
    assert!(
        prompt.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"),
        "{prompt:?}"
    );
    assert!(!prompt.contains("shepherd"), "{prompt:?}");
}

#[test]
fn a_stream_that_goes_straight_to_a_tool_call_shows_no_empty_content() {
    if !have_curl() {
        eprintln!("skipped: no curl");
        return;
    }
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let tool = json!({"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}});
    let body = json!({
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [tool], "stream": true, "max_tokens": 40, "temperature": 0,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    });
    let streamed = curl_post(
        &server.url("/v1/chat/completions"),
        &body.to_string(),
        &["-N"],
    );
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    let deltas: Vec<Value> = sse_events(&streamed.body)
        .iter()
        .filter(|(_, data)| data.as_str() != "[DONE]")
        .map(|(_, data)| serde_json::from_str::<Value>(data).expect("JSON chunk"))
        .filter_map(|chunk| chunk["choices"].get(0).map(|c| c["delta"].clone()))
        .collect();
    assert_eq!(deltas[0]["role"], json!("assistant"), "{deltas:?}");
    // The opening's `content` is null (as llama-server's); no delta has text.
    assert_eq!(deltas[0]["content"], Value::Null, "{deltas:?}");
    assert!(
        deltas
            .iter()
            .all(|d| d.get("content").is_none_or(Value::is_null)),
        "a content delta in a stream of only a tool call: {deltas:?}"
    );
    let call = deltas
        .iter()
        .find_map(|d| d["tool_calls"].get(0))
        .expect("a tool call");
    assert_eq!(call["function"]["name"], json!("get_weather"), "{deltas:?}");
}

#[test]
fn a_built_in_template_name_renders_with_llama_cpps_own_template() {
    let server =
        ApiServer::with_model_unprompted(&["--context-size", "2048", "--chat-template", "llama3"]);
    let messages = json!([{"role": "user", "content": "Name a colour."}]);
    let (status, applied) = server.post("/apply-template", &json!({ "messages": messages }));
    assert_eq!(status, 200, "{applied}");
    let prompt = applied["prompt"].as_str().expect("prompt");
    assert_eq!(
        prompt,
        "<|start_header_id|>user<|end_header_id|>\n\nName a colour.<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n",
    );
    // The answer stops at the template's end of turn, which this model writes as text.
    let (status, chat) = server.post(
        "/v1/chat/completions",
        &json!({"messages": messages, "max_tokens": 24}),
    );
    assert_eq!(status, 200, "{chat}");
    let content = chat["choices"][0]["message"]["content"]
        .as_str()
        .expect("text");
    assert!(!content.contains("<|eot_id|>"), "{content:?}");
}

#[test]
fn template_variables_reach_the_template_as_llama_server_passes_them() {
    let Some(corpus) = crate::synthetic::template_corpus() else {
        println!("SHEPHERD_TEMPLATE_CORPUS unset: skipped (make test sets it)");
        return;
    };
    let template = |name: &str| corpus.join(name).to_str().expect("UTF-8").to_string();
    let qwen3 = template("Qwen-Qwen3-0.6B.jinja");
    let messages = json!([{"role": "user", "content": "What is today?"}]);
    let apply = |server: &ApiServer, extra: Value| {
        let mut body = json!({ "messages": messages });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        server.post("/apply-template", &body)
    };
    let prompt = |server: &ApiServer, extra: Value| {
        let (status, applied) = apply(server, extra);
        assert_eq!(status, 200, "{applied}");
        applied["prompt"].as_str().expect("prompt").to_string()
    };
    const OPEN: &str = "<|im_start|>assistant\n";
    const CLOSED: &str = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    let server = ApiServer::with_model_unprompted(&[
        "--context-size",
        "2048",
        "--chat-template-file",
        &qwen3,
    ]);
    // Thinking is on unless a request or the server turns it off.
    assert!(prompt(&server, json!({})).ends_with(OPEN));
    let off = json!({"chat_template_kwargs": {"enable_thinking": false}});
    assert!(prompt(&server, off).ends_with(CLOSED));
    assert!(prompt(&server, json!({"reasoning_effort": "none"})).ends_with(CLOSED));
    let (status, error) = apply(
        &server,
        json!({"chat_template_kwargs": {"enable_thinking": "no"}}),
    );
    assert_eq!(status, 400, "{error}");
    assert_eq!(
        error["error"]["param"],
        json!("chat_template_kwargs"),
        "{error}"
    );
    let (status, error) = apply(&server, json!({"chat_template_kwargs": []}));
    assert_eq!(status, 400, "{error}");
    // `--reasoning off` (llama-server's spelling), which a request may turn back on.
    let server = ApiServer::with_model_unprompted(&[
        "--context-size",
        "2048",
        "--chat-template-file",
        &qwen3,
        "--reasoning",
        "off",
    ]);
    assert!(prompt(&server, json!({})).ends_with(CLOSED));
    let on = json!({"chat_template_kwargs": {"enable_thinking": true}});
    assert!(prompt(&server, on).ends_with(OPEN));
    // Llama 3.x prints today's date (`date_string`), not its own default.
    let llama = template("meta-llama-Llama-3.3-70B-Instruct.jinja");
    let server = ApiServer::with_model_unprompted(&[
        "--context-size",
        "2048",
        "--chat-template-file",
        &llama,
    ]);
    let today = || {
        let out = std::process::Command::new("date")
            .args(["-u", "+%d %b %Y"])
            .output();
        String::from_utf8(out.expect("date runs").stdout)
            .unwrap()
            .trim()
            .to_string()
    };
    let before = today();
    let text = prompt(&server, json!({}));
    let after = today();
    assert!(
        text.contains(&before) || text.contains(&after),
        "{before}: {text:?}"
    );
    assert!(!text.contains("26 Jul 2024"), "{text:?}");
}

#[test]
fn seed_alias_and_chat_template_flags_do_what_llama_servers_do() {
    let sandbox = crate::harness::Sandbox::new("chattemplate");
    let template = sandbox.work().join("t.jinja");
    let source = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}\
                  {% if add_generation_prompt %}[assistant] {% endif %}";
    std::fs::write(&template, source).expect("write the template");
    let template = template.to_str().expect("UTF-8 path").to_string();
    let server = ApiServer::with_model(&[
        "--context-size",
        "2048",
        "--seed",
        "1234",
        "--alias",
        "my-model",
        "--chat-template-file",
        &template,
    ]);
    let (status, models) = server.get("/v1/models");
    assert_eq!(status, 200, "{models}");
    let models: Value = serde_json::from_str(&models).expect("JSON");
    assert_eq!(models["data"][0]["id"], json!("my-model"), "{models}");
    let (_, props) = server.get("/props");
    let props: Value = serde_json::from_str(&props).expect("JSON");
    assert_eq!(props["chat_template"], json!(source), "{props}");
    assert_eq!(
        props["default_generation_settings"]["params"]["seed"],
        json!(1234),
        "{props}"
    );
    let messages = json!([{"role": "user", "content": "Hi"}]);
    let (_, applied) = server.post("/apply-template", &json!({ "messages": messages }));
    let prompt = applied["prompt"].as_str().expect("prompt");
    assert!(prompt.ends_with("[user] Hi\n[assistant] "), "{prompt:?}");
    // The server's seed is every request's seed: sampled answers repeat.
    let request = json!({"messages": messages, "max_tokens": 12, "temperature": 1.5});
    let answers: Vec<Value> = (0..2)
        .map(|_| server.post("/v1/chat/completions", &request).1)
        .map(|answer| answer["choices"][0]["message"]["content"].clone())
        .collect();
    assert_eq!(answers[0], answers[1], "{answers:?}");
    assert_eq!(
        server.post("/v1/chat/completions", &request).1["model"],
        json!("my-model")
    );
}

#[test]
fn host_takes_several_addresses_as_llama_servers_does() {
    // Every 127.0.0.0/8 address is this machine's loopback on Linux.
    let server = ApiServer::with_model(&["--host", "127.0.0.1,127.0.0.2"]);
    let port = server
        .url("")
        .rsplit(':')
        .next()
        .expect("a port")
        .to_string();
    let second = format!("http://127.0.0.2:{port}");
    assert!(
        server.log().contains(&format!("and {second}")),
        "{}",
        server.log()
    );
    let agent = crate::harness::http_agent(std::time::Duration::from_secs(30));
    let models = agent
        .get(&format!("{second}/v1/models"))
        .call()
        .expect("the second address answers")
        .into_body()
        .read_to_string()
        .expect("a body");
    assert!(models.contains("SmolLM2"), "{models}");
    // A list with an address that is not loopback needs a token, as one does.
    let refused = crate::harness::Sandbox::new("hosts").run(
        &["--server", "--host", "127.0.0.1,0.0.0.0", "--port", "0"],
        "",
    );
    assert_eq!(refused.status, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("without an auth token"),
        "{}",
        refused.stderr
    );
}

#[test]
fn llama_servers_grammar_and_json_schema_fields_constrain_the_answer() {
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let answer = complete(
        &server,
        json!({"prompt": "Is the sky blue? Answer:", "n_predict": 8, "temperature": 0,
               "grammar": "root ::= \" yes\" | \" no\""}),
    );
    let content = answer["content"].as_str().expect("content");
    assert!(content == " yes" || content == " no", "{answer}");
    let schema = json!({"type": "object", "required": ["age"], "additionalProperties": false,
                        "properties": {"age": {"type": "integer", "minimum": 18, "maximum": 99}}});
    let (status, chat) = server.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "How old is Ann?"}],
                "max_tokens": 20, "temperature": 0, "json_schema": schema}),
    );
    assert_eq!(status, 200, "{chat}");
    let text = chat["choices"][0]["message"]["content"]
        .as_str()
        .expect("content");
    let value: Value = serde_json::from_str(text).expect("JSON as the schema says");
    let age = value["age"].as_i64().expect("an integer age");
    assert!((18..=99).contains(&age), "{value}");
    for (body, param) in [
        (json!({"prompt": "x", "grammar": "root ::= ("}), "grammar"),
        (
            json!({"prompt": "x", "json_schema": {"type": "integer", "multipleOf": 3}}),
            "json_schema",
        ),
    ] {
        let (status, error) = server.post("/completion", &body);
        assert_eq!(status, 400, "{body}: {error}");
        assert_eq!(error["error"]["param"], json!(param), "{body}: {error}");
    }
}

/// llama-server's `logit_bias` keyed by text: each token of the text gets the bias,
/// in the object and the pair forms alike; a malformed shape is still a 400.
#[test]
fn logit_bias_keyed_by_text_biases_each_of_its_tokens() {
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let ask = |prompt: &str, bias: Value| {
        let answer = complete(
            &server,
            json!({"prompt": prompt, "n_predict": 6, "temperature": 0, "logit_bias": bias}),
        );
        answer["content"].as_str().expect("content").to_string()
    };
    const FRANCE: &str = "The capital of France is";
    let plain = ask(FRANCE, json!({}));
    assert!(plain.starts_with(" Paris"), "{plain}");
    // Banning the text " Paris" bans its tokens: the greedy answer changes, exactly
    // as banning those token ids by number does, in either form.
    let by_text = ask(FRANCE, json!({" Paris": false}));
    assert!(!by_text.contains("Paris"), "{by_text}");
    let by_ids: serde_json::Map<String, Value> = ids(&server, " Paris")
        .iter()
        .map(|id| (id.to_string(), json!(false)))
        .collect();
    assert_eq!(ask(FRANCE, Value::Object(by_ids)), by_text);
    assert_eq!(ask(FRANCE, json!([[" Paris", false]])), by_text);
    // As in llama-server, a key that reads as a number is a token id, but a
    // pair's string is always text: " 5" there is the tokens of " 5".
    let counting = ask(PROMPT, json!({}));
    assert!(counting.starts_with(" 5"), "{counting}");
    let five: Vec<Value> = ids(&server, " 5")
        .iter()
        .map(|id| json!([id, false]))
        .collect();
    let banned_five = ask(PROMPT, Value::Array(five));
    assert!(!banned_five.contains('5'), "{banned_five}");
    assert_eq!(ask(PROMPT, json!([[" 5", false]])), banned_five);
    // The chat route reads it too.
    let chat = |bias: Value| {
        let (status, answer) = server.post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Say hello."}],
                    "max_tokens": 6, "temperature": 0, "logit_bias": bias}),
        );
        assert_eq!(status, 200, "{answer}");
        answer["choices"][0]["message"]["content"]
            .as_str()
            .expect("content")
            .to_string()
    };
    let greeting = chat(json!({}));
    let first_word = greeting
        .split_whitespace()
        .next()
        .expect("a word")
        .to_string();
    let banned = chat(json!({ first_word.clone(): -100 }));
    assert!(!banned.starts_with(&first_word), "{greeting} / {banned}");
    for bias in [
        json!({" 5": "no"}),
        json!({"": false}),
        json!([[" 5"]]),
        json!([[[" 5"], 1]]),
        json!(" 5"),
    ] {
        let (status, error) = server.post(
            "/completion",
            &json!({"prompt": PROMPT, "n_predict": 2, "logit_bias": bias}),
        );
        assert_eq!(status, 400, "{bias}: {error}");
        assert_eq!(error["error"]["param"], "logit_bias", "{bias}: {error}");
    }
}

/// Reasoning in the history reaches the template as `reasoning_content`, as
/// llama.cpp passes it: an OpenAI assistant message's `reasoning_content` and an
/// Anthropic assistant turn's `thinking` blocks. Qwen3's template renders it for
/// the turns after the last question.
#[test]
fn reasoning_in_the_history_reaches_the_template() {
    let Some(dir) = std::env::var_os("SHEPHERD_TEMPLATE_CORPUS") else {
        println!("SHEPHERD_TEMPLATE_CORPUS unset: skipped (make test sets it)");
        return;
    };
    let template = std::path::Path::new(&dir).join("Qwen-Qwen3-0.6B.jinja");
    let template = template.to_str().expect("UTF-8 path");
    let server =
        ApiServer::with_model(&["--context-size", "2048", "--chat-template-file", template]);
    const THOUGHT: &str = "The user wants the weather; I call the tool.";
    let call = json!({"id": "c1", "type": "function",
                      "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}});
    let openai = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": THOUGHT, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]);
    let (status, applied) = server.post("/apply-template", &json!({ "messages": openai }));
    assert_eq!(status, 200, "{applied}");
    let prompt = applied["prompt"].as_str().expect("prompt");
    assert!(
        prompt.contains(&format!("<think>\n{THOUGHT}\n</think>")),
        "{prompt}"
    );
    // Anthropic's thinking blocks: the prompt counted grows by the thought.
    let count = |thinking: bool| {
        let mut blocks = vec![json!({"type": "tool_use", "id": "c1", "name": "weather",
                                     "input": {"city": "Paris"}})];
        if thinking {
            blocks.insert(
                0,
                json!({"type": "thinking", "thinking": THOUGHT, "signature": "s"}),
            );
        }
        let messages = json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": blocks},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "sunny"}]},
        ]);
        let (status, counted) = server.post(
            "/v1/messages/count_tokens",
            &json!({"model": "m", "messages": messages}),
        );
        assert_eq!(status, 200, "{counted}");
        counted["input_tokens"].as_u64().expect("input_tokens")
    };
    let (with, without) = (count(true), count(false));
    assert!(
        with >= without + ids(&server, THOUGHT).len() as u64,
        "{with} with the thought, {without} without"
    );
}

/// A grammar that would crash llama.cpp or cost seconds per token is refused with
/// a 400 naming the limit; one within the limits that is still costly (every token
/// checks hundreds of live alternatives against the whole vocabulary) is sampled on
/// the sampling helper, so a request on the other slot does not wait for it.
#[test]
fn a_costly_grammar_holds_back_only_its_own_request() {
    let server = ApiServer::with_model(&["--parallel", "2", "--no-prompt-cache"]);
    let words = |n: usize| (0..n).map(|i| format!("\"w{i:05}\"")).collect::<Vec<_>>();
    for (grammar, limit) in [
        // 20,000 alternatives, 200 KB: seconds per token, and 13 s for a neighbour.
        (
            format!("root ::= {}", words(20_000).join(" | ")),
            "alternatives",
        ),
        // llama.cpp's parser recurses once per group: this overflowed its stack.
        (
            format!("root ::= {}\"a\"{}", "(".repeat(20_000), ")".repeat(20_000)),
            "nested groups",
        ),
        (
            "root ::= ((\"a\"{2000}){2000}){2000}".to_string(),
            "symbols",
        ),
        (format!("root ::= {}", "\"a\"{2000} ".repeat(17)), "rules"),
    ] {
        let body = json!({"prompt": "x", "n_predict": 2, "grammar": grammar});
        let (status, error) = server.post("/completion", &body);
        assert_eq!(status, 400, "{limit}: {error}");
        assert_eq!(error["error"]["param"], json!("grammar"), "{error}");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(limit) && message.contains("limit"),
            "{error}"
        );
    }

    // A chain of 20,000 rules within the limits: llama.cpp follows it recursively,
    // which overflowed a thread's default stack and killed the server.
    let name = |i: usize| -> String {
        (0..4)
            .rev()
            .map(|k| char::from(b'a' + (i / 26usize.pow(k) % 26) as u8))
            .collect()
    };
    let chain: String = (0..20_000)
        .map(|i| format!("{}::={}\n", name(i), name(i + 1)))
        .chain([format!("{}::=\"a\"\nroot::={}\n", name(20_000), name(0))])
        .collect();
    let body = json!({"prompt": "x", "n_predict": 1, "temperature": 0, "grammar": chain});
    let (status, answer) = server.post("/completion", &body);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["content"], json!("a"), "{answer}");

    // 200 alternatives of one character, repeated: every token is refused by the
    // grammar first (the model would not write `~`), so each one masks the whole
    // vocabulary against hundreds of stacks.
    let costly = format!("root ::= w+\nw ::= {}", vec!["\"~\""; 200].join(" | "));
    std::thread::scope(|scope| {
        let big = scope.spawn(|| {
            server.post(
                "/v1/chat/completions",
                &json!({"messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 3, "temperature": 0, "grammar": costly}),
            )
        });
        // The small request goes once the costly one holds its slot.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let (_, slots) = server.get("/slots");
            if slots.contains("\"is_processing\":true") || big.is_finished() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the costly request never ran"
            );
        }
        let started = std::time::Instant::now();
        let (status, small) = server.post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Say hello."}],
                    "max_tokens": 2, "temperature": 0}),
        );
        let small_secs = started.elapsed().as_secs_f64();
        assert_eq!(status, 200, "{small}");
        let (status, big) = big.join().expect("the costly request");
        assert_eq!(status, 200, "{big}");
        let text = big["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default();
        assert!(!text.is_empty() && text.chars().all(|c| c == '~'), "{big}");
        // Both figures from the same run: the neighbour took less than one of the
        // costly request's tokens (before, it waited for at least one whole one).
        let per_token = big["timings"]["predicted_per_token_ms"]
            .as_f64()
            .expect("timings")
            / 1e3;
        assert!(
            small_secs < per_token,
            "the neighbour took {small_secs:.3} s, one costly token {per_token:.3} s"
        );
    });
}

/// The slot that caches the most tokens, and how many.
fn fullest_slot(server: &ApiServer) -> (usize, u64) {
    let (status, slots) = server.get("/slots");
    assert_eq!(status, 200, "{slots}");
    let slots: Value = serde_json::from_str(&slots).expect("JSON");
    let slots = slots.as_array().expect("an array");
    assert!(slots
        .iter()
        .all(|s| s["n_ctx"].is_u64() && s["is_processing"] == json!(false)));
    (slots.iter())
        .map(|s| {
            (
                s["id"].as_u64().unwrap() as usize,
                s["n_cached"].as_u64().unwrap(),
            )
        })
        .max_by_key(|&(_, n)| n)
        .expect("slots")
}

#[test]
fn a_slot_saved_erased_and_restored_serves_its_prompt_from_the_cache_again() {
    let dir = crate::harness::TempDir::new("slots");
    let dir_arg = dir.path().to_str().expect("UTF-8").to_string();
    let server = ApiServer::with_model(&[
        "--parallel",
        "2",
        "--no-prompt-cache",
        "--slot-save-path",
        &dir_arg,
    ]);
    let chat = json!({
        "messages": [{"role": "user", "content": "Name three colours, please."}],
        "max_tokens": 4, "temperature": 0
    });
    let cached =
        |answer: &Value| answer["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    let (status, first) = server.post("/v1/chat/completions", &chat);
    assert_eq!(status, 200, "{first}");
    assert_eq!(cached(&first), Some(0), "{first}");
    let (slot, before) = fullest_slot(&server);
    assert!(before > 0, "nothing cached after a chat");

    let at = |action: &str| format!("/slots/{slot}?action={action}");
    let (status, saved) = server.post(&at("save"), &json!({"filename": "colours.bin"}));
    assert_eq!(status, 200, "{saved}");
    assert_eq!(saved["id_slot"], json!(slot), "{saved}");
    // The idle slot may have decoded the next turn's opening meanwhile (the
    // warm-up): at least what it held.
    let held = saved["n_saved"].as_u64().expect("n_saved");
    assert!(held >= before, "{saved}");
    let written = std::fs::metadata(dir.path().join("colours.bin"))
        .expect("the file")
        .len();
    assert_eq!(saved["n_written"].as_u64(), Some(written), "{saved}");
    assert!(saved["timings"]["save_ms"].is_f64(), "{saved}");

    let (status, erased) = server.post(&at("erase"), &json!({}));
    assert_eq!(status, 200, "{erased}");
    assert!(erased["n_erased"].as_u64() >= Some(held), "{erased}");
    assert_eq!(fullest_slot(&server).1, 0, "erased, yet cached");

    let (status, restored) = server.post(&at("restore"), &json!({"filename": "colours.bin"}));
    assert_eq!(status, 200, "{restored}");
    assert_eq!(restored["n_restored"].as_u64(), Some(held), "{restored}");
    assert_eq!(restored["n_read"].as_u64(), Some(written), "{restored}");
    assert_eq!(fullest_slot(&server), (slot, held));
    // The same request again reads its prompt from the restored cache, and
    // answers as it did.
    let (status, again) = server.post("/v1/chat/completions", &chat);
    assert_eq!(status, 200, "{again}");
    assert!(cached(&again).is_some_and(|n| n > 0), "{again}");
    assert_eq!(
        again["choices"][0]["message"]["content"],
        first["choices"][0]["message"]["content"]
    );

    // What is refused, and how: a name outside the directory, a file that is
    // not there, one that is not a saved slot, a slot that is not there, an
    // action llama-server does not know.
    std::fs::write(dir.path().join("junk.bin"), b"not a slot").unwrap();
    for (path, body, status) in [
        (at("save"), json!({"filename": "../escape.bin"}), 400),
        (at("restore"), json!({"filename": "missing.bin"}), 404),
        (at("restore"), json!({"filename": "junk.bin"}), 400),
        (at("save"), json!({}), 400),
        ("/slots/7?action=erase".to_string(), json!({}), 404),
        ("/slots/x?action=erase".to_string(), json!({}), 400),
        (at("load"), json!({"filename": "a.bin"}), 400),
    ] {
        let (got, error) = server.post(&path, &body);
        assert_eq!(got, status, "{path} {body}: {error}");
        assert!(error["error"]["message"].is_string(), "{error}");
    }
    assert!(!dir.path().parent().unwrap().join("escape.bin").exists());

    // Without --slot-save-path there is nowhere to save: 501, as llama-server.
    let plain = ApiServer::with_model(&["--no-prompt-cache"]);
    let (got, error) = plain.post("/slots/0?action=save", &json!({"filename": "a.bin"}));
    assert_eq!(got, 501, "{error}");
    let (got, _) = plain.post("/slots/0?action=erase", &json!({}));
    assert_eq!(got, 200);
}

/// The prompt cache's checksum (`prompt_cache::hash`), to forge a file that
/// passes it.
fn kv_checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let w = u64::from_le_bytes(word.try_into().unwrap());
        h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(29);
    }
    for &b in words.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A saved slot file with `extra` tokens added to its token list (its state
/// left as it is) and its checksum recomputed; also the forged token list.
fn forge_more_tokens(saved: &[u8], extra: &[i64]) -> (Vec<u8>, Vec<i64>) {
    let u32_at = |at: usize| u32::from_le_bytes(saved[at..at + 4].try_into().unwrap()) as usize;
    let key_end = 12 + u32_at(8);
    let n_tokens = u32_at(key_end);
    let tokens_end = key_end + 4 + 4 * n_tokens;
    let mut tokens: Vec<i64> = saved[key_end + 4..tokens_end]
        .chunks_exact(4)
        .map(|c| i64::from(i32::from_le_bytes(c.try_into().unwrap())))
        .collect();
    tokens.extend_from_slice(extra);
    let mut forged = saved[..key_end].to_vec();
    forged.extend((tokens.len() as u32).to_le_bytes());
    for &t in &tokens {
        forged.extend((t as i32).to_le_bytes());
    }
    forged.extend_from_slice(&saved[tokens_end..saved.len() - 8]);
    let sum = kv_checksum(&forged);
    forged.extend(sum.to_le_bytes());
    (forged, tokens)
}

#[test]
fn slot_files_are_untrusted_input_refused_with_a_400_naming_the_file() {
    use std::time::Duration;
    let dir = crate::harness::TempDir::new("slots-hostile");
    let dir_arg = dir.path().to_str().expect("UTF-8").to_string();
    let server = ApiServer::with_model(&[
        "--parallel",
        "2",
        "--no-prompt-cache",
        "--slot-save-path",
        &dir_arg,
    ]);
    let chat = json!({
        "messages": [{"role": "user", "content": "Count to three."}],
        "max_tokens": 2, "temperature": 0
    });
    let (status, answer) = server.post("/v1/chat/completions", &chat);
    assert_eq!(status, 200, "{answer}");
    let (slot, _) = fullest_slot(&server);
    let at = |action: &str| format!("/slots/{slot}?action={action}");
    let refused = |path: &str, body: &Value, param: &str, names: &str| {
        let (status, error) = server.post(path, body);
        assert_eq!(status, 400, "{path} {body}: {error}");
        assert_eq!(error["error"]["param"], json!(param), "{error}");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{path}: {error}");
    };

    // `action` given twice: which was meant cannot be told.
    let both = format!("/slots/{slot}?action=save&action=erase");
    refused(&both, &json!({"filename": "x.bin"}), "action", "action");
    assert!(!dir.path().join("x.bin").exists());
    // A 255-byte name passes NAME_MAX, but the save's temp name beside it
    // would not: refused up front, not a 500 from the file system.
    let long = "n".repeat(255);
    refused(
        &at("save"),
        &json!({"filename": long}),
        "filename",
        "255 bytes",
    );

    // A FIFO: the restore is refused at once, and the generation thread is
    // never stuck on it (/slots answers meanwhile and after).
    let fifo = dir.path().join("fifo.bin");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    let (tx, rx) = crossbeam_channel::bounded(1);
    let url = server.url(&at("restore"));
    std::thread::spawn(move || {
        let answer = crate::harness::http_agent(Duration::from_secs(30))
            .post(&url)
            .header("Content-Type", "application/json")
            .send(json!({"filename": "fifo.bin"}).to_string())
            .map(|r| {
                let status = r.status().as_u16();
                (status, r.into_body().read_to_string().unwrap_or_default())
            });
        let _ = tx.send(answer.map_err(|e| e.to_string()));
    });
    let quick = crate::harness::http_agent(Duration::from_secs(3));
    let slots_answer = || {
        quick
            .get(&server.url("/slots"))
            .call()
            .is_ok_and(|r| r.status().as_u16() == 200)
    };
    assert!(
        crate::harness::poll_until(Duration::from_secs(15), slots_answer),
        "/slots stuck behind the FIFO"
    );
    let (status, body) = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("the FIFO restore never answered")
        .expect("the FIFO restore failed");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("fifo.bin"), "{body}");

    // A symlink (to /dev/zero): never followed, never read.
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.bin")).unwrap();
    refused(
        &at("restore"),
        &json!({"filename": "zero.bin"}),
        "filename",
        "zero.bin",
    );

    // A forged file, checksum recomputed, that lists more tokens than its
    // state holds: refused at restore, and the request that would have reused
    // the listed prefix still answers.
    let (status, saved) = server.post(&at("save"), &json!({"filename": "real.bin"}));
    assert_eq!(status, 200, "{saved}");
    let real = std::fs::read(dir.path().join("real.bin")).expect("the saved file");
    let extra = ids(&server, " and then some more words");
    let (forged, listed) = forge_more_tokens(&real, &extra);
    std::fs::write(dir.path().join("forged.bin"), forged).unwrap();
    let message_of = |error: &Value| error["error"]["message"].as_str().unwrap_or("").to_string();
    let (status, error) = server.post(&at("restore"), &json!({"filename": "forged.bin"}));
    assert_eq!(status, 400, "{error}");
    assert!(message_of(&error).contains("forged.bin"), "{error}");
    let (status, next) = server.post(
        "/completion",
        &json!({"prompt": listed, "n_predict": 2, "temperature": 0}),
    );
    assert_eq!(status, 200, "{next}");
    // The real file still restores.
    let (status, restored) = server.post(&at("restore"), &json!({"filename": "real.bin"}));
    assert_eq!(status, 200, "{restored}");
}

/// Codex's tools on the Responses API: a function, the custom `apply_patch`,
/// `local_shell` and the hosted `web_search` (dropped, with a `Warning`); a
/// forced call answers as a `custom_tool_call` or `local_shell_call` item. And
/// Claude Code's server tool on `/v1/messages`, dropped with the same warning.
#[test]
fn codex_and_claude_code_tool_types_are_served() {
    if !have_curl() {
        eprintln!("skipped: no curl");
        return;
    }
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let tools = json!([
        {"type": "function", "name": "get_weather", "description": "The weather",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
        {"type": "custom", "name": "apply_patch", "description": "Edits files with a patch",
         "format": {"type": "grammar", "syntax": "lark", "definition": "start: \"*** Begin Patch\" /(.|\\n)*/"}},
        {"type": "local_shell"},
        {"type": "web_search"},
    ]);
    let request = |choice: Value, stream: bool| {
        let body = json!({
            "model": "m", "input": "Add a README file.", "tools": tools, "tool_choice": choice,
            "max_output_tokens": 40, "temperature": 0, "store": false, "stream": stream,
        });
        curl_post(&server.url("/v1/responses"), &body.to_string(), &["-N"])
    };
    let answer = request(json!({"type": "custom", "name": "apply_patch"}), false);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer.headers.contains(
            "warning: 299 shepherd \"tool 'web_search' is hosted by its provider and was dropped\""
        ),
        "{}",
        answer.headers
    );
    let output = answer.json()["output"].clone();
    let call = output
        .as_array()
        .and_then(|items| items.iter().find(|i| i["type"] == "custom_tool_call"))
        .unwrap_or_else(|| panic!("a custom_tool_call in {output}"));
    assert_eq!(call["name"], "apply_patch", "{call}");
    assert_eq!(call["status"], "completed", "{call}");
    assert!(
        call["input"].is_string() && call["call_id"].is_string(),
        "{call}"
    );

    let streamed = request(json!({"type": "local_shell"}), true);
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    let events = sse_events(&streamed.body);
    let done = events
        .iter()
        .filter(|(name, _)| name == "response.output_item.done")
        .map(|(_, data)| serde_json::from_str::<Value>(data).expect("JSON event"))
        .find(|e| e["item"]["type"] == "local_shell_call")
        .unwrap_or_else(|| panic!("a local_shell_call item in {events:?}"));
    let action = &done["item"]["action"];
    assert_eq!(action["type"], "exec", "{done}");
    assert!(
        action["command"].is_array() && action["user"].is_null(),
        "{done}"
    );

    let body = json!({
        "model": "m", "max_tokens": 20, "temperature": 0,
        "messages": [{"role": "user", "content": "Hello"}],
        "tools": [
            {"name": "get_weather", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
            {"type": "bash_20250124", "name": "bash"},
        ],
    });
    let answer = curl_post(&server.url("/v1/messages"), &body.to_string(), &[]);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer
            .headers
            .contains("warning: 299 shepherd \"tool 'web_search_20250305' is hosted"),
        "{}",
        answer.headers
    );
}

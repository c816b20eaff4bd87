//! The marker table's tests: its rows never prefix one another, the preserved
//! tokens, how a prompt's end is read, harmony headers, and each family's markup
//! read through [`parse_markup`] by its row.

use super::*;
use serde_json::{json, Value};

#[test]
fn no_marker_is_a_prefix_of_another() {
    for a in MARKERS {
        for b in MARKERS {
            if a.tag != b.tag {
                assert!(!b.tag.starts_with(a.tag), "{} prefixes {}", a.tag, b.tag);
            }
        }
    }
}

#[test]
fn markers_include_closers_and_framing() {
    for text in ["<think>", "</think>", "<|end|>", "[ARGS]", "<|message|>"] {
        assert!(is_marker(text), "{text}");
    }
    assert!(!is_marker("<|im_start|>"));
    assert!(!is_marker("think"));
}

#[test]
fn the_end_of_a_prompt_says_how_the_answer_starts() {
    let qwen = "<|im_start|>assistant\n<think>\n";
    assert_eq!(prompt_end(qwen), Some(PromptEnd::Reasoning(&["</think>"])));
    let closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    assert_eq!(prompt_end(closed), None);
    assert_eq!(prompt_end("[INST]hi[/INST]"), None);
    let oss = "<|start|>assistant<|channel|>analysis<|message|>";
    assert_eq!(prompt_end(oss), Some(PromptEnd::Reasoning(HARMONY_END)));
    assert_eq!(prompt_end("<|start|>assistant"), Some(PromptEnd::Header));
    assert_eq!(
        prompt_end("<|from|>assistant\n>>>"),
        Some(PromptEnd::Recipient)
    );
}

#[test]
fn harmony_headers() {
    let call = "<|channel|>commentary to=functions.get_weather <|constrain|>json";
    assert_eq!(
        harmony_header(call),
        HarmonyMessage::Call("get_weather".into())
    );
    let before = "<|start|>assistant to=functions.read<|channel|>commentary json";
    assert_eq!(harmony_header(before), HarmonyMessage::Call("read".into()));
    let analysis = "<|channel|>analysis";
    assert_eq!(harmony_header(analysis), HarmonyMessage::Reasoning);
    let fin = "<|start|>assistant<|channel|>final";
    assert_eq!(harmony_header(fin), HarmonyMessage::Answer);
}

fn names() -> Vec<String> {
    ["read", "write", "bash"].map(String::from).to_vec()
}

fn check(text: &str, expected: Option<Vec<(&str, Value)>>) {
    let got = parse_markup(text, &Offered::names(names())).map(|calls| {
        calls
            .into_iter()
            .map(|c| (c.name, c.arguments))
            .collect::<Vec<_>>()
    });
    let expected = expected.map(|calls| {
        calls
            .into_iter()
            .map(|(n, a)| (n.to_string(), a))
            .collect::<Vec<_>>()
    });
    assert_eq!(got, expected, "text {text:?}");
}

#[test]
fn json_forms() {
    check(
        r#"{"name":"read","arguments":{"path":"a"}}"#,
        Some(vec![("read", json!({"path":"a"}))]),
    );
    check(
        r#"{"name":"read","parameters":{"n":1}}"#,
        Some(vec![("read", json!({"n":1}))]),
    );
    check(
        r#"{"name":"read","arguments":"{\"p\":2}"}"#,
        Some(vec![("read", json!({"p":2}))]),
    );
    check(r#"{"name":"READ"}"#, Some(vec![("read", json!({}))]));
    check(
        r#"{"function":{"name":"bash","arguments":{}}}"#,
        Some(vec![("bash", json!({}))]),
    );
    check(r#"{"name":"unknown","arguments":{}}"#, None);
    check(r#"{"title":"read"}"#, None);
    check(r#"{"name":"read""#, None);
}

#[test]
fn hermes_and_tool_tags() {
    check(
        "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"x\": true}}\n</tool_call>",
        Some(vec![("write", json!({"x":true}))]),
    );
    check(
        "<tool_call>{\"name\":\"write\"}",
        Some(vec![("write", json!({}))]),
    );
    check(
        "<tool>{\"name\":\"bash\",\"arguments\":{\"command\":\"ls\"}}</tool>",
        Some(vec![("bash", json!({"command":"ls"}))]),
    );
    check("<tool_call>{\"name\":\"nope\"}</tool_call>", None);
}

#[test]
fn qwen3_coder() {
    check(
        "<tool_call>\n<function=write>\n<parameter=path>\na.txt\n</parameter>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>",
        Some(vec![("write", json!({"path":"a.txt","n":3}))]),
    );
    check(
        "<function=bash><parameter=command>echo \"hi\"\n</parameter></function>",
        Some(vec![("bash", json!({"command":"echo \"hi\"\n"}))]),
    );
    check("<tool_call><function=bogus></function></tool_call>", None);
}

#[test]
fn glm() {
    check(
        "<tool_call>read\n<arg_key>path</arg_key>\n<arg_value>/tmp/x</arg_value>\n<arg_key>limit</arg_key><arg_value>10</arg_value></tool_call>",
        Some(vec![("read", json!({"path":"/tmp/x","limit":10}))]),
    );
    check("<tool_call>just some words here</tool_call>", None);
}

#[test]
fn anthropic_invokes() {
    check(
        "<function_calls>\n<invoke name=\"read\">\n<parameter name=\"path\">b.rs</parameter>\n</invoke>\n<invoke name='bash'><parameter name=\"command\">ls -l</parameter></invoke>\n</function_calls>",
        Some(vec![("read", json!({"path":"b.rs"})), ("bash", json!({"command":"ls -l"}))]),
    );
    check(
        "<function_calls><invoke name=\"read\"><parameter name=\"o\">{\"a\":[1]}</parameter>",
        Some(vec![("read", json!({"o":{"a":[1]}}))]),
    );
    check(
        "<function_calls><invoke name=\"rm\"></invoke></function_calls>",
        None,
    );
    check("<function_calls></function_calls>", None);
}

/// Formats that write every value as text: the tool's schema says which are strings.
#[test]
fn text_values_are_typed_by_the_schema() {
    let schema = json!({"type": "object", "properties": {
        "path": {"type": "string"}, "n": {"type": "integer"},
        "note": {"type": ["string", "null"]}}});
    let tools = [Offered {
        name: "write".into(),
        parameters: Some(schema),
    }];
    let parse = |text: &str| parse_markup(text, &tools).expect(text)[0].arguments.clone();
    let qwen = "<tool_call>\n<function=write>\n<parameter=path>\n2024\n</parameter>\n<parameter=n>\n7\n</parameter>\n<parameter=note>\ntrue\n</parameter>\n</function>\n</tool_call>";
    assert_eq!(parse(qwen), json!({"path": "2024", "n": 7, "note": "true"}));
    let glm = "<tool_call>write<arg_key>path</arg_key><arg_value>[1]</arg_value><arg_key>n</arg_key><arg_value>3</arg_value></tool_call>";
    assert_eq!(parse(glm), json!({"path": "[1]", "n": 3}));
    let minimax = "<minimax:tool_call><invoke name=\"write\"><parameter name=\"path\">007</parameter></invoke></minimax:tool_call>";
    assert_eq!(parse(minimax), json!({"path": "007"}));
    // Known by name only: values are typed by how they read.
    let untyped = parse_markup(qwen, &Offered::names(vec!["write".into()])).unwrap();
    assert_eq!(
        untyped[0].arguments,
        json!({"path": 2024, "n": 7, "note": true})
    );
}

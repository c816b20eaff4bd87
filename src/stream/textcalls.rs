//! Parsers for tool calls that models write as text instead of using the API's
//! native field, one per family's syntax: bare JSON; Hermes/Qwen
//! `<tool_call>{…}</tool_call>`; Qwen3-Coder and Seed-OSS `<function=…><parameter=…>`;
//! Llama 3.1 and Functionary `<function=NAME>{…}</function>` and `<|python_tag|>`;
//! GLM `<arg_key>/<arg_value>`; Anthropic, MiniMax and DeepSeek V3.2 (DSML)
//! `<invoke name=…>`; Mistral `[TOOL_CALLS]` (a JSON array, or `NAME[ARGS]{…}`);
//! DeepSeek R1 and V3.1 `<｜tool▁call▁begin｜>`; Kimi K2 `functions.NAME:N`; Granite
//! `<|tool_call|>[…]`; Command R `<|START_ACTION|>`; Nemotron `<TOOLCALL>`; Apertus
//! `<|tools_prefix|>`; LFM2's Python calls; Gemma 4 `<|tool_call>call:NAME{…}`;
//! Firefunction `functools[…]`; gpt-oss harmony messages addressed `to=functions.NAME`.
//!
//! The output filter ([`super::filter`]) decides which stretch of text is
//! markup (by the opening markers of [`super::format`]) and hands it here whole.
//! Every call is validated against the registered tool names; an id is kept
//! when the format carries one, else left empty for the filter to synthesise.
//! A missing closing tag is tolerated: generation often stops on it.

use serde_json::{Map, Value};

use crate::core::ToolCall;

/// A tool the model may call: its name and, where known, its parameters' JSON schema,
/// which types the values of the formats that write every value as text (a string
/// parameter `123` stays the string "123", as llama.cpp's parsers keep it).
#[derive(Debug, Clone)]
pub struct Offered {
    pub name: String,
    pub parameters: Option<Value>,
}

impl Offered {
    /// Tools known by name only: values are typed by how they read.
    pub fn names(names: Vec<String>) -> Vec<Offered> {
        let offered = |name| Offered {
            name,
            parameters: None,
        };
        names.into_iter().map(offered).collect()
    }
}

/// Parses one stretch of tool-call markup. `None` when it is not a well-formed
/// call to a registered tool (then the filter shows it as plain text).
pub fn parse_markup(text: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let text = text.trim();
    let after = |open: &str, close: &str| text.strip_prefix(open).map(|rest| inner(rest, close));
    let calls = if text.starts_with("<function_calls>") || text.starts_with("<minimax:tool_call>") {
        parse_invokes(text, "", tools)
    } else if text.starts_with("<｜DSML｜") {
        parse_invokes(
            &text.replace("<｜DSML｜", "<").replace("</｜DSML｜", "</"),
            "",
            tools,
        )
    } else if text.starts_with("]<]minimax[>[") {
        parse_invokes(text, MINIMAX_M3, tools)
    } else if let Some(body) = after("<|open|>tools<|sep|>", "<|close|>tools<|sep|>") {
        parse_open_calls(body, tools)
    } else if let Some(body) = after("Action:", "\n```\n") {
        json_calls(body.trim().trim_start_matches("```json"))
    } else if let Some(body) = after("<tool_calls>", "</tool_calls>") {
        json_calls(body)
    } else if let Some(body) = after("<tool_call>", "</tool_call>") {
        parse_tool_call_body(body, tools)
    } else if let Some(body) = after("<tool>", "</tool>") {
        parse_json_object(body).map(|c| vec![c])
    } else if text.starts_with("<function=") {
        parse_functions(text, tools)
    } else if text.starts_with("<function name=") {
        parse_named_functions(text, tools)
    } else if let Some(body) = after("<seed:tool_call>", "</seed:tool_call>") {
        parse_functions(body, tools)
    } else if let Some(rest) = text.strip_prefix("[TOOL_CALLS]") {
        parse_mistral(rest)
    } else if let Some(rest) = text.strip_prefix("<|python_tag|>") {
        parse_python_tag(rest)
    } else if let Some(body) = after("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>") {
        parse_deepseek(body)
    } else if let Some(body) = after("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>") {
        parse_kimi(body)
    } else if text.starts_with("<|tool_call_begin|>") {
        parse_kimi(text)
    } else if let Some(body) = text.strip_prefix("<|tool_call|>") {
        json_calls(body)
    } else if let Some(body) = after("<|START_ACTION|>", "<|END_ACTION|>") {
        json_calls(body)
    } else if let Some(body) = after("<TOOLCALL>", "</TOOLCALL>") {
        json_calls(body)
    } else if let Some(body) = after("<|tools_prefix|>", "<|tools_suffix|>") {
        json_calls(body)
    } else if let Some(body) = after("<|tool_call_start|>", "<|tool_call_end|>") {
        python_calls(body)
    } else if let Some(body) = after("<|tool_call>", "<tool_call|>") {
        parse_gemma4(body)
    } else if let Some(body) = text.strip_prefix("functools") {
        json_calls(body)
    } else {
        parse_json_object(text).map(|c| vec![c])
    }?;
    validate(calls, tools)
}

/// A value written as text, typed by parameter `key`'s schema in `tool` ([`typed`]).
fn typed_value(tools: &[Offered], tool: &str, key: &str, raw: &str) -> Value {
    typed(param_schema(tools, tool, key), raw)
}

/// The JSON schema of parameter `key` of the offered tool `tool`.
fn param_schema<'a>(tools: &'a [Offered], tool: &str, key: &str) -> Option<&'a Value> {
    let schema = resolve(tool, tools)?.parameters.as_ref()?;
    schema.get("properties")?.get(key)
}

/// The types a schema allows: its `type` (one or a list) and its `anyOf`/`oneOf`
/// members' types.
fn schema_types(schema: &Value) -> Vec<&str> {
    let mut types: Vec<&str> = match schema.get("type") {
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    for union in ["anyOf", "oneOf"] {
        if let Some(Value::Array(members)) = schema.get(union) {
            types.extend(members.iter().flat_map(schema_types));
        }
    }
    types
}

/// A value written as text, as llama.cpp's parsers type it: `null` where the schema
/// allows null; JSON where it parses as a JSON value of a type the schema allows
/// other than a string (`{"a": 1}` for a string-or-object); else the text itself, as
/// written (quotes included), where the schema allows a string; else JSON where it
/// parses ([`param_value`]). Without a schema (or one that names no type) the value
/// is typed by how it reads.
fn typed(schema: Option<&Value>, raw: &str) -> Value {
    let types = schema.map(schema_types).unwrap_or_default();
    let text = layout(raw);
    if types.contains(&"null") && text.trim() == "null" {
        return Value::Null;
    }
    if !types.contains(&"string") {
        return param_value(raw);
    }
    let allowed = |value: &Value| match value {
        Value::Bool(_) => types.contains(&"boolean"),
        Value::Number(n) => {
            types.contains(&"number") || (types.contains(&"integer") && !n.is_f64())
        }
        Value::Object(_) => types.contains(&"object"),
        Value::Array(_) => types.contains(&"array"),
        Value::Null | Value::String(_) => false,
    };
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(value) if allowed(&value) => value,
        _ => Value::String(text.to_string()),
    }
}

/// The body of a message addressed to tool `name` (gpt-oss harmony): its JSON
/// arguments, up to the message's end marker.
pub fn parse_addressed(name: &str, body: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let end = super::format::HARMONY_END
        .iter()
        .filter_map(|m| body.find(m))
        .min()
        .unwrap_or(body.len());
    let body = body[..end].trim();
    // Muse Glimmer writes its calls as `<atem:function_calls><atem:invoke …>`.
    if body.starts_with("<atem:function_calls>") {
        let plain = body.replace("<atem:", "<").replace("</atem:", "</");
        return validate(parse_invokes(&plain, "", tools)?, tools);
    }
    let arguments = if body.is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str(body).ok()?
    };
    validate(vec![call(name, arguments)], tools)
}

/// Calls read by a learnt syntax ([`super::format::LearntCall::read`]), kept when every
/// one names an offered tool.
pub fn named_calls(calls: Vec<(String, Value)>, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let calls = calls
        .into_iter()
        .map(|(name, arguments)| call(&name, arguments));
    validate(calls.collect(), tools)
}

/// The arguments of a call the model did not finish, as far as it wrote them:
/// `value` (read from the cut text as if whole) as JSON text without the
/// closing the model never wrote (`{"city": "Par"}` was `{"city": "Par`).
pub fn unclosed(value: &Value) -> String {
    let text = value.to_string();
    let open = text.trim_end_matches(['}', ']']);
    open.strip_suffix('"').unwrap_or(open).to_string()
}

/// A JSON call cut before its end (`{"name": "bash", "arguments": {"command": "ls -`):
/// its name, when it names an offered tool, and its arguments' text exactly as far
/// as written (empty when the cut came before them).
pub fn cut_json_call(text: &str, tools: &[Offered]) -> Option<ToolCall> {
    let (name, arguments) = cut_json_parts(text)?;
    let mut calls = validate(vec![call(name, Value::Null)], tools)?;
    let mut found = calls.pop()?;
    found.arguments = Value::String(arguments.to_string());
    Some(found)
}

/// A JSON call cut before its end: its name and its arguments' text as far as
/// written (empty when the cut came before them).
pub fn cut_json_parts(text: &str) -> Option<(&str, &str)> {
    let after_key = |key: &str| {
        let at = text.find(&format!("\"{key}\""))? + key.len() + 2;
        let rest = text[at..].trim_start().strip_prefix(':')?;
        Some(rest.trim_start())
    };
    let named = after_key("name")?.strip_prefix('"')?;
    let name = &named[..named.find('"')?];
    let arguments = after_key("arguments")
        .or_else(|| after_key("parameters"))
        .unwrap_or("");
    Some((name, arguments.trim_end()))
}

/// A message addressed to tool `name` (harmony, Functionary) cut before its end: the
/// call, when `name` is offered, with its body's text exactly as far as written.
pub fn cut_addressed(name: &str, body: &str, tools: &[Offered]) -> Option<ToolCall> {
    let mut found = validate(vec![call(name, Value::Null)], tools)?.pop()?;
    found.arguments = Value::String(body.trim().to_string());
    Some(found)
}

/// Parses a bare JSON call `{"name": …, "arguments"|"parameters": {…}}`.
pub fn parse_json_call(text: &str, tools: &[Offered]) -> Option<ToolCall> {
    let call = parse_json_object(text)?;
    validate(vec![call], tools)?.pop()
}

/// Keeps the calls only when every one names a registered tool (matched
/// case-insensitively, reported with the registered spelling).
fn validate(calls: Vec<ToolCall>, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    if calls.is_empty() {
        return None;
    }
    calls
        .into_iter()
        .map(|mut call| {
            call.name = resolve(&call.name, tools)?.name.clone();
            Some(call)
        })
        .collect()
}

/// The offered tool `name` names: the exact spelling, else matched ignoring case.
fn resolve<'a>(name: &str, tools: &'a [Offered]) -> Option<&'a Offered> {
    let name = name.trim();
    tools
        .iter()
        .find(|t| t.name == name)
        .or_else(|| tools.iter().find(|t| t.name.eq_ignore_ascii_case(name)))
}

/// The text before `close`, or all of it when the closing tag never came.
fn inner<'a>(text: &'a str, close: &str) -> &'a str {
    text.find(close).map_or(text, |end| &text[..end])
}

fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: String::new(),
        name: name.trim().to_string(),
        arguments,
    }
}

/// `{"name", "arguments"|"parameters"}`, also the OpenAI `{"function": {…}}` shape.
fn parse_json_object(text: &str) -> Option<ToolCall> {
    let value: Value = serde_json::from_str(text.trim()).ok()?;
    let object = value.as_object()?;
    if let Some(function) = object.get("function").and_then(Value::as_object) {
        return call_from_object(function);
    }
    call_from_object(object)
}

/// `{"name", "arguments"|"parameters", "id"?}`, Command R's `{"tool_name",
/// "parameters", "tool_call_id"}`, or Apertus's `{"NAME": {arguments}}`.
fn call_from_object(object: &Map<String, Value>) -> Option<ToolCall> {
    let Some(name) = object.get("name").or_else(|| object.get("tool_name")) else {
        return match object.iter().next() {
            Some((name, arguments @ Value::Object(_))) if object.len() == 1 => {
                Some(call(name, arguments.clone()))
            }
            _ => None,
        };
    };
    let arguments = match object.get("arguments").or_else(|| object.get("parameters")) {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(s)) => super::toolcall::parse_arguments(s),
        Some(other) => other.clone(),
    };
    let mut found = call(name.as_str()?, arguments);
    let id = object.get("id").or_else(|| object.get("tool_call_id"));
    if let Some(id) = id.and_then(Value::as_str) {
        found.id = id.to_string();
    }
    Some(found)
}

/// The JSON value at the start of `text` and the text after it.
fn leading_json(text: &str) -> Option<(Value, &str)> {
    let text = text.trim_start();
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let value = values.next()?.ok()?;
    Some((value, &text[values.byte_offset()..]))
}

/// A JSON array of call objects, or one call object.
fn json_calls(text: &str) -> Option<Vec<ToolCall>> {
    match leading_json(text)?.0 {
        Value::Array(items) => items
            .iter()
            .map(|item| call_from_object(item.as_object()?))
            .collect(),
        Value::Object(object) => call_from_object(&object).map(|c| vec![c]),
        _ => None,
    }
}

/// Mistral: `[{"name", "arguments", "id"}]` (Nemo), or `NAME[ARGS]{…}` with an
/// optional `[CALL_ID]ID` before `[ARGS]` (Small 3.2, Magistral, Devstral), each
/// further call after another `[TOOL_CALLS]`.
fn parse_mistral(rest: &str) -> Option<Vec<ToolCall>> {
    if rest.trim_start().starts_with('[') {
        return json_calls(rest);
    }
    let mut calls = Vec::new();
    for part in rest.split("[TOOL_CALLS]") {
        if part.trim().is_empty() {
            continue;
        }
        let (head, arguments) = part.split_once("[ARGS]")?;
        let (name, id) = head.split_once("[CALL_ID]").unwrap_or((head, ""));
        let mut found = call(name, leading_json(arguments)?.0);
        found.id = id.trim().to_string();
        calls.push(found);
    }
    Some(calls)
}

/// Llama 3.x after `<|python_tag|>`: JSON calls (`;`-separated), a built-in tool's
/// `NAME.call(k=v)`, or code for the `python` tool.
fn parse_python_tag(rest: &str) -> Option<Vec<ToolCall>> {
    let rest = rest.trim();
    if rest.starts_with('{') {
        return rest
            .split(';')
            .filter(|part| !part.trim().is_empty())
            .map(parse_json_object)
            .collect();
    }
    if let Some((name, args)) = rest.split_once(".call(") {
        if is_identifier(name) {
            return python_calls(&format!("{name}({args}")).filter(|c| c.len() == 1);
        }
    }
    Some(vec![call("python", serde_json::json!({ "code": rest }))])
}

/// DeepSeek R1 (`function<｜tool▁sep｜>NAME\n```json\n{…}\n````) and V3.1
/// (`NAME<｜tool▁sep｜>{…}`) calls, each between `<｜tool▁call▁begin｜>` and
/// `<｜tool▁call▁end｜>`.
fn parse_deepseek(body: &str) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    for part in body.split("<｜tool▁call▁begin｜>").skip(1) {
        let part = inner(part, "<｜tool▁call▁end｜>");
        let (head, rest) = part.split_once("<｜tool▁sep｜>")?;
        let (name, arguments) = if head.trim() == "function" || head.trim().is_empty() {
            let (name, fenced) = rest.split_once('\n').unwrap_or((rest, ""));
            let json = fenced
                .trim()
                .trim_start_matches("```json")
                .trim_start_matches("```");
            (name, leading_json(json)?.0)
        } else {
            (head, leading_json(rest)?.0)
        };
        calls.push(call(name, arguments));
    }
    Some(calls)
}

/// Kimi K2: `<|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>{…}<|tool_call_end|>`;
/// `functions.NAME:N` is the call's id.
fn parse_kimi(body: &str) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    for part in body.split("<|tool_call_begin|>").skip(1) {
        let part = inner(part, "<|tool_call_end|>");
        let (id, arguments) = part.split_once("<|tool_call_argument_begin|>")?;
        let id = id.trim();
        let name = id.strip_prefix("functions.").unwrap_or(id);
        let name = name.rsplit_once(':').map_or(name, |(name, _)| name);
        let mut found = call(name, leading_json(arguments)?.0);
        found.id = id.to_string();
        calls.push(found);
    }
    Some(calls)
}

/// Gemma 4: `call:NAME{key:VALUE,…}`, keys bare, strings quoted by `<|"|>`.
fn parse_gemma4(body: &str) -> Option<Vec<ToolCall>> {
    let rest = body.trim().strip_prefix("call:")?;
    let open = rest.find('{')?;
    let mut parser = PyParser {
        text: &rest[open..],
        at: 0,
    };
    let arguments = parser.value()?;
    Some(vec![call(&rest[..open], arguments)])
}

fn is_identifier(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Python-style calls, `[NAME(k=v, …), …]` or one `NAME(k=v)` (LFM2, Llama's built-in tools).
fn python_calls(text: &str) -> Option<Vec<ToolCall>> {
    let mut parser = PyParser {
        text: text.trim(),
        at: 0,
    };
    let listed = parser.eat('[');
    let mut calls = Vec::new();
    loop {
        calls.push(parser.call()?);
        if !listed || !parser.eat(',') {
            break;
        }
    }
    if listed && !parser.eat(']') {
        return None;
    }
    Some(calls)
}

/// Gemma 4's string quote.
const GEMMA_QUOTE: &str = "<|\"|>";

/// A cursor over Python call syntax with literal arguments (and Gemma 4's values).
struct PyParser<'a> {
    text: &'a str,
    at: usize,
}

impl PyParser<'_> {
    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        if self.rest().starts_with(c) {
            self.at += c.len_utf8();
            return true;
        }
        false
    }

    fn word(&mut self) -> &str {
        self.skip_space();
        let rest = self.rest();
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
            .unwrap_or(rest.len());
        self.at += len;
        &self.text[self.at - len..self.at]
    }

    fn call(&mut self) -> Option<ToolCall> {
        let name = self.word().to_string();
        if name.is_empty() || !self.eat('(') {
            return None;
        }
        let mut arguments = Map::new();
        while !self.eat(')') {
            let key = self.word().to_string();
            if key.is_empty() || !self.eat('=') {
                return None;
            }
            arguments.insert(key, self.value()?);
            self.eat(',');
        }
        Some(call(&name, Value::Object(arguments)))
    }

    fn value(&mut self) -> Option<Value> {
        self.skip_space();
        if let Some(quoted) = self.rest().strip_prefix(GEMMA_QUOTE) {
            let end = quoted.find(GEMMA_QUOTE)?;
            let text = quoted[..end].to_string();
            self.at += 2 * GEMMA_QUOTE.len() + end;
            return Some(Value::String(text));
        }
        let first = self.rest().chars().next()?;
        match first {
            '"' | '\'' => self.string(first).map(Value::String),
            '[' => {
                self.at += 1;
                let mut items = Vec::new();
                while !self.eat(']') {
                    items.push(self.value()?);
                    self.eat(',');
                }
                Some(Value::Array(items))
            }
            '{' => {
                self.at += 1;
                let mut object = Map::new();
                while !self.eat('}') {
                    self.skip_space();
                    let quoted = self.rest().starts_with(['"', '\''])
                        || self.rest().starts_with(GEMMA_QUOTE);
                    let key = match quoted {
                        true => match self.value()? {
                            Value::String(key) => key,
                            other => other.to_string(),
                        },
                        // Gemma 4 writes keys bare.
                        false => self.word().to_string(),
                    };
                    if !self.eat(':') {
                        return None;
                    }
                    object.insert(key, self.value()?);
                    self.eat(',');
                }
                Some(Value::Object(object))
            }
            _ => match self.word() {
                "True" | "true" => Some(Value::Bool(true)),
                "False" | "false" => Some(Value::Bool(false)),
                "None" | "null" => Some(Value::Null),
                number => serde_json::from_str(number).ok(),
            },
        }
    }

    fn string(&mut self, quote: char) -> Option<String> {
        let mut out = String::new();
        let mut chars = self.rest().char_indices().skip(1);
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    let (_, escaped) = chars.next()?;
                    out.push(match escaped {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                }
                c if c == quote => {
                    self.at += i + c.len_utf8();
                    return Some(out);
                }
                c => out.push(c),
            }
        }
        None
    }
}

/// The inside of `<tool_call>`: JSON, Qwen3-Coder functions, or GLM argument pairs.
fn parse_tool_call_body(body: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let body = body.trim();
    if body.starts_with('{') {
        return parse_json_object(body).map(|c| vec![c]);
    }
    if body.starts_with("<function=") {
        return parse_functions(body, tools);
    }
    parse_glm(body, tools).map(|c| vec![c])
}

/// Qwen3-Coder and Seed-OSS `<function=NAME><parameter=K>V</parameter>…</function>`,
/// or Llama 3.1 and Functionary v3.1 `<function=NAME>{…}</function>`, one or more.
fn parse_functions(text: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<function=") {
        let after = &rest[start + "<function=".len()..];
        let (name, body) = after.split_once('>')?;
        let body_end = body.find("</function>").unwrap_or(body.len());
        let inside = body[..body_end].trim();
        let arguments = if inside.starts_with('{') {
            serde_json::from_str(inside).ok()?
        } else {
            let value = |key: &str, raw: &str| typed_value(tools, name, key, raw);
            tagged_params(inside, "<parameter=", ">", "</parameter>", &value)?
        };
        calls.push(call(name, arguments));
        rest = &body[body_end..];
    }
    Some(calls)
}

/// MiniCPM 5: `<function name="NAME"><param name="K">V</param>…</function>`, a value
/// possibly in `<![CDATA[…]]>` (then taken exactly).
fn parse_named_functions(text: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    const CDATA: &str = "<![CDATA[";
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<function") {
        let (attributes, mut body) = rest[start + "<function".len()..].split_once('>')?;
        let name = attribute(attributes, "name")?;
        let mut arguments = Map::new();
        loop {
            body = body.trim_start();
            let Some(after) = body.strip_prefix("<param") else {
                break;
            };
            let (attributes, value_text) = after.split_once('>')?;
            let key = attribute(attributes, "name")?;
            let (value, after_value) = match value_text.strip_prefix(CDATA) {
                Some(data) => {
                    let (data, after) = data.split_once("]]>")?;
                    (Value::String(data.to_string()), after)
                }
                None => {
                    let end = value_text.find("</param>").unwrap_or(value_text.len());
                    let raw = &value_text[..end];
                    (typed_value(tools, &name, &key, raw), &value_text[end..])
                }
            };
            arguments.insert(key, value);
            body = after_value.strip_prefix("</param>").unwrap_or(after_value);
        }
        calls.push(call(&name, Value::Object(arguments)));
        rest = body.strip_prefix("</function>").unwrap_or(body);
    }
    Some(calls)
}

/// GLM: `NAME<arg_key>K</arg_key><arg_value>V</arg_value>…`.
fn parse_glm(body: &str, tools: &[Offered]) -> Option<ToolCall> {
    let name_end = body.find("<arg_key>").unwrap_or(body.len());
    let name = body[..name_end].trim();
    if name.is_empty() || name.contains(['<', '>', '{', '\n']) {
        return None;
    }
    let mut arguments = Map::new();
    let mut rest = &body[name_end..];
    while let Some(start) = rest.find("<arg_key>") {
        let after = &rest[start + "<arg_key>".len()..];
        let (key, after_key) = after.split_once("</arg_key>")?;
        let value_start = after_key.find("<arg_value>")? + "<arg_value>".len();
        let value_text = &after_key[value_start..];
        let value_end = value_text.find("</arg_value>").unwrap_or(value_text.len());
        let key = key.trim();
        arguments.insert(
            key.to_string(),
            typed_value(tools, name, key, &value_text[..value_end]),
        );
        rest = &value_text[value_end..];
    }
    Some(call(name, Value::Object(arguments)))
}

/// MiniMax M3 writes this before every tag of its calls.
const MINIMAX_M3: &str = "]<]minimax[>[";

/// Anthropic style: `<invoke name="X"><parameter name="K">V</parameter></invoke>`,
/// or MiniMax M3's `<invoke name="X"><K>V</K></invoke>`, each tag after `prefix`.
fn parse_invokes(text: &str, prefix: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<invoke") {
        let after = &rest[start + "<invoke".len()..];
        let (attributes, body) = after.split_once('>')?;
        let name = attribute(attributes, "name")?;
        let body_end = body.find("</invoke>").unwrap_or(body.len());
        let inside = body[..body_end]
            .strip_suffix(prefix)
            .unwrap_or(&body[..body_end]);
        let arguments = if inside.contains("<parameter") {
            let value = |key: &str, raw: &str| typed_value(tools, &name, key, raw);
            named_params(inside, &value)?
        } else {
            let schema = resolve(&name, tools).and_then(|t| t.parameters.as_ref());
            element_params(inside, prefix, schema)?
        };
        calls.push(call(&name, arguments));
        rest = &body[body_end..];
    }
    Some(calls)
}

/// `<parameter name="K">V</parameter>` pairs.
fn named_params(body: &str, value: &dyn Fn(&str, &str) -> Value) -> Option<Value> {
    let mut arguments = Map::new();
    let mut rest = body;
    while let Some(start) = rest.find("<parameter") {
        let after = &rest[start + "<parameter".len()..];
        let (attributes, value_text) = after.split_once('>')?;
        let key = attribute(attributes, "name")?;
        let value_end = value_text.find("</parameter>").unwrap_or(value_text.len());
        let raw = &value_text[..value_end];
        // DeepSeek V3.2 marks which values are strings: `string="true"`.
        let typed = match attribute(attributes, "string").as_deref() {
            Some("true") => Value::String(raw.to_string()),
            Some(_) => param_value(raw),
            None => value(&key, raw),
        };
        arguments.insert(key, typed);
        rest = &value_text[value_end..];
    }
    Some(Value::Object(arguments))
}

/// MiniMax M3's `<KEY>V</KEY>` elements (each tag after `prefix`), typed by
/// `schema`, the object's: a value whose schema allows an object or an array (and
/// not a string) is itself elements, `<item>` for each of an array's.
fn element_params(body: &str, prefix: &str, schema: Option<&Value>) -> Option<Value> {
    let mut arguments = Map::new();
    for (key, raw) in elements(body, prefix)? {
        let field = schema.and_then(|s| object_member(s)?.get("properties")?.get(key));
        arguments.insert(key.to_string(), element_value(raw, prefix, field));
    }
    Some(Value::Object(arguments))
}

/// The `(KEY, inner text)` of each `<KEY>…</KEY>` element in `body`, in order.
fn elements<'a>(body: &'a str, prefix: &str) -> Option<Vec<(&'a str, &'a str)>> {
    let mut found = Vec::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let after = rest.strip_prefix(prefix)?.strip_prefix('<')?;
        let (key, value_text) = after.split_once('>')?;
        let close = format!("{prefix}</{key}>");
        let value_end = value_text.find(&close)?;
        found.push((key, &value_text[..value_end]));
        rest = value_text[value_end + close.len()..].trim_start();
    }
    Some(found)
}

/// One element's value: nested elements where its schema asks for an object or an
/// array and allows no string, else [`typed`] text.
fn element_value(raw: &str, prefix: &str, schema: Option<&Value>) -> Value {
    let Some(schema) = schema else {
        return typed(None, raw);
    };
    let types = schema_types(schema);
    let nested = raw.trim_start().starts_with(&format!("{prefix}<"));
    if !nested || types.contains(&"string") {
        return typed(Some(schema), raw);
    }
    if types.contains(&"array") {
        let items = array_member(schema).and_then(|a| a.get("items"));
        let children = elements(raw, prefix).filter(|c| c.iter().all(|(k, _)| *k == "item"));
        if let Some(children) = children {
            let values = children
                .into_iter()
                .map(|(_, v)| element_value(v, prefix, items));
            return Value::Array(values.collect());
        }
    }
    if types.contains(&"object") {
        if let Some(object) = element_params(raw, prefix, Some(schema)) {
            return object;
        }
    }
    typed(Some(schema), raw)
}

/// The member of a (possibly union) schema that describes an object.
fn object_member(schema: &Value) -> Option<&Value> {
    union_member(schema, "object")
}

fn array_member(schema: &Value) -> Option<&Value> {
    union_member(schema, "array")
}

/// `schema` itself when it has `kind`'s keywords, else its `anyOf`/`oneOf` member
/// of type `kind`.
fn union_member<'a>(schema: &'a Value, kind: &str) -> Option<&'a Value> {
    let own = match kind {
        "object" => "properties",
        _ => "items",
    };
    if schema.get(own).is_some() {
        return Some(schema);
    }
    ["anyOf", "oneOf"]
        .iter()
        .filter_map(|u| schema.get(*u)?.as_array())
        .flatten()
        .find(|m| m.get("type").and_then(Value::as_str) == Some(kind))
}

/// Kimi K3: `<|open|>call tool="NAME" index="N"<|sep|>` with arguments
/// `<|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|>`.
fn parse_open_calls(body: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    for part in body.split("<|open|>call").skip(1) {
        let (attributes, rest) = part.split_once("<|sep|>")?;
        let name = attribute(attributes, "tool")?;
        let mut arguments = Map::new();
        for argument in rest.split("<|open|>argument").skip(1) {
            let (attributes, value) = argument.split_once("<|sep|>")?;
            let value = inner(value, "<|close|>argument");
            let key = attribute(attributes, "key")?;
            let value = match attribute(attributes, "type").as_deref() {
                Some("string") => Value::String(value.to_string()),
                Some(_) => param_value(value),
                None => typed_value(tools, &name, &key, value),
            };
            arguments.insert(key, value);
        }
        calls.push(call(&name, Value::Object(arguments)));
    }
    Some(calls)
}

/// `<open KEY close_key>V</close>` pairs, e.g. `<parameter=K>V</parameter>`.
fn tagged_params(
    body: &str,
    open: &str,
    close_key: &str,
    close: &str,
    value: &dyn Fn(&str, &str) -> Value,
) -> Option<Value> {
    let mut arguments = Map::new();
    let mut rest = body;
    while let Some(start) = rest.find(open) {
        let after = &rest[start + open.len()..];
        let (key, value_text) = after.split_once(close_key)?;
        let value_end = value_text.find(close).unwrap_or(value_text.len());
        let key = key.trim();
        arguments.insert(key.to_string(), value(key, &value_text[..value_end]));
        rest = &value_text[value_end..];
    }
    Some(Value::Object(arguments))
}

/// The value of `key="…"` (or single-quoted) in a tag's attribute text.
fn attribute(attributes: &str, key: &str) -> Option<String> {
    let at = attributes.find(&format!("{key}="))? + key.len() + 1;
    let rest = &attributes[at..];
    let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let value = &rest[1..];
    let end = value.find(quote)?;
    Some(value[..end].to_string())
}

/// A value's text without its layout: a newline after the opening tag pairs with
/// one before the closing tag.
fn layout(raw: &str) -> &str {
    match raw.strip_prefix('\n') {
        Some(text) => text.strip_suffix('\n').unwrap_or(text),
        None => raw,
    }
}

/// A parameter value: JSON when it parses as JSON, else the text. One leading
/// and one trailing newline are layout, not content.
pub fn param_value(raw: &str) -> Value {
    let text = layout(raw);
    serde_json::from_str(text.trim()).unwrap_or_else(|_| Value::String(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    #[test]
    fn param_values() {
        assert_eq!(param_value("\n42\n"), json!(42));
        assert_eq!(param_value("hello"), json!("hello"));
        assert_eq!(param_value("\n  indented\n"), json!("  indented"));
        assert_eq!(param_value("[1, 2]"), json!([1, 2]));
    }
}

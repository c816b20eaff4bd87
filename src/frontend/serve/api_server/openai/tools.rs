//! The tools of a chat request, which the Responses API and Ollama share:
//! `tools` of every type (custom, local_shell and hosted ones kept or dropped
//! as [`super::super::tool_types`] says) and `tool_choice`, with its
//! `allowed_tools`.

use std::collections::HashSet;

use serde_json::{json, Value};

use super::super::error::ApiError;
use super::super::fields::{valid_tool_name, Fields};
use super::super::tool_types::{self, ToolKinds};
use crate::backend::ToolChoice;
use crate::core::ToolSpec;

/// `tools` in chat's shape (`{type, function: {name, ...}}`, `{type: custom,
/// custom: {...}}`) or the Responses API's flat one (`{type, name, ...}`):
/// `function` and `custom` tools, `local_shell`, and hosted tools (dropped, in
/// the kinds' `dropped`). Chat's legacy `functions` when `tools` is absent.
pub fn tools(f: &Fields<'_>) -> Result<(Vec<ToolSpec>, ToolKinds), ApiError> {
    let mut specs = Vec::new();
    let mut kinds = ToolKinds::default();
    if f.has("functions") {
        if f.has("tools") {
            return Err(ApiError::invalid(
                "functions",
                "'functions' is the legacy form of 'tools': send one of them",
            ));
        }
        kinds.legacy = true;
    }
    let key = if kinds.legacy { "functions" } else { "tools" };
    let mut seen = HashSet::new();
    for (i, item) in f.array(key)?.into_iter().flatten().enumerate() {
        let t = Fields::of(item, &format!("{key}[{i}]"))?;
        let kind = if kinds.legacy {
            "function"
        } else {
            t.required_str("type")?
        };
        let spec = match kind {
            "function" => match t.object("function")? {
                Some(function) => tool_spec(&function)?,
                None => tool_spec(&t)?,
            },
            "custom" => {
                let c = t.object("custom")?.unwrap_or_else(|| t.clone());
                let name = checked_name(&c)?;
                kinds.custom.insert(name.to_string());
                tool_types::custom_spec(name, c.str("description")?.unwrap_or(""), c.get("format"))
            }
            "local_shell" => {
                kinds.local_shell = true;
                tool_types::local_shell_spec()
            }
            hosted if tool_types::hosted_openai(hosted) => {
                kinds.drop_hosted(hosted);
                continue;
            }
            other => {
                return Err(ApiError::invalid(
                    &t.name("type"),
                    format!("tools of type '{other}' are not supported: send function, custom or local_shell tools"),
                ))
            }
        };
        if !seen.insert(spec.name.clone()) {
            return Err(ApiError::invalid(
                &t.name("function.name"),
                format!("tool '{}' is defined twice", spec.name),
            ));
        }
        specs.push(spec);
    }
    Ok((specs, kinds))
}

/// A tool's `name`, checked.
pub fn checked_name<'a>(f: &Fields<'a>) -> Result<&'a str, ApiError> {
    let name = f.required_str("name")?;
    if !valid_tool_name(name) {
        return Err(ApiError::invalid(
            &f.name("name"),
            "tool names are 1 to 64 of a-z, A-Z, 0-9, '_', '-', '.'",
        ));
    }
    Ok(name)
}

pub fn tool_spec(f: &Fields<'_>) -> Result<ToolSpec, ApiError> {
    let name = checked_name(f)?;
    let parameters = match f.get("parameters") {
        None => json!({"type": "object", "properties": {}}),
        Some(schema @ Value::Object(_)) => schema.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                &f.name("parameters"),
                "'parameters' must be a JSON schema object",
            ))
        }
    };
    f.bool("strict")?;
    Ok(ToolSpec {
        name: name.to_string(),
        description: f.str("description")?.unwrap_or("").to_string(),
        parameters,
    })
}

/// The tool a `tool_choice` object (or an `allowed_tools` entry) names: `None`
/// for a hosted tool, which was dropped.
pub fn named_tool<'a>(c: &Fields<'a>, kinds: &mut ToolKinds) -> Result<Option<&'a str>, ApiError> {
    let kind = c.required_str("type").or_else(|e| {
        if c.has("name") {
            Ok("function")
        } else {
            Err(e)
        }
    })?;
    match kind {
        "function" | "custom" => Ok(Some(match c.object(kind)? {
            Some(inner) => inner.required_str("name")?,
            None if c.has("name") => c.required_str("name")?,
            None => return Err(c.missing(kind, "an object")),
        })),
        "local_shell" => Ok(Some(tool_types::LOCAL_SHELL)),
        hosted if tool_types::hosted_openai(hosted) => {
            kinds.drop_hosted(hosted);
            Ok(None)
        }
        _ => Err(ApiError::invalid(
            &c.name("type"),
            "the tool named must be of type function, custom or local_shell",
        )),
    }
}

/// `tool_choice`: a mode; one tool named in chat's shape (`{type, function:
/// {name}}`, `{type: custom, custom: {name}}`) or the Responses API's (`{type,
/// name}`, `{type: local_shell}`); or `allowed_tools`, which narrows `tools` to
/// its list. Naming a hosted tool is `auto` (the tool was dropped). Chat's
/// legacy `function_call` (`none`, `auto` or `{name}`) where `tool_choice` is
/// absent.
pub fn tool_choice(
    f: &Fields<'_>,
    tools: &mut Vec<ToolSpec>,
    kinds: &mut ToolKinds,
) -> Result<ToolChoice, ApiError> {
    let key = if f.has("function_call") {
        if f.has("tool_choice") {
            return Err(ApiError::invalid(
                "function_call",
                "'function_call' is the legacy form of 'tool_choice': send one of them",
            ));
        }
        "function_call"
    } else {
        "tool_choice"
    };
    let choice = match f.get(key) {
        None => return Ok(ToolChoice::Auto),
        Some(Value::String(mode)) => match mode.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" if key == "tool_choice" => ToolChoice::Required,
            _ => return Err(ApiError::invalid(
                key,
                format!("'{key}' must be auto, none, required or name one tool, as {{type: function, function: {{name}}}}"),
            )),
        },
        Some(_) => {
            let Some(c) = f.object(key)? else {
                return Ok(ToolChoice::Auto);
            };
            if c.str("type")? == Some("allowed_tools") {
                return allowed_tools(&c, tools, kinds);
            }
            match named_tool(&c, kinds)? {
                Some(name) => ToolChoice::Named(name.to_string()),
                None => ToolChoice::Auto,
            }
        }
    };
    let offered = |name: &str| tools.iter().any(|t| t.name == name);
    match &choice {
        ToolChoice::Required if tools.is_empty() => Err(ApiError::invalid(
            key,
            format!("'{key}' is 'required' but no tools were given"),
        )),
        ToolChoice::Named(name) if !offered(name) => Err(ApiError::invalid(
            key,
            format!("'{key}' names '{name}', which is not in 'tools'"),
        )),
        _ => Ok(choice),
    }
}

/// `{type: allowed_tools, mode, tools: [...]}` (the Responses API's shape, or
/// chat's with them in `allowed_tools`): `tools` narrowed to those listed.
pub fn allowed_tools(
    c: &Fields<'_>,
    tools: &mut Vec<ToolSpec>,
    kinds: &mut ToolKinds,
) -> Result<ToolChoice, ApiError> {
    let a = c.object("allowed_tools")?.unwrap_or_else(|| c.clone());
    let mode = a.choice("mode", &["auto", "required"])?.unwrap_or("auto");
    let list = a
        .array("tools")?
        .ok_or_else(|| a.missing("tools", "an array of tools"))?;
    let mut allowed = HashSet::new();
    for (i, item) in list.iter().enumerate() {
        let t = Fields::of(item, &format!("{}[{i}]", a.name("tools")))?;
        let Some(name) = named_tool(&t, kinds)? else {
            continue;
        };
        if !tools.iter().any(|s| s.name == name) {
            return Err(ApiError::invalid(
                &t.name("name"),
                format!("'{name}' is not in 'tools'"),
            ));
        }
        allowed.insert(name.to_string());
    }
    tools.retain(|t| allowed.contains(&t.name));
    match mode {
        "required" if tools.is_empty() => Err(ApiError::invalid(
            &a.name("mode"),
            "'required' needs at least one allowed tool",
        )),
        "required" => Ok(ToolChoice::Required),
        _ => Ok(ToolChoice::Auto),
    }
}

//! The minijinja environment a chat template renders in, configured as Hugging Face
//! transformers configures jinja2: trim/lstrip blocks, loop controls, Python string,
//! dict and list methods (minijinja-contrib's pycompat), and the shims measured
//! against real templates where minijinja's builtins differ from jinja2's: `tojson`
//! as Python's `json.dumps`, `indent` with jinja2's quirks, `none` not iterable, and
//! `{% generation %}` tags stripped. `raise_exception` and `strftime_now` are the
//! globals transformers registers. One addition follows llama.cpp instead, where
//! transformers' sandbox cannot render a template at all: lists in a `namespace`
//! change in place (Kimi K2). `super` probes and renders with it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use minijinja::value::{Enumerator, Kwargs, Object, ObjectRepr, Value as JinjaValue};
use minijinja::{Environment, Error, ErrorKind, State};
use serde_json::Value;

/// The name the one template is registered under.
pub(super) const TEMPLATE_NAME: &str = "chat";

/// An environment holding `source` as the one template, configured as transformers
/// configures jinja2.
pub(super) fn jinja_environment(source: &str) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()?;
    env.set_syntax(syntax);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("tojson", tojson);
    env.add_filter("indent", indent);
    env.add_test("iterable", is_iterable);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_function("namespace", namespace);
    env.add_template_owned(TEMPLATE_NAME, strip_generation_tags(source))?;
    Ok(env)
}

/// Removes `{% generation %}` / `{% endgeneration %}` (with any whitespace control).
pub fn strip_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let Some(len) = rest[start..].find("%}") else {
            break;
        };
        let tag = &rest[start..start + len + 2];
        let word = tag
            .trim_start_matches("{%")
            .trim_end_matches("%}")
            .trim_matches(['-', '+', ' ', '\t', '\n']);
        out.push_str(&rest[..start]);
        if word != "generation" && word != "endgeneration" {
            out.push_str(tag);
        }
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}

/// jinja2's `indent(width=4, first=False, blank=False)`, quirks included: it works on
/// the text plus a newline split as Python's `splitlines` splits, so a trailing newline
/// survives (minijinja's drops it; Command R+ indents `'{\n'`). `width` may be text.
fn indent(
    value: String,
    width: Option<JinjaValue>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: Kwargs,
) -> Result<String, Error> {
    let width = kwargs.get::<Option<JinjaValue>>("width")?.or(width);
    let first = kwargs.get::<Option<bool>>("first")?.or(first);
    let blank = kwargs.get::<Option<bool>>("blank")?.or(blank);
    kwargs.assert_all_used()?;
    let indention = match width.as_ref().map(|w| (w.as_str(), w)) {
        Some((Some(text), _)) => text.to_string(),
        Some((None, w)) => " ".repeat(usize::try_from(w.clone())?),
        None => " ".repeat(4),
    };
    // The text ends with the added newline, so there is a first line.
    let text = format!("{value}\n");
    let lines = python_splitlines(&text);
    let mut out = if blank.unwrap_or(false) {
        lines.join(&format!("\n{indention}"))
    } else {
        let indented = lines[1..].iter().map(|line| match line.is_empty() {
            true => String::new(),
            false => format!("{indention}{line}"),
        });
        std::iter::once(lines[0].to_string())
            .chain(indented)
            .collect::<Vec<_>>()
            .join("\n")
    };
    if first.unwrap_or(false) {
        out.insert_str(0, &indention);
    }
    Ok(out)
}

/// Python's `str.splitlines()`: every line break Python knows, `\r\n` as one, no
/// empty last line after a final break.
fn python_splitlines(text: &str) -> Vec<&str> {
    const BREAKS: &[char] = &[
        '\n', '\r', '\u{b}', '\u{c}', '\u{1c}', '\u{1d}', '\u{1e}', '\u{85}', '\u{2028}',
        '\u{2029}',
    ];
    let mut lines = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(BREAKS) {
        lines.push(&rest[..at]);
        let width = if rest[at..].starts_with("\r\n") {
            2
        } else {
            rest[at..].chars().next().map_or(1, char::len_utf8)
        };
        rest = &rest[at + width..];
    }
    if !rest.is_empty() {
        lines.push(rest);
    }
    lines
}

/// Python's `iterable` test: `none` is not iterable there, although minijinja iterates
/// it as empty (and its own test says yes). Qwen3-Coder's and Nemotron's templates ask
/// `tools is iterable and tools | length > 0`, which then failed on `none | length`
/// whenever no tools were offered. Undefined stays iterable, as in jinja2.
fn is_iterable(value: &JinjaValue) -> bool {
    !value.is_none() && value.try_iter().is_ok()
}

/// minijinja's `namespace`, with each list in it one that `append`, `pop` and
/// `extend` change in place: Kimi K2 queues its tool-call ids that way, which
/// llama.cpp's engine allows (transformers' immutable sandbox refuses it).
fn namespace(defaults: Option<minijinja::value::ValueOrKwargs>) -> Result<JinjaValue, Error> {
    let Some(defaults) = defaults.map(minijinja::value::ValueOrKwargs::into_value) else {
        return minijinja::functions::namespace(None);
    };
    let Some(pairs) = defaults.as_object().and_then(|o| o.try_iter_pairs()) else {
        return minijinja::functions::namespace(Some(defaults.into()));
    };
    let mutable = |value: JinjaValue| -> Result<JinjaValue, Error> {
        if value.kind() != minijinja::value::ValueKind::Seq {
            return Ok(value);
        }
        let items = value.try_iter()?.collect();
        Ok(JinjaValue::from_object(MutableList(Mutex::new(items))))
    };
    let pairs: Result<BTreeMap<_, _>, Error> = pairs.map(|(k, v)| Ok((k, mutable(v)?))).collect();
    let defaults = JinjaValue::from(pairs?);
    minijinja::functions::namespace(Some(defaults.into()))
}

/// A list that template code may change in place (see [`namespace`]).
#[derive(Debug)]
struct MutableList(Mutex<Vec<JinjaValue>>);

impl MutableList {
    fn items(&self) -> std::sync::MutexGuard<'_, Vec<JinjaValue>> {
        crate::util::sync::lock(&self.0)
    }
}

impl Object for MutableList {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }

    fn get_value(self: &Arc<Self>, key: &JinjaValue) -> Option<JinjaValue> {
        let items = self.items();
        let index = i64::try_from(key.clone()).ok()?;
        let index = if index < 0 {
            items.len() as i64 + index
        } else {
            index
        };
        items.get(usize::try_from(index).ok()?).cloned()
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(self.items().clone())
    }

    fn call_method(
        self: &Arc<Self>,
        _state: &mut State<'_, '_>,
        method: &str,
        args: &[JinjaValue],
    ) -> Result<JinjaValue, Error> {
        // Read before locking: the argument may be this very list.
        let more: Vec<JinjaValue> = match (method, args) {
            ("extend", [more]) => more.try_iter()?.collect(),
            _ => Vec::new(),
        };
        let mut items = self.items();
        match (method, args) {
            ("append", [item]) => items.push(item.clone()),
            ("extend", [_]) => items.extend(more),
            ("pop", []) => return items.pop().ok_or_else(pop_error),
            ("pop", [index]) => {
                let index = i64::try_from(index.clone())?;
                let len = items.len() as i64;
                let at = if index < 0 { len + index } else { index };
                if !(0..len).contains(&at) {
                    return Err(pop_error());
                }
                return Ok(items.remove(at as usize));
            }
            _ => return Err(Error::from(ErrorKind::UnknownMethod)),
        }
        Ok(JinjaValue::from(()))
    }
}

fn pop_error() -> Error {
    Error::new(ErrorKind::InvalidOperation, "pop index out of range")
}

fn raise_exception(message: String) -> Result<JinjaValue, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// transformers passes the current local time; shepherd formats UTC with the one
/// strftime subset of `util::time`.
pub(super) fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    crate::util::time::strftime(&format, i64::try_from(secs).unwrap_or(i64::MAX))
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=indent)`: `", "` and `": "`
/// separators (`","` between items when indenting), no HTML escaping. `ensure_ascii`,
/// `sort_keys` and `separators` are accepted and ignored, as the measured templates need.
fn tojson(value: JinjaValue, kwargs: Kwargs) -> Result<JinjaValue, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    for ignored in ["ensure_ascii", "sort_keys", "separators"] {
        let _: Option<JinjaValue> = kwargs.get(ignored)?;
    }
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let mut out = String::new();
    write_python_json(&json, indent, 0, &mut out);
    Ok(JinjaValue::from_safe_string(out))
}

pub(super) fn write_python_json(
    value: &Value,
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
) {
    match value {
        Value::Array(items) if !items.is_empty() => {
            let parts = items.iter().map(|v| {
                let mut s = String::new();
                write_python_json(v, indent, depth + 1, &mut s);
                s
            });
            write_container(('[', ']'), parts.collect(), indent, depth, out);
        }
        Value::Object(map) if !map.is_empty() => {
            let parts = map.iter().map(|(k, v)| {
                let mut s = Value::String(k.clone()).to_string();
                s.push_str(": ");
                write_python_json(v, indent, depth + 1, &mut s);
                s
            });
            write_container(('{', '}'), parts.collect(), indent, depth, out);
        }
        other => out.push_str(&other.to_string()),
    }
}

fn write_container(
    brackets: (char, char),
    parts: Vec<String>,
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
) {
    out.push(brackets.0);
    match indent {
        None => out.push_str(&parts.join(", ")),
        Some(width) => {
            let inner = " ".repeat(width * (depth + 1));
            let sep = format!(",\n{inner}");
            out.push('\n');
            out.push_str(&inner);
            out.push_str(&parts.join(&sep));
            out.push('\n');
            out.push_str(&" ".repeat(width * depth));
        }
    }
    out.push(brackets.1);
}

//! The checks that look at several subschemas together: `allOf` merged into
//! one node, and `$ref` cycles that llama.cpp's grammar engine would reject.

use std::collections::HashSet;

use serde_json::Value;

use super::error::{invalid, unsupported, Mode, SchemaError};
use super::node::{Document, Node, Object, Property};

/// One `allOf` part: a subschema, or an alternative of an `anyOf` in it.
pub(super) struct Part {
    pub node: Node,
    /// From an `anyOf`: its properties are optional.
    pub optional: bool,
    pub index: usize,
}

/// The `allOf` parts as one node: all objects (their properties merged, as
/// llama.cpp does) or all enums (their common values).
pub(super) fn merge(parts: Vec<Part>, path: &str) -> Result<Node, SchemaError> {
    let parts: Vec<Part> = parts
        .into_iter()
        .filter(|p| !matches!(p.node, Node::Any))
        .collect();
    if parts.is_empty() {
        return Ok(Node::Any);
    }
    if parts
        .iter()
        .all(|p| matches!(p.node, Node::Enum(_) | Node::Const(_)))
    {
        return common_values(&parts, path);
    }
    if parts.iter().all(|p| matches!(p.node, Node::Object(_))) {
        return merge_objects(&parts, path);
    }
    unsupported(
        "allOf",
        path,
        "only objects, or only enums, can be combined",
    )
}

fn common_values(parts: &[Part], path: &str) -> Result<Node, SchemaError> {
    let values = |part: &Part| -> Vec<Value> {
        match &part.node {
            Node::Enum(values) => values.clone(),
            Node::Const(value) => vec![value.clone()],
            _ => Vec::new(),
        }
    };
    if parts.iter().any(|p| p.optional) {
        return unsupported("allOf", path, "an anyOf of enums inside allOf");
    }
    let sets: Vec<Vec<Value>> = parts.iter().map(values).collect();
    let mut common: Vec<Value> = Vec::new();
    for value in sets.first().into_iter().flatten() {
        if !common.contains(value) && sets.iter().all(|set| set.contains(value)) {
            common.push(value.clone());
        }
    }
    if common.is_empty() {
        return invalid("allOf", path, "the enums have no value in common");
    }
    // llama.cpp lists the common values in the order of their JSON text.
    common.sort_by_key(Value::to_string);
    Ok(Node::Enum(common))
}

fn merge_objects(parts: &[Part], path: &str) -> Result<Node, SchemaError> {
    let mut properties: Vec<Property> = Vec::new();
    let mut names = HashSet::new();
    for part in parts {
        let Node::Object(object) = &part.node else {
            continue;
        };
        let at = format!("{path}/allOf/{}", part.index);
        if part.optional {
            if let Some(required) = object.properties.iter().find(|p| p.required) {
                let why = format!(
                    "an anyOf alternative inside allOf requires '{}'",
                    required.name
                );
                return unsupported("allOf", &at, why);
            }
            if object.closed {
                return unsupported(
                    "allOf",
                    &at,
                    "an anyOf alternative inside allOf restricts additionalProperties",
                );
            }
        }
        for property in &object.properties {
            if !names.insert(property.name.as_str()) {
                let why = format!(
                    "property '{}' is defined by more than one subschema",
                    property.name
                );
                return unsupported("allOf", path, why);
            }
            // As in llama.cpp: every property of a direct part is generated.
            let required = !part.optional;
            properties.push(Property {
                required,
                ..property.clone()
            });
        }
    }
    for part in parts {
        let Node::Object(object) = &part.node else {
            continue;
        };
        let own = |name: &str| object.properties.iter().any(|p| p.name == name);
        if let Some(extra) = properties.iter().find(|p| object.closed && !own(&p.name)) {
            let why = format!(
                "its additionalProperties excludes '{}' that another subschema adds",
                extra.name
            );
            return unsupported("allOf", &format!("{path}/allOf/{}", part.index), why);
        }
    }
    Ok(Node::Object(Object {
        properties,
        additional: None,
        closed: false,
    }))
}

/// Refuses (or, leniently, widens to any value) the `$ref`s that can reach
/// themselves before generating a character: llama.cpp's grammar engine
/// rejects left recursion.
pub(super) fn check_left_recursion(doc: &mut Document, mode: Mode) -> Result<(), SchemaError> {
    let edges: Vec<Vec<usize>> = doc.refs.iter().map(|t| leading_refs(&t.node)).collect();
    // Remove targets that lead nowhere recursive, sinks first; what stays is on
    // (or leads into) a cycle.
    let mut pending: Vec<usize> = edges.iter().map(Vec::len).collect();
    let mut callers: Vec<Vec<usize>> = vec![Vec::new(); edges.len()];
    for (from, targets) in edges.iter().enumerate() {
        for &to in targets {
            if let Some(list) = callers.get_mut(to) {
                list.push(from);
            }
        }
    }
    let mut sinks: Vec<usize> = (0..edges.len()).filter(|&i| pending[i] == 0).collect();
    while let Some(done) = sinks.pop() {
        for &caller in &callers[done] {
            pending[caller] -= 1;
            if pending[caller] == 0 {
                sinks.push(caller);
            }
        }
    }
    let Some(first) = (0..edges.len()).find(|&i| pending[i] > 0) else {
        return Ok(());
    };
    if mode == Mode::Strict {
        // Walk inside the remaining set until the walk is surely on the cycle.
        let mut at = first;
        for _ in 0..edges.len() {
            at = edges[at]
                .iter()
                .copied()
                .find(|&next| pending[next] > 0)
                .unwrap_or(at);
        }
        let path = doc.refs[at].pointer.trim_start_matches('#').to_string();
        let why = "it reaches itself before any character is generated (left recursion)";
        return unsupported("$ref", &path, why);
    }
    for (target, left) in doc.refs.iter_mut().zip(pending) {
        if left > 0 {
            target.node = Node::Any;
        }
    }
    Ok(())
}

/// The `$ref`s a node may start with, before it generates a character.
fn leading_refs(node: &Node) -> Vec<usize> {
    match node {
        Node::Ref(id) => vec![*id],
        Node::AnyOf(alternatives) => alternatives.iter().flat_map(leading_refs).collect(),
        _ => Vec::new(),
    }
}

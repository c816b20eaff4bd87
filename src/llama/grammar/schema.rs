//! JSON Schema (a `serde_json::Value`) to typed [`Node`]s: the subset that
//! llama.cpp's converter understands, with every keyword of every subschema
//! accounted for.
//!
//! [`parse`] mirrors llama.cpp's `common_chat_schema_from_json` (which keyword
//! wins where several could apply), and adds what llama.cpp leaves out: a keyword
//! that the chosen node does not honour is an error, unless it is an annotation
//! or cannot apply to the values the node generates (`minimum` beside
//! `"type": "string"`). In [`Mode::Lenient`] such a subschema becomes
//! [`Node::Any`] instead. `super::emit` turns the nodes into GBNF.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::combine::{check_left_recursion, merge, Part};
pub(super) use super::error::Mode;
use super::error::{invalid, unsupported, SchemaError, SchemaErrorKind};
use super::keywords::{declared_types, is_annotation, keyword_types, Types};
use super::node::{Document, Format, Node, Object, Property, RefTarget, StringNode};
use super::pattern::{self, PatternError};

mod values;

use values::{check_order, count, escape_pointer, integer, required_names, resolve_pointer, Used};

/// How deep subschemas (`$ref` targets included) may nest.
const MAX_DEPTH: usize = 64;
/// The longest property name beside other members: the grammar of their keys
/// nests one group per character of each name, and llama.cpp parses groups
/// recursively.
const MAX_NAME_CHARS: usize = 256;

/// Parses `schema`; in [`Mode::Lenient`] it never fails.
pub(super) fn parse(schema: &Value, mode: Mode) -> Result<Document, SchemaError> {
    let mut parser = Parser {
        root: schema,
        mode,
        refs: Vec::new(),
        ref_ids: HashMap::new(),
        depth: 0,
    };
    let root = parser.node(schema, "", "")?;
    let refs = parser
        .refs
        .into_iter()
        .map(|(pointer, node)| RefTarget {
            pointer,
            node: node.unwrap_or(Node::Any),
        })
        .collect();
    let mut doc = Document { root, refs };
    check_left_recursion(&mut doc, mode)?;
    Ok(doc)
}

struct Parser<'a> {
    root: &'a Value,
    mode: Mode,
    /// `$ref` targets by id: the reference as written, and the node (`None`
    /// while it is being built).
    refs: Vec<(String, Option<Node>)>,
    ref_ids: HashMap<String, usize>,
    depth: usize,
}

impl<'a> Parser<'a> {
    /// The node for the subschema `schema` at `path`, reached through `via`.
    fn node(&mut self, schema: &'a Value, path: &str, via: &str) -> Result<Node, SchemaError> {
        let result = if self.depth >= MAX_DEPTH {
            unsupported(
                via,
                path,
                format!("subschemas nest more than {MAX_DEPTH} deep"),
            )
        } else {
            self.depth += 1;
            let node = self.checked_node(schema, path, via);
            self.depth -= 1;
            node
        };
        match result {
            Err(_) if self.mode == Mode::Lenient => Ok(Node::Any),
            result => result,
        }
    }

    fn checked_node(
        &mut self,
        schema: &'a Value,
        path: &str,
        via: &str,
    ) -> Result<Node, SchemaError> {
        let Some(object) = schema.as_object() else {
            let why = "a subschema must be a JSON object (boolean schemas are not supported)";
            return unsupported(via, path, why);
        };
        let mut used = Used::default();
        let node = self.dispatch(object, path, &mut used)?;
        if !used.all {
            self.check_leftovers(object, path, &node, &used)?;
        }
        Ok(node)
    }

    /// Which node a schema is, in llama.cpp's order of precedence.
    fn dispatch(
        &mut self,
        object: &'a Map<String, Value>,
        path: &str,
        used: &mut Used,
    ) -> Result<Node, SchemaError> {
        if let Some(target) = object.get("$ref") {
            used.add("$ref");
            return self.reference(target, path);
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(alternatives) = object.get(key) {
                used.add(key);
                return Ok(Node::AnyOf(self.alternatives(alternatives, path, key)?));
            }
        }
        // Before a `type` array: its alternatives would each be this same enum.
        if let Some(value) = object.get("const") {
            used.add("const");
            return Ok(Node::Const(value.clone()));
        }
        if let Some(values) = object.get("enum") {
            used.add("enum");
            return match values.as_array() {
                Some(values) if !values.is_empty() => Ok(Node::Enum(values.clone())),
                _ => invalid("enum", path, "must be a non-empty array"),
            };
        }
        match object.get("type") {
            Some(Value::Array(types)) => {
                used.all = true;
                self.type_union(object, types, path)
            }
            Some(Value::String(name)) => self.typed(object, Some(name.as_str()), path, used),
            None => self.typed(object, None, path, used),
            Some(_) => invalid("type", path, "must be a string or an array of strings"),
        }
    }

    /// `{"type": [a, b], ...}` as `{"anyOf": [{"type": a, ...}, {"type": b, ...}]}`.
    fn type_union(
        &mut self,
        object: &Map<String, Value>,
        types: &[Value],
        path: &str,
    ) -> Result<Node, SchemaError> {
        if types.is_empty() {
            return invalid("type", path, "must not be an empty array");
        }
        let mut alternatives = Vec::new();
        // A repeated type would only repeat its alternative (and, nested, its work).
        let mut seen: Vec<&Value> = Vec::new();
        for name in types {
            if seen.contains(&name) {
                continue;
            }
            seen.push(name);
            let mut alternative = object.clone();
            alternative.insert("type".to_string(), name.clone());
            // The alternative is owned here, not borrowed from the document:
            // parse it with a parser of its own that shares the `$ref` table.
            let alternative = Value::Object(alternative);
            alternatives.push(self.owned_node(&alternative, path)?);
        }
        Ok(Node::AnyOf(alternatives))
    }

    /// [`Parser::node`] for a schema that does not live in the document.
    fn owned_node(&mut self, schema: &Value, path: &str) -> Result<Node, SchemaError> {
        let mut parser = Parser {
            root: self.root,
            mode: self.mode,
            refs: std::mem::take(&mut self.refs),
            ref_ids: std::mem::take(&mut self.ref_ids),
            depth: self.depth,
        };
        let node = parser.node(schema, path, "type");
        self.refs = parser.refs;
        self.ref_ids = parser.ref_ids;
        node
    }

    fn typed(
        &mut self,
        object: &'a Map<String, Value>,
        type_name: Option<&str>,
        path: &str,
        used: &mut Used,
    ) -> Result<Node, SchemaError> {
        let has_properties = object.contains_key("properties")
            || object
                .get("additionalProperties")
                .is_some_and(|extra| extra != &Value::Bool(true));
        let all_of = object.get("allOf");
        match type_name {
            None => self.untyped(object, has_properties, path, used),
            Some("object") if !has_properties && all_of.is_some() => {
                self.typed_all_of(object, Node::Object(any_object()), path, used)
            }
            Some("string") if all_of.is_some() => {
                let plain = Node::String(StringNode::Plain { min: 0, max: None });
                self.typed_all_of(object, plain, path, used)
            }
            Some(name) => {
                used.add("type");
                match name {
                    "object" => self.object(object, path, used),
                    "string" => self.string(object, path, used),
                    "array" => self.array(object, path, used),
                    "integer" => integer(object, path, used),
                    "number" => Ok(Node::Number),
                    "boolean" => Ok(Node::Boolean),
                    "null" => Ok(Node::Null),
                    other => invalid("type", path, format!("unknown type '{other}'")),
                }
            }
        }
    }

    /// Without a type, the structural keywords decide (as in llama.cpp).
    fn untyped(
        &mut self,
        object: &'a Map<String, Value>,
        has_properties: bool,
        path: &str,
        used: &mut Used,
    ) -> Result<Node, SchemaError> {
        if has_properties {
            return self.object(object, path, used);
        }
        if let Some(all_of) = object.get("allOf") {
            used.add("allOf");
            return self.all_of(all_of, path);
        }
        if object.contains_key("items") || object.contains_key("prefixItems") {
            return self.array(object, path, used);
        }
        let known_format = object
            .get("format")
            .and_then(Value::as_str)
            .is_some_and(|name| Format::parse(name).is_some());
        if known_format
            || ["pattern", "minLength", "maxLength"]
                .iter()
                .any(|k| object.contains_key(*k))
        {
            return self.string(object, path, used);
        }
        Ok(Node::Any)
    }

    /// `allOf` beside `"type": "object"` or `"string"`; an `allOf` of nothing
    /// but annotations leaves the type's own node (`plain`).
    fn typed_all_of(
        &mut self,
        object: &'a Map<String, Value>,
        plain: Node,
        path: &str,
        used: &mut Used,
    ) -> Result<Node, SchemaError> {
        used.add("allOf");
        let Some(all_of) = object.get("allOf") else {
            return Ok(plain);
        };
        match self.all_of(all_of, path)? {
            Node::Any => {
                used.add("type");
                Ok(plain)
            }
            // The leftover check compares the declared type with the result.
            node => Ok(node),
        }
    }

    fn reference(&mut self, target: &Value, path: &str) -> Result<Node, SchemaError> {
        let Some(text) = target.as_str() else {
            return invalid("$ref", path, "must be a string");
        };
        let Some(pointer) = text.strip_prefix('#').filter(|p| p.starts_with('/')) else {
            let why = format!("'{text}' is not a reference into this schema (#/...)");
            return unsupported("$ref", path, why);
        };
        if let Some(&id) = self.ref_ids.get(text) {
            return Ok(Node::Ref(id));
        }
        let root: &'a Value = self.root;
        let Some(value) = resolve_pointer(root, pointer) else {
            return invalid("$ref", path, format!("'{text}' points at nothing"));
        };
        let id = self.refs.len();
        self.refs.push((text.to_string(), None));
        self.ref_ids.insert(text.to_string(), id);
        let node = self.node(value, pointer, "$ref")?;
        self.refs[id].1 = Some(node);
        Ok(Node::Ref(id))
    }

    fn alternatives(
        &mut self,
        value: &'a Value,
        path: &str,
        key: &'static str,
    ) -> Result<Vec<Node>, SchemaError> {
        let Some(schemas) = value.as_array().filter(|a| !a.is_empty()) else {
            return invalid(key, path, "must be a non-empty array of schemas");
        };
        let mut nodes = Vec::new();
        for (i, schema) in schemas.iter().enumerate() {
            nodes.push(self.node(schema, &format!("{path}/{key}/{i}"), key)?);
        }
        Ok(nodes)
    }

    fn object(
        &mut self,
        object: &'a Map<String, Value>,
        path: &str,
        used: &mut Used,
    ) -> Result<Node, SchemaError> {
        used.add("properties");
        used.add("required");
        used.add("additionalProperties");
        let required = required_names(object, path)?;
        let required_set: HashSet<&str> = required.iter().copied().collect();
        let mut properties = Vec::new();
        if let Some(value) = object.get("properties") {
            let Some(members) = value.as_object() else {
                return invalid("properties", path, "must be an object");
            };
            for (name, schema) in members {
                let sub_path = format!("{path}/properties/{}", escape_pointer(name));
                let node = self.node(schema, &sub_path, "properties")?;
                let required = required_set.contains(name.as_str());
                properties.push(Property {
                    name: name.clone(),
                    node,
                    required,
                });
            }
        }
        let names: HashSet<&str> = properties.iter().map(|p| p.name.as_str()).collect();
        if let Some(missing) = required.iter().find(|r| !names.contains(*r)) {
            let why = format!("'{missing}' is required but not among the properties");
            return unsupported("required", path, why);
        }
        let (additional, closed) = match object.get("additionalProperties") {
            None if object.contains_key("properties") => (None, false),
            None | Some(Value::Bool(true)) => (Some(Box::new(Node::Any)), false),
            Some(Value::Bool(false)) => (None, true),
            Some(schema @ Value::Object(_)) => {
                let sub_path = format!("{path}/additionalProperties");
                let node = self.node(schema, &sub_path, "additionalProperties")?;
                (Some(Box::new(node)), true)
            }
            Some(_) => {
                return invalid(
                    "additionalProperties",
                    path,
                    "must be a boolean or a schema",
                )
            }
        };
        let long_name = properties
            .iter()
            .find(|p| p.name.chars().count() > MAX_NAME_CHARS);
        if let (Some(_), Some(long)) = (&additional, long_name) {
            let why = format!(
                "a property name of {} characters beside other members (at most {MAX_NAME_CHARS})",
                long.name.chars().count()
            );
            return unsupported("properties", path, why);
        }
        Ok(Node::Object(Object {
            properties,
            additional,
            closed,
        }))
    }

    fn array(
        &mut self,
        object: &'a Map<String, Value>,
        path: &str,
        used: &mut Used,
    ) -> Result<Node, SchemaError> {
        let min = count(object, "minItems", path)?;
        let max = count(object, "maxItems", path)?;
        check_order(min, max, "minItems", path)?;
        // `items` wins over `prefixItems`; either, as an array, is a tuple.
        let key = if object.contains_key("items") {
            "items"
        } else {
            "prefixItems"
        };
        let items = match object.get(key) {
            Some(Value::Array(schemas)) => {
                used.add(key);
                return self.tuple(schemas, (min, max), path, key, used);
            }
            Some(schema) => {
                used.add(key);
                self.node(schema, &format!("{path}/{key}"), key)?
            }
            None => Node::Any,
        };
        used.add("minItems");
        used.add("maxItems");
        Ok(Node::Array {
            items: Box::new(items),
            min: min.unwrap_or(0),
            max,
        })
    }

    /// A tuple generates all its items: `minItems` and `maxItems` hold if they
    /// admit that length.
    fn tuple(
        &mut self,
        schemas: &'a [Value],
        (min, max): (Option<u32>, Option<u32>),
        path: &str,
        key: &'static str,
        used: &mut Used,
    ) -> Result<Node, SchemaError> {
        let mut items = Vec::new();
        for (i, schema) in schemas.iter().enumerate() {
            items.push(self.node(schema, &format!("{path}/{key}/{i}"), key)?);
        }
        let n = u32::try_from(items.len()).unwrap_or(u32::MAX);
        if min.is_some_and(|min| min > n) {
            return unsupported(
                "minItems",
                path,
                format!("a tuple of {n} items has exactly {n}"),
            );
        }
        if max.is_some_and(|max| max < n) {
            return unsupported(
                "maxItems",
                path,
                format!("a tuple of {n} items has exactly {n}"),
            );
        }
        used.add("minItems");
        used.add("maxItems");
        Ok(Node::Tuple(items))
    }

    fn string(
        &mut self,
        object: &Map<String, Value>,
        path: &str,
        used: &mut Used,
    ) -> Result<Node, SchemaError> {
        let min = count(object, "minLength", path)?;
        let max = count(object, "maxLength", path)?;
        check_order(min, max, "minLength", path)?;
        // llama.cpp's precedence: a pattern, else a format, else the lengths.
        if let Some(value) = object.get("pattern") {
            used.add("pattern");
            let Some(text) = value.as_str() else {
                return invalid("pattern", path, "must be a string");
            };
            return match pattern::parse(text) {
                Ok(pattern) => Ok(Node::String(StringNode::Pattern(pattern))),
                Err(PatternError::Unsupported(why)) => unsupported("pattern", path, why),
                Err(PatternError::Invalid(why)) => invalid("pattern", path, why),
            };
        }
        if let Some(value) = object.get("format") {
            let Some(name) = value.as_str() else {
                return invalid("format", path, "must be a string");
            };
            let Some(format) = Format::parse(name) else {
                let why = format!("format '{name}' (date, time, date-time and uuid are supported)");
                return unsupported("format", path, why);
            };
            used.add("format");
            return Ok(Node::String(StringNode::Format(format)));
        }
        used.add("minLength");
        used.add("maxLength");
        let min = min.unwrap_or(0);
        Ok(Node::String(StringNode::Plain { min, max }))
    }

    fn all_of(&mut self, value: &'a Value, path: &str) -> Result<Node, SchemaError> {
        let Some(schemas) = value.as_array().filter(|a| !a.is_empty()) else {
            return invalid("allOf", path, "must be a non-empty array of schemas");
        };
        let mut parts = Vec::new();
        for (i, schema) in schemas.iter().enumerate() {
            let node = self.node(schema, &format!("{path}/allOf/{i}"), "allOf")?;
            match self.look_through(&node, path)? {
                Node::AnyOf(alternatives) => {
                    for alternative in alternatives {
                        let node = self.look_through(alternative, path)?.clone();
                        parts.push(Part {
                            node,
                            optional: true,
                            index: i,
                        });
                    }
                }
                other => parts.push(Part {
                    node: other.clone(),
                    optional: false,
                    index: i,
                }),
            }
        }
        merge(parts, path)
    }

    /// The node a `$ref` stands for (llama.cpp's `allOf` looks through them).
    fn look_through<'n>(&'n self, mut node: &'n Node, path: &str) -> Result<&'n Node, SchemaError> {
        for _ in 0..=self.refs.len() {
            let Node::Ref(id) = node else {
                return Ok(node);
            };
            match self.refs.get(*id).and_then(|(_, target)| target.as_ref()) {
                Some(target) => node = target,
                None => break,
            }
        }
        unsupported("allOf", path, "a $ref that refers back to this allOf")
    }

    /// The keywords of `object` that `node` does not honour must not matter.
    fn check_leftovers(
        &self,
        object: &Map<String, Value>,
        path: &str,
        node: &Node,
        used: &Used,
    ) -> Result<(), SchemaError> {
        let types = self.types(node, 0);
        for (key, value) in object {
            if used.has(key) || is_annotation(key) {
                continue;
            }
            if key == "type" {
                if declared_types(value, path)?.covers(types) {
                    continue;
                }
                return unsupported(
                    "type",
                    path,
                    "the other keywords allow values of other types",
                );
            }
            // A keyword for other types has nothing to check on these values.
            if keyword_types(key).is_some_and(|applies| !applies.intersects(types)) {
                continue;
            }
            return Err(SchemaError::new(key, path, SchemaErrorKind::Unsupported));
        }
        Ok(())
    }

    /// The types `node` can generate (all of them where a `$ref` is unknown yet).
    fn types(&self, node: &Node, depth: usize) -> Types {
        match node {
            Node::Any => Types::ALL,
            Node::Ref(_) if depth > MAX_DEPTH => Types::ALL,
            Node::Ref(id) => match self.refs.get(*id).and_then(|(_, target)| target.as_ref()) {
                Some(target) => self.types(target, depth + 1),
                None => Types::ALL,
            },
            Node::AnyOf(alternatives) => alternatives
                .iter()
                .fold(Types::NONE, |types, n| types.or(self.types(n, depth + 1))),
            Node::Const(value) => Types::of_value(value),
            Node::Enum(values) => values
                .iter()
                .fold(Types::NONE, |types, v| types.or(Types::of_value(v))),
            Node::Null => Types::NULL,
            Node::Boolean => Types::BOOLEAN,
            Node::Number => Types::NUMBER.or(Types::INTEGER),
            Node::Integer { .. } => Types::INTEGER,
            Node::String(_) => Types::STRING,
            Node::Array { .. } | Node::Tuple(_) => Types::ARRAY,
            Node::Object(_) => Types::OBJECT,
        }
    }
}

fn any_object() -> Object {
    Object {
        properties: Vec::new(),
        additional: Some(Box::new(Node::Any)),
        closed: false,
    }
}

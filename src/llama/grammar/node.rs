//! The typed schema: what [`super::schema::parse`] makes of a JSON Schema and
//! [`super::emit`] writes as rules. Every node is something the grammar
//! generates exactly; what a schema asks beyond that was refused or widened
//! before a node was made.

use serde_json::Value;

use super::pattern::Pattern;

/// A parsed schema: its root and the targets of its `$ref`s.
#[derive(Debug)]
pub(super) struct Document {
    pub root: Node,
    pub refs: Vec<RefTarget>,
}

#[derive(Debug)]
pub(super) struct RefTarget {
    /// The reference as written (`#/$defs/node`).
    pub pointer: String,
    pub node: Node,
}

/// One subschema, as the grammar will generate it.
#[derive(Debug, Clone)]
pub(super) enum Node {
    Any,
    /// Index into [`Document::refs`].
    Ref(usize),
    AnyOf(Vec<Node>),
    Const(Value),
    Enum(Vec<Value>),
    Null,
    Boolean,
    Number,
    /// Inclusive bounds, exclusive ones folded in.
    Integer {
        min: Option<i64>,
        max: Option<i64>,
    },
    String(StringNode),
    Array {
        items: Box<Node>,
        min: u32,
        max: Option<u32>,
    },
    /// Exactly these items (`prefixItems`, or `items` as an array).
    Tuple(Vec<Node>),
    Object(Object),
}

#[derive(Debug, Clone)]
pub(super) enum StringNode {
    Plain { min: u32, max: Option<u32> },
    Pattern(Pattern),
    Format(Format),
}

/// The `format`s that llama.cpp generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    Date,
    Time,
    DateTime,
    Uuid,
}

impl Format {
    pub(super) fn parse(name: &str) -> Option<Format> {
        match name {
            "date" => Some(Format::Date),
            "time" => Some(Format::Time),
            "date-time" => Some(Format::DateTime),
            "uuid" | "uuid1" | "uuid2" | "uuid3" | "uuid4" | "uuid5" => Some(Format::Uuid),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Object {
    /// In schema order.
    pub properties: Vec<Property>,
    /// The schema of the other members the grammar generates; `None`: none.
    pub additional: Option<Box<Node>>,
    /// `additionalProperties` is `false` or a schema: other members are
    /// restricted (what `allOf` must respect).
    pub closed: bool,
}

#[derive(Debug, Clone)]
pub(super) struct Property {
    pub name: String,
    pub node: Node,
    pub required: bool,
}

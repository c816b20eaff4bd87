//! [`SchemaError`]: why a schema has no grammar, naming the keyword and the
//! JSON pointer of its subschema.

use std::fmt;

/// A schema the converter cannot turn into a grammar that only generates
/// valid instances: the keyword at fault and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    /// The keyword (`multipleOf`, `$ref`, ...); empty for a subschema that is
    /// not an object.
    pub keyword: String,
    /// The JSON pointer of the subschema holding it (`/properties/age`; empty
    /// for the root; a `$ref` target's own pointer inside it).
    pub path: String,
    pub kind: SchemaErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaErrorKind {
    /// A keyword outside the supported subset, or one that the node it stands
    /// in cannot honour (`minLength` beside `pattern`).
    Unsupported,
    /// A supported keyword with a value outside the subset (an unanchored
    /// `pattern`, a remote `$ref`, an unknown `format`, ...).
    UnsupportedValue(String),
    /// A malformed or unsatisfiable schema.
    Invalid(String),
}

impl SchemaError {
    pub(super) fn new(keyword: &str, path: &str, kind: SchemaErrorKind) -> SchemaError {
        SchemaError {
            keyword: keyword.to_string(),
            path: path.to_string(),
            kind,
        }
    }
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.path.is_empty() {
            "the schema root"
        } else {
            &self.path
        };
        let keyword = &self.keyword;
        match &self.kind {
            SchemaErrorKind::Unsupported => {
                write!(f, "unsupported JSON Schema keyword '{keyword}' at {at}")
            }
            SchemaErrorKind::UnsupportedValue(why) if keyword.is_empty() => {
                write!(f, "unsupported JSON Schema at {at}: {why}")
            }
            SchemaErrorKind::UnsupportedValue(why) => {
                write!(
                    f,
                    "unsupported use of JSON Schema keyword '{keyword}' at {at}: {why}"
                )
            }
            SchemaErrorKind::Invalid(why) => {
                write!(f, "invalid JSON Schema keyword '{keyword}' at {at}: {why}")
            }
        }
    }
}

impl std::error::Error for SchemaError {}

pub(super) fn unsupported<T>(
    keyword: &str,
    path: &str,
    why: impl Into<String>,
) -> Result<T, SchemaError> {
    let kind = SchemaErrorKind::UnsupportedValue(why.into());
    Err(SchemaError::new(keyword, path, kind))
}

pub(super) fn invalid<T>(
    keyword: &str,
    path: &str,
    why: impl Into<String>,
) -> Result<T, SchemaError> {
    Err(SchemaError::new(
        keyword,
        path,
        SchemaErrorKind::Invalid(why.into()),
    ))
}

/// What a keyword the converter cannot honour does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// It is a [`SchemaError`] (response formats).
    Strict,
    /// Its subschema accepts any JSON value (tool schemas).
    Lenient,
}

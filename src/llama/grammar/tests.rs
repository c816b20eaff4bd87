//! Tests of the JSON Schema converter: llama.cpp's own expectations (rule for
//! rule, from `tests/test-json-schema-to-grammar.cpp`), llama.cpp's pass/fail
//! strings (`tests/test-grammar-integration.cpp`) run through llama.cpp's real
//! grammar engine on the test model's vocabulary, and the errors.

use serde_json::{json, Value};

use super::emit::{literal, Rules};
use super::error::SchemaErrorKind;
use super::schema::{self, Mode};
use super::*;
use crate::llama::{Model, Sampler, SamplerParams, Token};

/// The rules for `schema` (root named `root`, as llama.cpp names it) against
/// llama.cpp's expected grammar, line by line.
fn check_llama_cpp(schema: &str, expected: &str) {
    let value: Value = serde_json::from_str(schema).unwrap();
    let doc = schema::parse(&value, Mode::Strict).unwrap_or_else(|e| panic!("{e}\n{schema}"));
    let mut rules = Rules::new();
    rules.schema(&doc, "");
    let mut actual: Vec<String> = rules.render_all().lines().map(str::to_string).collect();
    let mut wanted: Vec<String> = expected
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    actual.sort();
    wanted.sort();
    assert_eq!(actual, wanted, "{schema}");
}

/// llama.cpp's converter tests that succeed, with its expected grammars; where
/// this converter writes something else on purpose, the comment says why.
const LLAMA_CPP_GRAMMARS: &[(&str, &str)] = &[
    // min 0
    (
        r##"{ "type": "integer", "minimum": 0 }"##,
        r##"
        root ::= ([0] | [1-9] [0-9]{0,15})
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min 1
    (
        r##"{ "type": "integer", "minimum": 1 }"##,
        r##"
        root ::= ([1-9] [0-9]{0,15})
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min 3
    (
        r##"{ "type": "integer", "minimum": 3 }"##,
        r##"
        root ::= ([1-2] [0-9]{1,15} | [3-9] [0-9]{0,15})
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min 9
    (
        r##"{ "type": "integer", "minimum": 9 }"##,
        r##"
        root ::= ([1-8] [0-9]{1,15} | [9] [0-9]{0,15})
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min 10
    (
        r##"{ "type": "integer", "minimum": 10 }"##,
        r##"
        root ::= ([1] ([0-9]{1,15}) | [2-9] [0-9]{1,15})
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min 25
    (
        r##"{ "type": "integer", "minimum": 25 }"##,
        r##"
        root ::= ([1] [0-9]{2,15} | [2] ([0-4] [0-9]{1,14} | [5-9] [0-9]{0,14}) | [3-9] [0-9]{1,15})
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // max 30
    (
        r##"{ "type": "integer", "maximum": 30 }"##,
        r##"
        root ::= ("-" [1-9] [0-9]{0,15} | [0-9] | ([1-2] [0-9] | [3] "0"))
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min -5
    (
        r##"{ "type": "integer", "minimum": -5 }"##,
        r##"
        root ::= ("-" ([0-5]) | [0] | [1-9] [0-9]{0,15})
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min -123
    (
        r##"{ "type": "integer", "minimum": -123 }"##,
        r##"
        root ::= ("-" ([0-9] | ([1-8] [0-9] | [9] [0-9]) | "1" ([0-1] [0-9] | [2] [0-3])) | [0] | [1-9] [0-9]{0,15})
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // max -5 (differs: no leading zero after the minus)
    (
        r##"{ "type": "integer", "maximum": -5 }"##,
        r##"
        root ::= ("-" ([1-4] [0-9]{1,15} | [5-9] [0-9]{0,15}))
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // max 1
    (
        r##"{ "type": "integer", "maximum": 1 }"##,
        r##"
        root ::= ("-" [1-9] [0-9]{0,15} | [0-1])
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // max 100
    (
        r##"{ "type": "integer", "maximum": 100 }"##,
        r##"
        root ::= ("-" [1-9] [0-9]{0,15} | [0-9] | ([1-8] [0-9] | [9] [0-9]) | "100")
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min 0 max 23
    (
        r##"{ "type": "integer", "minimum": 0, "maximum": 23 }"##,
        r##"
        root ::= ([0-9] | ([1] [0-9] | [2] [0-3]))
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min 15 max 300
    (
        r##"{ "type": "integer", "minimum": 15, "maximum": 300 }"##,
        r##"
        root ::= (([1] ([5-9]) | [2-9] [0-9]) | ([1-2] [0-9]{2} | [3] "00"))
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min 5 max 30
    (
        r##"{ "type": "integer", "minimum": 5, "maximum": 30 }"##,
        r##"
        root ::= ([5-9] | ([1-2] [0-9] | [3] "0"))
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min -123 max 42
    (
        r##"{ "type": "integer", "minimum": -123, "maximum": 42 }"##,
        r##"
        root ::= ("-" ([0-9] | ([1-8] [0-9] | [9] [0-9]) | "1" ([0-1] [0-9] | [2] [0-3])) | [0-9] | ([1-3] [0-9] | [4] [0-2]))
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min -10 max 10
    (
        r##"{ "type": "integer", "minimum": -10, "maximum": 10 }"##,
        r##"
        root ::= ("-" ([0-9] | "10") | [0-9] | "10")
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // empty schema (any value)
    (
        r##"{}"##,
        r##"
        array ::= "[" space ( value ("," space value)* )? space "]"
        boolean ::= ("true" | "false")
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        null ::= "null"
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? space "}"
        root ::= value
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        value ::= object | array | string | number | boolean | null
        "##,
    ),
    // exotic formats
    (
        r##"{ "items": [ { "format": "date" }, { "format": "uuid" }, { "format": "time" }, { "format": "date-time" } ] }"##,
        r##"
        date ::= [0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )
        date-string ::= "\"" date "\""
        date-time ::= date "T" time
        date-time-string ::= "\"" date-time "\""
        root ::= "[" space tuple-0 "," space uuid "," space tuple-2 "," space tuple-3 space "]"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )
        time-string ::= "\"" time "\""
        tuple-0 ::= date-string
        tuple-2 ::= time-string
        tuple-3 ::= date-time-string
        uuid ::= "\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\""
        "##,
    ),
    // string
    (
        r##"{ "type": "string" }"##,
        r##"
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        root ::= "\"" char* "\""
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // string w/ min length 1
    (
        r##"{ "type": "string", "minLength": 1 }"##,
        r##"
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        root ::= "\"" char+ "\""
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // string w/ min length 3
    (
        r##"{ "type": "string", "minLength": 3 }"##,
        r##"
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        root ::= "\"" char{3,} "\""
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // string w/ max length
    (
        r##"{ "type": "string", "maxLength": 3 }"##,
        r##"
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        root ::= "\"" char{0,3} "\""
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // string w/ min & max length
    (
        r##"{ "type": "string", "minLength": 1, "maxLength": 4 }"##,
        r##"
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        root ::= "\"" char{1,4} "\""
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // boolean
    (
        r##"{ "type": "boolean" }"##,
        r##"
        root ::= ("true" | "false")
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // integer
    (
        r##"{ "type": "integer" }"##,
        r##"
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        root ::= ("-"? integral-part)
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // string const
    (
        r##"{ "const": "foo" }"##,
        r##"
        root ::= "\"foo\""
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // non-string const
    (
        r##"{ "const": 123 }"##,
        r##"
        root ::= "123"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // non-string enum
    (
        r##"{ "enum": ["red", "amber", "green", null, 42, ["foo"]] }"##,
        r##"
        root ::= ("\"red\"" | "\"amber\"" | "\"green\"" | "null" | "42" | "[\"foo\"]")
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // string array
    (
        r##"{ "type": "array", "prefixItems": { "type": "string" } }"##,
        r##"
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        root ::= "[" space (string ("," space string)*)? space "]"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        "##,
    ),
    // nullable string array
    (
        r##"{ "type": ["array", "null"], "prefixItems": { "type": "string" } }"##,
        r##"
        alternative-0 ::= "[" space (string ("," space string)*)? space "]"
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        null ::= "null"
        root ::= alternative-0 | null
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        "##,
    ),
    // tuple1
    (
        r##"{ "prefixItems": [{ "type": "string" }] }"##,
        r##"
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        root ::= "[" space string space "]"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        "##,
    ),
    // tuple2
    (
        r##"{ "prefixItems": [{ "type": "string" }, { "type": "number" }] }"##,
        r##"
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        root ::= "[" space string "," space number space "]"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        "##,
    ),
    // array with empty items
    (
        r##"{ "type": "array", "items": {} }"##,
        r##"
        array ::= "[" space ( value ("," space value)* )? space "]"
        boolean ::= ("true" | "false")
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        null ::= "null"
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? space "}"
        root ::= "[" space ( value ("," space value)* )? space "]"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        value ::= object | array | string | number | boolean | null
        "##,
    ),
    // number
    (
        r##"{ "type": "number" }"##,
        r##"
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        root ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // minItems
    (
        r##"{ "items": { "type": "boolean" }, "minItems": 2 }"##,
        r##"
        boolean ::= ("true" | "false")
        root ::= "[" space boolean ("," space boolean)+ space "]"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // maxItems 0
    (
        r##"{ "items": { "type": "boolean" }, "maxItems": 0 }"##,
        r##"
        boolean ::= ("true" | "false")
        root ::= "[" space  space "]"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // maxItems 1
    (
        r##"{ "items": { "type": "boolean" }, "maxItems": 1 }"##,
        r##"
        boolean ::= ("true" | "false")
        root ::= "[" space boolean? space "]"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // maxItems 2
    (
        r##"{ "items": { "type": "boolean" }, "maxItems": 2 }"##,
        r##"
        boolean ::= ("true" | "false")
        root ::= "[" space (boolean ("," space boolean)?)? space "]"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min + maxItems
    (
        r##"{ "items": { "type": ["number", "integer"] }, "minItems": 3, "maxItems": 5 }"##,
        r##"
        decimal-part ::= [0-9]{1,16}
        integer ::= ("-"? integral-part)
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        item ::= number | integer
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        root ::= "[" space item ("," space item){2,4} space "]"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min + max items with min + max values across zero
    (
        r##"{ "items": { "type": "integer", "minimum": -12, "maximum": 207 }, "minItems": 3, "maxItems": 5 }"##,
        r##"
        item ::= ("-" ([0-9] | "1" [0-2]) | [0-9] | ([1-8] [0-9] | [9] [0-9]) | ([1] [0-9]{2} | [2] "0" [0-7]))
        root ::= "[" space item ("," space item){2,4} space "]"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // min + max items with min + max values
    (
        r##"{ "items": { "type": "integer", "minimum": 12, "maximum": 207 }, "minItems": 3, "maxItems": 5 }"##,
        r##"
        item ::= (([1] ([2-9]) | [2-9] [0-9]) | ([1] [0-9]{2} | [2] "0" [0-7]))
        root ::= "[" space item ("," space item){2,4} space "]"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // simple regexp
    (
        r##"{ "type": "string", "pattern": "^abc?d*efg+(hij)?kl$" }"##,
        r##"
        root ::= "\"" ("ab" "c"? "d"* "ef" "g"+ ("hij")? "kl") "\""
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // regexp escapes
    (
        r##"{ "type": "string", "pattern": "^\\[\\]\\{\\}\\(\\)\\|\\+\\*\\?$" }"##,
        r##"
        root ::= "\"" ("[]{}()|+*?") "\""
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // regexp quote (differs: the quote as JSON writes it)
    (
        r##"{ "type": "string", "pattern": "^\"$" }"##,
        r##"
        root ::= "\"" ("\\\"") "\""
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // regexp with top-level alternation
    (
        r##"{ "type": "string", "pattern": "^A|B|C|D$" }"##,
        r##"
        root ::= "\"" ("A" | "B" | "C" | "D") "\""
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // regexp (differs: `.` as JSON text)
    (
        r##"{ "type": "string", "pattern": "^(\\([0-9]{1,3}\\))?[0-9]{3}-[0-9]{4} a{3,5}nd...$" }"##,
        r##"
        dot ::= ([^\x0A\x0D\u2028-\u2029"\\\x00-\x1F] | "\\\"" | "\\\\" | "\\b" | "\\f" | "\\t")
        root ::= "\"" (("(" root-1{1,3} ")")? root-1{3,3} "-" root-1{4,4} " " "a"{3,5} "nd" dot dot dot) "\""
        root-1 ::= [0-9]
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // required props in original order
    (
        r##"{ "type": "object", "properties": { "b": {"type": "string"}, "c": {"type": "string"}, "a": {"type": "string"} }, "required": [ "a", "b", "c" ], "additionalProperties": false, "definitions": {} }"##,
        r##"
        a-kv ::= "\"a\"" space ":" space string
        b-kv ::= "\"b\"" space ":" space string
        c-kv ::= "\"c\"" space ":" space string
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        root ::= "{" space b-kv "," space c-kv "," space a-kv space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        "##,
    ),
    // 1 optional prop
    (
        r##"{ "properties": { "a": { "type": "string" } }, "additionalProperties": false }"##,
        r##"
        a-kv ::= "\"a\"" space ":" space string
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        root ::= "{" space  (a-kv )? space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        "##,
    ),
    // N optional props
    (
        r##"{ "properties": { "a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"} }, "additionalProperties": false }"##,
        r##"
        a-kv ::= "\"a\"" space ":" space string
        a-rest ::= ( "," space b-kv )? b-rest
        b-kv ::= "\"b\"" space ":" space string
        b-rest ::= ( "," space c-kv )?
        c-kv ::= "\"c\"" space ":" space string
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        root ::= "{" space  (a-kv a-rest | b-kv b-rest | c-kv )? space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        "##,
    ),
    // required + optional props each in original order
    (
        r##"{ "properties": { "b": {"type": "string"}, "a": {"type": "string"}, "d": {"type": "string"}, "c": {"type": "string"} }, "required": ["a", "b"], "additionalProperties": false }"##,
        r##"
        a-kv ::= "\"a\"" space ":" space string
        b-kv ::= "\"b\"" space ":" space string
        c-kv ::= "\"c\"" space ":" space string
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        d-kv ::= "\"d\"" space ":" space string
        d-rest ::= ( "," space c-kv )?
        root ::= "{" space b-kv "," space a-kv ( "," space ( d-kv d-rest | c-kv ) )? space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        "##,
    ),
    // additional props
    (
        r##"{ "type": "object", "additionalProperties": {"type": "array", "items": {"type": "number"}} }"##,
        r##"
        additional-kv ::= string ":" space additional-value
        additional-value ::= "[" space (number ("," space number)*)? space "]"
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        root ::= "{" space  (additional-kv ( "," space additional-kv )* )? space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        "##,
    ),
    // additional props (true)
    (
        r##"{ "type": "object", "additionalProperties": true }"##,
        r##"
        array ::= "[" space ( value ("," space value)* )? space "]"
        boolean ::= ("true" | "false")
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        null ::= "null"
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? space "}"
        root ::= object
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        value ::= object | array | string | number | boolean | null
        "##,
    ),
    // additional props (implicit)
    (
        r##"{ "type": "object" }"##,
        r##"
        array ::= "[" space ( value ("," space value)* )? space "]"
        boolean ::= ("true" | "false")
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        null ::= "null"
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? space "}"
        root ::= object
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        value ::= object | array | string | number | boolean | null
        "##,
    ),
    // empty w/o additional props
    (
        r##"{ "type": "object", "additionalProperties": false }"##,
        r##"
        root ::= "{" space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // required + additional props (differs: keys of other members in plain characters)
    (
        r##"{ "type": "object", "properties": { "a": {"type": "number"} }, "required": ["a"], "additionalProperties": {"type": "string"} }"##,
        r##"
        a-kv ::= "\"a\"" space ":" space number
        additional-k ::= ["] ( [a] plain-char+ | [^"\\\x7F\x00-\x1Fa] plain-char* )? ["]
        additional-kv ::= additional-k ":" space string
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        root ::= "{" space a-kv ( "," space ( additional-kv ( "," space additional-kv )* ) )? space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        plain-char ::= [^"\\\x7F\x00-\x1F]
        "##,
    ),
    // optional + additional props (differs: keys of other members in plain characters)
    (
        r##"{ "type": "object", "properties": { "a": {"type": "number"} }, "additionalProperties": {"type": "number"} }"##,
        r##"
        a-kv ::= "\"a\"" space ":" space number
        a-rest ::= ( "," space additional-kv )*
        additional-k ::= ["] ( [a] plain-char+ | [^"\\\x7F\x00-\x1Fa] plain-char* )? ["]
        additional-kv ::= additional-k ":" space number
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        root ::= "{" space  (a-kv a-rest | additional-kv ( "," space additional-kv )* )? space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        plain-char ::= [^"\\\x7F\x00-\x1F]
        "##,
    ),
    // required + optional + additional props (differs: keys of other members in plain characters)
    (
        r##"{ "type": "object", "properties": { "and": {"type": "number"}, "also": {"type": "number"} }, "required": ["and"], "additionalProperties": {"type": "number"} }"##,
        r##"
        additional-k ::= ["] ( [a] ([l] ([s] ([o] plain-char+ | [^"\\\x7F\x00-\x1Fo] plain-char*) | [^"\\\x7F\x00-\x1Fs] plain-char*) | [n] ([d] plain-char+ | [^"\\\x7F\x00-\x1Fd] plain-char*) | [^"\\\x7F\x00-\x1Fln] plain-char*) | [^"\\\x7F\x00-\x1Fa] plain-char* )? ["]
        additional-kv ::= additional-k ":" space number
        also-kv ::= "\"also\"" space ":" space number
        also-rest ::= ( "," space additional-kv )*
        and-kv ::= "\"and\"" space ":" space number
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        root ::= "{" space and-kv ( "," space ( also-kv also-rest | additional-kv ( "," space additional-kv )* ) )? space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        plain-char ::= [^"\\\x7F\x00-\x1F]
        "##,
    ),
    // optional props with empty name (differs: keys of other members in plain characters)
    (
        r##"{ "properties": { "": {"type": "integer"}, "a": {"type": "integer"} }, "additionalProperties": {"type": "integer"} }"##,
        r##"
        -kv ::= "\"\"" space ":" space root
        -rest ::= ( "," space a-kv )? a-rest
        a-kv ::= "\"a\"" space ":" space integer
        a-rest ::= ( "," space additional-kv )*
        additional-k ::= ["] ( [a] plain-char+ | [^"\\\x7F\x00-\x1Fa] plain-char* ) ["]
        additional-kv ::= additional-k ":" space integer
        integer ::= ("-"? integral-part)
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        root ::= ("-"? integral-part)
        root0 ::= "{" space  (-kv -rest | a-kv a-rest | additional-kv ( "," space additional-kv )* )? space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        plain-char ::= [^"\\\x7F\x00-\x1F]
        "##,
    ),
    // optional props with nested names (differs: keys of other members in plain characters)
    (
        r##"{ "properties": { "a": {"type": "integer"}, "aa": {"type": "integer"} }, "additionalProperties": {"type": "integer"} }"##,
        r##"
        a-kv ::= "\"a\"" space ":" space integer
        a-rest ::= ( "," space aa-kv )? aa-rest
        aa-kv ::= "\"aa\"" space ":" space integer
        aa-rest ::= ( "," space additional-kv )*
        additional-k ::= ["] ( [a] ([a] plain-char+ | [^"\\\x7F\x00-\x1Fa] plain-char*) | [^"\\\x7F\x00-\x1Fa] plain-char* )? ["]
        additional-kv ::= additional-k ":" space integer
        integer ::= ("-"? integral-part)
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        root ::= "{" space  (a-kv a-rest | aa-kv aa-rest | additional-kv ( "," space additional-kv )* )? space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        plain-char ::= [^"\\\x7F\x00-\x1F]
        "##,
    ),
    // optional props with common prefix (differs: keys of other members in plain characters)
    (
        r##"{ "properties": { "ab": {"type": "integer"}, "ac": {"type": "integer"} }, "additionalProperties": {"type": "integer"} }"##,
        r##"
        ab-kv ::= "\"ab\"" space ":" space integer
        ab-rest ::= ( "," space ac-kv )? ac-rest
        ac-kv ::= "\"ac\"" space ":" space integer
        ac-rest ::= ( "," space additional-kv )*
        additional-k ::= ["] ( [a] ([b] plain-char+ | [c] plain-char+ | [^"\\\x7F\x00-\x1Fbc] plain-char*) | [^"\\\x7F\x00-\x1Fa] plain-char* )? ["]
        additional-kv ::= additional-k ":" space integer
        integer ::= ("-"? integral-part)
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        root ::= "{" space  (ab-kv ab-rest | ac-kv ac-rest | additional-kv ( "," space additional-kv )* )? space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        plain-char ::= [^"\\\x7F\x00-\x1F]
        "##,
    ),
    // top-level $ref
    (
        r##"{ "$ref": "#/definitions/foo", "definitions": { "foo": { "type": "object", "properties": { "a": { "type": "string" } }, "required": [ "a" ], "additionalProperties": false } } }"##,
        r##"
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        ref-definitions-foo ::= "{" space ref-definitions-foo-a-kv space "}"
        ref-definitions-foo-a-kv ::= "\"a\"" space ":" space string
        root ::= ref-definitions-foo
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        "##,
    ),
    // anyOf
    (
        r##"{ "anyOf": [ {"$ref": "#/definitions/foo"}, {"$ref": "#/definitions/bar"} ], "definitions": { "foo": { "properties": {"a": {"type": "number"}} }, "bar": { "properties": {"b": {"type": "number"}} } }, "type": "object" }"##,
        r##"
        alternative-0 ::= ref-definitions-foo
        alternative-1 ::= ref-definitions-bar
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        ref-definitions-bar ::= "{" space  (ref-definitions-bar-b-kv )? space "}"
        ref-definitions-bar-b-kv ::= "\"b\"" space ":" space number
        ref-definitions-foo ::= "{" space  (ref-definitions-foo-a-kv )? space "}"
        ref-definitions-foo-a-kv ::= "\"a\"" space ":" space number
        root ::= alternative-0 | alternative-1
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // anyOf $ref
    (
        r##"{ "properties": { "a": { "anyOf": [ {"type": "string"}, {"type": "number"} ] }, "b": { "anyOf": [ {"$ref": "#/properties/a/anyOf/0"}, {"type": "boolean"} ] } }, "type": "object" }"##,
        r##"
        a ::= string | number
        a-kv ::= "\"a\"" space ":" space a
        a-rest ::= ( "," space b-kv )?
        b ::= b-0 | boolean
        b-0 ::= string
        b-kv ::= "\"b\"" space ":" space b
        boolean ::= ("true" | "false")
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        root ::= "{" space  (a-kv a-rest | b-kv )? space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        "##,
    ),
    // mix of allOf, anyOf and $ref (similar to https://json.schemastore.org/tsconfig.json)
    (
        r##"{ "allOf": [ {"$ref": "#/definitions/foo"}, {"$ref": "#/definitions/bar"}, { "anyOf": [ {"$ref": "#/definitions/baz"}, {"$ref": "#/definitions/bam"} ] } ], "definitions": { "foo": { "properties": {"a": {"type": "number"}} }, "bar": { "properties": {"b": {"type": "number"}} }, "bam": { "properties": {"c": {"type": "number"}} }, "baz": { "properties": {"d": {"type": "number"}} } }, "type": "object" }"##,
        r##"
        a-kv ::= "\"a\"" space ":" space number
        b-kv ::= "\"b\"" space ":" space number
        c-kv ::= "\"c\"" space ":" space number
        d-kv ::= "\"d\"" space ":" space number
        d-rest ::= ( "," space c-kv )?
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        root ::= "{" space a-kv "," space b-kv ( "," space ( d-kv d-rest | c-kv ) )? space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // allOf with enum schema
    (
        r##"{ "allOf": [ {"$ref": "#/definitions/foo"} ], "definitions": { "foo": { "type": "string", "enum": ["a", "b"] } } }"##,
        r##"
        root ::= ("\"a\"" | "\"b\"")
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // allOf with multiple enum schemas
    (
        r##"{ "allOf": [ {"$ref": "#/definitions/foo"}, {"$ref": "#/definitions/bar"} ], "definitions": { "foo": { "type": "string", "enum": ["a", "b", "c"] }, "bar": { "type": "string", "enum": ["b", "c", "d"] } } }"##,
        r##"
        root ::= ("\"b\"" | "\"c\"")
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // conflicting names
    (
        r##"{ "type": "object", "properties": { "number": { "type": "object", "properties": { "number": { "type": "object", "properties": { "root": { "type": "number" } }, "required": [ "root" ], "additionalProperties": false } }, "required": [ "number" ], "additionalProperties": false } }, "required": [ "number" ], "additionalProperties": false, "definitions": {} }"##,
        r##"
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        number- ::= "{" space number-number-kv space "}"
        number-kv ::= "\"number\"" space ":" space number-
        number-number ::= "{" space number-number-root-kv space "}"
        number-number-kv ::= "\"number\"" space ":" space number-number
        number-number-root-kv ::= "\"root\"" space ":" space number
        root ::= "{" space number-kv space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // description only (no type) treated as unconstrained
    (
        r##"{"description": "The 0-based index of the last line to be retrieved (inclusive). If None, read until the end of the file."}"##,
        r##"
        array ::= "[" space ( value ("," space value)* )? space "]"
        boolean ::= ("true" | "false")
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        null ::= "null"
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? space "}"
        root ::= value
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        value ::= object | array | string | number | boolean | null
        "##,
    ),
    // literal string with escapes
    (
        r##"{ "properties": { "code": { "const": " \r \n \" \\ ", "description": "Generated code", "title": "Code", "type": "string" } }, "required": [ "code" ], "title": "DecoderResponse", "type": "object" }"##,
        r##"
        code ::= "\" \\r \\n \\\" \\\\ \""
        code-kv ::= "\"code\"" space ":" space code
        root ::= "{" space code-kv space "}"
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // regexp with non-capturing group
    (
        r##"{ "type": "string", "pattern": "^(?:foo|bar)baz$" }"##,
        r##"
        root ::= "\"" (("foo" | "bar") "baz") "\""
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // regexp with nested non-capturing groups
    (
        r##"{ "type": "string", "pattern": "^(?:(?:ab)+c)?d$" }"##,
        r##"
        root ::= "\"" ((("ab")+ "c")? "d") "\""
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // regexp with escaped hyphen in a character class
    (
        r##"{ "type": "string", "pattern": "^[a-z\\-]+$" }"##,
        r##"
        root ::= "\"" ([a-z\-]+) "\""
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
    // regexp with escaped hyphen outside a character class (differs in text only)
    (
        r##"{ "type": "string", "pattern": "^a\\-b$" }"##,
        r##"
        root ::= "\"" ("a-b") "\""
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        "##,
    ),
];

#[test]
fn grammars_match_llama_cpps_expectations() {
    for (schema, expected) in LLAMA_CPP_GRAMMARS {
        check_llama_cpp(schema, expected);
    }
}

/// Whether llama.cpp's grammar engine, stepping through `text` token by token,
/// allows every token and then the end of generation.
fn engine_accepts(model: &Model, eog: Token, grammar: &str, text: &str) -> bool {
    let params = SamplerParams {
        temperature: 0.0,
        grammar: Some(grammar.to_string()),
        ..Default::default()
    };
    let mut sampler = Sampler::new(model, &params).unwrap_or_else(|e| panic!("{e}\n{grammar}"));
    for token in model.tokenize(text, false).unwrap() {
        if !sampler.allows(token) {
            return false;
        }
        sampler.accept(model, token);
    }
    sampler.allows(eog)
}

/// A schema with strings its grammar must generate and strings it must not.
struct EngineCase {
    name: &'static str,
    schema: &'static str,
    pass: &'static [&'static str],
    fail: &'static [&'static str],
}

fn check_engine(model: &Model, eog: Token, grammar: &str, case: &EngineCase) {
    for text in case.pass {
        let ok = engine_accepts(model, eog, grammar, text);
        assert!(ok, "{}: {text:?} should pass\n{grammar}", case.name);
    }
    for text in case.fail {
        let ok = engine_accepts(model, eog, grammar, text);
        assert!(!ok, "{}: {text:?} should fail\n{grammar}", case.name);
    }
}

fn end_of_generation(model: &Model) -> Token {
    (0..model.n_vocab())
        .find(|&t| model.is_eog(t))
        .expect("the test model has an end-of-generation token")
}

#[test]
fn llama_cpp_integration_cases_run_on_the_real_grammar_engine() {
    let model = crate::llama::test_model();
    let eog = end_of_generation(&model);
    for case in ENGINE_CASES {
        let value: Value = serde_json::from_str(case.schema).unwrap();
        let grammar = schema_grammar(&value).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        check_engine(&model, eog, &grammar, case);
    }
}

/// A lenient tool grammar: the subschema with an unsupported keyword takes any
/// value; the rest of the schema still holds.
#[test]
fn tool_schemas_fall_back_to_any_value_where_unsupported() {
    let model = crate::llama::test_model();
    let eog = end_of_generation(&model);
    let schema = json!({
        "type": "object",
        "properties": {
            "n": {"type": "integer", "multipleOf": 2},
            "s": {"type": "string", "not": {"const": "x"}},
            "k": {"type": "string", "maxLength": 2}
        },
        "required": ["n", "s", "k"]
    });
    let grammar = tool_call_grammar([("t", &schema)]);
    let case = EngineCase {
        name: "lenient tool",
        schema: "",
        pass: &[
            r#"{"name": "t", "arguments": {"n": 3, "s": "x", "k": "ab"}}"#,
            r#"{"name": "t", "arguments": {"n": "any", "s": [1], "k": ""}}"#,
        ],
        fail: &[
            r#"{"name": "t", "arguments": {"n": 3, "s": "x", "k": "abc"}}"#,
            r#"{"name": "t", "arguments": {"n": 3, "s": "x"}}"#,
            r#"{"name": "u", "arguments": {"n": 3, "s": "x", "k": ""}}"#,
        ],
    };
    check_engine(&model, eog, &grammar, &case);
}

fn check_error(schema: Value, keyword: &str, path: &str) {
    let err = check_schema(&schema).expect_err(&schema.to_string());
    assert_eq!(
        (err.keyword.as_str(), err.path.as_str()),
        (keyword, path),
        "{err}"
    );
    assert_eq!(schema_grammar(&schema).unwrap_err(), err);
    assert!(err.to_string().contains(&format!("'{keyword}'")), "{err}");
}

#[test]
fn unsupported_keywords_name_the_keyword_and_the_path() {
    let age = |extra: Value| {
        let mut age = json!({"type": "integer"});
        age.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"type": "object", "properties": {"age": age}})
    };
    check_error(
        age(json!({"multipleOf": 5})),
        "multipleOf",
        "/properties/age",
    );
    let err = check_schema(&age(json!({"multipleOf": 5}))).unwrap_err();
    assert_eq!(err.kind, SchemaErrorKind::Unsupported);
    assert_eq!(
        err.to_string(),
        "unsupported JSON Schema keyword 'multipleOf' at /properties/age"
    );
    check_error(json!({"not": {"type": "string"}}), "not", "");
    check_error(json!({"type": "string", "if": {}, "then": {}}), "if", "");
    let list = |extra: Value| {
        let mut tags = json!({"type": "array", "items": {"type": "string"}});
        tags.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"properties": {"tags": tags}})
    };
    check_error(
        list(json!({"uniqueItems": true})),
        "uniqueItems",
        "/properties/tags",
    );
    check_error(
        list(json!({"contains": {"const": "a"}})),
        "contains",
        "/properties/tags",
    );
    let object = |extra: Value| {
        let mut object = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        object
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        object
    };
    check_error(
        object(json!({"patternProperties": {"^x": {}}})),
        "patternProperties",
        "",
    );
    check_error(
        object(json!({"propertyNames": {"maxLength": 3}})),
        "propertyNames",
        "",
    );
    check_error(
        object(json!({"dependentRequired": {"a": ["b"]}})),
        "dependentRequired",
        "",
    );
    check_error(object(json!({"minProperties": 1})), "minProperties", "");
    check_error(
        object(json!({"unevaluatedProperties": false})),
        "unevaluatedProperties",
        "",
    );
    check_error(json!({"type": "number", "minimum": 0}), "minimum", "");
    check_error(
        json!({"type": "number", "exclusiveMaximum": 1.5}),
        "exclusiveMaximum",
        "",
    );
    check_error(json!({"type": "string", "nullable": true}), "nullable", "");
    check_error(json!({"minimum": 3}), "minimum", "");
    check_error(json!({"required": ["a"]}), "required", "");
}

#[test]
fn keywords_llama_cpp_would_silently_drop_are_errors() {
    // The strictest of two keywords wins in llama.cpp; the other must not be lost.
    check_error(
        json!({"type": "string", "pattern": "^a+$", "minLength": 2}),
        "minLength",
        "",
    );
    check_error(
        json!({"type": "string", "format": "date", "maxLength": 20}),
        "maxLength",
        "",
    );
    check_error(
        json!({"type": "array", "items": {}, "prefixItems": [{"type": "string"}]}),
        "prefixItems",
        "",
    );
    check_error(
        json!({"properties": {"a": {}}, "required": ["a", "b"]}),
        "required",
        "",
    );
    check_error(
        json!({"anyOf": [{"type": "string"}, {"type": "integer"}], "minLength": 1}),
        "minLength",
        "",
    );
    check_error(
        json!({"type": "string", "anyOf": [{"type": "string"}, {"type": "integer"}]}),
        "type",
        "",
    );
    check_error(
        json!({"type": "object", "properties": {"a": {}}, "allOf": [{"required": ["a"]}]}),
        "allOf",
        "",
    );
    // The product schema of llama.cpp's integration test, as it is.
    let product = json!({
        "type": "object",
        "properties": {
            "productId": {"type": "integer"},
            "price": {"type": "number", "exclusiveMinimum": 0},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}
        }
    });
    check_error(product, "exclusiveMinimum", "/properties/price");
}

#[test]
fn unsupported_values_are_errors() {
    let string = |extra: Value| {
        let mut s = json!({"type": "string"});
        s.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"properties": {"s": s}})
    };
    for pattern in [
        "[0-9]+", "^\\d+$", "^(?=a)a$", "^a{,3}$", "^\\w$", "^a$b$", "^[]$",
    ] {
        check_error(
            string(json!({"pattern": pattern})),
            "pattern",
            "/properties/s",
        );
    }
    for pattern in ["^(a$", "^a)$", "^*a$", "^a**$", "^[b-a]$", "^a\\$"] {
        let err = check_schema(&string(json!({"pattern": pattern}))).unwrap_err();
        assert!(
            matches!(err.kind, SchemaErrorKind::Invalid(_)),
            "{pattern}: {err}"
        );
    }
    check_error(
        string(json!({"format": "email"})),
        "format",
        "/properties/s",
    );
    check_error(
        string(json!({"maxLength": 5000})),
        "maxLength",
        "/properties/s",
    );
    check_error(
        string(json!({"minLength": -1})),
        "minLength",
        "/properties/s",
    );
    check_error(
        string(json!({"minLength": 3, "maxLength": 2})),
        "minLength",
        "/properties/s",
    );
    check_error(json!({"$ref": "https://example.com/s.json"}), "$ref", "");
    check_error(json!({"$ref": "#"}), "$ref", "");
    check_error(json!({"$ref": "#/$defs/missing"}), "$ref", "");
    check_error(json!({"type": "kaboom"}), "type", "");
    check_error(json!({"type": 123}), "type", "");
    check_error(json!({"enum": []}), "enum", "");
    check_error(
        json!({"properties": {"a": true}}),
        "properties",
        "/properties/a",
    );
    check_error(
        json!({"prefixItems": [{}, {}], "minItems": 3}),
        "minItems",
        "",
    );
    check_error(
        json!({"type": "integer", "minimum": 5, "maximum": 4}),
        "minimum",
        "",
    );
    check_error(json!({"type": "integer", "minimum": 1e17}), "minimum", "");
    check_error(
        json!({"allOf": [{"type": "string"}, {"properties": {"a": {}}}]}),
        "allOf",
        "",
    );
    check_error(
        json!({"allOf": [{"enum": ["a"]}, {"enum": ["b"]}]}),
        "allOf",
        "",
    );
    check_error(
        json!({"allOf": [
            {"properties": {"a": {}}, "additionalProperties": false},
            {"properties": {"b": {}}}
        ]}),
        "allOf",
        "/allOf/0",
    );
    check_error(
        json!({"allOf": [{"properties": {"a": {}}}, {"properties": {"a": {}}}]}),
        "allOf",
        "",
    );
}

#[test]
fn errors_inside_ref_targets_name_the_targets_pointer() {
    let schema = json!({
        "$ref": "#/$defs/item",
        "$defs": {"item": {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}}
    });
    check_error(schema, "multipleOf", "/$defs/item/properties/n");
    let escaped = json!({
        "properties": {"a/b": {"type": "array", "contains": {}}},
        "$defs": {}
    });
    check_error(escaped, "contains", "/properties/a~1b");
}

#[test]
fn left_recursive_refs_are_errors_and_consuming_ones_work() {
    let left = json!({
        "$ref": "#/$defs/a",
        "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}, {"type": "string"}]}, "b": {"$ref": "#/$defs/a"}}
    });
    let err = check_schema(&left).unwrap_err();
    assert_eq!(err.keyword, "$ref");
    assert!(err.path == "/$defs/a" || err.path == "/$defs/b", "{err}");
    // Leniently, the recursive target takes any value.
    assert!(tool_call_grammar([("t", &left)]).contains("call0-args ::= "));
    let self_allof =
        json!({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"});
    assert_eq!(check_schema(&self_allof).unwrap_err().keyword, "allOf");
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let mut deep = json!({"type": "string"});
    for _ in 0..200 {
        deep = json!({"type": "array", "items": deep});
    }
    let err = check_schema(&deep).unwrap_err();
    assert_eq!(err.keyword, "items");
    assert!(tool_call_grammar([("t", &deep)]).starts_with("root ::= call0\n"));
    // A long chain of $refs nests as deep.
    let mut defs = serde_json::Map::new();
    for i in 0..200 {
        let next = json!({"type": "array", "items": {"$ref": format!("#/$defs/d{}", i + 1)}});
        defs.insert(format!("d{i}"), next);
    }
    defs.insert("d200".to_string(), json!({"type": "null"}));
    let chain = json!({"$ref": "#/$defs/d0", "$defs": defs});
    let err = check_schema(&chain).unwrap_err();
    assert!(matches!(err.keyword.as_str(), "$ref" | "items"), "{err}");
    // Deeply nested groups in a pattern, and a long name among other members
    // (their keys' grammar nests a group per character).
    let groups = format!("^{}a{}$", "(".repeat(500), ")".repeat(500));
    check_error(json!({"type": "string", "pattern": groups}), "pattern", "");
    let mut properties = serde_json::Map::new();
    properties.insert("k".repeat(100_000), json!({}));
    let wide =
        json!({"properties": properties.clone(), "additionalProperties": {"type": "string"}});
    check_error(wide, "properties", "");
    let closed = json!({"properties": properties, "additionalProperties": false});
    assert!(schema_grammar(&closed).is_ok());
}

#[test]
fn annotations_and_keywords_for_other_types_are_ignored() {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://example.com/x",
        "$comment": "c",
        "title": "T",
        "description": "D",
        "type": "object",
        "properties": {
            "name": {"type": "string", "minimum": 3, "default": "x", "examples": ["y"], "x-ui": 1},
            "age": {"type": ["integer", "null"], "minimum": 0, "maxLength": 3, "deprecated": true},
            "kind": {"type": "string", "enum": ["a", "b"], "readOnly": true},
            "id": {"$ref": "#/$defs/id", "description": "the id"}
        },
        "required": ["name"],
        "$defs": {"id": {"type": "string", "format": "uuid"}, "unused": {"not": {}}},
        "additionalProperties": false
    });
    check_schema(&schema).unwrap();
}

#[test]
fn recursion_and_merging_on_the_real_grammar_engine() {
    let model = crate::llama::test_model();
    let eog = end_of_generation(&model);
    for case in OWN_ENGINE_CASES {
        let value: Value = serde_json::from_str(case.schema).unwrap();
        let grammar = schema_grammar(&value).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        check_engine(&model, eog, &grammar, case);
    }
}

fn check_literal(input: &str, expected: &str) {
    assert_eq!(literal(input), expected);
}

#[test]
fn a_call_in_a_familys_own_syntax() {
    let shape = CallShape {
        before: "[TOOL_CALLS][{\"name\": \"",
        between: "\", \"arguments\": ",
        after: ", \"id\": \"Ab3dEf9hI\"}]",
        id: Some("Ab3dEf9hI"),
    };
    let schema =
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
    let grammar = shaped_call_grammar(&shape, [("search", &schema)], false);
    assert!(grammar.starts_with("root ::= call\n"), "{grammar}");
    assert!(
        grammar.contains("call-id ::= [a-zA-Z0-9_]{9}\n"),
        "{grammar}"
    );
    assert!(
        grammar.contains(r#"call0 ::= "[TOOL_CALLS][{\"name\": \"" "search" "\", \"arguments\": " call0-args ", \"id\": \"" call-id "\"}]""#),
        "{grammar}"
    );
    let repeated = shaped_call_grammar(&shape, [("search", &schema)], true);
    assert!(
        repeated.starts_with("root ::= call ( ws call )*\n"),
        "{repeated}"
    );
}

#[test]
fn literals_escape_quotes_and_backslashes() {
    check_literal("\"name\"", r#""\"name\"""#);
    check_literal("a\\b\n", r#""a\\b\n""#);
}

/// llama.cpp's order: the required properties in schema order, then any
/// ordered subset of the optional ones.
#[test]
fn required_properties_come_first_then_optional_ones_in_order() {
    let schema = json!({
        "type": "object",
        "properties": {"unit": {"type": "string"}, "city": {"type": "string"}},
        "required": ["city"]
    });
    let grammar = tool_call_grammar([("weather", &schema)]);
    let rule = grammar
        .lines()
        .find(|l| l.starts_with("call0-args ::="))
        .unwrap();
    assert_eq!(
        rule,
        r#"call0-args ::= "{" space call0-args-city-kv ( "," space ( call0-args-unit-kv ) )? space "}""#
    );
    assert!(grammar.starts_with("root ::= call0\n"));
}

#[test]
fn response_format_grammars() {
    let schema = json!({
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"]
    });
    let grammar = json_grammar(Some(&schema)).unwrap();
    assert!(grammar.starts_with("root ::= ws reply ws\n"), "{grammar}");
    assert!(
        grammar.contains("reply ::= \"{\" space reply-answer-kv space \"}\"\n"),
        "{grammar}"
    );
    assert!(grammar.contains(r#"reply-answer-kv ::= "\"answer\"" space ":" space integer"#));
    assert!(json_grammar(None)
        .unwrap()
        .starts_with("root ::= ws object ws\n"));
    assert!(json_grammar(Some(&json!({"not": {}}))).is_err());
}

#[test]
fn enums_arrays_and_unknown_types() {
    let schema = json!({
        "type": "object",
        "properties": {
            "mode": {"enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "integer"}},
            "any": {}
        },
        "required": ["mode", "tags", "any"]
    });
    let grammar = tool_call_grammar([("t", &schema), ("u", &json!({}))]);
    assert!(grammar.starts_with("root ::= call0 | call1\n"));
    assert!(grammar.contains(r#"call0-args-mode ::= ("\"a\"" | "\"b\"")"#));
    assert!(grammar
        .contains(r#"call0-args-tags ::= "[" space (integer ("," space integer)*)? space "]""#));
    assert!(grammar.contains(r#"call0-args-any-kv ::= "\"any\"" space ":" space call0-args-any"#));
    assert!(grammar.contains("call1-args ::= value\n"));
    let no_tools: [(&str, &Value); 0] = [];
    assert!(tool_call_grammar(no_tools).starts_with("root ::= object\n"));
}

/// llama.cpp's `test-grammar-integration.cpp` schema cases.
const ENGINE_CASES: &[EngineCase] = &[
    EngineCase {
        name: "min 0",
        schema: r#"{ "type": "integer", "minimum": 0 }"#,
        pass: &[r#"0"#, r#"10"#, r#"12"#, r#"10000"#],
        fail: &[
            r#"-1"#,
            r#"-10"#,
            r#"-10000"#,
            r#"-100000000000000000000000000000000"#,
            r#"100000000000000000000000000000000"#,
            r#"00"#,
            r#"01"#,
            r#"-0"#,
        ],
    },
    EngineCase {
        name: "min 2",
        schema: r#"{ "type": "integer", "minimum": 2 }"#,
        pass: &[
            r#"2"#,
            r#"3"#,
            r#"4"#,
            r#"10"#,
            r#"20"#,
            r#"1234567890000000"#,
        ],
        fail: &[
            r#"0"#,
            r#"1"#,
            r#"-1"#,
            r#"-100"#,
            r#"0"#,
            r#"1"#,
            r#"01"#,
            r#"02"#,
            r#"12345678900000000"#,
        ],
    },
    EngineCase {
        name: "min 456",
        schema: r#"{ "type": "integer", "minimum": 456 }"#,
        pass: &[r#"456"#, r#"4560"#, r#"457"#, r#"460"#, r#"500"#],
        fail: &[r#"455"#, r#"356"#, r#"50"#, r#"050"#, r#"-1"#, r#"-456"#],
    },
    EngineCase {
        name: "min -123",
        schema: r#"{ "type": "integer", "minimum": -123 }"#,
        pass: &[
            r#"-123"#, r#"-122"#, r#"-11"#, r#"-1"#, r#"0"#, r#"1"#, r#"123"#, r#"1234"#, r#"2345"#,
        ],
        fail: &[r#"-1234"#, r#"-124"#],
    },
    EngineCase {
        name: "max 9999",
        schema: r#"{ "type": "integer", "maximum": 9999 }"#,
        pass: &[r#"-99999"#, r#"0"#, r#"9999"#],
        fail: &[r#"10000"#, r#"99991"#],
    },
    EngineCase {
        name: "max -9999",
        schema: r#"{ "type": "integer", "maximum": -9999 }"#,
        pass: &[r#"-10000"#, r#"-9999"#],
        fail: &[r#"-9998"#, r#"0"#, r#"9999"#],
    },
    EngineCase {
        name: "min 5 max 30",
        schema: r#"{ "type": "integer", "minimum": 5, "maximum": 30 }"#,
        pass: &[r#"5"#, r#"10"#, r#"30"#],
        fail: &[r#"05"#, r#"4"#, r#"-1"#, r#"31"#, r#"123"#, r#"0123"#],
    },
    EngineCase {
        name: "min 1 max 900719925474091",
        schema: r#"{ "type": "integer", "exclusiveMinimum": 0, "maximum": 900719925474091 }"#,
        pass: &[
            r#"1"#,
            r#"2"#,
            r#"10"#,
            r#"900719925474090"#,
            r#"900719925474091"#,
        ],
        fail: &[r#"0"#, r#"01"#, r#"900719925474092"#, r#"9007199254740910"#],
    },
    EngineCase {
        name: "min -1 max 1",
        schema: r#"{ "type": "integer", "minimum": -1, "maximum": 1 }"#,
        pass: &[r#"-1"#, r#"0"#, r#"1"#],
        fail: &[r#"-11"#, r#"-10"#, r#"-2"#, r#"2"#, r#"10"#, r#"11"#],
    },
    EngineCase {
        name: "min -123 max 42",
        schema: r#"{ "type": "integer", "minimum": -123, "maximum": 42 }"#,
        pass: &[
            r#"-123"#, r#"-122"#, r#"-13"#, r#"-11"#, r#"-2"#, r#"-1"#, r#"0"#, r#"1"#, r#"5"#,
            r#"10"#, r#"39"#, r#"40"#, r#"42"#,
        ],
        fail: &[
            r#"-0123"#, r#"-124"#, r#"-1123"#, r#"-200"#, r#"43"#, r#"123"#, r#"0123"#,
        ],
    },
    EngineCase {
        name: "exclusive min / max",
        schema: r#"{ "type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10000 }"#,
        pass: &[r#"1"#, r#"9999"#],
        fail: &[r#"0"#, r#"01"#, r#"10000"#, r#"99999"#],
    },
    EngineCase {
        name: "empty schema (any value)",
        schema: r#"{}"#,
        pass: &[
            r#"{}"#,
            r#"{"foo": "bar"}"#,
            r#"[]"#,
            r#"null"#,
            r#""""#,
            r#"true"#,
        ],
        fail: &[r#""#, r#"{"foo"}"#, r#"foo"#],
    },
    EngineCase {
        name: "exotic formats (list)",
        schema: r#"{ "items": [ { "format": "date" }, { "format": "uuid" }, { "format": "time" }, { "format": "date-time" } ] }"#,
        pass: &[
            r#"["2012-04-23", "12345678-1234-1234-1234-1234567890ab", "18:25:43.511Z", "2012-04-23T18:25:43.511Z"]"#,
        ],
        fail: &[
            r#"["foo", "bar"]"#,
            r#"["12345678-1234-1234-1234-1234567890ab"]"#,
        ],
    },
    EngineCase {
        name: "string",
        schema: r#"{ "type": "string" }"#,
        pass: &[r#""foo""#, r#""bar""#, r#""""#],
        fail: &[r#"{}"#, r#""foo": "bar""#],
    },
    EngineCase {
        name: "string w/ min length 1",
        schema: r#"{ "type": "string", "minLength": 1 }"#,
        pass: &[r#""foo""#, r#""bar""#],
        fail: &[r#""""#, r#"{}"#, r#""foo": "bar""#],
    },
    EngineCase {
        name: "string w/ min length 3",
        schema: r#"{ "type": "string", "minLength": 3 }"#,
        pass: &[r#""foo""#, r#""bar""#, r#""foobar""#],
        fail: &[r#""""#, r#""f""#, r#""fo""#],
    },
    EngineCase {
        name: "string w/ max length",
        schema: r#"{ "type": "string", "maxLength": 3 }"#,
        pass: &[r#""foo""#, r#""bar""#, r#""""#, r#""f""#, r#""fo""#],
        fail: &[r#""foobar""#],
    },
    EngineCase {
        name: "string w/ min & max length",
        schema: r#"{ "type": "string", "minLength": 1, "maxLength": 4 }"#,
        pass: &[r#""foo""#, r#""bar""#, r#""f""#, r#""barf""#],
        fail: &[r#""""#, r#""barfo""#, r#""foobar""#],
    },
    EngineCase {
        name: "boolean",
        schema: r#"{ "type": "boolean" }"#,
        pass: &[r#"true"#, r#"false"#],
        fail: &[r#""""#, r#""true""#, r#"True"#, r#"FALSE"#],
    },
    EngineCase {
        name: "integer",
        schema: r#"{ "type": "integer" }"#,
        pass: &[r#"0"#, r#"12345"#, r#"1234567890123456"#],
        fail: &[r#""#, r#"01"#, r#"007"#, r#"12345678901234567  "#],
    },
    EngineCase {
        name: "string const",
        schema: r#"{ "const": "foo" }"#,
        pass: &[r#""foo""#],
        fail: &[r#"foo"#, r#""bar""#],
    },
    EngineCase {
        name: "non-string const",
        schema: r#"{ "const": true }"#,
        pass: &[r#"true"#],
        fail: &[r#""#, r#"foo"#, r#""true""#],
    },
    EngineCase {
        name: "non-string enum",
        schema: r#"{ "enum": ["red", "amber", "green", null, 42, ["foo"]] }"#,
        pass: &[r#""red""#, r#"null"#, r#"42"#, r#"["foo"]"#],
        fail: &[r#""#, r#"420"#, r#"true"#, r#"foo"#],
    },
    EngineCase {
        name: "simple pattern",
        schema: r#"{ "pattern": "^[a-zA-Z0-9_-]*$" }"#,
        pass: &[r#""""#, r#""He_llo-12""#],
        fail: &[r#""!""#, r#""Hello World""#],
    },
    EngineCase {
        name: "pattern with escapes",
        schema: r#"{ "pattern": "^a\\^\\$\\.\\[\\]\\(\\)\\|\\{\\}\\*\\+\\?b$" }"#,
        pass: &[r#""a^$.[]()|{}*+?b""#],
        fail: &[r#""ab""#],
    },
    EngineCase {
        name: "nullable array",
        schema: r#"{ "type": ["array", "null"], "items": { "type": "string" } }"#,
        pass: &[r#"null"#, r#"[]"#, r#"["123"]"#, r#"["foo", "bar"]"#],
        fail: &[r#""#, r#"[123]"#, r#""foo""#, r#"["foo", 42]"#],
    },
    EngineCase {
        name: "min+max items",
        schema: r#"{ "items": { "type": ["number", "integer"] }, "minItems": 3, "maxItems": 5 }"#,
        pass: &[r#"[1, 2, 3]"#, r#"[1, 2, 3, 4]"#, r#"[1, 2, 3, 4, 5]"#],
        fail: &[r#"[1, 2]"#, r#"[1, 2, 3, 4, 5, 6]"#, r#"1"#],
    },
    EngineCase {
        name: "object properties",
        schema: r#"{ "type": "object", "properties": { "number": { "type": "number" }, "street_name": { "type": "string" }, "street_type": { "enum": ["Street", "Avenue", "Boulevard"] } } }"#,
        pass: &[
            r#"{ "number": 1600, "street_name": "Pennsylvania", "street_type":"Avenue"}"#,
            r#"{ "street_name": "Pennsylvania" }"#,
            r#"{ "number": 1600, "street_name": "Pennsylvania" }"#,
            r#"{}"#,
            r#"{ "number": 1600, "street_name": "Pennsylvania", "street_type": "Avenue" }"#,
        ],
        fail: &[
            r#"{ "number": "1600", "street_name": "Pennsylvania", "street_type":"Avenue"}"#,
            r#"{ "street_name": "Pennsylvania", "number": 1600 }"#,
            r#"{ "number": "1600", "street_name": "Pennsylvania", "street_type":"Avenue"}"#,
            r#"{ "number": 1600, "street_name": "Pennsylvania", "street_type":"Avenue", "direction":"NW"}"#,
        ],
    },
    EngineCase {
        name: "additional properties can't override other properties",
        schema: r#"{ "properties": { "a": {"type": "integer"}, "b": {"type": "integer"} }, "additionalProperties": true }"#,
        pass: &[
            r#"{"a": 42}"#,
            r#"{"c": ""}"#,
            r#"{"a": 42, "c": ""}"#,
            r#"{"a_": ""}"#,
        ],
        fail: &[r#""#, r#"{"a": ""}"#, r#"{"a": "", "b": ""}"#],
    },
    EngineCase {
        name: "object properties, additionalProperties: true",
        schema: r#"{ "type": "object", "properties": { "number": { "type": "number" }, "street_name": { "type": "string" }, "street_type": { "enum": ["Street", "Avenue", "Boulevard"] } }, "additionalProperties": true }"#,
        pass: &[
            r#"{}"#,
            r#"{"number":1600,"street_name":"Pennsylvania","street_type":"Avenue"}"#,
            r#"{ "street_name": "Pennsylvania" }"#,
            r#"{ "number": 1600, "street_name": "Pennsylvania" }"#,
            r#"{ "number": 1600, "street_name": "Pennsylvania", "street_type":"Avenue", "direction":"NW"}"#,
            r#"{ "number": 1600, "street_name": "Pennsylvania", "street_type": "Avenue" }"#,
        ],
        fail: &[
            r#"{ "number": "1600", "street_name": "Pennsylvania", "street_type":"Avenue"}"#,
            r#"{ "street_name": "Pennsylvania", "number": 1600, "street_type":"Avenue"}"#,
        ],
    },
    EngineCase {
        name: "required + optional props each in original order",
        schema: r#"{ "type": "object", "properties": { "number": { "type": "number" }, "street_name": { "type": "string" }, "street_type": { "enum": ["Street", "Avenue", "Boulevard"] } }, "additionalProperties": false }"#,
        pass: &[
            r#"{ "street_name": "Pennsylvania" }"#,
            r#"{ "number": 1600, "street_type":"Avenue"}"#,
            r#"{ "number": 1600, "street_name": "Pennsylvania" }"#,
            r#"{ "number": 1600, "street_name": "Pennsylvania", "street_type":"Avenue"}"#,
            r#"{ "number": 1600, "street_name": "Pennsylvania", "street_type": "Avenue" }"#,
        ],
        fail: &[
            r#"{ "street_type": "Avenue", "number": 1600 }"#,
            r#"{ "number": 1600, "street_name": "Pennsylvania", "street_type": "Avenue", "direction": "NW" }"#,
        ],
    },
    EngineCase {
        name: "required + optional props each in original order",
        schema: r#"{ "properties": { "b": {"type": "string"}, "a": {"type": "string"}, "d": {"type": "string"}, "c": {"type": "string"} }, "required": ["a", "b"], "additionalProperties": false }"#,
        pass: &[
            r#"{"b": "foo", "a": "bar"}"#,
            r#"{"b":"foo","a":"bar","d":"qux"}"#,
            r#"{"b":"foo", "a":"bar", "d":"qux", "c":"baz"}"#,
        ],
        fail: &[
            r#"{"a": "foo", "b": "bar"}"#,
            r#"{"b": "bar"}"#,
            r#"{"a": "foo", "c": "baz"}"#,
            r#"{"a":"foo", "b":"bar", "c":"baz", "d":"qux"}"#,
        ],
    },
    EngineCase {
        name: "required props (without exclusiveMinimum and uniqueItems)",
        schema: r#"{ "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://example.com/product.schema.json", "title": "Product", "description": "A product from Acme's catalog", "type": "object", "properties": { "productId": { "description": "The unique identifier for a product", "type": "integer" }, "productName": { "description": "Name of the product", "type": "string" }, "price": { "description": "The price of the product", "type": "number" }, "tags": { "description": "Tags for the product", "type": "array", "items": { "type": "string" }, "minItems": 1 }, "dimensions": { "type": "object", "properties": { "length": { "type": "number" }, "width": { "type": "number" }, "height": { "type": "number" } }, "required": [ "length", "width", "height" ] } }, "required": [ "productId", "productName", "price" ] }"#,
        pass: &[
            r#"{"productId": 1, "productName": "A green door", "price": 12.50}"#,
            r#"{"productId": 1, "productName": "A green door", "price": 12.50, "tags": ["home", "green"]}"#,
            r#"{"productId": 1, "productName": "A green door", "price": 12.50, "tags": ["home", "green"], "dimensions": {"length": 785, "width": 250.5, "height": -0.359}}"#,
        ],
        fail: &[
            r#"{}"#,
            r#"{"productName": "A green door", "price": 12.50, "productId": 1}"#,
            r#"{"productId": 1, "productName": "A green door"}"#,
            r#"{"productName": "A green door", "price": 12.50}"#,
            r#"{"productId": 1, "productName": "A green door", "price": 12.50, "tags": []}"#,
            r#"{"productId": 1, "productName": "A green door", "price": 12.50, "dimensions": {"length": 785, "width": 250.5, "height": -0.359}, "tags": ["home", "green"]}"#,
        ],
    },
];

/// Cases of this converter's own: recursion, merging, and the places where
/// llama.cpp's grammar would let invalid JSON or out-of-schema values through.
const OWN_ENGINE_CASES: &[EngineCase] = &[
    EngineCase {
        name: "a minimum with a zero after its first digit",
        schema: r#"{"type": "integer", "minimum": 105}"#,
        pass: &["105", "106", "110", "999", "1000"],
        fail: &["100", "104", "10", "99", "-105"],
    },
    EngineCase {
        name: "a negative maximum",
        schema: r#"{"type": "integer", "maximum": -5}"#,
        pass: &["-5", "-6", "-123"],
        fail: &["-05", "-4", "-0", "0", "5"],
    },
    EngineCase {
        name: "a lone large minimum",
        schema: r#"{"type": "integer", "minimum": 1000000000000000}"#,
        pass: &["1000000000000000", "9999999999999999"],
        fail: &["999999999999999", "10000000000000000"],
    },
    EngineCase {
        name: "a quote in a pattern",
        schema: r#"{"type": "string", "pattern": "^a\"b$"}"#,
        pass: &[r#""a\"b""#],
        fail: &[r#""a"b""#, r#""ab""#],
    },
    EngineCase {
        name: "a negated class as JSON text",
        schema: r#"{"type": "string", "pattern": "^[^a]+$"}"#,
        pass: &[r#""bc""#, r#""b\"c""#, r#""b\\c""#],
        fail: &[r#""a""#, r#""b"c""#, r#""b\c""#],
    },
    EngineCase {
        name: "a newline in a class",
        schema: r#"{"type": "string", "pattern": "^[a\\n]+(?:x|y{2})$"}"#,
        pass: &[r#""a\nax""#, r#""ayy""#],
        fail: &[r#""bx""#, r#""ay""#, "\"a\nax\""],
    },
    EngineCase {
        name: "a recursive list",
        schema: r##"{"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
            "properties": {"value": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
            "required": ["value", "next"], "additionalProperties": false}}}"##,
        pass: &[
            r#"{"value": 1, "next": null}"#,
            r#"{"value": 1, "next": {"value": 2, "next": null}}"#,
        ],
        fail: &[
            r#"{"value": 1, "next": {"value": "x", "next": null}}"#,
            r#"{"value": 1}"#,
        ],
    },
    EngineCase {
        name: "allOf of a $ref and more properties",
        schema: r##"{"$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
            "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"name": {"type": "string"}}}]}"##,
        pass: &[r#"{"id": 1, "name": "x"}"#],
        fail: &[
            r#"{"id": 1}"#,
            r#"{"name": "x", "id": 1}"#,
            r#"{"id": "1", "name": "x"}"#,
        ],
    },
    EngineCase {
        name: "oneOf of constrained types",
        schema: r#"{"oneOf": [{"type": "integer", "minimum": 10}, {"type": "string", "maxLength": 2}]}"#,
        pass: &["10", r#""ab""#],
        fail: &["9", r#""abc""#],
    },
    EngineCase {
        name: "a property name that needs an escape, and other members",
        schema: r#"{"properties": {"a\"b": {"type": "integer"}}, "additionalProperties": {"type": "string"}}"#,
        pass: &[
            r#"{"a\"b": 1}"#,
            r#"{"x": "y"}"#,
            r#"{"a\"b": 1, "x": "y"}"#,
        ],
        fail: &[r#"{"a\"b": "s"}"#],
    },
    EngineCase {
        name: "a type array with an enum",
        schema: r#"{"type": ["string", "null"], "enum": ["a", null]}"#,
        pass: &[r#""a""#, "null"],
        fail: &[r#""b""#, "1"],
    },
    EngineCase {
        name: "a tuple with its length",
        schema: r#"{"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "minItems": 2, "maxItems": 2}"#,
        pass: &[r#"[1, "a"]"#],
        fail: &["[1]", r#"[1, "a", 2]"#],
    },
];

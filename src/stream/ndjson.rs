//! The one NDJSON reader: one JSON value per non-empty line of any `BufRead`.
//!
//! Ollama's `/api/chat` stream is NDJSON: `crate::backend::ollama` reads it
//! through [`NdjsonReader`] and interprets the values. Lines come from
//! [`super::LineReader`], so chunk boundaries and split UTF-8 never matter.
//! (The tool server's JSON-RPC lines do not come through here: `tools::rpc`
//! has its own capped line reader that classifies a line before parsing it.)

use std::io::{self, BufRead};

use serde_json::Value;

use super::LineReader;

/// Iterates the JSON values of an NDJSON body. A line that is not JSON is an
/// `InvalidData` error naming the start of the line; reading may continue after it.
pub struct NdjsonReader<R> {
    lines: LineReader<R>,
}

impl<R: BufRead> NdjsonReader<R> {
    pub fn new(reader: R) -> Self {
        NdjsonReader {
            lines: LineReader::new(reader),
        }
    }
}

impl<R: BufRead> Iterator for NdjsonReader<R> {
    type Item = io::Result<Value>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let line = match self.lines.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => return None,
                Err(e) => return Some(Err(e)),
            };
            let trimmed = line.trim_start_matches('\u{feff}').trim();
            if trimmed.is_empty() {
                continue;
            }
            return Some(serde_json::from_str(trimmed).map_err(|e| bad_line(trimmed, &e)));
        }
    }
}

fn bad_line(line: &str, error: &serde_json::Error) -> io::Error {
    let start: String = line.chars().take(80).collect();
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("not a JSON line ({error}): {start}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::ChunkReader;
    use serde_json::json;

    fn decode<R: BufRead>(reader: R) -> Vec<Result<Value, String>> {
        NdjsonReader::new(reader)
            .map(|r| r.map_err(|e| e.kind().to_string()))
            .collect()
    }

    fn check(input: &str, expected: &[Value]) {
        let got: Vec<Value> = decode(input.as_bytes())
            .into_iter()
            .map(|r| r.expect("valid line"))
            .collect();
        assert_eq!(got, expected, "input {input:?}");
    }

    #[test]
    fn values_per_line() {
        check("{\"a\":1}\n{\"b\":2}\n", &[json!({"a":1}), json!({"b":2})]);
        check("\n  \r\n{\"a\":1}\r\n\n", &[json!({"a":1})]);
        check("{\"last\":true}", &[json!({"last":true})]);
        check("", &[]);
    }

    #[test]
    fn bad_line_is_an_error_and_reading_goes_on() {
        let got = decode("{\"a\":1}\nnot json\n{\"b\":2}\n".as_bytes());
        assert_eq!(got.len(), 3);
        assert!(got[1].is_err());
        assert_eq!(got[2], Ok(json!({"b":2})));
    }

    #[test]
    fn split_anywhere_including_inside_characters() {
        let input = "{\"message\":{\"content\":\"héllo ✓ 日本 🦀\"},\"done\":false}\n\
                     {\"done\":true,\"eval_count\":3}\n"
            .as_bytes();
        let whole = decode(input);
        assert_eq!(whole.len(), 2);
        assert_eq!(
            whole[0].as_ref().map(|v| v["message"]["content"].clone()),
            Ok(json!("héllo ✓ 日本 🦀"))
        );
        for at in 0..=input.len() {
            assert_eq!(
                decode(ChunkReader::split_at(input, at)),
                whole,
                "split at {at}"
            );
        }
        assert_eq!(decode(ChunkReader::bytewise(input)), whole);
    }
}

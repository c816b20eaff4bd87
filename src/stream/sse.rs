//! The one Server-Sent Events decoder: a push parser fed whole lines, and an
//! iterator adapter over any `BufRead`.
//!
//! Every SSE-speaking backend (OpenAI, Anthropic, Gemini, the CLI client)
//! reads its body through [`SseDecoder`]; the event payloads are then parsed by
//! the backend that owns the wire format. Lines are split by
//! [`super::LineReader`], so chunk boundaries and split UTF-8 never matter.

use std::io::{self, BufRead};

use super::LineReader;

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, `None` for the default ("message") type.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    pub id: Option<String>,
    /// The `retry:` field in milliseconds, when it was a valid number.
    pub retry: Option<u64>,
}

/// Builds events from lines (terminators already removed).
#[derive(Debug, Default)]
pub struct SseParser {
    current: SseEvent,
    has_data: bool,
    /// Set once the first line was seen, so only a leading byte-order mark is dropped.
    started: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one line; a blank line completes and returns the pending event.
    pub fn push_line(&mut self, line: &str) -> Option<SseEvent> {
        let line = if self.started {
            line
        } else {
            self.started = true;
            line.strip_prefix('\u{feff}').unwrap_or(line)
        };
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        self.apply_field(field, value);
        None
    }

    fn apply_field(&mut self, field: &str, value: &str) {
        match field {
            "event" => self.current.event = Some(value.to_string()),
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            // The spec ignores ids containing NUL.
            "id" if !value.contains('\0') => self.current.id = Some(value.to_string()),
            "retry" => {
                if let Ok(ms) = value.parse::<u64>() {
                    self.current.retry = Some(ms);
                }
            }
            _ => {}
        }
    }

    /// Completes the pending event. An event without any `data:` line is not
    /// dispatched, as the SSE spec says.
    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.current);
        let had_data = std::mem::replace(&mut self.has_data, false);
        had_data.then_some(event)
    }

    /// At end of input: delivers an event whose blank line never came.
    pub fn finish(&mut self) -> Option<SseEvent> {
        self.dispatch()
    }
}

/// Iterates the events of an SSE body.
pub struct SseDecoder<R> {
    lines: LineReader<R>,
    parser: SseParser,
    done: bool,
}

impl<R: BufRead> SseDecoder<R> {
    pub fn new(reader: R) -> Self {
        SseDecoder {
            lines: LineReader::new(reader),
            parser: SseParser::new(),
            done: false,
        }
    }
}

impl<R: BufRead> Iterator for SseDecoder<R> {
    type Item = io::Result<SseEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            match self.lines.next_line() {
                Ok(Some(line)) => {
                    if let Some(event) = self.parser.push_line(&line) {
                        return Some(Ok(event));
                    }
                }
                Ok(None) => {
                    self.done = true;
                    return self.parser.finish().map(Ok);
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::ChunkReader;

    fn decode<R: BufRead>(reader: R) -> Vec<SseEvent> {
        SseDecoder::new(reader)
            .collect::<io::Result<Vec<_>>>()
            .expect("in-memory read")
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_string),
            data: data.to_string(),
            ..SseEvent::default()
        }
    }

    fn check(input: &str, expected: &[SseEvent]) {
        assert_eq!(decode(input.as_bytes()), expected, "input {input:?}");
    }

    #[test]
    fn fields_and_framing() {
        check("data: a\n\ndata: b\n\n", &[ev(None, "a"), ev(None, "b")]);
        check("event: ping\ndata: {}\n\n", &[ev(Some("ping"), "{}")]);
        check("data: one\ndata: two\n\n", &[ev(None, "one\ntwo")]);
        check("data:no-space\n\n", &[ev(None, "no-space")]);
        check("data:  two spaces\n\n", &[ev(None, " two spaces")]);
        check(": keep-alive\n\ndata: x\n\n", &[ev(None, "x")]);
        check("event: lonely\n\n", &[]);
        check("data\n\n", &[ev(None, "")]);
        check("unknown: field\ndata: y\n\n", &[ev(None, "y")]);
    }

    #[test]
    fn id_and_retry() {
        let got = decode("id: 7\nretry: 1500\nretry: soon\ndata: z\n\n".as_bytes());
        assert_eq!(got[0].id.as_deref(), Some("7"));
        assert_eq!(got[0].retry, Some(1500));
    }

    #[test]
    fn line_endings_bom_and_eof() {
        check(
            "\u{feff}data: a\r\n\r\ndata: b\r\rdata: c",
            &[ev(None, "a"), ev(None, "b"), ev(None, "c")],
        );
        // Only a leading BOM is dropped.
        check("data: \u{feff}x\n\n", &[ev(None, "\u{feff}x")]);
    }

    #[test]
    fn invalid_utf8_does_not_stop_the_stream() {
        let got = decode(&b"data: \xffbad\n\ndata: good\n\n"[..]);
        assert_eq!(got, [ev(None, "\u{fffd}bad"), ev(None, "good")]);
    }

    /// Every recorded fixture, split at every byte offset and fed one byte at a
    /// time, decodes to the same events as the whole input.
    #[test]
    fn fixtures_decode_identically_at_every_split() {
        let fixtures = crate::stream::tests_support::sse_fixtures();
        assert!(fixtures.len() >= 3, "fixtures missing");
        for (name, bytes) in fixtures {
            let whole = decode(bytes.as_slice());
            assert!(!whole.is_empty(), "{name} decoded to nothing");
            for at in 0..=bytes.len() {
                let got = decode(ChunkReader::split_at(&bytes, at));
                assert_eq!(got, whole, "{name} split at {at}");
            }
            assert_eq!(decode(ChunkReader::bytewise(&bytes)), whole, "{name}");
        }
    }
}

//! Streaming detokenisation: token pieces are bytes, and one character may span
//! several tokens. [`Utf8Stream`] hands out only complete characters and holds the
//! incomplete tail back until the next piece arrives.

#![forbid(unsafe_code)]

/// Joins byte pieces into text without ever splitting a UTF-8 character.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Adds `bytes` and returns the text that is now complete.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(text) => {
                    out.push_str(text);
                    self.pending.clear();
                    return out;
                }
                Err(err) => {
                    let valid = err.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match err.error_len() {
                        // An incomplete character at the end: wait for more bytes.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        // Bytes that can never become valid: replace them, go on.
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// Whatever is left at the end of the generation (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pieces: &[&[u8]], expected: &[&str]) {
        let mut stream = Utf8Stream::default();
        let mut got: Vec<String> = pieces.iter().map(|p| stream.push(p)).collect();
        got.push(stream.finish());
        assert_eq!(got, expected);
    }

    #[test]
    fn characters_split_across_pieces_come_out_whole() {
        // "é" is C3 A9, "🦀" is F0 9F A6 80.
        check(&[b"a\xC3", b"\xA9b"], &["a", "éb", ""]);
        check(&[b"\xF0", b"\x9F\xA6", b"\x80!"], &["", "", "🦀!", ""]);
    }

    #[test]
    fn every_split_point_gives_the_same_text() {
        let text = "héllo 🦀 wörld";
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let mut stream = Utf8Stream::default();
            let mut out = stream.push(&bytes[..cut]);
            out += &stream.push(&bytes[cut..]);
            out += &stream.finish();
            assert_eq!(out, text, "cut at {cut}");
        }
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        check(&[b"a\xFFb"], &["a\u{FFFD}b", ""]);
        check(&[b"a\xC3"], &["a", "\u{FFFD}"]);
    }
}

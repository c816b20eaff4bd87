//! The streaming layer shared by every backend: one SSE decoder, one NDJSON
//! reader, one tool-call accumulator and the output filter.
//!
//! Backends (`crate::backend::*`) read their HTTP bodies through [`sse`] or
//! [`ndjson`], merge native tool-call fragments with [`toolcall`], and send
//! model text through [`filter`], which turns `<think>` blocks, code fences and
//! tool-call markup (parsed by [`textcalls`]) into typed [`crate::core::Event`]s.
//! Nothing here does network I/O; everything works on any `BufRead`.

pub mod filter;
pub mod format;
pub mod ndjson;
pub mod sse;
pub mod syntax;
pub mod textcalls;
pub mod toolcall;

use std::io::{self, BufRead};

/// Longest line accepted from a stream; a longer one is an error, not an allocation bomb.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Reads lines ending in LF, CRLF or a lone CR from any `BufRead`, whatever the
/// chunk boundaries, and decodes each whole line as UTF-8 (lossily), so a
/// multi-byte character split across reads is never torn.
pub struct LineReader<R> {
    inner: R,
    /// The previous line ended in CR, so a LF at the start of the next read belongs to it.
    after_cr: bool,
}

impl<R: BufRead> LineReader<R> {
    pub fn new(inner: R) -> Self {
        LineReader {
            inner,
            after_cr: false,
        }
    }

    /// The next line without its terminator, or `None` at EOF. A last line
    /// without a terminator is still returned.
    pub fn next_line(&mut self) -> io::Result<Option<String>> {
        let mut bytes = Vec::new();
        loop {
            let buf = match self.inner.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                return Ok(finish_line(bytes, true));
            }
            let skip = usize::from(self.after_cr && buf[0] == b'\n');
            self.after_cr = false;
            let rest = &buf[skip..];
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    bytes.extend_from_slice(&rest[..end]);
                    self.after_cr = rest[end] == b'\r';
                    self.inner.consume(skip + end + 1);
                    return Ok(finish_line(bytes, false));
                }
                None => {
                    bytes.extend_from_slice(rest);
                    let used = skip + rest.len();
                    self.inner.consume(used);
                }
            }
            if bytes.len() > MAX_LINE_BYTES {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("stream line longer than {MAX_LINE_BYTES} bytes"),
                ));
            }
        }
    }
}

/// What reading one capped line produced ([`read_capped_line`]).
#[derive(Debug, PartialEq, Eq)]
pub enum CappedLine {
    /// A whole line without its `\n` (a last line without one counts too).
    Text(Vec<u8>),
    /// A line longer than the cap, read to its end: its length and its first `cap` bytes.
    TooLong {
        len: usize,
        head: Vec<u8>,
    },
    Eof,
}

/// Reads one `\n`-terminated line, holding at most `cap` bytes of it in memory:
/// the one reader of line protocols a peer writes (the tool server's JSON-RPC,
/// MCP servers' stdout and stderr), so a line without end is never an allocation bomb.
pub fn read_capped_line(reader: &mut impl BufRead, cap: usize) -> io::Result<CappedLine> {
    let mut head = Vec::new();
    let mut len = 0usize;
    loop {
        let buffer = match reader.fill_buf() {
            Ok(buffer) => buffer,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let (piece, done) = match buffer.iter().position(|b| *b == b'\n') {
            Some(at) => (&buffer[..at], Some(at + 1)),
            None if buffer.is_empty() && len == 0 => return Ok(CappedLine::Eof),
            None => (buffer, None),
        };
        let room = cap.saturating_sub(head.len()).min(piece.len());
        head.extend_from_slice(&piece[..room]);
        len += piece.len();
        let (at_end, used) = (buffer.is_empty(), done.unwrap_or(piece.len()));
        reader.consume(used);
        if done.is_some() || at_end {
            return Ok(match len > cap {
                true => CappedLine::TooLong { len, head },
                false => CappedLine::Text(head),
            });
        }
    }
}

/// Decodes a collected line; at EOF an empty collection means "no more lines".
fn finish_line(bytes: Vec<u8>, at_eof: bool) -> Option<String> {
    if at_eof && bytes.is_empty() {
        return None;
    }
    Some(match String::from_utf8(bytes) {
        Ok(line) => line,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// A `Read` that hands out fixed chunks, one per call: the test double that
/// lets the split tests put read boundaries anywhere, even inside a character.
#[cfg(test)]
pub struct ChunkReader {
    chunks: std::collections::VecDeque<Vec<u8>>,
}

#[cfg(test)]
impl ChunkReader {
    pub fn new(chunks: Vec<Vec<u8>>) -> Self {
        ChunkReader {
            chunks: chunks.into_iter().filter(|c| !c.is_empty()).collect(),
        }
    }

    /// The input split once at `at`.
    pub fn split_at(bytes: &[u8], at: usize) -> io::BufReader<Self> {
        let chunks = vec![bytes[..at].to_vec(), bytes[at..].to_vec()];
        io::BufReader::new(ChunkReader::new(chunks))
    }

    /// The input one byte per read.
    pub fn bytewise(bytes: &[u8]) -> io::BufReader<Self> {
        let chunks = bytes.iter().map(|b| vec![*b]).collect();
        io::BufReader::new(ChunkReader::new(chunks))
    }
}

#[cfg(test)]
impl io::Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(chunk) = self.chunks.front_mut() else {
            return Ok(0);
        };
        let n = chunk.len().min(buf.len());
        buf[..n].copy_from_slice(&chunk[..n]);
        chunk.drain(..n);
        if chunk.is_empty() {
            self.chunks.pop_front();
        }
        Ok(n)
    }
}

/// Recorded stream fixtures for the split tests.
#[cfg(test)]
pub mod tests_support {
    use std::path::PathBuf;

    /// Every `tests/fixtures/openai/*.sse` file as (name, bytes), sorted by name.
    pub fn sse_fixtures() -> Vec<(String, Vec<u8>)> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openai");
        let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .expect("fixture directory exists")
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "sse"))
            .map(|path| {
                let name = path.display().to_string();
                let bytes = std::fs::read(&path).expect("fixture readable");
                (name, bytes)
            })
            .collect();
        out.sort();
        out
    }

    /// One fixture by file name.
    pub fn sse_fixture(name: &str) -> Vec<u8> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/openai")
            .join(name);
        std::fs::read(path).expect("fixture readable")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<String> {
        let mut reader = LineReader::new(input);
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().expect("in-memory read") {
            out.push(line);
        }
        out
    }

    fn check(input: &[u8], expected: &[&str]) {
        assert_eq!(lines(input), expected, "input {input:?}");
    }

    fn capped(input: &[u8], cap: usize) -> Vec<String> {
        let mut reader = io::BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        loop {
            match read_capped_line(&mut reader, cap).unwrap() {
                CappedLine::Eof => return out,
                CappedLine::TooLong { len, head } => {
                    assert_eq!(head.len(), cap, "the head keeps the cap's worth");
                    out.push(format!("<{len}>"));
                }
                CappedLine::Text(line) => out.push(String::from_utf8(line).unwrap()),
            }
        }
    }

    #[test]
    fn capped_lines_skip_long_ones_whole() {
        assert_eq!(
            capped(b"ab\n0123456789\ncd\nlast", 5),
            ["ab", "<10>", "cd", "last"]
        );
        assert_eq!(capped(b"", 5), Vec::<String>::new());
        assert_eq!(capped(b"\n\n", 5), ["", ""]);
        assert_eq!(capped(b"12345\n123456", 5), ["12345", "<6>"]);
        let input = b"one\ntwo two\nthree";
        for at in 0..=input.len() {
            let mut reader = ChunkReader::split_at(input, at);
            let mut got = Vec::new();
            while let CappedLine::Text(line) | CappedLine::TooLong { head: line, .. } =
                read_capped_line(&mut reader, 5).unwrap()
            {
                got.push(String::from_utf8(line).unwrap());
            }
            assert_eq!(got, ["one", "two t", "three"], "split at {at}");
        }
    }

    #[test]
    fn line_endings() {
        check(b"a\nb\r\nc\rd", &["a", "b", "c", "d"]);
        check(b"a\r\n\r\nb\n", &["a", "", "b"]);
        check(b"\r\r", &["", ""]);
        check(b"", &[]);
        check(b"x\n", &["x"]);
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        check(b"ok \xff\xfe end\n", &["ok \u{fffd}\u{fffd} end"]);
    }

    #[test]
    fn crlf_split_across_reads_is_one_terminator() {
        let input = b"a\r\nb\r\n";
        for at in 0..=input.len() {
            let mut reader = LineReader::new(ChunkReader::split_at(input, at));
            let mut got = Vec::new();
            while let Some(line) = reader.next_line().expect("in-memory read") {
                got.push(line);
            }
            assert_eq!(got, ["a", "b"], "split at {at}");
        }
    }
}

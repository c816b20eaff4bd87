//! The terminal itself: raw mode, the input thread, and the byte-to-key decoder.
//!
//! The design card puts the terminal input loop on its own thread so that
//! typing and streaming never block each other: [`spawn_input`] reads stdin
//! on the `shepherd-input` thread, decodes keys and bracketed pastes with
//! [`KeyDecoder`], and sends [`Key`]s over a crossbeam channel that the REPL
//! and TUI `select!` on together with the agent's events. termion provides
//! raw mode (restored when the [`RawGuard`] drops) and the terminal size.
//!
//! In raw mode the terminal driver translates nothing, so output goes
//! through [`Crlf`], which turns `\n` into `\r\n`.

use std::io::{self, Read, Write};

use crossbeam_channel::{Receiver, Sender};
use termion::raw::{IntoRawMode, RawTerminal};

use super::editor::Key;

/// Turns bracketed paste on and off (xterm; tmux passes it through).
const PASTE_ON: &str = "\x1b[?2004h";
const PASTE_OFF: &str = "\x1b[?2004l";
const PASTE_END: &[u8] = b"\x1b[201~";

/// Raw mode and bracketed paste for as long as this lives; dropping it
/// (also while unwinding from a panic) restores the terminal.
pub struct RawGuard {
    _raw: RawTerminal<io::Stdout>,
}

impl RawGuard {
    pub fn enter() -> io::Result<RawGuard> {
        let raw = io::stdout().into_raw_mode()?;
        let mut out = io::stdout();
        write!(out, "{PASTE_ON}")?;
        out.flush()?;
        Ok(RawGuard { _raw: raw })
    }
}

impl Drop for RawGuard {
    fn drop(&mut self) {
        let mut out = io::stdout();
        let _ = write!(out, "{PASTE_OFF}");
        let _ = out.flush();
    }
}

/// The terminal's size as (columns, rows), with a usable fallback.
pub fn size() -> (u16, u16) {
    termion::terminal_size()
        .ok()
        .filter(|(w, h)| *w > 0 && *h > 0)
        .unwrap_or((80, 24))
}

/// A writer for raw mode: every `\n` becomes `\r\n`.
pub struct Crlf<W: Write>(pub W);

impl<W: Write> Write for Crlf<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        for (index, part) in buf.split(|b| *b == b'\n').enumerate() {
            if index > 0 {
                self.0.write_all(b"\r\n")?;
            }
            self.0.write_all(part)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// Starts the input thread. The channel closes when stdin reaches EOF or
/// fails. The thread cannot be joined: it sits in a blocking `read` on the
/// terminal, which nothing portable interrupts, and it ends with the process.
pub fn spawn_input() -> io::Result<Receiver<Key>> {
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("shepherd-input".into())
        .spawn(move || read_keys(io::stdin().lock(), &tx))?;
    Ok(rx)
}

fn read_keys(mut input: impl Read, keys: &Sender<Key>) {
    let mut decoder = KeyDecoder::default();
    let mut buf = [0u8; 4096];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        for key in decoder.feed(&buf[..n]) {
            if keys.send(key).is_err() {
                return;
            }
        }
    }
}

/// Decodes terminal input bytes into keys, across read boundaries.
///
/// A lone Esc is told apart from the start of an escape sequence by where
/// the read ended: terminals send a whole sequence in one write, so an ESC
/// that ends a read is the Esc key.
#[derive(Debug, Default)]
pub struct KeyDecoder {
    pending: Vec<u8>,
    /// Inside a bracketed paste: the bytes so far.
    paste: Option<Vec<u8>>,
}

/// What one step of decoding found at the front of the pending bytes.
enum Step {
    /// A key (or nothing, for ignored input) and how many bytes it used.
    Key(Option<Key>, usize),
    /// The start of a paste, `n` bytes long.
    PasteStart(usize),
    /// More bytes are needed.
    Incomplete,
}

impl KeyDecoder {
    /// Decodes one read's worth of bytes.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Key> {
        self.pending.extend_from_slice(bytes);
        let mut keys = Vec::new();
        loop {
            if self.paste.is_some() {
                match self.take_paste() {
                    Some(key) => keys.push(key),
                    None => break,
                }
                continue;
            }
            match decode(&self.pending) {
                Step::Key(key, used) => {
                    self.pending.drain(..used);
                    keys.extend(key);
                }
                Step::PasteStart(used) => {
                    self.pending.drain(..used);
                    self.paste = Some(Vec::new());
                }
                Step::Incomplete if self.pending == [0x1b] => {
                    self.pending.clear();
                    keys.push(Key::Esc);
                }
                Step::Incomplete => break,
            }
            if self.pending.is_empty() {
                break;
            }
        }
        keys
    }

    /// Moves pending bytes into the paste; returns the paste once its end marker came.
    fn take_paste(&mut self) -> Option<Key> {
        let paste = self.paste.as_mut()?;
        paste.append(&mut self.pending);
        let end = paste
            .windows(PASTE_END.len())
            .position(|w| w == PASTE_END)?;
        self.pending = paste.split_off(end + PASTE_END.len());
        paste.truncate(end);
        let text = String::from_utf8_lossy(paste).into_owned();
        self.paste = None;
        Some(Key::Paste(text))
    }
}

fn decode(bytes: &[u8]) -> Step {
    match bytes {
        [] => Step::Incomplete,
        [0x1b, b'[', rest @ ..] => decode_csi(rest),
        [0x1b, b'O', final_byte, ..] => Step::Key(ss3_key(*final_byte), 3),
        [0x1b, b'O'] => Step::Incomplete,
        // ESC ESC: the first is a key of its own.
        [0x1b, 0x1b, ..] => Step::Key(Some(Key::Esc), 1),
        [0x1b] => Step::Incomplete,
        // Alt+key: the Alt is dropped, the key is decoded next.
        [0x1b, ..] => Step::Key(None, 1),
        [byte, ..] if *byte < 0x80 => Step::Key(ascii_key(*byte), 1),
        _ => decode_utf8(bytes),
    }
}

fn ascii_key(byte: u8) -> Option<Key> {
    Some(match byte {
        b'\r' | b'\n' => Key::Enter,
        0x7f | 0x08 => Key::Backspace,
        b'\t' => Key::Char('\t'),
        0x01..=0x1a => Key::Ctrl(char::from(b'a' + byte - 1)),
        0x20..=0x7e => Key::Char(char::from(byte)),
        _ => return None,
    })
}

fn decode_utf8(bytes: &[u8]) -> Step {
    let len = match bytes[0] {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        // A stray continuation byte or an invalid lead byte: skip it.
        _ => return Step::Key(None, 1),
    };
    if bytes.len() < len {
        return Step::Incomplete;
    }
    match std::str::from_utf8(&bytes[..len]) {
        Ok(text) => Step::Key(text.chars().next().map(Key::Char), len),
        Err(_) => Step::Key(None, 1),
    }
}

/// Decodes `ESC [ params final`; `rest` starts after the `[`.
fn decode_csi(rest: &[u8]) -> Step {
    let Some(end) = rest.iter().position(|b| (0x40..=0x7e).contains(b)) else {
        // A runaway sequence is dropped rather than buffered forever.
        return if rest.len() > 16 {
            Step::Key(None, 2 + rest.len())
        } else {
            Step::Incomplete
        };
    };
    let used = 2 + end + 1;
    let params = std::str::from_utf8(&rest[..end]).unwrap_or("");
    let first: u32 = params
        .split(';')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let key = match (rest[end], first) {
        (b'~', 200) => return Step::PasteStart(used),
        (b'~', 1 | 7) => Some(Key::Home),
        (b'~', 4 | 8) => Some(Key::End),
        (b'~', 3) => Some(Key::Delete),
        (b'~', 5) => Some(Key::PageUp),
        (b'~', 6) => Some(Key::PageDown),
        (final_byte, _) => ss3_key(final_byte),
    };
    Step::Key(key, used)
}

/// The arrow and Home/End keys shared by `ESC [ X` and `ESC O X`.
fn ss3_key(final_byte: u8) -> Option<Key> {
    Some(match final_byte {
        b'A' => Key::Up,
        b'B' => Key::Down,
        b'C' => Key::Right,
        b'D' => Key::Left,
        b'H' => Key::Home,
        b'F' => Key::End,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(chunks: &[&[u8]], expected: &[Key]) {
        let mut decoder = KeyDecoder::default();
        let keys: Vec<Key> = chunks.iter().flat_map(|c| decoder.feed(c)).collect();
        assert_eq!(keys, expected, "decoding {chunks:?}");
    }

    #[test]
    fn plain_and_control_keys() {
        check(
            &[b"a\x01\x05\x15\x0b\x17\x03\x04\x7f\r\t"],
            &[
                Key::Char('a'),
                Key::Ctrl('a'),
                Key::Ctrl('e'),
                Key::Ctrl('u'),
                Key::Ctrl('k'),
                Key::Ctrl('w'),
                Key::Ctrl('c'),
                Key::Ctrl('d'),
                Key::Backspace,
                Key::Enter,
                Key::Char('\t'),
            ],
        );
    }

    #[test]
    fn escape_sequences() {
        let arrows = [Key::Up, Key::Down, Key::Right, Key::Left];
        check(&[b"\x1b[A\x1b[B\x1b[C\x1b[D"], &arrows);
        check(&[b"\x1bOA\x1bOB\x1bOC\x1bOD"], &arrows);
        check(
            &[b"\x1b[H\x1b[F\x1b[1~\x1b[4~\x1b[3~\x1b[5~\x1b[6~\x1b[1;5C"],
            &[
                Key::Home,
                Key::End,
                Key::Home,
                Key::End,
                Key::Delete,
                Key::PageUp,
                Key::PageDown,
                Key::Right,
            ],
        );
    }

    #[test]
    fn lone_escape_is_told_apart_by_the_end_of_a_read() {
        check(&[b"\x1b"], &[Key::Esc]);
        check(&[b"\x1b", b"\x1b"], &[Key::Esc, Key::Esc]);
        check(&[b"\x1b\x1b"], &[Key::Esc, Key::Esc]);
        check(&[b"\x1b[", b"A"], &[Key::Up]);
        // Alt+x is x.
        check(&[b"\x1bx"], &[Key::Char('x')]);
    }

    #[test]
    fn utf8_split_across_reads() {
        let text = "é✓😀";
        let bytes = text.as_bytes();
        let expected: Vec<Key> = text.chars().map(Key::Char).collect();
        for split in 0..=bytes.len() {
            check(&[&bytes[..split], &bytes[split..]], &expected);
        }
        // Invalid bytes are skipped, not fatal.
        check(&[b"\xff\x80a"], &[Key::Char('a')]);
    }

    #[test]
    fn bracketed_paste_split_at_every_offset() {
        let bytes = b"x\x1b[200~one\r\ntwo \xe2\x9c\x93\nthree\x1b[201~y";
        let expected = [
            Key::Char('x'),
            Key::Paste("one\r\ntwo ✓\nthree".into()),
            Key::Char('y'),
        ];
        for split in 0..=bytes.len() {
            let (a, b) = bytes.split_at(split);
            // A read ending right after the paste-start ESC cannot be told from
            // the Esc key; terminals never split a sequence there.
            if split == 2 {
                continue;
            }
            check(&[a, b], &expected);
        }
    }

    #[test]
    fn runaway_sequence_is_dropped() {
        let mut bytes = b"\x1b[".to_vec();
        bytes.extend_from_slice(&[b'1'; 20]);
        check(&[&bytes, b"a"], &[Key::Char('a')]);
        check(&[b"\x1b[99z"], &[]);
    }

    #[test]
    fn crlf_translation() {
        let mut out = Crlf(Vec::new());
        out.write_all(b"a\nb\n\nc").unwrap();
        assert_eq!(out.0, b"a\r\nb\r\n\r\nc");
    }
}

//! How the output filter finds where things start: the scan of shown text for
//! the first marker, bare JSON call or partial marker (a marker counts only
//! where its [`Marker`] row allows, never inside inline code), the closing fence
//! inside code, the calls that end or act within reasoning, and the brace
//! matching that holds a bare JSON call until it closes.

use crate::stream::format::{Marker, Opener, FENCE, MARKERS};

pub(super) const FENCE_MARKER: Marker = Marker {
    tag: FENCE,
    opener: Opener::Fence,
    line_start: true,
    ends_reasoning: false,
};

/// Incremental brace matching over held JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct JsonScan {
    pub(super) pos: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The first key's quote was seen (so `{` starting prose is let go at once).
    keyed: bool,
}

pub(super) enum JsonProgress {
    Complete(usize),
    Incomplete,
    NotACall,
}

/// Where a scan of text stopped.
pub(super) enum Scan {
    /// A marker starts at this byte.
    Opener(usize, Marker),
    /// A possible bare JSON call starts at this byte.
    Json(usize),
    /// The text from this byte may be the start of a tag: hold it.
    Hold(usize),
    Clear,
}

pub(super) fn is_call(marker: &Marker) -> bool {
    matches!(marker.opener, Opener::Markup(_))
}

/// Where the first call marker of a family that writes its calls inside its
/// reasoning ([`Marker::ends_reasoning`], Kimi's) starts in reasoning `text`: it
/// ends the block wherever it stands.
pub(super) fn ending_call(text: &str) -> Option<usize> {
    let ends = MARKERS.iter().filter(|m| m.ends_reasoning);
    ends.filter_map(|m| text.find(m.tag)).min()
}

/// Where, in a block the prompt opened, the first call marker at the start of a
/// line starts (`line_start`: the text follows a line's start): a model that never
/// closes its reasoning starts to act there (Qwen3.5), if the block does not close
/// after it. A marker inside a sentence is reasoning text.
pub(super) fn acting_call(text: &str, line_start: bool) -> Option<usize> {
    let at_line_start = |at: usize| {
        let before = &text[..at];
        let line = match before.rfind('\n') {
            Some(newline) => &before[newline + 1..],
            None if line_start => before,
            None => return false,
        };
        line.chars().all(char::is_whitespace)
    };
    MARKERS
        .iter()
        .filter(|m| is_call(m))
        .flat_map(|m| {
            let found = text.match_indices(m.tag).map(|(at, _)| at);
            found.filter(|&at| at_line_start(at)).take(1)
        })
        .min()
}

/// The first of `tags` found in `text` from byte `from`: its start and length.
pub(super) fn find_any(text: &str, from: usize, tags: &[&str]) -> Option<(usize, usize)> {
    tags.iter()
        .filter_map(|tag| text[from..].find(tag).map(|at| (from + at, tag.len())))
        .min()
}

/// Whether the character after `text` would start a line.
pub(super) fn ends_at_line_start(text: &str, before: bool) -> bool {
    let tail = match text.rfind('\n') {
        Some(newline) => &text[newline + 1..],
        None if before => text,
        None => return false,
    };
    tail.chars().all(char::is_whitespace)
}

fn update_line_start(line_start: bool, c: char) -> bool {
    if c == '\n' {
        true
    } else {
        line_start && c.is_whitespace()
    }
}

/// Finds the first marker (some only at a line start), possible JSON call, or
/// possible partial marker at the end of `text`. A marker inside inline code (after
/// an unclosed backtick on the line) is text: prose quoting a format.
pub(super) fn scan_text(text: &str, mut at: Position, extra: &[Option<Marker>]) -> Scan {
    let markers = || MARKERS.iter().chain(extra.iter().flatten());
    let mut previous = None;
    for (i, c) in text.char_indices() {
        if markers().any(|m| m.tag.starts_with(c)) {
            let rest = &text[i..];
            let eligible = |m: &&Marker| (!m.line_start || at.line_start) && !at.inline_code;
            if let Some(marker) = markers().filter(eligible).find(|m| rest.starts_with(m.tag)) {
                return Scan::Opener(i, *marker);
            }
            if markers().filter(eligible).any(|m| m.tag.starts_with(rest)) {
                return Scan::Hold(i);
            }
        }
        if c == '{' && at.line_start {
            return Scan::Json(i);
        }
        at = at.after(c, previous);
        previous = Some(c);
    }
    Scan::Clear
}

/// Where shown text stands: at the start of a line (only whitespace since the
/// last newline), inside inline code (an odd number of backtick runs since it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Position {
    pub(super) line_start: bool,
    pub(super) inline_code: bool,
}

impl Position {
    /// The position after `c`, which follows `previous`.
    fn after(self, c: char, previous: Option<char>) -> Position {
        Position {
            line_start: update_line_start(self.line_start, c),
            inline_code: match c {
                '\n' => false,
                '`' if previous != Some('`') => !self.inline_code,
                _ => self.inline_code,
            },
        }
    }

    /// The position after `text`.
    pub(super) fn after_text(self, text: &str) -> Position {
        let mut at = self;
        let mut previous = None;
        for c in text.chars() {
            at = at.after(c, previous);
            previous = Some(c);
        }
        at
    }
}

/// Finds a closing fence at a line start inside code.
pub(super) fn scan_fence(text: &str, mut line_start: bool) -> Scan {
    for (i, c) in text.char_indices() {
        if c == '`' && line_start {
            let rest = &text[i..];
            if rest.starts_with(FENCE) {
                return Scan::Opener(i, FENCE_MARKER);
            }
            if FENCE.starts_with(rest) {
                return Scan::Hold(i);
            }
        }
        line_start = update_line_start(line_start, c);
    }
    Scan::Clear
}

/// The length of the longest proper prefix of `tag` that ends `text`.
pub(super) fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| {
            tag.is_char_boundary(n)
                && text.len() >= n
                && text.is_char_boundary(text.len() - n)
                && text.ends_with(&tag[..n])
        })
        .unwrap_or(0)
}

impl JsonScan {
    /// Scans on from `self.pos`; `bytes[0]` is the opening brace. Structural
    /// characters are ASCII, so scanning bytes never misreads UTF-8.
    pub(super) fn advance(&mut self, bytes: &[u8]) -> JsonProgress {
        while self.pos < bytes.len() {
            let b = bytes[self.pos];
            self.pos += 1;
            if self.depth > 0 && !self.keyed {
                if b.is_ascii_whitespace() {
                    continue;
                }
                if b != b'"' {
                    return JsonProgress::NotACall;
                }
                self.keyed = true;
            }
            if self.in_string {
                self.scan_string_byte(b);
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return JsonProgress::Complete(self.pos);
                    }
                }
                _ => {}
            }
        }
        JsonProgress::Incomplete
    }

    fn scan_string_byte(&mut self, b: u8) {
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
        }
    }
}

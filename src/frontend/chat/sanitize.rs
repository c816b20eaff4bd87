//! Untrusted text made safe to show on a terminal: control characters are
//! spelled out instead of obeyed.
//!
//! Model output, tool output, tool arguments and upstream error bodies may
//! carry terminal control sequences: an OSC 52 clipboard write
//! (`ESC ] 52 ; c ; BASE64 BEL`), `ESC [ 2 J` to clear the screen, cursor
//! moves that overwrite what was shown, OSC 8 hyperlinks whose target differs
//! from their text, 8-bit C1 controls such as CSI (U+009B), and the Unicode
//! bidi overrides that reorder what a line appears to say. Printed raw, any of
//! them could act on the user's terminal or disguise what a tool call asks the
//! user to approve. [`visible`] turns each such character into printable
//! text, as other agent CLIs do: ESC becomes `\x1b`, BEL `\x07`, a carriage
//! return `\r`, a C1 control or bidi control `<U+009B>`, `<U+202E>`.
//! Newlines and tabs stay as they are.
//!
//! Every character is judged on its own, with no state, so a sequence split
//! across two streamed deltas comes out exactly as if it had arrived whole:
//! `visible(a) + visible(b) == visible(a + b)` for every split.
//!
//! A carriage return is spelled out rather than turned into a newline: alone
//! it would move the cursor back so later text overwrites the line (the
//! thing to prevent), and mapping it to a newline would either double every
//! CRLF line break or need state across deltas to see the `\n` that follows.
//! CRLF text therefore shows a `\r` before each line break, which hides
//! nothing.
//!
//! The renderer (`render.rs`) calls this on every piece of untrusted text
//! before adding its own colours, and the REPL and TUI call it on the lines
//! they print themselves; `--json` and output to a pipe keep the exact text.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every terminal control character spelled out, borrowed
/// unchanged when there is none. The result never contains a control
/// character other than `\n` and `\t`, so applying it twice changes nothing.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        push_visible(&mut shown, c);
    }
    Cow::Owned(shown)
}

/// Whether a terminal could act on `c` instead of printing it: C0 controls
/// but newline and tab, DEL, C1 controls, and the bidi embeddings, overrides
/// and isolates (the characters of CVE-2021-42574, "Trojan Source").
fn is_unsafe(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

fn push_visible(shown: &mut String, c: char) {
    // Writing to a String cannot fail, so the `write!` results are ignored.
    match c {
        c if !is_unsafe(c) => shown.push(c),
        '\r' => shown.push_str("\\r"),
        c if c.is_ascii() => {
            let _ = write!(shown, "\\x{:02x}", u32::from(c));
        }
        c => {
            let _ = write!(shown, "<U+{:04X}>", u32::from(c));
        }
    }
}

#[cfg(test)]
mod tests;

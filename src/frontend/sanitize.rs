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
mod tests {
    use super::*;

    /// One sample of each class of sequence, with multi-byte text around them.
    const SAMPLE: &str = "ü clip:\x1b]52;c;aGVsbG8=\x07 clear:\x1b[2J home:\x1b[H up:\x1b[3A \
         link:\x1b]8;;http://evil.example/\x1b\\here\x1b]8;;\x1b\\ csi8:\u{9b}31m \
         nel:\u{85} bidi:\u{202e}gnp.exe\u{202c} iso:\u{2066}x\u{2069} cr:a\rb \
         bs:a\x08b del:\x7f nul:\0 tab:\tnl:\n界✓";

    const SAMPLE_SHOWN: &str = "ü clip:\\x1b]52;c;aGVsbG8=\\x07 clear:\\x1b[2J home:\\x1b[H \
         up:\\x1b[3A link:\\x1b]8;;http://evil.example/\\x1b\\here\\x1b]8;;\\x1b\\ \
         csi8:<U+009B>31m nel:<U+0085> bidi:<U+202E>gnp.exe<U+202C> \
         iso:<U+2066>x<U+2069> cr:a\\rb bs:a\\x08b del:\\x7f nul:\\x00 tab:\tnl:\n界✓";

    fn check(input: &str, expected: &str) {
        assert_eq!(visible(input), expected, "input {input:?}");
    }

    #[test]
    fn each_class_of_control_is_spelled_out() {
        check("\x1b]52;c;aGVsbG8=\x07", "\\x1b]52;c;aGVsbG8=\\x07");
        check("\x1b[2J", "\\x1b[2J");
        check("\x1b[H\x1b[3A\x1b[10;5H", "\\x1b[H\\x1b[3A\\x1b[10;5H");
        check(
            "\x1b]8;;https://x.example/\x1b\\text\x1b]8;;\x1b\\",
            "\\x1b]8;;https://x.example/\\x1b\\text\\x1b]8;;\\x1b\\",
        );
        check(
            "\u{80}\u{9b}2J\u{9d}\u{9f}",
            "<U+0080><U+009B>2J<U+009D><U+009F>",
        );
        check(
            "\u{202a}\u{202b}\u{202c}\u{202d}\u{202e}",
            "<U+202A><U+202B><U+202C><U+202D><U+202E>",
        );
        check(
            "\u{2066}\u{2067}\u{2068}\u{2069}",
            "<U+2066><U+2067><U+2068><U+2069>",
        );
        check("\0\x01\x08\x0b\x0c\x7f", "\\x00\\x01\\x08\\x0b\\x0c\\x7f");
        check("over\rwrite", "over\\rwrite");
        check(SAMPLE, SAMPLE_SHOWN);
    }

    #[test]
    fn text_without_controls_is_borrowed_unchanged() {
        for text in ["", "plain", "tab\tand\nnewline", "ünïcode 界 ✓ 👨‍👩‍👧 עברית"]
        {
            assert!(matches!(visible(text), Cow::Borrowed(t) if t == text));
        }
        // Characters next to the ranges are not touched.
        check(
            "\u{7e}\u{a0}\u{2029}\u{206a}",
            "\u{7e}\u{a0}\u{2029}\u{206a}",
        );
    }

    #[test]
    fn nothing_a_terminal_obeys_survives_and_a_second_pass_changes_nothing() {
        let shown = visible(SAMPLE);
        assert!(!shown.chars().any(is_unsafe), "{shown:?}");
        assert!(!shown.contains('\x1b') && !shown.contains('\x07'));
        assert_eq!(visible(&shown), shown);
    }

    #[test]
    fn a_sequence_split_across_deltas_comes_out_as_if_whole() {
        // Deltas are `String`s, so a split can fall only between characters;
        // every such byte offset of the sample is tried.
        let whole = visible(SAMPLE);
        assert_eq!(whole, SAMPLE_SHOWN);
        for split in (0..=SAMPLE.len()).filter(|&i| SAMPLE.is_char_boundary(i)) {
            let (first, second) = SAMPLE.split_at(split);
            let joined = format!("{}{}", visible(first), visible(second));
            assert_eq!(joined, whole, "split at byte {split}");
        }
    }
}

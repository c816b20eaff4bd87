//! Tests of [`super`] (sanitize.rs).

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

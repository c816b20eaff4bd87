//! Shortening tool results so they fit the context left for the answer.
//!
//! The agent computes a budget with [`context_limit_tokens`], converts it to
//! characters with its backend's chars-per-token ratio, and passes each
//! result through [`truncate_output`] before it enters the session. The head
//! and a shorter tail of the text are kept (errors are often at the end), cut
//! at line boundaries where possible and never inside a UTF-8 character.

use super::ToolOutput;

/// Tokens a tool result may use: the free context times a scale that grows with the context.
pub fn context_limit_tokens(
    ctx_size: u64,
    system: u64,
    last_user: u64,
    last_assistant: u64,
) -> u64 {
    let used = system
        .saturating_add(last_user)
        .saturating_add(last_assistant);
    let free = ctx_size.saturating_sub(used);
    let scale = (0.33 + ctx_size as f64 / 80_000.0 * 0.27).clamp(0.33, 0.60);
    (free as f64 * scale) as u64
}

/// Cuts `output.content` to about `limit_chars` characters (plus the marker).
pub fn truncate_output(output: ToolOutput, limit_chars: usize) -> ToolOutput {
    let total_chars = output.content.chars().count();
    if total_chars <= limit_chars {
        return output;
    }
    let lines: Vec<&str> = output.content.split_inclusive('\n').collect();
    let head_budget = limit_chars - limit_chars / 4;
    let (head, head_lines) = take_head(&lines, head_budget);
    let (tail, tail_lines) = take_tail(
        &lines[head_lines.min(lines.len())..],
        limit_chars - head.chars().count(),
    );
    let shown = head_lines + tail_lines;
    let head_end = head.len();
    let tail_from = output.content.len() - tail.len();
    let mut content = head;
    if !content.is_empty() && !content.ends_with('\n') {
        content.push('\n');
    }
    content.push_str(&format!(
        "[TRUNCATED: output too large; showing {shown} of {} lines ({limit_chars} of {total_chars} characters). \
         Original length: {} lines. Narrow the command or read a range (offset/limit) to see the rest.]\n",
        lines.len(),
        lines.len()
    ));
    let tail_at = content.len();
    content.push_str(&tail);
    // The head and tail keep their images where they were; one in the text
    // cut out stands at the cut, so truncation never drops an image.
    let mut images = output.images;
    for part in &mut images {
        part.at = if part.at <= head_end {
            part.at
        } else if part.at >= tail_from {
            part.at - tail_from + tail_at
        } else {
            head_end
        };
    }
    ToolOutput {
        content,
        summary: format!("Truncated: {shown}/{} lines", lines.len()),
        error: output.error,
        images: Vec::new(),
    }
    .with_images(images)
}

/// Whole leading lines within `budget` chars; a first line that alone is too long is cut.
fn take_head(lines: &[&str], budget: usize) -> (String, usize) {
    let mut text = String::new();
    let mut used = 0;
    for (n, line) in lines.iter().enumerate() {
        let len = line.chars().count();
        if used + len > budget {
            if n == 0 {
                return (line.chars().take(budget).collect(), 0);
            }
            return (text, n);
        }
        used += len;
        text.push_str(line);
    }
    (text, lines.len())
}

/// Whole trailing lines within `budget` chars.
fn take_tail(lines: &[&str], budget: usize) -> (String, usize) {
    let mut used = 0;
    let mut count = 0;
    for line in lines.iter().rev() {
        let len = line.chars().count();
        if used + len > budget {
            break;
        }
        used += len;
        count += 1;
    }
    (lines[lines.len() - count..].concat(), count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_math() {
        // 8k context: scale 0.33 + 0.027 = 0.357 of the free 7000.
        assert_eq!(context_limit_tokens(8_000, 500, 300, 200), 2_499);
        // 1k context: scale 0.333375.
        assert_eq!(context_limit_tokens(1_000, 0, 0, 0), 333);
        assert_eq!(context_limit_tokens(0, 0, 0, 0), 0);
        // Large contexts cap at 0.60.
        assert_eq!(context_limit_tokens(200_000, 10_000, 0, 0), 114_000);
        // A full context leaves nothing, without underflow.
        assert_eq!(context_limit_tokens(1_000, 900, 200, 0), 0);
    }

    fn output(content: &str) -> ToolOutput {
        ToolOutput::ok(content, "s")
    }

    #[test]
    fn short_output_is_unchanged() {
        assert_eq!(truncate_output(output("abc\n"), 4), output("abc\n"));
    }

    #[test]
    fn keeps_head_and_tail_with_marker() {
        let text: String = (1..=100).map(|i| format!("line {i:03}\n")).collect();
        let out = truncate_output(output(&text), 200);
        // 9 chars per line: head budget 150 → 16 lines, tail budget 56 → 6 lines.
        assert!(out.content.starts_with("line 001\n"));
        assert!(out
            .content
            .contains("line 016\n[TRUNCATED: output too large; showing 22 of 100 lines"));
        assert!(out
            .content
            .ends_with("line 095\nline 096\nline 097\nline 098\nline 099\nline 100\n"));
        assert!(!out.content.contains("line 017"));
        assert_eq!(out.summary, "Truncated: 22/100 lines");
    }

    #[test]
    fn never_cuts_inside_a_character() {
        let text = "é".repeat(50);
        // Head budget: 10 - 10/4 = 8 characters of 2 bytes each.
        let out = truncate_output(output(&text), 10);
        assert!(
            out.content
                .starts_with(&format!("{}\n[TRUNCATED", "é".repeat(8))),
            "{}",
            out.content
        );
        assert_eq!(out.summary, "Truncated: 0/1 lines");
    }

    #[test]
    fn images_keep_their_place_or_stand_at_the_cut() {
        use crate::core::image::{test_png, Image, ImagePart};
        let text: String = (1..=100).map(|i| format!("line {i:03}\n")).collect();
        let image = Image::from_bytes(test_png(1, 1, [0, 0, 0])).unwrap();
        let at = |line: usize| ImagePart {
            at: (line - 1) * 9,
            image: image.clone(),
        };
        let images = vec![at(2), at(50), at(100)];
        let out = truncate_output(output(&text).with_images(images), 200);
        let before = |part: &ImagePart| &out.content[..part.at];
        assert!(before(&out.images[0]).ends_with("line 001\n"));
        assert!(before(&out.images[1]).ends_with("line 016\n"));
        assert!(before(&out.images[2]).ends_with("line 099\n"));
        assert!(out.content[out.images[2].at..].starts_with("line 100"));
    }

    #[test]
    fn error_flag_is_kept() {
        let mut long = output(&"x\n".repeat(100));
        long.error = true;
        assert!(truncate_output(long, 10).error);
    }
}

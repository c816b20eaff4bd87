//! Turns a job's events into the text the API returns, the same way for a
//! streamed and a whole answer (so the two are identical at temperature 0).
//!
//! The output filter strips code fences into [`Event::CodeBlock`]; an API
//! client wants the markdown back, so fences are restored here (the
//! language tag is not kept by the filter and is not restored). With
//! `--use-tools`, each server tool run is shown as `name(args)` and its
//! one-line summary, so a client sees what ran on the server.

use crate::core::{Event, Stats, TokenLogprobs};

/// A piece of the answer, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Reasoning(String),
}

/// Collects the answer as it streams.
#[derive(Debug, Default)]
pub struct Assembler {
    in_code: bool,
    /// Whether everything so far ends with a newline (or nothing was written).
    at_line_start: bool,
    pub text: String,
    pub reasoning: String,
    /// The backend's figures for the last generation.
    pub stats: Option<Stats>,
    /// Every generated token's probabilities, when the request asked for them.
    pub logprobs: Vec<TokenLogprobs>,
    /// How many of `logprobs` streamed chunks carried already.
    sent: usize,
    /// The prompt's tokens and how many came from the cache, once read
    /// ([`Event::Prefilled`]).
    pub prefilled: Option<(u64, u64)>,
    /// The rendered prompt, when the request asked for it ([`Event::Prefilled`]).
    pub rendered: Option<String>,
    /// The latest figures of the running generation, when the request asked
    /// for them ([`Event::Progress`]).
    pub figures: Option<Stats>,
}

impl Assembler {
    pub fn new() -> Assembler {
        Assembler {
            at_line_start: true,
            ..Assembler::default()
        }
    }

    /// The piece `event` adds to the answer, if any.
    pub fn push(&mut self, event: Event) -> Option<Piece> {
        match event {
            Event::Content(text) => {
                let mut out = self.close_fence();
                out.push_str(&text);
                self.text(out)
            }
            Event::CodeBlock(text) => {
                let mut out = String::new();
                if !self.in_code {
                    if !self.at_line_start {
                        out.push('\n');
                    }
                    out.push_str("```\n");
                    self.in_code = true;
                }
                out.push_str(&text);
                self.text(out)
            }
            Event::Thinking(text) if !text.is_empty() => {
                self.reasoning.push_str(&text);
                Some(Piece::Reasoning(text))
            }
            Event::ToolCall(call) => {
                let mut out = self.close_fence();
                if !self.at_line_start {
                    out.push('\n');
                }
                out.push_str(&format!("{}({})\n", call.name, call.arguments));
                self.text(out)
            }
            Event::ToolResult(result) => self.text(format!("{}\n", result.summary)),
            Event::Stats(stats) => {
                self.stats = Some(stats);
                None
            }
            Event::Logprobs(probs) => {
                self.logprobs.extend(probs);
                None
            }
            Event::Prefilled {
                prompt_tokens,
                cached_tokens,
                rendered,
            } => {
                self.prefilled = Some((prompt_tokens, cached_tokens));
                self.rendered = rendered;
                None
            }
            Event::Progress(progress) => {
                self.figures = Some(progress.stats);
                None
            }
            _ => None,
        }
    }

    /// Closes a code block left open at the end; an empty text when only token
    /// probabilities are left to send.
    pub fn finish(&mut self) -> Option<Piece> {
        let out = self.close_fence();
        match self.text(out) {
            None if self.sent < self.logprobs.len() => Some(Piece::Text(String::new())),
            piece => piece,
        }
    }

    /// The token probabilities no streamed chunk carried yet, now counted as sent,
    /// and the latest figures.
    pub fn unsent(&mut self) -> (&[TokenLogprobs], Option<&Stats>) {
        let from = std::mem::replace(&mut self.sent, self.logprobs.len());
        (&self.logprobs[from..], self.figures.as_ref())
    }

    fn close_fence(&mut self) -> String {
        if !self.in_code {
            return String::new();
        }
        self.in_code = false;
        if self.at_line_start {
            "```\n".to_string()
        } else {
            "\n```\n".to_string()
        }
    }

    fn text(&mut self, text: String) -> Option<Piece> {
        if text.is_empty() {
            return None;
        }
        self.at_line_start = text.ends_with('\n');
        self.text.push_str(&text);
        Some(Piece::Text(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_are_restored_around_code_and_streamed_pieces_add_up() {
        let mut assembler = Assembler::new();
        let events = [
            Event::Thinking("hmm".into()),
            Event::Content("Run:\n".into()),
            Event::CodeBlock("ls\n".into()),
            Event::CodeBlock("pwd\n".into()),
            Event::Content("done".into()),
            Event::CodeBlock("x".into()),
        ];
        let mut streamed = String::new();
        for event in events {
            if let Some(Piece::Text(t)) = assembler.push(event) {
                streamed.push_str(&t);
            }
        }
        if let Some(Piece::Text(t)) = assembler.finish() {
            streamed.push_str(&t);
        }
        assert_eq!(streamed, "Run:\n```\nls\npwd\n```\ndone\n```\nx\n```\n");
        assert_eq!(assembler.text, streamed);
        assert_eq!(assembler.reasoning, "hmm");
    }
}

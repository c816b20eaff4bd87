//! The chat front-ends: the REPL, the TUI, the plain line mode and `--json`,
//! with what they share: rendering, the line editor, the terminal, slash
//! commands, tool approval prompts, attachments and the text sanitizer.

pub(super) mod approve;
pub(super) mod attach;
pub(super) mod editor;
pub(super) mod json;
pub(super) mod line;
pub(super) mod render;
pub(super) mod repl;
pub(super) mod sanitize;
pub(super) mod slash;
pub(super) mod stats_line;
pub(super) mod terminal;
pub(super) mod tui;

//! Model loading progress for the user: a bar on a terminal's stderr, a
//! `loading` line per step in `--json` mode, nothing on pipes.
//!
//! llama.cpp reports progress many times per percent; each reporter here
//! passes on only what changed what the user sees.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::config::resolve::Mode;
use crate::llama::LoadProgress;

/// Width of the terminal bar in characters.
const BAR_WIDTH: u32 = 30;

/// `--json` reports progress in steps of this many percent (and at 100).
const JSON_STEP: u32 = 5;

/// What shows the loading progress in `mode`: JSON lines for `--json`, a bar
/// when stderr is a terminal, else nothing.
pub fn for_mode(mode: &Mode) -> Option<LoadProgress> {
    if *mode == Mode::JsonLines {
        return Some(json_lines());
    }
    std::io::stderr().is_terminal().then(terminal_bar)
}

/// The bar on stderr, erased once loading is complete.
fn terminal_bar() -> LoadProgress {
    let shown = AtomicU32::new(u32::MAX);
    LoadProgress::new(move |progress| {
        let percent = (progress * 100.0) as u32;
        if shown.swap(percent, Ordering::Relaxed) == percent {
            return;
        }
        let _ = std::io::stderr().write_all(bar_line(percent).as_bytes());
        let _ = std::io::stderr().flush();
    })
}

/// One redraw of the bar at `percent`; at 100 it erases itself.
fn bar_line(percent: u32) -> String {
    let percent = percent.min(100);
    let filled = (percent * BAR_WIDTH / 100) as usize;
    let bar = format!(
        "{}{}",
        "#".repeat(filled),
        ".".repeat(BAR_WIDTH as usize - filled)
    );
    let end = if percent == 100 { "\r\x1b[K" } else { "" };
    format!("\rloading model [{bar}] {percent:3}%{end}")
}

/// `{"type":"loading","progress":0.25}` lines on stdout, every [`JSON_STEP`] percent.
fn json_lines() -> LoadProgress {
    let shown = AtomicU32::new(u32::MAX);
    LoadProgress::new(move |progress| {
        let step = (progress * 100.0) as u32 / JSON_STEP * JSON_STEP;
        if shown.swap(step, Ordering::Relaxed) != step {
            loading_line(step as f32 / 100.0);
        }
    })
}

/// `--json`'s `loading` line: how far loading the in-process model has got,
/// 0.0 to 1.0. Written here, before the session (and `json.rs`'s other lines)
/// exists.
#[derive(serde::Serialize)]
struct LoadingLine {
    r#type: &'static str,
    progress: f32,
}

/// Writes a `loading` line to stdout.
fn loading_line(progress: f32) {
    let line = LoadingLine {
        r#type: "loading",
        progress,
    };
    if let Ok(text) = serde_json::to_string(&line) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_fills_with_the_percentage_and_erases_itself_at_the_end() {
        assert_eq!(
            bar_line(0),
            format!("\rloading model [{}]   0%", ".".repeat(30))
        );
        let half = bar_line(50);
        assert!(
            half.contains(&format!("[{}{}]", "#".repeat(15), ".".repeat(15))),
            "{half}"
        );
        assert!(half.ends_with(" 50%"), "{half}");
        assert!(bar_line(100).ends_with("100%\r\x1b[K"));
        assert_eq!(bar_line(250), bar_line(100));
    }
}

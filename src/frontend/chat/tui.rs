//! The full-screen front-end (`--tui`): a scrollback pane, the queue of
//! text typed ahead, an input box that grows with its content, and a status
//! bar with `provider | model` and `tokens/context`.
//!
//! It shares everything but drawing with the REPL: keys come from the input
//! thread (`terminal.rs`) and are edited by `editor.rs`; events are rendered
//! by the shared [`Renderer`] into a buffer whose lines become the
//! scrollback; commands and the queue live in `slash.rs`. Text the TUI
//! shows outside the renderer (command output, queued input, the status
//! bar) goes through [`sanitize::visible`] too, so the only escape sequences
//! that reach the screen are the TUI's own drawing. The loop also
//! ticks so that a resized terminal is redrawn. The alternate screen and raw
//! mode are left on drop, and a panic hook leaves them before the message is
//! printed, so an error never leaves the terminal unusable.

use std::cell::RefCell;
use std::io::{self, Write};
use std::rc::Rc;
use std::time::Duration;

use crossbeam_channel::{select, tick, Receiver};

use crate::agent::AgentHandle;
use crate::backend::BackendInfo;
use crate::config::resolve::Settings;
use crate::config::ProviderConfig;
use crate::core::{Event, Stats};

use super::approve::PendingApproval;
use super::editor::{Action, Editor, Key};
use super::render::{self, RenderOptions, Renderer};
use super::repl::{self, Interactive};
use super::sanitize;
use super::slash::{Conversation, Started};
use super::terminal::{self, RawGuard};

/// Scrollback lines kept; older ones are dropped.
const SCROLLBACK_LINES: usize = 20_000;
/// How often the terminal size is checked for a redraw.
const RESIZE_CHECK: Duration = Duration::from_millis(200);
const ENTER_SCREEN: &str = "\x1b[?1049h\x1b[H\x1b[2J";
const LEAVE_SCREEN: &str = "\x1b[?1049l\x1b[?25h";
const REVERSE: &str = "\x1b[7m";
const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";

/// The alternate screen for as long as this lives.
struct AltScreen;

impl AltScreen {
    fn enter() -> io::Result<AltScreen> {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = write!(io::stdout(), "{LEAVE_SCREEN}");
            let _ = io::stdout().flush();
            previous(info);
        }));
        write!(io::stdout(), "{ENTER_SCREEN}")?;
        io::stdout().flush()?;
        Ok(AltScreen)
    }
}

impl Drop for AltScreen {
    fn drop(&mut self) {
        let _ = write!(io::stdout(), "{LEAVE_SCREEN}");
        let _ = io::stdout().flush();
    }
}

/// A `Write` the renderer fills; the TUI moves its bytes into the scrollback.
#[derive(Clone, Default)]
struct SharedBuf(Rc<RefCell<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The scrollback: whole lines plus the line being streamed.
#[derive(Default)]
pub struct Scrollback {
    lines: Vec<String>,
    partial: String,
    /// Pane rows scrolled up from the bottom.
    offset: usize,
    /// Bytes of a UTF-8 character cut between two writes.
    pending: Vec<u8>,
}

impl Scrollback {
    /// Appends rendered bytes; a character split between writes is kept whole.
    pub fn push_bytes(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(text) => text.len(),
            Err(error) => error.valid_up_to(),
        };
        let text = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
        self.pending.drain(..valid);
        self.push_str(&text);
    }

    fn push_str(&mut self, text: &str) {
        let mut parts = text.split('\n');
        if let Some(first) = parts.next() {
            self.partial.push_str(first);
        }
        for part in parts {
            let line = std::mem::replace(&mut self.partial, part.to_string());
            self.lines.push(line);
        }
        let excess = self.lines.len().saturating_sub(SCROLLBACK_LINES);
        self.lines.drain(..excess);
    }

    /// The last `rows` screen rows of `width` columns, `offset` rows up from the bottom.
    pub fn rows(&self, width: usize, rows: usize) -> Vec<String> {
        let mut wrapped: Vec<String> = Vec::new();
        let wanted = rows + self.offset;
        let partial = (!self.partial.is_empty()).then_some(&self.partial);
        for line in partial.into_iter().chain(self.lines.iter().rev()) {
            let mut pieces = wrap(line, width);
            pieces.reverse();
            wrapped.extend(pieces);
            if wrapped.len() >= wanted {
                break;
            }
        }
        let offset = self.offset.min(wrapped.len().saturating_sub(rows));
        let mut shown: Vec<String> = wrapped.into_iter().skip(offset).take(rows).collect();
        shown.reverse();
        shown
    }

    /// PgUp (`-1`) and PgDn (`+1`), a page at a time.
    pub fn scroll(&mut self, direction: i32, page: usize) {
        self.offset = if direction < 0 {
            (self.offset + page).min(self.lines.len())
        } else {
            self.offset.saturating_sub(page)
        };
    }
}

/// Splits `line` into rows of at most `width` visible characters; escape
/// sequences take no room and a coloured row is reset at its end.
pub fn wrap(line: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut rows = Vec::new();
    let mut row = String::new();
    let (mut visible, mut in_escape, mut coloured) = (0, false, false);
    for c in line.chars() {
        if c == '\x1b' {
            in_escape = true;
            coloured = true;
        }
        if !in_escape && visible == width && !c.is_control() {
            if coloured {
                row.push_str(RESET);
            }
            rows.push(std::mem::take(&mut row));
            visible = 0;
        }
        row.push(c);
        if in_escape {
            in_escape = !c.is_ascii_alphabetic();
        } else if !c.is_control() {
            visible += 1;
        }
    }
    rows.push(row);
    rows
}

/// Runs the TUI until `/quit`, Ctrl-D or a signal.
pub fn run(
    agent: &AgentHandle,
    settings: &Settings,
    provider: ProviderConfig,
    info: &BackendInfo,
) -> io::Result<bool> {
    let raw = RawGuard::enter()?;
    let screen = AltScreen::enter()?;
    let keys = terminal::spawn_input()?;
    let signals = repl::signals();
    let (interactive, editor, notice) = Interactive::start(agent, settings);
    let buffer = SharedBuf::default();
    let options = RenderOptions {
        colors: render::colors_wanted(true, !settings.colors),
        show_thinking: settings.show_thinking,
        stats: settings.stats,
    };
    let mut tui = Tui {
        chat: Conversation::new(agent, settings, provider),
        editor,
        renderer: Renderer::new(buffer.clone(), buffer.clone(), options),
        buffer,
        scrollback: Scrollback::default(),
        // The context's size shows before the first reply.
        stats: Stats {
            context_size: info.context_size,
            ..Stats::default()
        },
        size: terminal::size(),
        approval: PendingApproval::default(),
    };
    tui.say(notice.as_slice());
    let ok = tui.serve(&keys, &signals);
    if tui.chat.busy {
        agent.cancel();
    }
    interactive.finish(agent, &tui.editor);
    drop(screen);
    drop(raw);
    ok
}

struct Tui<'a> {
    chat: Conversation<'a>,
    editor: Editor,
    renderer: Renderer<SharedBuf, SharedBuf>,
    buffer: SharedBuf,
    scrollback: Scrollback,
    /// The last generation's figures, for the status bar.
    stats: Stats,
    size: (u16, u16),
    /// A tool call waiting for y / n / a.
    approval: PendingApproval,
}

impl Tui<'_> {
    fn serve(&mut self, keys: &Receiver<Key>, signals: &Receiver<i32>) -> io::Result<bool> {
        let events = self.chat.agent.events().clone();
        let ticks = tick(RESIZE_CHECK);
        self.draw()?;
        loop {
            let go_on = select! {
                recv(keys) -> key => key.is_ok_and(|key| self.on_key(key)),
                recv(events) -> event => match event {
                    Ok(event) => self.on_events(event),
                    Err(_) => return Ok(false),
                },
                recv(signals) -> _ => false,
                recv(ticks) -> _ => {
                    if terminal::size() == self.size {
                        continue;
                    }
                    self.size = terminal::size();
                    true
                },
            };
            if !go_on {
                return Ok(true);
            }
            self.draw()?;
        }
    }

    fn on_key(&mut self, key: Key) -> bool {
        if let Some(line) = self.approval.on_key(&key, self.chat.agent) {
            self.say(&[line]);
            return true;
        }
        match self.editor.handle(key) {
            Action::Escape if self.chat.busy => self.chat.agent.cancel(),
            Action::Edited | Action::Escape => {}
            Action::Scroll(direction) => {
                let page = usize::from(self.size.1 / 2).max(1);
                self.scrollback.scroll(direction, page);
            }
            Action::Submit(text) if text.trim().is_empty() => {}
            Action::Submit(text) => {
                self.chat.queue.push_back(text);
                return self.start_queued();
            }
            Action::Interrupt if !self.chat.busy => self.editor.clear(),
            Action::Interrupt => self.chat.agent.cancel(),
            Action::Eof => return false,
        }
        true
    }

    /// Renders `first` and every event already waiting, then draws once.
    fn on_events(&mut self, first: Event) -> bool {
        let mut next = Some(first);
        while let Some(event) = next {
            if !self.on_event(&event) {
                return false;
            }
            next = self.chat.agent.events().try_recv().ok();
        }
        true
    }

    fn on_event(&mut self, event: &Event) -> bool {
        // A reply without usage figures keeps the last known count.
        if let Event::Stats(stats) = event {
            if stats.context_used > 0 {
                self.stats = stats.clone();
            }
        }
        let _ = self.renderer.render(event);
        self.flush_buffer();
        self.approval.on_event(event);
        if let Event::Stop(_) = event {
            self.chat.busy = false;
            return self.start_queued();
        }
        true
    }

    /// Starts queued lines until one is a prompt (or the queue is empty).
    fn start_queued(&mut self) -> bool {
        while let Some(text) = self.chat.next_queued() {
            self.say(&[format!("> {text}")]);
            match self.chat.start(&text) {
                Started::Prompt => return true,
                Started::Quit => return false,
                Started::Output(lines) => self.say(&lines),
            }
        }
        true
    }

    fn say(&mut self, lines: &[String]) {
        for line in lines {
            self.scrollback
                .push_str(&format!("{}\n", sanitize::visible(line)));
        }
        self.scrollback.offset = 0;
    }

    fn flush_buffer(&mut self) {
        let bytes = std::mem::take(&mut *self.buffer.0.borrow_mut());
        self.scrollback.push_bytes(&bytes);
    }

    fn draw(&mut self) -> io::Result<()> {
        let (width, height) = (usize::from(self.size.0), usize::from(self.size.1));
        let frame = Frame {
            width,
            height,
            scrollback: &self.scrollback,
            queue: self.chat.queue.iter().map(String::as_str).collect(),
            input: self.editor.chars(),
            cursor: self.editor.cursor(),
            status_left: self.chat.status_left(),
            status_right: tokens_text(&self.stats),
        };
        let mut out = io::stdout().lock();
        out.write_all(frame.render().as_bytes())?;
        out.flush()
    }
}

/// `used/size` for the status bar; `?` for an unknown context size.
fn tokens_text(stats: &Stats) -> String {
    let size = match stats.context_size {
        0 => "?".to_string(),
        n => n.to_string(),
    };
    format!("{}/{size} tokens", stats.context_used)
}

/// Everything one screen shows, drawn as a single write.
struct Frame<'a> {
    width: usize,
    height: usize,
    scrollback: &'a Scrollback,
    queue: Vec<&'a str>,
    input: &'a [char],
    cursor: usize,
    status_left: String,
    status_right: String,
}

impl Frame<'_> {
    fn render(&self) -> String {
        let input_rows = self.input_rows();
        let queue_rows = self.queue_rows();
        let fixed = input_rows.len() + queue_rows.len() + 2;
        let pane = self.height.saturating_sub(fixed).max(1);
        let mut rows = self.scrollback.rows(self.width, pane);
        rows.resize(pane, String::new());
        rows.push(format!("{DIM}{}{RESET}", "─".repeat(self.width)));
        rows.extend(queue_rows);
        let input_top = rows.len();
        rows.extend(input_rows);
        rows.push(self.status_bar());
        let mut screen = String::from("\x1b[?25l");
        for (index, row) in rows.iter().take(self.height).enumerate() {
            screen.push_str(&format!("\x1b[{};1H\x1b[2K{row}", index + 1));
        }
        let (row, column) = self.cursor_position();
        screen.push_str(&format!(
            "\x1b[{};{}H\x1b[?25h",
            input_top + row + 1,
            column + 1
        ));
        screen
    }

    fn queue_rows(&self) -> Vec<String> {
        self.queue
            .iter()
            .map(|text| {
                let one_line = sanitize::visible(text).replace('\n', "⏎");
                let cut: String = one_line
                    .chars()
                    .take(self.width.saturating_sub(10))
                    .collect();
                format!("{DIM}queued: {cut}{RESET}")
            })
            .collect()
    }

    /// `> ` and the input, wrapped, at most a third of the screen.
    fn input_rows(&self) -> Vec<String> {
        let shown: String = self
            .input
            .iter()
            .map(|c| if *c == '\n' { '⏎' } else { *c })
            .collect();
        let rows = wrap(&format!("> {shown}"), self.width);
        let limit = (self.height / 3).max(1);
        let skip = rows.len().saturating_sub(limit);
        rows.into_iter().skip(skip).collect()
    }

    fn cursor_position(&self) -> (usize, usize) {
        let width = self.width.max(1);
        let offset = 2 + self.cursor;
        let total_rows = (2 + self.input.len()) / width + 1;
        let limit = (self.height / 3).max(1);
        let skipped = total_rows.saturating_sub(limit);
        ((offset / width).saturating_sub(skipped), offset % width)
    }

    fn status_bar(&self) -> String {
        let left = format!(" {}", sanitize::visible(&self.status_left));
        let right = format!("{} ", sanitize::visible(&self.status_right));
        let used = left.chars().count() + right.chars().count();
        let gap = self.width.saturating_sub(used);
        let line: String = format!("{left}{}{right}", " ".repeat(gap))
            .chars()
            .take(self.width)
            .collect();
        format!("{REVERSE}{line}{RESET}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_counts_visible_characters_only() {
        assert_eq!(wrap("abcdef", 4), ["abcd", "ef"]);
        assert_eq!(wrap("", 4), [""]);
        assert_eq!(wrap("✓✓✓", 2), ["✓✓", "✓"]);
        let coloured = "\x1b[32mabcdef\x1b[0m";
        let rows = wrap(coloured, 4);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0], format!("\x1b[32mabcd{RESET}"));
    }

    #[test]
    fn scrollback_keeps_split_characters_and_scrolls() {
        let mut s = Scrollback::default();
        let bytes = "one ✓\ntwo\nthree".as_bytes();
        let (a, b) = bytes.split_at(6);
        s.push_bytes(a);
        s.push_bytes(b);
        assert_eq!(s.rows(20, 3), ["one ✓", "two", "three"]);
        assert_eq!(s.rows(20, 2), ["two", "three"]);
        s.scroll(-1, 1);
        assert_eq!(s.rows(20, 2), ["one ✓", "two"]);
        s.scroll(1, 5);
        assert_eq!(s.rows(20, 2), ["two", "three"]);
    }

    #[test]
    fn scrollback_holds_ten_thousand_lines() {
        let mut s = Scrollback::default();
        for n in 0..12_000 {
            s.push_str(&format!("line {n}\n"));
        }
        assert_eq!(s.lines.len(), 12_000);
        s.scroll(-1, 11_999);
        assert_eq!(s.rows(20, 1), ["line 0"]);
    }

    #[test]
    fn frame_has_status_bar_queue_and_input() {
        let scrollback = Scrollback::default();
        let input: Vec<char> = "hi".chars().collect();
        let frame = Frame {
            width: 40,
            height: 10,
            scrollback: &scrollback,
            queue: vec!["next one"],
            input: &input,
            cursor: 2,
            status_left: "local | qwen".into(),
            status_right: tokens_text(&Stats {
                context_used: 12,
                context_size: 4096,
                ..Stats::default()
            }),
        };
        let screen = frame.render();
        assert!(screen.contains("queued: next one"));
        assert!(screen.contains("> hi"));
        assert!(screen.contains(" local | qwen"));
        assert!(screen.contains("12/4096 tokens"));
        assert_eq!(frame.cursor_position(), (0, 4));
    }
}

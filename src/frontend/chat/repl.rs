//! The line-editing REPL: the default front-end when stdin and stdout are terminals.
//!
//! One loop `select!`s over three channels: keys from the input thread
//! (`terminal.rs`), events from the agent thread, and SIGTERM/SIGINT from
//! `sys`. Neither side blocks the other, so text typed while the model
//! answers is edited and queued, and Esc or Ctrl-C cancels at once. The
//! editor (`editor.rs`) owns the line; the shared [`Renderer`] draws the
//! answer; `slash.rs` runs commands and holds the queue. The TUI reuses
//! [`Interactive`] for history and `--continue`. Lines the REPL prints itself
//! (command output, which can quote session titles, MCP servers and errors;
//! queued input) go through [`sanitize::visible`] like the renderer's.

use std::io::{self, IsTerminal, Stderr, Stdout, Write};
use std::path::{Path, PathBuf};

use crossbeam_channel::{never, select, Receiver};

use crate::agent::{AgentHandle, Op};
use crate::backend::BackendInfo;
use crate::config::resolve::Settings;
use crate::config::ProviderConfig;
use crate::core::Event;
use crate::store::{self, Store, StoreError};
use crate::util::sys;

use super::approve::PendingApproval;
use super::editor::{self, Action, Editor, Key};
use super::render::{self, RenderOptions, Renderer};
use super::sanitize;
use super::slash::{self, Conversation, Started};
use super::terminal::{self, Crlf, RawGuard};

const PROMPT: &str = "> ";

/// What both interactive front-ends set up and tear down the same way:
/// input history and the `--continue` session.
pub struct Interactive {
    history_path: PathBuf,
    /// The session id `--continue` saves under on exit; `None` without
    /// `--continue`, or when the saved file could not be read (so it is
    /// never overwritten).
    continue_id: Option<String>,
}

impl Interactive {
    /// Loads history and, with `--continue`, restores the last session here.
    /// Returns the editor and a notice to show, if any.
    pub fn start(
        agent: &AgentHandle,
        settings: &Settings,
    ) -> (Interactive, Editor, Option<String>) {
        let history_path = crate::util::dirs::state_dir().join("history");
        let editor = Editor::with_history(editor::load_history(&history_path))
            .with_completions(&slash::NAMES);
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let (continue_id, notice) = if settings.continue_session {
            let prompt = settings.profile.system_prompt(&settings.system_prompt);
            restore(agent, &Store::user(), &cwd, &prompt)
        } else {
            (None, None)
        };
        let interactive = Interactive {
            history_path,
            continue_id,
        };
        (interactive, editor, notice)
    }

    /// Saves history and, with `--continue`, the session (both atomically).
    pub fn finish(&self, agent: &AgentHandle, editor: &Editor) {
        let text = editor::history_text(editor.history());
        let _ = crate::util::fs::write_atomic(&self.history_path, text.as_bytes());
        if let Some(id) = &self.continue_id {
            if let Some(session) = slash::snapshot(agent) {
                let _ = Store::user().save_session(id, &session);
            }
        }
    }
}

/// Restores this directory's `--continue` session (or the one an older build
/// left under the state directory). Returns the id to save under on exit,
/// `None` when an existing file could not be read, and a notice.
fn restore(
    agent: &AgentHandle,
    store: &Store,
    cwd: &Path,
    system_prompt: &str,
) -> (Option<String>, Option<String>) {
    let id = slash::continue_id(cwd);
    let legacy = slash::legacy_continue_path(cwd);
    let loaded = if store.exists(&id) || !legacy.exists() {
        store.load(&id)
    } else {
        store::load_file(&legacy, &id)
    };
    match loaded {
        Ok(saved) => {
            let count = saved.session.messages.len();
            agent.send(Op::Restore(saved.into_session(system_prompt)));
            let notice = format!("[Continuing: {count} messages restored]");
            (Some(id), Some(notice))
        }
        Err(StoreError::NotFound(_)) => (Some(id), None),
        Err(error) => {
            let notice = format!("error: {error}; this session will not be saved over it");
            (None, Some(notice))
        }
    }
}

/// The line the REPL opens with: the model, where it runs, its context.
pub fn greeting(info: &BackendInfo) -> String {
    let context = match info.context_size {
        0 => String::new(),
        n => format!(", context {n} tokens"),
    };
    format!(
        "{} ({}{context}); /help lists the commands",
        info.model, info.kind
    )
}

/// SIGINT/SIGTERM as a channel; in raw mode Ctrl-C arrives as a key, so a
/// signal here means someone else asked shepherd to stop.
pub fn signals() -> Receiver<i32> {
    sys::interrupt_signals().unwrap_or_else(|_| never())
}

/// Runs the REPL until `/quit`, Ctrl-D or a signal. Returns whether it ended cleanly.
pub fn run(
    agent: &AgentHandle,
    settings: &Settings,
    provider: ProviderConfig,
    info: &BackendInfo,
) -> io::Result<bool> {
    let guard = RawGuard::enter()?;
    let keys = terminal::spawn_input()?;
    let signals = signals();
    let (interactive, editor, notice) = Interactive::start(agent, settings);
    let options = RenderOptions {
        colors: render::colors_wanted(io::stdout().is_terminal(), !settings.colors),
        show_thinking: settings.show_thinking,
        stats: settings.stats,
    };
    let mut repl = Repl {
        chat: Conversation::new(agent, settings, provider),
        editor,
        renderer: Renderer::new(Crlf(io::stdout()), Crlf(io::stderr()), options),
        approval: PendingApproval::default(),
    };
    repl.say(&[greeting(info)])?;
    if let Some(notice) = notice {
        repl.say(&[notice])?;
    }
    repl.draw_prompt()?;
    let ok = repl.serve(&keys, &signals);
    if repl.chat.busy {
        agent.cancel();
    }
    interactive.finish(agent, &repl.editor);
    write!(io::stdout(), "\r\n")?;
    drop(guard);
    ok
}

struct Repl<'a> {
    chat: Conversation<'a>,
    editor: Editor,
    renderer: Renderer<Crlf<Stdout>, Crlf<Stderr>>,
    /// A tool call waiting for y / n / a.
    approval: PendingApproval,
}

/// Whether the loop goes on.
enum Next {
    Continue,
    Quit,
}

impl Repl<'_> {
    fn serve(&mut self, keys: &Receiver<Key>, signals: &Receiver<i32>) -> io::Result<bool> {
        let events = self.chat.agent.events().clone();
        loop {
            let next = select! {
                recv(keys) -> key => match key {
                    Ok(key) => self.on_key(key)?,
                    Err(_) => Next::Quit,
                },
                recv(events) -> event => match event {
                    Ok(event) => self.on_event(&event)?,
                    Err(_) => return Ok(false),
                },
                recv(signals) -> _ => Next::Quit,
            };
            if let Next::Quit = next {
                return Ok(true);
            }
        }
    }

    fn on_key(&mut self, key: Key) -> io::Result<Next> {
        if let Some(line) = self.approval.on_key(&key, self.chat.agent) {
            self.say(&[line])?;
            return Ok(Next::Continue);
        }
        match self.editor.handle(key) {
            Action::Edited | Action::Scroll(_) => self.redraw_if_idle()?,
            Action::Submit(text) if self.chat.busy => self.chat.queue.push_back(text),
            Action::Submit(text) => {
                write!(io::stdout(), "\r\n")?;
                return self.start(&text);
            }
            Action::Escape | Action::Interrupt if self.chat.busy => self.chat.agent.cancel(),
            Action::Escape => {}
            Action::Interrupt => {
                self.editor.clear();
                write!(io::stdout(), "^C\r\n")?;
                self.draw_prompt()?;
            }
            Action::Eof => return Ok(Next::Quit),
        }
        Ok(Next::Continue)
    }

    fn on_event(&mut self, event: &Event) -> io::Result<Next> {
        self.renderer.render(event)?;
        self.approval.on_event(event);
        // An error ends only the turn (the renderer showed it); the REPL goes on.
        if let Event::Stop(_) = event {
            self.chat.busy = false;
            return self.start_queued();
        }
        Ok(Next::Continue)
    }

    /// Sends the next queued line, or shows the prompt when there is none.
    fn start_queued(&mut self) -> io::Result<Next> {
        match self.chat.next_queued() {
            Some(text) => {
                let shown = sanitize::visible(&text).replace('\n', "\r\n");
                write!(io::stdout(), "{PROMPT}{shown}\r\n")?;
                self.start(&text)
            }
            None => {
                self.draw_prompt()?;
                Ok(Next::Continue)
            }
        }
    }

    fn start(&mut self, text: &str) -> io::Result<Next> {
        if text.trim().is_empty() {
            self.draw_prompt()?;
            return Ok(Next::Continue);
        }
        match self.chat.start(text) {
            Started::Prompt => Ok(Next::Continue),
            Started::Quit => Ok(Next::Quit),
            Started::Output(lines) => {
                self.say(&lines)?;
                self.start_queued()
            }
        }
    }

    fn say(&mut self, lines: &[String]) -> io::Result<()> {
        let mut out = io::stdout();
        for line in lines {
            let shown = sanitize::visible(line).replace('\n', "\r\n");
            write!(out, "{shown}\r\n")?;
        }
        out.flush()
    }

    fn redraw_if_idle(&mut self) -> io::Result<()> {
        if self.chat.busy {
            return Ok(());
        }
        self.draw_prompt()
    }

    /// Redraws `> ` and the visible part of the line, cursor in place.
    fn draw_prompt(&mut self) -> io::Result<()> {
        let (width, _) = terminal::size();
        let room = usize::from(width).saturating_sub(PROMPT.len() + 1);
        let (shown, column) =
            editor::visible_window(self.editor.chars(), self.editor.cursor(), room);
        let back = shown.chars().count() - column;
        let mut out = io::stdout();
        write!(out, "\r\x1b[K{PROMPT}{shown}")?;
        if back > 0 {
            write!(out, "\x1b[{back}D")?;
        }
        out.flush()
    }
}

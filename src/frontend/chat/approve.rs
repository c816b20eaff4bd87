//! Answering approval requests from the keyboard, shared by the REPL and the TUI.
//!
//! When the agent sends [`Event::ApprovalRequired`], the renderer shows the
//! question and [`PendingApproval`] remembers its id; the next `y`, `n` or `a`
//! key answers it (allow, deny, always for this tool this session) through the
//! agent's [`crate::tools::approval::Approvals`]. Every other key goes to the line
//! editor as usual, so typing ahead keeps working, and Esc / Ctrl-C cancel the
//! turn, which the waiting agent sees as a denial.

use crate::agent::AgentHandle;
use crate::core::Event;
use crate::tools::approval::Answer;

use super::editor::Key;

/// The request waiting for a key, if any.
#[derive(Default)]
pub struct PendingApproval {
    id: Option<String>,
}

impl PendingApproval {
    /// Tracks requests: a new one waits; a result or the end of the turn ends the wait.
    pub fn on_event(&mut self, event: &Event) {
        match event {
            Event::ApprovalRequired(request) => self.id = Some(request.id.clone()),
            Event::ToolResult(_) | Event::Stop(_) => self.id = None,
            _ => {}
        }
    }

    /// Answers the waiting request when `key` is y, n or a. Returns the line to
    /// show, or `None` when the key is not an answer (or nothing waits).
    pub fn on_key(&mut self, key: &Key, agent: &AgentHandle) -> Option<String> {
        let Key::Char(c) = key else { return None };
        let answer = Answer::parse(&c.to_string())?;
        let id = self.id.take()?;
        let sent = agent
            .approvals()
            .is_some_and(|approvals| approvals.answer(&id, answer).is_ok());
        Some(match (sent, answer) {
            (false, _) => "  (too late: the request is no longer waiting)".to_string(),
            (true, Answer::Allow) => "  → allowed".to_string(),
            (true, Answer::Always) => "  → allowed for the rest of this session".to_string(),
            (true, Answer::Deny) => "  → denied".to_string(),
        })
    }
}

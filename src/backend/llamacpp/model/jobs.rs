//! The slot routes' jobs and answers as the model handle sends them to the
//! generation thread (`GET /slots`, `POST /slots/N?action=...`), and the check
//! of an action's file name; `slots/files.rs` carries them out.

use std::path::{Path, PathBuf};

use crossbeam_channel::Sender;

use super::ModelError;
use crate::backend::Sampling;

/// One slot as `GET /slots` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotInfo {
    pub id: usize,
    pub n_ctx: usize,
    /// Whether its generation drafts ahead (speculative decoding is on).
    pub speculative: bool,
    pub is_processing: bool,
    /// Tokens the slot's cache holds.
    pub n_cached: usize,
    /// Tokens generated so far by the request it serves.
    pub n_decoded: usize,
    /// The request it serves, else the last one it served (`None`: none yet).
    pub task: Option<SlotTask>,
}

/// A slot's request, in the figures llama-server's `/slots` gives.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotTask {
    /// The request's serial number in this process (llama-server's `id_task`).
    pub id: u64,
    /// Prompt tokens decoded so far, and those reused from the cache.
    pub n_prompt_processed: usize,
    pub n_prompt_cached: usize,
    pub sampling: Sampling,
    /// Tokens it may still generate: -1 without a `max_tokens` (the context is
    /// the limit) and once it is finished.
    pub n_remain: i64,
    /// Whether it is still at work (false once finished), and whether its text
    /// has a line break.
    pub has_next_token: bool,
    pub has_new_line: bool,
}

/// What to do with a slot's cache.
#[derive(Debug, Clone, PartialEq)]
pub enum SlotAction {
    Save { filename: String, path: PathBuf },
    Restore { filename: String, path: PathBuf },
    Erase,
}

/// What an action did, in llama-server's figures.
#[derive(Debug, Clone, PartialEq)]
pub enum SlotReport {
    Saved {
        filename: String,
        n_tokens: usize,
        n_bytes: usize,
        ms: f64,
    },
    Restored {
        filename: String,
        n_tokens: usize,
        n_bytes: usize,
        ms: f64,
    },
    Erased {
        n_tokens: usize,
    },
}

/// An action waiting for its slot.
pub struct SlotJob {
    pub slot: usize,
    pub action: SlotAction,
    pub reply: Sender<Result<SlotReport, ModelError>>,
}

/// The longest slot file name, in bytes: the file system's 255 (`NAME_MAX`)
/// less the most that the atomic write's temp name adds to it
/// (`util::fs::write_atomic` writes `.NAME.tmp-PID-N` beside the file: a dot,
/// `.tmp-`, a `u32` pid of up to 10 digits, a dash and a `u64` counter of up to
/// 20), so that every name taken can be saved.
pub const MAX_NAME: usize = 255 - (1 + 5 + 10 + 1 + 20);

/// The action `name` names, with its file resolved inside `dir`: a plain name,
/// no directory part, no `..`, no leading dot, at most [`MAX_NAME`] bytes.
pub fn action(
    dir: Option<&Path>,
    name: &str,
    filename: Option<&str>,
) -> Result<SlotAction, ModelError> {
    let invalid = |message: String| ModelError::Invalid {
        index: None,
        message,
    };
    let file = |filename: Option<&str>| -> Result<(String, PathBuf), ModelError> {
        let dir = dir.ok_or_else(|| {
            ModelError::Unsupported(
                "this server does not save slots: start it with --slot-save-path DIR".into(),
            )
        })?;
        let filename = filename.ok_or_else(|| invalid("'filename' is required".into()))?;
        if filename.len() > MAX_NAME {
            return Err(invalid(format!(
                "the file name is {} bytes long; at most {MAX_NAME} are taken",
                filename.len()
            )));
        }
        if !plain_name(filename) {
            return Err(invalid(format!(
                "'{filename}' is not a plain file name (no directories, no leading dot)"
            )));
        }
        Ok((filename.to_string(), dir.join(filename)))
    };
    match name {
        "save" => file(filename).map(|(filename, path)| SlotAction::Save { filename, path }),
        "restore" => file(filename).map(|(filename, path)| SlotAction::Restore { filename, path }),
        "erase" => Ok(SlotAction::Erase),
        other => Err(invalid(format!(
            "unknown action '{other}': save, restore or erase"
        ))),
    }
}

/// A file name that stays inside its directory.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && !name
            .chars()
            .any(|c| c == '/' || c == '\\' || c == ':' || c.is_control())
}

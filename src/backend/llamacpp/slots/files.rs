//! llama-server's slot routes on the generation thread: `GET /slots` (each
//! slot's context, whether it serves a request, how many tokens it caches) and
//! `POST /slots/N?action=save|restore|erase`.
//!
//! A save writes the slot's tokens and sequence state in the prompt cache's own
//! file format ([`super::super::prompt_cache`]: atomic, checksummed, tied to the
//! model file and context parameters), so a file from another model or setting
//! is refused on restore rather than loaded into the cache. Files live in the
//! `--slot-save-path` directory under plain names; without that flag the
//! actions are refused, as llama-server refuses them. An action on a slot that
//! serves a request waits until it has finished, as llama-server defers it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crossbeam_channel::Sender;

use super::super::model::ModelError;
use super::super::prompt_cache::{read_entry, write_state_file};
use super::Worker;

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

/// The action `name` names, with its file resolved inside `dir`: a plain name,
/// no directory part, no `..`, no leading dot, at most 255 bytes.
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
        && name.len() <= 255
        && !name.starts_with('.')
        && !name
            .chars()
            .any(|c| c == '/' || c == '\\' || c == ':' || c.is_control())
}

impl Worker<'_> {
    /// Every slot's state.
    pub(super) fn slot_list(&self) -> Vec<SlotInfo> {
        (self.slots.iter().enumerate())
            .map(|(id, slot)| SlotInfo {
                id,
                n_ctx: self.n_ctx_slot,
                speculative: self.spec != super::SpecMode::Off,
                is_processing: slot.task.is_some(),
                n_cached: slot.mirror.len(),
                n_decoded: slot.task.as_ref().map_or(0, |t| t.n_tokens),
            })
            .collect()
    }

    /// Runs each waiting action whose slot is free; the others wait.
    pub(super) fn run_slot_actions(&mut self) {
        let waiting = std::mem::take(&mut self.slot_actions);
        for job in waiting {
            if self.slots[job.slot].task.is_some() {
                self.slot_actions.push_back(job);
                continue;
            }
            let result = self.slot_action(job.slot, &job.action);
            let _ = job.reply.send(result);
        }
    }

    fn slot_action(&mut self, index: usize, action: &SlotAction) -> Result<SlotReport, ModelError> {
        let started = Instant::now();
        let ms = || started.elapsed().as_secs_f64() * 1000.0;
        let seq = self.slots[index].seq;
        match action {
            SlotAction::Save { filename, path } => {
                let tokens = self.slots[index].mirror.clone();
                let state = self.ctx.seq_state(seq).ok_or_else(|| {
                    ModelError::Failed("llama.cpp could not copy the slot's state".into())
                })?;
                let n_bytes = write_state_file(path, &self.state_key, &tokens, &state)
                    .map_err(|e| ModelError::Failed(format!("cannot write {filename}: {e}")))?;
                Ok(SlotReport::Saved {
                    filename: filename.clone(),
                    n_tokens: tokens.len(),
                    n_bytes,
                    ms: ms(),
                })
            }
            SlotAction::Restore { filename, path } => {
                let n_bytes = std::fs::metadata(path)
                    .map_err(|_| ModelError::NotFound(format!("no saved slot '{filename}'")))?
                    .len() as usize;
                let entry = read_entry(path, &self.state_key).map_err(|e| ModelError::Invalid {
                    index: None,
                    message: format!(
                        "'{filename}' cannot be restored here ({e}): saved by another model, setting or version?"
                    ),
                })?;
                if entry.tokens.len() > self.n_ctx_slot {
                    return Err(ModelError::Invalid {
                        index: None,
                        message: format!("'{filename}' holds more tokens than a slot's context"),
                    });
                }
                let slot = &mut self.slots[index];
                slot.mirror.clear();
                self.ctx.truncate_seq(seq, 0);
                if !self.ctx.set_seq_state(seq, &entry.state) {
                    return Err(ModelError::Failed(format!(
                        "llama.cpp could not load '{filename}' into slot {index}"
                    )));
                }
                slot.mirror = entry.tokens;
                slot.next_turn = None;
                Ok(SlotReport::Restored {
                    filename: filename.clone(),
                    n_tokens: slot.mirror.len(),
                    n_bytes,
                    ms: ms(),
                })
            }
            SlotAction::Erase => {
                let slot = &mut self.slots[index];
                let n_tokens = slot.mirror.len();
                slot.mirror.clear();
                slot.next_turn = None;
                self.ctx.truncate_seq(seq, 0);
                Ok(SlotReport::Erased { n_tokens })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_inside_the_directory_are_taken() {
        let dir = Path::new("/srv/slots");
        let save = action(Some(dir), "save", Some("chat-1.bin")).unwrap();
        assert_eq!(
            save,
            SlotAction::Save {
                filename: "chat-1.bin".into(),
                path: dir.join("chat-1.bin"),
            }
        );
        for bad in ["", "../x", "a/b", ".hidden", "..", "c:d", "a\\b", "x\n"] {
            let refused = action(Some(dir), "restore", Some(bad));
            assert!(
                matches!(refused, Err(ModelError::Invalid { .. })),
                "{bad:?}"
            );
        }
        assert!(matches!(
            action(Some(dir), "save", None),
            Err(ModelError::Invalid { .. })
        ));
        assert!(matches!(
            action(None, "save", Some("a")),
            Err(ModelError::Unsupported(_))
        ));
        // Erasing needs neither a directory nor a file.
        assert_eq!(action(None, "erase", None).unwrap(), SlotAction::Erase);
        assert!(matches!(
            action(Some(dir), "load", Some("a")),
            Err(ModelError::Invalid { .. })
        ));
    }
}

//! llama-server's slot routes on the generation thread: `GET /slots` (each
//! slot's context, whether it serves a request, how many tokens it caches) and
//! `POST /slots/N?action=save|restore|erase`.
//!
//! A save writes the slot's tokens and sequence state in the prompt cache's own
//! file format ([`super::super::prompt_cache`]: atomic, checksummed, tied to the
//! model file and context parameters), so a file from another model or setting
//! is refused on restore rather than loaded into the cache. Files live in the
//! `--slot-save-path` directory under plain names (at most `model::jobs::MAX_NAME` bytes,
//! so the atomic write's temp name fits beside them); without that flag the
//! actions are refused, as llama-server refuses them. An action on a slot that
//! serves a request waits until it has finished, as llama-server defers it.
//!
//! A file to restore is untrusted input: a symlink, FIFO, device or anything
//! but a regular file, a file that fails the reader's checks, a state
//! llama.cpp refuses, or one that holds other than the tokens the file lists
//! ([`Worker::load_state`]) is a 400 naming the file, answered before the slot
//! is reported restored; the slot is then left empty.

use std::time::Instant;

use super::super::model::jobs::{SlotAction, SlotInfo, SlotReport, SlotTask};
use super::super::model::ModelError;
use super::super::prompt_cache::{read_entry, write_state_file, Entry};
use super::{Task, Worker};

impl SlotTask {
    /// `task` as it stands, its slot's cache holding `cached` tokens.
    fn of(task: &Task, cached: usize) -> SlotTask {
        let report = &task.report;
        let n_remain = match task.job.sampling.max_tokens {
            Some(_) => task.max_tokens.saturating_sub(task.n_tokens) as i64,
            None => -1,
        };
        SlotTask {
            id: task.serial,
            n_prompt_processed: cached
                .saturating_sub(report.reused_tokens)
                .min(report.decoded_tokens),
            n_prompt_cached: report.reused_tokens,
            sampling: task.job.sampling.clone(),
            n_remain,
            has_next_token: true,
            has_new_line: task.text.contains('\n'),
        }
    }

    /// `task` once finished: no tokens to come (llama-server's idle slot).
    pub(super) fn idle(task: &Task, cached: usize) -> SlotTask {
        SlotTask {
            n_remain: -1,
            has_next_token: false,
            ..SlotTask::of(task, cached)
        }
    }
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
                task: match &slot.task {
                    Some(task) => Some(SlotTask::of(task, slot.mirror.len())),
                    None => slot.served.clone(),
                },
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
                let refused = |why: String| ModelError::Invalid {
                    index: None,
                    message: format!("'{filename}' cannot be restored here: {why}"),
                };
                let (entry, n_bytes) = match read_entry(path, &self.state_key) {
                    Ok(read) => read,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return Err(ModelError::NotFound(format!("no saved slot '{filename}'")))
                    }
                    Err(e) => {
                        return Err(refused(format!(
                            "{e} (saved by another model, setting or version?)"
                        )))
                    }
                };
                if entry.tokens.len() > self.n_ctx_slot {
                    return Err(refused("it holds more tokens than a slot's context".into()));
                }
                self.slots[index].mirror.clear();
                self.slots[index].next_turn = None;
                self.load_state(seq, &entry).map_err(refused)?;
                let slot = &mut self.slots[index];
                slot.mirror = entry.tokens;
                Ok(SlotReport::Restored {
                    filename: filename.clone(),
                    n_tokens: slot.mirror.len(),
                    n_bytes: usize::try_from(n_bytes).unwrap_or(usize::MAX),
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

impl Worker<'_> {
    /// Loads `entry`'s state into sequence `seq`, which then holds exactly
    /// `entry.tokens`: llama.cpp must take the state, and the sequence's last
    /// position must be the last token's. A file whose token list and state
    /// disagree (it lists more tokens than its cells, or fewer) would leave the
    /// slot's mirror out of step with its cache, and the next request that
    /// reuses the prefix would decode at a position llama.cpp refuses. The
    /// state's own cell count is not read here: how it is laid out depends on
    /// the model's memory (one stream per sequence, sliding-window layers in a
    /// second cache, one cell for a recurrent state), while the last position
    /// is what decoding goes on from for all of them. On a refusal `seq` is
    /// left empty; the reason, for the caller's message.
    pub(super) fn load_state(&mut self, seq: i32, entry: &Entry) -> Result<(), String> {
        if !self.ctx.set_seq_state(seq, &entry.state) {
            return Err("llama.cpp refused its state (saved by another model or setting?)".into());
        }
        let held = self.ctx.seq_pos_max(seq).map_or(0, |last| last + 1);
        if held != entry.tokens.len() {
            self.ctx.truncate_seq(seq, 0);
            return Err(format!(
                "it lists {} tokens but its state holds {held}",
                entry.tokens.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::super::model::jobs::{action, MAX_NAME};
    use super::*;

    #[test]
    fn a_name_is_refused_unless_the_atomic_writes_temp_name_fits_beside_it() {
        let dir = crate::util::fs::test_support::temp_dir("slot-names");
        let too_long = "a".repeat(255);
        let refused = action(Some(&dir), "save", Some(&too_long));
        assert!(
            matches!(&refused, Err(ModelError::Invalid { message, .. }) if message.contains("255 bytes")),
            "{refused:?}"
        );
        assert!(action(Some(&dir), "save", Some(&"a".repeat(MAX_NAME + 1))).is_err());
        // The longest name taken saves (the temp file's name fits too) and reads back.
        let longest = "b".repeat(MAX_NAME);
        let Ok(SlotAction::Save { path, .. }) = action(Some(&dir), "save", Some(&longest)) else {
            panic!("{MAX_NAME} bytes refused");
        };
        write_state_file(&path, "key", &[1, 2], b"state").expect("saved");
        assert_eq!(read_entry(&path, "key").expect("read").0.tokens, [1, 2]);
    }

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

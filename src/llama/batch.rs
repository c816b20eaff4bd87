//! A token batch for `llama_decode`, owned and bounds-checked.
//!
//! The C struct is a set of parallel arrays allocated by `llama_batch_init`;
//! [`Batch::push`] is the only writer and never writes past the capacity.

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::marker::PhantomData;

use llama_cpp_sys_2 as sys;

use super::error::DecodeError;
use super::model::Token;

/// An owned `llama_batch`: tokens of one or more sequences, one sequence id each.
#[derive(Debug)]
pub struct Batch {
    raw: sys::llama_batch,
    capacity: usize,
    max_pos: Option<i32>,
    /// Which entries asked for logits, by index.
    logits: Vec<bool>,
    _not_send: PhantomData<*mut ()>,
}

impl Drop for Batch {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `llama_batch_init` and is freed exactly once here.
        unsafe { sys::llama_batch_free(self.raw) };
    }
}

impl Batch {
    /// A batch with room for `capacity` tokens (at least one).
    pub fn new(capacity: usize) -> Result<Batch, DecodeError> {
        let n = i32::try_from(capacity.max(1))
            .map_err(|_| DecodeError::BadBatch(format!("capacity {capacity} too large")))?;
        // SAFETY: allocates token/pos/seq/logit arrays for `n` tokens and one sequence id each.
        let raw = unsafe { sys::llama_batch_init(n, 0, 1) };
        let batch = Batch {
            raw,
            capacity: n as usize,
            max_pos: None,
            logits: Vec::with_capacity(n as usize),
            _not_send: PhantomData,
        };
        let arrays_ok = !raw.token.is_null()
            && !raw.pos.is_null()
            && !raw.n_seq_id.is_null()
            && !raw.seq_id.is_null()
            && !raw.logits.is_null();
        if !arrays_ok {
            return Err(DecodeError::BadBatch("allocation failed".into()));
        }
        Ok(batch)
    }

    pub fn clear(&mut self) {
        self.raw.n_tokens = 0;
        self.max_pos = None;
        self.logits.clear();
    }

    pub fn len(&self) -> usize {
        self.raw.n_tokens as usize
    }

    pub fn is_empty(&self) -> bool {
        self.raw.n_tokens == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Which entries asked for logits, by index in the batch.
    pub fn logit_flags(&self) -> &[bool] {
        &self.logits
    }

    /// The highest position pushed, over every sequence.
    pub fn max_pos(&self) -> Option<i32> {
        self.max_pos
    }

    /// Appends `token` of sequence `seq` (`0..n_seq_max` of the context) at position
    /// `pos`; `logits` asks for its output distribution.
    pub fn push_seq(
        &mut self,
        token: Token,
        pos: usize,
        seq: i32,
        logits: bool,
    ) -> Result<(), DecodeError> {
        let i = self.len();
        if seq < 0 {
            return Err(DecodeError::BadBatch(format!("sequence id {seq}")));
        }
        if i >= self.capacity {
            return Err(DecodeError::BadBatch(format!(
                "more than {} tokens",
                self.capacity
            )));
        }
        let pos =
            i32::try_from(pos).map_err(|_| DecodeError::BadBatch("position overflow".into()))?;
        // SAFETY: `i < capacity`, and `llama_batch_init(capacity, 0, 1)` allocated every
        // array with `capacity` entries and `seq_id[i]` with room for one sequence id.
        unsafe {
            *self.raw.token.add(i) = token;
            *self.raw.pos.add(i) = pos;
            *self.raw.n_seq_id.add(i) = 1;
            *(*self.raw.seq_id.add(i)) = seq;
            *self.raw.logits.add(i) = i8::from(logits);
        }
        self.raw.n_tokens += 1;
        self.max_pos = Some(self.max_pos.map_or(pos, |m| m.max(pos)));
        self.logits.push(logits);
        Ok(())
    }

    pub(crate) fn raw(&self) -> sys::llama_batch {
        self.raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_stops_at_capacity() {
        let mut batch = Batch::new(2).unwrap();
        batch.push_seq(1, 0, 0, false).unwrap();
        batch.push_seq(2, 1, 0, true).unwrap();
        assert!(batch.push_seq(3, 2, 0, false).is_err());
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.max_pos(), Some(1));
        assert_eq!(batch.logit_flags(), &[false, true]);
        batch.clear();
        assert!(batch.is_empty() && batch.logit_flags().is_empty());
        batch.push_seq(5, 7, 1, false).unwrap();
        batch.push_seq(6, 3, 0, true).unwrap();
        assert_eq!(batch.max_pos(), Some(7));
        assert!(batch.push_seq(7, 0, -1, false).is_err());
    }
}

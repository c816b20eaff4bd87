//! A token batch for `llama_decode`, owned and bounds-checked.
//!
//! The C struct is a set of parallel arrays allocated by `llama_batch_init`;
//! [`Batch::push`] is the only writer and never writes past the capacity.

use std::marker::PhantomData;

use llama_cpp_sys_2 as sys;

use super::error::DecodeError;
use super::model::Token;

/// An owned `llama_batch` for sequence 0.
#[derive(Debug)]
pub struct Batch {
    raw: sys::llama_batch,
    capacity: usize,
    last_pos: Option<i32>,
    has_logits: bool,
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
            last_pos: None,
            has_logits: false,
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
        self.last_pos = None;
        self.has_logits = false;
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

    /// Whether any token asked for logits, i.e. whether a sampler can run after decoding.
    pub fn has_logits(&self) -> bool {
        self.has_logits
    }

    /// The position of the last token pushed.
    pub fn last_pos(&self) -> Option<i32> {
        self.last_pos
    }

    /// Appends `token` at position `pos`; `logits` asks for its output distribution.
    pub fn push(&mut self, token: Token, pos: usize, logits: bool) -> Result<(), DecodeError> {
        let i = self.len();
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
            *(*self.raw.seq_id.add(i)) = 0;
            *self.raw.logits.add(i) = i8::from(logits);
        }
        self.raw.n_tokens += 1;
        self.last_pos = Some(pos);
        self.has_logits |= logits;
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
        batch.push(1, 0, false).unwrap();
        batch.push(2, 1, true).unwrap();
        assert!(batch.push(3, 2, false).is_err());
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.last_pos(), Some(1));
        batch.clear();
        assert!(batch.is_empty());
    }
}

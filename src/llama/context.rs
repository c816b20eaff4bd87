//! An inference context: the KV cache and the compute graph for one model.
//!
//! A [`Context`] borrows its [`Model`], so it cannot outlive it, and it is
//! neither `Send` nor `Sync`: it lives on the generation thread only.
//! Cancellation reaches llama.cpp through an abort flag checked inside long decodes.

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use llama_cpp_sys_2 as sys;

use super::batch::Batch;
use super::error::{DecodeError, InitError, InvalidParam};
use super::lone::EXACT_COLUMNS;
use super::model::Model;

mod params;
pub use params::*;

/// ggml's `GGML_BACKEND_DEVICE_TYPE_CPU`.
const GGML_BACKEND_DEVICE_TYPE_CPU: c_int = 0;

thread_local! {
    /// The CPU backend `ggml_backend_init_by_type` made last on this thread.
    static CPU_BACKEND_MADE: Cell<*mut c_void> = const { Cell::new(std::ptr::null_mut()) };
}

extern "C" {
    /// ggml's own `ggml_backend_init_by_type` (the linker's `--wrap`, build.rs).
    fn __real_ggml_backend_init_by_type(kind: c_int, params: *const c_char) -> *mut c_void;
    /// Whether the CPU backend computes with its reference kernels: no llamafile
    /// sgemm, no tiled or split flash attention, no fused ops.
    fn ggml_backend_cpu_set_use_ref(backend: *mut c_void, use_ref: bool);
}

/// llama.h's `LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY` (a `#define` bindgen leaves out):
/// a sequence's state of the sliding-window (or recurrent) layers alone.
const LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: sys::llama_state_seq_flags = 1;

/// Every call llama.cpp makes to `ggml_backend_init_by_type` comes here (build.rs
/// links with `--wrap`): llama.cpp makes a context's CPU backend with it and keeps
/// it to itself, and [`Context::new`] needs it for [`Context::decode_batch_invariant`].
///
/// # Safety
/// As ggml's `ggml_backend_init_by_type`: `params` is what that function accepts.
#[no_mangle]
pub unsafe extern "C" fn __wrap_ggml_backend_init_by_type(
    kind: c_int,
    params: *const c_char,
) -> *mut c_void {
    // SAFETY: the caller's arguments go on to the real function unchanged.
    let backend = unsafe { __real_ggml_backend_init_by_type(kind, params) };
    if kind == GGML_BACKEND_DEVICE_TYPE_CPU {
        CPU_BACKEND_MADE.with(|made| made.set(backend));
    }
    backend
}

/// Whether this model, in a context made with `params`, computes a token on the CPU
/// exactly as it would compute it in any batch with llama.cpp's fast kernels (and the
/// wrap of sgemm, `lone::sgemm`): ggml built with the kernels [`super::lone`]
/// mirrors, every weight matrix of a type whose products go the same way for any
/// number of columns, F16 cache, no flash attention. The types: F16, Q8_0 and Q5_0
/// ([`super::lone`]), F32 and BF16 (sgemm, a lone column as two), Q4_1
/// ([`super::lone::batch`], ggml's dot product for every column count) and Q5_1
/// (ggml's dot products for every column count). Not Q4_0, IQ4_NL, MXFP4 or the
/// K-quants: ggml repacks those on AVX2 CPUs and multiplies them with gemv for up to
/// three columns and gemm for groups of four (its reference mode does not change
/// that either), and the K-quants and IQ types take a tiled kernel from eight
/// columns. Flash attention splits a lone query's cache over threads and tiles a
/// batch's; an F32 cache multiplies a batch's (non-contiguous) queries with dot
/// products and a lone one's with sgemm.
fn fast_kernels_batch_invariant(model: &Model, params: &ContextParams) -> bool {
    /// F32, F16, Q4_1, Q5_0, Q5_1, Q8_0, BF16 (`ggml_type`).
    const TYPES: [u32; 7] = [0, 1, 3, 6, 7, 8, 30];
    super::lone::enabled()
        && params.flash_attn == Some(false)
        && params.cache_type == CacheType::F16
        && model
            .matrix_types()
            .is_some_and(|types| types.iter().all(|t| TYPES.contains(t)))
}

/// Whether ggml's reference kernels make this model batch-invariant where the fast
/// ones are not: no weight matrix of a type ggml repacks on x86 CPUs (Q4_0, Q4_K,
/// IQ4_NL and MXFP4 with AVX2, Q2_K with AVX-512), whose gemv and gemm disagree in
/// either mode. Where it does not hold, decoding with the reference kernels would
/// cost their speed and buy nothing, so [`Context::decode_batch_invariant`] keeps the
/// fast ones (docs/LLAMA.md, "Speculation and exactness").
fn reference_kernels_batch_invariant(model: &Model) -> bool {
    /// Q4_0, Q2_K, Q4_K, IQ4_NL, MXFP4 (`ggml_type`).
    const REPACKED: [u32; 5] = [2, 10, 12, 20, 39];
    model
        .matrix_types()
        .is_some_and(|types| !types.iter().any(|t| REPACKED.contains(t)))
}

/// A polling CPU thread pool (as llama-bench and llama-server attach one;
/// without it ggml starts and joins its worker threads on every decode), owned
/// by the contexts it is attached to: a model's and its draft model's share
/// one, since one generation thread drives both and never both at once, so no
/// second set of workers spins beside the other's decodes.
#[derive(Debug)]
pub struct ThreadPool {
    raw: NonNull<sys::ggml_threadpool>,
    n_threads: i32,
}

impl ThreadPool {
    /// A pool of `n_threads`, `None` (ggml's per-call threads) if it cannot be made.
    fn new(n_threads: i32) -> Option<Rc<ThreadPool>> {
        // SAFETY: returns a plain struct of defaults for a valid thread count
        // (validated by `ContextParams::validate` before this is reached).
        let mut params = unsafe { sys::ggml_threadpool_params_default(n_threads) };
        // SAFETY: `params` is a valid, initialised struct that outlives the call.
        let raw = NonNull::new(unsafe { sys::ggml_threadpool_new(&mut params) })?;
        Some(Rc::new(ThreadPool { raw, n_threads }))
    }

    /// Attaches the pool to `ctx` for both generation and batch work.
    fn attach(&self, ctx: NonNull<sys::llama_context>) {
        // SAFETY: `ctx` is a live context and the pool is live; every `Context` it is
        // attached to holds an `Rc` of it and frees its context before dropping that
        // (`Drop for Context`), so the pool outlives each context that uses it.
        unsafe { sys::llama_attach_threadpool(ctx.as_ptr(), self.raw.as_ptr(), self.raw.as_ptr()) };
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        // SAFETY: the pool came from `ggml_threadpool_new` and is freed once, here,
        // when the last context attached to it has been freed.
        unsafe { sys::ggml_threadpool_free(self.raw.as_ptr()) };
    }
}

/// An owned `llama_context` borrowing its model.
#[derive(Debug)]
pub struct Context<'m> {
    raw: NonNull<sys::llama_context>,
    model: &'m Model,
    /// Kept alive here because llama.cpp holds a raw pointer to it.
    _abort: Arc<AtomicBool>,
    /// The CPU thread pool the context computes on ([`ThreadPool`]); dropped
    /// after the context is freed.
    threadpool: Option<Rc<ThreadPool>>,
    n_ctx: u32,
    /// Positions each sequence may use (`n_ctx / n_seq_max`, padded by llama.cpp).
    n_ctx_seq: u32,
    n_seq_max: u32,
    n_batch: u32,
    n_ubatch: u32,
    /// How an embedding decode pools (what `embedding_seq` reads).
    pooling: Pooling,
    /// Which entries of the last decoded batch have logits a sampler may read.
    logits: Vec<bool>,
    /// The context's CPU backend (owned by llama.cpp, freed with the context), and
    /// whether it computes with its reference kernels now
    /// ([`Context::decode_batch_invariant`]).
    cpu_backend: Option<NonNull<c_void>>,
    reference_kernels: bool,
    /// Whether the fast kernels are batch-invariant already for this model and
    /// these parameters ([`fast_kernels_batch_invariant`]).
    fast_kernels_invariant: bool,
    /// Whether the reference kernels would make it so where the fast ones do not
    /// ([`reference_kernels_batch_invariant`]).
    reference_invariant: bool,
    /// Raw pointers make the type `!Send` and `!Sync` on purpose.
    _not_send: PhantomData<*mut ()>,
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `llama_init_from_model` and is freed exactly once here,
        // before the borrowed model can be dropped.
        unsafe { sys::llama_free(self.raw.as_ptr()) };
        if self.fast_kernels_invariant {
            EXACT_COLUMNS.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl<'m> Context<'m> {
    /// A context on `model` with a thread pool of its own.
    pub fn new(model: &'m Model, params: &ContextParams) -> Result<Context<'m>, InitError> {
        Context::with_pool(model, params, None)
    }

    /// A context on `model` computing on `other`'s thread pool where it has one
    /// of as many threads (a draft model's context beside its model's: the one
    /// thread that drives both never runs two decodes at once), else its own.
    pub fn sharing_threads(
        model: &'m Model,
        params: &ContextParams,
        other: &Context<'_>,
    ) -> Result<Context<'m>, InitError> {
        let pool = other
            .threadpool
            .as_ref()
            .filter(|pool| pool.n_threads == params.n_threads);
        Context::with_pool(model, params, pool.cloned())
    }

    fn with_pool(
        model: &'m Model,
        params: &ContextParams,
        pool: Option<Rc<ThreadPool>>,
    ) -> Result<Context<'m>, InitError> {
        params.validate().map_err(InitError::Param)?;
        // SAFETY: returns a plain struct of defaults.
        let mut raw_params = unsafe { sys::llama_context_default_params() };
        raw_params.n_ctx = params.n_ctx;
        raw_params.n_batch = params.n_batch;
        raw_params.n_ubatch = params.n_ubatch;
        raw_params.n_seq_max = params.n_seq_max;
        // Each sequence gets its own share of the cache, as llama-server does with an
        // explicit --parallel: a request can never be starved by its neighbours.
        raw_params.kv_unified = false;
        // A model with sliding-window layers (Gemma 2 and 3, gpt-oss, ...) keeps only
        // their window (and a batch) in those layers' cache, as llama-server does: a
        // fraction of the memory over a long context. Each turn still reuses the cache
        // (it appends); `truncate_seq` refuses a cut further back than they hold.
        raw_params.swa_full = false;
        raw_params.n_threads = params.n_threads;
        raw_params.n_threads_batch = params.n_threads;
        raw_params.type_k = params.cache_type.ggml();
        raw_params.type_v = params.cache_type.ggml();
        raw_params.flash_attn_type = match params.flash_attn {
            None => sys::LLAMA_FLASH_ATTN_TYPE_AUTO,
            Some(true) => sys::LLAMA_FLASH_ATTN_TYPE_ENABLED,
            Some(false) => sys::LLAMA_FLASH_ATTN_TYPE_DISABLED,
        };
        raw_params.pooling_type = params.pooling.raw();
        raw_params.abort_callback = Some(abort_requested);
        raw_params.abort_callback_data = Arc::as_ptr(&params.abort) as *mut c_void;
        // The CPU backend llama.cpp makes for this context (see the `--wrap` above).
        CPU_BACKEND_MADE.with(|made| made.set(std::ptr::null_mut()));
        // SAFETY: `model` is valid and outlives the context (borrow `'m`); the abort data
        // pointer stays valid because the context stores a clone of the `Arc`.
        let raw = unsafe { sys::llama_init_from_model(model.as_ptr(), raw_params) };
        let cpu_backend = NonNull::new(CPU_BACKEND_MADE.with(|made| made.take()));
        let raw = NonNull::new(raw)
            .ok_or_else(|| InitError::Failed(format!("n_ctx {} (out of memory?)", params.n_ctx)))?;
        // SAFETY: `raw` is a valid context.
        let (n_ctx, n_ctx_seq, n_seq_max, n_batch, n_ubatch) = unsafe {
            (
                sys::llama_n_ctx(raw.as_ptr()),
                sys::llama_n_ctx_seq(raw.as_ptr()),
                sys::llama_n_seq_max(raw.as_ptr()),
                sys::llama_n_batch(raw.as_ptr()),
                sys::llama_n_ubatch(raw.as_ptr()),
            )
        };
        let threadpool = pool.or_else(|| ThreadPool::new(params.n_threads));
        if let Some(pool) = &threadpool {
            pool.attach(raw);
        }
        let fast_kernels_invariant = fast_kernels_batch_invariant(model, params);
        if fast_kernels_invariant {
            EXACT_COLUMNS.fetch_add(1, Ordering::SeqCst);
        }
        Ok(Context {
            raw,
            model,
            _abort: Arc::clone(&params.abort),
            threadpool,
            n_ctx,
            n_ctx_seq,
            n_seq_max,
            n_batch,
            n_ubatch,
            pooling: params.pooling,
            logits: Vec::new(),
            cpu_backend,
            reference_kernels: false,
            fast_kernels_invariant,
            reference_invariant: reference_kernels_batch_invariant(model),
            _not_send: PhantomData,
        })
    }

    /// The raw context, for libmtmd's helpers in [`super::vision`].
    pub(super) fn as_ptr(&self) -> *mut sys::llama_context {
        self.raw.as_ptr()
    }

    pub fn model(&self) -> &'m Model {
        self.model
    }

    pub fn n_ctx(&self) -> u32 {
        self.n_ctx
    }

    pub fn n_batch(&self) -> u32 {
        self.n_batch
    }

    /// Computes the next decodes with `n` threads (at most the pool's; the rest of
    /// the pool sits idle), for generation and batches alike.
    pub fn set_threads(&mut self, n: i32) {
        // SAFETY: `raw` is a live context; llama.cpp only stores the counts.
        unsafe { sys::llama_set_n_threads(self.raw.as_ptr(), n, n) };
    }

    /// Puts the thread pool's workers to sleep until the next decode (whose
    /// kick-off wakes them). After a decode they poll for new work for a while
    /// (ggml's `poll`, up to 100 ms or so), spinning on cores that whatever runs
    /// next wants: libmtmd's image encoder, which computes on threads of its own,
    /// took 7 times as long beside them on 2 cores; an idle server's tools and
    /// HTTP workers the same.
    pub fn rest_threads(&self) {
        if let Some(pool) = &self.threadpool {
            // SAFETY: `pool` is the live pool attached to this context; pausing
            // takes its mutex and only flags the workers, which finish any graph
            // first (no decode runs now: the contexts sharing a pool belong to the
            // one thread that drives them, and a context is neither `Send` nor `Sync`).
            unsafe { sys::ggml_threadpool_pause(pool.raw.as_ptr()) };
        }
    }

    /// The physical batch: the most tokens one embedding input may have, since
    /// llama.cpp pools a sequence's outputs within one physical batch.
    pub fn n_ubatch(&self) -> u32 {
        self.n_ubatch
    }

    /// Positions one sequence may use: the context each slot sees.
    pub fn n_ctx_seq(&self) -> u32 {
        self.n_ctx_seq
    }

    pub fn n_seq_max(&self) -> u32 {
        self.n_seq_max
    }

    /// Runs the model over `batch`, appending its tokens to the KV cache, with the
    /// kernels llama.cpp picks for the batch's size.
    pub fn decode(&mut self, batch: &Batch) -> Result<(), DecodeError> {
        self.decode_with(batch, false)
    }

    /// [`Context::decode`], computing each token on the CPU as it would be computed
    /// alone: the logits of a token verified in a batch equal those of decoding it
    /// alone, and so do the cache entries it writes. llama.cpp's kernels pick their
    /// path by the number of columns. Where the fast kernels compute every column
    /// alike anyway ([`fast_kernels_batch_invariant`]: SmolLM2's Q4_1 and Q8_0, say,
    /// with llamafile's sgemm taking single columns too, see
    /// `lone::sgemm`) this is [`Context::decode`]. Elsewhere it decodes
    /// with ggml's reference CPU kernels (`ggml_backend_cpu_set_use_ref`: no sgemm,
    /// no tiled or split flash attention, no fused ops), which compute every column
    /// as a lone token's dot products, and a batch loses sgemm's speed by it. Those
    /// kernels leave ggml's repacked weights (Q4_0, Q4_K, IQ4_NL, MXFP4; Q2_K with
    /// AVX-512) to their gemv and gemm, which do not agree: for such a model nothing
    /// is invariant, and this decodes with the fast kernels, as llama-server's
    /// speculation does ([`reference_kernels_batch_invariant`]). It changes nothing
    /// in a GPU backend's kernels.
    pub fn decode_batch_invariant(&mut self, batch: &Batch) -> Result<(), DecodeError> {
        let reference = !self.fast_kernels_invariant && self.reference_invariant;
        self.decode_with(batch, reference)
    }

    /// Whether [`Context::decode_batch_invariant`] decodes with the fast kernels.
    #[cfg(test)]
    pub fn fast_kernels_invariant(&self) -> bool {
        self.fast_kernels_invariant
    }

    fn decode_with(&mut self, batch: &Batch, reference: bool) -> Result<(), DecodeError> {
        if let Some(backend) = self
            .cpu_backend
            .filter(|_| self.reference_kernels != reference)
        {
            // SAFETY: `backend` is this context's CPU backend, alive as long as the
            // context; ggml only stores the flag, read by the next graph computation.
            unsafe { ggml_backend_cpu_set_use_ref(backend.as_ptr(), reference) };
            self.reference_kernels = reference;
        }
        if batch.is_empty() {
            return Err(DecodeError::BadBatch("empty batch".into()));
        }
        let end = batch.max_pos().map_or(0, |p| p as usize + 1);
        if end > self.n_ctx_seq as usize {
            let n_ctx = self.n_ctx_seq as usize;
            return Err(DecodeError::ContextFull { needed: end, n_ctx });
        }
        self.logits.clear();
        // SAFETY: `raw` is valid; the batch's arrays were allocated by `llama_batch_init`
        // with room for `n_tokens` entries, which `Batch` guarantees. Sequence ids are
        // checked against the context below (llama.cpp rejects the batch otherwise).
        let code = unsafe { sys::llama_decode(self.raw.as_ptr(), batch.raw()) };
        if code == 0 {
            self.logits.extend_from_slice(batch.logit_flags());
        }
        match code {
            0 => Ok(()),
            1 => Err(DecodeError::NoKvSlot),
            2 => Err(DecodeError::Aborted),
            other => Err(DecodeError::Failed(other)),
        }
    }

    /// Waits until the last decode has finished on its device (a GPU runs it after
    /// `decode` returns; reading logits waits the same way). The benchmark's loop reads
    /// no logits, so it waits here.
    pub fn synchronize(&mut self) {
        // SAFETY: `raw` is a valid context, used on this thread only.
        unsafe { sys::llama_synchronize(self.raw.as_ptr()) }
    }

    /// Removes the cached positions `from..` of sequence `seq`, so that decoding goes
    /// on at `from` (`from` 0 clears it). Where the cache cannot be cut there it
    /// removes the whole sequence and returns false, and decoding starts over at 0: a
    /// recurrent state cannot be cut short, and the sliding-window layers of a model
    /// that has them keep only their window (and a batch), so the positions the token
    /// at `from` attends to may be gone from them although the other layers still hold
    /// them (llama-server makes the same test before it reuses a cached prefix).
    ///
    /// The last decode's logits stay readable: llama.cpp keeps them in the context's
    /// output buffer, which only a decode rewrites, and a batch that verified several
    /// slots' drafts is sampled slot by slot, each dropping its rejected draft.
    pub fn truncate_seq(&mut self, seq: i32, from: usize) -> bool {
        if !self.is_seq(seq) {
            return false;
        }
        let Ok(p0) = i32::try_from(from) else {
            return true;
        };
        // SAFETY: `raw` is valid; the memory handle belongs to it and is used at once;
        // `seq` is a sequence of this context (checked above).
        unsafe {
            let mem = sys::llama_get_memory(self.raw.as_ptr());
            let cut = self.holds_window(seq, from) && sys::llama_memory_seq_rm(mem, seq, p0, -1);
            cut || {
                sys::llama_memory_seq_rm(mem, seq, 0, -1);
                false
            }
        }
    }

    /// Whether `seq` is one of this context's sequences (`0..n_seq_max`).
    fn is_seq(&self, seq: i32) -> bool {
        u32::try_from(seq).is_ok_and(|seq| seq < self.n_seq_max)
    }

    /// Whether sequence `seq` still holds every cached position that the token at
    /// `from` attends to (see [`Context::truncate_seq`]): always, without a sliding
    /// window or at 0.
    pub fn holds_window(&self, seq: i32, from: usize) -> bool {
        if !self.is_seq(seq) {
            return false;
        }
        let Ok(p0) = i32::try_from(from) else {
            return false;
        };
        // The oldest position the token at `p0` attends to: a sliding window of `n`
        // masks every key `n` or more positions back; without one, all of them.
        let needed = match i32::try_from(self.model.n_swa()) {
            Ok(window) if window > 0 => p0.saturating_sub(window - 1).max(0),
            _ => 0,
        };
        // SAFETY: `raw` is valid; the memory handle belongs to it and is used at once;
        // `seq` is a sequence of this context (checked above); this only reads.
        p0 == 0
            || unsafe {
                let mem = sys::llama_get_memory(self.raw.as_ptr());
                sys::llama_memory_seq_pos_min(mem, seq) <= needed
            }
    }

    /// Makes sequence `dst` a copy of sequence `src`: the same cells at the same
    /// positions, so a prefix one conversation decoded serves another without decoding
    /// it again. What `dst` held is dropped. Where each sequence has a cache of its
    /// own (shepherd's slots), llama.cpp copies `src`'s whole share of the cache into
    /// `dst`'s at the next decode, a memory copy far cheaper than decoding: the caller
    /// cuts the copy down to the prefix it wants with [`Context::truncate_seq`].
    /// False (and `dst` empty) where the memory did not copy it: llama.cpp skips the
    /// copy silently for caches that share their cells with other layers.
    pub fn copy_seq(&mut self, src: i32, dst: i32) -> bool {
        self.logits.clear();
        if !self.is_seq(src) || !self.is_seq(dst) || src == dst {
            return false;
        }
        // SAFETY: `raw` is valid; the memory handle belongs to it and is used at once;
        // both sequences are sequences of this context (checked above), and -1/-1 is the
        // whole range, the only one llama.cpp copies between separate caches.
        unsafe {
            let mem = sys::llama_get_memory(self.raw.as_ptr());
            sys::llama_memory_seq_rm(mem, dst, -1, -1);
            sys::llama_memory_seq_cp(mem, src, dst, -1, -1);
            let copied = sys::llama_memory_seq_pos_max(mem, dst)
                == sys::llama_memory_seq_pos_max(mem, src)
                && sys::llama_memory_seq_pos_min(mem, dst)
                    == sys::llama_memory_seq_pos_min(mem, src);
            if !copied {
                sys::llama_memory_seq_rm(mem, dst, -1, -1);
            }
            copied
        }
    }

    /// Turns the output of pooled embeddings on (for an embedding decode) or off
    /// (generation: logits only).
    pub fn set_embeddings(&mut self, on: bool) {
        // SAFETY: `raw` is a valid context, used on this thread only; the flag only
        // changes what the next decode outputs.
        unsafe { sys::llama_set_embeddings(self.raw.as_ptr(), on) }
    }

    /// How an embedding decode pools (`--pooling`, fixed at creation).
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// The pooled embedding of sequence `seq` from the last decode, which must have
    /// run with embeddings on (`None` otherwise, or for a sequence it did not hold):
    /// `n_embd` floats, or with [`Pooling::Rank`] the model's `n_cls_out` scores.
    pub fn embedding_seq(&self, seq: i32) -> Option<Vec<f32>> {
        if !self.is_seq(seq) {
            return None;
        }
        let n_out = match self.pooling {
            Pooling::Rank => usize::try_from(self.model().n_cls_out()).ok()?,
            _ => usize::try_from(self.model().n_embd()).ok()?,
        };
        // SAFETY: `raw` is valid and `seq` one of its sequences (checked above);
        // llama.cpp returns null unless the last decode pooled that sequence, else a
        // pointer to the floats it owns until the next decode: `n_embd` of them, or
        // `n_cls_out` under rank pooling (llama.cpp sizes the sequence's output by
        // the pooling type). They are copied out at once.
        unsafe {
            let ptr = sys::llama_get_embeddings_seq(self.raw.as_ptr(), seq);
            (!ptr.is_null()).then(|| std::slice::from_raw_parts(ptr, n_out).to_vec())
        }
    }

    /// The cached state (KV cells, positions) of sequence `seq` as bytes, for the
    /// prompt cache on disk; `None` when it is empty or could not be read.
    pub fn seq_state(&mut self, seq: i32) -> Option<Vec<u8>> {
        if !self.is_seq(seq) {
            return None;
        }
        // SAFETY: `raw` is valid and `seq` is one of its sequences (checked above);
        // this only measures.
        let size = unsafe { sys::llama_state_seq_get_size(self.raw.as_ptr(), seq) };
        if size == 0 {
            return None;
        }
        let mut state = vec![0u8; size];
        // SAFETY: `state` is a writable buffer of exactly `size` bytes, the size
        // llama.cpp just asked for this sequence; nothing decodes in between.
        let written = unsafe {
            sys::llama_state_seq_get_data(self.raw.as_ptr(), state.as_mut_ptr(), size, seq)
        };
        (written == size).then_some(state)
    }

    /// Replaces what sequence `seq` holds with `state` (from [`Context::seq_state`]
    /// of a context with the same model and parameters). False, with `seq` left
    /// empty, when llama.cpp refused it.
    pub fn set_seq_state(&mut self, seq: i32, state: &[u8]) -> bool {
        self.logits.clear();
        if !self.is_seq(seq) || !self.truncate_seq(seq, 0) {
            return false;
        }
        // SAFETY: `state` is a readable buffer of `state.len()` bytes; llama.cpp
        // checks what it reads against its own format and fails with 0.
        let read = unsafe {
            sys::llama_state_seq_set_data(self.raw.as_ptr(), state.as_ptr(), state.len(), seq)
        };
        if read == 0 {
            self.truncate_seq(seq, 0);
        }
        read != 0
    }

    /// The last position sequence `seq` holds (`None` when it holds none): the
    /// next decode of `seq` must go on right after it.
    pub fn seq_pos_max(&self, seq: i32) -> Option<usize> {
        if !self.is_seq(seq) {
            return None;
        }
        // SAFETY: `raw` is valid; the memory handle belongs to it and is used at once;
        // `seq` is a sequence of this context (checked above); this only reads.
        let last = unsafe {
            let mem = sys::llama_get_memory(self.raw.as_ptr());
            sys::llama_memory_seq_pos_max(mem, seq)
        };
        usize::try_from(last).ok()
    }

    /// The state of sequence `seq`'s sliding-window layers alone (llama.cpp's partial
    /// state: the part a cut cannot give back), for a checkpoint that
    /// [`Context::restore_window`] puts back; `None` for a model without such layers,
    /// an empty sequence, or when it could not be read.
    pub fn window_state(&mut self, seq: i32) -> Option<Vec<u8>> {
        if !self.is_seq(seq) || self.model.n_swa() == 0 {
            return None;
        }
        let flags = LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY;
        // SAFETY: `raw` is valid and `seq` is one of its sequences (checked above);
        // this only measures.
        let size = unsafe { sys::llama_state_seq_get_size_ext(self.raw.as_ptr(), seq, flags) };
        if size == 0 {
            return None;
        }
        let mut state = vec![0u8; size];
        // SAFETY: `state` is a writable buffer of exactly `size` bytes, the size
        // llama.cpp just asked for this sequence and flags; nothing decodes between.
        let written = unsafe {
            sys::llama_state_seq_get_data_ext(
                self.raw.as_ptr(),
                state.as_mut_ptr(),
                size,
                seq,
                flags,
            )
        };
        (written == size).then_some(state)
    }

    /// Puts back the sliding-window layers' `state` ([`Context::window_state`], taken
    /// when a sequence held positions `0..at` of the tokens `seq`'s other layers hold
    /// now) and cuts the other layers to `at`: `seq` then holds `0..at`, and decoding
    /// goes on there. False, with `seq` left empty, when llama.cpp refused it.
    pub fn restore_window(&mut self, seq: i32, state: &[u8], at: usize) -> bool {
        self.logits.clear();
        if !self.is_seq(seq) {
            return false;
        }
        let flags = LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY;
        // SAFETY: `state` is a readable buffer of `state.len()` bytes; llama.cpp
        // checks what it reads against its own format and fails with 0. It replaces
        // only the sliding-window layers' cells of `seq`.
        let read = unsafe {
            sys::llama_state_seq_set_data_ext(
                self.raw.as_ptr(),
                state.as_ptr(),
                state.len(),
                seq,
                flags,
            )
        };
        if read == 0 || !self.truncate_seq(seq, at) {
            self.truncate_seq(seq, 0);
            return false;
        }
        true
    }

    /// Whether entry `index` of the last decoded batch has logits.
    pub fn has_logits_at(&self, index: usize) -> bool {
        self.logits.get(index).copied().unwrap_or(false)
    }

    /// The logits (one per vocabulary entry) of entry `index` of the last decoded
    /// batch; `None` when that entry has none.
    pub fn logits_at(&self, index: usize) -> Option<&[f32]> {
        if !self.has_logits_at(index) {
            return None;
        }
        let idx = i32::try_from(index).ok()?;
        let n_vocab = usize::try_from(self.model().n_vocab()).ok()?;
        // SAFETY: `raw` is valid and entry `index` of its last decode has logits (checked
        // above), so llama.cpp returns a pointer to `n_vocab` floats (or null). They stay
        // unchanged until the next decode, which needs `&mut self` and so ends this borrow.
        unsafe {
            let ptr = sys::llama_get_logits_ith(self.raw.as_ptr(), idx);
            (!ptr.is_null()).then(|| std::slice::from_raw_parts(ptr, n_vocab))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(params: ContextParams, ok: bool) {
        assert_eq!(params.validate().is_ok(), ok, "{params:?}");
    }

    #[test]
    fn parameters_are_range_checked() {
        check(ContextParams::default(), true);
        check(
            ContextParams {
                n_ctx: 0,
                ..Default::default()
            },
            false,
        );
        check(
            ContextParams {
                n_ctx: MAX_CONTEXT + 1,
                ..Default::default()
            },
            false,
        );
        check(
            ContextParams {
                n_batch: 4096,
                ..Default::default()
            },
            false,
        );
        check(
            ContextParams {
                n_ubatch: 1024,
                ..Default::default()
            },
            false,
        );
        check(
            ContextParams {
                n_threads: 0,
                ..Default::default()
            },
            false,
        );
        check(
            ContextParams {
                n_seq_max: 0,
                ..Default::default()
            },
            false,
        );
        check(
            ContextParams {
                n_seq_max: MAX_SEQUENCES + 1,
                ..Default::default()
            },
            false,
        );
    }

    #[test]
    fn cache_types_parse() {
        assert_eq!(CacheType::parse("q8_0"), Some(CacheType::Q8_0));
        assert_eq!(CacheType::parse("f16"), Some(CacheType::F16));
        assert_eq!(CacheType::parse("q2"), None);
    }

    /// A copied sequence continues as the original would: the next token's logits
    /// after a copy cut back by one equal those of the original decode.
    #[test]
    fn a_copied_sequence_continues_as_the_original() {
        use crate::llama::{test_context_params, test_model, Batch};
        let model = test_model();
        let mut ctx = Context::new(&model, &test_context_params(512, 2)).unwrap();
        assert!(!ctx.copy_seq(0, 0));
        assert!(!ctx.copy_seq(0, 2));
        assert!(!ctx.copy_seq(-1, 1));
        let prompt = model
            .tokenize("<|im_start|>user\nName three rivers.<|im_end|>\n", false)
            .unwrap();
        let last = prompt.len() - 1;
        let mut batch = Batch::new(256).unwrap();
        for (i, &t) in prompt.iter().enumerate() {
            batch.push_seq(t, i, 0, i == last).unwrap();
        }
        ctx.decode(&batch).unwrap();
        let original = ctx.logits_at(last).unwrap().to_vec();

        assert!(ctx.copy_seq(0, 1));
        assert!(ctx.truncate_seq(1, last));
        batch.clear();
        batch.push_seq(prompt[last], last, 1, true).unwrap();
        ctx.decode(&batch).unwrap();
        let copied = ctx.logits_at(0).unwrap();
        let argmax = |l: &[f32]| (0..l.len()).max_by(|&a, &b| l[a].total_cmp(&l[b]));
        assert_eq!(argmax(copied), argmax(&original));
        let gap = original
            .iter()
            .zip(copied)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(gap < 0.05, "{gap}");
    }

    /// With the fast kernels and SmolLM2's types, a token decoded alone gets exactly
    /// the logits it gets as a column of a batch (llamafile's sgemm takes the lone
    /// column too, `__wrap_llamafile_sgemm`), so a verified draft needs no slower
    /// kernels. Where that cannot hold the context says so.
    #[test]
    fn a_lone_token_gets_the_logits_it_gets_in_a_batch() {
        use crate::llama::{test_context_params, test_model, Batch, ModelParams};
        use crate::util::dirs::test_models::swa_test_model_path;
        let model = test_model();
        let params = ContextParams {
            flash_attn: Some(false),
            ..test_context_params(512, 1)
        };
        let flash = ContextParams {
            flash_attn: Some(true),
            ..params.clone()
        };
        let ctx = Context::new(&model, &flash).unwrap();
        assert!(
            !ctx.fast_kernels_invariant(),
            "flash attention tiles a batch"
        );
        drop(ctx);
        let gemma = Model::load(&swa_test_model_path(), &ModelParams::default()).unwrap();
        let ctx = Context::new(&gemma, &params).unwrap();
        assert!(!ctx.fast_kernels_invariant(), "Q4_K is repacked");
        drop(ctx);

        let mut ctx = Context::new(&model, &params).unwrap();
        // Native (AVX-512 too) and portable builds alike: `lone` mirrors both.
        assert_eq!(ctx.fast_kernels_invariant(), super::super::lone::enabled());
        if !ctx.fast_kernels_invariant() {
            return;
        }
        // This context's lone columns go the exact way whatever other tests hold.
        assert!(EXACT_COLUMNS.load(Ordering::SeqCst) >= 1);
        let text = "<|im_start|>user\nName three rivers of Europe.<|im_end|>\n\
                    <|im_start|>assistant\nThe Danube, which rises in the Black Forest";
        let tokens = model.tokenize(text, false).unwrap();
        let (head, tail) = tokens.split_at(tokens.len() - 6);
        let mut batch = Batch::new(256).unwrap();
        for (i, &t) in head.iter().enumerate() {
            batch.push_seq(t, i, 0, false).unwrap();
        }
        ctx.decode(&batch).unwrap();
        let mut alone = Vec::new();
        for (j, &t) in tail.iter().enumerate() {
            batch.clear();
            batch.push_seq(t, head.len() + j, 0, true).unwrap();
            ctx.decode(&batch).unwrap();
            alone.push(ctx.logits_at(0).unwrap().to_vec());
        }
        assert!(ctx.truncate_seq(0, head.len()));
        batch.clear();
        for (j, &t) in tail.iter().enumerate() {
            batch.push_seq(t, head.len() + j, 0, true).unwrap();
        }
        ctx.decode(&batch).unwrap();
        for (j, lone) in alone.iter().enumerate() {
            let batched = ctx.logits_at(j).unwrap();
            let gap = lone
                .iter()
                .zip(batched)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            let same = lone
                .iter()
                .zip(batched)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "token {j} of the batch: logits differ by up to {gap}");
        }
    }
}

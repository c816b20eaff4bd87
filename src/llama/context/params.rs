//! A context's parameters: the cache's element type, the pooling, the sizes,
//! batches and threads, each range-checked before llama.cpp sees them.

use super::*;

/// Element type of the K and V caches (`--cache-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheType {
    #[default]
    F16,
    F32,
    Q8_0,
    Q4_0,
}

impl CacheType {
    /// The `--cache-type` words, in [`CacheType::parse`]'s order.
    pub const NAMES: [&'static str; 4] = ["f16", "f32", "q8_0", "q4_0"];

    pub fn parse(name: &str) -> Option<CacheType> {
        match name {
            "f16" => Some(CacheType::F16),
            "f32" => Some(CacheType::F32),
            "q8_0" => Some(CacheType::Q8_0),
            "q4_0" => Some(CacheType::Q4_0),
            _ => None,
        }
    }

    pub(super) fn ggml(self) -> sys::ggml_type {
        match self {
            CacheType::F16 => sys::GGML_TYPE_F16,
            CacheType::F32 => sys::GGML_TYPE_F32,
            CacheType::Q8_0 => sys::GGML_TYPE_Q8_0,
            CacheType::Q4_0 => sys::GGML_TYPE_Q4_0,
        }
    }
}

/// How an embedding is made of a sequence's per-token outputs (`--pooling`), for
/// the API server's `/v1/embeddings` (and, `Rank`, its `/rerank`). Chosen when the
/// context is created; it changes nothing while embeddings are off (generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooling {
    /// The mean over every token of the input (llama-server's default for most models).
    #[default]
    Mean,
    /// The first token's output.
    Cls,
    /// The last token's output.
    Last,
    /// A reranker's relevance score of the sequence (a query and a document):
    /// its classification head's outputs (`n_cls_out` floats, not a vector to
    /// normalise); a causal model without one gives its last token's first output.
    Rank,
}

impl Pooling {
    /// The `--pooling` words, in [`Pooling::parse`]'s order.
    pub const NAMES: [&'static str; 4] = ["mean", "cls", "last", "rank"];

    pub fn parse(name: &str) -> Option<Pooling> {
        match name {
            "mean" => Some(Pooling::Mean),
            "cls" => Some(Pooling::Cls),
            "last" => Some(Pooling::Last),
            "rank" => Some(Pooling::Rank),
            _ => None,
        }
    }

    pub(super) fn raw(self) -> sys::llama_pooling_type {
        match self {
            Pooling::Mean => sys::LLAMA_POOLING_TYPE_MEAN,
            Pooling::Cls => sys::LLAMA_POOLING_TYPE_CLS,
            Pooling::Last => sys::LLAMA_POOLING_TYPE_LAST,
            Pooling::Rank => sys::LLAMA_POOLING_TYPE_RANK,
        }
    }
}

/// How to create a context. Every number is checked by [`ContextParams::validate`].
#[derive(Debug, Clone)]
pub struct ContextParams {
    pub n_ctx: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub n_threads: i32,
    /// Sequences (slots) sharing the context; each gets `n_ctx / n_seq_max` positions.
    pub n_seq_max: u32,
    pub cache_type: CacheType,
    /// `None` lets llama.cpp decide (auto).
    pub flash_attn: Option<bool>,
    pub pooling: Pooling,
    /// Set to true to abort a running decode.
    pub abort: Arc<AtomicBool>,
}

impl Default for ContextParams {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        ContextParams {
            n_ctx: 2048,
            n_batch: 512,
            n_ubatch: 512,
            n_threads: i32::try_from(threads.min(16)).unwrap_or(2),
            n_seq_max: 1,
            cache_type: CacheType::F16,
            flash_attn: None,
            pooling: Pooling::Mean,
            abort: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// The largest context shepherd asks for; far beyond what fits in memory on small machines anyway.
pub const MAX_CONTEXT: u32 = 1 << 20;
/// The most sequences one context may hold (llama.cpp's `LLAMA_MAX_SEQ` is 256).
pub const MAX_SEQUENCES: u32 = 256;

impl ContextParams {
    pub fn validate(&self) -> Result<(), InvalidParam> {
        check_range("context size", self.n_ctx, 16, MAX_CONTEXT)?;
        check_range("n_batch", self.n_batch, 1, self.n_ctx)?;
        check_range("ubatch", self.n_ubatch, 1, self.n_batch)?;
        check_range("sequences", self.n_seq_max, 1, MAX_SEQUENCES)?;
        check_range("threads", self.n_threads, 1, 512)
    }
}

pub(super) fn check_range<T: PartialOrd + std::fmt::Display>(
    name: &'static str,
    value: T,
    min: T,
    max: T,
) -> Result<(), InvalidParam> {
    if value < min || value > max {
        let message = format!("{value} is outside {min}..={max}");
        return Err(InvalidParam::new(name, message));
    }
    Ok(())
}

/// Checked by llama.cpp between graph computations; true stops the decode.
pub(super) unsafe extern "C" fn abort_requested(data: *mut c_void) -> bool {
    if data.is_null() {
        return false;
    }
    // SAFETY: `data` is `Arc::as_ptr` of the `AtomicBool` that the `Context` keeps alive
    // for as long as the C context exists.
    unsafe { &*(data as *const AtomicBool) }.load(Ordering::Relaxed)
}

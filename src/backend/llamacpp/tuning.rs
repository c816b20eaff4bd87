//! How the context is tuned for where the model runs: threads, flash attention,
//! physical batch and the default context size, each with the reason behind it
//! (the measurements: docs/LLAMA.md, "Why the defaults").

use crate::llama::CacheType;

/// The default context is the training context, capped so a big model does not exhaust memory.
pub const DEFAULT_CONTEXT_CAP: u32 = 8192;

/// How a flash-attention setting reads in logs and in the bench's report.
pub fn flash_attn_label(setting: Option<bool>) -> &'static str {
    match setting {
        Some(true) => "on",
        Some(false) => "off",
        None => "auto",
    }
}

/// Whether every layer runs on the CPU: none asked for the GPU, or no GPU backend.
pub fn all_on_cpu(gpu_layers: i32) -> bool {
    gpu_layers == 0 || !crate::llama::supports_gpu_offload()
}

/// Whether `gpu_layers` puts every layer of a model of `n_layer` layers, the output
/// layer included (llama.cpp offloads it from `n_layer + 1` on), on a GPU this build
/// can use.
pub fn all_on_gpu(gpu_layers: i32, n_layer: u32) -> bool {
    let every_layer = gpu_layers < 0 || i64::from(gpu_layers) > i64::from(n_layer);
    every_layer && !all_on_cpu(gpu_layers)
}

/// CPU threads when every layer runs on a GPU (see [`threads_for`]).
pub const GPU_ONLY_THREADS: i32 = 2;

/// CPU threads: as requested, else [`GPU_ONLY_THREADS`] (at most `cores`) when every
/// layer runs on a GPU, else `cores`.
///
/// With the whole model on a GPU, the CPU's pool only gathers the token embeddings, and
/// its spinning workers take cores from the thread that launches the GPU's work and
/// waits for it: fewer threads generate faster there (docs/LLAMA.md, "Why the
/// defaults").
pub fn threads_for(requested: Option<i32>, all_on_gpu: bool, cores: i32) -> i32 {
    match requested {
        Some(n) => n,
        None if all_on_gpu => GPU_ONLY_THREADS.min(cores),
        None => cores,
    }
}

/// Flash attention as requested, with auto (`None`) decided for this placement and
/// cache type.
///
/// llama.cpp's own auto turns it on wherever the op is supported, the CPU included. Its
/// CPU kernel walks the cache cell by cell for a small batch, with a fixed cost per cell
/// and head on top of the head's vector work, and takes each query of a batch on its
/// own, so a speculative step's drafted tokens cost about twice what they do without it.
/// Measured at depth 0 and 1,536 tokens deep (an agent's opening alone is about 1,500
/// tokens) on two CPUs, both kernel sets and three head sizes (docs/LLAMA.md, "Why the
/// defaults"), the rule is:
/// - on AVX2 kernels, heads of 256 or more ([`AVX2_FLASH_ATTN_MIN_HEAD_DIM`]) get it:
///   there it is level or ahead at both depths;
/// - elsewhere auto is off whenever every layer runs on the CPU and the V cache is not
///   quantized (llama.cpp needs flash attention for a quantized V cache), whatever the
///   CPU and head size: it is at most a few percent behind the better setting at either
///   depth, where turning it on is far behind deep (and `lone`'s exact verification
///   needs it off). No fixed choice is best at both depths everywhere, and an agent is
///   always deep;
/// - wherever layers go to a GPU llama.cpp's auto decides (on CUDA flash attention is
///   the faster one).
pub fn flash_attn_for(
    requested: Option<bool>,
    gpu_layers: i32,
    cache_type: CacheType,
    heads: CpuHeads,
) -> Option<bool> {
    let quantized_v = matches!(cache_type, CacheType::Q8_0 | CacheType::Q4_0);
    match requested {
        Some(forced) => Some(forced),
        None if all_on_cpu(gpu_layers) && !quantized_v => Some(heads.wide_on_avx2()),
        None => None,
    }
}

/// What flash attention's CPU rule looks at: the model's head size and the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuHeads {
    /// `Model::head_dim`, when the model says.
    pub head_dim: Option<u32>,
    /// ggml's kernels are x86's AVX2 ones (`llama::avx2_kernels`).
    pub avx2_kernels: bool,
}

/// Heads at least this wide use flash attention on AVX2 kernels.
pub const AVX2_FLASH_ATTN_MIN_HEAD_DIM: u32 = 256;

impl CpuHeads {
    /// Heads of 256 (Gemma) on AVX2 kernels: the one CPU case where flash attention
    /// is as fast or faster at every depth measured (see [`flash_attn_for`]).
    fn wide_on_avx2(self) -> bool {
        self.avx2_kernels
            && self
                .head_dim
                .is_some_and(|d| d >= AVX2_FLASH_ATTN_MIN_HEAD_DIM)
    }
}

/// llama.cpp's default physical batch (`--ubatch`).
pub const DEFAULT_UBATCH: u32 = 512;
/// The physical batch when attention runs without flash attention on the CPU.
pub const CPU_NO_FLASH_ATTN_UBATCH: u32 = 256;

/// The physical batch: as requested, else [`CPU_NO_FLASH_ATTN_UBATCH`] where attention
/// runs on the CPU without flash attention, else [`DEFAULT_UBATCH`].
///
/// Without flash attention a prompt batch computes its whole score matrix, the masked
/// half of the causal triangle included; halving the batch halves that waste, and
/// prefills faster on the CPU at every depth measured (docs/LLAMA.md, "Why the
/// defaults"). A GPU wants its batches large, and flash attention masks by blocks, so
/// both keep 512.
pub fn ubatch_for(requested: Option<u32>, flash_attn: Option<bool>, gpu_layers: i32) -> u32 {
    match requested {
        Some(n) => n,
        None if flash_attn == Some(false) && all_on_cpu(gpu_layers) => CPU_NO_FLASH_ATTN_UBATCH,
        None => DEFAULT_UBATCH,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NARROW: CpuHeads = CpuHeads {
        head_dim: Some(64),
        avx2_kernels: true,
    };
    const WIDE_AVX2: CpuHeads = CpuHeads {
        head_dim: Some(256),
        avx2_kernels: true,
    };

    #[test]
    fn auto_flash_attention_on_the_cpu_is_off_but_for_wide_heads_on_avx2_kernels() {
        // A forced choice is kept wherever the layers are.
        for layers in [0, -1] {
            assert_eq!(
                flash_attn_for(Some(true), layers, CacheType::F16, NARROW),
                Some(true)
            );
            let off = flash_attn_for(Some(false), layers, CacheType::Q8_0, WIDE_AVX2);
            assert_eq!(off, Some(false));
        }
        assert_eq!(flash_attn_for(None, 0, CacheType::F16, NARROW), Some(false));
        assert_eq!(flash_attn_for(None, 0, CacheType::F32, NARROW), Some(false));
        // Heads of 256 on AVX2 kernels are the exception; on AVX-512 kernels they are not.
        assert_eq!(
            flash_attn_for(None, 0, CacheType::F16, WIDE_AVX2),
            Some(true)
        );
        let wide_avx512 = CpuHeads {
            avx2_kernels: false,
            ..WIDE_AVX2
        };
        assert_eq!(
            flash_attn_for(None, 0, CacheType::F16, wide_avx512),
            Some(false)
        );
        let unknown = CpuHeads {
            head_dim: None,
            ..WIDE_AVX2
        };
        assert_eq!(
            flash_attn_for(None, 0, CacheType::F16, unknown),
            Some(false)
        );
        // llama.cpp refuses a quantized V cache without flash attention.
        assert_eq!(flash_attn_for(None, 0, CacheType::Q8_0, NARROW), None);
        assert_eq!(flash_attn_for(None, 0, CacheType::Q4_0, NARROW), None);
        // Layers asked for the GPU: llama.cpp decides where there is one.
        let on_gpu = crate::llama::supports_gpu_offload();
        assert_eq!(
            flash_attn_for(None, -1, CacheType::F16, NARROW),
            (!on_gpu).then_some(false)
        );
    }

    #[test]
    fn a_model_wholly_on_a_gpu_gets_few_cpu_threads_unless_asked_for_more() {
        assert_eq!(threads_for(Some(12), true, 16), 12);
        assert_eq!(threads_for(Some(12), false, 16), 12);
        assert_eq!(threads_for(None, true, 16), GPU_ONLY_THREADS);
        assert_eq!(threads_for(None, true, 1), 1);
        assert_eq!(threads_for(None, false, 16), 16);
        // Every layer means the output layer too: llama.cpp offloads it from n_layer + 1.
        let gpu = crate::llama::supports_gpu_offload();
        assert_eq!(all_on_gpu(-1, 30), gpu);
        assert_eq!(all_on_gpu(31, 30), gpu);
        assert!(!all_on_gpu(30, 30));
        assert!(!all_on_gpu(10, 30));
        assert!(!all_on_gpu(0, 30));
    }

    #[test]
    fn the_physical_batch_is_halved_only_for_attention_without_flash_attention_on_the_cpu() {
        // Asked for: kept, whatever the attention.
        for fa in [Some(false), Some(true), None] {
            assert_eq!(ubatch_for(Some(100), fa, 0), 100);
        }
        assert_eq!(ubatch_for(None, Some(false), 0), CPU_NO_FLASH_ATTN_UBATCH);
        assert_eq!(ubatch_for(None, Some(true), 0), DEFAULT_UBATCH);
        assert_eq!(ubatch_for(None, None, 0), DEFAULT_UBATCH);
        let on_gpu = crate::llama::supports_gpu_offload();
        let expected = if on_gpu {
            DEFAULT_UBATCH
        } else {
            CPU_NO_FLASH_ATTN_UBATCH
        };
        assert_eq!(ubatch_for(None, Some(false), -1), expected);
    }
}

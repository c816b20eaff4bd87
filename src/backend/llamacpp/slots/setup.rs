//! Building the worker: the context's parameters for where the model runs, the
//! cache key its saved states carry, the projector and the drafter, then
//! [`Worker::new`] setting up each part in turn.

use super::*;

/// What a sequence's saved state depends on: the llama.cpp build, the model
/// file (path, size, modification time) and every context parameter that
/// changes the cache's layout or contents.
pub(super) fn cache_key(config: &LlamaConfig, params: &ContextParams, n_ctx_seq: u32) -> String {
    let path = std::fs::canonicalize(&config.model_path).unwrap_or(config.model_path.clone());
    let meta = std::fs::metadata(&path).ok();
    let modified = meta
        .as_ref()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!(
        "shepherd {}\nggml {:?}\nmodel {} {} {modified}\nprojector {:?}\ncontext {n_ctx_seq} per sequence, cache {:?}, flash attention {:?}, ubatch {}, gpu layers {}",
        env!("CARGO_PKG_VERSION"),
        llama::ggml_build(),
        path.display(),
        meta.map_or(0, |m| m.len()),
        config.mmproj,
        params.cache_type,
        params.flash_attn,
        params.n_ubatch,
        config.gpu_layers,
    )
}

/// The projector of `--mmproj`, loaded for `model` with the context's threads.
pub(super) fn load_vision<'m>(
    model: &'m Model,
    config: &LlamaConfig,
    params: &ContextParams,
) -> Result<Option<Vision<'m>>, BackendError> {
    let Some(path) = config.mmproj.as_ref() else {
        return Ok(None);
    };
    let vision = Vision::load(path, model, params.n_threads, config.gpu_layers != 0)
        .map_err(|e| BackendError::Config(format!("--mmproj {}: {e}", path.display())))?;
    if vision.uses_mrope() {
        return Err(BackendError::Config(format!(
            "--mmproj {}: this projector places images with M-RoPE (Qwen2-VL and later), which shepherd does not decode yet",
            path.display()
        )));
    }
    crate::util::log::debug(crate::util::log::Category::Llm, || {
        format!("vision projector: {}", path.display())
    });
    Ok(Some(vision))
}

/// The context's parameters: the size, batches, threads and flash attention
/// chosen for where the model runs (see [`tuning`]).
pub(super) fn context_params(
    model: &Model,
    config: &LlamaConfig,
    preempt: &Preempt,
) -> ContextParams {
    let n_ctx = choose_context(config.context_size, model.n_ctx_train());
    let defaults = ContextParams::default();
    let parallel = config.parallel.max(1);
    // Every generating slot needs a place in each batch.
    let n_batch = config.n_batch.max(parallel).min(n_ctx);
    let heads = tuning::CpuHeads {
        head_dim: model.head_dim(),
        avx2_kernels: crate::llama::avx2_kernels(),
    };
    let flash_attn = tuning::flash_attn_for(
        config.flash_attn,
        config.gpu_layers,
        config.cache_type,
        heads,
    );
    let n_ubatch = tuning::ubatch_for(config.ubatch, flash_attn, config.gpu_layers);
    ContextParams {
        n_ctx,
        n_batch,
        n_ubatch: n_ubatch.min(n_batch),
        n_threads: tuning::threads_for(
            config.threads,
            tuning::all_on_gpu(config.gpu_layers, model.n_layer()),
            defaults.n_threads,
        ),
        n_seq_max: parallel,
        cache_type: config.cache_type,
        flash_attn,
        pooling: config.pooling,
        abort: Arc::clone(&preempt.abort),
    }
}

/// The drafter the worker speculates with, and the draft model's context (on
/// `ctx`'s thread pool): none
/// where the model cannot rewind its cache (see [`Model::can_rewind`]), nor for a
/// sliding-window model with several slots.
pub(super) fn speculation<'m>(
    model: &'m Model,
    draft: Option<&'m Model>,
    config: &LlamaConfig,
    params: &ContextParams,
    ctx: &Context<'_>,
) -> Result<(SpecMode, Option<DraftModel<'m>>), BackendError> {
    let drafter = match draft {
        Some(draft) => Some(DraftModel::new(draft, params, ctx).map_err(BackendError::Config)?),
        None => None,
    };
    let spec = match config.spec.mode {
        SpecMode::Draft if drafter.is_none() => SpecMode::Off,
        _ if !model.can_rewind() => SpecMode::Off,
        // A sliding-window model with several slots lost speed in all by speculating
        // (docs/LLAMA.md, "Why the defaults"), while one slot gains. Until the cost of
        // drafting beside other slots in a sliding-window cache is understood, such a
        // model speculates alone only.
        _ if model.n_swa() > 0 && config.parallel > 1 => SpecMode::Off,
        mode => mode,
    };
    Ok((spec, drafter))
}

/// The context size: the one requested, else the training context, capped.
pub(in crate::backend::llamacpp) fn choose_context(requested: Option<u32>, trained: u32) -> u32 {
    match requested {
        Some(n) if n > 0 => n,
        _ if trained == 0 => 2048,
        _ => trained.min(tuning::DEFAULT_CONTEXT_CAP),
    }
}

impl<'m> Worker<'m> {
    /// The worker for `model`: long because it sets up each of the worker's parts
    /// (context, slots, caches, speculation, template, sampling helper) in turn.
    pub(in crate::backend::llamacpp) fn new(
        model: &'m Model,
        draft: Option<&'m Model>,
        config: &LlamaConfig,
        preempt: Preempt,
        counters: Arc<DecodeCounters>,
        timer: IdleTimer,
    ) -> Result<Self, BackendError> {
        let params = context_params(model, config, &preempt);
        let flash_attn = params.flash_attn;
        let ctx = Context::new(model, &params).map_err(|e| BackendError::Config(e.to_string()))?;
        crate::util::log::debug(crate::util::log::Category::Llm, || {
            format!(
                "context: {} tokens, {} slot(s) of {}, flash attention {} (heads of {:?}), ubatch {}, {} thread(s)",
                ctx.n_ctx(),
                ctx.n_seq_max(),
                ctx.n_ctx_seq(),
                tuning::flash_attn_label(flash_attn),
                model.head_dim(),
                params.n_ubatch,
                params.n_threads
            )
        });
        let batch =
            Batch::new(ctx.n_batch() as usize).map_err(|e| BackendError::Config(e.to_string()))?;
        let slots: Vec<Slot> = (0..ctx.n_seq_max() as i32)
            .map(|seq| Slot {
                seq,
                mirror: Vec::new(),
                last_used: 0,
                task: None,
                served: None,
                next_turn: None,
            })
            .collect();
        // Each slot's last prompt, and the two renderings of each warm-up.
        let prompt_tokens = PromptTokens::new(model, 3 * slots.len());
        let state_key = cache_key(config, &params, ctx.n_ctx_seq());
        let prompt_cache = config.prompt_cache.as_ref().map(|cache| {
            let cache = PromptCache::new(cache, state_key.clone());
            if model.n_swa() > 0 {
                cache.whole_prefixes()
            } else {
                cache
            }
        });
        let (spec, drafter) = speculation(model, draft, config, &params, &ctx)?;
        let vision = load_vision(model, config, &params)?;
        let template = load_template(model, config.chat_template.as_deref())?
            .with_kwargs(config.chat_template_kwargs.clone());
        let call_syntax = local::call_syntax(&template, |tail| end_of_turn(model, tail));
        let learnt = call_syntax.as_ref().and_then(syntax::CallSyntax::learnt);
        crate::util::log::debug(crate::util::log::Category::Llm, || {
            format!("the template's tool-call syntax: {call_syntax:?}")
        });
        Ok(Worker {
            template,
            call_syntax,
            markers: model.control_tokens(|text| {
                format::is_marker(text) || learnt.is_some_and(|l| l.holds(text))
            }),
            learnt_call: learnt,
            prompt_tokens,
            waiting: None,
            embeds: VecDeque::new(),
            prompt_cache,
            checkpoints: Checkpoints::new(CHECKPOINTS_PER_SLOT * slots.len(), CHECKPOINT_BYTES),
            spec,
            draft_max: config.spec.draft_max,
            generating: 0,
            drafter,
            n_ctx_slot: ctx.n_ctx_seq() as usize,
            ctx,
            batch,
            slots,
            queue: VecDeque::new(),
            clock: 0,
            finished_at: Instant::now(),
            preempt,
            settings: (flash_attn, params.n_ubatch),
            threads: (params.n_threads, params.n_threads),
            state_key,
            slot_actions: VecDeque::new(),
            helper: sampling::Helper::spawn().map_err(|e| {
                BackendError::Config(format!("cannot start the sampling thread: {e}"))
            })?,
            serials: 0,
            counters,
            timer,
            vision,
        })
    }
}

//! The generation thread (`llama-gen`): it loads the model, its projector and
//! drafter, builds the [`Worker`] and serves jobs until the handles are gone;
//! a new configuration reloads in place.

use super::*;

/// What the generation thread keeps from one load of the model to the next.
pub(super) struct Thread {
    pub(super) config: LlamaConfig,
    pub(super) preempt: slots::Preempt,
    pub(super) counters: Arc<model::DecodeCounters>,
    pub(super) residency: Arc<Residency>,
}

/// Where the first load's outcome goes ([`LlamaBackend::new`] waits for it).
type Ready = Sender<Result<(BackendInfo, ModelProps), BackendError>>;

/// Why the model is loaded: the first time, or for a job that woke it.
pub(super) enum Start {
    First(Ready),
    Wake(Job),
}

impl Start {
    /// The load failed: the first one ends the thread; after sleeping, the job
    /// that woke it gets the error and the thread sleeps on.
    fn failed(self, error: BackendError) -> Served {
        match self {
            Start::First(ready) => {
                let _ = ready.send(Err(error));
                Served::Closed
            }
            Start::Wake(job) => {
                crate::util::log::debug(crate::util::log::Category::Llm, || {
                    format!("cannot wake: {error}")
                });
                job.refuse(BackendError::Config(format!(
                    "the model could not be loaded again after sleeping: {error}"
                )));
                Served::Refused
            }
        }
    }
}

/// The generation thread: loads the model, serves, and while `--sleep-idle-seconds`
/// (or a keep-alive) lets it, frees the model when idle and loads it again for the
/// next job that needs it ([`residency`]).
pub(super) fn run_worker(thread: Thread, ready: Ready, jobs: Receiver<Job>) {
    let mut start = Start::First(ready);
    loop {
        match serve_loaded(&thread, start, &jobs) {
            Served::Closed => return,
            Served::Idle => {
                // Marked only now: the model, its contexts and the draft are freed.
                thread.residency.set_asleep(true);
                crate::util::log::debug(crate::util::log::Category::Llm, || {
                    "idle: the model left memory until the next request".into()
                });
            }
            Served::Refused => {}
        }
        // Asleep: warm-up hints and keep-alives need no model (the job that wakes
        // it sets the idle limit anew).
        let woken = loop {
            match jobs.recv() {
                Ok(job) if job.needs_model() => break job,
                Ok(_) => {}
                Err(_) => return,
            }
        };
        start = Start::Wake(woken);
    }
}

/// Loads the model, its draft and the worker, and serves until every handle is
/// gone or the worker idles out; everything loaded here is freed on return
/// (the worker first: its contexts borrow the models).
pub(super) fn serve_loaded(thread: &Thread, start: Start, jobs: &Receiver<Job>) -> Served {
    let config = &thread.config;
    let params = ModelParams {
        gpu_layers: config.gpu_layers,
        split: config.split.clone(),
        progress: config.progress.clone(),
    };
    let model = match Model::load(&config.model_path, &params) {
        Ok(model) => model,
        Err(err) => return start.failed(BackendError::Config(err.to_string())),
    };
    crate::util::log::debug(crate::util::log::Category::Llm, || {
        format!(
            "loaded {} ({})",
            config.model_path.display(),
            model.description()
        )
    });
    let draft = match load_draft(&model, config, &params) {
        Ok(draft) => draft,
        Err(err) => return start.failed(err),
    };
    let timer = IdleTimer::new(config.sleep_idle, Arc::clone(&thread.residency));
    let (preempt, counters) = (thread.preempt.clone(), Arc::clone(&thread.counters));
    let worker = slots::Worker::new(&model, draft.as_ref(), config, preempt, counters, timer);
    let mut worker = match worker {
        Ok(worker) => worker,
        Err(err) => return start.failed(err),
    };
    match start {
        Start::First(ready) => {
            let info = BackendInfo {
                kind: "llamacpp",
                model: config.model_path.display().to_string(),
                context_size: worker.slot_context() as u64,
                local: true,
            };
            let props = worker.props(config);
            if ready.send(Ok((info, props))).is_err() {
                return Served::Closed;
            }
        }
        Start::Wake(job) => {
            thread.residency.set_asleep(false);
            worker.accept(job);
        }
    }
    worker.serve(jobs)
}

/// The draft model of `--spec draft`, checked against the model's vocabulary.
pub(super) fn load_draft(
    model: &Model,
    config: &LlamaConfig,
    params: &ModelParams,
) -> Result<Option<Model>, BackendError> {
    let spec = &config.spec;
    let Some(path) = spec.draft_model.as_ref() else {
        return Ok(None);
    };
    if spec.mode != speculative::SpecMode::Draft {
        return Ok(None);
    }
    let params = ModelParams {
        progress: None,
        ..params.clone()
    };
    let draft = Model::load(path, &params)
        .map_err(|e| BackendError::Config(format!("--model-draft: {e}")))?;
    speculative::check_vocab(model, &draft, path).map_err(BackendError::Config)?;
    if !draft.can_rewind() {
        return Err(BackendError::Config(format!(
            "--model-draft {}: its cache cannot drop rejected drafts (sliding-window or recurrent layers); choose another draft model or --spec ngram",
            path.display()
        )));
    }
    Ok(Some(draft))
}

/// The model's chat template and its `tool_use` variant (the GGUF key
/// `tokenizer.chat_template.tool_use`: Hermes 2 Pro, Command R+), or ChatML.
/// The model's chat template, or the one given instead of it (`--chat-template`),
/// which must parse: a typo there is an error at start, not a silent ChatML.
pub(super) fn load_template(
    model: &Model,
    given: Option<&str>,
) -> Result<ChatTemplate, BackendError> {
    let (bos, eos) = (model.bos_text(), model.eos_text());
    match given {
        Some(template::CHATML) => Ok(local::load_templates(None, None, &bos, &eos)),
        Some(name) if template::is_builtin(name) => ChatTemplate::builtin(name, &bos, &eos)
            .map_err(|e| BackendError::Config(format!("--chat-template: {e}"))),
        Some(source) => ChatTemplate::new(Some(source), &bos, &eos)
            .map_err(|e| BackendError::Config(format!("--chat-template: {e}"))),
        None => {
            let source = model.chat_template();
            let tool_use = model.meta_str("tokenizer.chat_template.tool_use");
            Ok(local::load_templates(
                source.as_deref(),
                tool_use.as_deref(),
                &bos,
                &eos,
            ))
        }
    }
}

//! What Ollama's model routes say of the served model: `POST /api/show`,
//! `GET /api/ps`, and the facts they share with `GET /api/tags` (size, digest,
//! details, the parameters as Ollama's Modelfile lines).

use std::time::SystemTime;

use serde_json::Map;

use super::super::fields::{json_body, Fields};
use super::super::{ApiServer, Loaded};
use super::reply::timestamp;
use super::{served_model, wire};
use crate::backend::Sampling;
use crate::frontend::serve::http::{Request, Responder};

/// What the model routes say of the served model.
pub(super) struct Facts {
    pub(super) size: u64,
    pub(super) modified_at: String,
    pub(super) details: wire::Details,
    pub(super) architecture: String,
    pub(super) parameters: u64,
    /// The context the model was trained for (`model_info`), else the server's.
    pub(super) trained_context: u64,
}

/// Reads the served GGUF file's header (cheap: the header only) for its
/// family, size and quantisation; an API backend's model has none of these.
pub(super) fn facts(loaded: &Loaded) -> Facts {
    let path = loaded
        .local
        .as_ref()
        .map(|m| std::path::PathBuf::from(&m.props().model_path));
    file_facts(path.as_deref(), loaded.info.context_size)
}

/// What the header of the GGUF file at `path` says; `context` is the context
/// when the file names none.
pub(super) fn file_facts(path: Option<&std::path::Path>, context: u64) -> Facts {
    let meta = path.and_then(|p| std::fs::metadata(p).ok());
    let info = path.and_then(|p| crate::llama::gguf::read_file(p).ok());
    let modified = meta
        .as_ref()
        .and_then(|m| m.modified().ok())
        .unwrap_or_else(SystemTime::now);
    let architecture = info
        .as_ref()
        .and_then(|i| i.architecture.clone())
        .unwrap_or_default();
    let parameters = info.as_ref().map_or(0, |i| i.parameters);
    Facts {
        size: meta.map_or(0, |m| m.len()),
        modified_at: timestamp(modified),
        details: wire::Details {
            parent_model: String::new(),
            format: if info.is_some() { "gguf" } else { "" }.to_string(),
            family: architecture.clone(),
            families: vec![architecture.clone()],
            parameter_size: if parameters > 0 {
                crate::backend::models::human_count(parameters)
            } else {
                String::new()
            },
            quantization_level: info.as_ref().map(|i| i.quantisation()).unwrap_or_default(),
        },
        trained_context: info
            .as_ref()
            .and_then(|i| i.context_length)
            .unwrap_or(context),
        architecture,
        parameters,
    }
}

/// The digest clients show: the SHA-256 of the served model's id (cheap and
/// stable while the id is; it is not the file's digest).
pub(super) fn digest(model: &str) -> String {
    let mut sha = crate::util::sha256::Sha256::default();
    sha.update(model.as_bytes());
    sha.hex()
}

/// `parameters` of `/api/show`: the sampling a request gets by default, in a
/// Modelfile's `name value` lines.
pub(super) fn parameter_lines(sampling: &Sampling, n_ctx: Option<u32>) -> String {
    let mut lines = Vec::new();
    let mut add = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            lines.push(format!("{name:<24}{value}"));
        }
    };
    add("num_ctx", n_ctx.map(|n| n.to_string()));
    add("num_predict", sampling.max_tokens.map(|n| n.to_string()));
    add("temperature", sampling.temperature.map(|n| n.to_string()));
    add("top_k", sampling.top_k.map(|n| n.to_string()));
    add("top_p", sampling.top_p.map(|n| n.to_string()));
    add("min_p", sampling.min_p.map(|n| n.to_string()));
    add(
        "repeat_penalty",
        sampling.repeat_penalty.map(|n| n.to_string()),
    );
    add("seed", sampling.seed.map(|n| n.to_string()));
    for stop in &sampling.stop {
        add("stop", Some(format!("\"{stop}\"")));
    }
    lines.join("\n")
}

impl ApiServer {
    pub(in crate::frontend::serve::api_server) fn ollama_show(
        &self,
        request: &Request,
        responder: Responder,
    ) {
        let Some((loaded, responder)) = self.loaded(responder) else {
            return;
        };
        let named = json_body(&request.body).and_then(|value| {
            let f = Fields::of(&value, "")?;
            // `name` is the older spelling.
            let name = f.str("model")?.or(f.str("name")?);
            served_model(name, &loaded.defaults)
        });
        if let Err(error) = named {
            return self.refuse_ollama(responder, &error);
        }
        let facts = facts(loaded);
        let props = loaded.local.as_ref().map(|m| m.props());
        let renders_tools = props.is_some_and(|p| {
            p.template_caps
                .iter()
                .any(|&(name, on)| name == "supports_tools" && on)
        });
        let mut capabilities = vec!["completion"];
        if renders_tools {
            capabilities.push("tools");
        }
        let mut model_info = Map::new();
        model_info.insert(
            "general.architecture".into(),
            facts.architecture.clone().into(),
        );
        model_info.insert("general.parameter_count".into(), facts.parameters.into());
        if !facts.architecture.is_empty() {
            model_info.insert(
                format!("{}.context_length", facts.architecture),
                facts.trained_context.into(),
            );
        }
        responder.json(
            200,
            &wire::Show {
                modified_at: facts.modified_at,
                template: props.map_or("", |p| p.chat_template.as_str()),
                modelfile: "",
                license: "",
                parameters: parameter_lines(&loaded.defaults.sampling, props.map(|p| p.n_ctx_slot)),
                details: facts.details,
                model_info,
                capabilities,
            },
        );
    }

    pub(in crate::frontend::serve::api_server) fn ollama_ps(&self, responder: Responder) {
        let Some((loaded, responder)) = self.loaded(responder) else {
            return;
        };
        // The in-process model asleep (`--sleep-idle-seconds`, `keep_alive`) is
        // not in memory: Ollama lists only the models loaded.
        let expires_at = match &loaded.local {
            Some(model) if model.is_sleeping() => {
                return responder.json(200, &wire::Ps { models: Vec::new() })
            }
            Some(model) => model.expires_at(),
            None => None,
        };
        let facts = facts(loaded);
        let model = &loaded.defaults.model;
        // A model that stays has no expiry; a year on says so to clients that
        // show a countdown.
        let year = std::time::Duration::from_secs(365 * 24 * 3600);
        let expires_at = expires_at.unwrap_or_else(|| SystemTime::now() + year);
        let context_length = loaded.local.as_ref().map_or(loaded.info.context_size, |m| {
            u64::from(m.props().n_ctx_slot)
        });
        responder.json(
            200,
            &wire::Ps {
                models: vec![wire::PsEntry {
                    name: model,
                    model,
                    size: facts.size,
                    digest: digest(model),
                    details: facts.details,
                    expires_at: timestamp(expires_at),
                    size_vram: 0,
                    context_length,
                }],
            },
        );
    }
}

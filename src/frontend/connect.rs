//! Builds the backend for the first provider of the configured chain.
//!
//! Each backend gets its own small config struct; this module is where the
//! resolved [`Settings`] and a [`ProviderConfig`] are turned into one.

use std::time::Duration;

use crate::backend::cli::{CliBackend, CliConfig};
use crate::backend::http::Timeouts;
use crate::backend::openai::{AzureDeployment, MaxTokensParam, OpenAiBackend, OpenAiConfig};
use crate::backend::Backend;
use crate::config::resolve::Settings;
use crate::config::{ProviderConfig, ProviderKind};

/// Why no backend could be built. All of these are configuration problems (exit 2).
pub enum OpenError {
    Usage(String),
}

/// Default CLI server when a `cli` provider names none.
const CLI_BASE: &str = "http://localhost:8000";

/// Default OpenAI endpoint when a provider names none.
const OPENAI_BASE: &str = "https://api.openai.com/v1";

/// Opens the first provider of the chain.
pub fn open_backend(settings: &Settings) -> Result<(Box<dyn Backend>, ProviderConfig), OpenError> {
    let Some(provider) = settings.providers.first() else {
        return Err(OpenError::Usage(
            "no provider configured. Add one with \
             'shepherd provider add NAME --type openai --base-url URL --model MODEL', \
             or pass --backend openai --api-base URL -m MODEL"
                .into(),
        ));
    };
    let backend: Box<dyn Backend> = match provider.kind {
        ProviderKind::Openai => Box::new(OpenAiBackend::new(openai_config(settings, provider)?)),
        ProviderKind::Cli => Box::new(CliBackend::new(cli_config(settings, provider))),
        other => {
            return Err(OpenError::Usage(format!(
                "provider '{}' has type '{}', which this build does not support yet",
                provider.name,
                other.as_str()
            )))
        }
    };
    Ok((backend, provider.clone()))
}

fn openai_config(
    settings: &Settings,
    provider: &ProviderConfig,
) -> Result<OpenAiConfig, OpenError> {
    let model = provider.model.clone().ok_or_else(|| {
        OpenError::Usage(format!(
            "provider '{}' has no model; set one with -m MODEL or 'shepherd provider {} set model MODEL'",
            provider.name, provider.name
        ))
    })?;
    let base_url = provider
        .base_url
        .clone()
        .unwrap_or_else(|| OPENAI_BASE.to_string());
    let azure = provider
        .deployment_name
        .clone()
        .map(|deployment| AzureDeployment {
            deployment,
            api_version: provider
                .api_version
                .clone()
                .unwrap_or_else(|| "2024-10-21".to_string()),
        });
    let max_tokens_param = match provider.max_tokens_param_name.as_deref() {
        Some("max_completion_tokens") => MaxTokensParam::MaxCompletionTokens,
        _ => MaxTokensParam::MaxTokens,
    };
    let timeouts = Timeouts {
        overall: Duration::from_secs(settings.timeout_secs),
        ..Timeouts::default()
    };
    Ok(OpenAiConfig {
        api_key: provider.api_key.clone(),
        context_size: settings.context_size_for(provider).unwrap_or(0),
        extra_headers: provider
            .extra_headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        timeouts,
        max_retries: 3,
        azure,
        max_tokens_param,
        ..OpenAiConfig::new(base_url, model)
    })
}

/// A `cli` provider needs no model: the server decides.
fn cli_config(settings: &Settings, provider: &ProviderConfig) -> CliConfig {
    CliConfig {
        base_url: provider
            .base_url
            .clone()
            .unwrap_or_else(|| CLI_BASE.to_string()),
        api_key: provider.api_key.clone(),
        model: provider
            .model
            .clone()
            .unwrap_or_else(|| "remote".to_string()),
        timeouts: Timeouts {
            per_read: Duration::from_secs(settings.timeout_secs.max(30)),
            ..Timeouts::default()
        },
    }
}

//! What every hosted API backend (OpenAI, Anthropic, Gemini, Ollama) does the
//! same way, written once: [`Backend`] is implemented here over a [`Dialect`],
//! which holds only what differs (how one request is sent, how the model list
//! is read). Here the tool names are put into the API's grammar and back, the
//! token estimate is calibrated on every reply's usage and asked for counts,
//! and the backend's info is built.

use super::estimate::TokenEstimator;
use super::{toolnames, Backend, BackendInfo, GenerateRequest, Reply};
use crate::core::{BackendError, EventSink, Message, Session};

/// One hosted API's own part of a backend.
pub trait Dialect: Send {
    /// The backend's kind (`BackendInfo::kind`).
    const KIND: &'static str;
    /// Whether tool names are put into the API's name grammar for the request
    /// and back in the reply (`toolnames`); Ollama takes any name.
    const WIRE_NAMES: bool = true;

    /// The model asked for and its context size in tokens (0 when unknown).
    fn model(&self) -> (String, u64);

    /// Sends one request and reads its reply, retrying where that is safe.
    fn send(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError>;

    /// The model ids the provider lists.
    fn models(&self) -> Result<Vec<String>, BackendError>;

    fn estimator(&self) -> &TokenEstimator;
    fn estimator_mut(&mut self) -> &mut TokenEstimator;
}

impl<D: Dialect> Backend for D {
    fn info(&self) -> BackendInfo {
        let (model, context_size) = self.model();
        BackendInfo {
            kind: D::KIND,
            model,
            context_size,
            local: false,
        }
    }

    fn generate(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError> {
        let reply = if D::WIRE_NAMES {
            toolnames::with_wire_names(session, request, |session, request| {
                self.send(session, request, sink)
            })?
        } else {
            self.send(session, request, sink)?
        };
        self.estimator_mut().observe(session, &reply);
        Ok(reply)
    }

    fn count_tokens(&self, message: &Message) -> u32 {
        self.estimator().count_message(message)
    }

    fn list_models(&self) -> Result<Vec<String>, BackendError> {
        self.models()
    }
}

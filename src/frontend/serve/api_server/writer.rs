//! [`ReplyWriter`]: what every protocol's reply writer does, so that
//! [`super::serve`] streams or answers whole without knowing the protocol.
//!
//! Each protocol's file holds its writer and the handler of its routes (OpenAI
//! chat in [`super::openai`], Anthropic's messages in [`super::anthropic`], text
//! completions in [`super::completions`], llama-server's `/completion` in
//! [`super::native`], the Responses API in [`super::responses`], Ollama's
//! `/api/chat` and `/api/generate` in [`super::ollama`]); the handler builds the
//! writer and hands it to [`super::ApiServer::serve`]. The defaults here are
//! the OpenAI shapes that most protocols share.

use std::io;

use super::error::ApiError;
use super::text::{Assembler, Piece};
use super::wire::encode;
use super::wire::openai::Timings;
use super::Usage;
use crate::backend::Reply;
use crate::core::{PromptProgress, TokenLogprobs};
use crate::frontend::serve::http::{Responder, SseStream};

/// One protocol's reply, whole or streamed.
pub(super) trait ReplyWriter {
    /// Whether a streamed reply is NDJSON (Ollama's) rather than SSE.
    fn ndjson(&self) -> bool {
        false
    }

    /// An error before any output, as the protocol shapes it (OpenAI's).
    fn error(&self, responder: Responder, error: &ApiError) {
        responder.json_with(error.status, &error.openai_body(), &error.headers());
    }

    /// Choice `index`'s opening (the protocols without choices have one, 0),
    /// with the prompt's figures (`prefilled`) when the backend said them first.
    /// Nothing by default.
    fn start(
        &mut self,
        _sse: &mut SseStream,
        _index: u32,
        _prefilled: Option<(u64, u64)>,
    ) -> io::Result<()> {
        Ok(())
    }

    /// A piece of choice `index`, with the probabilities of the tokens generated
    /// since its last piece (empty unless the request asked for them, which only
    /// the OpenAI and llama-server routes can), and the figures so far where the
    /// request asked for them with every chunk (`timings_per_token`).
    fn piece(
        &mut self,
        sse: &mut SseStream,
        index: u32,
        piece: Piece,
        logprobs: &[TokenLogprobs],
        timings: Option<Timings>,
    ) -> io::Result<()>;

    /// How far choice `index`'s prompt is (`return_progress`), on the routes
    /// where llama-server reports it; nothing by default.
    fn progress(
        &mut self,
        _sse: &mut SseStream,
        _index: u32,
        _prompt: &PromptProgress,
        _timings: Option<Timings>,
    ) -> io::Result<()> {
        Ok(())
    }

    /// Choice `index`'s end; for a protocol without choices, the stream's.
    fn finish(
        &mut self,
        sse: &mut SseStream,
        index: u32,
        reply: &Reply,
        usage: &Usage,
    ) -> io::Result<()>;

    /// The stream's end after every choice's (the usage of all, `[DONE]`);
    /// nothing by default.
    fn end(&mut self, _sse: &mut SseStream, _usage: &Usage) -> io::Result<()> {
        Ok(())
    }

    /// An error after the stream started. By default OpenAI's ending, which chat
    /// and text completions share (and llama-server ends its own the same way):
    /// the error object as an event, then `[DONE]`.
    fn fail(&mut self, sse: &mut SseStream, error: &ApiError) -> io::Result<()> {
        sse.send(&encode(&error.openai_body()))?;
        sse.send("[DONE]")
    }

    /// The whole reply, `200`: `first` is the first choice, `choices` every
    /// choice where the protocol has several (`n`, or `/completion`'s prompts).
    fn respond(
        &self,
        responder: Responder,
        first: (&Assembler, &Reply),
        choices: &[(Assembler, Reply)],
        usage: &Usage,
    );
}

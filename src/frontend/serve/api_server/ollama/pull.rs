//! `POST /api/pull`: Ollama's pull, from a URL. shepherd has no model
//! registry: `model` (or the older `name`) is the `http://` or `https://` URL
//! of a GGUF file, and a bare name like `llama3.2` is a 400 that says so. The
//! file comes through `shepherd pull`'s own code ([`crate::commands::pull`]:
//! resumed from its `.part`, capped in size, checked whole as a GGUF, never
//! written through a link) into the first models directory (`models_dir`),
//! on this request's connection thread (not a generation worker), under the
//! download's own timeouts. A `file://` URL or a path is refused: a remote
//! client must not make the server read its files. A name that is there
//! already, or that another request is pulling, is a 409. `insecure` is
//! accepted and changes nothing (certificates are always checked).
//!
//! The answer streams Ollama's progress lines (`application/x-ndjson`):
//! `{"status":"pulling manifest"}`; `{"status":"pulling NAME.gguf","digest":
//! "sha256:...","total":N,"completed":M}` as bytes arrive (at most every
//! 100 ms or 1 % of the whole, and the last); `{"status":"verifying sha256
//! digest"}` while the GGUF check runs; `{"status":"writing manifest"}` as
//! the part takes its name; `{"status":"success"}`. A failure after the first
//! line is an `{"error":"..."}` line. With `stream: false` the answer is one
//! `{"status":"success"}`, or the error with a 502. The progress lines'
//! `digest` keys the download: the SHA-256 of the model's name, the digest
//! `/api/tags` lists it under; the file's own SHA-256 goes to the server log.
//! A client that hangs up stops the download; the part is kept for the next pull.

use super::super::error::ApiError;
use super::super::fields::{json_body, Fields};
use super::super::wire::encode;
use super::super::ApiServer;
use super::models::digest;
use super::wire;
use crate::commands::pull::{self, Refused, Step};
use crate::frontend::serve::http::{Request, Responder, SseStream};

/// A checked pull request.
#[derive(Debug, PartialEq, Eq)]
struct PullRequest {
    url: String,
    stream: bool,
}

/// Reads the request; a missing or non-URL `model` is a 400 saying where
/// shepherd pulls from.
fn parse(body: &[u8]) -> Result<PullRequest, ApiError> {
    let value = json_body(body)?;
    let f = Fields::of(&value, "")?;
    // `name` is the older spelling.
    let model = f.str("model")?.or(f.str("name")?).unwrap_or("");
    let _insecure = f.bool("insecure")?;
    let stream = f.bool("stream")?.unwrap_or(true);
    let how = "give 'model' as the http:// or https:// URL of a GGUF file, \
               e.g. https://huggingface.co/OWNER/REPO/resolve/main/NAME.gguf";
    if model.is_empty() {
        return Err(ApiError::invalid(
            "model",
            format!("'model' is required: {how}"),
        ));
    }
    if !model.contains("://") {
        return Err(ApiError::invalid(
            "model",
            format!(
                "'{}' is a model name, and shepherd pulls GGUF files from URLs, not from \
                 a model registry: {how}",
                model.escape_debug()
            ),
        ));
    }
    Ok(PullRequest {
        url: model.to_string(),
        stream,
    })
}

/// The answer to a pull refused before it began.
fn refused(refusal: Refused) -> ApiError {
    match refusal {
        Refused::Invalid(m) => ApiError::invalid("model", m),
        Refused::Conflict(m) => ApiError::new(409, "invalid_request_error", m),
        Refused::Failed(m) => ApiError::new(500, "server_error", m),
    }
}

/// Sends one line unless the client is gone; whether it went.
fn send(sse: &mut SseStream, line: &impl serde::Serialize) -> bool {
    !sse.client_gone() && sse.send(&encode(line)).is_ok()
}

impl ApiServer {
    /// `POST /api/pull`.
    pub(in crate::frontend::serve::api_server) fn ollama_pull(
        &self,
        request: &Request,
        responder: Responder,
    ) {
        let prepared = parse(&request.body).and_then(|asked| {
            let prepared = pull::prepare_url(&asked.url, self.models_dir()?).map_err(refused)?;
            Ok((asked, prepared))
        });
        let (asked, prepared) = match prepared {
            Ok(prepared) => prepared,
            Err(error) => return self.refuse_ollama(responder, &error),
        };
        let name = prepared.name().to_string();
        let logged = |(path, sha256): (std::path::PathBuf, String)| {
            eprintln!("shepherd: pulled {} (sha256 {sha256})", path.display());
        };
        if !asked.stream {
            let pulled = prepared.run(&mut |_| !responder.client_gone());
            return match pulled {
                Ok(pulled) => {
                    logged(pulled);
                    responder.json(200, &wire::Progress::status("success"));
                }
                Err(message) => {
                    let error = ApiError::new(502, "api_error", message);
                    responder.json(502, &error.ollama_body());
                }
            };
        }
        let Ok(mut sse) = responder.ndjson() else {
            return;
        };
        if !send(&mut sse, &wire::Progress::status("pulling manifest")) {
            return;
        }
        let key = format!("sha256:{}", digest(&name));
        let pulling = format!("pulling {name}");
        let pulled = prepared.run(&mut |step| {
            let line = match step {
                Step::Bytes { have, total } => wire::Progress {
                    status: &pulling,
                    digest: Some(&key),
                    total,
                    completed: Some(have),
                },
                Step::Verifying => wire::Progress::status("verifying sha256 digest"),
                Step::Naming => wire::Progress::status("writing manifest"),
            };
            send(&mut sse, &line)
        });
        match pulled {
            Ok(pulled) => {
                logged(pulled);
                send(&mut sse, &wire::Progress::status("success"));
            }
            Err(message) => {
                let error = ApiError::new(502, "api_error", message);
                send(&mut sse, &error.ollama_body());
            }
        }
        sse.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_names_a_url_and_a_bare_name_is_told_where_shepherd_pulls_from() {
        let url = "https://h/m/tiny.gguf";
        assert_eq!(
            parse(format!(r#"{{"model":"{url}"}}"#).as_bytes()),
            Ok(PullRequest {
                url: url.into(),
                stream: true
            })
        );
        assert_eq!(
            parse(format!(r#"{{"name":"{url}","stream":false,"insecure":true}}"#).as_bytes()),
            Ok(PullRequest {
                url: url.into(),
                stream: false
            })
        );
        let bare = parse(br#"{"model":"llama3.2"}"#).unwrap_err();
        assert_eq!(bare.status, 400);
        assert!(bare.message.contains("from URLs"), "{}", bare.message);
        assert!(bare.message.contains("https://"), "{}", bare.message);
        for bad in [
            &b"{}"[..],
            br#"{"model":3}"#,
            br#"{"stream":"yes"}"#,
            b"[1]",
            b"{",
        ] {
            assert_eq!(parse(bad).unwrap_err().status, 400);
        }
    }
}

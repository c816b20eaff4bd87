//! Record and replay of upstream HTTP exchanges (`--record DIR`, `--replay DIR`).
//!
//! Every API backend sends through [`super::http::send`], which hands each
//! exchange to a [`Tape`]. Recording writes, per exchange `N` (from 0001):
//!
//! - `N-request.json`: method, URL, headers and JSON body, every secret
//!   redacted ([`crate::util::redact::value`]: header names such as
//!   `Authorization`/`x-api-key`, URL parameters such as Gemini's `?key=`,
//!   and every registered key wherever it stands);
//! - `N-response.json`: the status and headers (redacted the same way), or
//!   the transport failure when no response came;
//! - `N-response.body`: the body bytes exactly as the backend read them,
//!   written as they are read, so a run cancelled mid-stream still leaves
//!   what arrived. Only registered secrets are replaced in it, line by line:
//!   shape rules would alter the model's words and the replay with them;
//! - `N-response.error`: when reading the body failed, how.
//!
//! and a `manifest.json` (format, shepherd version, provider, model, time).
//! The directory is created 0700 and every file 0600.
//!
//! Replaying serves exchange `N` to the `N`th request instead of contacting
//! the provider: the request is still built, and its method and URL path
//! must match the recorded ones, or the run fails with
//! [`TapeError::Diverged`]. The body is served as a reader over the file, so
//! the streaming code paths run exactly as they did.
//!
//! Exchanges are numbered in the order they start; the numbering is shared
//! by every backend built from one [`Tape`] (a failover chain, the REPL's
//! provider switches), because clones share one counter.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::core::BackendError;
use crate::util::fs::write_atomic;
use crate::util::redact;

/// The version of the directory layout, checked on replay.
const FORMAT: u32 = 1;
const MANIFEST: &str = "manifest.json";

/// Why a recording could not be written or replayed.
#[derive(Debug)]
pub enum TapeError {
    Io {
        path: PathBuf,
        error: io::Error,
    },
    /// `--record` into a directory that already holds a recording.
    NotEmpty(PathBuf),
    /// A file of the recording is missing its fields or is not JSON.
    Corrupt {
        path: PathBuf,
        reason: String,
    },
    /// The run asked for more exchanges than were recorded.
    Exhausted {
        index: u32,
        request: String,
    },
    /// The run sent a different request than the recorded one.
    Diverged {
        index: u32,
        request: String,
        recorded: String,
    },
}

impl std::fmt::Display for TapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TapeError::Io { path, error } => write!(f, "recording {}: {error}", path.display()),
            TapeError::NotEmpty(dir) => write!(
                f,
                "--record {}: the directory already holds a recording; choose a new or empty one",
                dir.display()
            ),
            TapeError::Corrupt { path, reason } => {
                write!(f, "replay: {} is not valid: {reason}", path.display())
            }
            TapeError::Exhausted { index, request } => write!(
                f,
                "replay: request {index} is {request}, but the recording ends after {} exchange(s)",
                index - 1
            ),
            TapeError::Diverged {
                index,
                request,
                recorded,
            } => write!(
                f,
                "replay: request {index} is {request} but the recording has {recorded}"
            ),
        }
    }
}

impl std::error::Error for TapeError {}

impl From<TapeError> for BackendError {
    /// Never retryable: replaying the same tape again gives the same answer.
    fn from(error: TapeError) -> Self {
        BackendError::Config(error.to_string())
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> TapeError + '_ {
    move |error| TapeError::Io {
        path: path.to_path_buf(),
        error,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Record,
    Replay,
}

struct Shared {
    mode: Mode,
    dir: PathBuf,
    /// The last exchange number handed out, and whether the directory is ready.
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    last: u32,
    prepared: bool,
}

/// Where upstream exchanges go: nowhere (the default), to a recording, or
/// from one. Clones share the exchange counter.
#[derive(Clone, Default)]
pub struct Tape {
    shared: Option<Arc<Shared>>,
}

impl std::fmt::Debug for Tape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.shared {
            None => f.write_str("Tape::Off"),
            Some(s) => write!(f, "Tape::{:?}({})", s.mode, s.dir.display()),
        }
    }
}

impl PartialEq for Tape {
    fn eq(&self, other: &Self) -> bool {
        match (&self.shared, &other.shared) {
            (None, None) => true,
            (Some(a), Some(b)) => a.mode == b.mode && a.dir == b.dir,
            _ => false,
        }
    }
}

/// What a recording says about the run that made it.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    format: u32,
    shepherd_version: String,
    provider: String,
    model: String,
    /// Seconds since the Unix epoch.
    created: u64,
}

/// `N-response.json`: the head of a response, or the failure instead of one.
#[derive(Debug, Serialize, Deserialize)]
struct ResponseHead {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure: Option<Failure>,
}

/// A transport failure, kept with enough of its kind to rebuild the same error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Failure {
    kind: String,
    message: String,
}

impl Tape {
    /// Records nothing and replays nothing.
    pub fn off() -> Tape {
        Tape::default()
    }

    /// Records every exchange into `dir`.
    pub fn record(dir: impl Into<PathBuf>) -> Tape {
        Tape::with(Mode::Record, dir.into())
    }

    /// Serves every exchange from the recording in `dir`.
    pub fn replay(dir: impl Into<PathBuf>) -> Tape {
        Tape::with(Mode::Replay, dir.into())
    }

    fn with(mode: Mode, dir: PathBuf) -> Tape {
        Tape {
            shared: Some(Arc::new(Shared {
                mode,
                dir,
                state: Mutex::new(State::default()),
            })),
        }
    }

    /// True when recording or replaying.
    pub fn is_on(&self) -> bool {
        self.shared.is_some()
    }

    /// Readies the directory once: for recording, creates it and writes the
    /// manifest naming `provider` and `model`; for replaying, checks the
    /// manifest. Later calls do nothing.
    pub fn prepare(&self, provider: &str, model: &str) -> Result<(), TapeError> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let mut state = crate::util::sync::lock(&shared.state);
        if state.prepared {
            return Ok(());
        }
        match shared.mode {
            Mode::Record => start_recording(&shared.dir, provider, model)?,
            Mode::Replay => read_manifest(&shared.dir).map(drop)?,
        }
        state.prepared = true;
        Ok(())
    }

    /// Runs one exchange: `live` sends it when the tape is off or recording;
    /// when replaying, the recorded response comes back instead.
    pub fn exchange(
        &self,
        request: &RequestHead,
        live: impl FnOnce() -> Result<ureq::http::Response<ureq::Body>, BackendError>,
    ) -> Result<ureq::http::Response<ureq::Body>, BackendError> {
        let Some(shared) = &self.shared else {
            return live();
        };
        self.prepare("unknown", "unknown")?;
        let index = {
            let mut state = crate::util::sync::lock(&shared.state);
            state.last += 1;
            state.last
        };
        match shared.mode {
            Mode::Record => record(&shared.dir, index, request, live),
            Mode::Replay => replay(&shared.dir, index, request).map_err(|e| match e {
                Replayed::Failure(error) => error,
                Replayed::Tape(error) => error.into(),
            }),
        }
    }
}

/// What is recorded of a request and compared on replay.
#[derive(Debug, Default)]
pub struct RequestHead {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RequestHead {
    /// Reads method, URL and headers off a request about to be sent.
    pub fn of<B>(builder: &ureq::RequestBuilder<B>, body: &[u8]) -> RequestHead {
        RequestHead {
            method: builder
                .method_ref()
                .map_or_else(String::new, |m| m.as_str().to_string()),
            url: builder
                .uri_ref()
                .map_or_else(String::new, |u| u.to_string()),
            headers: builder.headers_ref().map(header_pairs).unwrap_or_default(),
            body: body.to_vec(),
        }
    }

    /// `POST /v1/messages`: what divergence is judged on (the host and port
    /// differ between runs; the query may carry a key).
    fn summary(&self) -> String {
        format!("{} {}", self.method, url_path(&self.url))
    }

    /// The redacted JSON written as `N-request.json`.
    fn to_json(&self) -> Value {
        let body = match serde_json::from_slice::<Value>(&self.body) {
            Ok(json) => json,
            Err(_) => Value::String(String::from_utf8_lossy(&self.body).into_owned()),
        };
        let mut object = Map::new();
        object.insert("method".into(), Value::String(self.method.clone()));
        object.insert("url".into(), Value::String(redact::text(&self.url)));
        object.insert("headers".into(), headers_json(&self.headers));
        object.insert("body".into(), body);
        redact::value(&Value::Object(object))
    }
}

fn header_pairs(headers: &ureq::http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.as_str().to_string(), value)
        })
        .collect()
}

/// Response headers stay pairs (a name may repeat), so [`redact::value`]
/// would not see a name beside its value: a secret-named header loses its
/// value here, and every other value goes through [`redact::text`].
fn redacted_pairs(pairs: Vec<(String, String)>) -> Vec<(String, String)> {
    pairs
        .into_iter()
        .map(|(name, value)| {
            let value = match redact::is_secret_name(&name) {
                true => redact::REDACTED.to_string(),
                false => redact::text(&value),
            };
            (name, value)
        })
        .collect()
}

/// Headers as a JSON object, so [`redact::value`] sees each name beside its value.
fn headers_json(headers: &[(String, String)]) -> Value {
    let map = headers
        .iter()
        .map(|(name, value)| (name.clone(), Value::String(value.clone())))
        .collect();
    Value::Object(map)
}

/// The path of `url`, without scheme, host, port and query.
fn url_path(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = rest.find('/').map_or("/", |at| &rest[at..]);
    path.split(['?', '#']).next().unwrap_or("/")
}

fn file_name(index: u32, suffix: &str) -> String {
    format!("{index:04}-{suffix}")
}

fn start_recording(dir: &Path, provider: &str, model: &str) -> Result<(), TapeError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_at(dir))?;
    let manifest_path = dir.join(MANIFEST);
    if manifest_path.exists() || dir.join(file_name(1, "request.json")).exists() {
        return Err(TapeError::NotEmpty(dir.to_path_buf()));
    }
    let manifest = Manifest {
        format: FORMAT,
        shepherd_version: env!("CARGO_PKG_VERSION").to_string(),
        provider: provider.to_string(),
        model: model.to_string(),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    write_json(
        &manifest_path,
        &serde_json::to_value(&manifest).unwrap_or_default(),
    )
}

fn read_manifest(dir: &Path) -> Result<Manifest, TapeError> {
    let path = dir.join(MANIFEST);
    let manifest: Manifest = read_json(&path)?;
    if manifest.format != FORMAT {
        return Err(TapeError::Corrupt {
            path,
            reason: format!(
                "format {} (this shepherd reads format {FORMAT})",
                manifest.format
            ),
        });
    }
    Ok(manifest)
}

fn write_json(path: &Path, value: &Value) -> Result<(), TapeError> {
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    bytes.push(b'\n');
    write_atomic(path, &bytes).map_err(io_at(path))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, TapeError> {
    let text = fs::read_to_string(path).map_err(io_at(path))?;
    serde_json::from_str(&text).map_err(|e| TapeError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// A new 0600 file, replacing any old one.
fn create_private(path: &Path) -> Result<File, TapeError> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io_at(path))
}

fn record(
    dir: &Path,
    index: u32,
    request: &RequestHead,
    live: impl FnOnce() -> Result<ureq::http::Response<ureq::Body>, BackendError>,
) -> Result<ureq::http::Response<ureq::Body>, BackendError> {
    write_json(
        &dir.join(file_name(index, "request.json")),
        &request.to_json(),
    )?;
    let head_path = dir.join(file_name(index, "response.json"));
    let response = match live() {
        Ok(response) => response,
        Err(error) => {
            let head = ResponseHead {
                status: None,
                headers: Vec::new(),
                failure: Some(failure_of(&error)),
            };
            write_json(&head_path, &serde_json::to_value(&head).unwrap_or_default())?;
            return Err(error);
        }
    };
    let head = ResponseHead {
        status: Some(response.status().as_u16()),
        headers: redacted_pairs(header_pairs(response.headers())),
        failure: None,
    };
    write_json(&head_path, &serde_json::to_value(&head).unwrap_or_default())?;
    let body_path = dir.join(file_name(index, "response.body"));
    let file = create_private(&body_path)?;
    let (parts, body) = response.into_parts();
    let tee = Tee {
        inner: body.into_reader(),
        file,
        pending: Vec::new(),
        error_path: dir.join(file_name(index, "response.error")),
    };
    Ok(ureq::http::Response::from_parts(
        parts,
        ureq::Body::builder().reader(tee),
    ))
}

fn failure_of(error: &BackendError) -> Failure {
    let (kind, message) = match error {
        BackendError::Connect(m) => ("connect", m.clone()),
        BackendError::Timeout(m) => ("timeout", m.clone()),
        BackendError::Config(m) => ("config", m.clone()),
        BackendError::TooLarge(m) => ("too_large", m.clone()),
        other => ("protocol", other.to_string()),
    };
    Failure {
        kind: kind.into(),
        message: redact::text(&message),
    }
}

fn error_of(failure: &Failure) -> BackendError {
    let message = failure.message.clone();
    match failure.kind.as_str() {
        "connect" => BackendError::Connect(message),
        "timeout" => BackendError::Timeout(message),
        "config" => BackendError::Config(message),
        "too_large" => BackendError::TooLarge(message),
        _ => BackendError::Protocol(message),
    }
}

/// Passes the body through to the backend and copies it to the recording,
/// whole lines at a time so a registered secret split across two reads is
/// still found.
struct Tee<R> {
    inner: R,
    file: File,
    pending: Vec<u8>,
    error_path: PathBuf,
}

impl<R> Tee<R> {
    fn write_lines(&mut self, through: usize) {
        let rest = self.pending.split_off(through);
        let lines = std::mem::replace(&mut self.pending, rest);
        let redacted = match std::str::from_utf8(&lines) {
            Ok(text) => redact::known_secrets(text).into_bytes(),
            Err(_) => lines,
        };
        // The recording is a side copy: failing to write it must not fail the run.
        let _ = self.file.write_all(&redacted);
    }

    fn flush_all(&mut self) {
        let end = self.pending.len();
        if end > 0 {
            self.write_lines(end);
        }
    }

    fn record_error(&mut self, error: &io::Error) {
        self.flush_all();
        let kind = if error.kind() == io::ErrorKind::TimedOut
            || error
                .get_ref()
                .and_then(|e| e.downcast_ref::<ureq::Error>())
                .is_some_and(|e| matches!(e, ureq::Error::Timeout(_)))
        {
            "timeout"
        } else {
            "other"
        };
        let failure = Failure {
            kind: kind.into(),
            message: redact::text(&error.to_string()),
        };
        let _ = write_json(
            &self.error_path,
            &serde_json::to_value(&failure).unwrap_or_default(),
        );
    }
}

impl<R: Read> Read for Tee<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(0) => {
                self.flush_all();
                Ok(0)
            }
            Ok(n) => {
                self.pending.extend_from_slice(&buf[..n]);
                if let Some(last) = self.pending.iter().rposition(|b| *b == b'\n') {
                    self.write_lines(last + 1);
                }
                Ok(n)
            }
            Err(error) => {
                self.record_error(&error);
                Err(error)
            }
        }
    }
}

impl<R> Drop for Tee<R> {
    /// A cancelled stream keeps its last partial line.
    fn drop(&mut self) {
        self.flush_all();
    }
}

/// Why a replayed exchange gave no response: the recording's own failure,
/// or a problem with the recording.
enum Replayed {
    Failure(BackendError),
    Tape(TapeError),
}

impl From<TapeError> for Replayed {
    fn from(error: TapeError) -> Self {
        Replayed::Tape(error)
    }
}

fn replay(
    dir: &Path,
    index: u32,
    request: &RequestHead,
) -> Result<ureq::http::Response<ureq::Body>, Replayed> {
    let request_path = dir.join(file_name(index, "request.json"));
    if !request_path.exists() {
        return Err(Replayed::Tape(TapeError::Exhausted {
            index,
            request: request.summary(),
        }));
    }
    let recorded: Value = read_json(&request_path)?;
    let recorded = RequestHead {
        method: recorded["method"].as_str().unwrap_or_default().to_string(),
        url: recorded["url"].as_str().unwrap_or_default().to_string(),
        headers: Vec::new(),
        body: Vec::new(),
    };
    if recorded.summary() != request.summary() {
        return Err(Replayed::Tape(TapeError::Diverged {
            index,
            request: request.summary(),
            recorded: recorded.summary(),
        }));
    }
    let head_path = dir.join(file_name(index, "response.json"));
    let head: ResponseHead = read_json(&head_path)?;
    if let Some(failure) = &head.failure {
        return Err(Replayed::Failure(error_of(failure)));
    }
    let status = head.status.ok_or_else(|| TapeError::Corrupt {
        path: head_path.clone(),
        reason: "neither a status nor a failure".into(),
    })?;
    let body_path = dir.join(file_name(index, "response.body"));
    let file = File::open(&body_path).map_err(io_at(&body_path))?;
    let error_path = dir.join(file_name(index, "response.error"));
    let error = match error_path.exists() {
        true => Some(read_json::<Failure>(&error_path)?),
        false => None,
    };
    let response = build_response(status, &head.headers, ReplayBody { file, error });
    Ok(response.map_err(|reason| TapeError::Corrupt {
        path: head_path,
        reason,
    })?)
}

fn build_response(
    status: u16,
    headers: &[(String, String)],
    body: ReplayBody,
) -> Result<ureq::http::Response<ureq::Body>, String> {
    let mut builder = ureq::http::Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    builder
        .body(ureq::Body::builder().reader(body))
        .map_err(|e| e.to_string())
}

/// A recorded body, ending with the recorded read error when there was one.
struct ReplayBody {
    file: File,
    error: Option<Failure>,
}

impl Read for ReplayBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(buf)?;
        if n > 0 || buf.is_empty() {
            return Ok(n);
        }
        match self.error.take() {
            None => Ok(0),
            Some(failure) => {
                let kind = match failure.kind.as_str() {
                    "timeout" => io::ErrorKind::TimedOut,
                    _ => io::ErrorKind::Other,
                };
                Err(io::Error::new(kind, failure.message))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::fs::test_support::TempDir;
    use std::os::unix::fs::PermissionsExt;

    type Response = ureq::http::Response<ureq::Body>;

    fn head(method: &str, url: &str) -> RequestHead {
        RequestHead {
            method: method.into(),
            url: url.into(),
            headers: vec![
                ("authorization".into(), "Bearer sk-unit-AUTH0001".into()),
                ("x-api-key".into(), "sk-unit-XKEY0002".into()),
                ("x-goog-api-key".into(), "AIza-unit-GOOG0003".into()),
                ("api-key".into(), "azure-unit-AZUR0004".into()),
                ("content-type".into(), "application/json".into()),
            ],
            body: br#"{"model":"m","messages":[{"role":"user","content":"my key is sk-unit-REG00005"}]}"#
                .to_vec(),
        }
    }

    fn canned(status: u16, body: &[u8]) -> Result<Response, BackendError> {
        Ok(ureq::http::Response::builder()
            .status(status)
            .header("content-type", "text/event-stream")
            .header("set-cookie", "session=COOKIE0008")
            .header("x-api-key", "XKEY0009")
            .body(ureq::Body::builder().data(body.to_vec()))
            .expect("valid response"))
    }

    fn read_all(response: Response) -> Vec<u8> {
        let mut bytes = Vec::new();
        response
            .into_body()
            .into_reader()
            .read_to_end(&mut bytes)
            .expect("readable body");
        bytes
    }

    fn no_network() -> Result<Response, BackendError> {
        panic!("a replay must not send anything")
    }

    const URL: &str = "http://127.0.0.1:1/v1/chat/completions";
    const STREAM: &[u8] = b"data: {\"a\":1}\n\ndata: [DONE]\n\n";

    #[test]
    fn request_files_carry_no_secret() {
        redact::register_secret("sk-unit-REG00005");
        let json = head(
            "GET",
            "https://g.example/v1beta/models/m:stream?alt=sse&key=AIzaQUERY0006",
        )
        .to_json()
        .to_string();
        for secret in [
            "AUTH0001",
            "XKEY0002",
            "GOOG0003",
            "AZUR0004",
            "REG00005",
            "QUERY0006",
        ] {
            assert!(!json.contains(secret), "{secret} leaked: {json}");
        }
        assert!(json.contains("Bearer [REDACTED]"), "{json}");
        assert!(json.contains("application/json"), "{json}");
        assert!(json.contains("alt=sse"), "{json}");
    }

    #[test]
    fn paths_ignore_host_port_and_query() {
        assert_eq!(
            url_path("http://127.0.0.1:9/v1/messages?x=1"),
            "/v1/messages"
        );
        assert_eq!(url_path("https://h.example"), "/");
        assert_eq!(url_path("/api/chat#f"), "/api/chat");
    }

    #[test]
    fn records_numbered_private_files_and_replays_them_in_order() {
        let dir = TempDir::new("tape-roundtrip");
        let rec = dir.0.join("rec");
        let tape = Tape::record(&rec);
        tape.prepare("openai", "m").unwrap();
        let first = tape
            .exchange(&head("POST", URL), || canned(200, STREAM))
            .unwrap();
        assert_eq!(read_all(first), STREAM);
        let second = tape
            .exchange(&head("POST", URL), || canned(429, b"{}"))
            .unwrap();
        assert_eq!(read_all(second), b"{}");
        let mut names: Vec<String> = fs::read_dir(&rec)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "0001-request.json",
                "0001-response.body",
                "0001-response.json",
                "0002-request.json",
                "0002-response.body",
                "0002-response.json",
                "manifest.json"
            ]
        );
        assert_eq!(
            fs::metadata(&rec).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let saved = fs::read_to_string(rec.join("0001-response.json")).unwrap();
        assert!(
            !saved.contains("COOKIE0008") && !saved.contains("XKEY0009"),
            "{saved}"
        );
        assert!(saved.contains("text/event-stream"), "{saved}");
        for name in &names {
            let mode = fs::metadata(rec.join(name)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{name}");
        }
        let replay = Tape::replay(&rec);
        replay.prepare("openai", "m").unwrap();
        let first = replay.exchange(&head("POST", URL), no_network).unwrap();
        assert_eq!(first.status(), 200);
        assert_eq!(first.headers()["content-type"], "text/event-stream");
        assert_eq!(read_all(first), STREAM);
        let second = replay.exchange(&head("POST", URL), no_network).unwrap();
        assert_eq!(second.status(), 429);
        let third = replay.exchange(&head("POST", URL), no_network).unwrap_err();
        assert_eq!(
            third.to_string(),
            BackendError::Config(
                "replay: request 3 is POST /v1/chat/completions, but the recording ends after 2 exchange(s)".into()
            )
            .to_string()
        );
        assert!(!third.is_retryable());
    }

    #[test]
    fn a_divergent_request_is_a_clear_error() {
        let dir = TempDir::new("tape-diverge");
        let tape = Tape::record(&dir.0);
        let response = tape
            .exchange(&head("POST", URL), || canned(200, STREAM))
            .unwrap();
        drop(response);
        let replay = Tape::replay(&dir.0);
        let error = replay
            .exchange(&head("POST", "http://127.0.0.1:2/v1/messages"), no_network)
            .unwrap_err();
        assert_eq!(
            error,
            BackendError::Config(
                "replay: request 1 is POST /v1/messages but the recording has POST /v1/chat/completions".into()
            )
        );
    }

    #[test]
    fn a_stream_cut_short_keeps_what_arrived() {
        let dir = TempDir::new("tape-cancel");
        let tape = Tape::record(&dir.0);
        let response = tape
            .exchange(&head("POST", URL), || canned(200, STREAM))
            .unwrap();
        let mut reader = response.into_body().into_reader();
        let mut first = [0u8; 5];
        reader.read_exact(&mut first).unwrap();
        drop(reader);
        let kept = fs::read(dir.0.join("0001-response.body")).unwrap();
        assert_eq!(kept, b"data:");
    }

    #[test]
    fn registered_secrets_are_cut_from_bodies_even_across_reads() {
        redact::register_secret("sk-unit-BODY0007");
        let dir = TempDir::new("tape-body");
        let tape = Tape::record(&dir.0);
        let body = b"data: echo sk-unit-BODY0007 back\n\n";
        let response = tape
            .exchange(&head("POST", URL), || canned(200, body))
            .unwrap();
        let mut reader = response.into_body().into_reader();
        let mut passed = Vec::new();
        let mut small = [0u8; 3];
        loop {
            match reader.read(&mut small).unwrap() {
                0 => break,
                n => passed.extend_from_slice(&small[..n]),
            }
        }
        assert_eq!(passed, body, "the backend sees the body unchanged");
        let kept = fs::read_to_string(dir.0.join("0001-response.body")).unwrap();
        assert_eq!(kept, "data: echo [REDACTED] back\n\n");
    }

    #[test]
    fn transport_failures_are_recorded_and_replayed() {
        let dir = TempDir::new("tape-fail");
        let tape = Tape::record(&dir.0);
        let refused = || Err(BackendError::Connect("127.0.0.1:1: refused".into()));
        assert_eq!(
            tape.exchange(&head("POST", URL), refused).unwrap_err(),
            BackendError::Connect("127.0.0.1:1: refused".into())
        );
        let replay = Tape::replay(&dir.0);
        assert_eq!(
            replay.exchange(&head("POST", URL), no_network).unwrap_err(),
            BackendError::Connect("127.0.0.1:1: refused".into())
        );
    }

    struct Failing(bool);

    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if std::mem::replace(&mut self.0, true) {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "stalled"));
            }
            buf[..6].copy_from_slice(b"data: ");
            Ok(6)
        }
    }

    #[test]
    fn a_read_error_mid_body_is_replayed_after_the_bytes() {
        let dir = TempDir::new("tape-midfail");
        let tape = Tape::record(&dir.0);
        let live = || {
            Ok(ureq::http::Response::builder()
                .status(200)
                .body(ureq::Body::builder().reader(Failing(false)))
                .expect("valid response"))
        };
        let mut reader = tape
            .exchange(&head("POST", URL), live)
            .unwrap()
            .into_body()
            .into_reader();
        let mut bytes = Vec::new();
        assert!(reader.read_to_end(&mut bytes).is_err());
        drop(reader);
        let replay = Tape::replay(&dir.0);
        let response = replay.exchange(&head("POST", URL), no_network).unwrap();
        let mut reader = response.into_body().into_reader();
        let mut bytes = Vec::new();
        let error = reader.read_to_end(&mut bytes).unwrap_err();
        assert_eq!(bytes, b"data: ");
        assert!(error.to_string().contains("stalled"), "{error}");
    }

    #[test]
    fn bad_replay_directories_are_clear_errors() {
        let dir = TempDir::new("tape-bad");
        let missing = Tape::replay(dir.0.join("nope"))
            .prepare("openai", "m")
            .unwrap_err();
        assert!(missing.to_string().contains("manifest.json"), "{missing}");
        fs::write(dir.0.join(MANIFEST), "{not json").unwrap();
        let corrupt = Tape::replay(&dir.0).prepare("openai", "m").unwrap_err();
        assert!(
            corrupt.to_string().starts_with("replay: ")
                && corrupt.to_string().contains("is not valid"),
            "{corrupt}"
        );
        fs::write(dir.0.join(MANIFEST), r#"{"format": 99, "shepherd_version": "x", "provider": "p", "model": "m", "created": 0}"#).unwrap();
        let future = Tape::replay(&dir.0).prepare("openai", "m").unwrap_err();
        assert!(future.to_string().contains("format 99"), "{future}");
        let not_empty = Tape::record(&dir.0).prepare("openai", "m").unwrap_err();
        assert!(
            not_empty.to_string().contains("already holds a recording"),
            "{not_empty}"
        );
    }

    #[test]
    fn a_corrupt_exchange_file_is_an_error_not_a_panic() {
        let dir = TempDir::new("tape-corrupt");
        let tape = Tape::record(&dir.0);
        drop(
            tape.exchange(&head("POST", URL), || canned(200, STREAM))
                .unwrap(),
        );
        fs::write(dir.0.join("0001-response.json"), "[]").unwrap();
        let error = Tape::replay(&dir.0)
            .exchange(&head("POST", URL), no_network)
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("0001-response.json is not valid"),
            "{error}"
        );
        fs::write(dir.0.join("0001-response.json"), r#"{"status": 99999}"#).unwrap();
        let error = Tape::replay(&dir.0)
            .exchange(&head("POST", URL), no_network)
            .unwrap_err();
        assert!(error.to_string().contains("is not valid"), "{error}");
        fs::remove_file(dir.0.join("0001-response.body")).unwrap();
        fs::write(dir.0.join("0001-response.json"), r#"{"status": 200}"#).unwrap();
        let error = Tape::replay(&dir.0)
            .exchange(&head("POST", URL), no_network)
            .unwrap_err();
        assert!(error.to_string().contains("0001-response.body"), "{error}");
    }
}

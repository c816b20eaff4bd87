//! Test support for the API backends' unit tests: a real HTTP server on
//! 127.0.0.1:0 that answers with canned responses in order and records every
//! request, the recorded fixtures under `tests/fixtures/<backend>/`, and the
//! every-byte-offset split check each backend runs over its fixtures.
//!
//! The split check reads through [`crate::stream::ChunkReader`], the same
//! double the stream layer's own tests use.

use std::io::BufReader;
use std::path::PathBuf;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use serde_json::{json, Value};

use super::{GenerateRequest, Reply, Sampling, ToolChoice};
use crate::core::{BackendError, Event, Message, Session};
use crate::core::{Image, ImagePart, ToolCall, ToolSpec};
use crate::stream::ChunkReader;

/// A response the fake server will give.
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Canned {
    pub fn with_type(body: Vec<u8>, content_type: &str) -> Canned {
        Canned {
            status: 200,
            headers: vec![("Content-Type".into(), content_type.into())],
            body,
        }
    }

    pub fn sse(body: Vec<u8>) -> Canned {
        Canned::with_type(body, "text/event-stream")
    }

    pub fn json(status: u16, value: Value) -> Canned {
        Canned {
            status,
            ..Canned::with_type(value.to_string().into_bytes(), "application/json")
        }
    }

    pub fn with_status(mut self, status: u16) -> Canned {
        self.status = status;
        self
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Canned {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A request the fake server received.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The running fake; [`FakeServer::finish`] waits until every canned response was served.
pub struct FakeServer {
    /// `http://127.0.0.1:PORT`, no path.
    pub base_url: String,
    requests: Receiver<Recorded>,
    thread: Option<JoinHandle<()>>,
}

impl FakeServer {
    pub fn start(responses: Vec<Canned>) -> Self {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("bind loopback");
        let addr = server.server_addr().to_ip().expect("an IP listener");
        let (tx, rx) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name("fake-upstream".into())
            .spawn(move || serve(server, responses, tx))
            .expect("spawn server thread");
        FakeServer {
            base_url: format!("http://{addr}"),
            requests: rx,
            thread: Some(thread),
        }
    }

    /// Every request received, once all canned responses were given.
    pub fn finish(mut self) -> Vec<Recorded> {
        if let Some(thread) = self.thread.take() {
            thread.join().expect("server thread");
        }
        self.requests.try_iter().collect()
    }
}

fn serve(server: tiny_http::Server, responses: Vec<Canned>, tx: Sender<Recorded>) {
    for canned in responses {
        let Ok(mut request) = server.recv() else {
            return;
        };
        let mut body = String::new();
        let _ = request.as_reader().read_to_string(&mut body);
        let recorded = Recorded {
            url: request.url().to_string(),
            headers: request
                .headers()
                .iter()
                .map(|h| (h.field.to_string(), h.value.to_string()))
                .collect(),
            body: serde_json::from_str(&body).unwrap_or(Value::Null),
        };
        tx.send(recorded).expect("test still listening");
        let mut response =
            tiny_http::Response::from_data(canned.body).with_status_code(canned.status);
        for (name, value) in canned.headers {
            let header = tiny_http::Header::from_bytes(name, value).expect("valid header");
            response.add_header(header);
        }
        // The client may have gone (e.g. after a cancel); that is not the server's failure.
        let _ = request.respond(response);
    }
}

fn fixture_dir(backend: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(backend)
}

/// One fixture's bytes.
pub fn fixture(backend: &str, name: &str) -> Vec<u8> {
    std::fs::read(fixture_dir(backend).join(name)).expect("fixture readable")
}

/// Decodes every `*.ext` fixture of `backend` whole, then split once at every
/// byte offset and one byte per read, and asserts the events and the result
/// never change.
pub fn check_splits<F>(backend: &str, ext: &str, decode: F)
where
    F: Fn(BufReader<ChunkReader>, &mut Vec<Event>) -> Result<Reply, BackendError>,
{
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixture_dir(backend))
        .expect("fixture directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no {backend} fixtures");
    for path in paths {
        let bytes = std::fs::read(&path).expect("fixture readable");
        let run = |reader| {
            let mut events = Vec::new();
            let result = decode(reader, &mut events);
            (events, result)
        };
        let whole = run(BufReader::new(ChunkReader::new(vec![bytes.clone()])));
        for at in 0..=bytes.len() {
            let split = run(ChunkReader::split_at(&bytes, at));
            assert_eq!(split, whole, "{} split at {at}", path.display());
        }
        assert_eq!(
            run(ChunkReader::bytewise(&bytes)),
            whole,
            "{}",
            path.display()
        );
    }
}

pub fn tools() -> Vec<ToolSpec> {
    ["read", "bash"]
        .map(|name| ToolSpec {
            name: name.into(),
            description: format!("the {name} tool"),
            parameters: json!({"type": "object"}),
        })
        .to_vec()
}

pub fn request<'a>(
    tools: &'a [ToolSpec],
    sampling: &'a Sampling,
    stream: bool,
) -> GenerateRequest<'a> {
    GenerateRequest {
        tools,
        tool_choice: &ToolChoice::Auto,
        sampling,
        stream,
    }
}

pub fn session() -> Session {
    let mut session = Session::new("Be brief.");
    session.messages.push(Message::user("hi"));
    session
}

pub fn content(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Content(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

pub fn thinking(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Thinking(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

pub fn notices(events: &[Event]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::System(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// A real 2x2 RGB PNG, each pixel its own colour.
pub fn png_image() -> Image {
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, 2, 2);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().expect("PNG header");
    writer
        .write_image_data(&[255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255])
        .expect("PNG data");
    writer.finish().expect("PNG end");
    Image::from_bytes(bytes).expect("a valid PNG")
}

/// A real 2x1 GIF (red, blue), a type not every provider takes.
pub fn gif_image() -> Image {
    let mut bytes = Vec::new();
    {
        let palette = [255, 0, 0, 0, 0, 255];
        let mut encoder = gif::Encoder::new(&mut bytes, 2, 1, &palette).expect("GIF header");
        let frame = gif::Frame {
            width: 2,
            height: 1,
            buffer: std::borrow::Cow::Borrowed(&[0, 1]),
            ..gif::Frame::default()
        };
        encoder.write_frame(&frame).expect("GIF frame");
    }
    Image::from_bytes(bytes).expect("a valid GIF")
}

/// The read call of [`image_session`].
pub fn image_call() -> ToolCall {
    ToolCall {
        id: "call_1".into(),
        name: "read".into(),
        arguments: json!({"path": "shot.png"}),
    }
}

/// A session with `image` in the middle of a user message ("look: " before,
/// " what is it?" after), then a `read` call whose result ("a screenshot")
/// returned the same image after its text, and a last user message.
pub fn image_session(image: &Image) -> Session {
    let mut session = Session::new("Be brief.");
    let mut user = Message::user("look: what is it?");
    user.images.push(ImagePart {
        at: "look:".len(),
        image: image.clone(),
    });
    session.messages.push(user);
    let call = image_call();
    let mut assistant = Message::assistant("");
    assistant.tool_calls.push(call.clone());
    session.messages.push(assistant);
    let mut result = Message::tool_result(&call, "a screenshot");
    result.images.push(ImagePart {
        at: "a screenshot".len(),
        image: image.clone(),
    });
    session.messages.push(result);
    session.messages.push(Message::user("and now?"));
    session
}

/// The bytes a base64 string of a recorded request carries.
pub fn base64_of(value: &Value) -> Vec<u8> {
    let text = value.as_str().expect("a base64 string");
    crate::util::base64::decode(text).expect("valid base64")
}

/// Asserts `result` is the refusal, before sending, of a model that takes no images.
pub fn assert_refused_for_images(result: Result<Reply, BackendError>, model: &str) {
    match result {
        Err(BackendError::Invalid { message, .. }) => assert!(
            message.contains(model) && message.contains("takes no images"),
            "{message}"
        ),
        other => panic!("{model}: not refused: {other:?}"),
    }
}

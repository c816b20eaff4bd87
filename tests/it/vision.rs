//! Images on `shepherd --server` with a vision model: a random-weight SmolLM2
//! shape carrying SmolVLM's image markers and a random idefics3 projector
//! (`scripts/synthetic_gguf.py`). The official clients send images on every
//! route (`vision_clients.py`); hostile images are refused with a 4xx while
//! the server's memory stays bounded and it serves the next request.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

use crate::api_server::ApiServer;
use crate::harness::TempDir;
use crate::models::smollm2;
use crate::synthetic::writer;

/// The vision model and its projector, written into `dir`.
fn vision_model(dir: &TempDir) -> (PathBuf, PathBuf) {
    let model = dir.path().join("smol-vision.gguf");
    let mmproj = dir.path().join("mmproj-smol-vision.gguf");
    let tokenizer = smollm2();
    writer(&[
        "--like".as_ref(),
        "smollm2-135m".as_ref(),
        "--tokenizer-from".as_ref(),
        tokenizer.as_os_str(),
        "--special".as_ref(),
        "<fake_token_around_image>".as_ref(),
        "--special".as_ref(),
        "<global-img>".as_ref(),
        model.as_os_str(),
    ]);
    writer(&[
        "--projector".as_ref(),
        "idefics3".as_ref(),
        mmproj.as_os_str(),
    ]);
    (model, mmproj)
}

/// A server on the vision model, its projector found beside it.
fn vision_server(dir: &TempDir, extra: &[&str]) -> ApiServer {
    let (model, _) = vision_model(dir);
    let mut args = vec!["--context-size", "4096"];
    args.extend_from_slice(extra);
    ApiServer::with_gguf(&model, &args)
}

/// What one 64x48 image adds to a prompt: idefics3 lays a small image out as
/// one tile and the whole image, 64 embeddings each, in its own text.
fn image_tokens(server: &ApiServer) -> u64 {
    let count = |text: &str| {
        let (status, body) = server.post(
            "/tokenize",
            &json!({"content": text, "add_special": false, "parse_special": true}),
        );
        assert_eq!(status, 200, "{body}");
        body["tokens"].as_array().expect("tokens").len() as u64
    };
    2 * 64
        + count("<fake_token_around_image><row_1_col_1>")
        + count("\n\n<fake_token_around_image><global-img>")
        + count("<fake_token_around_image>")
}

#[test]
fn the_official_clients_send_images_on_every_route() {
    let python = std::env::var("SHEPHERD_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let dir = TempDir::new("vision-clients");
    let server = vision_server(&dir, &[]);
    let (status, props) = server.get("/props");
    assert_eq!(status, 200);
    let props: Value = serde_json::from_str(&props).unwrap();
    assert_eq!(props["modalities"]["vision"], true, "{props}");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/vision_clients.py");
    let output = Command::new(python)
        .arg(script)
        .env("SHEPHERD_URL", server.url(""))
        .env("SHEPHERD_MODEL", "smol-vision.gguf")
        .env("IMAGE_TOKENS", image_tokens(&server).to_string())
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("all checks passed"),
        "clients failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        server.log()
    );
}

/// A chat request with one image part.
fn with_image(url: &str) -> Value {
    json!({
        "max_tokens": 2,
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": "Describe it."},
        ]}],
    })
}

fn data_url(bytes: &[u8]) -> String {
    use std::fmt::Write;
    // Standard base64, written here so the test does not share the server's encoder.
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::from("data:image/png;base64,");
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            let c = if i <= chunk.len() {
                ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            };
            let _ = out.write_char(c);
        }
    }
    out
}

/// The CRC-32 of a PNG chunk (type and data).
fn crc(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A PNG that claims `side` x `side` pixels over a body of a few bytes.
fn huge_png(side: u32) -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut chunk = |kind: &[u8], data: &[u8]| {
        png.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let body = [kind, data].concat();
        png.extend_from_slice(&body);
        png.extend_from_slice(&crc(&body).to_be_bytes());
    };
    let mut header = side.to_be_bytes().to_vec();
    header.extend_from_slice(&side.to_be_bytes());
    header.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(b"IHDR", &header);
    chunk(b"IDAT", b"x\x9c\x03\x00\x00\x00\x00\x01");
    chunk(b"IEND", b"");
    png
}

/// A GIF of `frames` one-pixel frames.
fn many_frames(frames: usize) -> Vec<u8> {
    let mut out = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff".to_vec();
    for _ in 0..frames {
        out.extend_from_slice(b"\x2c\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02\x44\x01\x00");
    }
    out.push(0x3b);
    out
}

/// The server's peak resident memory (`VmHWM`), in KiB.
fn peak_rss_kib(server: &ApiServer) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

#[test]
fn hostile_images_get_a_clear_4xx_in_bounded_memory_and_the_server_serves_on() {
    let dir = TempDir::new("vision-hostile");
    let server = vision_server(&dir, &[]);
    let (status, body) = server.post("/v1/chat/completions", &with_image(&data_url(b"x")));
    assert_eq!(status, 400, "{body}");
    let before = peak_rss_kib(&server);
    let loopback = format!("{}/health", server.url(""));
    let hostile: [(&str, String, &str); 4] = [
        (
            "a 10,000 x 10,000 PNG header",
            data_url(&huge_png(10_000)),
            "too large",
        ),
        (
            "a truncated JPEG",
            data_url(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01").replace("image/png", "image/jpeg"),
            "does not decode",
        ),
        (
            "a GIF of 10,000 frames",
            data_url(&many_frames(10_000)).replace("image/png", "image/gif"),
            "frames",
        ),
        (
            "a loopback URL without --allow-image-urls",
            loopback,
            "--allow-image-urls",
        ),
    ];
    for (what, url, says) in hostile {
        let (status, body) = server.post("/v1/chat/completions", &with_image(&url));
        assert_eq!(status, 400, "{what}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{what}: {body}");
    }
    // A data URL of 100 MB: the body is refused by its length, unread.
    let big = format!("data:image/png;base64,{}", "A".repeat(100 << 20));
    let response = crate::harness::http_agent(std::time::Duration::from_secs(120))
        .post(&server.url("/v1/chat/completions"))
        .header("Content-Type", "application/json")
        .send(with_image(&big).to_string());
    let response = response.expect("an answer, not a reset");
    assert_eq!(response.status().as_u16(), 413);
    let body: Value =
        serde_json::from_str(&response.into_body().read_to_string().unwrap()).unwrap();
    assert!(body["error"]["message"].is_string(), "{body}");
    // None of it cost memory worth the name, and a real image still works.
    let grown = peak_rss_kib(&server).saturating_sub(before);
    assert!(grown < 64 * 1024, "peak RSS grew by {grown} KiB");
    let png = std::fs::read(dir.path().join("smol-vision.gguf"))
        .map(|_| ())
        .ok();
    assert!(png.is_some());
    let image = crate::harness::write_png(&dir.path().join("ok.png"), 32, 32);
    let (status, body) = server.post("/v1/chat/completions", &with_image(&data_url(&image)));
    assert_eq!(status, 200, "{body}; log: {}", server.log());
}

#[test]
fn an_image_to_a_model_without_a_projector_says_how_to_add_one() {
    let dir = TempDir::new("vision-none");
    let server = vision_server(&dir, &["--no-mmproj"]);
    let image = crate::harness::write_png(&dir.path().join("ok.png"), 8, 8);
    let (status, body) = server.post("/v1/chat/completions", &with_image(&data_url(&image)));
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("--mmproj"), "{body}");
    let (_, props) = server.get("/props");
    assert!(props.contains("\"vision\":false"), "{props}");
}

/// Gemma 3 270M with a random gemma3 projector: 256 embeddings an image, which
/// attend to each other both ways, so the whole image goes in one physical batch.
fn gemma_vision_server(dir: &TempDir, extra: &[&str]) -> ApiServer {
    let mmproj = dir.path().join("mmproj-gemma3.gguf");
    writer(&[
        "--projector".as_ref(),
        "gemma3".as_ref(),
        mmproj.as_os_str(),
    ]);
    let mmproj = mmproj.to_string_lossy().into_owned();
    let mut args = vec!["--context-size", "2048", "--mmproj", mmproj.as_str()];
    args.extend_from_slice(extra);
    ApiServer::with_gguf(&crate::models::gemma3(), &args)
}

#[test]
fn gemmas_projector_reads_an_image_and_a_small_physical_batch_is_named() {
    let dir = TempDir::new("vision-gemma");
    let image = crate::harness::write_png(&dir.path().join("g.png"), 32, 32);
    let request = with_image(&data_url(&image));
    let server = gemma_vision_server(&dir, &[]);
    let (status, text) = server.post(
        "/v1/chat/completions",
        &json!({"messages": [
        {"role": "user", "content": "Describe it."}], "max_tokens": 1}),
    );
    assert_eq!(status, 200, "{text}");
    let plain = text["usage"]["prompt_tokens"].as_u64().expect("usage");
    let (status, body) = server.post("/v1/chat/completions", &request);
    assert_eq!(status, 200, "{body}");
    let with = body["usage"]["prompt_tokens"].as_u64().expect("usage");
    // The image's 256 embeddings and the projector's framing text around them.
    assert!(with >= plain + 256, "{plain} -> {with}: {body}");
    drop(server);

    let server = gemma_vision_server(&dir, &["--ubatch", "64"]);
    let (status, body) = server.post("/v1/chat/completions", &request);
    assert!(status >= 400, "{status} {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("--ubatch must be at least 256"), "{body}");
    // The server serves on.
    let (status, _) = server.post(
        "/v1/chat/completions",
        &json!({"messages": [
        {"role": "user", "content": "Hi"}], "max_tokens": 1}),
    );
    assert_eq!(status, 200);
}

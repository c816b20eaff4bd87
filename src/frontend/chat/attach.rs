//! Images the user attaches to a prompt: `--image` for `-e`, `/image` in the
//! REPL and the TUI, and (through them) the `cli` client's messages.
//!
//! [`load`] turns what the user typed, a file path or an `http(s)` URL, into a
//! checked [`Image`]: a file larger than [`MAX_IMAGE_BYTES`] is refused from
//! its metadata before a byte is read, and a URL is fetched through the web
//! tools' [`fetch_capped`] with [`policy_check`]`(false)`, the SSRF rules of
//! `webfetch` (no loopback, private or metadata addresses, every redirect hop
//! checked), its body capped at the same size. [`Attachments`] holds the images
//! waiting for the next message, and [`user_message`] puts them in front of
//! the prompt's text, where the agent and every backend expect them
//! ([`ImagePart::at`] 0).

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::core::image::{Image, ImageError, ImagePart, MAX_IMAGES, MAX_IMAGE_BYTES};
use crate::core::Message;
use crate::tools::web::policy_check;

/// Why an attachment was refused.
#[derive(Debug)]
pub enum AttachError {
    /// The file cannot be read (missing, a directory, no permission).
    Read { path: PathBuf, reason: String },
    /// The file or download is over [`MAX_IMAGE_BYTES`].
    TooLarge { source: String, bytes: u64 },
    /// The URL could not be fetched, or answered with an error status.
    Fetch { url: String, reason: String },
    /// The bytes are not an image shepherd takes.
    Image { source: String, error: ImageError },
    /// The message would carry more than [`MAX_IMAGES`] images.
    TooMany,
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttachError::Read { path, reason } => {
                write!(f, "cannot read the image {}: {reason}", path.display())
            }
            AttachError::TooLarge { source, bytes } => write!(
                f,
                "the image {source} is too large: {bytes} bytes, at most {MAX_IMAGE_BYTES}"
            ),
            AttachError::Fetch { url, reason } => {
                write!(f, "cannot fetch the image {url}: {reason}")
            }
            AttachError::Image { source, error } => write!(f, "{source}: {error}"),
            AttachError::TooMany => write!(f, "a message carries at most {MAX_IMAGES} images"),
        }
    }
}

impl std::error::Error for AttachError {}

/// Loads the image at `source`: an `http://` or `https://` URL, else a file path
/// (a leading `~/` is the home directory).
pub fn load(source: &str) -> Result<Image, AttachError> {
    let source = source.trim();
    if is_url(source) {
        return fetch_image(source);
    }
    let path = expand_home(source);
    let bytes = read_capped(&path)?;
    Image::from_bytes(bytes).map_err(|error| AttachError::Image {
        source: source.to_string(),
        error,
    })
}

/// Loads `--image`'s values, in order: each a URL or a path (taken as given,
/// any bytes), at most [`MAX_IMAGES`].
pub fn load_args(sources: &[PathBuf]) -> Result<Vec<Image>, AttachError> {
    if sources.len() > MAX_IMAGES {
        return Err(AttachError::TooMany);
    }
    sources.iter().map(|source| load_arg(source)).collect()
}

fn load_arg(source: &Path) -> Result<Image, AttachError> {
    match source.to_str() {
        Some(text) if is_url(text) => fetch_image(text),
        _ => {
            let bytes = read_capped(source)?;
            Image::from_bytes(bytes).map_err(|error| AttachError::Image {
                source: source.display().to_string(),
                error,
            })
        }
    }
}

fn is_url(source: &str) -> bool {
    let lower = source.get(..8).unwrap_or(source).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

fn expand_home(source: &str) -> PathBuf {
    match (source.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(source),
    }
}

/// Reads a regular file of at most [`MAX_IMAGE_BYTES`], refusing a larger one
/// from its metadata, and reading no more than the cap whatever it grows to.
fn read_capped(path: &Path) -> Result<Vec<u8>, AttachError> {
    let read_error = |error: std::io::Error| AttachError::Read {
        path: path.to_path_buf(),
        reason: error.to_string(),
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let meta = file.metadata().map_err(read_error)?;
    if !meta.is_file() {
        return Err(AttachError::Read {
            path: path.to_path_buf(),
            reason: "not a regular file".into(),
        });
    }
    let too_large = |bytes: u64| AttachError::TooLarge {
        source: path.display().to_string(),
        bytes,
    };
    if meta.len() > MAX_IMAGE_BYTES as u64 {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_IMAGE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > MAX_IMAGE_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Fetches `url` under the web tools' SSRF rules, the body capped.
fn fetch_image(url: &str) -> Result<Image, AttachError> {
    let body = crate::tools::web::fetch_image(url, policy_check(false), MAX_IMAGE_BYTES).map_err(
        |reason| AttachError::Fetch {
            url: url.to_string(),
            reason,
        },
    )?;
    Image::from_bytes(body).map_err(|error| AttachError::Image {
        source: url.to_string(),
        error,
    })
}

/// A user message: `images` first, in order, then `text`.
pub fn user_message(text: String, images: Vec<Image>) -> Message {
    let mut message = Message::user(text);
    message.images = images
        .into_iter()
        .map(|image| ImagePart { at: 0, image })
        .collect();
    message
}

/// How an attached image is shown: `PATH (WxH, type)`.
pub fn describe(source: &str, image: &Image) -> String {
    format!(
        "{source} ({}x{}, {})",
        image.width, image.height, image.mime
    )
}

/// One image waiting for the next message, with what the user typed for it.
#[derive(Debug, Clone)]
pub struct Attachment {
    pub source: String,
    pub image: Image,
}

/// The images `/image` attached, waiting for the next message the user sends.
#[derive(Debug, Default)]
pub struct Attachments {
    pending: Vec<Attachment>,
}

impl Attachments {
    /// Loads `source` and keeps it for the next message. Returns the line to show.
    pub fn attach(&mut self, source: &str) -> Result<String, AttachError> {
        if self.pending.len() >= MAX_IMAGES {
            return Err(AttachError::TooMany);
        }
        let image = load(source)?;
        let line = format!("attached: {}", describe(source, &image));
        self.pending.push(Attachment {
            source: source.to_string(),
            image,
        });
        Ok(line)
    }

    /// The pending images, one line each (or a line saying there are none).
    pub fn list(&self) -> Vec<String> {
        if self.pending.is_empty() {
            return vec![
                "no images attached; /image PATH attaches one to your next message".into(),
            ];
        }
        self.pending
            .iter()
            .enumerate()
            .map(|(n, a)| format!("{}. {}", n + 1, describe(&a.source, &a.image)))
            .collect()
    }

    /// Drops every pending image; returns how many there were.
    pub fn clear(&mut self) -> usize {
        std::mem::take(&mut self.pending).len()
    }

    /// The message for `text` with every pending image, which are then gone.
    pub fn take_into(&mut self, text: String) -> Message {
        let images = std::mem::take(&mut self.pending)
            .into_iter()
            .map(|a| a.image)
            .collect();
        user_message(text, images)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::image::test_png;
    use crate::util::fs::test_support::TempDir;

    fn temp_file(name: &str, bytes: &[u8]) -> (TempDir, String) {
        let dir = TempDir::new("attach");
        let path = dir.0.join(name);
        std::fs::write(&path, bytes).expect("write");
        (dir, path.to_string_lossy().into_owned())
    }

    #[test]
    fn a_png_file_loads_with_its_size_and_type() {
        let (_dir, path) = temp_file("tiny.png", &test_png(3, 2, [7, 14, 21]));
        let image = load(&path).expect("loads");
        assert_eq!((image.width, image.height), (3, 2));
        assert_eq!(image.mime, "image/png");
        assert_eq!(describe("tiny.png", &image), "tiny.png (3x2, image/png)");
    }

    #[test]
    fn missing_non_image_and_directory_are_clear_errors() {
        let missing = load("/nonexistent/shepherd-test.png").unwrap_err();
        assert!(matches!(missing, AttachError::Read { .. }), "{missing:?}");
        assert!(missing
            .to_string()
            .contains("/nonexistent/shepherd-test.png"));
        let (_dir, path) = temp_file("notes.txt", b"just some text, not an image\n");
        let text = load(&path).unwrap_err();
        assert!(
            text.to_string().contains("unsupported image type"),
            "{text}"
        );
        let dir = TempDir::new("attach-dir");
        let error = load(&dir.0.to_string_lossy()).unwrap_err();
        assert!(error.to_string().contains("not a regular file"), "{error}");
    }

    #[test]
    fn an_oversized_file_is_refused_before_it_is_read() {
        let dir = TempDir::new("attach-huge");
        let path = dir.0.join("huge.png");
        let file = std::fs::File::create(&path).unwrap();
        // Sparse: the size says too large, and nothing is ever read.
        file.set_len(MAX_IMAGE_BYTES as u64 + 1).unwrap();
        let error = load(&path.to_string_lossy()).unwrap_err();
        assert!(
            matches!(error, AttachError::TooLarge { bytes, .. } if bytes == MAX_IMAGE_BYTES as u64 + 1),
            "{error:?}"
        );
    }

    #[test]
    fn a_loopback_url_is_refused_by_the_ssrf_rules() {
        let error = load("http://127.0.0.1:9/cat.png").unwrap_err();
        assert!(matches!(error, AttachError::Fetch { .. }), "{error:?}");
        assert!(error.to_string().contains("loopback"), "{error}");
    }

    #[test]
    fn attachments_wait_for_the_next_message_then_are_gone() {
        let (_dir, path) = temp_file("a.png", &test_png(2, 2, [7, 14, 21]));
        let mut pending = Attachments::default();
        assert!(pending.list()[0].starts_with("no images attached"));
        let line = pending.attach(&path).expect("attach");
        assert_eq!(line, format!("attached: {path} (2x2, image/png)"));
        pending.attach(&path).expect("attach again");
        assert_eq!(pending.list().len(), 2);
        assert!(pending.list()[1].starts_with("2. "));
        let message = pending.take_into("what is this?".into());
        assert_eq!(message.content, "what is this?");
        assert_eq!(message.images.len(), 2);
        assert!(message.images.iter().all(|part| part.at == 0));
        assert!(pending.take_into("next".into()).images.is_empty());
        pending.attach(&path).unwrap();
        assert_eq!(pending.clear(), 1);
        assert_eq!(pending.clear(), 0);
    }

    #[test]
    fn a_bad_attachment_leaves_the_pending_ones_alone() {
        let (_dir, path) = temp_file("a.png", &test_png(1, 1, [7, 14, 21]));
        let mut pending = Attachments::default();
        pending.attach(&path).unwrap();
        assert!(pending.attach("/nonexistent/x.png").is_err());
        assert_eq!(pending.list().len(), 1);
    }

    #[test]
    fn home_is_expanded_and_urls_are_recognised() {
        assert!(is_url("HTTPS://example.com/a.png"));
        assert!(is_url("http://x"));
        assert!(!is_url("./http:/x.png"));
        assert!(!is_url("h"));
        if let Some(home) = std::env::var_os("HOME") {
            assert_eq!(expand_home("~/a.png"), Path::new(&home).join("a.png"));
        }
        assert_eq!(expand_home("a/~/b"), PathBuf::from("a/~/b"));
    }
}

//! Images a message carries: the file as received (PNG, JPEG, WebP or GIF), its
//! type, size and SHA-256, checked once when it enters shepherd.
//!
//! Every way in (an API route's image part, `--image`, `/image`, an MCP tool's
//! `image` content, the `read_image` tool) builds an [`Image`] through
//! [`Image::from_bytes`] or [`Image::from_data_url`], which decode the whole file
//! in Rust under [`decode`]'s limits: a file that is not one of the four formats,
//! that is truncated or malformed, or whose header claims more pixels than the
//! limits allow is refused there with an [`ImageError`], before any pixel buffer
//! is allocated and long before libmtmd could see it.
//!
//! An image stands inside its message's text at a byte offset ([`ImagePart::at`]):
//! the in-process backend renders a marker there and evaluates the image's
//! embeddings at that point of the prompt; hosted providers get the text split
//! into parts around it.

pub mod decode;

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use decode::{Rgb, MAX_IMAGE_BYTES, MAX_PIXELS, MAX_SIDE};

/// At most this many images in one request (every message together).
pub const MAX_IMAGES: usize = 64;

/// An image file, checked: it decodes, within the limits.
///
/// Serialised (sessions) as its type, size and hash only: the bytes live beside
/// the session, stored by hash, and are put back with [`Image::with_bytes`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// `image/png`, `image/jpeg`, `image/webp` or `image/gif`.
    pub mime: String,
    /// Lower-case hex SHA-256 of [`Image::bytes`]: the prompt cache's key and the
    /// session store's file name.
    pub sha256: String,
    pub width: u32,
    pub height: u32,
    /// The file as received. Empty in a deserialised image until its bytes are
    /// loaded from the session's store.
    #[serde(skip)]
    pub bytes: Arc<Vec<u8>>,
}

impl fmt::Debug for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Image({}, {}x{}, {} bytes, {})",
            self.mime,
            self.width,
            self.height,
            self.bytes.len(),
            &self.sha256[..self.sha256.len().min(12)]
        )
    }
}

/// An image inside a message's text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImagePart {
    /// Byte offset into [`crate::core::Message::content`] where the image stands
    /// (a char boundary; images are kept in text order).
    pub at: usize,
    pub image: Image,
}

/// Why an image was refused. Every variant is the client's fault (a 4xx).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageError {
    /// Not PNG, JPEG, WebP or GIF (the sniffed or declared type).
    Unsupported(String),
    /// The file does not decode: truncated, corrupt, or inconsistent.
    Malformed(String),
    /// Larger than the limits allow, in bytes, pixels or count.
    TooLarge(String),
    /// A data URL or base64 payload that does not parse.
    BadEncoding(String),
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageError::Unsupported(what) => write!(
                f,
                "unsupported image type {what}: PNG, JPEG, WebP and GIF are accepted"
            ),
            ImageError::Malformed(why) => write!(f, "the image does not decode: {why}"),
            ImageError::TooLarge(why) => write!(f, "the image is too large: {why}"),
            ImageError::BadEncoding(why) => write!(f, "the image is not valid base64 data: {why}"),
        }
    }
}

impl std::error::Error for ImageError {}

impl Image {
    /// Checks `bytes` (sniffing the format from its first bytes) and builds the
    /// image: the whole file is decoded once, under the limits, and dropped.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Image, ImageError> {
        if bytes.len() > MAX_IMAGE_BYTES {
            return Err(ImageError::TooLarge(format!(
                "{} bytes, at most {MAX_IMAGE_BYTES}",
                bytes.len()
            )));
        }
        let format = decode::Format::sniff(&bytes)?;
        let rgb = decode::decode(format, &bytes)?;
        let mut hash = crate::util::sha256::Sha256::default();
        hash.update(&bytes);
        Ok(Image {
            mime: format.mime().to_string(),
            sha256: hash.hex(),
            width: rgb.width,
            height: rgb.height,
            bytes: Arc::new(bytes),
        })
    }

    /// A `data:image/...;base64,...` URL.
    pub fn from_data_url(url: &str) -> Result<Image, ImageError> {
        let rest = url
            .strip_prefix("data:")
            .ok_or_else(|| ImageError::BadEncoding("expected a data: URL".into()))?;
        let (header, payload) = rest
            .split_once(',')
            .ok_or_else(|| ImageError::BadEncoding("a data: URL without a comma".into()))?;
        let Some(mime) = header.strip_suffix(";base64") else {
            return Err(ImageError::BadEncoding(
                "only base64 data: URLs carry images".into(),
            ));
        };
        let mime = mime.split(';').next().unwrap_or("").trim();
        if !mime.is_empty() && !mime.eq_ignore_ascii_case("application/octet-stream") {
            decode::Format::from_mime(mime)?;
        }
        Image::from_base64(payload)
    }

    /// Base64 (standard or URL-safe alphabet, padding optional, whitespace ignored).
    pub fn from_base64(payload: &str) -> Result<Image, ImageError> {
        // Four base64 characters carry three bytes: refuse before decoding.
        if payload.len() / 4 * 3 > MAX_IMAGE_BYTES + 3 {
            return Err(ImageError::TooLarge(format!(
                "{} base64 characters, at most {MAX_IMAGE_BYTES} bytes",
                payload.len()
            )));
        }
        let bytes = crate::util::base64::decode(payload).map_err(ImageError::BadEncoding)?;
        Image::from_bytes(bytes)
    }

    /// The same image with its bytes put back (a session loaded from disk).
    pub fn with_bytes(mut self, bytes: Vec<u8>) -> Image {
        self.bytes = Arc::new(bytes);
        self
    }

    /// The file as standard base64.
    pub fn base64(&self) -> String {
        crate::util::base64::encode(&self.bytes)
    }

    /// A `data:` URL of the file.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.mime, self.base64())
    }

    /// The file decoded to 8-bit RGB (the first frame of an animation).
    pub fn rgb(&self) -> Result<Rgb, ImageError> {
        decode::decode(decode::Format::sniff(&self.bytes)?, &self.bytes)
    }

    /// What a text-only model reads in the image's place.
    pub fn summary(&self) -> String {
        format!(
            "[image: {}, {}x{}, {} bytes]",
            self.mime,
            self.width,
            self.height,
            self.bytes.len()
        )
    }
}

/// Images for tests in every layer.
#[cfg(test)]
pub(crate) mod test_support {
    /// A real RGB PNG of `width` x `height` pixels (the pixels vary, so two
    /// sizes never share a hash).
    pub fn png_bytes(width: u32, height: u32) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut encoder = png::Encoder::new(&mut out, width, height);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            let mut writer = encoder.write_header().expect("png header");
            let pixels: Vec<u8> = (0..width * height * 3).map(|i| (i * 7) as u8).collect();
            writer.write_image_data(&pixels).expect("png data");
        }
        out
    }
}

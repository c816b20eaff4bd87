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

pub use decode::{Rgb, MAX_IMAGE_BYTES};

/// At most this many images in one request (every message together).
pub const MAX_IMAGES: usize = 64;

/// An image file, checked: it decodes, within the limits.
///
/// Serialised (sessions) as its type, size and hash only: the bytes live beside
/// the session, stored by hash, and are read back and checked by the store.
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
            self.sha256.get(..12).unwrap_or(&self.sha256)
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
        Ok(Image::hashed(format.mime(), &rgb, bytes))
    }

    /// The image of `bytes`, already decoded to `rgb`, with its hash.
    fn hashed(mime: &str, rgb: &Rgb, bytes: Vec<u8>) -> Image {
        let mut hash = crate::util::sha256::Sha256::default();
        hash.update(&bytes);
        Image {
            mime: mime.to_string(),
            sha256: hash.hex(),
            width: rgb.width,
            height: rgb.height,
            bytes: Arc::new(bytes),
        }
    }

    /// The image re-encoded as an RGB PNG (an animation's first frame, without
    /// transparency), for a provider that does not take the file's own type.
    pub fn to_png(&self) -> Result<Image, ImageError> {
        let rgb = self.rgb()?;
        let mut bytes = Vec::new();
        let mut encoder = png::Encoder::new(&mut bytes, rgb.width, rgb.height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let failed = |e: png::EncodingError| ImageError::Malformed(format!("PNG encoding: {e}"));
        let mut writer = encoder.write_header().map_err(failed)?;
        writer.write_image_data(&rgb.data).map_err(failed)?;
        writer.finish().map_err(failed)?;
        Ok(Image::hashed("image/png", &rgb, bytes))
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

/// The offsets of `images` in `content`, made safe to slice at: each on a char
/// boundary, within the text, and never before the one ahead of it (a session
/// file edited by hand, or text shortened after the images were placed).
pub fn offsets(content: &str, images: &[ImagePart]) -> Vec<usize> {
    let mut floor = 0;
    images
        .iter()
        .map(|part| {
            let mut at = part.at.min(content.len());
            while !content.is_char_boundary(at) {
                at -= 1;
            }
            floor = at.max(floor);
            floor
        })
        .collect()
}

/// Puts each image's [`ImagePart::at`] where [`offsets`] says it may stand.
pub fn clamp_offsets(content: &str, images: &mut [ImagePart]) {
    let offsets = offsets(content, images);
    for (part, at) in images.iter_mut().zip(offsets) {
        part.at = at;
    }
}

/// The texts around the images: one more piece than there are images, the
/// image `i` standing between pieces `i` and `i + 1`.
pub fn pieces<'a>(content: &'a str, images: &[ImagePart]) -> Vec<&'a str> {
    let mut pieces = Vec::with_capacity(images.len() + 1);
    let mut from = 0;
    for at in offsets(content, images) {
        pieces.push(&content[from..at]);
        from = at;
    }
    pieces.push(&content[from..]);
    pieces
}

/// Rebuilds a text and its images piece by piece, in order: each piece of
/// text becomes `text` of it, and each image stays (`Ok`, possibly replaced)
/// or has the `Err` text written in its place. The one place offsets are
/// recomputed when text around images changes.
pub fn rebuild(
    content: &str,
    images: &[ImagePart],
    mut text: impl FnMut(&str) -> String,
    mut image: impl FnMut(&Image) -> Result<Image, String>,
) -> (String, Vec<ImagePart>) {
    let mut out = String::with_capacity(content.len());
    let mut kept = Vec::with_capacity(images.len());
    for (i, piece) in pieces(content, images).into_iter().enumerate() {
        if let Some(part) = i.checked_sub(1).and_then(|n| images.get(n)) {
            match image(&part.image) {
                Ok(image) => kept.push(ImagePart {
                    at: out.len(),
                    image,
                }),
                Err(instead) => out.push_str(&instead),
            }
        }
        out.push_str(&text(piece));
    }
    (out, kept)
}

/// `content` with each image's [`Image::summary`] written where it stands:
/// what a model that reads no images is given instead.
pub fn inline_summaries(content: &str, images: &[ImagePart]) -> String {
    rebuild(
        content,
        images,
        str::to_string,
        |image| Err(image.summary()),
    )
    .0
}

/// A `width` x `height` PNG filled with `rgb`, built by the `png` crate's
/// encoder, for tests anywhere in the crate.
#[cfg(test)]
pub(crate) fn test_png(width: u32, height: u32, rgb: [u8; 3]) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().expect("png header");
    let pixels: Vec<u8> = (0..width * height).flat_map(|_| rgb).collect();
    writer.write_image_data(&pixels).expect("png data");
    writer.finish().expect("png end");
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(at: usize) -> ImagePart {
        ImagePart {
            at,
            image: Image::from_bytes(test_png(1, 1, [1, 2, 3])).unwrap(),
        }
    }

    #[test]
    fn offsets_are_kept_inside_the_text_on_char_boundaries_in_order() {
        let content = "aé b";
        let images = [part(2), part(99), part(1), part(0)];
        assert_eq!(offsets(content, &images), [1, 5, 5, 5]);
        assert_eq!(pieces(content, &images), ["a", "é b", "", "", ""]);
    }

    #[test]
    fn summaries_stand_where_the_images_stood() {
        let images = [part(3), part(3)];
        let summary = images[0].image.summary();
        assert!(summary.starts_with("[image: image/png, 1x1, "), "{summary}");
        assert_eq!(
            inline_summaries("one two", &images),
            format!("one{summary}{summary} two")
        );
        assert_eq!(inline_summaries("plain", &[]), "plain");
    }

    #[test]
    fn a_png_is_checked_hashed_and_decoded_to_rgb() {
        let bytes = test_png(5, 3, [7, 8, 9]);
        let image = Image::from_bytes(bytes.clone()).unwrap();
        assert_eq!(
            (image.mime.as_str(), image.width, image.height),
            ("image/png", 5, 3)
        );
        assert_eq!(image.sha256.len(), 64);
        let rgb = image.rgb().unwrap();
        assert_eq!(rgb.data.len(), 5 * 3 * 3);
        let again = Image::from_data_url(&image.data_url()).unwrap();
        assert_eq!(again.sha256, image.sha256);
        assert!(matches!(
            Image::from_bytes(bytes[..bytes.len() / 2].to_vec()),
            Err(ImageError::Malformed(_))
        ));
        assert!(matches!(
            Image::from_bytes(b"hello".to_vec()),
            Err(ImageError::Unsupported(_))
        ));
    }
}

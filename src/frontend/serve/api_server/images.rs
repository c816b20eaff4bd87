//! Image parts of API requests: the one place every route reads an image from
//! (a `data:` URL, bare base64, or an http(s) URL), and the one joiner that
//! puts a message's text parts and images together.
//!
//! [`Images`] reads the images of one request in order: it counts them against
//! [`MAX_IMAGES`] before reading the next, decodes each through
//! [`Image::from_base64`] (every [`ImageError`] is a 400 naming the field), and
//! fetches an http(s) URL only when the server runs with `--allow-image-urls`
//! ([`ImageUrls::Fetched`]), through the web tools' fetch with its SSRF guard
//! (`tools::web::fetch_capped`: every address a host resolves to is checked
//! right before the connection, and again on each redirect; loopback, private
//! and metadata addresses are refused) and the body capped at
//! [`MAX_IMAGE_BYTES`]. Without the flag such a URL is a 400 that names it.
//!
//! [`Content`] joins a message's parts as llama-server joins them: text parts
//! with the route's delimiter between them, none next to an image; each image
//! stands at the byte offset of the text where its part stood
//! ([`ImagePart::at`]). Whether the model reads images is the backend's to say
//! (`Backend::takes_images`): a route only parses.

use std::fmt;

use super::error::ApiError;
use crate::core::image::decode::Format;
use crate::core::image::{Image, ImageError, ImagePart, MAX_IMAGES, MAX_IMAGE_BYTES};
use crate::core::Message;
use crate::tools::web::{self, AddressCheck};

/// What the server does with an image part that names an http(s) URL.
#[derive(Clone, Default)]
pub enum ImageUrls {
    /// A 400 that names `--allow-image-urls` (the default).
    #[default]
    Refused,
    /// Fetched, each address the host resolves to passing this check
    /// (`web::policy_check(false)` for `--allow-image-urls`).
    Fetched(AddressCheck),
}

impl fmt::Debug for ImageUrls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageUrls::Refused => f.write_str("Refused"),
            ImageUrls::Fetched(_) => f.write_str("Fetched"),
        }
    }
}

/// The images of one request, read in order and counted.
#[derive(Debug)]
pub struct Images {
    urls: ImageUrls,
    count: usize,
    /// Where images are not read at all (an embedding's input): what is read there.
    text_only: Option<&'static str>,
}

impl Images {
    /// The reader of one request under the server's `urls` setting.
    pub fn new(urls: &ImageUrls) -> Images {
        Images {
            urls: urls.clone(),
            count: 0,
            text_only: None,
        }
    }

    /// A reader that refuses every image: `what` (e.g. "a system message")
    /// carries text only.
    pub fn text_only(what: &'static str) -> Images {
        Images {
            urls: ImageUrls::Refused,
            count: 0,
            text_only: Some(what),
        }
    }

    /// An image given by reference, at field `field`: a `data:` URL, an http(s)
    /// URL (fetched under [`ImageUrls`]), or bare base64, as llama-server reads
    /// OpenAI's `image_url`.
    pub fn reference(&mut self, reference: &str, field: &str) -> Result<Image, ApiError> {
        self.admit(field)?;
        let trimmed = reference.trim_start();
        let scheme = trimmed
            .split_once(':')
            .map(|(scheme, _)| scheme.to_ascii_lowercase());
        let image = match scheme.as_deref() {
            Some("data") => Image::from_data_url(trimmed),
            Some("http" | "https") => return self.fetch(trimmed, field),
            Some(other) if trimmed.contains("://") => {
                return Err(ApiError::invalid(
                    field,
                    format!(
                        "'{field}': {other}: URLs are not read; send a data: URL (or an http(s) URL to a server started with --allow-image-urls)"
                    ),
                ))
            }
            _ => Image::from_base64(trimmed),
        };
        image.map_err(|e| image_error(field, &e))
    }

    /// Base64 data at field `field` (Anthropic's base64 source, Ollama's
    /// `images`, llama-server's `multimodal_data`); `mime`, where the request
    /// declares one, must be an image type read here (the bytes decide which).
    pub fn base64(
        &mut self,
        data: &str,
        mime: Option<&str>,
        field: &str,
    ) -> Result<Image, ApiError> {
        self.admit(field)?;
        if let Some(mime) = mime {
            Format::from_mime(mime).map_err(|e| image_error(field, &e))?;
        }
        Image::from_base64(data).map_err(|e| image_error(field, &e))
    }

    /// Whether an image may stand here at all: a part whose `field` (its type)
    /// names an image is refused by a text-only reader before it is read.
    pub fn taken(&self, field: &str) -> Result<(), ApiError> {
        match self.text_only {
            Some(what) => Err(ApiError::invalid(
                field,
                format!("'{field}' is an image, and {what} carries text only"),
            )),
            None => Ok(()),
        }
    }

    /// Counts one more image at `field`, or says why none may come.
    fn admit(&mut self, field: &str) -> Result<(), ApiError> {
        self.taken(field)?;
        if self.count == MAX_IMAGES {
            return Err(ApiError::invalid(
                field,
                format!(
                    "too many images: at most {MAX_IMAGES} in one request ('{field}' is one more)"
                ),
            ));
        }
        self.count += 1;
        Ok(())
    }

    /// Fetches `url` under the server's setting.
    fn fetch(&self, url: &str, field: &str) -> Result<Image, ApiError> {
        let ImageUrls::Fetched(check) = &self.urls else {
            return Err(ApiError::invalid(
                field,
                format!(
                    "'{field}' is an http(s) URL: this server fetches image URLs only when started with --allow-image-urls; send the image as a data: URL"
                ),
            ));
        };
        let bytes = web::fetch_image(url, check.clone(), MAX_IMAGE_BYTES).map_err(|why| {
            ApiError::invalid(field, format!("'{field}': cannot fetch the image: {why}"))
        })?;
        Image::from_bytes(bytes).map_err(|e| image_error(field, &e))
    }
}

/// An image refused: a 400 naming the field, with the error's own words.
fn image_error(field: &str, error: &ImageError) -> ApiError {
    ApiError::invalid(field, format!("'{field}': {error}"))
}

/// A message's content as its parts are read: text joined with a delimiter,
/// and images where their parts stood.
#[derive(Debug, Default)]
pub struct Content {
    pub text: String,
    pub images: Vec<ImagePart>,
    /// Parts read so far.
    parts: usize,
    /// The last part read was an image.
    after_image: bool,
}

impl Content {
    /// Content given as one string.
    pub fn text(text: String) -> Content {
        Content {
            text,
            parts: 1,
            ..Content::default()
        }
    }

    /// A text part, after `delimiter` when another part came before it, but
    /// for an image: llama-server puts no delimiter next to an image.
    pub fn push_text(&mut self, text: &str, delimiter: &str) {
        if self.parts > 0 && !self.after_image {
            self.text.push_str(delimiter);
        }
        self.text.push_str(text);
        self.parts += 1;
        self.after_image = false;
    }

    /// An image part, standing where the text has got to.
    pub fn push_image(&mut self, image: Image) {
        self.images.push(ImagePart {
            at: self.text.len(),
            image,
        });
        self.parts += 1;
        self.after_image = true;
    }

    /// `prefix` before the text; the images keep their places in it.
    pub fn prepend(&mut self, prefix: &str) {
        self.text.insert_str(0, prefix);
        for part in &mut self.images {
            part.at += prefix.len();
        }
    }

    /// The message `build` makes of the text, carrying the images.
    pub fn into_message(self, build: impl FnOnce(String) -> Message) -> Message {
        let mut message = build(self.text);
        message.images = self.images;
        message
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::io::Cursor;
    use std::thread;

    /// A valid `width` x `height` PNG.
    pub fn png(width: u32, height: u32) -> Vec<u8> {
        crate::core::image::test_png(width, height, [128, 128, 128])
    }

    /// A 2x3 PNG as base64.
    pub fn png_base64() -> String {
        crate::util::base64::encode(&png(2, 3))
    }

    /// A 2x3 PNG as a data URL.
    pub fn png_data_url() -> String {
        format!("data:image/png;base64,{}", png_base64())
    }

    /// A server on 127.0.0.1:0 that answers every request with `status` and `body`.
    fn serve(status: u16, body: Vec<u8>) -> String {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("bind test server");
        let addr = server.server_addr().to_ip().expect("ip address");
        // The thread lives as long as the test binary; no test waits for it.
        thread::spawn(move || {
            for request in server.incoming_requests() {
                let response = tiny_http::Response::new(
                    tiny_http::StatusCode(status),
                    Vec::new(),
                    Cursor::new(body.clone()),
                    Some(body.len()),
                    None,
                );
                let _ = request.respond(response);
            }
        });
        format!("http://{addr}/cat.png")
    }

    /// Images fetched from anywhere, loopback included (the tests' own servers).
    fn anywhere() -> Images {
        Images::new(&ImageUrls::Fetched(web::policy_check(true)))
    }

    #[test]
    fn data_urls_and_bare_base64_are_read() {
        let mut images = Images::new(&ImageUrls::Refused);
        let image = images.reference(&png_data_url(), "f").unwrap();
        assert_eq!(
            (image.mime.as_str(), image.width, image.height),
            ("image/png", 2, 3)
        );
        let bare = images.reference(&png_base64(), "f").unwrap();
        assert_eq!(bare.sha256, image.sha256);
    }

    #[test]
    fn image_errors_are_400s_naming_the_field() {
        let mut images = Images::new(&ImageUrls::Refused);
        for (reference, words) in [
            ("data:image/png;base64,!!!", "not valid base64"),
            ("data:image/bmp;base64,AAAA", "unsupported image type"),
            ("data:text/plain,hello", "only base64"),
            ("aGVsbG8gd29ybGQ=", "unsupported image type"),
            ("file:///etc/passwd", "file: URLs are not read"),
        ] {
            let error = images
                .reference(reference, "messages[0].content[1].image_url")
                .unwrap_err();
            assert_eq!(error.status, 400);
            assert_eq!(error.kind, "invalid_request_error");
            assert_eq!(
                error.param.as_deref(),
                Some("messages[0].content[1].image_url")
            );
            assert!(
                error.message.contains(words),
                "{reference}: {}",
                error.message
            );
        }
        let declared = images
            .base64(&png_base64(), Some("image/tiff"), "source")
            .unwrap_err();
        assert!(
            declared.message.contains("image/tiff"),
            "{}",
            declared.message
        );
        assert!(images
            .base64(&png_base64(), Some("image/jpeg"), "source")
            .is_ok());
    }

    #[test]
    fn a_url_needs_the_flag_and_a_public_address() {
        let url = serve(200, png(4, 4));
        let refused = Images::new(&ImageUrls::Refused)
            .reference(&url, "f")
            .unwrap_err();
        assert!(
            refused.message.contains("--allow-image-urls"),
            "{}",
            refused.message
        );
        // The flag's own check: loopback is refused before any connection.
        let flagged = ImageUrls::Fetched(web::policy_check(false));
        let error = Images::new(&flagged).reference(&url, "f").unwrap_err();
        assert_eq!(error.status, 400);
        assert!(error.message.contains("loopback"), "{}", error.message);
        let image = anywhere().reference(&url, "f").unwrap();
        assert_eq!((image.width, image.height), (4, 4));
    }

    #[test]
    fn a_fetched_url_must_answer_an_image_within_the_cap() {
        let missing = serve(404, b"no".to_vec());
        let error = anywhere().reference(&missing, "f").unwrap_err();
        assert!(error.message.contains("HTTP 404"), "{}", error.message);
        let big = serve(200, vec![0u8; MAX_IMAGE_BYTES + 1]);
        let error = anywhere().reference(&big, "f").unwrap_err();
        assert!(error.message.contains("over"), "{}", error.message);
        let text = serve(200, b"<html>not an image</html>".to_vec());
        let error = anywhere().reference(&text, "f").unwrap_err();
        assert!(
            error.message.contains("unsupported image type"),
            "{}",
            error.message
        );
    }

    #[test]
    fn more_than_max_images_is_a_400() {
        let mut images = Images::new(&ImageUrls::Refused);
        let data = png_base64();
        for i in 0..MAX_IMAGES {
            images.base64(&data, None, &format!("images[{i}]")).unwrap();
        }
        let error = images.base64(&data, None, "images[64]").unwrap_err();
        assert_eq!(error.param.as_deref(), Some("images[64]"));
        assert!(
            error.message.contains("too many images"),
            "{}",
            error.message
        );
    }

    #[test]
    fn text_only_readers_refuse_images() {
        let error = Images::text_only("a system message")
            .reference(&png_data_url(), "messages[0].content[0]")
            .unwrap_err();
        assert!(
            error.message.contains("a system message carries text only"),
            "{}",
            error.message
        );
    }

    #[test]
    fn content_places_images_between_parts_as_llama_server_joins_them() {
        let image = Image::from_bytes(png(1, 1)).unwrap();
        let mut content = Content::default();
        content.push_text("a", "\n");
        content.push_text("b", "\n");
        content.push_image(image.clone());
        content.push_text("c", "\n");
        content.push_image(image.clone());
        assert_eq!(content.text, "a\nbc");
        let at: Vec<usize> = content.images.iter().map(|p| p.at).collect();
        assert_eq!(at, [3, 4]);
        content.prepend("Error: ");
        let message = content.into_message(Message::user);
        assert_eq!(message.content, "Error: a\nbc");
        assert_eq!(message.images[0].at, 10);
    }
}

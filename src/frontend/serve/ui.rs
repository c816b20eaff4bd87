//! The chat page: `GET /` on `--server` and `--cliserver` serves one small
//! page (`ui/index.html`, `ui/app.js`, `ui/app.css`), compiled into the
//! binary: no CDN, no build step, nothing fetched from outside (the box may
//! be air-gapped).
//!
//! The page and its two files are public (`access.rs` adds [`PATHS`] to the
//! policy's public paths): they hold no secret. The page asks for the token
//! once, keeps it in the tab's `sessionStorage`, and sends it as
//! `Authorization: Bearer` on every API call, which passes
//! `Connection::check` like any other client (its `Origin` is the server's
//! own loopback address). It talks to the servers' ordinary routes: on the
//! cliserver `/request`, `/updates`, `/cancel`, `/approve/{id}`, `/session`;
//! on the API server `/v1/chat/completions` with `stream`.
//!
//! The answers carry a strict Content-Security-Policy (same-origin scripts,
//! styles and connections only, no framing), so even a model reply that
//! slipped into the DOM as markup could not run script; the page itself only
//! ever sets `textContent`.
//!
//! Its Image button attaches PNG, JPEG, WebP or GIF files to the next message
//! (thumbnails shown until it is sent): `data:` URLs in the cliserver's
//! `/request` `images`, OpenAI `image_url` parts on the API server.

use super::http::{Request, Responder};

/// The page and its files: the paths served here, all public.
pub const PATHS: [&str; 3] = ["/", "/ui/app.js", "/ui/app.css"];

const INDEX_HTML: &str = include_str!("ui/index.html");
const APP_JS: &str = include_str!("ui/app.js");
const APP_CSS: &str = include_str!("ui/app.css");

/// Same-origin everything, no inline script or style, no plugins, no framing;
/// images also from `data:` URLs, the thumbnails of the user's own attachments.
const CSP: &str = "default-src 'self'; connect-src 'self'; script-src 'self'; \
                   style-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; \
                   form-action 'self'; frame-ancestors 'none'";

/// The content type and body of a UI path.
fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        "/" => Some(("text/html; charset=utf-8", INDEX_HTML)),
        "/ui/app.js" => Some(("text/javascript; charset=utf-8", APP_JS)),
        "/ui/app.css" => Some(("text/css; charset=utf-8", APP_CSS)),
        _ => None,
    }
}

/// The headers every UI answer carries.
fn security_headers() -> [(&'static str, String); 4] {
    [
        ("Content-Security-Policy", CSP.into()),
        ("X-Frame-Options", "DENY".into()),
        ("X-Content-Type-Options", "nosniff".into()),
        ("Referrer-Policy", "no-referrer".into()),
    ]
}

/// Serves the page or one of its files; any other path gives the responder
/// back for the server's own routes.
pub fn route(request: &Request, responder: Responder) -> Option<Responder> {
    let Some((content_type, body)) = asset(&request.path) else {
        return Some(responder);
    };
    if request.method == "GET" {
        responder.text_with(200, content_type, body, &security_headers());
    } else {
        responder.error(405, "method not allowed");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_public_path_has_an_asset() {
        for path in PATHS {
            assert!(asset(path).is_some(), "{path}");
        }
        assert!(asset("/ui/other.js").is_none());
    }

    /// The page loads only its own files: no inline script or style (the CSP
    /// forbids them) and nothing from another host.
    #[test]
    fn the_page_needs_nothing_from_outside() {
        assert!(INDEX_HTML.contains("<script src=\"/ui/app.js\""));
        assert!(INDEX_HTML.contains("href=\"/ui/app.css\""));
        for text in [INDEX_HTML, APP_JS, APP_CSS] {
            assert!(!text.contains("http://") && !text.contains("https://"));
            assert!(!text.contains("style=\""), "inline style");
        }
        assert_eq!(INDEX_HTML.matches("<script").count(), 1);
        assert!(
            !APP_JS.contains("innerHTML"),
            "model text only as textContent"
        );
    }

    /// The attach control: a file input for the four image types behind a
    /// button, and the request shapes the two servers take.
    #[test]
    fn the_page_attaches_images() {
        assert!(INDEX_HTML.contains(
            "<input id=\"image-file\" type=\"file\" accept=\"image/png,image/jpeg,image/webp,image/gif\" multiple"
        ));
        assert!(INDEX_HTML.contains("<button id=\"attach\" type=\"button\""));
        assert!(INDEX_HTML.contains("<div id=\"attachments\" hidden>"));
        assert!(APP_JS.contains("type: \"image_url\", image_url: { url }"));
        assert!(APP_JS.contains("body.images = images"));
        assert!(APP_JS.contains("readAsDataURL"));
        assert!(CSP.contains("img-src 'self' data:;"));
        assert!(APP_CSS.contains("#attachments"));
    }
}

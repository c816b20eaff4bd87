//! Web tools: `webfetch` (a page as readable text) and `http_request` (any method, raw answer).
//!
//! Both go through one ureq agent per call, never a shell. The SSRF guard
//! lives in the agent's resolver ([`CheckedResolver`]): every address a host
//! name resolves to is checked against [`forbidden_reason`] right before ureq
//! connects to it, so the address checked is the address used (no DNS
//! rebinding window between check and connect), and it runs again for every
//! redirect hop, which we follow by hand (at most [`MAX_REDIRECTS`]). The agent
//! ignores proxy environment variables, because through a proxy ureq would
//! not resolve the target itself and the check would be skipped.
//!
//! The resolver API is marked "unversioned" in ureq 3, so ureq must stay pinned
//! (Cargo.lock has 3.5.1; the manifest should say `=3.5.1`).

use std::fmt;
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use ureq::http::{Method, Request, Response, Uri};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};
use ureq::Body;

use super::{args, Tool, ToolContext, ToolOutput};

pub const MAX_REDIRECTS: usize = 5;
/// Response bodies are cut after this many bytes.
pub const MAX_BODY: usize = 1024 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const OVERALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Decides whether an address may be connected to: `Err` says why not.
pub type AddressCheck = Arc<dyn Fn(IpAddr) -> Result<(), String> + Send + Sync>;

/// The check for a [`super::NetPolicy`].
pub fn policy_check(allow_private: bool) -> AddressCheck {
    Arc::new(move |ip| match forbidden_reason(ip) {
        Some(reason) if !allow_private => Err(format!(
            "refused to connect to {ip}: {reason} (private and local networks are not allowed)"
        )),
        _ => Ok(()),
    })
}

/// Why `ip` is off limits for the web tools, or `None` for a public address.
pub fn forbidden_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    let in_net = |net: [u8; 4], bits: u32| {
        let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
        u32::from(ip) & mask == u32::from_be_bytes(net) & mask
    };
    Some(match o {
        [169, 254, 169, 254] | [169, 254, 170, 2] | [100, 100, 100, 200] | [192, 0, 0, 192] => {
            "a cloud metadata address"
        }
        [0, ..] => "an unspecified address",
        [127, ..] => "a loopback address",
        [10, ..] => "a private address",
        _ if in_net([172, 16, 0, 0], 12) || in_net([192, 168, 0, 0], 16) => "a private address",
        [169, 254, ..] => "a link-local address",
        _ if in_net([100, 64, 0, 0], 10) => "a carrier-grade NAT address",
        [192, 0, 0, _] | [198, 18..=19, ..] => "a reserved address",
        [224..=239, ..] => "a multicast address",
        [240..=255, ..] => "a reserved or broadcast address",
        _ => return None,
    })
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if let Some(v4) = embedded_v4(ip) {
        return forbidden_v4(v4);
    }
    Some(match s {
        [0, 0, 0, 0, 0, 0, 0, 0] => "an unspecified address",
        [0, 0, 0, 0, 0, 0, 0, 1] => "a loopback address",
        [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254] => "a cloud metadata address",
        [0x64, 0xff9b, 1, ..] => "a local NAT64 address",
        [first, ..] if first & 0xfe00 == 0xfc00 => "a unique local (private) address",
        [first, ..] if first & 0xffc0 == 0xfe80 => "a link-local address",
        [first, ..] if first & 0xffc0 == 0xfec0 => "a site-local address",
        [first, ..] if first & 0xff00 == 0xff00 => "a multicast address",
        _ => return None,
    })
}

/// The IPv4 address inside IPv4-mapped, IPv4-compatible, NAT64 and 6to4 addresses,
/// which all end up reaching that IPv4 host.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let from = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(from(hi, lo)),
        // `::` and `::1` are themselves, not IPv4-compatible addresses.
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, hi, lo] => Some(from(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(from(hi, lo)),
        [0x2002, hi, lo, ..] => Some(from(hi, lo)),
        _ => None,
    }
}

/// Resolves like ureq's default resolver, then refuses if any address fails the check.
struct CheckedResolver {
    check: AddressCheck,
}

impl fmt::Debug for CheckedResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CheckedResolver")
    }
}

impl Resolver for CheckedResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let addrs = DefaultResolver::default().resolve(uri, config, timeout)?;
        for addr in addrs.iter() {
            (self.check)(addr.ip())
                .map_err(|m| ureq::Error::Io(io::Error::new(io::ErrorKind::PermissionDenied, m)))?;
        }
        Ok(addrs)
    }
}

fn agent(check: AddressCheck) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .proxy(None)
        .max_redirects(0)
        .http_status_as_error(false)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .timeout_global(Some(OVERALL_TIMEOUT))
        .build();
    ureq::Agent::with_parts(config, DefaultConnector::new(), CheckedResolver { check })
}

/// One request as the model described it.
#[derive(Debug, Clone)]
pub struct HttpCall {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// What came back, after redirects.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// True when the body was cut at its cap ([`MAX_BODY`] for the tools).
    pub truncated: bool,
    /// Where the body came from, after redirects.
    pub url: String,
}

impl Fetched {
    fn content_type(&self) -> String {
        self.headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
            .map(|(_, value)| value.to_ascii_lowercase())
            .unwrap_or_default()
    }
}

/// Performs `call`, following redirects by hand so that every hop is checked;
/// the body is cut after [`MAX_BODY`] bytes.
pub fn fetch(call: HttpCall, check: AddressCheck) -> Result<Fetched, String> {
    fetch_capped(call, check, MAX_BODY)
}

/// [`fetch`] with the body cut after `max_body` bytes (an image part of an API
/// request is read up to the image size limit).
pub fn fetch_capped(
    mut call: HttpCall,
    check: AddressCheck,
    max_body: usize,
) -> Result<Fetched, String> {
    let agent = agent(check);
    for _ in 0..=MAX_REDIRECTS {
        let uri = checked_uri(&call.url)?;
        let mut response = send(&agent, &call).map_err(|e| describe_error(&call.url, e))?;
        match redirect_target(&uri, &response) {
            Some(next) => follow(&mut call, &uri, next?),
            None => return read_response(&call.url, &mut response, max_body),
        }
    }
    Err(format!("Error: more than {MAX_REDIRECTS} redirects"))
}

/// The image file at `url` (what `--allow-image-urls` and a front-end's image
/// URL fetch): a 2xx answer's body, at most `max` bytes, under `check`'s rules.
/// Errors are plain text for a person, not the model's "Error: ..." form.
pub fn fetch_image(url: &str, check: AddressCheck, max: usize) -> Result<Vec<u8>, String> {
    let call = HttpCall {
        method: "GET".into(),
        url: url.to_string(),
        headers: vec![("Accept".into(), "image/*".into())],
        body: Vec::new(),
    };
    let fetched = fetch_capped(call, check, max)
        .map_err(|e| e.strip_prefix("Error: ").map_or(e.clone(), str::to_string))?;
    if !(200..300).contains(&fetched.status) {
        return Err(format!("{url} answered HTTP {}", fetched.status));
    }
    if fetched.truncated {
        return Err(format!("{url} is over {max} bytes"));
    }
    Ok(fetched.body)
}

fn checked_uri(url: &str) -> Result<Uri, String> {
    let uri: Uri = url
        .trim()
        .parse()
        .map_err(|e| format!("Error: invalid URL {url}: {e}"))?;
    match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
        Some("http" | "https") => {}
        _ => {
            return Err(format!(
                "Error: only http and https URLs are allowed, not {url}"
            ))
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("Error: the URL {url} has no host"));
    }
    Ok(uri)
}

fn send(agent: &ureq::Agent, call: &HttpCall) -> Result<Response<Body>, ureq::Error> {
    let method = Method::from_bytes(call.method.to_ascii_uppercase().as_bytes())
        .map_err(|_| ureq::Error::BadUri(format!("invalid method {}", call.method)))?;
    let mut builder = Request::builder().method(method).uri(call.url.trim());
    for (name, value) in &call.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    if call.body.is_empty() {
        agent.run(builder.body(())?)
    } else {
        agent.run(builder.body(call.body.clone())?)
    }
}

fn describe_error(url: &str, error: ureq::Error) -> String {
    match error {
        ureq::Error::Io(e) if e.kind() == io::ErrorKind::PermissionDenied => format!("Error: {e}"),
        ureq::Error::Timeout(what) => format!("Error: {url} timed out ({what})"),
        other => format!("Error: request to {url} failed: {other}"),
    }
}

/// The next URL when `response` is a redirect with a `Location`.
fn redirect_target(base: &Uri, response: &Response<Body>) -> Option<Result<String, String>> {
    if !response.status().is_redirection() {
        return None;
    }
    let location = response.headers().get("location")?;
    Some(match location.to_str() {
        Ok(location) => Ok(join_url(base, location.trim())),
        Err(_) => Err("Error: redirect with an unreadable Location header".into()),
    })
}

/// Resolves a `Location` against the URL it came from.
pub fn join_url(base: &Uri, location: &str) -> String {
    let lower = location.to_ascii_lowercase();
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base.authority().map_or("", |a| a.as_str());
    if lower.starts_with("http://") || lower.starts_with("https://") || lower.contains("://") {
        location.to_string()
    } else if location.starts_with("//") {
        format!("{scheme}:{location}")
    } else if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else {
        let path = base.path();
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        let dir = if dir.is_empty() { "/" } else { dir };
        format!("{scheme}://{authority}{dir}{location}")
    }
}

/// Prepares `call` for the next hop: 303 (and 301/302 after a POST) become GET,
/// and credentials are not sent to another host.
fn follow(call: &mut HttpCall, from: &Uri, next: String) {
    let method = call.method.to_ascii_uppercase();
    if method != "GET" && method != "HEAD" {
        call.method = "GET".into();
        call.body.clear();
    }
    let same_host = next
        .parse::<Uri>()
        .ok()
        .and_then(|u| u.authority().cloned())
        == from.authority().cloned();
    if !same_host {
        call.headers.retain(|(name, _)| {
            !matches!(
                name.to_ascii_lowercase().as_str(),
                "authorization" | "cookie" | "proxy-authorization"
            )
        });
    }
    call.url = next;
}

fn read_response(
    url: &str,
    response: &mut Response<Body>,
    max_body: usize,
) -> Result<Fetched, String> {
    let headers = response
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let mut body = Vec::new();
    let reader = response.body_mut().as_reader();
    reader
        .take(max_body as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| format!("Error: reading the body of {url} failed: {e}"))?;
    let truncated = body.len() > max_body;
    body.truncate(max_body);
    Ok(Fetched {
        status: response.status().as_u16(),
        headers,
        body,
        truncated,
        url: url.to_string(),
    })
}

fn is_text(content_type: &str) -> bool {
    content_type.is_empty()
        || content_type.starts_with("text/")
        || ["json", "xml", "javascript", "x-www-form-urlencoded", "yaml"]
            .iter()
            .any(|t| content_type.contains(t))
}

/// How a text body is shown to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Render {
    /// HTML reduced to readable text (`webfetch`).
    Readable,
    /// Exactly as received (`http_request`).
    Raw,
}

/// The body as text for the model, or a one-line description of binary content.
fn body_text(fetched: &Fetched, render: Render) -> String {
    let content_type = fetched.content_type();
    let mut text = if !is_text(&content_type) {
        format!(
            "[binary content: {content_type}, {} bytes, not shown]",
            fetched.body.len()
        )
    } else if render == Render::Readable && content_type.contains("html") {
        html_to_text(&String::from_utf8_lossy(&fetched.body))
    } else {
        String::from_utf8_lossy(&fetched.body).into_owned()
    };
    if fetched.truncated {
        text.push_str(&format!("\n[body cut at {MAX_BODY} bytes]"));
    }
    text
}

/// Crude HTML to text: drops scripts, styles and tags, breaks lines at block
/// elements, decodes the common entities and squeezes blank space.
pub fn html_to_text(html: &str) -> String {
    let mut out = String::new();
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        out.push_str(&decode_entities(&rest[..open]));
        let (tag, after) = match rest[open..].find('>') {
            Some(i) => (&rest[open + 1..open + i], &rest[open + i + 1..]),
            None => (&rest[open + 1..], ""),
        };
        let tag = tag.to_ascii_lowercase();
        rest = after;
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        if (name == "script" || name == "style") && !tag.starts_with('/') {
            let close = format!("</{name}");
            rest = rest
                .to_ascii_lowercase()
                .find(&close)
                .map_or("", |i| &rest[i..]);
        } else if is_block(&name) {
            out.push('\n');
        } else {
            out.push(' ');
        }
    }
    out.push_str(&decode_entities(rest));
    squeeze(&out)
}

fn is_block(name: &str) -> bool {
    matches!(
        name,
        "p" | "br"
            | "div"
            | "li"
            | "ul"
            | "ol"
            | "tr"
            | "table"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
            | "pre"
            | "section"
            | "article"
            | "header"
            | "footer"
            | "title"
            | "blockquote"
    )
}

fn decode_entities(text: &str) -> String {
    text.replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// Trims every line, collapses inner runs of spaces, and keeps at most one blank line.
fn squeeze(text: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if !line.is_empty() || lines.last().is_some_and(|l| !l.is_empty()) {
            lines.push(line);
        }
    }
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    lines.join("\n")
}

pub struct WebFetch;

impl Tool for WebFetch {
    fn name(&self) -> &str {
        "webfetch"
    }

    fn description(&self) -> &str {
        "Fetches a web page (http or https) and returns it as readable text (HTML tags removed). \
         Private and local network addresses are refused."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "The http(s) URL to fetch"}
            },
            "required": ["url"]
        })
    }

    fn side_effecting(&self, _args: &Value) -> bool {
        false
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> ToolOutput {
        let call = HttpCall {
            method: "GET".into(),
            url: args::string(args, "url").to_string(),
            headers: Vec::new(),
            body: Vec::new(),
        };
        match fetch(call, policy_check(ctx.net.allow_private)) {
            Ok(fetched) => {
                let text = body_text(&fetched, Render::Readable);
                let summary = format!("HTTP {}, {} bytes", fetched.status, fetched.body.len());
                let error = fetched.status >= 400;
                let content = if error {
                    format!("HTTP {} from {}\n{text}", fetched.status, fetched.url)
                } else {
                    format!("Fetched {}\n\n{text}", fetched.url)
                };
                ToolOutput {
                    content,
                    summary,
                    error,
                    images: Vec::new(),
                }
            }
            Err(message) => ToolOutput::fail(message),
        }
    }
}

pub struct HttpRequest;

impl Tool for HttpRequest {
    fn name(&self) -> &str {
        "http_request"
    }

    fn description(&self) -> &str {
        "Sends an HTTP request (http or https) and returns the status, response headers and body. \
         Private and local network addresses are refused."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "The http(s) URL"},
                "method": {"type": "string", "description": "HTTP method (default GET)"},
                "headers": {"type": "object", "description": "Request headers as name: value pairs"},
                "body": {"type": "string", "description": "Request body"}
            },
            "required": ["url"]
        })
    }

    /// GET and HEAD only read; every other method may change remote state.
    fn side_effecting(&self, args: &Value) -> bool {
        let method = args.get("method").map_or(Some("GET"), Value::as_str);
        !method.is_some_and(|m| {
            let m = m.trim();
            m.eq_ignore_ascii_case("GET") || m.eq_ignore_ascii_case("HEAD")
        })
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> ToolOutput {
        let call = HttpCall {
            method: args::opt_string(args, "method")
                .unwrap_or("GET")
                .to_string(),
            url: args::string(args, "url").to_string(),
            headers: header_pairs(args::opt_object(args, "headers")),
            body: args::opt_string(args, "body")
                .unwrap_or_default()
                .as_bytes()
                .to_vec(),
        };
        match fetch(call, policy_check(ctx.net.allow_private)) {
            Ok(fetched) => raw_output(&fetched),
            Err(message) => ToolOutput::fail(message),
        }
    }
}

fn header_pairs(headers: Option<&Map<String, Value>>) -> Vec<(String, String)> {
    let value_text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    headers
        .into_iter()
        .flatten()
        .map(|(name, value)| (name.clone(), value_text(value)))
        .collect()
}

fn raw_output(fetched: &Fetched) -> ToolOutput {
    let mut content = format!("HTTP {}\n", fetched.status);
    for (name, value) in &fetched.headers {
        content.push_str(&format!("{name}: {value}\n"));
    }
    content.push('\n');
    content.push_str(&body_text(fetched, Render::Raw));
    ToolOutput {
        content,
        summary: format!("HTTP {}, {} bytes", fetched.status, fetched.body.len()),
        error: fetched.status >= 400,
        images: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    fn check_ip(ip: &str, forbidden: bool) {
        let parsed: IpAddr = ip.parse().unwrap();
        assert_eq!(forbidden_reason(parsed).is_some(), forbidden, "{ip}");
    }

    #[test]
    fn address_policy() {
        for ip in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "100.100.100.200",
            "192.0.0.192",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd00:ec2::254",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:a9fe:a9fe",
            "::169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
        ] {
            check_ip(ip, true);
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            check_ip(ip, false);
        }
    }

    #[test]
    fn urls_are_joined() {
        let base: Uri = "http://a.test:8080/x/y?q=1".parse().unwrap();
        assert_eq!(join_url(&base, "/z"), "http://a.test:8080/z");
        assert_eq!(join_url(&base, "z"), "http://a.test:8080/x/z");
        assert_eq!(join_url(&base, "//b.test/"), "http://b.test/");
        assert_eq!(join_url(&base, "https://c.test/p"), "https://c.test/p");
    }

    #[test]
    fn odd_html_does_not_panic() {
        for html in [
            "<",
            "<p",
            "é<é",
            "<script>é",
            "<<>>",
            "&amp",
            "<scrIPT>x</SCRIPT>é",
        ] {
            let _ = html_to_text(html);
        }
        assert_eq!(html_to_text("a<b>é</b"), "a é");
    }

    #[test]
    fn html_becomes_text() {
        let html = "<html><head><title>T</title><style>p{}</style><script>var a = '<p>';</script></head>\
                    <body><h1>Hello &amp; welcome</h1><p>one <b>two</b></p><ul><li>x</li></ul></body></html>";
        assert_eq!(html_to_text(html), "T\n\nHello & welcome\n\none two\n\nx");
    }

    fn tool_ctx(allow_private: bool) -> ToolContext {
        let mut ctx = ToolContext::new(std::env::temp_dir());
        ctx.net.allow_private = allow_private;
        ctx
    }

    #[test]
    fn private_targets_are_refused() {
        for url in [
            "http://127.0.0.1:1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://10.0.0.1/",
            "http://[::1]:1/",
            "http://localhost:1/",
        ] {
            for tool in [&WebFetch as &dyn Tool, &HttpRequest] {
                let out = tool.run(&json!({"url": url}), &tool_ctx(false));
                assert!(out.error, "{url}");
                assert!(
                    out.content.contains("refused to connect"),
                    "{url}: {}",
                    out.content
                );
            }
        }
    }

    #[test]
    fn other_schemes_are_refused() {
        for url in ["file:///etc/passwd", "ftp://example.com/", "not a url"] {
            let out = WebFetch.run(&json!({"url": url}), &tool_ctx(true));
            assert!(out.error, "{url}: {}", out.content);
        }
    }

    /// A server on `ip:0` that answers each request with `respond(path)`, reporting paths seen.
    fn serve(
        ip: &str,
        respond: impl Fn(&str) -> tiny_http::Response<io::Cursor<Vec<u8>>> + Send + 'static,
    ) -> (String, crossbeam_channel::Receiver<String>) {
        let server = tiny_http::Server::http(format!("{ip}:0")).expect("bind test server");
        let addr = server.server_addr().to_ip().expect("ip address");
        let (seen_tx, seen_rx) = crossbeam_channel::unbounded();
        // The thread lives as long as the test binary; no test waits for it.
        thread::spawn(move || {
            for request in server.incoming_requests() {
                // Recorded before answering, so a client that got an answer was seen.
                let _ = seen_tx.send(request.url().to_string());
                let response = respond(request.url());
                let _ = request.respond(response);
            }
        });
        (format!("http://{addr}"), seen_rx)
    }

    fn redirect_to(location: &str) -> tiny_http::Response<io::Cursor<Vec<u8>>> {
        let header = tiny_http::Header::from_bytes("Location", location.as_bytes()).unwrap();
        tiny_http::Response::from_string("moved")
            .with_status_code(302)
            .with_header(header)
    }

    #[test]
    fn redirects_are_followed_and_rechecked_per_hop() {
        // The second server is on another loopback address; the check allows only
        // 127.0.0.1, so the redirect must be refused at the second hop.
        let (second_url, second_seen) =
            serve("127.0.0.2", |_| tiny_http::Response::from_string("secret"));
        let target = format!("{second_url}/secret");
        let (first_url, first_seen) = serve("127.0.0.1", move |path| match path {
            "/same" => redirect_to("/final"),
            "/final" => tiny_http::Response::from_string("arrived"),
            _ => redirect_to(&target),
        });
        let only_first: AddressCheck = Arc::new(|ip| {
            if ip == IpAddr::V4(Ipv4Addr::LOCALHOST) {
                Ok(())
            } else {
                Err(format!("refused to connect to {ip}"))
            }
        });
        let call = |path: &str| HttpCall {
            method: "GET".into(),
            url: format!("{first_url}{path}"),
            headers: Vec::new(),
            body: Vec::new(),
        };
        let fetched =
            fetch(call("/same"), only_first.clone()).expect("same-host redirect is followed");
        assert_eq!(
            (fetched.status, fetched.body.as_slice()),
            (200, b"arrived".as_slice())
        );
        let err = fetch(call("/elsewhere"), only_first).unwrap_err();
        assert!(err.contains("refused to connect to 127.0.0.2"), "{err}");
        let first_paths: Vec<String> = first_seen.try_iter().collect();
        assert_eq!(first_paths, ["/same", "/final", "/elsewhere"]);
        assert!(
            second_seen.try_recv().is_err(),
            "the second hop was contacted"
        );
    }

    #[test]
    fn redirect_loops_stop() {
        let (url, _server) = serve("127.0.0.1", |_| redirect_to("/again"));
        let out = HttpRequest.run(&json!({"url": url}), &tool_ctx(true));
        assert!(
            out.error && out.content.contains("more than 5 redirects"),
            "{}",
            out.content
        );
    }

    #[test]
    fn fetch_text_html_and_status() {
        let (url, _server) = serve("127.0.0.1", |path| {
            let html = tiny_http::Header::from_bytes("Content-Type", "text/html").unwrap();
            match path {
                "/page" => {
                    tiny_http::Response::from_string("<p>Hi&nbsp;there</p>").with_header(html)
                }
                "/big" => tiny_http::Response::from_data(vec![b'a'; MAX_BODY + 10]),
                _ => tiny_http::Response::from_string("nope").with_status_code(404),
            }
        });
        let out = WebFetch.run(&json!({"url": format!("{url}/page")}), &tool_ctx(true));
        let expected = format!("Fetched {url}/page\n\nHi there");
        assert_eq!(
            (out.content.as_str(), out.error),
            (expected.as_str(), false)
        );
        let out = WebFetch.run(&json!({"url": format!("{url}/missing")}), &tool_ctx(true));
        assert!(
            out.error
                && out
                    .content
                    .starts_with(&format!("HTTP 404 from {url}/missing")),
            "{}",
            out.content
        );
        let out = HttpRequest.run(
            &json!({"url": format!("{url}/big"), "method": "POST", "headers": {"X-Test": 1}, "body": "b"}),
            &tool_ctx(true),
        );
        assert!(
            out.content.starts_with("HTTP 200\n"),
            "{}",
            &out.content[..100]
        );
        assert!(out
            .content
            .ends_with(&format!("[body cut at {MAX_BODY} bytes]")));
    }
}

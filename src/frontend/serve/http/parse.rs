//! Reading one HTTP/1.1 request off a connection: the head (request line,
//! headers, every limit and strictness rule of the server's module docs), the
//! body framing decided from it, and the body; what cannot be read becomes a
//! [`ReadError`] with the status to answer.

use super::*;

/// Why a request could not be read.
#[derive(Debug)]
pub(super) enum ReadError {
    /// Answer with this status and message, then close.
    Reject(u16, String),
    /// The client went away or was too slow: just close.
    Gone,
}

/// How a request's body is framed, decided from its head.
#[derive(Debug)]
pub(super) struct BodyFraming {
    pub(super) length: u64,
    /// `Expect: 100-continue` from an HTTP/1.1 client: say `100 Continue`
    /// before reading, or it waits a second (curl) before sending the body.
    pub(super) expect_continue: bool,
    /// An HTTP/1.1 request that asked to keep the connection open
    /// (`Connection: keep-alive`, as httpx, urllib3, undici and browsers send
    /// it): it may stay open for the next one. Without the word it closes, as
    /// HTTP lets a server decide.
    pub(super) keep_alive: bool,
}

/// Reads and parses the request line and headers.
pub(super) fn read_head(
    reader: &mut impl BufRead,
    peer: SocketAddr,
    limits: &Limits,
) -> Result<(Request, BodyFraming), ReadError> {
    refuse_non_http(reader)?;
    let mut used = 0usize;
    // Stray CRLFs before a request are tolerated (RFC 9112 §2.2).
    let first = loop {
        match read_head_line(reader, limits, &mut used)? {
            Some(line) if line.is_empty() => continue,
            Some(line) => break line,
            None => return Err(ReadError::Gone),
        }
    };
    // Checked before the headers are read: an HTTP/0.9 line (`GET /`) or any
    // other line that is no request gets its 400 at once, not at the deadline.
    let line = parse_request_line(&first)?;
    let header_lines = read_header_lines(reader, limits, &mut used)?;
    let mut headers = parse_headers(&header_lines)?;
    if let Some(authority) = line.authority {
        // RFC 9112 §3.2.2: the target's authority replaces the Host header.
        headers.retain(|(name, _)| !name.eq_ignore_ascii_case("host"));
        headers.push(("Host".into(), authority));
    }
    let (path, query) = line.target.split_once('?').unwrap_or((&line.target, ""));
    let request = Request {
        method: line.method.clone(),
        path: path.to_string(),
        query: query.to_string(),
        headers,
        body: Vec::new(),
        peer,
    };
    let framing = body_framing(&request, line.http11, limits)?;
    Ok((request, framing))
}

/// The fuzzer's entry (`crate::fuzz`): a request head as a peer sends it.
#[cfg(test)]
pub(crate) fn fuzz_head(bytes: &[u8]) {
    let peer = SocketAddr::from(([127, 0, 0, 1], 9));
    let _ = read_head(&mut &bytes[..], peer, &Limits::default());
}

/// Closes at once on a connection whose first byte cannot start a request: a TLS
/// or SSLv2 hello (a client speaking HTTPS to a plain port) gets no answer it could
/// read, any other such byte a 400. Waits for the first byte within the deadline.
pub(super) fn refuse_non_http(reader: &mut impl BufRead) -> Result<(), ReadError> {
    let first = match reader.fill_buf() {
        Ok([]) => return Err(ReadError::Gone),
        Ok(bytes) => bytes[0],
        Err(_) => return Err(ReadError::Gone),
    };
    match first {
        // A TLS record (handshake) or an SSLv2 hello.
        0x16 | 0x80 => Err(ReadError::Gone),
        b'\r' | b'\n' => Ok(()),
        b if is_token(std::str::from_utf8(&[b]).unwrap_or("")) => Ok(()),
        _ => Err(ReadError::Reject(400, "not an HTTP request".into())),
    }
}

/// One line of the head without its terminator, `None` at the end of the stream
/// before any byte of it. `used` counts the head's bytes against its cap. A head
/// that stops arriving partway is answered 408 at the deadline (nginx's and
/// Apache's rule); a connection that sent nothing is just closed.
pub(super) fn read_head_line(
    reader: &mut impl BufRead,
    limits: &Limits,
    used: &mut usize,
) -> Result<Option<String>, ReadError> {
    let mut line = Vec::new();
    let cap = (limits.max_head_bytes - (*used).min(limits.max_head_bytes)) as u64 + 1;
    let started = *used;
    let n = reader
        .take(cap)
        .read_until(b'\n', &mut line)
        .map_err(|e| timed_out(&e, started + line.len() > 0, "request head"))?;
    *used += n;
    let ended = line.ends_with(b"\n");
    // End of stream before the head is complete: the client gave up.
    if !ended && (n as u64) < cap {
        return if n == 0 {
            Ok(None)
        } else {
            Err(ReadError::Gone)
        };
    }
    if !ended || *used > limits.max_head_bytes {
        return Err(ReadError::Reject(431, "request head too large".into()));
    }
    let text = String::from_utf8(line)
        .map_err(|_| ReadError::Reject(400, "request head is not UTF-8".into()))?;
    // CRLF or a bare LF (RFC 9112 §2.2); a bare CR stays and is refused later.
    let text = text.strip_suffix('\n').unwrap_or(&text);
    Ok(Some(text.strip_suffix('\r').unwrap_or(text).to_string()))
}

/// The header lines up to the empty line that ends the head.
pub(super) fn read_header_lines(
    reader: &mut impl BufRead,
    limits: &Limits,
    used: &mut usize,
) -> Result<Vec<String>, ReadError> {
    let mut lines = Vec::new();
    loop {
        let Some(text) = read_head_line(reader, limits, used)? else {
            return Err(ReadError::Gone);
        };
        if text.is_empty() {
            return Ok(lines);
        }
        if lines.len() >= limits.max_headers {
            return Err(ReadError::Reject(431, "too many headers".into()));
        }
        lines.push(text);
    }
}

/// A read that failed: 408 when it timed out after part of `what` arrived (the
/// client is told, as nginx and Apache tell it), else the client is gone.
pub(super) fn timed_out(error: &io::Error, partial: bool, what: &str) -> ReadError {
    let timeout = matches!(
        error.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    );
    if timeout && partial {
        ReadError::Reject(408, format!("{what} not received in time"))
    } else {
        ReadError::Gone
    }
}

/// A parsed request line.
#[derive(Debug, PartialEq)]
pub(super) struct RequestLine {
    method: String,
    /// The path and query (origin-form).
    target: String,
    /// The authority of an absolute-form target (`http://host:port/path`).
    authority: Option<String>,
    http11: bool,
}

/// `METHOD SP target SP HTTP/1.x`, one space each, with a token method and
/// a target of visible ASCII characters.
pub(super) fn parse_request_line(line: &str) -> Result<RequestLine, ReadError> {
    let malformed = || ReadError::Reject(400, "malformed request line".into());
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed());
    };
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ if is_http_version(version) => {
            return Err(ReadError::Reject(505, "only HTTP/1.0 and 1.1".into()))
        }
        _ => return Err(malformed()),
    };
    if !is_token(method) || target.is_empty() || !target.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(malformed());
    }
    let (target, authority) = split_target(target).ok_or_else(malformed)?;
    Ok(RequestLine {
        method: method.to_string(),
        target,
        authority,
        http11,
    })
}

/// `HTTP/<digit>.<digit>`.
pub(super) fn is_http_version(version: &str) -> bool {
    let bytes = version.as_bytes();
    bytes.len() == 8
        && version.starts_with("HTTP/")
        && bytes[5].is_ascii_digit()
        && bytes[6] == b'.'
        && bytes[7].is_ascii_digit()
}

/// Origin-form (`/path?query`) as is; absolute-form (`http://host/path`)
/// split into its path and authority. Other forms (`*`, authority-form) are
/// not served here.
pub(super) fn split_target(target: &str) -> Option<(String, Option<String>)> {
    if target.starts_with('/') {
        return Some((target.to_string(), None));
    }
    let scheme_end = target.find("://")?;
    let scheme = &target[..scheme_end];
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let rest = &target[scheme_end + 3..];
    let path_at = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(path_at);
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    let path = match path {
        "" => "/".to_string(),
        query if query.starts_with('?') => format!("/{query}"),
        path => path.to_string(),
    };
    Some((path, Some(authority.to_string())))
}

/// A query value decoded: `%XX` escapes, and `+` as a space (form encoding).
pub(super) fn percent_decode(text: &str) -> String {
    crate::util::net::percent_decode(text, true)
}

/// An RFC 9110 token: what a method and a header name are made of.
pub(super) fn is_token(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(crate::util::net::is_http_tchar)
}

/// `Name: value` lines. A name must be a token (no spaces, no folded
/// continuation lines); a value may not hold control characters other than
/// tab (NUL, a bare CR). More than one `Host` is refused (RFC 9112 §3.2),
/// since two parties could each believe a different one.
pub(super) fn parse_headers(lines: &[String]) -> Result<Vec<(String, String)>, ReadError> {
    let headers = lines
        .iter()
        .map(|line| parse_header(line))
        .collect::<Result<Vec<_>, _>>()?;
    let hosts = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("host"))
        .count();
    if hosts > 1 {
        return Err(ReadError::Reject(400, "more than one Host header".into()));
    }
    Ok(headers)
}

pub(super) fn parse_header(line: &str) -> Result<(String, String), ReadError> {
    let (name, value) = line
        .split_once(':')
        .filter(|(name, _)| is_token(name))
        .ok_or_else(|| ReadError::Reject(400, "malformed header line".into()))?;
    let value = value.trim_matches([' ', '\t']);
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(ReadError::Reject(
            400,
            "control character in a header value".into(),
        ));
    }
    Ok((name.to_string(), value.to_string()))
}

/// `Content-Length` only: a transfer coding is refused (`411`) rather than
/// guessed at, so a chunked body is never read as the next request; every
/// `Content-Length` must be plain digits and agree (`400`), and a length
/// over the cap is refused before anything is read (`413`).
pub(super) fn body_framing(
    request: &Request,
    http11: bool,
    limits: &Limits,
) -> Result<BodyFraming, ReadError> {
    if request.header("transfer-encoding").is_some() {
        return Err(ReadError::Reject(
            411,
            "chunked request bodies are not supported; send Content-Length".into(),
        ));
    }
    let length = content_length(request)?;
    if length > limits.max_body_bytes as u64 {
        return Err(ReadError::Reject(
            413,
            format!("request body over {} bytes", limits.max_body_bytes),
        ));
    }
    let expect_continue = match request.header("expect") {
        None => false,
        Some(value) if value.eq_ignore_ascii_case("100-continue") => http11,
        Some(_) => {
            return Err(ReadError::Reject(
                417,
                "the only expectation served is 100-continue".into(),
            ))
        }
    };
    let tokens = request.header("connection").unwrap_or("");
    let said = |word: &str| {
        tokens
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case(word))
    };
    Ok(BodyFraming {
        length,
        expect_continue,
        keep_alive: http11 && said("keep-alive") && !said("close"),
    })
}

/// The declared body length; 0 without `Content-Length`.
pub(super) fn content_length(request: &Request) -> Result<u64, ReadError> {
    let mut length = None;
    let values = request
        .headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("content-length"));
    for (_, value) in values {
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ReadError::Reject(400, "bad Content-Length".into()));
        }
        // More digits than a u64 holds: larger than any cap.
        let n = value.parse::<u64>().unwrap_or(u64::MAX);
        if length.is_some_and(|seen| seen != n) {
            return Err(ReadError::Reject(
                400,
                "conflicting Content-Length headers".into(),
            ));
        }
        length = Some(n);
    }
    Ok(length.unwrap_or(0))
}

/// Reads exactly the declared body, after `100 Continue` when asked for.
/// Bytes after it are read only as the next request of a kept-alive
/// connection, and only when none had come before the answer began.
pub(super) fn read_body(
    reader: &mut impl Read,
    stream: &TcpStream,
    framing: &BodyFraming,
) -> Result<Vec<u8>, ReadError> {
    if framing.length == 0 {
        return Ok(Vec::new());
    }
    if framing.expect_continue {
        let mut writer = stream;
        writer
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .map_err(|_| ReadError::Gone)?;
    }
    // Grown as bytes arrive: a declared length is not memory to set aside.
    let mut body = Vec::with_capacity(framing.length.min(64 * 1024) as usize);
    reader
        .take(framing.length)
        .read_to_end(&mut body)
        .map_err(|e| timed_out(&e, true, "request body"))?;
    if body.len() as u64 != framing.length {
        return Err(ReadError::Gone);
    }
    Ok(body)
}

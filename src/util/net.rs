//! The one answer to "is this loopback", for host names, `Host` headers,
//! authorities with ports and URLs.
//!
//! Loopback means: the name `localhost` (any case, with or without the root
//! dot `localhost.`), an IPv4 address in 127.0.0.0/8 written in any form the
//! system resolver accepts (`127.1`, `0x7f.1`, as `inet_aton` reads them), `::1`,
//! and IPv4-mapped loopback (`::ffff:127.0.0.1`). A name that merely starts or
//! ends like one (`127.evil.com`, `localhost.evil.com`, `foo.localhost`) is not:
//! its address is whatever DNS says, so a server must not trust it and a client
//! must not skip its proxy for it.

use std::net::{IpAddr, Ipv4Addr};

/// Whether `host` names this machine's loopback interface. `host` may carry a
/// port (`localhost:8000`, `[::1]:8000`) and IPv6 brackets.
pub fn is_loopback_host(host: &str) -> bool {
    let name = strip_port(host.trim());
    if name.eq_ignore_ascii_case("localhost") || name.eq_ignore_ascii_case("localhost.") {
        return true;
    }
    match name.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => ip.is_loopback(),
        Ok(IpAddr::V6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => parse_inet_aton(name).is_some_and(|ip| ip.is_loopback()),
    }
}

/// Whether the host of an `http(s)://…` URL is loopback.
pub fn is_loopback_url(url: &str) -> bool {
    is_loopback_host(url_host(url))
}

/// The host part of an `http(s)://host[:port]/…` URL, without brackets or port.
pub fn url_host(url: &str) -> &str {
    strip_port(url_authority(url))
}

/// The port of an `http(s)://host[:port]/…` URL: the explicit one, else the
/// scheme's default (80 for `http`, 443 for `https`).
pub fn url_port(url: &str) -> Option<u16> {
    let authority = url_authority(url);
    match split_port(authority).1 {
        Some(port) => port.parse().ok(),
        None if url
            .get(..8)
            .is_some_and(|s| s.eq_ignore_ascii_case("https://")) =>
        {
            Some(443)
        }
        None => Some(80),
    }
}

/// `host:port` (or `[v6]:port`) split into the host without brackets and the port.
pub fn host_and_port(address: &str) -> Option<(&str, u16)> {
    let (host, port) = split_port(address.trim());
    Some((unbracket(host), port?.parse().ok()?))
}

/// `user@host:port` of a URL: after the scheme, before the path, query or fragment,
/// without the user part.
fn url_authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
}

/// The host of `host`, `host:port`, `[v6]` or `[v6]:port`, brackets removed.
/// A bare IPv6 address (`::1`, more than one colon) has no port.
fn strip_port(authority: &str) -> &str {
    unbracket(split_port(authority).0)
}

fn split_port(authority: &str) -> (&str, Option<&str>) {
    if authority.starts_with('[') {
        return match authority.split_once(']') {
            Some((host, rest)) => (
                &authority[..host.len() + 1],
                rest.strip_prefix(':').filter(|p| !p.is_empty()),
            ),
            None => (authority, None),
        };
    }
    match authority.matches(':').count() {
        1 => {
            let (host, port) = authority.split_once(':').unwrap_or((authority, ""));
            (host, Some(port).filter(|p| !p.is_empty()))
        }
        _ => (authority, None),
    }
}

fn unbracket(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// IPv4 in the forms `inet_aton` accepts (and so `getaddrinfo`, which binds
/// and connects use): one to four parts, each decimal, `0x` hex or `0` octal,
/// the last part filling the remaining bytes (`127.1` is 127.0.0.1).
fn parse_inet_aton(text: &str) -> Option<Ipv4Addr> {
    let text = text.strip_suffix('.').unwrap_or(text);
    let parts: Vec<u32> = text
        .split('.')
        .map(parse_aton_part)
        .collect::<Option<Vec<u32>>>()?;
    let (last, leading) = parts.split_last()?;
    if leading.len() > 3 || leading.iter().any(|&p| p > 255) {
        return None;
    }
    let last_bits = 8 * (4 - leading.len() as u32);
    if last_bits < 32 && *last >= 1u32 << last_bits {
        return None;
    }
    let high = leading
        .iter()
        .enumerate()
        .fold(0u32, |acc, (i, &p)| acc | (p << (24 - 8 * i as u32)));
    Some(Ipv4Addr::from(high | last))
}

fn parse_aton_part(part: &str) -> Option<u32> {
    if part.is_empty() {
        return None;
    }
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if digits.is_empty() {
        return (radix == 16).then_some(0);
    }
    u32::from_str_radix(digits, radix).ok()
}

/// Whether `b` may appear in an HTTP token (RFC 9110 §5.6.2 `tchar`): methods
/// and header names. The one grammar the HTTP server checks requests with and
/// the tool server tells an HTTP request line from JSON-RPC with.
pub fn is_http_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `%XX` escapes decoded, and with `form` a `+` as a space (a form-encoded query;
/// in a URL's path it is a plus). A bad escape stays as it is, and bytes that are
/// not UTF-8 are replaced.
pub fn percent_decode(text: &str, form: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push((hi * 16 + lo) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if form => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_with_and_without_ports() {
        let cases = [
            ("localhost", true),
            ("localhost.", true),
            ("LOCALHOST", true),
            ("LocalHost.", true),
            ("127.0.0.1", true),
            ("127.0.0.2", true),
            ("127.1", true),
            ("127.255.255.254", true),
            ("0x7f.1", true),
            ("0177.0.0.1", true),
            ("2130706433", true),
            ("::1", true),
            ("[::1]", true),
            ("[::ffff:127.0.0.1]", true),
            ("::ffff:127.0.0.1", true),
            ("127.evil.com", false),
            ("localhost.evil.com", false),
            ("evil.localhost", false),
            ("localhost.localdomain.evil", false),
            ("0.0.0.0", false),
            ("::", false),
            ("[::]", false),
            ("10.0.0.1", false),
            ("128.0.0.1", false),
            ("[::ffff:10.0.0.1]", false),
            ("127.0.0.1.evil.test", false),
            ("127.0.0.256", false),
            ("127.1.2.3.4", false),
            ("", false),
            ("[", false),
            ("[::1", false),
            (":", false),
        ];
        for (host, loopback) in cases {
            assert_eq!(is_loopback_host(host), loopback, "{host}");
            let bracketed = if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]")
            } else {
                host.to_string()
            };
            for port in ["80", "8000", "65535"] {
                let with_port = format!("{bracketed}:{port}");
                let expected = loopback && !host.is_empty() && host != "[" && host != "[::1";
                assert_eq!(is_loopback_host(&with_port), expected, "{with_port}");
            }
        }
    }

    #[test]
    fn url_hosts_ports_and_loopback() {
        let cases = [
            ("http://127.0.0.1:8000/v1", "127.0.0.1", Some(8000), true),
            (
                "https://api.openai.com/v1",
                "api.openai.com",
                Some(443),
                false,
            ),
            ("http://localhost/v1", "localhost", Some(80), true),
            ("http://[::1]:9/x", "::1", Some(9), true),
            ("http://user:pw@127.0.0.1:5/x", "127.0.0.1", Some(5), true),
            (
                "http://127.evil.com:8000/",
                "127.evil.com",
                Some(8000),
                false,
            ),
            (
                "http://localhost.evil.com/",
                "localhost.evil.com",
                Some(80),
                false,
            ),
            (
                "http://example.com?q=127.0.0.1",
                "example.com",
                Some(80),
                false,
            ),
        ];
        for (url, host, port, loopback) in cases {
            assert_eq!(url_host(url), host, "{url}");
            assert_eq!(url_port(url), port, "{url}");
            assert_eq!(is_loopback_url(url), loopback, "{url}");
        }
    }

    #[test]
    fn host_port_pairs() {
        assert_eq!(host_and_port("127.0.0.1:9876"), Some(("127.0.0.1", 9876)));
        assert_eq!(host_and_port("[::1]:9876"), Some(("::1", 9876)));
        assert_eq!(host_and_port("localhost"), None);
        assert_eq!(host_and_port("localhost:x"), None);
    }
}

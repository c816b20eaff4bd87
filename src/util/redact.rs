//! Secret redaction: the one place that knows what a secret looks like. It is
//! applied wherever text is kept for people to read later: the audit log
//! ([`crate::tools::audit`]), `-d` debug output ([`crate::util::log::debug`]) and the
//! tool calls of saved sessions ([`crate::store`]).
//!
//! Two kinds of secret become [`REDACTED`]:
//!
//! - **Known values**: the API keys and tokens shepherd was configured with.
//!   Configuration calls [`register_secret`] for each as it is resolved
//!   (provider keys, server and tool-backend tokens, MCP credentials), and
//!   every occurrence of a registered value is replaced, wherever it stands.
//! - **Shapes**: values that are secrets by where they stand, whoever wrote
//!   them: the value of a header or field with a secret name
//!   (`Authorization: Bearer x`, `"X-Api-Key": "x"`, `Cookie: a=b`, any
//!   `*-Key`, `*token`, `*secret*`, `*password*`), `Bearer <token>`, URL query
//!   parameters (`?api_key=x`, `&sig=x`, `&token=x`), assignments and flags
//!   with a secret name (`GITHUB_TOKEN=x`, `--auth-token x`), and the password
//!   in `scheme://user:password@host`.
//!
//! [`text`] redacts a string. [`value`] redacts a copy of a JSON value and
//! keeps its structure: string leaves go through [`text`], and strings under a
//! key with a secret name (`{"headers": {"Authorization": "Bearer x"}}`) are
//! replaced whole (an `Authorization` value keeps its scheme word).
//!
//! The scanner reads bytes but cuts only next to ASCII bytes, so every cut is
//! a character boundary, and [`splice`] checks that again: no input panics.
//! Redaction errs towards redacting: a false positive costs a log reader one
//! value, a false negative leaks a key.

use std::ops::Range;
use std::sync::{OnceLock, RwLock};

use serde_json::Value;

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";
/// Registered secrets shorter than this are ignored, so that a short or
/// empty configured value never blanks out common words.
pub const MIN_SECRET_CHARS: usize = 8;
/// The longest name looked at before a `:` or `=`.
const MAX_NAME_LEN: usize = 128;
/// Words that make a name secret wherever they appear in it (`client_secret`, `X-Csrf-Cookie`).
const SECRET_WORDS: [&str; 7] = [
    "authorization",
    "cookie",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "apikey",
];
/// Query parameters that are secrets although their name alone is too common.
const QUERY_SECRETS: [&str; 3] = ["key", "sig", "signature"];

fn registry() -> &'static RwLock<Vec<String>> {
    static SECRETS: OnceLock<RwLock<Vec<String>>> = OnceLock::new();
    SECRETS.get_or_init(|| RwLock::new(Vec::new()))
}

/// Registers a configured secret: from now on every occurrence is redacted.
/// Surrounding whitespace is ignored; a value with an auth scheme
/// (`Bearer x`, as in a configured header) registers its credential too.
pub fn register_secret(secret: &str) {
    let secret = secret.trim();
    add_secret(secret);
    if let Some((_, credential)) = split_scheme(secret) {
        add_secret(credential);
    }
}

fn add_secret(secret: &str) {
    // A secret inside the marker itself would grow the marker on every pass.
    if secret.chars().count() < MIN_SECRET_CHARS || REDACTED.contains(secret) {
        return;
    }
    let mut secrets = crate::util::sync::write(registry());
    if !secrets.iter().any(|known| known == secret) {
        secrets.push(secret.to_string());
        // Longest first, so a secret that contains another is replaced whole.
        secrets.sort_by_key(|known| std::cmp::Reverse(known.len()));
    }
}

/// `text` with every registered secret replaced and shapes left alone: for
/// prose, where shape rules would blank ordinary words.
pub fn known_secrets(text: &str) -> String {
    let secrets = crate::util::sync::read(registry());
    let mut out = text.to_string();
    for secret in secrets.iter() {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), REDACTED);
        }
    }
    out
}

/// `input` with registered secrets and every secret shape replaced.
pub fn text(input: &str) -> String {
    let known = known_secrets(input);
    splice(&known, &spans(known.as_bytes()))
}

/// A redacted copy of `input`, with the same structure.
pub fn value(input: &Value) -> Value {
    let mut copy = input.clone();
    redact_value(&mut copy);
    copy
}

fn redact_value(value: &mut Value) {
    match value {
        Value::String(s) => *s = text(s),
        Value::Array(items) => items.iter_mut().for_each(redact_value),
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                if is_secret_name(key) {
                    redact_secret(key, item);
                } else {
                    redact_value(item);
                }
            }
        }
        _ => {}
    }
}

/// Everything under a key with a secret name: strings are replaced whole.
fn redact_secret(name: &str, value: &mut Value) {
    match value {
        Value::String(s) if !s.is_empty() => *s = secret_string(name, s),
        Value::Array(items) => items.iter_mut().for_each(|item| redact_secret(name, item)),
        Value::Object(map) => map.values_mut().for_each(|item| redact_secret(name, item)),
        _ => {}
    }
}

/// The redacted form of a whole secret value; `Authorization` keeps its scheme.
fn secret_string(name: &str, secret: &str) -> String {
    match split_scheme(secret) {
        Some((scheme, _)) if is_authorization(name) => format!("{scheme} {REDACTED}"),
        _ => REDACTED.to_string(),
    }
}

/// Whether a header, field, variable or flag name names a secret:
/// `Authorization`, `Cookie`, `X-Api-Key`, `apiKey`, `GITHUB_TOKEN`,
/// `X-CSRFToken`, `client_secret`, `--auth-token`; not `max_tokens`,
/// `token_count` or `monkey`.
pub fn is_secret_name(name: &str) -> bool {
    let words = name_words(name);
    let Some(last) = words.last() else {
        return false;
    };
    words
        .iter()
        .any(|word| SECRET_WORDS.iter().any(|secret| word.contains(secret)))
        || last.ends_with("token")
        || (last == "key" && words.len() > 1)
}

/// A name's words, lower-cased: split at every non-alphanumeric character and
/// where a lower-case letter meets an upper-case one (`apiKey`).
fn name_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut after_lower = false;
    for c in name.chars() {
        let boundary = !c.is_ascii_alphanumeric() || (after_lower && c.is_ascii_uppercase());
        if boundary && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        if c.is_ascii_alphanumeric() {
            word.push(c.to_ascii_lowercase());
        }
        after_lower = c.is_ascii_lowercase();
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

fn is_authorization(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with("authorization")
}

/// `Bearer abc` as `("Bearer", "abc")`: a short alphabetic word, blanks, the rest.
fn split_scheme(value: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = value.split_once([' ', '\t'])?;
    let rest = rest.trim_start_matches([' ', '\t']);
    let is_scheme =
        (1..=16).contains(&scheme.len()) && scheme.bytes().all(|b| b.is_ascii_alphabetic());
    (is_scheme && !rest.is_empty()).then_some((scheme, rest))
}

// ---------------------------------------------------------------------------
// The shape scanner: finds the byte ranges of secret values in a text.

/// The ranges of every secret value in `bytes`, sorted and merged.
fn spans(bytes: &[u8]) -> Vec<Range<usize>> {
    let mut found = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match span_at(bytes, at) {
            Some(span) => {
                at = span.end.max(at + 1);
                found.push(span);
            }
            None => at += 1,
        }
    }
    merge(found)
}

/// The secret value that the marker byte at `at` introduces, if any.
fn span_at(bytes: &[u8], at: usize) -> Option<Range<usize>> {
    match bytes[at] {
        b':' => header_value(bytes, at),
        b'=' => assigned_value(bytes, at),
        b'@' => url_password(bytes, at),
        b'-' => flag_value(bytes, at),
        b'b' | b'B' => bearer_token(bytes, at),
        _ => None,
    }
}

/// `Name: value`, `"name": "value"`, `-H 'X-Api-Key: value'`.
fn header_value(bytes: &[u8], colon: usize) -> Option<Range<usize>> {
    let before = colon.checked_sub(1).map(|i| bytes[i]);
    if bytes.get(colon + 1) == Some(&b':') || before == Some(b':') {
        return None; // `a::b` is a path, not a header
    }
    let (name_end, quoted_name) = skip_closing_quote(bytes, colon);
    let (_, name) = name_before(bytes, name_end)?;
    if !is_secret_name(name) {
        return None;
    }
    let start = skip_blanks(bytes, colon + 1);
    // An unquoted value after a quoted name is JSON-like: it ends at `,` or `}`.
    let value = if quoted_name {
        value_at(bytes, start, is_json_stop)?
    } else {
        value_at(bytes, start, is_line_stop)?
    };
    Some(if is_authorization(name) {
        after_scheme(bytes, value)
    } else {
        value
    })
}

/// `name=value`: query parameters, environment assignments, `--flag=value`.
fn assigned_value(bytes: &[u8], eq: usize) -> Option<Range<usize>> {
    if bytes.get(eq + 1) == Some(&b'=') {
        return None;
    }
    let (start, name) = name_before(bytes, eq)?;
    let in_query = start > 0 && matches!(bytes[start - 1], b'?' | b'&' | b';');
    let query_secret = in_query && QUERY_SECRETS.iter().any(|q| name.eq_ignore_ascii_case(q));
    if !(query_secret || is_secret_name(name)) {
        return None;
    }
    value_at(bytes, eq + 1, is_word_stop)
}

/// `--auth-token value` (the `--name=value` form is an assignment).
fn flag_value(bytes: &[u8], dash: usize) -> Option<Range<usize>> {
    let starts_word = dash == 0 || is_blank_or_quote(bytes[dash - 1]);
    if !starts_word || bytes.get(dash + 1) != Some(&b'-') {
        return None;
    }
    let name_end = (dash + 2..bytes.len())
        .find(|&i| !is_name_byte(bytes[i]))
        .unwrap_or(bytes.len());
    let name = std::str::from_utf8(&bytes[dash + 2..name_end]).ok()?;
    let start = skip_blanks(bytes, name_end);
    if start == name_end || !is_secret_name(name) || bytes.get(start) == Some(&b'-') {
        return None;
    }
    value_at(bytes, start, is_word_stop)
}

/// `Bearer <token>` anywhere; short words after "bearer" are left to the
/// header rule, so prose like "bearer of" survives outside headers.
fn bearer_token(bytes: &[u8], at: usize) -> Option<Range<usize>> {
    let word = bytes.get(at..at + 6)?;
    let word_start = at == 0 || !bytes[at - 1].is_ascii_alphanumeric();
    if !word_start || !word.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let start = skip_blanks(bytes, at + 6);
    if start == at + 6 {
        return None;
    }
    let token = value_at(bytes, start, |b| !is_token68(b))?;
    (token.len() >= MIN_SECRET_CHARS).then_some(token)
}

/// The password of `scheme://user:password@host`.
fn url_password(bytes: &[u8], at: usize) -> Option<Range<usize>> {
    let start = (0..at)
        .rev()
        .take_while(|&i| !is_authority_stop(bytes[i]))
        .last()?;
    if start < 3 || &bytes[start - 3..start] != b"://" {
        return None;
    }
    let colon = start + bytes[start..at].iter().position(|&b| b == b':')?;
    let password = &bytes[colon + 1..at];
    let redacted = password.is_empty() || password == REDACTED.as_bytes();
    (!redacted).then_some(colon + 1..at)
}

/// Where a name before `at` ends, past a closing quote (`"name":`, `\"name\":`).
fn skip_closing_quote(bytes: &[u8], at: usize) -> (usize, bool) {
    match at.checked_sub(1).map(|i| bytes[i]) {
        Some(b'"' | b'\'') => {
            let escaped = at >= 2 && bytes[at - 2] == b'\\';
            (if escaped { at - 2 } else { at - 1 }, true)
        }
        _ => (at, false),
    }
}

/// The name that ends at `end` (at most [`MAX_NAME_LEN`] bytes) and where it starts.
fn name_before(bytes: &[u8], end: usize) -> Option<(usize, &str)> {
    let start = (end.saturating_sub(MAX_NAME_LEN)..end)
        .rev()
        .take_while(|&i| is_name_byte(bytes[i]))
        .last()?;
    let name = std::str::from_utf8(&bytes[start..end]).ok()?;
    Some((start, name))
}

/// The value starting at `start`: up to the matching quote if it opens with
/// one, else up to the first byte `stop` accepts.
fn value_at(bytes: &[u8], start: usize, stop: fn(u8) -> bool) -> Option<Range<usize>> {
    match opening_quote(bytes, start) {
        Some((after, quote)) => value_until(bytes, after, |b| is_quoted_stop(b, quote)),
        None => value_until(bytes, start, stop),
    }
}

/// From `start` up to the first byte `stop` accepts; `None` when that is
/// empty or just [`REDACTED`]. A marker at the start is read past (its `]`
/// would stop some values), so redacting twice gives the same text.
fn value_until(bytes: &[u8], start: usize, stop: impl Fn(u8) -> bool) -> Option<Range<usize>> {
    let rest = bytes.get(start..).unwrap_or_default();
    let from = if rest.starts_with(REDACTED.as_bytes()) {
        start + REDACTED.len()
    } else {
        start
    };
    let end = find_from(bytes, from, stop);
    (end > from).then_some(start..end)
}

/// After an opening quote at `at` (`"`, `'` or an escaped `\"`): where the
/// value starts, and the quote that ends it.
fn opening_quote(bytes: &[u8], at: usize) -> Option<(usize, u8)> {
    match (bytes.get(at), bytes.get(at + 1)) {
        (Some(&q @ (b'"' | b'\'')), _) => Some((at + 1, q)),
        (Some(b'\\'), Some(&q @ (b'"' | b'\''))) => Some((at + 2, q)),
        _ => None,
    }
}

/// The value part of an `Authorization` value after its scheme word, if it has one.
fn after_scheme(bytes: &[u8], value: Range<usize>) -> Range<usize> {
    let Some(text) = std::str::from_utf8(&bytes[value.clone()]).ok() else {
        return value;
    };
    match split_scheme(text) {
        Some((_, credential)) => value.end - credential.len()..value.end,
        None => value,
    }
}

/// The first index from `start` whose byte `stop` accepts, else the length.
fn find_from(bytes: &[u8], start: usize, stop: impl Fn(u8) -> bool) -> usize {
    let rest = bytes.get(start..).unwrap_or_default();
    rest.iter()
        .position(|&b| stop(b))
        .map_or(bytes.len(), |n| start + n)
}

fn skip_blanks(bytes: &[u8], at: usize) -> usize {
    find_from(bytes, at, |b| b != b' ' && b != b'\t')
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

fn is_blank_or_quote(b: u8) -> bool {
    b.is_ascii_whitespace() || matches!(b, b'"' | b'\'' | b'`')
}

/// The end of a header value on a line: spaces belong to it (`Bearer x`, cookies).
fn is_line_stop(b: u8) -> bool {
    matches!(b, b'\r' | b'\n' | b'"' | b'\'' | b'`' | b'\\')
}

/// The end of an unquoted JSON-like value.
fn is_json_stop(b: u8) -> bool {
    is_line_stop(b) || b.is_ascii_whitespace() || matches!(b, b',' | b'}' | b']')
}

/// The end of a value in a command line or URL.
fn is_word_stop(b: u8) -> bool {
    b.is_ascii_whitespace()
        || matches!(
            b,
            b'&' | b'#' | b'"' | b'\'' | b'`' | b'\\' | b';' | b'<' | b'>' | b')' | b'}' | b']'
        )
}

/// The end of a quoted value: its own quote, an escape, or the line's end.
fn is_quoted_stop(b: u8, quote: u8) -> bool {
    b == quote || matches!(b, b'\\' | b'\r' | b'\n')
}

/// Characters of an RFC 7235 `token68` (bearer tokens, JWTs, base64).
fn is_token68(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/' | b'=')
}

/// Bytes that end the user-info part of a URL when reading back from `@`.
fn is_authority_stop(b: u8) -> bool {
    b.is_ascii_whitespace()
        || matches!(
            b,
            b'/' | b'?' | b'#' | b'@' | b'"' | b'\'' | b'`' | b'<' | b'>' | b'\\'
        )
}

/// Sorts `spans` and joins those that overlap or touch.
fn merge(mut spans: Vec<Range<usize>>) -> Vec<Range<usize>> {
    spans.sort_by_key(|span| span.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(spans.len());
    for span in spans {
        match merged.last_mut() {
            Some(last) if span.start <= last.end => last.end = last.end.max(span.end),
            _ => merged.push(span),
        }
    }
    merged
}

/// `text` with each of the sorted, disjoint `spans` replaced by [`REDACTED`].
/// A span that does not fall on character boundaries is widened to them.
fn splice(text: &str, spans: &[Range<usize>]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut done = 0;
    for span in spans {
        let start = floor_boundary(text, span.start.max(done));
        let end = ceil_boundary(text, span.end.max(start));
        out.push_str(text.get(done..start).unwrap_or_default());
        out.push_str(REDACTED);
        done = end;
    }
    out.push_str(text.get(done..).unwrap_or_default());
    out
}

fn floor_boundary(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil_boundary(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Redacts `input` and compares; also checks that redacting again changes nothing.
    fn check(input: &str, expected: &str) {
        let once = text(input);
        assert_eq!(once, expected, "input: {input:?}");
        assert_eq!(text(&once), once, "not idempotent for {input:?}");
    }

    #[test]
    fn header_values_in_text() {
        let r = REDACTED;
        check(
            "Authorization: Bearer abc",
            &format!("Authorization: Bearer {r}"),
        );
        check(
            "authorization:Basic dXNlcjpw",
            &format!("authorization:Basic {r}"),
        );
        check(
            "Proxy-Authorization: xyz",
            &format!("Proxy-Authorization: {r}"),
        );
        check(
            "Cookie: a=1; b=2\nAccept: x",
            &format!("Cookie: {r}\nAccept: x"),
        );
        check("Set-Cookie: id=9; Path=/", &format!("Set-Cookie: {r}"));
        check(
            "curl -H 'X-Api-Key: k1' -H \"X-Auth-Token: t1\" https://h/",
            &format!("curl -H 'X-Api-Key: {r}' -H \"X-Auth-Token: {r}\" https://h/"),
        );
        check("X-Client-Secret: s s", &format!("X-Client-Secret: {r}"));
        check("X-CSRFToken: c", &format!("X-CSRFToken: {r}"));
        check(
            r#"{"headers":{"Authorization":"Bearer x","Accept":"y"}}"#,
            &format!(r#"{{"headers":{{"Authorization":"Bearer {r}","Accept":"y"}}}}"#),
        );
        check(
            r#"{"command":"curl -H \"X-Api-Key: k\" u"}"#,
            &format!(r#"{{"command":"curl -H \"X-Api-Key: {r}\" u"}}"#),
        );
        check(
            r#"{"token":12345,"n":1}"#,
            &format!(r#"{{"token":{r},"n":1}}"#),
        );
    }

    #[test]
    fn ordinary_names_and_text_are_left_alone() {
        for plain in [
            "Accept: text/html",
            r#"{"max_tokens":100,"usage":{"prompt_tokens":5,"total_tokens":9}}"#,
            "token_count: 4",
            "monkey: banana",
            "std::token::Token",
            "https://example.com/a?page=2&q=key",
            "the bearer of news",
            "a == b, x=1",
            "ssh://git@github.com/x.git",
            "",
            "é:ü=ß@--",
        ] {
            check(plain, plain);
        }
    }

    #[test]
    fn bearer_tokens_anywhere() {
        let r = REDACTED;
        check(
            "use Bearer sk-abcdefgh12 now",
            &format!("use Bearer {r} now"),
        );
        check("bearer\teyJhbGciOi.J9.x_y", &format!("bearer\t{r}"));
        check("Bearer short", "Bearer short");
    }

    #[test]
    fn query_parameters_assignments_and_flags() {
        let r = REDACTED;
        check(
            "GET https://h/p?key=AIza1&q=1&API_KEY=z#f",
            &format!("GET https://h/p?key={r}&q=1&API_KEY={r}#f"),
        );
        check(
            "u?apikey=1&token=2&access_token=3&secret=4&password=5&sig=6",
            &format!("u?apikey={r}&token={r}&access_token={r}&secret={r}&password={r}&sig={r}"),
        );
        check(
            "GITHUB_TOKEN=ghp_x curl --api-key=k1 --auth-token t1 --max-tokens 5",
            &format!("GITHUB_TOKEN={r} curl --api-key={r} --auth-token {r} --max-tokens 5"),
        );
        check(
            "PASSWORD='a b' ./run; DB_PASSWD=\"c\"",
            &format!("PASSWORD='{r}' ./run; DB_PASSWD=\"{r}\""),
        );
        check(
            "--token-file /etc/t --token -",
            "--token-file /etc/t --token -",
        );
    }

    #[test]
    fn url_passwords() {
        let r = REDACTED;
        check(
            "postgres://me:hunter2@db:5432/x and https://u:p@h",
            &format!("postgres://me:{r}@db:5432/x and https://u:{r}@h"),
        );
        check("mailto:a@b.c https://user@h", "mailto:a@b.c https://user@h");
    }

    #[test]
    fn registered_secrets_everywhere() {
        register_secret("  reg-secret-0123456789  ");
        register_secret("short");
        register_secret("Bearer reg-bearer-abcdefgh");
        let r = REDACTED;
        check("x reg-secret-0123456789y short", &format!("x {r}y short"));
        assert_eq!(known_secrets("t=reg-bearer-abcdefgh"), format!("t={r}"));
        assert_eq!(
            known_secrets("prose key: reg-secret-0123456789"),
            format!("prose key: {r}")
        );
        assert_eq!(known_secrets("key: v"), "key: v", "shapes are not applied");
    }

    #[test]
    fn json_values_keep_their_structure() {
        let r = REDACTED;
        let input = json!({
            "url": "https://h/?api_key=k&x=1",
            "method": "GET",
            "headers": {"Authorization": "Bearer tok", "X-Api-Key": "k2", "Accept": "a", "Cookie": ""},
            "nested": [{"apiKey": ["k3", {"deep": "k4"}]}, 7, null, true],
            "max_tokens": 10,
            "command": "echo GITHUB_TOKEN=ghp_1",
        });
        let expected = json!({
            "url": format!("https://h/?api_key={r}&x=1"),
            "method": "GET",
            "headers": {"Authorization": format!("Bearer {r}"), "X-Api-Key": r, "Accept": "a", "Cookie": ""},
            "nested": [{"apiKey": [r, {"deep": r}]}, 7, null, true],
            "max_tokens": 10,
            "command": format!("echo GITHUB_TOKEN={r}"),
        });
        assert_eq!(value(&input), expected);
        assert_eq!(value(&expected), expected, "idempotent");
    }

    #[test]
    fn secret_names() {
        for secret in [
            "Authorization",
            "proxy-authorization",
            "Cookie",
            "SET-COOKIE",
            "X-Api-Key",
            "x-goog-api-key",
            "apiKey",
            "APIKEY",
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "accessToken",
            "X-CSRFToken",
            "client_secret",
            "--auth-token",
            "db.password",
        ] {
            assert!(is_secret_name(secret), "{secret}");
        }
        for plain in [
            "",
            "-",
            "key",
            "max_tokens",
            "token_count",
            "monkey",
            "Accept",
            "sig",
            "path",
        ] {
            assert!(!is_secret_name(plain), "{plain}");
        }
    }

    /// Deterministic pseudo-random strings built from marker fragments, odd
    /// UTF-8 and delimiters: redaction must never panic, must return valid
    /// text, and must be idempotent.
    #[test]
    fn never_panics_on_odd_input() {
        const PIECES: [&str; 24] = [
            "Authorization",
            ":",
            "=",
            "@",
            "://",
            "\"",
            "'",
            "\\",
            "-",
            "--",
            "Bearer ",
            "b",
            "token",
            "?",
            "&",
            " ",
            "\n",
            "é",
            "🦀",
            "\u{0301}",
            "[REDACTED]",
            "x",
            "\t",
            "api_key",
        ];
        let mut state: u64 = 0x5eed_4ed4;
        for _ in 0..20_000 {
            let mut input = String::new();
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let len = (state >> 33) % 12;
            for _ in 0..len {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                input.push_str(PIECES[(state >> 33) as usize % PIECES.len()]);
            }
            let once = text(&input);
            assert_eq!(text(&once), once, "not idempotent for {input:?}");
            let _ = value(&json!({"headers": {"Cookie": input.clone()}, "a": [input]}));
        }
    }

    #[test]
    fn splits_and_truncations_never_panic() {
        let sample = "curl -H 'Authorization: Bearer abcdefghij' 'https://u:p@h/?token=é🦀' X_TOKEN=\"v\" --api-key k";
        for end in 0..=sample.len() {
            if let Some(prefix) = sample.get(..end) {
                let _ = text(prefix);
            }
            if let Some(suffix) = sample.get(end..) {
                let _ = text(suffix);
            }
        }
        let inside = 1..1;
        assert_eq!(
            splice("é", std::slice::from_ref(&inside)),
            REDACTED,
            "a span inside a character is widened"
        );
    }
}

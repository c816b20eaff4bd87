//! Ollama's `keep_alive`: how long the model stays in memory after a request
//! (`/api/chat`, `/api/generate`, `/api/embed`). As Ollama reads it: a number is
//! seconds, a string is a Go duration (`"5m"`, `"1h30m"`, `"0"`) or, as Ollama's
//! `OLLAMA_KEEP_ALIVE` takes it, whole seconds (`"-1"`), and a negative one of
//! either keeps the model until a later request says otherwise. The
//! in-process backend applies it through its idle timer
//! ([`crate::backend::llamacpp::LocalModel::keep_alive`]); a request without it
//! gets the server's own limit (`--sleep-idle-seconds`, else none), as Ollama's
//! get its default.

use std::time::Duration;

use serde_json::Value;

use super::super::error::ApiError;

/// How long the model stays after the request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeepAlive {
    For(Duration),
    /// A negative `keep_alive`.
    Forever,
}

impl KeepAlive {
    /// The idle limit the model's thread takes (`None`: none).
    pub fn limit(self) -> Option<Duration> {
        match self {
            KeepAlive::For(duration) => Some(duration),
            KeepAlive::Forever => None,
        }
    }

    /// `keep_alive: 0`: the model leaves as soon as the request is done.
    pub fn unloads(self) -> bool {
        self == KeepAlive::For(Duration::ZERO)
    }
}

fn invalid(detail: &str) -> ApiError {
    ApiError::invalid(
        "keep_alive",
        format!(
            "'keep_alive' must be a number of seconds or a duration such as \"5m\" or \"1h30m\" ({detail})"
        ),
    )
}

/// A request's `keep_alive`, if it has one.
pub fn parse(value: Option<&Value>) -> Result<Option<KeepAlive>, ApiError> {
    let (negative, duration) = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(number)) => {
            let secs = number.as_f64().ok_or_else(|| invalid("not a number"))?;
            let duration =
                Duration::try_from_secs_f64(secs.abs()).map_err(|_| invalid("out of range"))?;
            (secs < 0.0, duration)
        }
        Some(Value::String(text)) => match text.trim().parse::<i64>() {
            Ok(secs) => (secs < 0, Duration::from_secs(secs.unsigned_abs())),
            Err(_) => go_duration(text).map_err(|e| invalid(&e))?,
        },
        Some(_) => return Err(invalid("neither")),
    };
    Ok(Some(match negative && !duration.is_zero() {
        true => KeepAlive::Forever,
        false => KeepAlive::For(duration),
    }))
}

/// Go's `time.ParseDuration`: an optional sign, then one or more decimal numbers
/// each with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`); `"0"` alone needs none.
/// The sign, and the magnitude.
fn go_duration(text: &str) -> Result<(bool, Duration), String> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok((negative, Duration::ZERO));
    }
    if rest.is_empty() {
        return Err(format!("'{text}' is empty"));
    }
    let mut nanos = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let value: f64 = match number {
            "" | "." => return Err(format!("'{text}' has a unit without a number")),
            n => n
                .parse()
                .map_err(|_| format!("'{number}' in '{text}' is not a number"))?,
        };
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(format!("'{text}' has a number without a unit")),
            other => return Err(format!("'{other}' is not a unit")),
        };
        nanos += value * scale;
        rest = after;
    }
    let duration = Duration::try_from_secs_f64(nanos / 1e9)
        .map_err(|_| format!("'{text}' is out of range"))?;
    Ok((negative, duration))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(value: Value, expected: Option<KeepAlive>) {
        assert_eq!(parse(Some(&value)).unwrap(), expected, "{value}");
    }

    #[test]
    fn numbers_are_seconds_and_strings_go_durations() {
        let secs = |n: u64| Some(KeepAlive::For(Duration::from_secs(n)));
        check(json!(0), secs(0));
        check(json!(30), secs(30));
        check(
            json!(1.5),
            Some(KeepAlive::For(Duration::from_millis(1500))),
        );
        check(json!(-1), Some(KeepAlive::Forever));
        check(json!("0"), secs(0));
        check(json!("5m"), secs(300));
        check(json!("1h30m"), secs(5400));
        check(json!("1.5h"), secs(5400));
        check(
            json!("250ms"),
            Some(KeepAlive::For(Duration::from_millis(250))),
        );
        check(json!("-1m"), Some(KeepAlive::Forever));
        check(json!("-1"), Some(KeepAlive::Forever));
        check(json!("300"), secs(300));
    }

    #[test]
    fn absent_or_null_is_none_and_malformed_values_are_a_400_naming_the_field() {
        assert_eq!(parse(None).unwrap(), None);
        assert_eq!(parse(Some(&Value::Null)).unwrap(), None);
        for bad in [
            json!("5 minutes"),
            json!("1x"),
            json!("m"),
            json!(""),
            json!(true),
            json!([1]),
        ] {
            let error = parse(Some(&bad)).unwrap_err();
            assert_eq!(error.status, 400, "{bad}");
            assert!(
                error.message.contains("keep_alive"),
                "{bad}: {}",
                error.message
            );
        }
        assert!(parse(Some(&json!(1e300))).is_err());
    }

    #[test]
    fn only_zero_unloads_at_once() {
        assert!(KeepAlive::For(Duration::ZERO).unloads());
        assert!(!KeepAlive::For(Duration::from_secs(1)).unloads());
        assert!(!KeepAlive::Forever.unloads());
        assert_eq!(KeepAlive::Forever.limit(), None);
    }
}

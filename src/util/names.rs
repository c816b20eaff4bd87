//! The one rule for user-supplied names that become file names or URL path
//! segments (session ids, profile names, MCP server names in a profile).

/// Longest session id or profile name, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// Checks a user-supplied name that becomes a file name or a URL path segment.
/// `what` names it in the error ("session id", "profile name").
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    let safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let problem = if name.is_empty() {
        Some("is empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("is too long")
    } else if name.contains("..") {
        Some("contains '..'")
    } else if name.starts_with(['.', '-']) {
        Some("starts with '.' or '-'")
    } else if !name.chars().all(safe) {
        Some("may hold only letters, digits, '-', '_' and '.'")
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(problem) => Err(format!(
            "{what} '{}' {problem} (at most {MAX_NAME_LEN} of A-Z a-z 0-9 - _ .)",
            name.escape_debug()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        let long = "a".repeat(MAX_NAME_LEN + 1);
        for bad in [
            "", "..", "../x", "a/b", "a\\b", "a\0b", "a\nb", "a\x1bb", ".hidden", "-rf", "a b",
            "x..y", "é", &long,
        ] {
            assert!(check_name("session id", bad).is_err(), "{bad:?} accepted");
        }
        for good in [
            "a",
            "my-chat_1.v2",
            "20260101-120000",
            &"b".repeat(MAX_NAME_LEN),
        ] {
            assert!(check_name("session id", good).is_ok(), "{good:?} refused");
        }
        let message = check_name("session id", "a\nb").unwrap_err();
        assert!(
            !message.contains('\n'),
            "control characters are escaped: {message}"
        );
    }
}

//! Debug logging to stderr, switched on per category by `-d/--debug[=llm,tools,http]`.
//!
//! Logging is process-wide state set once at start-up. [`debug`] is the one
//! way out and passes every line through [`crate::util::redact::text`], so no
//! category prints a configured key or a secret-shaped value (a header, a
//! `Bearer` token, `?api_key=`); callers may still show a secret as its
//! length with [`redact`].

use std::sync::atomic::{AtomicU8, Ordering};

/// What a debug line is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Llm = 1,
    Tools = 2,
    Http = 4,
}

static ENABLED: AtomicU8 = AtomicU8::new(0);

impl Category {
    pub fn name(self) -> &'static str {
        match self {
            Category::Llm => "llm",
            Category::Tools => "tools",
            Category::Http => "http",
        }
    }

    pub fn parse(name: &str) -> Option<Category> {
        match name.trim() {
            "llm" => Some(Category::Llm),
            "tools" => Some(Category::Tools),
            "http" => Some(Category::Http),
            _ => None,
        }
    }

    pub const ALL: [Category; 3] = [Category::Llm, Category::Tools, Category::Http];
}

/// Turns on the given categories (in addition to any already on).
pub fn enable(categories: &[Category]) {
    let mask = categories.iter().fold(0u8, |m, c| m | *c as u8);
    ENABLED.fetch_or(mask, Ordering::Relaxed);
}

pub fn enabled(category: Category) -> bool {
    ENABLED.load(Ordering::Relaxed) & category as u8 != 0
}

/// Writes one debug line, redacted, to stderr if `category` is on.
pub fn debug(category: Category, message: impl FnOnce() -> String) {
    if enabled(category) {
        eprintln!("{}", line(category, &message()));
    }
}

/// The line [`debug`] writes for `message`.
fn line(category: Category, message: &str) -> String {
    format!(
        "[debug {}] {}",
        category.name(),
        crate::util::redact::text(message)
    )
}

/// Shows a secret as its length only, e.g. for logging headers.
pub fn redact(secret: &str) -> String {
    if secret.is_empty() {
        String::new()
    } else {
        format!("<redacted {} chars>", secret.chars().count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_lines_are_redacted() {
        crate::util::redact::register_secret("log-test-key-0123456789");
        let message = "POST /v1 key log-test-key-0123456789 Authorization: Bearer abc";
        assert_eq!(
            line(Category::Http, message),
            "[debug http] POST /v1 key [REDACTED] Authorization: Bearer [REDACTED]"
        );
    }
}

//! `--spec`: which drafter speculative decoding uses, a setting the flags and the
//! in-process backend share (`backend::llamacpp::speculative` does the work).

/// `--spec`: which drafter guesses a slot's next tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecMode {
    Off,
    Ngram,
    Draft,
}

impl SpecMode {
    pub const NAMES: [&'static str; 3] = ["off", "ngram", "draft"];

    pub fn parse(name: &str) -> Option<SpecMode> {
        match name {
            "off" => Some(SpecMode::Off),
            "ngram" => Some(SpecMode::Ngram),
            "draft" => Some(SpecMode::Draft),
            _ => None,
        }
    }
}

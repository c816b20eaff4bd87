//! Token estimates for remote backends: characters per token, corrected by reported usage.
//!
//! Remote APIs do not expose their tokenizer, so a message's size is estimated
//! from its length and the ratio is calibrated (an exponential moving average,
//! accepting only plausible samples) whenever the provider reports usage.

use super::Reply;
use crate::core::{Message, Session};

/// Characters-per-token estimator with usage calibration.
#[derive(Debug, Clone)]
pub struct TokenEstimator {
    chars_per_token: f64,
}

impl Default for TokenEstimator {
    fn default() -> Self {
        // A conservative start: over-estimating tokens evicts a little early,
        // under-estimating risks an overflow round trip.
        TokenEstimator {
            chars_per_token: 3.0,
        }
    }
}

/// Fixed per-message overhead (role markers, separators) that every chat format adds.
const MESSAGE_OVERHEAD: u32 = 4;

impl TokenEstimator {
    #[cfg(test)]
    pub fn chars_per_token(&self) -> f64 {
        self.chars_per_token
    }

    /// Estimated tokens of a text.
    pub fn count_text(&self, text: &str) -> u32 {
        let chars = text.chars().count() as f64;
        (chars / self.chars_per_token).ceil() as u32
    }

    /// Estimated tokens of a whole message, tool calls included.
    pub fn count_message(&self, message: &Message) -> u32 {
        let mut tokens = MESSAGE_OVERHEAD + self.count_text(&message.content);
        for call in &message.tool_calls {
            tokens += self.count_text(&call.name) + self.count_text(&call.arguments.to_string());
        }
        tokens
    }

    /// Calibrates from a reply's reported usage for the prompt built from `session`.
    pub fn observe(&mut self, session: &Session, reply: &Reply) {
        if let Some(usage) = reply.usage {
            self.calibrate(prompt_chars(session), usage.prompt_tokens);
        }
    }

    /// Feeds one observation: `chars` of prompt text were reported as `tokens` tokens.
    pub fn calibrate(&mut self, chars: usize, tokens: u64) {
        if chars == 0 || tokens == 0 {
            return;
        }
        let sample = chars as f64 / tokens as f64;
        let ratio = sample / self.chars_per_token;
        if !(0.5..=2.0).contains(&ratio) {
            return;
        }
        let updated = 0.8 * self.chars_per_token + 0.2 * sample;
        self.chars_per_token = updated.clamp(2.0, 5.0);
    }
}

/// Characters of prompt text a session sends: system prompt, contents, tool calls.
fn prompt_chars(session: &Session) -> usize {
    let messages: usize = session
        .messages
        .iter()
        .map(|m| {
            let calls: usize = m
                .tool_calls
                .iter()
                .map(|c| c.name.len() + c.arguments.to_string().chars().count())
                .sum();
            m.content.chars().count() + calls
        })
        .sum();
    session.system_prompt.chars().count() + messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_moves_towards_samples_and_ignores_outliers() {
        let mut est = TokenEstimator::default();
        est.calibrate(4000, 1000);
        assert!(est.chars_per_token() > 3.0 && est.chars_per_token() < 4.0);
        let before = est.chars_per_token();
        est.calibrate(100_000, 10);
        assert_eq!(est.chars_per_token(), before);
    }

    #[test]
    fn counts_grow_with_text() {
        let est = TokenEstimator::default();
        assert!(est.count_text("hello world, this is longer") > est.count_text("hi"));
        assert_eq!(est.count_text(""), 0);
    }
}

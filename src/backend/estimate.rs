//! Token estimates for remote backends: characters per token, corrected by reported usage.
//!
//! Remote APIs do not expose their tokenizer, so a message's size is estimated
//! from its length and the ratio is calibrated (an exponential moving average,
//! accepting only plausible samples) whenever the provider reports usage.

use super::Reply;
use crate::core::{Image, Message, Session};

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

/// Estimated tokens of one image: Anthropic's published rule (width × height
/// / 750, the image scaled to at most about 1,600 tokens), at least OpenAI's
/// base of 85. OpenAI's tiles and Gemini's 258 per tile land in the same range.
pub fn count_image(image: &Image) -> u32 {
    let pixels = u64::from(image.width) * u64::from(image.height);
    (pixels / 750).clamp(85, 1600) as u32
}

/// Estimated tokens of every image of `message`.
fn image_tokens(message: &Message) -> u32 {
    message
        .images
        .iter()
        .map(|part| count_image(&part.image))
        .sum()
}

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

    /// Estimated tokens of a whole message, tool calls and images included.
    pub fn count_message(&self, message: &Message) -> u32 {
        let mut tokens =
            MESSAGE_OVERHEAD + self.count_text(&message.content) + image_tokens(message);
        for call in &message.tool_calls {
            tokens += self.count_text(&call.name) + self.count_text(&call.arguments.to_string());
        }
        tokens
    }

    /// Calibrates from a reply's reported usage for the prompt built from
    /// `session`, the images' estimated tokens taken out of the text's.
    pub fn observe(&mut self, session: &Session, reply: &Reply) {
        if let Some(usage) = reply.usage {
            let images: u64 = session
                .messages
                .iter()
                .map(|m| u64::from(image_tokens(m)))
                .sum();
            self.calibrate(
                prompt_chars(session),
                usage.prompt_tokens.saturating_sub(images),
            );
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
    fn an_image_counts_by_its_size_within_bounds_and_leaves_calibration_alone() {
        let est = TokenEstimator::default();
        let mut image = crate::backend::fake::png_image();
        let plain = est.count_message(&Message::user("look"));
        let mut message = Message::user("look");
        message.images.push(crate::core::ImagePart {
            at: 0,
            image: image.clone(),
        });
        assert_eq!(est.count_message(&message), plain + 85);
        (image.width, image.height) = (1000, 750);
        assert_eq!(count_image(&image), 1000);
        (image.width, image.height) = (8000, 8000);
        assert_eq!(count_image(&image), 1600);
        // A reply whose prompt tokens are the text's plus the image's
        // calibrates as the text alone would.
        message.images[0].image = image;
        let mut session = Session::new("");
        session.messages.push(Message::user("x".repeat(4000)));
        session.messages.push(message);
        let reply = |prompt_tokens| Reply {
            content: String::new(),
            thinking: String::new(),
            tool_calls: Vec::new(),
            finish: crate::core::FinishReason::Stop,
            usage: Some(super::super::Usage {
                prompt_tokens,
                completion_tokens: 1,
            }),
            artefacts: Vec::new(),
            stop_sequence: None,
        };
        let (mut with_images, mut text_only) = (est.clone(), est.clone());
        with_images.observe(&session, &reply(1000 + 1600));
        text_only.calibrate(4004, 1000);
        assert_eq!(with_images.chars_per_token(), text_only.chars_per_token());
    }

    #[test]
    fn counts_grow_with_text() {
        let est = TokenEstimator::default();
        assert!(est.count_text("hello world, this is longer") > est.count_text("hi"));
        assert_eq!(est.count_text(""), 0);
    }
}

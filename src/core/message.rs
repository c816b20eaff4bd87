//! Conversation messages and tool calls, independent of any provider's wire shape.
//!
//! These types derive `Serialize`/`Deserialize` only because shepherd persists
//! sessions in its own format; backends never serialise them directly but build
//! their own request structs from them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::image::{self, Image, ImagePart};

/// Who said a message. The system prompt is kept apart in [`crate::core::Session`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A request from the model to run one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned (or synthesised) id; a tool result answers it with the same id.
    pub id: String,
    pub name: String,
    /// The arguments as a JSON value (an object for every well-formed call).
    pub arguments: Value,
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    /// Tool calls the assistant asked for in this message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a `Tool` message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For a `Tool` message: the name of the tool that produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// Reasoning text the model produced before its answer (never sent back as content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// Opaque reasoning artefacts the provider wants back unchanged on later
    /// turns (Anthropic thinking signatures, Gemini thought signatures).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artefacts: Vec<Artefact>,
    /// Images inside `content`, in text order (user messages, and tool results
    /// that returned an image).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImagePart>,
    /// Token count of this message, estimated or measured.
    #[serde(default)]
    pub tokens: u32,
}

/// One piece of a message's content in text order ([`Message::parts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentPart<'a> {
    Text(&'a str),
    Image(&'a Image),
}

/// A reasoning artefact, tagged with the backend kind that issued it so a
/// provider switch never sends it to a provider that would reject it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Artefact {
    /// An Anthropic `thinking` block: its text and the `signature` that proves it.
    Thinking {
        origin: String,
        text: String,
        signature: String,
    },
    /// An Anthropic `redacted_thinking` block, opaque.
    RedactedThinking { origin: String, data: String },
    /// A Gemini `thoughtSignature`: on the `functionCall` part of `call_id`,
    /// or on the first text part when `call_id` is `None`.
    Signature {
        origin: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        signature: String,
    },
}

impl Message {
    fn with_role(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            thinking: None,
            artefacts: Vec::new(),
            images: Vec::new(),
            tokens: 0,
        }
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::with_role(Role::User, content)
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::with_role(Role::System, content)
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self::with_role(Role::Assistant, content)
    }

    /// The content split at each image, in text order: what a provider's
    /// multi-part message carries. Empty text between images is left out; the
    /// offsets are made safe as [`image::offsets`] makes them, so every image goes
    /// out exactly once and no text is lost.
    pub fn parts(&self) -> Vec<ContentPart<'_>> {
        let pieces = image::pieces(&self.content, &self.images);
        let mut parts = Vec::with_capacity(self.images.len() * 2 + 1);
        for (i, piece) in pieces.into_iter().enumerate() {
            if let Some(part) = i.checked_sub(1).and_then(|n| self.images.get(n)) {
                parts.push(ContentPart::Image(&part.image));
            }
            if !piece.is_empty() {
                parts.push(ContentPart::Text(piece));
            }
        }
        parts
    }

    /// Writes each image's summary into the text where it stood and drops the
    /// images: the message as a model that reads no images is given it.
    pub fn inline_image_summaries(&mut self) {
        if !self.images.is_empty() {
            self.content = image::inline_summaries(&self.content, &self.images);
            self.images.clear();
        }
    }

    /// Replaces each piece of text between the images with `f` of it, keeping
    /// every image between the same two pieces (its offset moves with the text).
    pub fn map_text(&mut self, f: impl FnMut(&str) -> String) {
        let (content, images) = image::rebuild(&self.content, &self.images, f, |i| Ok(i.clone()));
        self.content = content;
        self.images = images;
    }

    /// A tool result answering the call `call`.
    pub fn tool_result(call: &ToolCall, content: impl Into<String>) -> Self {
        let mut message = Self::with_role(Role::Tool, content);
        message.tool_call_id = Some(call.id.clone());
        message.tool_name = Some(call.name.clone());
        message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::image::test_png;

    fn with_images(content: &str, offsets: &[usize]) -> Message {
        let image = Image::from_bytes(test_png(2, 1, [9, 9, 9])).unwrap();
        let mut message = Message::user(content);
        message.images = offsets
            .iter()
            .map(|&at| ImagePart {
                at,
                image: image.clone(),
            })
            .collect();
        message
    }

    fn image(tag: &str) -> Image {
        Image {
            mime: "image/png".into(),
            sha256: tag.into(),
            width: 1,
            height: 1,
            bytes: Default::default(),
        }
    }

    fn tagged(content: &str, at: &[usize]) -> Message {
        let mut message = Message::user(content);
        message.images = at
            .iter()
            .enumerate()
            .map(|(i, &at)| ImagePart {
                at,
                image: image(&i.to_string()),
            })
            .collect();
        message
    }

    /// The parts as text, an image shown as `[sha256]`.
    fn shown(message: &Message) -> Vec<String> {
        message
            .parts()
            .iter()
            .map(|part| match part {
                ContentPart::Text(text) => text.to_string(),
                ContentPart::Image(image) => format!("[{}]", image.sha256),
            })
            .collect()
    }

    #[test]
    fn content_splits_at_each_image_in_text_order() {
        assert_eq!(shown(&tagged("hi", &[])), ["hi"]);
        assert_eq!(shown(&tagged("", &[])), Vec::<String>::new());
        assert_eq!(
            shown(&tagged("look: then", &[5])),
            ["look:", "[0]", " then"]
        );
        assert_eq!(
            shown(&tagged("ab", &[0, 0, 2])),
            ["[0]", "[1]", "ab", "[2]"]
        );
        assert_eq!(shown(&tagged("", &[0])), ["[0]"]);
    }

    #[test]
    fn offsets_out_of_range_or_order_or_inside_a_character_lose_nothing() {
        // Past the end: at the end.
        assert_eq!(shown(&tagged("ab", &[99])), ["ab", "[0]"]);
        // Inside the two-byte "é": before it.
        assert_eq!(shown(&tagged("é!", &[1])), ["[0]", "é!"]);
        // Out of order: the second stands where the first did.
        assert_eq!(shown(&tagged("abcd", &[3, 1])), ["abc", "[0]", "[1]", "d"]);
    }

    #[test]
    fn map_text_moves_the_images_with_their_text() {
        let mut message = with_images("ab|cd|", &[3, 6]);
        message.map_text(|piece| piece.replace('c', "CCC"));
        assert_eq!(message.content, "ab|CCCd|");
        let at: Vec<usize> = message.images.iter().map(|p| p.at).collect();
        assert_eq!(at, [3, 8]);
    }

    #[test]
    fn summaries_replace_the_images() {
        let mut message = with_images("see  here", &[4]);
        let summary = message.images[0].image.summary();
        message.inline_image_summaries();
        assert_eq!(message.content, format!("see {summary} here"));
        assert!(message.images.is_empty());
    }
}

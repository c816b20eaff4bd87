//! The core vocabulary of shepherd: messages, the session, the event stream and
//! the typed errors shared by every layer.
//!
//! Nothing in here does I/O or knows a wire format. Backends convert these types
//! to and from their provider's JSON in their own modules; front-ends render the
//! [`Event`]s; the agent owns the [`Session`].

pub mod error;
pub mod event;
pub mod image;
pub mod message;
pub mod session;
pub mod spec;

pub use error::BackendError;
pub use event::{
    Answer, ApprovalRequest, ChannelSink, Event, EventSink, FinishReason, Flow, Progress,
    PromptProgress, Stats, TokenLogprobs, TokenProb, ToolResultEvent,
};
pub use image::{Image, ImagePart};
pub use message::{Artefact, ContentPart, Message, Role, ToolCall, ToolSpec};
pub use session::Session;
pub use spec::SpecMode;

//! Gemini backend (in progress).

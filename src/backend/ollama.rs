//! Ollama backend (in progress).

//! shepherd: an LLM chat client, in-process inference host, tool-running agent
//! and the servers around it, in one synchronous, thread-based binary.
//!
//! `main` parses the command line, resolves the configuration, and hands over
//! to one front-end. See `docs/ARCHITECTURE.md` for the map.

// `unsafe` only in the FFI modules (`sys`, `llama`, `backend::tensorrt::ffi`),
// which allow it for themselves; every block says why it is sound.
#![deny(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod agent;
mod args;
mod backend;
mod commands;
mod config;
mod core;
mod frontend;
#[cfg(test)]
mod fuzz;
mod llama;
mod mcp;
mod store;
mod stream;
mod template;
mod tools;
mod util;

fn main() {
    // `shepherd __mcp-reaper ...` is the process around each MCP server.
    mcp::reaper::run_if_asked();
    frontend::run_main()
}

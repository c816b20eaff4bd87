//! MCP (Model Context Protocol) servers as a source of tools.
//!
//! The pieces, in the order a message travels: [`stdio`] and [`http`] are
//! the transports (a child process speaking JSON lines, or streamable HTTP);
//! [`client`] is JSON-RPC over either (ids, deadlines, cancellation, the
//! handshake, the typed methods); [`hub`] supervises every configured server
//! on its own thread (parallel background start, restart with backoff,
//! `tools/list_changed`) and is the [`crate::tools::ToolSource`] the agent's
//! registry reads; [`tool`] turns each server tool into a shepherd tool named
//! `server:tool`. `shepherd mcp ...` is [`crate::commands::mcp`].
//!
//! **Architecture Invariant:** no MCP server outlives shepherd. Each stdio
//! server runs in its own process group, which is killed when its connection
//! closes, when the hub is dropped, and by [`kill_all`] on every exit path
//! (signals included); the child also gets SIGTERM if shepherd dies.

pub mod client;
mod http;
pub mod hub;
pub mod reaper;
mod stdio;
pub mod tool;

use std::sync::Arc;
use std::time::Instant;

pub use hub::{statuses, McpHub, ServerStatus};
pub use stdio::kill_all;

use crate::config::mcp::McpServers;

/// Starts the enabled servers in the background; `None` when there are none.
pub fn start(servers: &McpServers) -> Option<Arc<McpHub>> {
    if !servers.values().any(|s| s.is_enabled()) {
        return None;
    }
    Some(McpHub::start(servers))
}

/// Waits, at most each server's startup timeout, until no server is still
/// starting. Headless runs call this before their first prompt: nobody is
/// there to ask again once the tools are up.
pub fn wait_started(hub: &McpHub) {
    hub.wait_started(Instant::now() + hub.longest_startup());
}

/// One line for each enabled server that is not ready, for a notice.
pub fn not_ready_lines(hub: &McpHub) -> Vec<String> {
    hub.statuses()
        .iter()
        .filter(|s| !matches!(s.state, hub::Phase::Ready | hub::Phase::Disabled))
        .map(ServerStatus::line)
        .collect()
}

/// One line per server for `/tools` and the like.
pub fn status_lines() -> Vec<String> {
    statuses().iter().map(ServerStatus::line).collect()
}

//! How a front-end is wired up: the tool registry (built-ins or a tool
//! server, the enable/disable globs, the MCP servers), the shared MCP hub and
//! the agent-management API (`agent_api`). Every mode (chat, the servers, the tool server)
//! builds these here, so no front-end reaches into `frontend/mod.rs` for them.

use std::io::{self, IsTerminal};
use std::sync::{Arc, OnceLock};

use super::exit::EXIT_FAILURE;
use crate::config::resolve::{Mode, Settings};
use crate::config::{self};
use crate::mcp;
use crate::tools::{remote, ToolRegistry};

/// Every tool shepherd offers, with the enable/disable globs applied: the
/// built-ins, or the tool server's tools with `--tool-backend`. The agent and
/// the tool server both build their registry here.
pub(super) fn tool_registry(settings: &Settings) -> Result<ToolRegistry, i32> {
    let mut tools = match &settings.tool_backend {
        None => ToolRegistry::builtin(),
        Some(backend) => {
            let config = remote::BackendConfig::new(&backend.address, backend.token.clone());
            remote::registry(config).map_err(|error| {
                eprintln!(
                    "shepherd: cannot list the tools of the tool backend {}: {error}",
                    backend.address
                );
                EXIT_FAILURE
            })?
        }
    };
    for glob in &settings.disable_tools {
        tools.disable(glob);
    }
    // `--enable-tools`: only the matching tools, whatever was disabled before.
    if !settings.enable_tools.is_empty() {
        tools.disable("*");
    }
    for glob in &settings.enable_tools {
        tools.enable(glob);
    }
    if let Some(hub) = mcp_hub(settings) {
        tools.attach(hub);
    }
    Ok(tools)
}

/// The MCP servers of this process, started once (in the background) with the
/// ones the starting profile uses; every registry built later shares them.
fn mcp_hub(settings: &Settings) -> Option<Arc<mcp::McpHub>> {
    static HUB: OnceLock<Option<Arc<mcp::McpHub>>> = OnceLock::new();
    HUB.get_or_init(|| {
        let servers: config::mcp::McpServers = settings
            .mcp_servers
            .iter()
            // `--notools` starts no MCP servers.
            .filter(|_| settings.tools_enabled)
            .filter(|(name, _)| settings.profile.uses_mcp_server(name))
            .map(|(name, server)| (name.clone(), server.clone()))
            .collect();
        let hub = mcp::start(&servers)?;
        // Headless runs wait for the servers once: nobody is there to ask again.
        if !interactive(settings) && settings.mode != Mode::CliServer {
            mcp::wait_started(&hub);
            for line in mcp::not_ready_lines(&hub) {
                // The line holds the server's own words (its stderr, its errors).
                eprintln!(
                    "shepherd: MCP server {}",
                    crate::frontend::chat::sanitize::visible(&line)
                );
            }
        }
        Some(hub)
    })
    .clone()
}

/// The REPL or TUI runs when both ends are terminals and no `-e`/`--json` was given.
pub(super) fn interactive(settings: &Settings) -> bool {
    settings.mode == Mode::Chat
        && settings.prompt.is_none()
        && io::stdin().is_terminal()
        && io::stdout().is_terminal()
}

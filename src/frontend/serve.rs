//! The network servers: the HTTP server and what every server shares (the
//! accept loop, access policy, the chat page), the OpenAI-compatible API
//! server, the cliserver, the agent API, the tool server and the RPC worker.

pub(super) mod accept;
pub(super) mod access;
pub(super) mod agent_api;
pub(super) mod api_server;
pub(super) mod cli_server;
pub(crate) mod http;
pub(super) mod rpc_worker;
pub(super) mod tool_server;
pub(super) mod ui;

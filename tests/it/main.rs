//! The one integration-test binary: drives the built `shepherd` binary against
//! real HTTP servers on 127.0.0.1:0 that replay recorded streams.

mod api_server;
mod approvals;
mod auth;
mod backends;
mod cli;
mod cli_server;
mod escapes;
mod fake_openai;
mod gate;
mod harness;
mod help;
mod hostile;
mod llama_compat;
mod llama_monitoring;
mod llama_progress;
mod llama_rerank;
mod llama_routes;
mod llama_sleep;
mod loading;
mod mcp;
mod models;
mod ollama_routes;
mod peers;
mod persist;
mod prompt_cache;
mod record;
mod rpc;
mod secrets;
mod server_tools;
mod speculative;
mod synthetic;
mod terminal;
mod tool_server;
mod ui;
mod vision;

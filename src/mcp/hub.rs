//! The supervisor of every configured MCP server: one named thread per
//! server starts it, keeps its tool list current and restarts it when it dies.
//!
//! [`McpHub::start`] returns at once; servers connect in parallel in the
//! background, so a slow server never delays the first prompt (the headless
//! front-ends may choose to wait, bounded, with [`McpHub::wait_started`]). A
//! server moves through [`Phase`]s: `starting` → `ready`; when it exits or the
//! connection fails it is `restarting` (its last tool list stays on offer and
//! calls wait for the new connection) and comes back after a backoff; after
//! [`MAX_FAILURES`] quick failures in a row it is `failed` and its tools go.
//! The hub is a [`ToolSource`]: the registry takes its tools whenever
//! [`McpHub::generation`] moves.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};
use serde::Serialize;
use serde_json::Value;

use super::client::{Client, McpError, Router, ToolInfo, Transport};
use super::http::HttpTransport;
use super::stdio::StdioTransport;
use crate::config::mcp::{McpServerConfig, McpServers};
use crate::util::log::{self, Category};
use crate::util::sync::lock;

/// Quick failures in a row after which a server is given up.
pub const MAX_FAILURES: u32 = 5;
/// A server that stayed up this long has its failure count reset when it dies.
const STABLE_AFTER: Duration = Duration::from_secs(30);
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Where a server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Starting,
    Ready,
    Restarting,
    Failed,
    Disabled,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Ready => "ready",
            Phase::Restarting => "restarting",
            Phase::Failed => "failed",
            Phase::Disabled => "disabled",
        }
    }
}

/// What `/tools`, `GET /status` and the JSON mode show for one server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerStatus {
    pub name: String,
    pub transport: &'static str,
    pub state: Phase,
    pub tools: usize,
    pub restarts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ServerStatus {
    /// `name (stdio): ready, 7 tools` and the like.
    pub fn line(&self) -> String {
        let mut line = format!(
            "{} ({}): {}, {} tools",
            self.name,
            self.transport,
            self.state.as_str(),
            self.tools
        );
        if self.restarts > 0 {
            line.push_str(&format!(", {} restarts", self.restarts));
        }
        if let Some(error) = &self.error {
            line.push_str(&format!(" ({error})"));
        }
        line
    }
}

struct State {
    phase: Phase,
    client: Option<Arc<Client>>,
    tools: Vec<ToolInfo>,
    error: Option<String>,
    restarts: u32,
}

/// One configured server, shared by its supervisor thread and its tools.
pub struct Server {
    pub name: String,
    pub config: McpServerConfig,
    state: Mutex<State>,
    /// Signalled whenever the phase changes, for calls waiting on a restart.
    changed: Condvar,
    generation: Arc<AtomicU64>,
}

impl Server {
    fn new(name: &str, config: McpServerConfig, generation: Arc<AtomicU64>) -> Server {
        let phase = if config.is_enabled() {
            Phase::Starting
        } else {
            Phase::Disabled
        };
        Server {
            name: name.to_string(),
            config,
            state: Mutex::new(State {
                phase,
                client: None,
                tools: Vec::new(),
                error: None,
                restarts: 0,
            }),
            changed: Condvar::new(),
            generation,
        }
    }

    /// A server no supervisor runs, for describing tools (`shepherd mcp NAME test`).
    pub fn detached(name: &str, config: McpServerConfig) -> Server {
        Server::new(name, config, Arc::default())
    }

    pub fn status(&self) -> ServerStatus {
        let state = lock(&self.state);
        ServerStatus {
            name: self.name.clone(),
            transport: self.config.transport_name(),
            state: state.phase,
            tools: state.tools.len(),
            restarts: state.restarts,
            error: state.error.clone(),
        }
    }

    fn update(&self, change: impl FnOnce(&mut State)) {
        change(&mut lock(&self.state));
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_all();
    }

    pub fn tools(&self) -> Vec<ToolInfo> {
        lock(&self.state).tools.clone()
    }

    pub(super) fn has_resources(&self) -> bool {
        let state = lock(&self.state);
        state
            .client
            .as_ref()
            .is_some_and(|c| c.info.has("resources"))
    }

    /// The live client, waiting while the server (re)starts, up to its startup
    /// timeout or until `cancel` is set.
    pub fn client(&self, cancel: &AtomicBool) -> Result<Arc<Client>, McpError> {
        let deadline = Instant::now() + self.config.startup_timeout();
        let mut state = lock(&self.state);
        loop {
            match state.phase {
                Phase::Ready => {
                    // A connection that just closed is being replaced by the
                    // supervisor: wait for the new one rather than fail on it.
                    if let Some(client) = &state.client {
                        if client.closed_reason().is_none() {
                            return Ok(client.clone());
                        }
                    }
                }
                Phase::Failed | Phase::Disabled => {
                    let why = state.error.clone().unwrap_or_else(|| "not running".into());
                    return Err(McpError::Closed(format!(
                        "{} ({why})",
                        state.phase.as_str()
                    )));
                }
                Phase::Starting | Phase::Restarting => {}
            }
            if cancel.load(Ordering::SeqCst) {
                return Err(McpError::Cancelled);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(McpError::Timeout {
                    method: "the server to start".into(),
                    after: self.config.startup_timeout(),
                });
            }
            let wait = (deadline - now).min(Duration::from_millis(50));
            state = crate::util::sync::wait_timeout(&self.changed, state, wait).0;
        }
    }
}

/// Connects to a server: spawns or reaches it, runs the handshake and lists its tools.
pub fn connect(
    name: &str,
    config: &McpServerConfig,
) -> Result<(Arc<Client>, Vec<ToolInfo>, super::client::RouterEnds), McpError> {
    let (router, ends) = Router::new();
    let transport: Box<dyn Transport> = if config.url.is_some() {
        Box::new(HttpTransport::connect(name, config, router.clone())?)
    } else {
        Box::new(StdioTransport::spawn(name, config, router.clone())?)
    };
    let timeout = config.startup_timeout();
    let client = Client::connect(transport, router, timeout)?;
    let tools = if client.info.has("tools") {
        client.list_tools(timeout)?
    } else {
        Vec::new()
    };
    Ok((Arc::new(client), tools, ends))
}

/// Every configured MCP server and their supervisors.
pub struct McpHub {
    pub(super) servers: Vec<Arc<Server>>,
    pub(super) generation: Arc<AtomicU64>,
    /// Dropped to tell every supervisor to stop.
    stop: Option<Sender<()>>,
}

impl McpHub {
    /// Starts a supervisor per enabled server and returns without waiting.
    pub fn start(configs: &McpServers) -> Arc<McpHub> {
        let generation = Arc::new(AtomicU64::new(0));
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let servers: Vec<Arc<Server>> = configs
            .iter()
            .map(|(name, config)| Arc::new(Server::new(name, config.clone(), generation.clone())))
            .collect();
        for server in servers.iter().filter(|s| s.config.is_enabled()) {
            let server = server.clone();
            let stop = stop_rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("mcp-{}", server.name))
                .spawn(move || supervise(&server, &stop));
            if let Err(e) = spawned {
                log::debug(Category::Tools, || {
                    format!("cannot start an MCP supervisor: {e}")
                });
            }
        }
        let hub = Arc::new(McpHub {
            servers,
            generation,
            stop: Some(stop_tx),
        });
        register(&hub);
        hub
    }

    pub fn statuses(&self) -> Vec<ServerStatus> {
        self.servers.iter().map(|s| s.status()).collect()
    }

    /// Waits until no server is still starting, or `deadline`.
    pub fn wait_started(&self, deadline: Instant) {
        for server in &self.servers {
            let mut state = lock(&server.state);
            while state.phase == Phase::Starting && Instant::now() < deadline {
                let wait = deadline.saturating_duration_since(Instant::now());
                state = crate::util::sync::wait_timeout(&server.changed, state, wait).0;
            }
        }
    }

    /// The longest startup timeout of the enabled servers.
    pub fn longest_startup(&self) -> Duration {
        self.servers
            .iter()
            .filter(|s| s.config.is_enabled())
            .map(|s| s.config.startup_timeout())
            .max()
            .unwrap_or_default()
    }

    /// Stops every supervisor and closes every connection (killing the
    /// servers' process groups).
    pub fn shutdown(&self) {
        for server in &self.servers {
            let client = {
                let mut state = lock(&server.state);
                state.phase = Phase::Disabled;
                state.client.take()
            };
            if let Some(client) = client {
                client.close();
            }
        }
    }
}

impl Drop for McpHub {
    fn drop(&mut self) {
        self.stop.take();
        self.shutdown();
    }
}

/// The hubs of this process, for status displays that do not own one.
static HUBS: Mutex<Vec<std::sync::Weak<McpHub>>> = Mutex::new(Vec::new());

fn register(hub: &Arc<McpHub>) {
    let mut hubs = lock(&HUBS);
    hubs.retain(|h| h.strong_count() > 0);
    hubs.push(Arc::downgrade(hub));
}

/// The status of every MCP server this process runs.
pub fn statuses() -> Vec<ServerStatus> {
    lock(&HUBS)
        .iter()
        .filter_map(std::sync::Weak::upgrade)
        .flat_map(|hub| hub.statuses())
        .collect()
}

/// The supervisor loop of one server.
fn supervise(server: &Server, stop: &Receiver<()>) {
    let mut failures = 0u32;
    loop {
        let started = Instant::now();
        match connect(&server.name, &server.config) {
            Ok((client, tools, ends)) => {
                log::debug(Category::Tools, || {
                    format!("mcp {}: ready, {} tools", server.name, tools.len())
                });
                server.update(|s| {
                    s.phase = Phase::Ready;
                    s.client = Some(client.clone());
                    s.tools = tools;
                    s.error = None;
                });
                let keep_going = serve(server, &client, &ends, stop);
                client.close();
                if !keep_going {
                    return;
                }
                let reason = client
                    .closed_reason()
                    .unwrap_or_else(|| "the server stopped".into());
                if started.elapsed() >= STABLE_AFTER {
                    failures = 0;
                }
                failures += 1;
                server.update(|s| {
                    s.phase = Phase::Restarting;
                    s.client = None;
                    s.error = Some(reason);
                });
            }
            Err(error) => {
                log::debug(Category::Tools, || format!("mcp {}: {error}", server.name));
                failures += 1;
                server.update(|s| {
                    s.phase = Phase::Restarting;
                    s.error = Some(error.to_string());
                });
            }
        }
        if failures >= MAX_FAILURES {
            server.update(|s| {
                s.phase = Phase::Failed;
                s.tools.clear();
            });
            return;
        }
        let backoff = FIRST_BACKOFF * 2u32.pow(failures.saturating_sub(1).min(7));
        select! {
            recv(stop) -> _ => return,
            default(backoff.min(MAX_BACKOFF)) => {}
        }
        server.update(|s| s.restarts += 1);
    }
}

/// Handles what the server sends until the connection ends (true) or the
/// hub stops (false).
fn serve(
    server: &Server,
    client: &Arc<Client>,
    ends: &super::client::RouterEnds,
    stop: &Receiver<()>,
) -> bool {
    loop {
        select! {
            recv(stop) -> _ => return false,
            recv(ends.ended) -> _ => return true,
            recv(ends.inbox) -> message => match message {
                Ok(message) => {
                    handle_server_message(server, client, &message);
                    client.mark_handled();
                }
                Err(_) => return true,
            },
        }
    }
}

fn handle_server_message(server: &Server, client: &Client, message: &Value) {
    let method = message["method"].as_str().unwrap_or_default();
    if message.get("id").is_some() {
        client.answer_server_request(message);
        return;
    }
    if method == "notifications/tools/list_changed" {
        match client.list_tools(server.config.call_timeout()) {
            Ok(tools) => {
                log::debug(Category::Tools, || {
                    format!(
                        "mcp {}: tool list changed, {} tools",
                        server.name,
                        tools.len()
                    )
                });
                server.update(|s| s.tools = tools);
            }
            Err(error) => log::debug(Category::Tools, || {
                format!("mcp {}: cannot re-list tools: {error}", server.name)
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::mcp::tool::McpTool;
    use crate::tools::{Tool, ToolContext, ToolSource};

    const RAW: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/raw_server.py");

    fn raw(mode: &str, startup_secs: u64) -> McpServerConfig {
        let python = std::env::var("SHEPHERD_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        McpServerConfig {
            command: Some(python),
            args: vec![RAW.into(), mode.into()],
            startup_timeout: Some(startup_secs),
            call_timeout: Some(10),
            ..McpServerConfig::default()
        }
    }

    fn run(hub: &McpHub, name: &str, args: serde_json::Value) -> crate::tools::ToolOutput {
        let tools = hub.tools();
        let tool = tools
            .iter()
            .find(|t| t.name() == name)
            .unwrap_or_else(|| panic!("{name} not offered"));
        tool.run(&args, &ToolContext::new(std::env::temp_dir()))
    }

    #[test]
    fn pages_junk_lines_server_pings_and_oversized_messages() {
        let hub = McpHub::start(&[("raw".to_string(), raw("normal", 20))].into());
        hub.wait_started(Instant::now() + Duration::from_secs(20));
        let status = &hub.statuses()[0];
        assert_eq!(
            (status.state, status.tools),
            (Phase::Ready, 4),
            "{status:?}"
        );
        let names: Vec<String> = hub.tools().iter().map(|t| t.name().to_string()).collect();
        assert_eq!(names, ["raw:echo", "raw:big", "raw:pinged", "raw:image"]);
        let out = run(&hub, "raw:echo", json!({"text": "hi"}));
        assert_eq!(out.content, "raw echo: hi");
        assert_eq!(
            run(&hub, "raw:big", json!({})).content,
            "after the big line"
        );
        assert_eq!(run(&hub, "raw:pinged", json!({})).content, "True");
    }

    #[test]
    fn versions_are_negotiated_and_bad_ones_refused() {
        let (client, _, _ends) = connect("old", &raw("old", 20)).expect("old server connects");
        assert_eq!(client.info.protocol_version, "2024-11-05");
        assert_eq!(client.info.instructions.as_deref(), Some("Be nice."));
        let Err(error) = connect("bad", &raw("bad", 20)) else {
            panic!("a bad version must be refused")
        };
        assert!(error.to_string().contains("1999-01-01"), "{error}");
    }

    #[test]
    fn a_silent_server_times_out_at_startup_and_keeps_others_running() {
        let Err(error) = connect("silent", &raw("silent", 1)) else {
            panic!("a silent server must time out")
        };
        assert!(
            matches!(error, McpError::Timeout { ref method, .. } if method == "initialize"),
            "{error}"
        );
        let servers = [
            ("silent".to_string(), raw("silent", 1)),
            ("ok".to_string(), raw("normal", 20)),
        ];
        let hub = McpHub::start(&servers.into());
        hub.wait_started(Instant::now() + Duration::from_secs(20));
        let out = run(&hub, "ok:echo", json!({"text": "fine"}));
        assert_eq!(out.content, "raw echo: fine");
        let silent = hub
            .statuses()
            .into_iter()
            .find(|s| s.name == "silent")
            .unwrap();
        assert_ne!(silent.state, Phase::Ready);
        assert!(silent.error.unwrap_or_default().contains("initialize"));
    }

    #[test]
    fn annotations_decide_what_is_side_effecting() {
        let server = Arc::new(Server::detached("s", raw("normal", 1)));
        let tool = |annotations| {
            let info = ToolInfo {
                name: "t".into(),
                description: String::new(),
                input_schema: json!({"type": "object", "properties": {}}),
                annotations,
            };
            McpTool::new(server.clone(), info)
        };
        let args = json!({});
        assert!(tool(serde_json::Value::Null).side_effecting(&args));
        assert!(tool(json!({"readOnlyHint": false})).side_effecting(&args));
        assert!(tool(json!({"destructiveHint": true})).side_effecting(&args));
        assert!(!tool(json!({"readOnlyHint": true})).side_effecting(&args));
        // A write that destroys nothing is still a write.
        assert!(tool(json!({"destructiveHint": false})).side_effecting(&args));
        let create_directory = json!({"readOnlyHint": false, "destructiveHint": false});
        assert!(tool(create_directory).side_effecting(&args));
        let odd = json!({"readOnlyHint": "true"});
        assert!(tool(odd).side_effecting(&args), "only the boolean counts");
        assert_eq!(tool(serde_json::Value::Null).name(), "s:t");
    }
}

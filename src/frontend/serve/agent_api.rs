//! The agent-server management endpoints (MCP servers, profiles, direct tool
//! calls, emergency stop), as one handler module any of
//! our HTTP servers can mount with [`route`]:
//!
//! | route | what |
//! |---|---|
//! | `GET /v1/mcp/servers` | MCP server status, from a provider function |
//! | `GET /v1/profiles` | every profile and the active one |
//! | `GET /v1/profiles/current`, `GET /v1/profiles/{name}` | one profile |
//! | `POST /v1/profiles` | create (`201`; `409` when it exists) |
//! | `PUT /v1/profiles/{name}` | change the given fields (a new `name` renames) |
//! | `DELETE /v1/profiles/{name}` | delete (`409` for `default`) |
//! | `POST /v1/profiles/{name}/activate` | make it the active profile |
//! | `POST /v1/tools/call`, `POST /mcp/tools/call` | run one tool directly, no model |
//! | `POST /v1/emergency-stop` | stop every running agent turn and tool |
//!
//! Profile edits go through `crate::config::profile` and are written to config.json
//! atomically; activating a profile swaps the registry used by direct tool
//! calls and calls the profile hook (servers point it at their agents). A
//! direct tool call gets the agent's checks: the tool must be offered under
//! the active profile, its arguments must match the schema, and the gate
//! (the approval policy) must allow it. Its cancel flag is registered with
//! the [`StopRegistry`] for as long as it runs, so an emergency stop kills a
//! running `bash` process group too. Auth, Host/Origin checks and body caps
//! are the HTTP layer's ([`super::http`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::config::profile::{self, EditError, Profile};
use crate::config::resolve::Settings;
use crate::core::ToolCall;
use crate::mcp;
use crate::tools::approval::{DirectRequest, Gate, Policy};
use crate::tools::audit::AuditLog;
use crate::tools::{self, ToolContext, ToolRegistry};
use crate::util::stop::StopRegistry;
use crate::util::sync::{lock, read};

use super::http::{Request, Responder};

/// Builds the configured tool set (before a profile restricts it).
pub type RegistryFactory = Box<dyn Fn() -> ToolRegistry + Send + Sync>;
/// The MCP manager's status as a JSON array of servers.
pub type McpStatus = Box<dyn Fn() -> Value + Send + Sync>;
/// The approval policy for a direct call: `Err(reason)` refuses it.
pub type ToolGate = Box<dyn Fn() -> Gate + Send + Sync>;
/// Told the new profile and its full system prompt when the active profile changes.
pub type ProfileHook = Box<dyn Fn(&Profile, &str) + Send + Sync>;

/// What the endpoints need from the server that mounts them.
pub struct AgentApi {
    config_path: PathBuf,
    /// The system prompt before a profile's guidelines are appended.
    base_prompt: String,
    tool_root: PathBuf,
    make_registry: RegistryFactory,
    active: RwLock<Active>,
    stops: StopRegistry,
    mcp_status: Mutex<McpStatus>,
    gate: Mutex<Arc<ToolGate>>,
    hook: Mutex<Option<ProfileHook>>,
}

struct Active {
    profile: Profile,
    registry: Arc<ToolRegistry>,
}

impl AgentApi {
    /// `profile` is the one in use at start; `make_registry` builds the tools before it applies.
    pub fn new(
        config_path: PathBuf,
        base_prompt: String,
        tool_root: PathBuf,
        profile: Profile,
        make_registry: RegistryFactory,
    ) -> AgentApi {
        let registry = restricted(&make_registry, &profile);
        let status_path = config_path.clone();
        AgentApi {
            config_path,
            base_prompt,
            tool_root,
            make_registry,
            active: RwLock::new(Active { profile, registry }),
            stops: StopRegistry::new(),
            mcp_status: Mutex::new(Box::new(move || configured_servers(&status_path))),
            gate: Mutex::new(Arc::new(Box::new(|| {
                Gate::new(Policy::default(), Box::new(DirectRequest), "api")
            }))),
            hook: Mutex::new(None),
        }
    }

    /// The registry the emergency stop uses; register agents' cancel flags here.
    pub fn stops(&self) -> &StopRegistry {
        &self.stops
    }

    /// Replaces the status source of `GET /v1/mcp/servers` (the MCP manager).
    pub fn set_mcp_status(&self, status: McpStatus) {
        *lock(&self.mcp_status) = status;
    }

    /// Replaces the gate each direct tool call passes (its rules and audit log).
    pub fn set_gate(&self, gate: ToolGate) {
        *lock(&self.gate) = Arc::new(gate);
    }

    /// Called whenever the active profile changes (or the active one is edited).
    pub fn set_profile_hook(&self, hook: ProfileHook) {
        *lock(&self.hook) = Some(hook);
    }

    pub fn active_profile(&self) -> Profile {
        read(&self.active).profile.clone()
    }

    /// The active profile's registry built again (with the MCP servers' tools as
    /// they are now), kept for the next calls.
    fn rebuild(&self) -> Arc<ToolRegistry> {
        let mut active = crate::util::sync::write(&self.active);
        active.registry = restricted(&self.make_registry, &active.profile);
        active.registry.clone()
    }

    /// Makes `profile` active here and tells the hook.
    fn apply(&self, profile: Profile) {
        let registry = restricted(&self.make_registry, &profile);
        let prompt = profile.system_prompt(&self.base_prompt);
        if let Some(hook) = lock(&self.hook).as_ref() {
            hook(&profile, &prompt);
        }
        let mut active = crate::util::sync::write(&self.active);
        *active = Active { profile, registry };
    }
}

fn restricted(make: &RegistryFactory, profile: &Profile) -> Arc<ToolRegistry> {
    let mut registry = make();
    profile.apply_tools(&mut registry);
    Arc::new(registry)
}

/// Without an MCP manager: the servers config.json names, as configured.
fn configured_servers(config_path: &std::path::Path) -> Value {
    let file = crate::config::load(config_path).unwrap_or_default();
    let servers: Vec<Value> = profile::configured_mcp_servers(&file)
        .into_iter()
        .map(|name| json!({"name": name, "state": "configured", "connected": false}))
        .collect();
    Value::Array(servers)
}

/// Serves the request when its path is one of ours; otherwise hands the responder back.
pub fn route(request: &Request, responder: Responder, api: &AgentApi) -> Option<Responder> {
    let method = request.method.as_str();
    let path = request.path.trim_end_matches('/');
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    match (method, segments.as_slice()) {
        ("GET", ["v1", "mcp", "servers"]) => mcp_servers(api, responder),
        ("GET", ["v1", "profiles"]) => list_profiles(api, responder),
        ("POST", ["v1", "profiles"]) => create_profile(api, request, responder),
        ("GET", ["v1", "profiles", "current"]) => {
            responder.json(200, &profile_body(&api.active_profile(), api))
        }
        ("GET", ["v1", "profiles", name]) => get_profile(api, name, responder),
        ("PUT" | "PATCH", ["v1", "profiles", name]) => {
            update_profile(api, name, request, responder)
        }
        ("DELETE", ["v1", "profiles", name]) => delete_profile(api, name, responder),
        ("POST", ["v1", "profiles", name, "activate"]) => activate(api, name, responder),
        ("POST", ["v1", "tools", "call"] | ["mcp", "tools", "call"]) => {
            call_tool(api, request, responder)
        }
        ("POST", ["v1", "emergency-stop"]) => {
            let stopped = api.stops.stop_all();
            responder.json(200, &json!({"success": true, "stopped": stopped}))
        }
        (
            _,
            ["v1", "mcp", "servers"]
            | ["v1", "profiles", ..]
            | ["v1", "tools", "call"]
            | ["mcp", "tools", "call"]
            | ["v1", "emergency-stop"],
        ) => responder.error(405, "method not allowed"),
        _ => return Some(responder),
    }
    None
}

fn mcp_servers(api: &AgentApi, responder: Responder) {
    let servers = (lock(&api.mcp_status))();
    let active = api.active_profile();
    let body =
        json!({"servers": servers, "profile": active.name, "profile_servers": active.mcp_servers});
    responder.json(200, &body)
}

/// A profile as the API shows it.
#[derive(Serialize)]
struct ProfileBody<'a> {
    #[serde(flatten)]
    profile: &'a Profile,
    active: bool,
}

fn profile_body<'a>(profile: &'a Profile, api: &AgentApi) -> ProfileBody<'a> {
    ProfileBody {
        profile,
        active: profile.name == api.active_profile().name,
    }
}

fn load_config(api: &AgentApi) -> Result<crate::config::ConfigFile, (u16, String)> {
    crate::config::load(&api.config_path).map_err(|e| (500, format!("config: {e}")))
}

fn list_profiles(api: &AgentApi, responder: Responder) {
    let file = match load_config(api) {
        Ok(file) => file,
        Err((status, message)) => return responder.error(status, &message),
    };
    let all = profile::all(&file);
    let bodies: Vec<ProfileBody> = all.iter().map(|p| profile_body(p, api)).collect();
    responder.json(
        200,
        &json!({"profiles": bodies, "current": api.active_profile().name}),
    )
}

fn get_profile(api: &AgentApi, name: &str, responder: Responder) {
    let found = load_config(api)
        .and_then(|file| profile::find(&file, name).map_err(|e| (e.http_status(), e.to_string())));
    match found {
        Ok(profile) => responder.json(200, &profile_body(&profile, api)),
        Err((status, message)) => responder.error(status, &message),
    }
}

/// The body of `POST` and `PUT`: absent fields keep their value (or are empty on create).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileInput {
    name: Option<String>,
    tools: Option<Vec<String>>,
    mcp_servers: Option<Vec<String>>,
    guidelines: Option<String>,
}

impl ProfileInput {
    fn apply_to(self, profile: &mut Profile) {
        if let Some(name) = self.name {
            profile.name = name;
        }
        if let Some(tools) = self.tools {
            profile.tools = tools;
        }
        if let Some(servers) = self.mcp_servers {
            profile.mcp_servers = servers;
        }
        if let Some(guidelines) = self.guidelines {
            profile.guidelines = guidelines;
        }
    }
}

fn parse_body<T: for<'de> Deserialize<'de>>(request: &Request) -> Result<T, String> {
    if request.body.is_empty() {
        return Err("the request needs a JSON body".into());
    }
    crate::util::json::parse_strict_as(&request.body).map_err(|e| format!("invalid JSON body: {e}"))
}

fn edit_error(error: EditError) -> (u16, String) {
    match &error {
        EditError::Profile(e) => (e.http_status(), error.to_string()),
        EditError::Config(_) | EditError::Io(_) => (500, error.to_string()),
    }
}

fn create_profile(api: &AgentApi, request: &Request, responder: Responder) {
    let input: ProfileInput = match parse_body(request) {
        Ok(input) => input,
        Err(message) => return responder.error(400, &message),
    };
    if input.name.is_none() {
        return responder.error(400, "a profile needs a name");
    }
    let mut created = Profile::default();
    input.apply_to(&mut created);
    let stored = created.clone();
    match profile::edit_config(&api.config_path, |file| profile::create(file, stored)) {
        Ok(()) => responder.json(201, &profile_body(&created, api)),
        Err(error) => {
            let (status, message) = edit_error(error);
            responder.error(status, &message)
        }
    }
}

fn update_profile(api: &AgentApi, name: &str, request: &Request, responder: Responder) {
    let input: ProfileInput = match parse_body(request) {
        Ok(input) => input,
        Err(message) => return responder.error(400, &message),
    };
    let result = profile::edit_config(&api.config_path, |file| {
        let mut changed = profile::find(file, name)?;
        input.apply_to(&mut changed);
        profile::update(file, name, changed.clone())?;
        Ok(changed)
    });
    match result {
        Ok(changed) => {
            if api.active_profile().name == name {
                api.apply(changed.clone());
            }
            responder.json(200, &profile_body(&changed, api))
        }
        Err(error) => {
            let (status, message) = edit_error(error);
            responder.error(status, &message)
        }
    }
}

fn delete_profile(api: &AgentApi, name: &str, responder: Responder) {
    match profile::edit_config(&api.config_path, |file| profile::remove(file, name)) {
        Ok(()) => {
            if api.active_profile().name == name {
                let fallback = load_config(api)
                    .ok()
                    .and_then(|f| profile::find(&f, profile::DEFAULT_PROFILE).ok())
                    .unwrap_or_else(|| Profile::named(profile::DEFAULT_PROFILE));
                api.apply(fallback);
            }
            responder.json(200, &json!({"success": true, "deleted": name}))
        }
        Err(error) => {
            let (status, message) = edit_error(error);
            responder.error(status, &message)
        }
    }
}

fn activate(api: &AgentApi, name: &str, responder: Responder) {
    match profile::edit_config(&api.config_path, |file| profile::set_active(file, name)) {
        Ok(chosen) => {
            api.apply(chosen.clone());
            responder.json(200, &profile_body(&chosen, api))
        }
        Err(error) => {
            let (status, message) = edit_error(error);
            responder.error(status, &message)
        }
    }
}

/// `POST /v1/tools/call`'s body (the seed's `{"name", "arguments"}`).
#[derive(Deserialize)]
struct CallInput {
    name: String,
    #[serde(default = "empty_object")]
    arguments: Value,
}

fn empty_object() -> Value {
    json!({})
}

/// The answer, shaped like an MCP `tools/call` result plus a one-line summary.
#[derive(Serialize)]
struct CallResult<'a> {
    name: &'a str,
    content: [TextContent<'a>; 1],
    #[serde(rename = "isError")]
    is_error: bool,
    summary: &'a str,
}

#[derive(Serialize)]
struct TextContent<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

fn call_tool(api: &AgentApi, request: &Request, responder: Responder) {
    let input: CallInput = match parse_body(request) {
        Ok(input) => input,
        Err(message) => return responder.error(400, &message),
    };
    let mut registry = read(&api.active).registry.clone();
    if registry.get(&input.name).is_none() {
        // MCP servers start in the background: their tools join a registry built
        // after they came up (what `/status` lists), so look again in a fresh one.
        registry = api.rebuild();
    }
    let Some(tool) = registry.get(&input.name) else {
        let message = format!(
            "no tool '{}' is offered under profile '{}'; offered: {}",
            input.name.escape_debug(),
            api.active_profile().name,
            registry.names().join(", ")
        );
        return responder.error(404, &message);
    };
    if let Err(message) = tools::args::validate(&tool.parameters(), &input.arguments) {
        return responder.error(
            400,
            &format!("invalid arguments for '{}': {message}", tool.name()),
        );
    }
    let call = ToolCall {
        id: format!("direct_{}", crate::store::now_unix()),
        name: tool.name().to_string(),
        arguments: input.arguments,
    };
    let mut gate = (lock(&api.gate).clone())();
    let ctx = ToolContext::new(api.tool_root.clone());
    let _registered = api.stops.register_flag(ctx.cancel.clone());
    let side_effecting = tool.side_effecting(&call.arguments);
    let (verdict, output) = gate.run_judged(
        &call,
        Some(side_effecting),
        &mut |_| {},
        &ctx.cancel,
        || registry.run(&call, &ctx),
    );
    if !verdict.allowed {
        return responder.error(
            403,
            &format!(
                "the approval rules deny '{}' (see --deny and config.json's approvals)",
                call.name
            ),
        );
    }
    responder.json(
        200,
        &CallResult {
            name: &call.name,
            content: [TextContent {
                kind: "text",
                text: &output.content,
            }],
            is_error: output.error,
            summary: &output.summary,
        },
    )
}

/// The agent management endpoints over the configured tools and the active profile.
pub(in crate::frontend) fn for_settings(settings: &Settings) -> AgentApi {
    let tool_settings = settings.clone();
    let api = AgentApi::new(
        settings.config_path.clone(),
        settings.system_prompt.clone(),
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        settings.profile.clone(),
        // An unreachable tool backend offers no tools (never the local ones instead).
        Box::new(move || {
            crate::frontend::wiring::tool_registry(&tool_settings)
                .unwrap_or_else(|_| ToolRegistry::empty())
        }),
    );
    api.set_mcp_status(Box::new(|| {
        serde_json::to_value(mcp::statuses()).unwrap_or(serde_json::Value::Array(Vec::new()))
    }));
    // A direct `POST /v1/tools/call` is the authenticated user's own request, so it
    // counts as their approval; only the configured deny rules refuse it.
    let policy = settings.approvals.policy.clone();
    let audit = AuditLog::open_default();
    api.set_gate(Box::new(move || {
        Gate::new(policy.clone(), Box::new(DirectRequest), "api").with_audit(audit.clone())
    }));
    api
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::serve::http::{Handler, Limits, Policy, Server};
    use crate::util::fs::test_support::temp_dir;
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    /// Mounts the API and answers 404 for everything else, as a server would.
    struct Mount {
        api: Arc<AgentApi>,
    }

    impl Handler for Mount {
        fn handle(&self, request: Request, responder: Responder) {
            if let Some(responder) = route(&request, responder, &self.api) {
                responder.error(404, "no such route");
            }
        }
    }

    struct Fixture {
        addr: SocketAddr,
        api: Arc<AgentApi>,
        dir: PathBuf,
        applied: Arc<Mutex<Vec<(String, String)>>>,
    }

    fn start(token: Option<&str>) -> Fixture {
        let dir = temp_dir("agent-api");
        let config = dir.join("config.json");
        std::fs::write(
            &config,
            r#"{"mcp_servers": [{"name": "fs", "command": "x"}, {"name": "web", "url": "http://h"}]}"#,
        )
        .unwrap();
        let api = Arc::new(AgentApi::new(
            config,
            "base".into(),
            dir.clone(),
            Profile::named("default"),
            Box::new(ToolRegistry::builtin),
        ));
        let applied = Arc::new(Mutex::new(Vec::new()));
        let seen = applied.clone();
        api.set_profile_hook(Box::new(move |p: &Profile, prompt: &str| {
            seen.lock()
                .unwrap()
                .push((p.name.clone(), prompt.to_string()));
        }));
        let policy = Policy {
            auth_token: token.map(String::from),
            ..Policy::default()
        };
        let server = Server::bind("127.0.0.1", 0, Limits::default(), policy).unwrap();
        let addr = server.local_addr().unwrap();
        let handler = Arc::new(Mount { api: api.clone() });
        std::thread::spawn(move || server.run(handler));
        Fixture {
            addr,
            api,
            dir,
            applied,
        }
    }

    /// One real HTTP request over a socket: status and JSON body.
    fn http(fx: &Fixture, method: &str, path: &str, body: &str, extra: &str) -> (u16, Value) {
        let mut stream = TcpStream::connect(fx.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n{extra}\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body.as_bytes()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let status = answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, serde_json::from_str(body).unwrap_or(Value::Null))
    }

    fn call(fx: &Fixture, method: &str, path: &str, body: &str) -> (u16, Value) {
        http(fx, method, path, body, "")
    }

    #[test]
    fn profiles_crud_over_http() {
        let fx = start(None);
        let (status, body) = call(&fx, "GET", "/v1/profiles", "");
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["current"], "default");
        assert_eq!(body["profiles"][0]["name"], "default");
        assert_eq!(body["profiles"][0]["active"], true);

        let create = r#"{"name":"review","tools":["read","grep"],"mcp_servers":["fs"],"guidelines":"Only read."}"#;
        let (status, body) = call(&fx, "POST", "/v1/profiles", create);
        assert_eq!(
            (status, body["name"].as_str()),
            (201, Some("review")),
            "{body}"
        );
        let (status, body) = call(&fx, "POST", "/v1/profiles", create);
        assert_eq!(status, 409, "{body}");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exists"));
        let (status, _) = call(&fx, "GET", "/v1/profiles/review", "");
        assert_eq!(status, 200);

        let (status, body) = call(
            &fx,
            "PUT",
            "/v1/profiles/review",
            r#"{"guidelines":"Read only."}"#,
        );
        assert_eq!(
            (status, body["guidelines"].as_str()),
            (200, Some("Read only."))
        );
        assert_eq!(
            body["tools"],
            json!(["read", "grep"]),
            "fields not given are kept"
        );

        let (status, body) = call(&fx, "POST", "/v1/profiles/review/activate", "");
        assert_eq!(
            (status, body["active"].as_bool()),
            (200, Some(true)),
            "{body}"
        );
        let applied = fx.applied.lock().unwrap().clone();
        assert_eq!(applied.len(), 1);
        assert_eq!(applied[0].0, "review");
        assert!(applied[0].1.starts_with("base\n\n") && applied[0].1.ends_with("Read only."));
        let (_, body) = call(&fx, "GET", "/v1/profiles/current", "");
        assert_eq!(body["name"], "review");
        let saved: Value =
            serde_json::from_str(&std::fs::read_to_string(fx.dir.join("config.json")).unwrap())
                .unwrap();
        assert_eq!(saved["active_profile"], "review", "activation persists");
        assert_eq!(
            saved["mcp_servers"]["fs"]["command"], "x",
            "other keys survive"
        );

        let (status, _) = call(&fx, "DELETE", "/v1/profiles/default", "");
        assert_eq!(status, 409);
        let (status, _) = call(&fx, "PUT", "/v1/profiles/default", r#"{"name":"main"}"#);
        assert_eq!(status, 409, "default cannot be renamed");
        let (status, _) = call(&fx, "DELETE", "/v1/profiles/review", "");
        assert_eq!(status, 200);
        assert_eq!(
            fx.api.active_profile().name,
            "default",
            "falls back to default"
        );
        let (status, _) = call(&fx, "GET", "/v1/profiles/review", "");
        assert_eq!(status, 404);
    }

    #[test]
    fn bad_profile_requests_get_json_errors() {
        let fx = start(None);
        let cases = [
            ("POST", "/v1/profiles", "", 400),
            ("POST", "/v1/profiles", "{", 400),
            ("POST", "/v1/profiles", r#"{"tools":["x"]}"#, 400),
            ("POST", "/v1/profiles", r#"{"name":"../etc"}"#, 400),
            ("POST", "/v1/profiles", r#"{"name":"a\u0000b"}"#, 400),
            ("POST", "/v1/profiles", r#"{"name":"ok","bogus":1}"#, 400),
            (
                "POST",
                "/v1/profiles",
                r#"{"name":"ok","tools":"read"}"#,
                400,
            ),
            ("GET", "/v1/profiles/..", "", 404),
            ("GET", "/v1/profiles/nope", "", 404),
            ("PUT", "/v1/profiles/nope", r#"{"guidelines":"x"}"#, 404),
            ("POST", "/v1/profiles/nope/activate", "", 404),
            ("DELETE", "/v1/profiles", "", 405),
            ("GET", "/v1/emergency-stop", "", 405),
            ("GET", "/v1/unrelated", "", 404),
        ];
        for (method, path, body, expected) in cases {
            let (status, answer) = call(&fx, method, path, body);
            assert_eq!(status, expected, "{method} {path} {body}: {answer}");
            assert!(
                answer["error"]["message"].is_string(),
                "{method} {path}: {answer}"
            );
        }
    }

    #[test]
    fn every_truncated_body_is_a_json_400_and_changes_nothing() {
        let fx = start(None);
        let config = fx.dir.join("config.json");
        let before = std::fs::read(&config).unwrap();
        let cases = [
            (
                "POST",
                "/v1/profiles",
                r#"{"name":"cut","tools":["read"],"guidelines":"g"}"#,
            ),
            (
                "PUT",
                "/v1/profiles/default",
                r#"{"guidelines":"new","tools":["grep"]}"#,
            ),
            (
                "POST",
                "/v1/tools/call",
                r#"{"name":"write","arguments":{"file_path":"cut.txt","content":"x"}}"#,
            ),
        ];
        for (method, path, body) in cases {
            for end in 0..body.len() {
                let (status, answer) = call(&fx, method, path, &body[..end]);
                assert_eq!(status, 400, "{method} {path} {:?}: {answer}", &body[..end]);
                assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
            }
        }
        assert_eq!(std::fs::read(&config).unwrap(), before, "config untouched");
        assert!(!fx.dir.join("cut.txt").exists());
    }

    #[test]
    fn mcp_status_comes_from_the_provider() {
        let fx = start(None);
        let (status, body) = call(&fx, "GET", "/v1/mcp/servers", "");
        assert_eq!(status, 200);
        let names: Vec<&str> = body["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["fs", "web"]);
        fx.api.set_mcp_status(Box::new(
            || json!([{"name": "fs", "state": "running", "tools": 3}]),
        ));
        let (_, body) = call(&fx, "GET", "/v1/mcp/servers", "");
        assert_eq!(body["servers"][0]["state"], "running");
        assert_eq!(body["profile"], "default");
    }

    #[test]
    fn direct_tool_calls_follow_profile_schema_and_gate() {
        let fx = start(None);
        std::fs::write(fx.dir.join("note.txt"), "hello from a file").unwrap();
        let (status, body) = call(
            &fx,
            "POST",
            "/v1/tools/call",
            r#"{"name":"read","arguments":{"file_path":"note.txt"}}"#,
        );
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["isError"], false);
        assert!(body["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("hello from a file"));
        // The seed's own path works too; a tool failure is a result, not an HTTP error.
        let (status, body) = call(
            &fx,
            "POST",
            "/mcp/tools/call",
            r#"{"name":"read","arguments":{"file_path":"../../etc/passwd"}}"#,
        );
        assert_eq!(
            (status, body["isError"].as_bool()),
            (200, Some(true)),
            "{body}"
        );
        let (status, _) = call(&fx, "POST", "/v1/tools/call", r#"{"name":"nope"}"#);
        assert_eq!(status, 404);
        let (status, body) = call(
            &fx,
            "POST",
            "/v1/tools/call",
            r#"{"name":"read","arguments":{}}"#,
        );
        assert_eq!(status, 400, "{body}");
        let (status, _) = call(&fx, "POST", "/v1/tools/call", r#"{"arguments":{}}"#);
        assert_eq!(status, 400);
        // Under a read-only profile, write is not offered.
        call(
            &fx,
            "POST",
            "/v1/profiles",
            r#"{"name":"ro","tools":["read"]}"#,
        );
        call(&fx, "POST", "/v1/profiles/ro/activate", "");
        let write = r#"{"name":"write","arguments":{"file_path":"x.txt","content":"x"}}"#;
        let (status, body) = call(&fx, "POST", "/v1/tools/call", write);
        assert_eq!(status, 404, "{body}");
        assert!(!fx.dir.join("x.txt").exists());
        call(&fx, "POST", "/v1/profiles/default/activate", "");
        fx.api.set_gate(Box::new(|| {
            let policy = crate::tools::approval::Policy {
                deny: vec!["write".into()],
                ..crate::tools::approval::Policy::default()
            };
            Gate::new(policy, Box::new(DirectRequest), "api")
        }));
        let (status, body) = call(&fx, "POST", "/v1/tools/call", write);
        assert_eq!(status, 403, "{body}");
        assert!(!fx.dir.join("x.txt").exists());
    }

    #[test]
    fn emergency_stop_kills_a_running_tool_and_flags_agents() {
        let fx = start(Some("sekrit"));
        let agent_flag = Arc::new(AtomicBool::new(false));
        let _agent = fx.api.stops().register_flag(agent_flag.clone());
        let auth = "Authorization: Bearer sekrit\r\n";
        let (status, _) = http(&fx, "POST", "/v1/emergency-stop", "", "");
        assert_eq!(status, 401, "the endpoints sit behind the server's token");
        let marker = fx.dir.join("still-running");
        let body = format!(
            r#"{{"name":"bash","arguments":{{"command":"sleep 30; touch {}"}}}}"#,
            marker.display()
        );
        let (tx, rx) = crossbeam_channel::bounded(1);
        let addr_fx = Fixture {
            addr: fx.addr,
            api: fx.api.clone(),
            dir: fx.dir.clone(),
            applied: fx.applied.clone(),
        };
        std::thread::spawn(move || {
            let _ = tx.send(http(&addr_fx, "POST", "/v1/tools/call", &body, auth));
        });
        // The tool call registers its flag when it starts running.
        let deadline = Instant::now() + Duration::from_secs(20);
        while fx.api.stops().len() < 2 {
            assert!(Instant::now() < deadline, "the tool call never started");
            std::thread::yield_now();
        }
        let (status, body) = http(&fx, "POST", "/v1/emergency-stop", "", auth);
        assert_eq!((status, body["stopped"].as_u64()), (200, Some(2)), "{body}");
        assert!(agent_flag.load(Ordering::SeqCst));
        let (status, body) = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the call ended");
        assert_eq!(
            (status, body["isError"].as_bool()),
            (200, Some(true)),
            "{body}"
        );
        assert!(
            body["summary"].as_str().unwrap().contains("cancelled"),
            "{body}"
        );
        assert!(!marker.exists());
    }
}

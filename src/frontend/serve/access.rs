//! Who may use shepherd's servers: the one place that decides each server's
//! credential and builds its HTTP access [`Policy`].
//!
//! The rules, the same for every mode:
//! - A server that can run tools (`--cliserver`, `--toolserver`, `--server
//!   --use-tools` and the agent-server routes it mounts) always needs a token,
//!   loopback included: another user of the box can reach 127.0.0.1 too. The
//!   configured one (`--auth-token[-file]`, `SHEPHERD_AUTH_TOKEN`,
//!   `auth_token` in config.json), else one generated at start.
//! - A plain `--server` (no tools) needs the configured token, if any, and is
//!   open on loopback without one, as llama-server is.
//! - `--no-auth` turns the token off, on loopback only, with a warning.
//! - Any bind that is not loopback needs a token.
//!
//! Once bound, [`Access::announce`] publishes the token for this user's own
//! clients (`crate::util::auth`) and says on stderr how to get in; a generated token
//! is printed there once, as Jupyter prints its URL.

use std::net::SocketAddr;

use crate::config::resolve::{ServerAuth, ServerSettings};
use crate::util::auth;
use crate::util::net;

use super::http::{self, Limits, Policy};
use super::ui;

/// The paths every HTTP server answers without a token, besides the chat
/// page and its files ([`ui::PATHS`]), which hold no secret: every call the
/// page makes sends the token.
const PUBLIC_PATHS: [&str; 1] = ["/health"];

/// Which server is starting, for its rules and its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// `--cliserver`.
    Cli,
    /// `--toolserver`.
    Tools,
    /// `--server`; `tools` with `--use-tools`.
    Api { tools: bool },
}

impl ServerKind {
    fn name(self) -> &'static str {
        match self {
            ServerKind::Cli => "cliserver",
            ServerKind::Tools => "toolserver",
            ServerKind::Api { .. } => "server",
        }
    }

    fn runs_tools(self) -> bool {
        !matches!(self, ServerKind::Api { tools: false })
    }
}

/// Where the token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Configured,
    Generated,
    /// `--no-auth`, or a plain `--server` with none configured.
    None,
}

/// A server's credential, decided before it binds.
#[derive(Clone)]
pub struct Access {
    kind: ServerKind,
    token: Option<String>,
    source: Source,
    cors_origins: Vec<String>,
}

/// Never prints the token.
impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("kind", &self.kind)
            .field("source", &self.source)
            .finish()
    }
}

impl Access {
    /// Decides the credential of a `kind` server about to listen on `server`,
    /// or says why it must not start.
    pub fn decide(
        server: &ServerSettings,
        auth: &ServerAuth,
        kind: ServerKind,
    ) -> Result<Access, String> {
        let loopback = server.hosts().iter().all(|h| net::is_loopback_host(h));
        let (token, source) = if auth.no_auth {
            if !loopback {
                return Err(format!(
                    "--no-auth is for loopback only: refusing to listen on {} without a token. \
                     Drop --no-auth (a token is then generated) or set one with \
                     --auth-token-file FILE",
                    server.host
                ));
            }
            (None, Source::None)
        } else if let Some(token) = &auth.token {
            (Some(token.clone()), Source::Configured)
        } else if !loopback {
            return Err(format!(
                "refusing to listen on {} without an auth token: anyone who can reach it \
                 could use it{}. Set one with --auth-token-file FILE, 'auth_token' in \
                 config.json or SHEPHERD_AUTH_TOKEN, or listen on 127.0.0.1",
                server.host,
                if kind.runs_tools() {
                    " to run commands as you"
                } else {
                    ""
                }
            ));
        } else if kind.runs_tools() {
            let token = auth::generate()
                .map_err(|e| format!("cannot generate a token (/dev/urandom: {e})"))?;
            // Never into a debug line, the audit log or a saved session.
            crate::util::redact::register_secret(&token);
            (Some(token), Source::Generated)
        } else {
            (None, Source::None)
        };
        Ok(Access {
            kind,
            token,
            source,
            cors_origins: auth.cors_origins.clone(),
        })
    }

    /// The token every request (or the tool server's `auth` call) must present.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The HTTP servers' policy: this token, the configured CORS origins,
    /// `/health` and the chat page public, and where a refused client finds the token.
    pub fn http_policy(&self, port: u16) -> Policy {
        Policy {
            auth_token: self.token.clone(),
            cors_origins: self.cors_origins.clone(),
            public_paths: PUBLIC_PATHS
                .iter()
                .chain(ui::PATHS.iter())
                .map(|p| p.to_string())
                .collect(),
            token_hint: self.token.as_ref().map(|_| self.refusal_hint(port)),
        }
    }

    /// What a request without the right credential is told: how to get in. A
    /// generated token was printed and stored for the user who started the
    /// server; a configured one is the operator's to hand out.
    pub fn refusal_hint(&self, port: u16) -> String {
        match self.source {
            Source::Generated => format!(
                "the server printed its token when it started and stored it for the user \
                 who started it in {}",
                auth::token_file(port).display()
            ),
            _ => format!(
                "the server was started with a token of its own (--auth-token-file, \
                 SHEPHERD_AUTH_TOKEN or auth_token in config.json): send it as --api-key or \
                 an Authorization: Bearer header; shepherd's own clients running as the user \
                 who started it read it from {}",
                auth::token_file(port).display()
            ),
        }
    }

    /// Binds an HTTP server on `server` with [`Access::http_policy`] for the port
    /// it got; a failure is said on stderr and becomes exit code 1.
    pub fn bind(&self, server: &ServerSettings) -> Result<http::Server, i32> {
        // Vertex AI's health route (`AIP_HEALTH_ROUTE`) is `/health` by another name.
        let vertex_health = server.vertex.as_ref().and_then(|v| v.health.clone());
        let policy = |addr: SocketAddr| {
            let mut policy = self.http_policy(addr.port());
            policy.public_paths.extend(vertex_health.clone());
            policy
        };
        http::Server::bind_with(&server.hosts(), server.port, Limits::default(), policy).map_err(
            |error| {
                eprintln!(
                    "shepherd: cannot listen on {}:{}: {error}",
                    server.host, server.port
                );
                1
            },
        )
    }

    /// Once bound to `addr`: publishes the token for this user's own clients,
    /// then prints `listening` (so a client that waits for that line finds the
    /// token), then how to get in.
    pub fn announce(&self, addr: SocketAddr, listening: &str) {
        let name = self.kind.name();
        let address = match self.kind {
            ServerKind::Tools => addr.to_string(),
            _ => format!("http://{addr}"),
        };
        let Some(token) = &self.token else {
            eprintln!("shepherd: {listening}");
            if self.kind.runs_tools() {
                eprintln!(
                    "shepherd: warning: --no-auth: every program and every user on this \
                     machine that can reach {address} can run tools as you"
                );
            } else {
                eprintln!(
                    "shepherd: no token required on loopback (this server runs no tools; \
                     --auth-token-file FILE requires one)"
                );
            }
            return;
        };
        let file = match auth::publish(name, &address, addr, token) {
            Ok(path) => format!(
                "shepherd's own clients (--backend cli, --tool-backend) read it from {}",
                path.display()
            ),
            Err(error) => format!(
                "it could not be stored for shepherd's own clients ({error}); pass it to them \
                 with --api-key or --tool-backend-token"
            ),
        };
        eprintln!("shepherd: {listening}");
        match (self.source, self.kind) {
            (Source::Generated, ServerKind::Tools) => eprintln!(
                "shepherd: a token is required; this one was generated for this run \
                 ({file}):\n    {{\"jsonrpc\":\"2.0\",\"method\":\"auth\",\"params\":{{\"token\":\"{token}\"}},\"id\":0}}"
            ),
            (Source::Generated, _) => eprintln!(
                "shepherd: a token is required; this one was generated for this run \
                 ({file}):\n    Authorization: Bearer {token}"
            ),
            _ => eprintln!("shepherd: the configured token is required ({file})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(token: Option<&str>) -> Access {
        let server = ServerSettings {
            host: "127.0.0.1".into(),
            port: 0,
            aliases: Vec::new(),
            tags: Vec::new(),
            responses_store: 0,
            verbose: false,
            slots: true,
            allow_image_urls: false,
            vertex: None,
        };
        let auth = ServerAuth {
            token: token.map(String::from),
            no_auth: false,
            cors_origins: Vec::new(),
        };
        Access::decide(&server, &auth, ServerKind::Cli).expect("loopback")
    }

    #[test]
    fn a_refused_client_is_told_where_the_token_is_only_when_it_was_printed() {
        let generated = access(None).refusal_hint(8000);
        assert!(generated.contains("printed its token"), "{generated}");
        assert!(generated.contains("server-8000.json"), "{generated}");
        let configured = access(Some("s3cret-token-value")).refusal_hint(8000);
        assert!(!configured.contains("printed"), "{configured}");
        assert!(configured.contains("--api-key"), "{configured}");
        assert!(configured.contains("server-8000.json"), "{configured}");
        assert!(!configured.contains("s3cret"), "{configured}");
    }
}

//! The `mcp_servers` section of config.json: one entry per MCP server, keyed
//! by its name, either a command to spawn (stdio) or a URL (streamable HTTP).
//!
//! ```json
//! "mcp_servers": {
//!   "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."]},
//!   "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}
//! }
//! ```
//!
//! The original tool's array form (`[{"name": …, "command": …}]`) is read too
//! and written back as the object form. Values in `env` and `headers` may
//! name environment variables as `${VAR}`; they are expanded when the server
//! starts, so secrets need not be written into the file.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// Seconds a server may take to start and answer `initialize` and `tools/list`.
pub const DEFAULT_STARTUP_TIMEOUT_SECS: u64 = 30;
/// Seconds one tool call may take.
pub const DEFAULT_CALL_TIMEOUT_SECS: u64 = 120;

/// The servers by name, in name order.
pub type McpServers = BTreeMap<String, McpServerConfig>;

/// One MCP server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct McpServerConfig {
    /// The program to spawn (stdio transport).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Added to the server's environment (`${VAR}` expanded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The endpoint of a streamable HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Sent with every HTTP request (`${VAR}` expanded), e.g. `Authorization`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Sent as `Authorization: Bearer …` (`${VAR}` expanded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_timeout: Option<u64>,
    /// `false` keeps the entry but does not start the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Keys this version does not know, written back as they were.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl McpServerConfig {
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }

    pub fn startup_timeout(&self) -> Duration {
        Duration::from_secs(self.startup_timeout.unwrap_or(DEFAULT_STARTUP_TIMEOUT_SECS))
    }

    pub fn call_timeout(&self) -> Duration {
        Duration::from_secs(self.call_timeout.unwrap_or(DEFAULT_CALL_TIMEOUT_SECS))
    }

    /// `stdio` or `http`, for display.
    pub fn transport_name(&self) -> &'static str {
        if self.url.is_some() {
            "http"
        } else {
            "stdio"
        }
    }

    /// The full command line or URL, for display (users must see what runs).
    pub fn target(&self) -> String {
        match (&self.url, &self.command) {
            (Some(url), _) => url.clone(),
            (None, Some(command)) => std::iter::once(command.as_str())
                .chain(self.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            (None, None) => String::new(),
        }
    }
}

/// Checks one entry; the message names the server.
pub fn validate_server(name: &str, server: &McpServerConfig) -> Result<(), String> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if name.is_empty() || !name.chars().all(plain) {
        return Err(format!(
            "MCP server name '{name}' must be letters, digits, '-', '_' or '.'"
        ));
    }
    match (&server.command, &server.url) {
        (Some(_), Some(_)) => Err(format!(
            "MCP server '{name}' has both a command and a url; give one"
        )),
        (None, None) => Err(format!("MCP server '{name}' needs a command or a url")),
        (Some(command), None) if command.trim().is_empty() => {
            Err(format!("MCP server '{name}' has an empty command"))
        }
        (None, Some(url)) if !(url.starts_with("http://") || url.starts_with("https://")) => Err(
            format!("MCP server '{name}': url must start with http:// or https://"),
        ),
        _ if server.startup_timeout == Some(0) || server.call_timeout == Some(0) => Err(format!(
            "MCP server '{name}': timeouts are seconds of at least 1"
        )),
        _ => Ok(()),
    }
}

/// Expands `${VAR}` in `text`; unknown variables become empty.
pub fn expand_vars(text: &str, env: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find('}') {
            Some(end) => {
                out.push_str(&env(&after[..end]).unwrap_or_default());
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Registers the servers' credentials with [`crate::util::redact`]: bearer tokens and
/// the values of secret-named headers and environment variables, `${VAR}`
/// expanded as at start-up.
pub fn register_secrets(servers: &McpServers, env: &dyn Fn(&str) -> Option<String>) {
    for server in servers.values() {
        let named = server.headers.iter().chain(&server.env);
        let secret = named.filter(|(name, _)| crate::util::redact::is_secret_name(name));
        let values = secret.map(|(_, value)| value).chain(&server.bearer_token);
        values.for_each(|value| crate::util::redact::register_secret(&expand_vars(value, env)));
    }
}

/// Reads either `{"name": {...}}` or the older list form `[{"name": "x", ...}]`.
pub fn deserialize_servers<'de, D: Deserializer<'de>>(d: D) -> Result<McpServers, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        Map(McpServers),
        List(Vec<Named>),
    }
    #[derive(Deserialize)]
    struct Named {
        name: String,
        #[serde(flatten)]
        server: McpServerConfig,
    }
    Ok(match Form::deserialize(d)? {
        Form::Map(map) => map,
        Form::List(list) => list.into_iter().map(|n| (n.name, n.server)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_read_and_check() {
        #[derive(Deserialize)]
        struct File {
            #[serde(deserialize_with = "deserialize_servers")]
            mcp_servers: McpServers,
        }
        let map: File = serde_json::from_str(
            r#"{"mcp_servers": {"a": {"command": "x", "args": ["1"], "call_timeout": 5}}}"#,
        )
        .unwrap();
        let list: File = serde_json::from_str(
            r#"{"mcp_servers": [{"name": "a", "command": "x", "args": ["1"], "call_timeout": 5}]}"#,
        )
        .unwrap();
        assert_eq!(map.mcp_servers, list.mcp_servers);
        let a = &map.mcp_servers["a"];
        assert_eq!(a.call_timeout(), Duration::from_secs(5));
        assert_eq!(a.target(), "x 1");
        assert!(validate_server("a", a).is_ok());
        let both = McpServerConfig {
            url: Some("http://h/mcp".into()),
            ..a.clone()
        };
        assert!(validate_server("a", &both).unwrap_err().contains("both"));
        assert!(validate_server("a b", a).is_err());
        let ftp = McpServerConfig {
            url: Some("ftp://h".into()),
            ..McpServerConfig::default()
        };
        assert!(validate_server("a", &ftp).is_err());
    }

    #[test]
    fn variables_expand() {
        let env = |name: &str| (name == "T").then(|| "secret".to_string());
        assert_eq!(expand_vars("Bearer ${T}", &env), "Bearer secret");
        assert_eq!(expand_vars("${NOPE}x${T}", &env), "xsecret");
        assert_eq!(expand_vars("a${T", &env), "a${T");
    }
}

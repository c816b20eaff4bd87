//! MCP tools as shepherd [`Tool`]s: each server tool becomes `server:tool`,
//! and two read-only helpers, `list_mcp_resources` and `read_mcp_resource`,
//! reach the servers' resources.
//!
//! A call waits for a (re)starting server up to its startup timeout, runs
//! with the server's call timeout and the turn's cancel flag (a cancel or a
//! timeout sends `notifications/cancelled`), and comes back as a
//! [`ToolOutput`]: the text content and images for the model, `isError` results and
//! every protocol or transport fault as failed outputs the model can read.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Value};

use super::client::{Content, McpError, ToolInfo};
use super::hub::{McpHub, Server};
use crate::tools::{args, Tool, ToolContext, ToolOutput, ToolSource};

/// Longest wait after a call for the server's notifications (a changed tool list) to be applied.
const SETTLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Most characters of one result kept before the agent's own truncation.
pub const MAX_RESULT_CHARS: usize = 100_000;

/// One tool of one server.
pub struct McpTool {
    server: Arc<Server>,
    info: ToolInfo,
    /// `server:tool`.
    name: String,
}

impl McpTool {
    pub fn new(server: Arc<Server>, info: ToolInfo) -> McpTool {
        let name = format!("{}:{}", server.name, info.name);
        McpTool { server, info, name }
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.info.description
    }

    fn parameters(&self) -> Value {
        self.info.input_schema.clone()
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> ToolOutput {
        let args = coerced(&self.info.input_schema, args);
        let result = self.server.client(&ctx.cancel).and_then(|client| {
            let result = client.call_tool(
                &self.info.name,
                &args,
                self.server.config.call_timeout(),
                Some(&ctx.cancel),
            );
            client.settle(SETTLE_LIMIT);
            result
        });
        match result {
            Ok(result) if result.is_error => {
                ToolOutput::fail(format!("Error from {}: {}", self.name, capped(result.text)))
            }
            Ok(result) => {
                let summary = summary(&result.text, result.images.len());
                ToolOutput::ok(capped(result.text), summary).with_images(result.images)
            }
            Err(error) => failure(&self.server.name, &self.name, &error),
        }
    }

    /// Only a tool its server calls read-only (`readOnlyHint: true`) runs
    /// without approval. `destructiveHint: false` is no such claim: by the MCP
    /// spec it only qualifies a tool that writes (the filesystem server's
    /// `create_directory` says `readOnlyHint: false, destructiveHint: false`).
    fn side_effecting(&self, _args: &Value) -> bool {
        self.info.annotations["readOnlyHint"].as_bool() != Some(true)
    }
}

/// The arguments with quoted numbers and booleans (`"10"`, `"true"`) turned
/// into what the schema asks for. The registry's check accepts those slips
/// from models; strict servers would not.
fn coerced(schema: &Value, args: &Value) -> Value {
    let mut args = args.clone();
    let Some(object) = args.as_object_mut() else {
        return args;
    };
    for (name, value) in object.iter_mut() {
        let Value::String(text) = value else { continue };
        let text = text.trim();
        let fixed = match schema["properties"][name.as_str()]["type"].as_str() {
            Some("integer") => text.parse::<i64>().ok().map(Value::from),
            Some("number") => text
                .parse::<f64>()
                .ok()
                .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number)),
            Some("boolean") => text
                .to_ascii_lowercase()
                .parse::<bool>()
                .ok()
                .map(Value::Bool),
            _ => None,
        };
        if let Some(fixed) = fixed {
            *value = fixed;
        }
    }
    args
}

fn failure(server: &str, tool: &str, error: &McpError) -> ToolOutput {
    match error {
        McpError::Cancelled => ToolOutput {
            content: format!("{tool} was cancelled by the user."),
            summary: "cancelled".into(),
            error: true,
            images: Vec::new(),
        },
        other => ToolOutput::fail(format!("Error: MCP server '{server}' ({tool}): {other}")),
    }
}

/// The first line of `text`, shortened; the image count when there is no text.
fn summary(text: &str, images: usize) -> String {
    if text.is_empty() && images > 0 {
        return match images {
            1 => "1 image".to_string(),
            n => format!("{n} images"),
        };
    }
    let first = text.lines().next().unwrap_or("");
    let mut line: String = first.chars().take(80).collect();
    if line.len() < first.len() || text.lines().nth(1).is_some() {
        line.push('…');
    }
    line
}

/// Cuts `text` to [`MAX_RESULT_CHARS`] with a note saying so.
pub fn capped(text: String) -> String {
    match text.char_indices().nth(MAX_RESULT_CHARS) {
        Some((cut, _)) => format!(
            "{}\n[truncated: the result had {} characters]",
            &text[..cut],
            text.chars().count()
        ),
        None => text,
    }
}

/// `list_mcp_resources` or `read_mcp_resource`, over every server with resources.
pub struct ResourceTool {
    servers: Vec<Arc<Server>>,
    read: bool,
}

impl ResourceTool {
    pub fn pair(servers: Vec<Arc<Server>>) -> [Box<dyn Tool>; 2] {
        [
            Box::new(ResourceTool {
                servers: servers.clone(),
                read: false,
            }),
            Box::new(ResourceTool {
                servers,
                read: true,
            }),
        ]
    }

    fn server(&self, name: &str) -> Result<&Arc<Server>, String> {
        self.servers.iter().find(|s| s.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.servers.iter().map(|s| s.name.as_str()).collect();
            format!(
                "Error: no MCP server '{name}' with resources; servers: {}",
                names.join(", ")
            )
        })
    }

    fn list(&self, server: &Server, ctx: &ToolContext) -> Result<Content, McpError> {
        let client = server.client(&ctx.cancel)?;
        let resources = client.list_resources(server.config.call_timeout())?;
        let lines: Vec<String> = resources
            .iter()
            .map(|r| {
                let field = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                format!(
                    "{}  {}  {}",
                    field("uri"),
                    field("name"),
                    field("description")
                )
                .trim_end()
                .to_string()
            })
            .collect();
        Ok(Content::from_text(lines.join("\n")))
    }
}

impl Tool for ResourceTool {
    fn name(&self) -> &str {
        if self.read {
            "read_mcp_resource"
        } else {
            "list_mcp_resources"
        }
    }

    fn description(&self) -> &str {
        if self.read {
            "Reads one resource of an MCP server by its URI."
        } else {
            "Lists the resources (URI, name, description) an MCP server offers."
        }
    }

    fn parameters(&self) -> Value {
        let mut properties =
            json!({"server": {"type": "string", "description": "The MCP server's name"}});
        let mut required = vec!["server"];
        if self.read {
            properties["uri"] = json!({"type": "string", "description": "The resource URI"});
            required.push("uri");
        }
        json!({"type": "object", "properties": properties, "required": required})
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> ToolOutput {
        let server = match self.server(args::string(args, "server")) {
            Ok(server) => server,
            Err(message) => return ToolOutput::fail(message),
        };
        let result = if self.read {
            server.client(&ctx.cancel).and_then(|client| {
                client.read_resource(
                    args::string(args, "uri"),
                    server.config.call_timeout(),
                    Some(&ctx.cancel),
                )
            })
        } else {
            self.list(server, ctx)
        };
        match result {
            Ok(content) => {
                let summary = summary(&content.text, content.images.len());
                ToolOutput::ok(capped(content.text), summary).with_images(content.images)
            }
            Err(error) => failure(&server.name, self.name(), &error),
        }
    }

    fn side_effecting(&self, _args: &Value) -> bool {
        false
    }
}

/// The hub's tools: one per tool of a ready server, and the resource pair when
/// any server has resources.
impl ToolSource for McpHub {
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    fn tools(&self) -> Vec<Box<dyn Tool>> {
        let mut tools: Vec<Box<dyn Tool>> = Vec::new();
        for server in &self.servers {
            for info in server.tools() {
                tools.push(Box::new(McpTool::new(server.clone(), info)));
            }
        }
        let with_resources: Vec<Arc<Server>> = self
            .servers
            .iter()
            .filter(|s| s.has_resources())
            .cloned()
            .collect();
        if !with_resources.is_empty() {
            tools.extend(ResourceTool::pair(with_resources));
        }
        tools
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_capped_with_a_note() {
        let long = "x".repeat(MAX_RESULT_CHARS + 5);
        let out = capped(long);
        assert!(out.starts_with(&"x".repeat(MAX_RESULT_CHARS)));
        assert!(out.ends_with(&format!("had {} characters]", MAX_RESULT_CHARS + 5)));
        assert_eq!(capped("short".into()), "short");
    }

    #[test]
    fn quoted_numbers_and_booleans_follow_the_schema() {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer"}, "x": {"type": "number"},
            "b": {"type": "boolean"}, "s": {"type": "string"}}});
        let args = json!({"n": "10", "x": " 2.5", "b": "TRUE", "s": "7", "other": "1"});
        assert_eq!(
            coerced(&schema, &args),
            json!({"n": 10, "x": 2.5, "b": true, "s": "7", "other": "1"})
        );
        assert_eq!(coerced(&schema, &json!({"n": "ten"})), json!({"n": "ten"}));
    }

    #[test]
    fn summaries_are_one_short_line() {
        assert_eq!(summary("one", 0), "one");
        assert_eq!(summary("one\ntwo", 1), "one…");
        assert_eq!(summary(&"y".repeat(100), 0).chars().count(), 81);
        assert_eq!(summary("", 1), "1 image");
        assert_eq!(summary("", 2), "2 images");
    }
}

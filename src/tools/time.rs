//! The `get_time` tool: the current time in UTC, formatted by [`crate::util::time`].
//!
//! Times are always UTC; the output says "UTC" so the model knows.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::{args, Tool, ToolContext, ToolOutput};
use crate::util::time::strftime;

pub struct GetTime;

impl Tool for GetTime {
    fn name(&self) -> &str {
        "get_time"
    }

    fn description(&self) -> &str {
        "Returns the current date and time in UTC (ISO 8601) and the Unix time. Optional 'format' \
         uses strftime fields: %Y %m %d %H %M %S %j %a %b %s %z %Z %%."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "format": {"type": "string", "description": "strftime-style format, e.g. '%Y-%m-%d'"}
            },
            "required": []
        })
    }

    fn side_effecting(&self, _args: &Value) -> bool {
        false
    }

    fn run(&self, args: &Value, _ctx: &ToolContext) -> ToolOutput {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        // An empty format (small models like to send one) means the default.
        let text = match args::opt_string(args, "format").filter(|f| !f.trim().is_empty()) {
            Some(format) => format!("{} (UTC)", strftime(format, now)),
            None => format!(
                "{} (UTC; Unix time {now})",
                strftime("%Y-%m-%dT%H:%M:%SZ", now)
            ),
        };
        ToolOutput::ok(text.clone(), text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_output() {
        let ctx = ToolContext::new(std::env::temp_dir());
        let out = GetTime.run(&json!({}), &ctx);
        let (iso, rest) = out
            .content
            .split_once(" (UTC; Unix time ")
            .expect("unix time shown");
        assert_eq!(iso.len(), "2025-01-01T00:00:00Z".len());
        let unix: i64 = rest.trim_end_matches(')').parse().expect("a number");
        assert_eq!(strftime("%Y-%m-%dT%H:%M:%SZ", unix), iso);
        let empty = GetTime.run(&json!({"format": ""}), &ctx);
        assert!(empty.content.contains("Unix time"), "{}", empty.content);
        let out = GetTime.run(&json!({"format": "%Y"}), &ctx);
        assert_eq!(out.content, format!("{} (UTC)", &iso[..4]));
    }
}

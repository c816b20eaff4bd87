//! Tools the model can call, and the registry that offers and runs them.
//!
//! The agent asks [`ToolRegistry::specs`] for what to offer a backend, and
//! hands every [`crate::core::ToolCall`] the model makes to
//! [`ToolRegistry::run`]. The registry checks the call against the tool's
//! JSON schema in one place, so each tool can assume its required arguments
//! exist with the right types. Results are [`ToolOutput`]s; the agent shortens
//! them with [`truncate`] before they enter the session. Every run passes
//! `approval::Gate` (the policy, the approvers) and is written to `audit`'s log.
//!
//! **Architecture Invariant:** a tool never panics on model input and never
//! reaches outside [`ToolContext::root`] (files) or onto private networks
//! (unless [`NetPolicy::allow_private`]).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::core::image::{self, Image, ImagePart};
use crate::core::ToolCall;
use crate::core::ToolSpec;

pub mod approval;
pub mod args;
pub mod audit;
pub mod bash;
pub mod fs;
pub mod grep;
pub mod image_file;
pub mod paths;
pub mod pattern;
pub mod remote;
pub mod rpc;
pub mod time;
pub mod truncate;
pub mod walk;
pub mod web;

/// One tool the model may call.
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON schema of the arguments: `{"type":"object","properties":{..},"required":[..]}`.
    fn parameters(&self) -> Value;
    /// Runs the tool. `args` is an object already checked against [`Tool::parameters`].
    fn run(&self, args: &Value, ctx: &ToolContext) -> ToolOutput;
    /// True when running the tool with `args` can change something outside shepherd
    /// (files, processes, remote state); such calls need approval in interactive modes.
    fn side_effecting(&self, _args: &Value) -> bool {
        true
    }
}

/// Tools that come and go while shepherd runs (MCP servers starting, crashing,
/// changing their lists). The registry asks for the current set when
/// [`ToolRegistry::refresh`] sees a new generation.
pub trait ToolSource: Send + Sync {
    /// A number that changes whenever [`ToolSource::tools`] would answer differently.
    fn generation(&self) -> u64;
    /// The tools on offer now.
    fn tools(&self) -> Vec<Box<dyn Tool>>;
}

/// What a tool run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// The text handed to the model (also when the run failed).
    pub content: String,
    /// One line for display.
    pub summary: String,
    /// True when the run failed.
    pub error: bool,
    /// Images the tool returned (an MCP tool's `image` content, `read_image`),
    /// each at a byte offset of `content`, in text order.
    pub images: Vec<ImagePart>,
}

impl ToolOutput {
    /// The result for an image file: one line naming it, then the image.
    pub fn image_file(requested: &str, image: Image) -> ToolOutput {
        let content = format!(
            "{requested}, {}x{}, {}",
            image.width, image.height, image.mime
        );
        let summary = format!("image, {}x{}", image.width, image.height);
        let at = content.len();
        ToolOutput::ok(content, summary).with_images(vec![ImagePart { at, image }])
    }

    pub fn ok(content: impl Into<String>, summary: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            summary: summary.into(),
            error: false,
            images: Vec::new(),
        }
    }

    /// The same output with `images` (their offsets kept inside `content`).
    pub fn with_images(mut self, mut images: Vec<ImagePart>) -> Self {
        image::clamp_offsets(&self.content, &mut images);
        self.images = images;
        self
    }

    /// The content with each image's summary where it stood: for whoever
    /// takes text only (the tool server's wire, a text-only model, a log).
    pub fn text_with_summaries(&self) -> String {
        image::inline_summaries(&self.content, &self.images)
    }

    /// A failure whose message is both the content and the summary.
    pub fn fail(message: impl Into<String>) -> Self {
        let content = message.into();
        let summary = content.lines().next().unwrap_or("").to_string();
        ToolOutput {
            content,
            summary,
            error: true,
            images: Vec::new(),
        }
    }
}

/// Which network destinations the web tools may reach.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetPolicy {
    /// Allows loopback, private, link-local and metadata addresses (off by default).
    pub allow_private: bool,
}

/// Everything a tool run may depend on besides its arguments.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// File tools stay inside this directory; `bash` starts in it.
    pub root: PathBuf,
    /// Set by anyone to make running tools stop as soon as they can.
    pub cancel: Arc<AtomicBool>,
    pub net: NetPolicy,
    /// `bash` timeout when the call gives none.
    pub bash_timeout: Duration,
    /// Most bytes of process output a tool keeps.
    pub output_cap: usize,
    /// Whether the model reads images (the backend's `takes_images`,
    /// set by the agent for each call): `read` returns an image file as an
    /// image then, and as base64 text otherwise.
    pub takes_images: bool,
}

impl ToolContext {
    pub const DEFAULT_BASH_TIMEOUT: Duration = Duration::from_secs(120);
    pub const DEFAULT_OUTPUT_CAP: usize = 256 * 1024;

    pub fn new(root: impl Into<PathBuf>) -> Self {
        ToolContext {
            root: root.into(),
            cancel: Arc::new(AtomicBool::new(false)),
            net: NetPolicy::default(),
            bash_timeout: Self::DEFAULT_BASH_TIMEOUT,
            output_cap: Self::DEFAULT_OUTPUT_CAP,
            takes_images: false,
        }
    }

    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// The tools on offer, with the user's enable/disable globs applied.
pub struct ToolRegistry {
    tools: Vec<Box<dyn Tool>>,
    /// Enable (`true`) and disable globs in the order given: the last one that
    /// matches a tool decides; a tool none matches is enabled.
    rules: Vec<(String, bool)>,
    /// A profile's tool globs: when not empty, only matching tools are offered.
    allowed: Vec<String>,
    /// Dynamic tool sources, each with the generation its tools were taken at.
    sources: Vec<(Arc<dyn ToolSource>, Option<u64>)>,
    /// The tools the sources offered at the last refresh, after the static ones.
    dynamic: Vec<Box<dyn Tool>>,
}

impl Default for ToolRegistry {
    fn default() -> Self {
        Self::empty()
    }
}

impl ToolRegistry {
    pub fn empty() -> Self {
        ToolRegistry {
            tools: Vec::new(),
            rules: Vec::new(),
            allowed: Vec::new(),
            sources: Vec::new(),
            dynamic: Vec::new(),
        }
    }

    /// Every built-in tool, all enabled.
    pub fn builtin() -> Self {
        let mut registry = Self::empty();
        for tool in fs::tools() {
            registry.register(tool);
        }
        registry.register(Box::new(image_file::ReadImage));
        registry.register(Box::new(grep::Grep));
        registry.register(Box::new(bash::Bash));
        registry.register(Box::new(web::WebFetch));
        registry.register(Box::new(web::HttpRequest));
        registry.register(Box::new(time::GetTime));
        registry
    }

    /// Adds a tool; a tool with the same (case-insensitive) name is replaced.
    pub fn register(&mut self, tool: Box<dyn Tool>) {
        self.tools
            .retain(|t| !t.name().eq_ignore_ascii_case(tool.name()));
        self.tools.push(tool);
    }

    /// Adds a source of tools that change at run time; its tools join the
    /// registry at the next [`ToolRegistry::refresh`].
    pub fn attach(&mut self, source: Arc<dyn ToolSource>) {
        self.sources.push((source, None));
        self.refresh();
    }

    /// Takes the current tools of every source whose generation changed. Static
    /// tools win a name clash, so a server cannot shadow a built-in.
    pub fn refresh(&mut self) {
        let stale = self
            .sources
            .iter()
            .any(|(source, seen)| *seen != Some(source.generation()));
        if !stale {
            return;
        }
        self.dynamic.clear();
        for (source, seen) in &mut self.sources {
            *seen = Some(source.generation());
            for tool in source.tools() {
                let taken = self
                    .tools
                    .iter()
                    .chain(&self.dynamic)
                    .any(|t| t.name().eq_ignore_ascii_case(tool.name()));
                if !taken {
                    self.dynamic.push(tool);
                }
            }
        }
    }

    /// Disables the tools whose names match `glob` (fnmatch style,
    /// case-insensitive), over any rule before it.
    pub fn disable(&mut self, glob: &str) {
        self.rules.push((glob.to_ascii_lowercase(), false));
    }

    /// Enables matching tools, over any rule before it (REPL `/tools enable`,
    /// `--enable-tools` after `--disable-tools`).
    pub fn enable(&mut self, glob: &str) {
        self.rules.push((glob.to_ascii_lowercase(), true));
    }

    /// Offers only tools matching one of `globs` (a profile's set); empty
    /// lifts the restriction. Replaces the previous restriction; the
    /// enable/disable globs still apply inside it.
    pub fn restrict(&mut self, globs: &[String]) {
        self.allowed = globs.iter().map(|g| g.to_ascii_lowercase()).collect();
    }

    fn is_enabled(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        let any = |globs: &[String]| globs.iter().any(|g| pattern::fnmatch(g, &name));
        let allowed = self.allowed.is_empty() || any(&self.allowed);
        let last = self
            .rules
            .iter()
            .rev()
            .find(|(glob, _)| pattern::fnmatch(glob, &name));
        allowed && last.is_none_or(|(_, on)| *on)
    }

    fn enabled_tools(&self) -> impl Iterator<Item = &dyn Tool> {
        self.tools
            .iter()
            .chain(&self.dynamic)
            .map(|t| t.as_ref())
            .filter(|t| self.is_enabled(t.name()))
    }

    /// Names of the enabled tools, in registration order.
    pub fn names(&self) -> Vec<String> {
        self.enabled_tools().map(|t| t.name().to_string()).collect()
    }

    /// The enabled tools as offered to a backend.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.enabled_tools()
            .map(|t| ToolSpec {
                name: t.name().to_string(),
                description: t.description().to_string(),
                parameters: t.parameters(),
            })
            .collect()
    }

    /// The enabled tool called `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&dyn Tool> {
        self.enabled_tools()
            .find(|t| t.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Runs one call. Every failure (unknown tool, bad arguments, the tool's own
    /// errors) comes back as an error output the model can read and react to.
    pub fn run(&self, call: &ToolCall, ctx: &ToolContext) -> ToolOutput {
        let Some(tool) = self.get(&call.name) else {
            return ToolOutput::fail(format!(
                "Error: tool '{}' does not exist. Available tools: {}",
                call.name,
                self.names().join(", ")
            ));
        };
        if let Err(message) = args::validate(&tool.parameters(), &call.arguments) {
            return ToolOutput::fail(format!(
                "Error: invalid arguments for '{}': {message}",
                tool.name()
            ));
        }
        crate::util::log::debug(crate::util::log::Category::Tools, || {
            format!("run {} {}", tool.name(), call.arguments)
        });
        tool.run(&call.arguments, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: "call_1".into(),
            name: name.into(),
            arguments,
        }
    }

    fn ctx() -> ToolContext {
        ToolContext::new(std::env::temp_dir())
    }

    #[test]
    fn builtin_has_the_reference_names() {
        let names = ToolRegistry::builtin().names();
        for expected in [
            "read",
            "read_image",
            "write",
            "edit",
            "list_directory",
            "glob",
            "grep",
            "bash",
            "webfetch",
            "http_request",
            "get_time",
        ] {
            assert!(names.iter().any(|n| n == expected), "missing {expected}");
        }
    }

    #[test]
    fn specs_have_object_schemas() {
        for spec in ToolRegistry::builtin().specs() {
            assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
            assert!(spec.parameters["properties"].is_object(), "{}", spec.name);
            assert!(!spec.description.is_empty(), "{}", spec.name);
        }
    }

    #[test]
    fn the_last_matching_rule_decides() {
        let mut registry = ToolRegistry::builtin();
        registry.disable("*");
        registry.enable("webfetch");
        assert_eq!(registry.names(), vec!["webfetch".to_string()]);
        assert_eq!(registry.specs().len(), 1);
        // What the REPL's /tools does in turn: each command changes the offer.
        registry.disable("web*");
        assert!(registry.names().is_empty());
        registry.enable("*");
        assert_eq!(
            registry.names().len(),
            ToolRegistry::builtin().names().len()
        );
        registry.disable("bash");
        registry.disable("grep");
        let names = registry.names();
        assert!(
            !names.iter().any(|n| n == "bash" || n == "grep"),
            "{names:?}"
        );
        assert!(names.iter().any(|n| n == "read"), "{names:?}");
    }

    #[test]
    fn restrict_keeps_only_matching_and_can_be_lifted() {
        let mut registry = ToolRegistry::builtin();
        registry.restrict(&["READ".into(), "g*".into()]);
        assert_eq!(registry.names(), ["read", "glob", "grep", "get_time"]);
        registry.disable("grep");
        registry.enable("bash");
        assert_eq!(registry.names(), ["read", "glob", "get_time"]);
        assert!(registry.get("write").is_none());
        registry.restrict(&[]);
        assert!(registry.names().len() > 4);
    }

    #[test]
    fn disable_with_class_glob() {
        let mut registry = ToolRegistry::builtin();
        registry.disable("[rw]*");
        let names = registry.names();
        assert!(!names
            .iter()
            .any(|n| n == "read" || n == "write" || n == "webfetch"));
        assert!(names.iter().any(|n| n == "edit"));
    }

    #[test]
    fn unknown_tool_lists_available_names() {
        let mut registry = ToolRegistry::builtin();
        registry.disable("bash");
        for name in ["nope", "bash"] {
            let out = registry.run(&call(name, json!({"command": "true"})), &ctx());
            assert!(out.error);
            assert!(out.content.contains("does not exist"), "{}", out.content);
            assert!(out.content.contains("get_time"), "{}", out.content);
        }
    }

    #[test]
    fn lookup_is_case_insensitive() {
        let out = ToolRegistry::builtin().run(&call("GET_Time", json!({})), &ctx());
        assert!(!out.error, "{}", out.content);
    }

    #[test]
    fn non_object_arguments_are_refused() {
        let out = ToolRegistry::builtin().run(
            &call("read", Value::String("{\"file_path\": ".into())),
            &ctx(),
        );
        assert!(out.error);
        assert!(out.content.contains("not a JSON object"), "{}", out.content);
    }

    #[test]
    fn missing_and_mistyped_arguments_are_refused() {
        let registry = ToolRegistry::builtin();
        let out = registry.run(&call("read", json!({})), &ctx());
        assert!(
            out.content
                .contains("missing required argument 'file_path'"),
            "{}",
            out.content
        );
        let out = registry.run(&call("read", json!({"file_path": 3})), &ctx());
        assert!(
            out.content.contains("'file_path' must be a string"),
            "{}",
            out.content
        );
        assert!(out.error);
    }

    struct Echo;
    impl Tool for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn description(&self) -> &str {
            "Echoes its text."
        }
        fn parameters(&self) -> Value {
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
        }
        fn run(&self, args: &Value, _ctx: &ToolContext) -> ToolOutput {
            ToolOutput::ok(args["text"].as_str().unwrap_or_default(), "echoed")
        }
    }

    /// A source whose tool set the test changes.
    struct Changing {
        generation: std::sync::atomic::AtomicU64,
        names: std::sync::Mutex<Vec<&'static str>>,
    }

    struct Named(&'static str);
    impl Tool for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            "named"
        }
        fn parameters(&self) -> Value {
            json!({"type": "object", "properties": {}})
        }
        fn run(&self, _args: &Value, _ctx: &ToolContext) -> ToolOutput {
            ToolOutput::ok(self.0, self.0)
        }
    }

    impl ToolSource for Changing {
        fn generation(&self) -> u64 {
            self.generation.load(Ordering::SeqCst)
        }
        fn tools(&self) -> Vec<Box<dyn Tool>> {
            let names = self.names.lock().unwrap().clone();
            names
                .into_iter()
                .map(|n| Box::new(Named(n)) as Box<dyn Tool>)
                .collect()
        }
    }

    #[test]
    fn sources_join_on_refresh_and_cannot_shadow_builtins() {
        let source = Arc::new(Changing {
            generation: Default::default(),
            names: std::sync::Mutex::new(vec!["s:a", "read"]),
        });
        let mut registry = ToolRegistry::builtin();
        registry.attach(source.clone());
        assert!(registry.names().contains(&"s:a".to_string()));
        assert_eq!(registry.names().iter().filter(|n| *n == "read").count(), 1);
        assert_eq!(registry.run(&call("s:a", json!({})), &ctx()).content, "s:a");
        *source.names.lock().unwrap() = vec!["s:b"];
        registry.refresh();
        assert!(
            registry.names().contains(&"s:a".to_string()),
            "no new generation yet"
        );
        source.generation.fetch_add(1, Ordering::SeqCst);
        registry.refresh();
        let names = registry.names();
        assert!(names.contains(&"s:b".to_string()) && !names.contains(&"s:a".to_string()));
        registry.disable("s:*");
        assert!(!registry.names().iter().any(|n| n.starts_with("s:")));
    }

    #[test]
    fn registered_tools_run() {
        let mut registry = ToolRegistry::empty();
        registry.register(Box::new(Echo));
        let out = registry.run(&call("Echo", json!({"text": "hi"})), &ctx());
        assert_eq!(out, ToolOutput::ok("hi", "echoed"));
    }
}

//! Profiles: a named set of MCP servers, enabled tools and
//! system-prompt guidelines, stored in config.json under `profiles`, with the
//! one in use under `active_profile`.
//!
//! A profile called [`DEFAULT_PROFILE`] always exists: when config.json has
//! none it is the empty profile (every tool, every MCP server, no guidelines);
//! it may be edited but never deleted or renamed. Names follow the same safe
//! rule as session ids ([`crate::util::names::check_name`]) because they appear in
//! URLs (`/v1/profiles/{name}`).
//!
//! Applying a profile restricts the tool registry to its tool globs
//! ([`Profile::apply_tools`]), appends its guidelines to the system prompt
//! ([`Profile::system_prompt`]), and tells the MCP manager which configured
//! servers to use ([`Profile::uses_mcp_server`]). The edits below are shared
//! by `shepherd profile` ([`crate::commands::profile`]), `/profile` and the
//! agent-server endpoints; every
//! write of config.json is atomic (`config::save`).

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::{self, ConfigFile};
use crate::tools::ToolRegistry;
use crate::util::names::check_name;

pub const DEFAULT_PROFILE: &str = "default";
/// Names that would clash with a route (`/v1/profiles/current`) or a command word.
const RESERVED: [&str; 7] = ["current", "list", "add", "edit", "show", "remove", "use"];
/// Longest guidelines text accepted, in bytes.
const MAX_GUIDELINES: usize = 64 * 1024;

/// One profile as stored in config.json and sent by the API.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Profile {
    pub name: String,
    /// Tool-name globs offered under this profile; empty means every tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Names of configured `mcp_servers` used under this profile; empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<String>,
    /// Appended to the system prompt.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub guidelines: String,
}

impl Profile {
    pub fn named(name: &str) -> Profile {
        Profile {
            name: name.to_string(),
            ..Profile::default()
        }
    }

    /// Whether the MCP manager should run the configured server `server` under this profile.
    pub fn uses_mcp_server(&self, server: &str) -> bool {
        self.mcp_servers.is_empty() || self.mcp_servers.iter().any(|s| s == server)
    }

    /// Restricts `registry` to this profile's tools (all of them when it names none).
    pub fn apply_tools(&self, registry: &mut ToolRegistry) {
        registry.restrict(&self.tools);
    }

    /// `base` with this profile's guidelines appended.
    pub fn system_prompt(&self, base: &str) -> String {
        let guidelines = self.guidelines.trim();
        if guidelines.is_empty() {
            return base.to_string();
        }
        format!(
            "{base}\n\nGuidelines ({} profile):\n{guidelines}",
            self.name
        )
    }

    /// Checks the name, globs, server names and guidelines.
    pub fn check(&self) -> Result<(), String> {
        check_name("profile name", &self.name)?;
        if RESERVED.contains(&self.name.as_str()) {
            return Err(format!("profile name '{}' is reserved", self.name));
        }
        for glob in &self.tools {
            if glob.trim().is_empty() || glob.chars().any(char::is_control) {
                return Err(format!(
                    "profile '{}': tool glob '{}' is empty or has control characters",
                    self.name,
                    glob.escape_debug()
                ));
            }
        }
        for server in &self.mcp_servers {
            check_name("MCP server name", server)
                .map_err(|e| format!("profile '{}': {e}", self.name))?;
        }
        if self.guidelines.len() > MAX_GUIDELINES {
            return Err(format!(
                "profile '{}': guidelines exceed {MAX_GUIDELINES} bytes",
                self.name
            ));
        }
        Ok(())
    }
}

/// Why a profile edit was refused; the API maps each kind to a status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileError {
    Invalid(String),
    NotFound(String),
    Exists(String),
    /// The default profile cannot be deleted or renamed.
    Protected(String),
}

impl ProfileError {
    pub fn http_status(&self) -> u16 {
        match self {
            ProfileError::Invalid(_) => 400,
            ProfileError::NotFound(_) => 404,
            ProfileError::Exists(_) | ProfileError::Protected(_) => 409,
        }
    }
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileError::Invalid(message) | ProfileError::Protected(message) => {
                f.write_str(message)
            }
            ProfileError::NotFound(name) => write!(
                f,
                "no profile named '{}'; 'shepherd profile list' shows them",
                name.escape_debug()
            ),
            ProfileError::Exists(name) => write!(f, "profile '{name}' already exists"),
        }
    }
}

impl std::error::Error for ProfileError {}

/// Every profile: `default` first (the stored one, or the empty one), then the others.
pub fn all(file: &ConfigFile) -> Vec<Profile> {
    let stored_default = file.profiles.iter().find(|p| p.name == DEFAULT_PROFILE);
    let mut out = vec![stored_default
        .cloned()
        .unwrap_or_else(|| Profile::named(DEFAULT_PROFILE))];
    out.extend(
        file.profiles
            .iter()
            .filter(|p| p.name != DEFAULT_PROFILE)
            .cloned(),
    );
    out
}

pub fn find(file: &ConfigFile, name: &str) -> Result<Profile, ProfileError> {
    all(file)
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| ProfileError::NotFound(name.to_string()))
}

/// The profile used when none is named: `active_profile`, else `default`.
pub fn active_name(file: &ConfigFile) -> &str {
    file.active_profile.as_deref().unwrap_or(DEFAULT_PROFILE)
}

/// The checks a config load runs on `profiles` and `active_profile`.
pub fn validate(file: &ConfigFile) -> Result<(), String> {
    for (i, profile) in file.profiles.iter().enumerate() {
        profile.check()?;
        if file.profiles[..i].iter().any(|p| p.name == profile.name) {
            return Err(format!("profile '{}' is defined twice", profile.name));
        }
    }
    match &file.active_profile {
        Some(name) if find(file, name).is_err() => Err(format!(
            "active_profile '{}' names no profile",
            name.escape_debug()
        )),
        _ => Ok(()),
    }
}

pub fn create(file: &mut ConfigFile, profile: Profile) -> Result<(), ProfileError> {
    profile.check().map_err(ProfileError::Invalid)?;
    if find(file, &profile.name).is_ok() {
        return Err(ProfileError::Exists(profile.name));
    }
    file.profiles.push(profile);
    Ok(())
}

/// Replaces profile `name` with `profile` (which may carry a new name, except for `default`).
pub fn update(file: &mut ConfigFile, name: &str, profile: Profile) -> Result<(), ProfileError> {
    profile.check().map_err(ProfileError::Invalid)?;
    find(file, name)?;
    if name == DEFAULT_PROFILE && profile.name != DEFAULT_PROFILE {
        return Err(ProfileError::Protected(
            "the default profile cannot be renamed".into(),
        ));
    }
    if profile.name != name && find(file, &profile.name).is_ok() {
        return Err(ProfileError::Exists(profile.name));
    }
    if file.active_profile.as_deref() == Some(name) {
        file.active_profile = Some(profile.name.clone());
    }
    match file.profiles.iter_mut().find(|p| p.name == name) {
        Some(stored) => *stored = profile,
        // Only the implicit default is found without being stored.
        None => file.profiles.insert(0, profile),
    }
    Ok(())
}

/// Deletes a profile; the active one falls back to `default`.
pub fn remove(file: &mut ConfigFile, name: &str) -> Result<(), ProfileError> {
    if name == DEFAULT_PROFILE {
        return Err(ProfileError::Protected(
            "the default profile cannot be deleted".into(),
        ));
    }
    find(file, name)?;
    file.profiles.retain(|p| p.name != name);
    if file.active_profile.as_deref() == Some(name) {
        file.active_profile = None;
    }
    Ok(())
}

pub fn set_active(file: &mut ConfigFile, name: &str) -> Result<Profile, ProfileError> {
    let profile = find(file, name)?;
    file.active_profile = (name != DEFAULT_PROFILE).then(|| name.to_string());
    Ok(profile)
}

/// Loads config.json, applies `edit`, and writes it back atomically.
pub fn edit_config<T>(
    path: &Path,
    edit: impl FnOnce(&mut ConfigFile) -> Result<T, ProfileError>,
) -> Result<T, EditError> {
    let mut file = config::load(path).map_err(EditError::Config)?;
    let value = edit(&mut file).map_err(EditError::Profile)?;
    config::validate(&file).map_err(|m| EditError::Profile(ProfileError::Invalid(m)))?;
    config::save(path, &file).map_err(EditError::Io)?;
    Ok(value)
}

/// Why [`edit_config`] failed.
#[derive(Debug)]
pub enum EditError {
    Profile(ProfileError),
    Config(config::ConfigError),
    Io(std::io::Error),
}

impl fmt::Display for EditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EditError::Profile(e) => e.fmt(f),
            EditError::Config(e) => e.fmt(f),
            EditError::Io(e) => write!(f, "cannot save the config: {e}"),
        }
    }
}

/// Names of the MCP servers in config.json's `mcp_servers`.
pub fn configured_mcp_servers(file: &ConfigFile) -> Vec<String> {
    file.mcp_servers.keys().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_always_exists_and_cannot_be_removed_or_renamed() {
        let mut file = ConfigFile::default();
        assert_eq!(all(&file), vec![Profile::named("default")]);
        assert!(matches!(
            remove(&mut file, "default"),
            Err(ProfileError::Protected(_))
        ));
        let renamed = Profile::named("other");
        assert!(matches!(
            update(&mut file, "default", renamed),
            Err(ProfileError::Protected(_))
        ));
        let mut edited = Profile::named("default");
        edited.guidelines = "be terse".into();
        update(&mut file, "default", edited.clone()).unwrap();
        assert_eq!(find(&file, "default"), Ok(edited));
        assert_eq!(all(&file).len(), 1);
    }

    #[test]
    fn edits_check_names_and_keep_active_consistent() {
        let mut file = ConfigFile::default();
        for bad in ["", "../x", "a/b", "current", "a\nb"] {
            assert!(matches!(
                create(&mut file, Profile::named(bad)),
                Err(ProfileError::Invalid(_))
            ));
        }
        create(&mut file, Profile::named("code")).unwrap();
        assert_eq!(
            create(&mut file, Profile::named("code")),
            Err(ProfileError::Exists("code".into()))
        );
        set_active(&mut file, "code").unwrap();
        update(&mut file, "code", Profile::named("coding")).unwrap();
        assert_eq!(active_name(&file), "coding");
        remove(&mut file, "coding").unwrap();
        assert_eq!(active_name(&file), "default");
        assert!(matches!(
            set_active(&mut file, "nope"),
            Err(ProfileError::NotFound(_))
        ));
        file.active_profile = Some("ghost".into());
        assert!(validate(&file).unwrap_err().contains("ghost"));
    }

    #[test]
    fn applying_restricts_tools_and_appends_guidelines() {
        let profile = Profile {
            name: "ro".into(),
            tools: vec!["read".into(), "grep".into()],
            mcp_servers: vec!["fs".into()],
            guidelines: "Never write files.".into(),
        };
        let mut registry = ToolRegistry::builtin();
        profile.apply_tools(&mut registry);
        assert_eq!(registry.names(), ["read", "grep"]);
        let prompt = profile.system_prompt("base");
        assert!(prompt.starts_with("base\n\n") && prompt.ends_with("Never write files."));
        assert_eq!(Profile::named("x").system_prompt("base"), "base");
        assert!(profile.uses_mcp_server("fs") && !profile.uses_mcp_server("web"));
        assert!(Profile::named("all").uses_mcp_server("web"));
    }
}

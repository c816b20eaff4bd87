//! Where shepherd keeps its files, after the XDG base directory spec: one
//! function per kind of directory, so every module agrees.

use std::path::PathBuf;

/// `$XDG_DATA_HOME/shepherd`, else `$HOME/.local/share/shepherd` (saved sessions).
pub fn data_dir() -> PathBuf {
    xdg_dir("XDG_DATA_HOME", ".local/share")
}

/// `$XDG_STATE_HOME/shepherd`, else `$HOME/.local/state/shepherd`.
pub fn state_dir() -> PathBuf {
    xdg_dir("XDG_STATE_HOME", ".local/state")
}

/// `$NAME/shepherd` when `NAME` is set to an absolute path (the spec says
/// relative and empty values must be ignored), else `$HOME/FALLBACK/shepherd`.
fn xdg_dir(name: &str, fallback: &str) -> PathBuf {
    let non_empty = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    match non_empty(name).map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("shepherd"),
        _ => non_empty("HOME")
            .map_or_else(|| PathBuf::from("."), PathBuf::from)
            .join(fallback)
            .join("shepherd"),
    }
}

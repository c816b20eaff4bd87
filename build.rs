//! Build script: records what `shepherd --version` reports about the build.
//!
//! - `SHEPHERD_GIT_REV`: the git revision, or the `SHEPHERD_GIT_REV` environment
//!   variable when set (a source tarball has no `.git`), else `unknown`.
//! - `SHEPHERD_LLAMA_CRATE`: the locked `llama-cpp-sys-2` version, which pins the
//!   llama.cpp sources compiled in (read from `Cargo.lock`).
//!
//! The llama.cpp build itself is done by the `llama-cpp-sys-2` crate's own
//! build script; C/C++ sources of ours live in `ffi/`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SHEPHERD_GIT_REV");
    let revision = std::env::var("SHEPHERD_GIT_REV")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(git_revision)
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SHEPHERD_GIT_REV={}", revision.trim());

    println!("cargo:rerun-if-changed=Cargo.lock");
    let llama = std::fs::read_to_string("Cargo.lock")
        .ok()
        .and_then(|lock| locked_version(&lock, "llama-cpp-sys-2"))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SHEPHERD_LLAMA_CRATE={llama}");
}

/// `git rev-parse --short=12 HEAD` of this tree's own repository, re-run when HEAD or
/// its branch moves. In a worktree `.git` is a file, so the paths to watch come from git.
fn git_revision() -> Option<String> {
    // A source tarball unpacked inside some other repository must not report its HEAD.
    let top = PathBuf::from(git(&["rev-parse", "--show-toplevel"])?);
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    if top.canonicalize().ok()? != manifest.canonicalize().ok()? {
        return None;
    }
    let revision = git(&["rev-parse", "--short=12", "HEAD"])?;
    // HEAD, the branch it names (absent when detached) and packed-refs, where a branch
    // moves after `git pack-refs`; not all of refs/heads, which other worktrees move.
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    for name in ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref()) {
        if let Some(path) = git(&["rev-parse", "--git-path", name]).map(PathBuf::from) {
            // Watching a missing path would re-run this script on every build.
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    Some(revision)
}

/// One line of git output, or `None` without git or outside a repository.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

/// The `version` of package `name` in a Cargo.lock.
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let wanted = format!("name = \"{name}\"");
    let mut lines = lock.lines().skip_while(|l| l.trim() != wanted).skip(1);
    let version = lines.next()?.trim().strip_prefix("version = \"")?;
    Some(version.trim_end_matches('"').to_string())
}

//! A pull made ready before a byte is fetched ([`Prepared`]): its name and
//! source checked, the target free, the part's files plain or absent, and this
//! process's claim on the target, so that two pulls of one name at once (two
//! API requests) never write the same part. `shepherd pull` and the API
//! server's `/api/pull` ([`prepare_url`]) both run their pulls through it.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::progress::{Progress, Step};
use super::{check_gguf, copy, download, file_name, plain_or_absent, source};
use super::{Part, Pull, Source, DEFAULT_MAX_SIZE};
use crate::llama::gguf;

/// Why a pull was refused before a byte was fetched.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The request itself: its source's scheme, the model's name.
    Invalid(String),
    /// The model is there already, or this process is pulling it now.
    Conflict(String),
    /// The models directory, or a file of the pull that is not a plain file.
    Failed(String),
}

impl Refused {
    pub fn message(&self) -> &str {
        match self {
            Refused::Invalid(m) | Refused::Conflict(m) | Refused::Failed(m) => m,
        }
    }
}

/// The targets this process is pulling: a second pull of one while the first
/// runs (two API requests) is refused rather than writing the same part.
static PULLING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// This process's claim on a target while it pulls it.
#[derive(Debug)]
struct Claim(PathBuf);

impl Claim {
    fn take(target: &Path) -> Option<Claim> {
        let mut pulling = crate::util::sync::lock(&PULLING);
        if pulling.iter().any(|t| t == target) {
            return None;
        }
        pulling.push(target.to_path_buf());
        Some(Claim(target.to_path_buf()))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut pulling = crate::util::sync::lock(&PULLING);
        pulling.retain(|t| *t != self.0);
    }
}

/// A pull checked and claimed, not yet begun: its name is a plain `.gguf`
/// file name, the target is free, the part's files are plain or absent.
#[derive(Debug)]
pub struct Prepared {
    pull: Pull,
    source: Source,
    name: String,
    target: PathBuf,
    part: Part,
    _claim: Claim,
}

/// `POST /api/pull`'s pull into `dir`: an `http://` or `https://` URL only (a
/// remote client must not make the server read its own files), named by the
/// URL's last path segment, capped at [`DEFAULT_MAX_SIZE`] when the server
/// announces no length.
pub fn prepare_url(url: &str, dir: &Path) -> Result<Prepared, Refused> {
    if source(url).map_err(Refused::Invalid)? != Source::Http {
        return Err(Refused::Invalid(format!(
            "{url}: the server pulls http:// and https:// URLs only"
        )));
    }
    let pull = Pull {
        source: url.to_string(),
        sha256: None,
        name: None,
        max_size: None,
        rename: "the URL's path must end in the file's NAME.gguf",
    };
    prepare(&pull, dir)
}

pub(super) fn prepare(pull: &Pull, dir: &Path) -> Result<Prepared, Refused> {
    let name = file_name(pull).map_err(Refused::Invalid)?;
    let source = source(&pull.source).map_err(Refused::Invalid)?;
    // `name` is one plain path segment (checked above): all three stay in `dir`.
    let target = dir.join(&name);
    if fs::symlink_metadata(&target).is_ok() {
        return Err(Refused::Conflict(format!(
            "{} exists already; remove it first to pull it again",
            target.display()
        )));
    }
    let claim = Claim::take(&target).ok_or_else(|| {
        Refused::Conflict(format!(
            "{} is being pulled already; wait for that pull to end",
            target.display()
        ))
    })?;
    fs::create_dir_all(dir)
        .map_err(|e| Refused::Failed(format!("cannot create {}: {e}", dir.display())))?;
    let part = Part {
        data: dir.join(format!("{name}.part")),
        meta: dir.join(format!("{name}.part.meta")),
    };
    plain_or_absent(&part.data).map_err(Refused::Failed)?;
    plain_or_absent(&part.meta).map_err(Refused::Failed)?;
    Ok(Prepared {
        pull: pull.clone(),
        source,
        name,
        target,
        part,
        _claim: claim,
    })
}

impl Prepared {
    /// The model's file name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs the pull; `listen` hears each [`Step`] and stops the download by
    /// answering `false` (the part is kept, as for a dropped connection). The
    /// model's path and its digest.
    pub fn run(self, listen: &mut dyn FnMut(Step) -> bool) -> Result<(PathBuf, String), String> {
        let mut progress = Progress::new(&self.name, Some(listen));
        self.finish(&mut progress)
    }

    pub(super) fn finish(self, progress: &mut Progress<'_>) -> Result<(PathBuf, String), String> {
        let (pull, part, target) = (&self.pull, &self.part, &self.target);
        let max = pull.max_size.unwrap_or(DEFAULT_MAX_SIZE);
        let digest = match &self.source {
            Source::Http => download(&pull.source, part, max, progress),
            Source::File(path) => copy(path, part, max, progress),
        };
        progress.done();
        let digest = digest?;
        progress.step(Step::Verifying);
        let refuse = |why: String| {
            part.discard();
            Err(why)
        };
        if let Err(e) = check_gguf(&part.data) {
            let why = match e {
                gguf::GgufError::Format(ref m) if m.starts_with("not a GGUF") => e.to_string(),
                _ => format!("not a whole GGUF file: {e}"),
            };
            return refuse(format!("{} is {why}; nothing was kept", pull.source));
        }
        if let Some(expected) = &pull.sha256 {
            if *expected != digest {
                return refuse(format!(
                    "the sha256 of {} is {digest}, not {expected}; nothing was kept",
                    pull.source
                ));
            }
        }
        progress.step(Step::Naming);
        let _ = fs::remove_file(&part.meta);
        fs::rename(&part.data, target)
            .map_err(|e| format!("cannot name {}: {e}", target.display()))?;
        Ok((self.target, digest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_pulls_take_http_urls_only_and_one_pull_of_a_name_at_a_time() {
        let dir = crate::util::fs::test_support::TempDir::new("pull-api");
        let invalid = |url: &str| match prepare_url(url, &dir.0) {
            Err(Refused::Invalid(message)) => message,
            other => panic!("{url}: {other:?}"),
        };
        assert!(invalid("file:///etc/m.gguf").contains("http:// and https:// URLs only"));
        assert!(invalid("/srv/m.gguf").contains("http:// and https:// URLs only"));
        assert!(invalid("ftp://h/m.gguf").contains("not ftp://"));
        assert!(invalid("https://h/download?x=1").contains("URL's path must end"));
        assert!(invalid("https://h/m/..").contains("'..'"));
        let first = prepare_url("https://h/m/tiny.gguf", &dir.0).expect("free");
        assert_eq!(first.name(), "tiny.gguf");
        let second = prepare_url("http://other/tiny.gguf", &dir.0).unwrap_err();
        assert!(
            matches!(&second, Refused::Conflict(m) if m.contains("being pulled already")),
            "{second:?}"
        );
        drop(first);
        assert!(prepare_url("http://other/tiny.gguf", &dir.0).is_ok());
        std::fs::write(dir.0.join("tiny.gguf"), b"x").unwrap();
        let there = prepare_url("https://h/m/tiny.gguf", &dir.0).unwrap_err();
        assert!(
            matches!(&there, Refused::Conflict(m) if m.contains("exists already")),
            "{there:?}"
        );
    }
}

//! Conversations on disk: one versioned JSON file per saved session under
//! `$XDG_DATA_HOME/shepherd/sessions` (else `~/.local/share/shepherd/sessions`).
//!
//! Every write goes through [`crate::util::fs::write_atomic`] (temp file in the
//! same directory, write, fsync, rename, fsync the directory), so a crash or a
//! `kill -9` at any moment leaves either the old file or the new one, never a
//! mix. Temp files a killed writer left behind are removed by the next save of
//! the same session once their process is gone.
//!
//! Ids come from users and remote clients and become file names, so
//! [`check_name`] validates them at the trust boundary: a safe charset only
//! (no `/`, `\`, `..`, NUL or control characters), not starting with `.` or
//! `-`, at most [`crate::util::names::MAX_NAME_LEN`] bytes. Profiles use the same rule.
//!
//! What is written is a redacted copy ([`on_disk`]); the live session the
//! model sees is never changed. Tool calls and tool results are machine text
//! and go through [`crate::util::redact`] whole, as in the audit log (an
//! `Authorization` header, a URL's `?api_key=`, a token in a command line or a
//! `Set-Cookie` in a fetched response become `[REDACTED]`); user and assistant
//! prose and thinking lose only the configured secrets
//! ([`redact::known_secrets`]), because shape rules would blank ordinary
//! words. A continued session therefore shows the model `[REDACTED]` where a
//! secret was. Reasoning artefacts are opaque signed data and are written
//! unchanged.
//!
//! Images a message carries are not written into the JSON (an [`Image`]
//! serialises as its type, size and hash only): each is a file
//! `<id>.images/<sha256>.<ext>` beside `<id>.json`, written atomically before
//! the JSON that names it, so a crash leaves every file a saved JSON names in
//! place; an image two messages share is one file. Files no longer named are
//! removed after the JSON is replaced. Loading puts the bytes back, checked
//! again (decoded, hash compared); an image whose file is missing or altered
//! becomes a note in the text where it stood, and the session still loads.
//!
//! Reading is strict and never destructive: a corrupt file or one written by
//! a newer format version is a typed [`StoreError`] naming the file, and the
//! file stays as it is. Files written before the format was versioned (a bare
//! [`Session`] object) are still read.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::core::image::{decode::Format, MAX_IMAGE_BYTES};
use crate::core::{Image, Message, Role, Session};
use crate::util::names::check_name;
use crate::util::redact;

/// The format version this build writes; it reads this one and older.
pub const FORMAT_VERSION: u32 = 1;
/// The value of the `format` field, so a stray JSON file is not mistaken for a session.
pub const FORMAT_NAME: &str = "shepherd-session";
const EXTENSION: &str = "json";

/// A saved session as it is on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedSession {
    pub format: String,
    pub version: u32,
    pub id: String,
    /// Seconds since the Unix epoch.
    pub saved_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The whole conversation: system prompt, messages (tool calls, thinking
    /// and reasoning artefacts included) and token counters.
    pub session: Session,
}

impl SavedSession {
    /// The conversation to continue under `system_prompt`, the one in effect
    /// now (flags or the profile may have changed since the save).
    pub fn into_session(self, system_prompt: &str) -> Session {
        let mut session = self.session;
        session.system_prompt = system_prompt.to_string();
        session
    }

    /// Wraps `session` for saving under `id`, stamped now.
    pub fn new(id: &str, session: Session) -> SavedSession {
        SavedSession {
            format: FORMAT_NAME.to_string(),
            version: FORMAT_VERSION,
            id: id.to_string(),
            saved_at: now_unix(),
            provider: None,
            model: None,
            session,
        }
    }
}

/// One line of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub id: String,
    pub saved_at: u64,
    pub messages: usize,
    /// The first user message, shortened, for recognising the conversation.
    pub title: String,
}

/// Why a session could not be saved, loaded, listed or deleted.
#[derive(Debug)]
pub enum StoreError {
    /// The id is not a safe file name.
    InvalidId(String),
    NotFound(String),
    /// The file exists but is not a complete, valid session file; it is left as it is.
    Corrupt {
        path: PathBuf,
        message: String,
    },
    /// Written by a newer shepherd; it is left as it is.
    FutureVersion {
        path: PathBuf,
        version: u32,
    },
    Io {
        path: PathBuf,
        error: io::Error,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::InvalidId(message) => f.write_str(message),
            StoreError::NotFound(id) => write!(f, "no saved session '{id}'"),
            StoreError::Corrupt { path, message } => write!(
                f,
                "{} is not a readable session file ({message}); it was left untouched",
                path.display()
            ),
            StoreError::FutureVersion { path, version } => write!(
                f,
                "{} has session format version {version}, newer than this shepherd reads \
                 (up to {FORMAT_VERSION}); it was left untouched",
                path.display()
            ),
            StoreError::Io { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

impl std::error::Error for StoreError {}

pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A fresh id for a session saved without one: `YYYYMMDD-HHMMSS` (UTC).
pub fn new_id() -> String {
    let now = i64::try_from(now_unix()).unwrap_or(0);
    crate::util::time::strftime("%Y%m%d-%H%M%S", now)
}

/// A directory of saved sessions.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The user's sessions directory.
    pub fn user() -> Store {
        Store::at(crate::util::dirs::data_dir().join("sessions"))
    }

    pub fn at(dir: impl Into<PathBuf>) -> Store {
        Store { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of session `id`, once the id is checked.
    pub fn path(&self, id: &str) -> Result<PathBuf, StoreError> {
        check_name("session id", id).map_err(StoreError::InvalidId)?;
        Ok(self.dir.join(format!("{id}.{EXTENSION}")))
    }

    /// Saves a redacted copy ([`on_disk`]) atomically, its images first;
    /// returns the file written.
    pub fn save(&self, saved: &SavedSession) -> Result<PathBuf, StoreError> {
        let path = self.path(&saved.id)?;
        let images = images_dir(&path);
        let named = save_images(&images, &saved.session)?;
        let mut bytes = serde_json::to_vec(&on_disk(saved))
            .map_err(|e| io_error(&path, io::Error::other(e)))?;
        bytes.push(b'\n');
        crate::util::fs::write_atomic(&path, &bytes).map_err(|e| io_error(&path, e))?;
        remove_stale_temps(&self.dir, &file_name(&path));
        remove_unnamed_images(&images, &named);
        Ok(path)
    }

    /// Saves `session` under `id`, stamped now.
    pub fn save_session(&self, id: &str, session: &Session) -> Result<PathBuf, StoreError> {
        self.save(&SavedSession::new(id, session.clone()))
    }

    /// Loads session `id`; every failure is a typed error and the file is never changed.
    pub fn load(&self, id: &str) -> Result<SavedSession, StoreError> {
        let path = self.path(id)?;
        load_file(&path, id)
    }

    /// Whether a file for `id` exists (readable or not).
    pub fn exists(&self, id: &str) -> bool {
        self.path(id).is_ok_and(|p| p.exists())
    }

    /// Deletes session `id` and its images.
    pub fn delete(&self, id: &str) -> Result<(), StoreError> {
        let path = self.path(id)?;
        match fs::remove_file(&path) {
            Ok(()) => {
                let images = images_dir(&path);
                match fs::remove_dir_all(&images) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_error(&images, e)),
                    _ => Ok(()),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(StoreError::NotFound(id.into())),
            Err(e) => Err(io_error(&path, e)),
        }
    }

    /// Every readable session, newest first. Unreadable files are reported in
    /// the second list (as errors) instead of hiding them or failing the listing.
    pub fn list(&self) -> Result<(Vec<Summary>, Vec<StoreError>), StoreError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
            Err(e) => return Err(io_error(&self.dir, e)),
        };
        let mut summaries = Vec::new();
        let mut errors = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            if check_name("session id", id).is_err() {
                continue; // temp files (".x.tmp-…") and foreign names
            }
            match parse_file(&entry.path(), id) {
                Ok(saved) => summaries.push(summary(&saved)),
                Err(error) => errors.push(error),
            }
        }
        summaries.sort_by(|a, b| b.saved_at.cmp(&a.saved_at).then(a.id.cmp(&b.id)));
        Ok((summaries, errors))
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Removes the temp files of `name` in `dir` ([`crate::util::fs::write_atomic`]'s
/// `.NAME.tmp-PID-N`) whose writer process is gone (killed mid-save).
fn remove_stale_temps(dir: &Path, name: &str) {
    let prefix = format!(".{name}.tmp-");
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = file.strip_prefix(&prefix) else {
            continue;
        };
        if writer_gone(rest) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Whether the process whose id starts `pid_and_more` (`PID-N`) has ended.
fn writer_gone(pid_and_more: &str) -> bool {
    let pid = pid_and_more
        .split('-')
        .next()
        .and_then(|p| p.parse::<u32>().ok());
    pid.is_some_and(|pid| {
        pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists()
    })
}

/// Where the images of the session file `path` (`ID.json`) live: `ID.images/`.
pub fn images_dir(path: &Path) -> PathBuf {
    path.with_extension("images")
}

/// The file name an image is stored under, `SHA256.EXT`; `None` for a hash or
/// type that could not have come from [`Image::from_bytes`] (a hand-edited
/// session file must not name a path of its choosing).
fn image_file(image: &Image) -> Option<String> {
    let hex = image.sha256.len() == 64
        && image
            .sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let format = Format::from_mime(&image.mime).ok()?;
    hex.then(|| format!("{}.{}", image.sha256, format.extension()))
}

/// Writes each image of `session` not yet stored, atomically; returns the
/// names of every file the session names. An image without bytes (its file
/// was missing when the session was loaded) is named but not written.
fn save_images(dir: &Path, session: &Session) -> Result<Vec<String>, StoreError> {
    let mut named = Vec::new();
    let images = session.messages.iter().flat_map(|m| &m.images);
    for image in images.map(|part| &part.image) {
        let Some(name) = image_file(image) else {
            continue;
        };
        if named.contains(&name) {
            continue;
        }
        let path = dir.join(&name);
        let stored = fs::metadata(&path).is_ok_and(|m| m.len() == image.bytes.len() as u64);
        if !stored && !image.bytes.is_empty() {
            crate::util::fs::write_atomic(&path, &image.bytes).map_err(|e| io_error(&path, e))?;
        }
        named.push(name);
    }
    Ok(named)
}

/// Removes the images no longer named (and temp files of killed writers);
/// the directory too once it is empty.
fn remove_unnamed_images(dir: &Path, named: &[String]) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let temp = file.starts_with('.')
            && file
                .split_once(".tmp-")
                .is_some_and(|(_, rest)| writer_gone(rest));
        if temp || (!file.starts_with('.') && !named.contains(&file)) {
            let _ = fs::remove_file(entry.path());
        }
    }
    if named.is_empty() {
        let _ = fs::remove_dir(dir);
    }
}

/// Puts back the bytes of every image of `session` from `dir`. An image that
/// cannot be (its file missing, too large, altered) becomes a note in the
/// text where it stood.
fn load_images(dir: &Path, session: &mut Session) {
    for message in session.messages.iter_mut().filter(|m| !m.images.is_empty()) {
        let (content, images) = crate::core::image::rebuild(
            &message.content,
            &message.images,
            str::to_string,
            |image| {
                load_image(dir, image).map_err(|why| {
                    format!(
                        "[image: {}, {}x{}, not restored: {why}]",
                        image.mime, image.width, image.height
                    )
                })
            },
        );
        message.content = content;
        message.images = images;
    }
}

/// The stored file of `image`, decoded and checked against its hash.
fn load_image(dir: &Path, image: &Image) -> Result<Image, String> {
    let name = image_file(image).ok_or("the session names it wrongly")?;
    let path = dir.join(name);
    let size = fs::metadata(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    if size > MAX_IMAGE_BYTES as u64 {
        return Err(format!("{} is {size} bytes, too large", path.display()));
    }
    let bytes = fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let loaded = Image::from_bytes(bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if loaded.sha256 != image.sha256 {
        return Err(format!("{} does not match its hash", path.display()));
    }
    Ok(loaded)
}

/// The copy of `saved` that is written to disk: tool calls and results fully
/// redacted, configured secrets removed from every other text.
fn on_disk(saved: &SavedSession) -> SavedSession {
    let mut copy = saved.clone();
    let session = &mut copy.session;
    session.system_prompt = redact::known_secrets(&session.system_prompt);
    session.messages.iter_mut().for_each(redact_message);
    copy
}

fn redact_message(message: &mut Message) {
    // Piece by piece between the images, so each keeps its place in the text.
    match message.role {
        Role::Tool => message.map_text(redact::text),
        _ => message.map_text(redact::known_secrets),
    }
    if let Some(thinking) = &mut message.thinking {
        *thinking = redact::known_secrets(thinking);
    }
    for call in &mut message.tool_calls {
        call.arguments = redact::value(&call.arguments);
    }
}

fn io_error(path: &Path, error: io::Error) -> StoreError {
    StoreError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// Just the fields that decide how to read the rest.
#[derive(Deserialize)]
struct Header {
    format: Option<String>,
    version: Option<u32>,
}

/// Reads a session file with its images ([`parse_file`], then the bytes of
/// each image from the file's images directory).
pub fn load_file(path: &Path, id: &str) -> Result<SavedSession, StoreError> {
    let mut saved = parse_file(path, id)?;
    load_images(&images_dir(path), &mut saved.session);
    Ok(saved)
}

/// Reads a session file without its images' bytes: the current format, older
/// versions, or a bare [`Session`] as written before the format was versioned.
fn parse_file(path: &Path, id: &str) -> Result<SavedSession, StoreError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(StoreError::NotFound(id.to_string()))
        }
        Err(e) => return Err(io_error(path, e)),
    };
    let corrupt = |message: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        message,
    };
    let header: Header = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
    match (header.format.as_deref(), header.version) {
        (Some(FORMAT_NAME), Some(version)) if version > FORMAT_VERSION => {
            Err(StoreError::FutureVersion {
                path: path.to_path_buf(),
                version,
            })
        }
        (Some(FORMAT_NAME), Some(_)) => {
            serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))
        }
        (None, None) => {
            let session: Session =
                serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
            let saved_at = fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            Ok(SavedSession {
                saved_at,
                ..SavedSession::new(id, session)
            })
        }
        _ => Err(corrupt(format!(
            "not a {FORMAT_NAME} file (format and version fields missing or wrong)"
        ))),
    }
}

fn summary(saved: &SavedSession) -> Summary {
    let first_user = saved
        .session
        .messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(|m| m.content.as_str())
        .unwrap_or("");
    let one_line: String = first_user.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut title: String = one_line.chars().take(60).collect();
    if one_line.chars().count() > 60 {
        title.push('…');
    }
    Summary {
        id: saved.id.clone(),
        saved_at: saved.saved_at,
        messages: saved.session.messages.len(),
        title,
    }
}

#[cfg(test)]
mod tests;

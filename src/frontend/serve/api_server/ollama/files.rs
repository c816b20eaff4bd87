//! The models directories' GGUF files on Ollama's model routes: `GET
//! /api/tags` lists them after the served model (as Ollama lists every local
//! model; only the served one answers a chat), and `DELETE /api/delete` and
//! `POST /api/copy` work on the files of the first one (`models_dir`, where
//! `/api/pull` writes), and only there.
//!
//! A model is named as `/api/tags` lists it, by its file name: one plain
//! segment ending in `.gguf` ([`crate::util::names::check_name`]: no `/`, no
//! `..`), so a name never leaves the directory. Deleting removes the entry
//! itself (a symbolic link, not what it points to); the served model's file
//! is never deleted (409). A copy reads only a plain file (never through a
//! link, [`pull::open_nofollow`]) and never replaces a file that is there
//! (409): it is created new, and removed again if the copy fails.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use super::super::error::ApiError;
use super::super::fields::{json_body, Fields};
use super::super::{ApiServer, Loaded};
use super::models::{digest, file_facts};
use super::wire;
use crate::commands::pull;
use crate::frontend::serve::http::{Request, Responder};

/// A listed model file: its name and what its header says.
pub(super) struct Listed {
    name: String,
    facts: super::models::Facts,
}

/// The served model's file, when it is the in-process model.
fn served_file(loaded: &Loaded) -> Option<PathBuf> {
    let path = PathBuf::from(&loaded.local.as_ref()?.props().model_path);
    Some(fs::canonicalize(&path).unwrap_or(path))
}

/// Whether `path` is the served model's file (itself, or a link to it).
fn is_served(loaded: &Loaded, path: &Path) -> bool {
    let Some(served) = served_file(loaded) else {
        return false;
    };
    let raw = PathBuf::from(loaded.local.as_ref().map_or("", |m| &m.props().model_path));
    path == raw || fs::canonicalize(path).is_ok_and(|p| p == served)
}

/// The GGUF files of `dirs` but the served model's, by file name.
pub(super) fn listed(loaded: &Loaded, dirs: &[PathBuf]) -> Vec<Listed> {
    let served = served_file(loaded);
    crate::backend::models::scan(dirs)
        .into_iter()
        .filter(|m| served.is_none() || fs::canonicalize(&m.path).ok() != served)
        .filter_map(|m| {
            let name = m.path.file_name()?.to_str()?.to_string();
            Some(Listed {
                facts: file_facts(Some(&m.path), 0),
                name,
            })
        })
        .collect()
}

/// The entry of `/api/tags` for a listed file.
pub(super) fn tag_entry(listed: &Listed) -> wire::TagEntry<'_> {
    wire::TagEntry {
        name: &listed.name,
        model: &listed.name,
        modified_at: listed.facts.modified_at.clone(),
        size: listed.facts.size,
        digest: digest(&listed.name),
        details: listed.facts.details.clone(),
    }
}

/// The path of the model file `name` in `dir`, checked to stay there; `field`
/// names the request field in the error.
fn model_file(dir: &Path, field: &str, name: &str) -> Result<PathBuf, ApiError> {
    crate::util::names::check_name("the model name", name)
        .map_err(|e| ApiError::invalid(field, e))?;
    if !name.to_ascii_lowercase().ends_with(".gguf") {
        return Err(ApiError::invalid(
            field,
            format!(
                "'{name}' is not a model file's name: name a NAME.gguf file of the models \
                 directory, as /api/tags lists it"
            ),
        ));
    }
    Ok(dir.join(name))
}

fn not_found(name: &str) -> ApiError {
    ApiError::new(
        404,
        "not_found_error",
        format!("model '{name}' not found in the models directory"),
    )
}

/// A named field's string, required.
fn named<'a>(f: &Fields<'a>, key: &str, older: Option<&str>) -> Result<&'a str, ApiError> {
    let older = match older {
        Some(older) => f.str(older)?,
        None => None,
    };
    f.str(key)?
        .or(older)
        .ok_or_else(|| f.missing(key, "a model file's name"))
}

impl ApiServer {
    /// The first models directory: where pulls write, copies and deletes work.
    pub(super) fn models_dir(&self) -> Result<&Path, ApiError> {
        self.models_dirs
            .first()
            .map(PathBuf::as_path)
            .ok_or_else(|| ApiError::new(500, "server_error", "the server has no models directory"))
    }

    /// `DELETE /api/delete`: `model` (or the older `name`).
    pub(in crate::frontend::serve::api_server) fn ollama_delete(
        &self,
        request: &Request,
        responder: Responder,
    ) {
        let Some((loaded, responder)) = self.loaded(responder) else {
            return;
        };
        let deleted = json_body(&request.body).and_then(|value| {
            let f = Fields::of(&value, "")?;
            let name = named(&f, "model", Some("name"))?;
            let path = model_file(self.models_dir()?, "model", name)?;
            if fs::symlink_metadata(&path).is_err() {
                return Err(not_found(name));
            }
            if is_served(loaded, &path) {
                return Err(ApiError::new(
                    409,
                    "invalid_request_error",
                    format!("'{name}' is the model this server serves; it is not deleted"),
                ));
            }
            fs::remove_file(&path).map_err(|e| {
                ApiError::new(500, "server_error", format!("cannot delete '{name}': {e}"))
            })
        });
        match deleted {
            Ok(()) => responder.json(200, &wire::Progress::status("success")),
            Err(error) => self.refuse_ollama(responder, &error),
        }
    }

    /// `POST /api/copy`: `source` to `destination`, both in the models directory.
    pub(in crate::frontend::serve::api_server) fn ollama_copy(
        &self,
        request: &Request,
        responder: Responder,
    ) {
        let copied = json_body(&request.body).and_then(|value| {
            let f = Fields::of(&value, "")?;
            let (from, to) = (named(&f, "source", None)?, named(&f, "destination", None)?);
            let dir = self.models_dir()?;
            let source = model_file(dir, "source", from)?;
            let target = model_file(dir, "destination", to)?;
            copy(&source, from, &target, to)
        });
        match copied {
            Ok(()) => responder.json(200, &wire::Progress::status("success")),
            Err(error) => self.refuse_ollama(responder, &error),
        }
    }
}

/// Copies the plain file `source` to `target`, which must not be there.
fn copy(source: &Path, from: &str, target: &Path, to: &str) -> Result<(), ApiError> {
    match fs::symlink_metadata(source) {
        Err(_) => return Err(not_found(from)),
        Ok(m) if !m.file_type().is_file() => {
            return Err(ApiError::invalid(
                "source",
                format!(
                    "'{from}' is not a plain file (a symbolic link?); only plain files are copied"
                ),
            ))
        }
        Ok(_) => {}
    }
    let failed = |e: String| {
        ApiError::new(
            500,
            "server_error",
            format!("cannot copy '{from}' to '{to}': {e}"),
        )
    };
    let mut input = pull::open_nofollow(source, OpenOptions::new().read(true)).map_err(failed)?;
    let mut output = match OpenOptions::new().write(true).create_new(true).open(target) {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(ApiError::new(
                409,
                "invalid_request_error",
                format!("'{to}' exists already; delete it first"),
            ))
        }
        Err(e) => return Err(failed(e.to_string())),
    };
    let copied = std::io::copy(&mut input, &mut output).and_then(|_| output.sync_all());
    copied.map_err(|e| {
        let _ = fs::remove_file(target);
        failed(e.to_string())
    })
}

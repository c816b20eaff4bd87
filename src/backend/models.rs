//! The local models directories: the GGUF files `shepherd models` lists and
//! `-m NAME` finds by name or unique prefix.
//!
//! The directories are the configured `models_dir` (default
//! `$XDG_DATA_HOME/shepherd/models`) and the cache `make model` fills
//! (`~/.cache/shepherd/models`), searched in that order. A file's name is its
//! file name without `.gguf`; names compare case-insensitively, so `-m smollm2`
//! finds `SmolLM2-135M-Instruct.Q4_1.gguf` when nothing else starts that way.
//! What a listing shows comes from the GGUF header
//! ([`crate::llama::gguf`]), never from loading the weights.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::llama::gguf::{self, GgufInfo};
use crate::util::dirs;

/// A GGUF file in one of the models directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalModel {
    /// The file name without `.gguf`.
    pub name: String,
    pub path: PathBuf,
}

/// A listed model with what its header says (or why it could not be read).
#[derive(Debug)]
pub struct Described {
    pub model: LocalModel,
    pub size: u64,
    pub info: Result<GgufInfo, String>,
}

/// Why `-m NAME` found no single local model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FindError {
    NotFound {
        name: String,
        searched: Vec<PathBuf>,
        /// Local models whose names look like it, closest first.
        near: Vec<String>,
    },
    Ambiguous {
        name: String,
        candidates: Vec<String>,
    },
}

impl fmt::Display for FindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FindError::NotFound {
                name,
                searched,
                near,
            } => {
                let dirs: Vec<String> = searched.iter().map(|d| d.display().to_string()).collect();
                write!(
                    f,
                    "model '{}' not found: it is not a file and no GGUF file in {} is named so \
                     or starts so; `shepherd models` lists them",
                    name.escape_debug(),
                    dirs.join(", ")
                )?;
                match near.as_slice() {
                    [] => Ok(()),
                    near => write!(f, " (did you mean {}?)", near.join(", ")),
                }
            }
            FindError::Ambiguous { name, candidates } => write!(
                f,
                "model '{}' is ambiguous; it could be {}",
                name.escape_debug(),
                candidates.join(", ")
            ),
        }
    }
}

/// The directories searched, in order: `configured` (the config's
/// `models_dir`) or `$XDG_DATA_HOME/shepherd/models`, then the model cache.
pub fn model_dirs(configured: Option<&Path>) -> Vec<PathBuf> {
    let first = configured.map_or_else(|| dirs::data_dir().join("models"), Path::to_path_buf);
    let mut found = vec![first];
    let cache = dirs::model_cache_dir();
    if !found.contains(&cache) {
        found.push(cache);
    }
    found
}

/// The models in `dirs`: their GGUF files (missing directories are skipped) less
/// those named as vision projectors (`mmproj*.gguf`), sorted by name;
/// a name found in two directories is the first directory's.
pub fn scan(dirs: &[PathBuf]) -> Vec<LocalModel> {
    let mut models = scan_with_projectors(dirs);
    models.retain(|m| {
        let file = m.path.file_name().map(|f| f.to_string_lossy());
        !file.is_some_and(|f| is_mmproj_name(&f))
    });
    models
}

/// Whether a file is named as a vision projector is: `mmproj*.gguf`, any case.
pub fn is_mmproj_name(file_name: &str) -> bool {
    let file = file_name.to_lowercase();
    file.starts_with("mmproj") && file.ends_with(".gguf")
}

/// Every `.gguf` file of `dirs` as [`scan`] finds models, the files named as
/// vision projectors included (`shepherd models` lists those apart).
pub fn scan_with_projectors(dirs: &[PathBuf]) -> Vec<LocalModel> {
    let mut models: Vec<LocalModel> = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut here: Vec<LocalModel> = entries
            .flatten()
            .filter_map(|entry| gguf_model(&entry.path()))
            .filter(|m| !models.iter().any(|known| known.name == m.name))
            .collect();
        models.append(&mut here);
    }
    models.sort_by_key(|m| m.name.to_lowercase());
    models
}

/// `path` as a model when it is a file (or a link to one) ending in `.gguf`.
fn gguf_model(path: &Path) -> Option<LocalModel> {
    let file_name = path.file_name()?.to_str()?;
    let stem = file_name.get(..file_name.len().checked_sub(5)?)?;
    let is_gguf = file_name[stem.len()..].eq_ignore_ascii_case(".gguf");
    (is_gguf && !stem.is_empty() && path.is_file()).then(|| LocalModel {
        name: stem.to_string(),
        path: path.to_path_buf(),
    })
}

/// Reads each model's size and header.
pub fn describe(models: Vec<LocalModel>) -> Vec<Described> {
    models
        .into_iter()
        .map(|model| Described {
            size: std::fs::metadata(&model.path).map_or(0, |m| m.len()),
            info: gguf::read_file(&model.path).map_err(|e| e.to_string()),
            model,
        })
        .collect()
}

/// The model `name` names: the one whose name (or file name) equals it, else
/// the only one whose name starts with it, case-insensitively.
pub fn find(name: &str, dirs: &[PathBuf]) -> Result<PathBuf, FindError> {
    let wanted = name.to_lowercase();
    let models = scan(dirs);
    let exact = models.iter().find(|m| {
        let file = m
            .path
            .file_name()
            .map(|f| f.to_string_lossy().to_lowercase());
        m.name.to_lowercase() == wanted || file.as_deref() == Some(wanted.as_str())
    });
    if let Some(model) = exact {
        return Ok(model.path.clone());
    }
    let matching: Vec<&LocalModel> = models
        .iter()
        .filter(|m| !wanted.is_empty() && m.name.to_lowercase().starts_with(&wanted))
        .collect();
    match matching.as_slice() {
        [only] => Ok(only.path.clone()),
        [] => Err(FindError::NotFound {
            name: name.to_string(),
            searched: dirs.to_vec(),
            near: near_names(&wanted, &models),
        }),
        many => Err(FindError::Ambiguous {
            name: name.to_string(),
            candidates: many.iter().map(|m| m.name.clone()).collect(),
        }),
    }
}

/// Up to five local names that share a run of at least four characters with
/// `wanted` (lower case), longest run first: `qwen2.5-7b` finds `Qwen2.5-7B-Instruct-Q4_K_M`.
fn near_names(wanted: &str, models: &[LocalModel]) -> Vec<String> {
    let mut scored: Vec<(usize, &str)> = models
        .iter()
        .map(|m| (common_run(wanted, &m.name.to_lowercase()), m.name.as_str()))
        .filter(|(run, _)| *run >= 4)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    scored
        .into_iter()
        .take(5)
        .map(|(_, name)| name.to_string())
        .collect()
}

/// The length in bytes of the longest run `a` and `b` share.
fn common_run(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut best = 0;
    let mut row = vec![0usize; b.len() + 1];
    for x in a {
        let mut diagonal = 0;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if x == y { diagonal + 1 } else { 0 };
            best = best.max(row[j + 1]);
            diagonal = above;
        }
    }
    best
}

/// A parameter count as people write it: `135M`, `7.2B`.
pub fn human_count(n: u64) -> String {
    let scaled = |div: f64, unit: &str| {
        let v = n as f64 / div;
        if v >= 100.0 {
            format!("{v:.0}{unit}")
        } else {
            format!("{v:.1}{unit}")
        }
    };
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => scaled(1e3, "K"),
        1_000_000..=999_999_999 => scaled(1e6, "M"),
        _ => scaled(1e9, "B"),
    }
}

/// A file size in binary units: `94 MiB`, `1.2 GiB`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value >= 100.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(tag: &str, files: &[&str]) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("shepherd-models-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        for file in files {
            std::fs::write(dir.join(file), b"GGUF").expect("file");
        }
        dir
    }

    #[test]
    fn names_and_unique_prefixes_resolve_case_insensitively() {
        let dir = dir_with(
            "find",
            &[
                "SmolLM2-135M-Instruct.Q4_1.gguf",
                "gemma-3-270m-q4_k_m.gguf",
                "gemma-3-1b.Q8_0.GGUF",
                "notes.txt",
            ],
        );
        let dirs = vec![dir.join("missing"), dir.clone()];
        let found = |name| find(name, &dirs);
        let smol = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
        assert_eq!(found("smollm2"), Ok(smol.clone()));
        assert_eq!(found("SMOLLM2-135M-Instruct.Q4_1"), Ok(smol.clone()));
        assert_eq!(found("smollm2-135m-instruct.q4_1.gguf"), Ok(smol));
        assert_eq!(found("gemma-3-2"), Ok(dir.join("gemma-3-270m-q4_k_m.gguf")));
        assert_eq!(
            found("gemma-3-1b.q8_0"),
            Ok(dir.join("gemma-3-1b.Q8_0.GGUF"))
        );
        match found("Gemma") {
            Err(e @ FindError::Ambiguous { .. }) => {
                let message = e.to_string();
                assert!(message.contains("gemma-3-1b.Q8_0"), "{message}");
                assert!(message.contains("gemma-3-270m-q4_k_m"), "{message}");
            }
            other => panic!("expected ambiguous, got {other:?}"),
        }
        for missing in ["notes", "llama", ""] {
            let message = found(missing).unwrap_err().to_string();
            assert!(message.contains(&dir.display().to_string()), "{message}");
            assert!(
                message.contains("missing"),
                "every directory is named: {message}"
            );
            assert!(message.contains("shepherd models"), "{message}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_first_directory_wins_a_name_and_listings_are_sorted() {
        let a = dir_with("first", &["b.gguf", "Same.gguf"]);
        let b = dir_with("second", &["a.gguf", "Same.gguf", "mmproj-a.gguf"]);
        let with_projector = scan_with_projectors(&[a.clone(), b.clone()]);
        assert_eq!(with_projector.len(), 4, "{with_projector:?}");
        let models = scan(&[a.clone(), b.clone()]);
        let names: Vec<&str> = models.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "Same"]);
        assert_eq!(models[2].path, a.join("Same.gguf"));
        let described = describe(models);
        assert!(described[0].info.is_err(), "a four-byte file is no GGUF");
        assert_eq!(described[0].size, 4);
        let _ = std::fs::remove_dir_all(&a);
        let _ = std::fs::remove_dir_all(&b);
    }

    #[test]
    fn counts_and_sizes_read_as_people_write_them() {
        assert_eq!(human_count(134_515_008), "135M");
        assert_eq!(human_count(7_241_732_096), "7.2B");
        assert_eq!(human_count(512), "512");
        assert_eq!(human_size(98_362_432), "93.8 MiB");
        assert_eq!(human_size(100), "100 B");
        assert_eq!(human_size(253_113_024), "241 MiB");
    }
}

//! `shepherd models`: the GGUF files in the local models directories with what
//! their headers say (size, architecture, parameters, quantisation, context
//! length, chat template), read by [`crate::llama::gguf`] without loading the
//! weights. Vision projectors (`mmproj*.gguf`, libmtmd's `--mmproj` files) are
//! listed apart, each with the models it lies beside, and a model's VISION
//! column names the projector it would be loaded with
//! ([`crate::backend::local::find_mmproj`], llama-server's rule). The
//! directories and the name lookup `-m NAME` uses are [`crate::backend::models`];
//! `models_dir` comes from config.json.

use std::path::{Path, PathBuf};

use super::{CommandError, Output};
use crate::backend::local::find_mmproj;
use crate::backend::models::is_mmproj_name;
use crate::backend::models::{self, Described};
use crate::config::{self, resolve};

/// Runs `shepherd models ARGS...`, reading `models_dir` from the config file at `path`.
pub fn run(args: &[String], path: &Path, out: &mut Output<'_>) -> Result<(), CommandError> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        [] | ["list"] => {
            let file = config::load(path)?;
            list(&resolve::models_dirs(&file), out)
        }
        ["help"] | ["-h"] | ["--help"] => Ok(write!(out.out, "{}", super::command_help("models"))?),
        _ => Err(CommandError::Usage(format!(
            "unknown models command\n{}",
            crate::args::subcommands::usage("models")
        ))),
    }
}

/// Prints the table of the models in `dirs`, then the vision projectors among
/// them and the models each would be loaded with, or where none was found.
pub fn list(dirs: &[PathBuf], out: &mut Output<'_>) -> Result<(), CommandError> {
    let found = models::describe(models::scan_with_projectors(dirs));
    if found.is_empty() {
        let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        let searched = (out.visible)(&searched.join(", ")).into_owned();
        writeln!(out.out, "no GGUF models in {searched}")?;
        return Ok(());
    }
    let (projectors, chat): (Vec<Described>, Vec<Described>) =
        found.into_iter().partition(is_projector);
    // Each model with the projector `--server -m MODEL` would load beside it.
    let paired: Vec<(&Described, Option<PathBuf>)> = chat
        .iter()
        .map(|d| {
            (
                d,
                d.info.is_ok().then(|| find_mmproj(&d.model.path)).flatten(),
            )
        })
        .collect();
    if !paired.is_empty() {
        let rows: Vec<[String; 8]> = paired.iter().map(|(d, p)| row(d, p, out)).collect();
        let header = [
            "NAME", "SIZE", "ARCH", "PARAMS", "QUANT", "CONTEXT", "TEMPLATE", "VISION",
        ];
        table(header, &rows, out)?;
    }
    if !projectors.is_empty() {
        if !paired.is_empty() {
            writeln!(out.out)?;
        }
        let rows: Vec<[String; 4]> = projectors
            .iter()
            .map(|d| projector_row(d, &paired, out))
            .collect();
        table(["PROJECTOR", "SIZE", "PARAMS", "LOADED WITH"], &rows, out)?;
    }
    Ok(())
}

/// A vision projector (libmtmd's `--mmproj` file) rather than a model: named
/// as one (`mmproj*.gguf`) or a `clip` file by its header.
fn is_projector(d: &Described) -> bool {
    let named = d
        .model
        .path
        .file_name()
        .is_some_and(|f| is_mmproj_name(&f.to_string_lossy()));
    let clip = d
        .info
        .as_ref()
        .is_ok_and(|info| info.architecture.as_deref() == Some("clip"));
    named || clip
}

/// Prints `rows` under `header`, each column as wide as its widest cell.
fn table<const N: usize>(
    header: [&str; N],
    rows: &[[String; N]],
    out: &mut Output<'_>,
) -> Result<(), CommandError> {
    let header = header.map(String::from);
    let mut widths = [0usize; N];
    for cells in std::iter::once(&header).chain(rows) {
        for (width, cell) in widths.iter_mut().zip(cells) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for cells in std::iter::once(&header).chain(rows) {
        let line: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        writeln!(out.out, "{}", line.join("  ").trim_end())?;
    }
    Ok(())
}

/// One model's cells, the last its projector's name (or "no"); a file whose
/// header cannot be read says why in place of its fields.
fn row(d: &Described, mmproj: &Option<PathBuf>, out: &Output<'_>) -> [String; 8] {
    let name = (out.visible)(&d.model.name).into_owned();
    let size = models::human_size(d.size);
    match &d.info {
        Ok(info) => [
            name,
            size,
            (out.visible)(info.architecture.as_deref().unwrap_or("?")).into_owned(),
            models::human_count(info.parameters),
            info.quantisation(),
            info.context_length.map_or("?".into(), |n| n.to_string()),
            if info.has_chat_template { "yes" } else { "no" }.to_string(),
            mmproj.as_deref().map_or("no".into(), |p| file_stem(p, out)),
        ],
        Err(error) => [
            name,
            size,
            format!("unreadable: {}", (out.visible)(error)),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        ],
    }
}

/// A projector's cells: its name, size, parameters, and the listed models that
/// load it (those it lies beside; "-" when none does).
fn projector_row(
    d: &Described,
    paired: &[(&Described, Option<PathBuf>)],
    out: &Output<'_>,
) -> [String; 4] {
    let users: Vec<String> = paired
        .iter()
        .filter(|(_, mmproj)| mmproj.as_deref() == Some(d.model.path.as_path()))
        .map(|(model, _)| (out.visible)(&model.model.name).into_owned())
        .collect();
    let params = match &d.info {
        Ok(info) => models::human_count(info.parameters),
        Err(error) => format!("unreadable: {}", (out.visible)(error)),
    };
    [
        (out.visible)(&d.model.name).into_owned(),
        models::human_size(d.size),
        params,
        if users.is_empty() {
            "-".into()
        } else {
            users.join(", ")
        },
    ]
}

/// `path`'s file name without `.gguf`, as the listing names files.
fn file_stem(path: &Path, out: &Output<'_>) -> String {
    let stem = path.file_stem().unwrap_or(path.as_os_str());
    (out.visible)(&stem.to_string_lossy()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    #[test]
    fn lists_the_test_models_and_names_unreadable_files() {
        use crate::util::dirs::test_models::{swa_test_model_path, test_model_path};
        let dir = std::env::temp_dir().join(format!("shepherd-models-cmd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        for model in [test_model_path(), swa_test_model_path()] {
            let name = model.file_name().expect("name");
            std::os::unix::fs::symlink(&model, dir.join(name)).expect("link");
        }
        std::fs::write(dir.join("broken\x1b[2J.gguf"), b"GGUF\x03\0\0\0").expect("file");
        let mut buf = Vec::new();
        let mut out = Output {
            out: &mut buf,
            visible: |t| Cow::Owned(t.replace('\x1b', "\\x1b")),
            terminal: false,
        };
        list(std::slice::from_ref(&dir), &mut out).expect("list");
        let text = String::from_utf8(buf).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("NAME"), "{text}");
        let words = |i: usize| lines[i].split_whitespace().collect::<Vec<_>>();
        assert_eq!(words(1)[0], "broken\\x1b[2J", "sorted, sanitized: {text}");
        assert!(
            lines[1].contains("unreadable: corrupt GGUF header"),
            "{text}"
        );
        assert_eq!(
            words(2),
            [
                "gemma-3-270m-q4_k_m",
                "241",
                "MiB",
                "gemma3",
                "268M",
                "Q4_K_M",
                "32768",
                "no",
                "no"
            ]
        );
        assert_eq!(
            words(3),
            [
                "SmolLM2-135M-Instruct.Q4_1",
                "93.8",
                "MiB",
                "llama",
                "135M",
                "Q4_1",
                "8192",
                "yes",
                "no"
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_projector_is_listed_apart_and_named_beside_its_model() {
        use crate::util::dirs::test_models::{
            swa_test_model_path, synthetic_gguf, test_model_path,
        };
        let root =
            std::env::temp_dir().join(format!("shepherd-models-mmproj-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // SmolLM2 with a projector beside it; Gemma alone in another folder, and a
        // projector named otherwise (its header says `clip`) beside no model.
        let (smol, gemma, lone) = (root.join("smol"), root.join("gemma"), root.join("lone"));
        for dir in [&smol, &gemma, &lone] {
            std::fs::create_dir_all(dir).expect("dir");
        }
        std::os::unix::fs::symlink(test_model_path(), smol.join("SmolLM2.gguf")).expect("link");
        std::os::unix::fs::symlink(swa_test_model_path(), gemma.join("gemma.gguf")).expect("link");
        let beside = smol.join("mmproj-SmolLM2-f16.gguf");
        let elsewhere = lone.join("siglip-vision.gguf");
        for (kind, out) in [("idefics3", &beside), ("gemma3", &elsewhere)] {
            synthetic_gguf(&["--projector".as_ref(), kind.as_ref(), out.as_os_str()]);
        }
        let mut buf = Vec::new();
        let mut out = Output {
            out: &mut buf,
            visible: |t| Cow::Borrowed(t),
            terminal: false,
        };
        list(&[smol, gemma, lone], &mut out).expect("list");
        let text = String::from_utf8(buf).expect("utf-8");
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows[0].last(), Some(&"VISION"), "{text}");
        assert_eq!(rows[1][0], "gemma", "{text}");
        assert_eq!(rows[1].last(), Some(&"no"), "{text}");
        assert_eq!(rows[2][0], "SmolLM2", "{text}");
        assert_eq!(rows[2].last(), Some(&"mmproj-SmolLM2-f16"), "{text}");
        assert!(rows[3].is_empty(), "{text}");
        assert_eq!(
            rows[4],
            ["PROJECTOR", "SIZE", "PARAMS", "LOADED", "WITH"],
            "{text}"
        );
        assert_eq!(
            rows[5],
            ["mmproj-SmolLM2-f16", "1.7", "MiB", "772K", "SmolLM2"],
            "{text}"
        );
        assert_eq!(
            rows[6],
            ["siglip-vision", "1.4", "MiB", "408K", "-"],
            "{text}"
        );
        assert_eq!(rows.len(), 7, "{text}");
        let _ = std::fs::remove_dir_all(&root);
    }
}

//! `shepherd models`: the GGUF files in the local models directories with what
//! their headers say (size, architecture, parameters, quantisation, context
//! length, chat template), read by [`crate::llama::gguf`] without loading the
//! weights. The directories and the name lookup `-m NAME` uses are
//! [`crate::backend::models`]; `models_dir` comes from config.json.

use std::path::{Path, PathBuf};

use super::{CommandError, Output};
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

/// Prints the table of the models in `dirs`, or where none was found.
pub fn list(dirs: &[PathBuf], out: &mut Output<'_>) -> Result<(), CommandError> {
    let found = models::describe(models::scan(dirs));
    if found.is_empty() {
        let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        let searched = (out.visible)(&searched.join(", ")).into_owned();
        writeln!(out.out, "no GGUF models in {searched}")?;
        return Ok(());
    }
    let rows: Vec<[String; 7]> = found.iter().map(|d| row(d, out)).collect();
    let header = [
        "NAME", "SIZE", "ARCH", "PARAMS", "QUANT", "CONTEXT", "TEMPLATE",
    ]
    .map(String::from);
    let mut widths = [0usize; 7];
    for cells in std::iter::once(&header).chain(&rows) {
        for (width, cell) in widths.iter_mut().zip(cells) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for cells in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        writeln!(out.out, "{}", line.join("  ").trim_end())?;
    }
    Ok(())
}

/// One model's cells; a file whose header cannot be read says why in place of its fields.
fn row(d: &Described, out: &Output<'_>) -> [String; 7] {
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
        ],
        Err(error) => [
            name,
            size,
            format!("unreadable: {}", (out.visible)(error)),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        ],
    }
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
                "yes"
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

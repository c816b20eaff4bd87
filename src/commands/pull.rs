//! `shepherd pull URL|FILE [--sha256 HEX] [--name NAME.gguf]`: a GGUF model into
//! the first models directory (`models_dir`), where `-m NAME` finds it.
//!
//! The bytes go to `NAME.gguf.part` first. A download that stops (a dropped
//! connection, Ctrl-C) is resumed by the next pull with an HTTP `Range` request
//! from where the part ends; a server that ignores the range sends it all again
//! and the part starts over. The SHA-256 is computed as the bytes are written
//! (over the part's old bytes first, when resuming); a file that is not GGUF, or
//! whose digest differs from `--sha256`, is removed and never takes the name.
//! Only then is the part renamed: a model under its name is always whole.
//! A progress bar goes to stderr on a terminal; the last line says where the
//! model went and its digest.

use std::fs::{self, File, OpenOptions};
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::CommandError;
use crate::backend::http::{self, Limits};
use crate::config::{self, resolve};
use crate::util::sha256::Sha256;

/// What one pull was asked for.
#[derive(Debug, PartialEq, Eq)]
struct Pull {
    source: String,
    sha256: Option<String>,
    name: Option<String>,
}

/// Runs `shepherd pull ARGS...` with `models_dir` from the config file at `path`.
pub fn run(args: &[String], path: &Path, out: &mut dyn Write) -> Result<(), CommandError> {
    if matches!(args, [word] if ["help", "-h", "--help"].contains(&word.as_str())) {
        return Ok(write!(out, "{}", super::command_help("pull"))?);
    }
    let pull = parse(args).map_err(|message| {
        CommandError::Usage(format!(
            "{message}\n{}",
            crate::args::subcommands::usage("pull")
        ))
    })?;
    let file = config::load(path)?;
    let dir = resolve::models_dirs(&file)
        .into_iter()
        .next()
        .ok_or_else(|| CommandError::Failed("no models directory".into()))?;
    let (target, digest) = pull_into(&pull, &dir).map_err(CommandError::Failed)?;
    writeln!(out, "pulled {} (sha256 {digest})", target.display())?;
    Ok(())
}

fn parse(args: &[String]) -> Result<Pull, String> {
    let mut pull = Pull {
        source: String::new(),
        sha256: None,
        name: None,
    };
    let mut words = args.iter();
    while let Some(word) = words.next() {
        let mut value = |flag: &str| {
            words
                .next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match word.as_str() {
            "--sha256" => {
                let hex = value("--sha256")?.to_ascii_lowercase();
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err("--sha256 takes 64 hex digits".into());
                }
                pull.sha256 = Some(hex);
            }
            "--name" => pull.name = Some(value("--name")?),
            flag if flag.starts_with('-') => return Err(format!("unknown pull flag '{flag}'")),
            source if pull.source.is_empty() => pull.source = source.to_string(),
            extra => return Err(format!("one source only ('{extra}' is a second)")),
        }
    }
    if pull.source.is_empty() {
        return Err("pull needs a URL or a file".into());
    }
    Ok(pull)
}

/// The file name the model gets: `--name`, else the source's last path segment.
fn file_name(pull: &Pull) -> Result<String, String> {
    let from_source = || {
        let path = pull.source.split(['?', '#']).next().unwrap_or("");
        path.rsplit('/').next().unwrap_or("").to_string()
    };
    let name = pull.name.clone().unwrap_or_else(from_source);
    crate::util::names::check_name("the model's file name", &name)?;
    if !name.to_ascii_lowercase().ends_with(".gguf") {
        return Err(format!(
            "'{name}' does not end in .gguf; name it with --name NAME.gguf"
        ));
    }
    Ok(name)
}

/// Pulls into `dir`; the model's path and its digest.
fn pull_into(pull: &Pull, dir: &Path) -> Result<(PathBuf, String), String> {
    let name = file_name(pull)?;
    let target = dir.join(&name);
    if target.exists() {
        return Err(format!(
            "{} exists already; remove it first to pull it again",
            target.display()
        ));
    }
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let part = dir.join(format!("{name}.part"));
    let remote = pull.source.starts_with("http://") || pull.source.starts_with("https://");
    let mut progress = Progress::new(&name);
    let digest = match remote {
        true => download(&pull.source, &part, &mut progress)?,
        false => copy(Path::new(&pull.source), &part, &mut progress)?,
    };
    progress.done();
    let refuse = |why: String| {
        let _ = fs::remove_file(&part);
        Err(why)
    };
    if !is_gguf(&part) {
        return refuse(format!(
            "{} is not a GGUF file; nothing was kept",
            pull.source
        ));
    }
    if let Some(expected) = &pull.sha256 {
        if *expected != digest {
            return refuse(format!(
                "the sha256 of {} is {digest}, not {expected}; nothing was kept",
                pull.source
            ));
        }
    }
    fs::rename(&part, &target).map_err(|e| format!("cannot name {}: {e}", target.display()))?;
    Ok((target, digest))
}

fn is_gguf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"GGUF")
}

/// Copies a local file into the part (always from its start).
fn copy(source: &Path, part: &Path, progress: &mut Progress) -> Result<String, String> {
    let input = File::open(source).map_err(|e| format!("cannot read {}: {e}", source.display()))?;
    let total = input.metadata().ok().map(|m| m.len());
    let output = File::create(part).map_err(|e| format!("cannot write {}: {e}", part.display()))?;
    progress.total = total;
    stream_into(input, output, Sha256::default(), progress)
        .map_err(|e| format!("copying {}: {e}", source.display()))
}

/// Downloads `url` into the part, resuming from its end when there is one.
fn download(url: &str, part: &Path, progress: &mut Progress) -> Result<String, String> {
    let have = fs::metadata(part).map_or(0, |m| m.len());
    let limits = Limits {
        // A large model over a slow link: only silence ends it.
        overall: Duration::from_secs(7 * 24 * 3600),
        ..Limits::default()
    };
    let agent = http::build_agent(url, &limits);
    let mut request = agent.get(url);
    if have > 0 {
        request = request.header("Range", format!("bytes={have}-"));
    }
    let response = request
        .call()
        .map_err(|e| http::transport_error(e, url).to_string())?;
    let status = response.status().as_u16();
    let length = response
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let resumed = status == 206 && have > 0 && range_start(&response) == Some(have);
    let (file, hash) = match (status, resumed) {
        (206, true) => {
            progress.done_before = have;
            (open_append(part)?, hash_of(part)?)
        }
        (200, _) => (
            File::create(part).map_err(|e| e.to_string())?,
            Sha256::default(),
        ),
        _ => return Err(format!("{url}: HTTP {status}")),
    };
    progress.total = length.map(|n| n + progress.done_before);
    let body = response.into_body().into_reader();
    stream_into(body, file, hash, progress)
        .map_err(|e| format!("{url}: {e}; the part is kept, pull again to resume"))
}

/// Where a `206`'s `Content-Range: bytes START-END/TOTAL` starts.
fn range_start(response: &ureq::http::Response<ureq::Body>) -> Option<u64> {
    let value = response.headers().get("content-range")?.to_str().ok()?;
    let range = value.strip_prefix("bytes ")?;
    range.split('-').next()?.trim().parse().ok()
}

fn open_append(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot append to {}: {e}", path.display()))
}

/// The digest of what a part holds so far.
fn hash_of(path: &Path) -> Result<Sha256, String> {
    let mut file = File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut hash = Sha256::default();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => return Ok(hash),
            Ok(n) => hash.update(&buffer[..n]),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        }
    }
}

/// Copies `input` to `output`, hashing and reporting as it goes; the final digest.
fn stream_into(
    mut input: impl Read,
    mut output: File,
    mut hash: Sha256,
    progress: &mut Progress,
) -> std::io::Result<String> {
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = match input.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        output.write_all(&buffer[..n])?;
        hash.update(&buffer[..n]);
        progress.add(n as u64);
    }
    output.sync_all()?;
    Ok(hash.hex())
}

/// The bar on a terminal's stderr: percent, megabytes and speed.
struct Progress {
    name: String,
    total: Option<u64>,
    done_before: u64,
    done: u64,
    started: Instant,
    shown: Instant,
    terminal: bool,
}

impl Progress {
    fn new(name: &str) -> Progress {
        let now = Instant::now();
        Progress {
            name: name.to_string(),
            total: None,
            done_before: 0,
            done: 0,
            started: now,
            shown: now,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    fn add(&mut self, n: u64) {
        self.done += n;
        if self.terminal && self.shown.elapsed() >= Duration::from_millis(200) {
            self.shown = Instant::now();
            let _ = write!(std::io::stderr(), "\r{}\x1b[K", self.line());
        }
    }

    fn line(&self) -> String {
        let mb = |bytes: u64| bytes as f64 / 1e6;
        let have = self.done_before + self.done;
        let rate = mb(self.done) / self.started.elapsed().as_secs_f64().max(1e-3);
        match self.total {
            Some(total) if total > 0 => format!(
                "pulling {} {:3}% {:.1}/{:.1} MB {rate:.1} MB/s",
                self.name,
                have * 100 / total,
                mb(have),
                mb(total)
            ),
            _ => format!("pulling {} {:.1} MB {rate:.1} MB/s", self.name, mb(have)),
        }
    }

    fn done(&self) {
        if self.terminal {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments_and_names() {
        let hex = "ab".repeat(32);
        let pull = parse(&words(&[
            "https://h/m/Qwen3-4B-Q4_K_M.gguf?download=1",
            "--sha256",
            &hex,
        ]))
        .unwrap();
        assert_eq!(pull.sha256.as_deref(), Some(hex.as_str()));
        assert_eq!(file_name(&pull).unwrap(), "Qwen3-4B-Q4_K_M.gguf");
        assert!(parse(&words(&[])).is_err());
        assert!(parse(&words(&["a", "b"])).is_err());
        assert!(parse(&words(&["a", "--sha256", "xyz"])).is_err());
        assert!(parse(&words(&["a", "--bogus"])).is_err());
        let bare = parse(&words(&["https://h/download"])).unwrap();
        assert!(file_name(&bare).unwrap_err().contains("--name"));
        let named = parse(&words(&["https://h/download", "--name", "m.gguf"])).unwrap();
        assert_eq!(file_name(&named).unwrap(), "m.gguf");
        let escape = parse(&words(&["x", "--name", "../m.gguf"])).unwrap();
        assert!(
            file_name(&escape).is_err(),
            "a name never leaves the models directory"
        );
    }
}

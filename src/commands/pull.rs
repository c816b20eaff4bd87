//! `shepherd pull URL|FILE [--sha256 HEX] [--name NAME.gguf] [--max-size SIZE]`:
//! a GGUF model into the first models directory (`models_dir`), where
//! `-m NAME` finds it. A model under its name is always one whole file.
//!
//! The bytes go to `NAME.gguf.part` first, opened with `O_NOFOLLOW`: a part
//! (or its `.meta`) that is a symbolic link or not a plain file is refused with
//! its path named, never written through. The first response's validator (a
//! strong `ETag`, else `Last-Modified`) and its announced length go to
//! `NAME.gguf.part.meta` (written to a temporary file and renamed). A pull that
//! stops (a dropped connection, Ctrl-C) is resumed by the next one with
//! `Range: bytes=N-` and `If-Range: VALIDATOR`: a `206` must answer with
//! `Content-Range: bytes N-END/TOTAL`, the first total and the same validator;
//! a server whose file changed answers `200` and the part starts over from
//! zero, as it does when no validator was kept or the range does not fit.
//!
//! Only the server's own bytes are stored: the request says
//! `Accept-Encoding: identity` and a response with any other
//! `Content-Encoding` is refused before a byte is written (ureq's gzip
//! decoding would hide the header, so the agent's connections note it as the
//! response head arrives). The size is capped while writing: at the announced
//! length (`Content-Length`, or a `Content-Range` total), else at `--max-size`
//! ([`DEFAULT_MAX_SIZE`]); a body past its cap removes the part.
//!
//! The SHA-256 is computed as the bytes are written (over the part's old bytes
//! first, when resuming). Before the part takes the name, its GGUF header and
//! tensor table are checked against its length ([`gguf::check_whole`]): a file
//! cut short, spliced or padded out is removed, as is one whose digest differs
//! from `--sha256`. The rename stays inside the models directory. A progress
//! bar goes to stderr on a terminal; the last line says where the model went
//! and its digest.
//!
//! The API server's `POST /api/pull` uses the same code ([`prepare_url`],
//! then [`Prepared::run`](prepared::Prepared::run)): `http(s)://` URLs only,
//! the default cap, and each [`Step`] to a listener that writes Ollama's
//! progress lines (and stops the download, keeping the part, when its client
//! is gone). A process pulls one target at a time ([`prepared`]): a second
//! pull of a name while the first runs is refused (another process pulling
//! the same name at once is not detected).

use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::CommandError;
use crate::backend::http;
use crate::config::{self, resolve};
use crate::llama::gguf;
use crate::util::sha256::Sha256;
use agent::agent;
pub use prepared::{prepare_url, Refused};
use progress::Progress;
pub use progress::Step;

mod agent;
mod prepared;
mod progress;

/// The most bytes a pull writes when the server announces no length and no
/// `--max-size` is given: 512 GiB. Above any single GGUF file one would run
/// (Hugging Face stores files of at most 50 GB; a 405B model at Q8_0 is about
/// 430 GB, and larger ones come split), yet it stops a body that never ends
/// before it fills most disks.
const DEFAULT_MAX_SIZE: u64 = 512 << 30;

/// `O_NOFOLLOW` (the `libc` crate is not a dependency): opening a symbolic
/// link fails with `ELOOP`. Linux's generic value; 32-bit ARM and PowerPC
/// have their own, and the BSDs and macOS share another.
#[cfg(all(
    target_os = "linux",
    not(any(
        target_arch = "arm",
        target_arch = "powerpc",
        target_arch = "powerpc64"
    ))
))]
const O_NOFOLLOW: i32 = 0o400_000;
#[cfg(all(
    target_os = "linux",
    any(
        target_arch = "arm",
        target_arch = "powerpc",
        target_arch = "powerpc64"
    )
))]
const O_NOFOLLOW: i32 = 0o100_000;
#[cfg(not(target_os = "linux"))]
const O_NOFOLLOW: i32 = 0x100;

/// What one pull was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pull {
    source: String,
    sha256: Option<String>,
    name: Option<String>,
    /// `--max-size`: the most bytes kept when the server announces no length.
    max_size: Option<u64>,
    /// How to name a model whose source's name does not end in `.gguf` (the
    /// end of that error).
    rename: &'static str,
}

/// The end of the error for a source not named `NAME.gguf`, on the command line.
const RENAME_FLAG: &str = "name it with --name NAME.gguf";

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
        max_size: None,
        rename: RENAME_FLAG,
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
            "--max-size" => pull.max_size = Some(parse_size(&value("--max-size")?)?),
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

/// A size: bytes, or a number with `K`, `M`, `G` or `T` (powers of 1024, also
/// written `KiB`, `MiB`, `GiB`, `TiB`; any case).
fn parse_size(text: &str) -> Result<u64, String> {
    let bad = || format!("--max-size takes a size like 500M, 8GiB or 1048576, not '{text}'");
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        _ => return Err(bad()),
    };
    let n: u64 = number.parse().map_err(|_| bad())?;
    match n.checked_mul(1 << shift) {
        Some(0) => Err("--max-size must be more than 0".into()),
        Some(size) => Ok(size),
        None => Err(bad()),
    }
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
        return Err(format!("'{name}' does not end in .gguf; {}", pull.rename));
    }
    Ok(name)
}

/// The files a pull in progress keeps beside the model's name.
#[derive(Debug)]
struct Part {
    /// `NAME.gguf.part`: the bytes so far.
    data: PathBuf,
    /// `NAME.gguf.part.meta`: what a resume checks ([`Meta`]).
    meta: PathBuf,
}

impl Part {
    /// Removes both; a pull that keeps nothing.
    fn discard(&self) {
        let _ = fs::remove_file(&self.data);
        let _ = fs::remove_file(&self.meta);
    }
}

/// Where a pull reads from.
#[derive(Debug, PartialEq, Eq)]
enum Source {
    Http,
    File(PathBuf),
}

/// An `http(s)://` URL, a `file://` URL (`file:///path` or `file://localhost/path`,
/// escapes decoded) or a plain path; another scheme is refused.
fn source(text: &str) -> Result<Source, String> {
    let lower = text.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Ok(Source::Http);
    }
    if lower.starts_with("file://") {
        let rest = &text["file://".len()..];
        let path = match rest.strip_prefix("localhost") {
            Some(path) if path.starts_with('/') => path,
            _ if rest.starts_with('/') => rest,
            _ => {
                return Err(format!(
                    "{text}: a file URL names a local path (file:///path); another host's files are not reachable"
                ))
            }
        };
        let path = path.split(['?', '#']).next().unwrap_or(path);
        return Ok(Source::File(PathBuf::from(
            crate::util::net::percent_decode(path, false),
        )));
    }
    match text.split_once("://") {
        Some((scheme, _)) if !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) => {
            Err(format!("{text}: pull reads http://, https:// and file:// URLs or a local path, not {scheme}://"))
        }
        _ => Ok(Source::File(PathBuf::from(text))),
    }
}

/// Pulls into `dir`; the model's path and its digest.
fn pull_into(pull: &Pull, dir: &Path) -> Result<(PathBuf, String), String> {
    let prepared = prepared::prepare(pull, dir).map_err(|r| r.message().to_string())?;
    let mut progress = Progress::new(prepared.name(), None);
    prepared.finish(&mut progress)
}

/// Refuses a path that is there but is not a plain file (a planted symbolic
/// link, a FIFO that would block the open): a pull writes only its own files.
fn plain_or_absent(path: &Path) -> Result<(), String> {
    match fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(m) if m.file_type().is_file() => Ok(()),
        Ok(m) => {
            let what = match m.file_type().is_symlink() {
                true => "a symbolic link",
                false => "not a plain file",
            };
            Err(format!(
                "{} is {what}; a pull never writes through it: remove it and pull again",
                path.display()
            ))
        }
    }
}

/// Opens a file of the pull (or of the models directory), never following a
/// symbolic link.
pub(crate) fn open_nofollow(path: &Path, options: &mut OpenOptions) -> Result<File, String> {
    options.custom_flags(O_NOFOLLOW).open(path).map_err(|e| {
        plain_or_absent(path)
            .err()
            .unwrap_or_else(|| format!("cannot open {}: {e}", path.display()))
    })
}

/// The part's length, 0 when there is none.
fn part_len(path: &Path) -> u64 {
    fs::symlink_metadata(path).map_or(0, |m| m.len())
}

/// The whole-file GGUF check over the part.
fn check_gguf(path: &Path) -> Result<gguf::GgufInfo, gguf::GgufError> {
    let file = open_nofollow(path, OpenOptions::new().read(true))
        .map_err(|e| gguf::GgufError::Io(std::io::Error::other(e)))?;
    let len = file.metadata().map_err(gguf::GgufError::Io)?.len();
    gguf::check_whole(BufReader::new(file), len)
}

/// Copies a local file into the part (always from its start).
fn copy(
    source: &Path,
    part: &Part,
    max: u64,
    progress: &mut Progress<'_>,
) -> Result<String, String> {
    let input = File::open(source).map_err(|e| format!("cannot read {}: {e}", source.display()))?;
    let total = input
        .metadata()
        .ok()
        .filter(|m| m.file_type().is_file())
        .map(|m| m.len());
    if let Some(total) = total.filter(|&t| t > max) {
        return Err(too_big(&source.display().to_string(), total, max));
    }
    let output = open_nofollow(
        &part.data,
        OpenOptions::new().write(true).create(true).truncate(true),
    )?;
    let _ = fs::remove_file(&part.meta);
    progress.total = total;
    let cap = Cap {
        bytes: total.unwrap_or(max),
        announced: total.is_some(),
    };
    stream_into(input, output, Sha256::default(), progress, cap).map_err(|e| match e {
        Stream::Io(e) => format!("copying {}: {e}", source.display()),
        Stream::Over(cap) => {
            part.discard();
            cap.message(&source.display().to_string())
        }
    })
}

/// What a resume checks, kept in `NAME.gguf.part.meta` from the first response.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    /// The strong `ETag`, else the `Last-Modified` date: the `If-Range` value.
    validator: String,
    /// The whole file's length.
    total: u64,
}

const META_HEAD: &str = "shepherd pull part 1";

impl Meta {
    fn text(&self) -> String {
        format!(
            "{META_HEAD}\nvalidator {}\ntotal {}\n",
            self.validator, self.total
        )
    }

    /// Parses [`Meta::text`]; `None` for anything else (the pull starts over).
    fn parse(text: &str) -> Option<Meta> {
        let mut lines = text.lines();
        (lines.next()? == META_HEAD).then_some(())?;
        let validator = lines.next()?.strip_prefix("validator ")?.to_string();
        let total = lines.next()?.strip_prefix("total ")?.parse().ok()?;
        (!validator.is_empty()).then_some(Meta { validator, total })
    }

    /// The meta beside a part, `None` when there is none or it does not parse.
    fn load(path: &Path) -> Result<Option<Meta>, String> {
        if fs::symlink_metadata(path).is_err() {
            return Ok(None);
        }
        let mut file = open_nofollow(path, OpenOptions::new().read(true))?;
        let mut text = String::new();
        // A meta is three short lines; a longer one is not ours.
        let read = (&mut file).take(4096).read_to_string(&mut text);
        Ok(read.ok().and_then(|_| Meta::parse(&text)))
    }

    /// Writes the meta to a new file beside it, then renames it into place.
    fn store(&self, path: &Path) -> Result<(), String> {
        let mut fresh = path.as_os_str().to_owned();
        fresh.push(".new");
        let fresh = PathBuf::from(fresh);
        plain_or_absent(&fresh)?;
        let mut file = open_nofollow(
            &fresh,
            OpenOptions::new().write(true).create(true).truncate(true),
        )?;
        file.write_all(self.text().as_bytes())
            .and_then(|()| file.sync_all())
            .and_then(|()| fs::rename(&fresh, path))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// Downloads `url` into the part, resuming it when its meta allows.
fn download(
    url: &str,
    part: &Part,
    max: u64,
    progress: &mut Progress<'_>,
) -> Result<String, String> {
    let have = part_len(&part.data);
    let saved = match have {
        0 => None,
        _ => Meta::load(&part.meta)?,
    };
    let resume = saved.filter(|m| have < m.total).map(|m| (have, m));
    match fetch(url, part, max, resume.as_ref(), progress)? {
        Some(digest) => Ok(digest),
        // The range did not continue the part: the whole file, from zero.
        None => fetch(url, part, max, None, progress)?
            .ok_or_else(|| format!("{url}: the server answered a whole request with a range")),
    }
}

/// One request: with `resume` (the part's length and meta) a ranged one. The
/// digest, or `None` when a `206` does not continue the part (start over).
/// Long because every check of the answer's head (status, range, validator,
/// encoding, length) comes before the first byte is written.
fn fetch(
    url: &str,
    part: &Part,
    max: u64,
    resume: Option<&(u64, Meta)>,
    progress: &mut Progress<'_>,
) -> Result<Option<String>, String> {
    let encoding = Arc::new(Mutex::new(None));
    let agent = agent(url, encoding.clone());
    let mut request = agent.get(url).header("Accept-Encoding", "identity");
    if let Some((have, meta)) = resume {
        request = request
            .header("Range", format!("bytes={have}-"))
            .header("If-Range", meta.validator.as_str());
    }
    let response = request
        .call()
        .map_err(|e| http::transport_error(e, url).to_string())?;
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let sniffed = encoding.lock().ok().and_then(|mut e| e.take());
    let encoding = sniffed.or(header("content-encoding").map(str::to_string));
    if let Some(encoding) = encoding.filter(|e| !e.eq_ignore_ascii_case("identity")) {
        return Err(format!(
            "{url}: the server sent the file with Content-Encoding '{encoding}' though \
             asked for identity; a model is kept only as the server's own bytes, never \
             decoded (nothing was written)"
        ));
    }
    let validator = header("etag")
        .filter(|tag| !tag.is_empty() && !tag.starts_with("W/"))
        .or(header("last-modified"))
        .map(str::to_string);
    let length = header("content-length").and_then(|v| v.parse::<u64>().ok());
    let (file, hash, total) = match (status, resume) {
        (206, Some((have, meta))) => {
            let fits = content_range(header("content-range"))
                == Some((*have, meta.total.saturating_sub(1), meta.total))
                && validator.as_ref().is_none_or(|v| *v == meta.validator);
            if !fits {
                return Ok(None);
            }
            progress.done_before = *have;
            let file = open_nofollow(&part.data, OpenOptions::new().append(true))?;
            (file, hash_of(&part.data)?, Some(meta.total))
        }
        (200, _) => {
            if let Some(total) = length.filter(|&t| t > max) {
                return Err(too_big(url, total, max));
            }
            let file = open_nofollow(
                &part.data,
                OpenOptions::new().write(true).create(true).truncate(true),
            )?;
            match (validator, length) {
                (Some(validator), Some(total)) => Meta { validator, total }.store(&part.meta)?,
                // Nothing to resume against: the next pull starts over.
                _ => {
                    let _ = fs::remove_file(&part.meta);
                }
            }
            progress.done_before = 0;
            (file, Sha256::default(), length)
        }
        _ => return Err(format!("{url}: HTTP {status}")),
    };
    progress.done = 0;
    progress.total = total;
    let cap = Cap {
        bytes: total.unwrap_or(max),
        announced: total.is_some(),
    };
    let body = response.into_body().into_reader();
    let kept = |e: String| format!("{url}: {e}; the part is kept, pull again to resume");
    let digest = stream_into(body, file, hash, progress, cap).map_err(|e| match e {
        Stream::Io(e) => kept(e.to_string()),
        Stream::Over(cap) => {
            part.discard();
            cap.message(url)
        }
    })?;
    let got = progress.done_before + progress.done;
    match total {
        Some(total) if got != total => {
            Err(kept(format!("the body ended after {got} of {total} bytes")))
        }
        _ => Ok(Some(digest)),
    }
}

/// A `Content-Range: bytes START-END/TOTAL` as its three numbers.
fn content_range(value: Option<&str>) -> Option<(u64, u64, u64)> {
    let range = value?.strip_prefix("bytes ")?;
    let (span, total) = range.split_once('/')?;
    let (start, end) = span.split_once('-')?;
    Some((
        start.trim().parse().ok()?,
        end.trim().parse().ok()?,
        total.trim().parse().ok()?,
    ))
}

fn too_big(source: &str, total: u64, max: u64) -> String {
    format!(
        "{source} is {total} bytes, more than --max-size {max}; pass a larger \
         --max-size to pull it (nothing was written)"
    )
}

/// The digest of what a part holds so far.
fn hash_of(path: &Path) -> Result<Sha256, String> {
    let mut file = open_nofollow(path, OpenOptions::new().read(true))?;
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

/// The most bytes a part may reach.
#[derive(Debug, Clone, Copy)]
struct Cap {
    bytes: u64,
    /// Whether the source announced it (else it is `--max-size`).
    announced: bool,
}

impl Cap {
    fn message(&self, source: &str) -> String {
        match self.announced {
            true => format!(
                "{source} sent more than the {} bytes it announced; nothing was kept",
                self.bytes
            ),
            false => format!(
                "{source} sent more than --max-size {} bytes without announcing a length; \
                 nothing was kept (pass a larger --max-size to pull it)",
                self.bytes
            ),
        }
    }
}

/// Why [`stream_into`] stopped.
enum Stream {
    Io(std::io::Error),
    /// More bytes came than the cap allows.
    Over(Cap),
}

/// Copies `input` to `output`, hashing and reporting as it goes, never past
/// `cap` (counting the part's bytes from before); the final digest.
fn stream_into(
    mut input: impl Read,
    mut output: File,
    mut hash: Sha256,
    progress: &mut Progress<'_>,
    cap: Cap,
) -> Result<String, Stream> {
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = match input.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Stream::Io(e)),
        };
        let have = progress.done_before + progress.done;
        if have.saturating_add(n as u64) > cap.bytes {
            return Err(Stream::Over(cap));
        }
        output.write_all(&buffer[..n]).map_err(Stream::Io)?;
        hash.update(&buffer[..n]);
        if !progress.add(n as u64) {
            return Err(Stream::Io(std::io::Error::other("the pull was stopped")));
        }
    }
    output.sync_all().map_err(Stream::Io)?;
    Ok(hash.hex())
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

    #[test]
    fn file_urls_are_paths_and_other_schemes_are_refused() {
        assert_eq!(source("https://h/m.gguf"), Ok(Source::Http));
        assert_eq!(source("HTTP://h/m.gguf"), Ok(Source::Http));
        let file = |p: &str| Ok(Source::File(PathBuf::from(p)));
        assert_eq!(
            source("file:///srv/my%20models/m.gguf"),
            file("/srv/my models/m.gguf")
        );
        assert_eq!(source("file://localhost/m+1.gguf"), file("/m+1.gguf"));
        assert_eq!(source("./models/m.gguf"), file("./models/m.gguf"));
        assert!(source("file://other-host/m.gguf")
            .unwrap_err()
            .contains("local path"));
        assert!(source("ftp://h/m.gguf").unwrap_err().contains("not ftp://"));
    }

    #[test]
    fn sizes_ranges_heads_and_metas() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("500M"), Ok(500 << 20));
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        for bad in ["", "0", "M", "1.5G", "12Q", "-3", "99999999999999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        let pull = parse(&words(&["x", "--max-size", "1K"])).unwrap();
        assert_eq!(pull.max_size, Some(1024));
        assert!(parse(&words(&["x", "--max-size"])).is_err());
        assert_eq!(content_range(Some("bytes 10-99/100")), Some((10, 99, 100)));
        assert_eq!(content_range(Some("bytes 10-99/*")), None);
        assert_eq!(content_range(Some("10-99/100")), None);
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\ncontent-encoding:  gzip \r\nX: y";
        assert_eq!(agent::head_encoding(head).as_deref(), Some("gzip"));
        assert_eq!(agent::head_encoding(b"HTTP/1.1 200 OK\r\nX: y"), None);
        let meta = Meta {
            validator: "\"abc\"".into(),
            total: 42,
        };
        assert_eq!(Meta::parse(&meta.text()), Some(meta));
        assert_eq!(Meta::parse("something else"), None);
        assert_eq!(
            Meta::parse(&format!("{META_HEAD}\nvalidator \ntotal 3\n")),
            None
        );
    }
}

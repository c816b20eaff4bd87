//! The prompt cache on disk: the KV state of prompts the generation thread
//! decoded, so a later cold start (`-e`, a new REPL, a restarted server)
//! restores the longest cached prefix of its prompt instead of decoding it.
//!
//! **Files.** One file per cached prompt under `$XDG_CACHE_HOME/shepherd/kv/`:
//! `MAGIC`, the cache key (the model file's identity and every context
//! parameter the state depends on, as text), the prompt's tokens, the
//! sequence's state as llama.cpp wrote it, and a checksum of all of that.
//! The name is the key's hash and the tokens' hash, so the same prompt
//! replaces its own file. A file is used only when its magic, key, lengths and
//! checksum all check out, so a file written for another model or other
//! parameters, a truncated or corrupt one, or one from an older format is a
//! miss; such a file is removed, and the next save writes a good one.
//!
//! **Reads** treat the file as untrusted input (the slot routes read files
//! from a directory others may write to): it is opened without following a
//! symlink and without blocking on a FIFO or device, only a regular file is
//! read, and never past the size `fstat` gave, whatever its header promises
//! ([`open_untrusted`], [`read`]; the fuzzer's `slot-file` target runs the
//! reader over arbitrary bytes). The restore then checks that the state holds
//! exactly the tokens the file lists (`Worker::load_state`).
//!
//! **Writes** are atomic (temp file, fsync, rename: [`write_atomic`]) and run
//! on their own thread, so saving never delays a token; the cache joins its
//! writers when it is dropped (a one-shot run exits after its file is
//! complete). After each write the directory is trimmed to its size cap,
//! least recently used first (a restore touches its file).

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::SystemTime;

use crate::llama::Token;
use crate::util::fs::write_atomic;

/// The first bytes of every cache file; the last one is the format's version.
const MAGIC: &[u8; 8] = b"SHPKV\0\0\x01";

/// The longest key a file may carry (keys are a few hundred bytes).
const MAX_KEY: usize = 4096;

/// Where the cache lives and how large it may grow (`kv_cache_max_mb`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptCacheConfig {
    pub dir: PathBuf,
    pub max_bytes: u64,
}

/// A cached prompt: its tokens and the state that holds them.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) tokens: Vec<Token>,
    pub(super) state: Vec<u8>,
}

/// The cache of one context (one model with one set of parameters).
pub(super) struct PromptCache {
    dir: PathBuf,
    key: String,
    /// The key's hash, in hex: the start of this context's file names.
    tag: String,
    max_bytes: u64,
    writers: Vec<JoinHandle<()>>,
    /// This context's files and their tokens, read once (at the first lookup)
    /// and kept up to date by [`PromptCache::save`], so a request does no
    /// directory I/O unless a file can help it.
    index: Option<Vec<(PathBuf, Vec<Token>)>>,
    /// Only files whose tokens all start the prompt are of use: the model's
    /// sliding-window layers cannot be cut far back ([`PromptCache::whole_prefixes`]).
    whole_prefixes: bool,
}

impl PromptCache {
    pub(super) fn new(config: &PromptCacheConfig, key: String) -> PromptCache {
        let tag = format!("{:016x}", hash(key.as_bytes()));
        PromptCache {
            dir: config.dir.clone(),
            key,
            tag,
            max_bytes: config.max_bytes,
            writers: Vec::new(),
            index: None,
            whole_prefixes: false,
        }
    }

    /// Makes [`PromptCache::best`] take only files whose tokens are a prefix of the
    /// prompt, for a model with sliding-window layers: a state that holds more
    /// cannot be cut back more than a window (`Context::truncate_seq`), and loading
    /// it would only cost the file's read.
    pub(super) fn whole_prefixes(mut self) -> PromptCache {
        self.whole_prefixes = true;
        self
    }

    /// The cached prompt that shares the longest prefix with `prompt`, at least
    /// `min` tokens, read whole and checked. Files that fail a check are removed.
    pub(super) fn best(&mut self, prompt: &[Token], min: usize) -> Option<Entry> {
        if prompt.len() < min.max(1) {
            return None;
        }
        let index = self
            .index
            .get_or_insert_with(|| read_index(&self.dir, &self.tag, &self.key));
        let (at, _) = index
            .iter()
            .enumerate()
            .map(|(at, (_, tokens))| (at, common_prefix(tokens, prompt), tokens.len()))
            .filter(|&(_, shared, len)| !self.whole_prefixes || shared == len)
            .map(|(at, shared, _)| (at, shared))
            .filter(|&(_, shared)| shared >= min)
            .max_by_key(|&(_, shared)| shared)?;
        let (path, _) = index.remove(at);
        match read_entry(&path, &self.key) {
            Ok((entry, _)) => {
                touch(&path);
                index.push((path, entry.tokens.clone()));
                Some(entry)
            }
            // Gone (trimmed by another run) or bad: a bad file is removed.
            Err(_) => {
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Saves `tokens` with `state` on a writer thread, then trims the cache.
    pub(super) fn save(&mut self, tokens: Vec<Token>, state: Vec<u8>) {
        self.writers.retain(|w| !w.is_finished());
        let path = self.dir.join(format!(
            "{}-{:016x}.kv",
            self.tag,
            hash(&token_bytes(&tokens))
        ));
        let bytes = encode(&self.key, &tokens, &state);
        if let Some(index) = &mut self.index {
            index.retain(|(known, _)| *known != path);
            index.push((path.clone(), tokens));
        }
        let (dir, max_bytes) = (self.dir.clone(), self.max_bytes);
        let writer = std::thread::Builder::new()
            .name("shepherd-kv-save".into())
            .spawn(move || {
                let written = create_private_dir(&dir).and_then(|()| write_atomic(&path, &bytes));
                match written {
                    Ok(()) => trim(&dir, max_bytes),
                    Err(err) => crate::util::log::debug(crate::util::log::Category::Llm, || {
                        format!("prompt cache: cannot write {}: {err}", path.display())
                    }),
                }
            });
        if let Ok(writer) = writer {
            self.writers.push(writer);
        }
    }
}

impl Drop for PromptCache {
    /// Waits for the files being written, so an exiting run leaves them complete.
    fn drop(&mut self) {
        for writer in self.writers.drain(..) {
            let _ = writer.join();
        }
    }
}

/// The files in `dir` named after `tag`, with their tokens; files that are not
/// `key`'s (or not readable as such) are removed.
fn read_index(dir: &Path, tag: &str, key: &str) -> Vec<(PathBuf, Vec<Token>)> {
    let mut index = Vec::new();
    for path in own_files(dir, tag) {
        match read_tokens(&path, key) {
            Ok(tokens) => index.push((path, tokens)),
            Err(_) => {
                let _ = fs::remove_file(&path);
            }
        }
    }
    index
}

/// The files of the context whose key hashes to `tag`.
fn own_files(dir: &Path, tag: &str) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let prefix = format!("{tag}-");
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.starts_with(&prefix) && name.ends_with(".kv")
        })
        .collect()
}

fn common_prefix(a: &[Token], b: &[Token]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// A fast 64-bit hash over 8-byte words (FNV-style mixing); a checksum, not a MAC.
fn hash(bytes: &[u8]) -> u64 {
    let mut sum = Checksum::new(bytes.len() as u64);
    sum.update(bytes);
    sum.finish()
}

/// [`hash`] computed as the bytes come, for a reader that never holds the
/// whole file twice: the length is known up front (it seeds the hash).
struct Checksum {
    h: u64,
    /// The bytes of an unfinished word.
    pending: [u8; 8],
    n_pending: usize,
}

impl Checksum {
    fn new(len: u64) -> Checksum {
        Checksum {
            h: 0xcbf2_9ce4_8422_2325 ^ len,
            pending: [0; 8],
            n_pending: 0,
        }
    }

    fn word(&mut self, w: u64) {
        self.h = (self.h ^ w)
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(29);
    }

    fn update(&mut self, mut bytes: &[u8]) {
        if self.n_pending > 0 {
            let take = (8 - self.n_pending).min(bytes.len());
            self.pending[self.n_pending..self.n_pending + take].copy_from_slice(&bytes[..take]);
            self.n_pending += take;
            bytes = &bytes[take..];
            if self.n_pending < 8 {
                return;
            }
            self.word(u64::from_le_bytes(self.pending));
            self.n_pending = 0;
        }
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.word(u64::from_le_bytes(word.try_into().unwrap_or_default()));
        }
        let rest = words.remainder();
        self.pending[..rest.len()].copy_from_slice(rest);
        self.n_pending = rest.len();
    }

    /// The hash; the last partial word is mixed in byte by byte.
    fn finish(self) -> u64 {
        let mut h = self.h;
        for &b in &self.pending[..self.n_pending] {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    }
}

/// A reader that hashes what passes through it.
struct Hashing<R> {
    inner: R,
    sum: Checksum,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sum.update(&buf[..n]);
        Ok(n)
    }
}

fn token_bytes(tokens: &[Token]) -> Vec<u8> {
    tokens.iter().flat_map(|t| t.to_le_bytes()).collect()
}

/// The file: magic, key length and key, token count and tokens, state length
/// and state, then the checksum of everything before it.
fn encode(key: &str, tokens: &[Token], state: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + key.len() + 4 * tokens.len() + state.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&(tokens.len() as u32).to_le_bytes());
    out.extend_from_slice(&token_bytes(tokens));
    out.extend_from_slice(&(state.len() as u64).to_le_bytes());
    out.extend_from_slice(state);
    let sum = hash(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Reads up to the tokens: magic, key (must be `key`) and tokens, each length
/// checked against the file's size before anything is allocated.
fn read_head(reader: &mut impl Read, size: u64, key: &str) -> io::Result<Vec<Token>> {
    let mut magic = [0u8; 8];
    reader.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(bad("not a shepherd prompt cache file of this version"));
    }
    let key_len = read_u32(reader)? as usize;
    if key_len != key.len() || key_len > MAX_KEY {
        return Err(bad("written for another model or context"));
    }
    let mut stored = vec![0u8; key_len];
    reader.read_exact(&mut stored)?;
    if stored != key.as_bytes() {
        return Err(bad("written for another model or context"));
    }
    let n_tokens = u64::from(read_u32(reader)?);
    if head_len(key_len, n_tokens) > size {
        return Err(bad("truncated"));
    }
    let mut raw = vec![0u8; 4 * n_tokens as usize];
    reader.read_exact(&mut raw)?;
    let tokens = raw
        .chunks_exact(4)
        .map(|c| Token::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok(tokens)
}

/// The bytes up to the tokens' end: magic, key length, key, token count, tokens.
fn head_len(key_len: usize, n_tokens: u64) -> u64 {
    16 + key_len as u64 + 4 * n_tokens
}

fn read_u32(reader: &mut impl Read) -> io::Result<u32> {
    let mut bytes = [0u8; 4];
    reader.read_exact(&mut bytes)?;
    Ok(u32::from_le_bytes(bytes))
}

/// Opens `path` to read it as untrusted input: a symlink is refused (not
/// followed: `O_NOFOLLOW`, through [`crate::util::sys::at`]), a FIFO or device does
/// not block the open (`O_NONBLOCK`), and only a regular file passes the
/// `fstat` that follows. The file and its size; a missing file is `NotFound`.
pub(super) fn open_untrusted(path: &Path) -> io::Result<(fs::File, u64)> {
    use std::os::fd::AsFd;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let dir = fs::File::open(dir)?;
    let file = crate::util::sys::at::open(dir.as_fd(), name, crate::util::sys::at::OpenAs::Read)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => e,
            // ELOOP: the name is a symlink.
            _ if e.raw_os_error() == Some(40) => bad("a symbolic link, not a file"),
            _ => e,
        })?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(bad(
            "not a regular file (a FIFO, device, socket or directory)",
        ));
    }
    Ok((file, meta.len()))
}

/// The tokens of the file at `path`, when it is one of `key`'s.
fn read_tokens(path: &Path, key: &str) -> io::Result<Vec<Token>> {
    let (file, size) = open_untrusted(path)?;
    read_head(&mut io::BufReader::new(file).take(size), size, key)
}

/// Writes one sequence's `tokens` and `state` to `path` in the cache's own
/// format (checked on reading, tied to `key`), atomically; the bytes written.
pub(super) fn write_state_file(
    path: &Path,
    key: &str,
    tokens: &[Token],
    state: &[u8],
) -> io::Result<usize> {
    let bytes = encode(key, tokens, state);
    write_atomic(path, &bytes)?;
    Ok(bytes.len())
}

/// The whole entry at `path`, every length and the checksum checked; the
/// file is opened as [`open_untrusted`] opens it and read through [`read`],
/// never past its size. Also the file's size.
pub(super) fn read_entry(path: &Path, key: &str) -> io::Result<(Entry, u64)> {
    let (file, size) = open_untrusted(path)?;
    Ok((read(io::BufReader::new(file), size, key)?, size))
}

/// The entry in the `size` bytes `reader` holds (a file of that size). Reads
/// at most `size` bytes, whatever the source: every length in the file is
/// checked against `size` before it is read or allocated, so a source that
/// never ends (or a header that promises more) costs no more than `size`.
/// Pure over its reader, for the fuzzer.
pub(super) fn read(reader: impl Read, size: u64, key: &str) -> io::Result<Entry> {
    let body_len = size.checked_sub(8).ok_or_else(|| bad("truncated"))?;
    let mut hashing = Hashing {
        inner: reader.take(size),
        sum: Checksum::new(body_len),
    };
    let tokens = read_head(&mut hashing, body_len, key)?;
    let mut len = [0u8; 8];
    hashing.read_exact(&mut len)?;
    let state_len = u64::from_le_bytes(len);
    let promised = head_len(key.len(), tokens.len() as u64) + 8;
    if state_len == 0 || promised.checked_add(state_len) != Some(body_len) {
        return Err(bad("state length does not match the file"));
    }
    let mut state = vec![0u8; state_len as usize];
    hashing.read_exact(&mut state)?;
    let Hashing { mut inner, sum } = hashing;
    let mut stored = [0u8; 8];
    inner.read_exact(&mut stored)?;
    if sum.finish() != u64::from_le_bytes(stored) {
        return Err(bad("checksum mismatch"));
    }
    Ok(Entry { tokens, state })
}

/// [`read`] over bytes in memory.
#[cfg(test)]
fn decode(bytes: &[u8], key: &str) -> io::Result<Entry> {
    read(bytes, bytes.len() as u64, key)
}

/// The fuzzer's entry (`crate::fuzz`): arbitrary bytes read as a file of the
/// key the seed was written with, whole and up to the tokens.
#[cfg(test)]
pub(crate) fn fuzz_file(bytes: &[u8]) {
    let _ = decode(bytes, FUZZ_KEY);
    let _ = read_head(&mut &bytes[..], bytes.len() as u64, FUZZ_KEY);
    // A source longer than its stated size is never read past it.
    let _ = read(bytes.chain(io::repeat(0)), bytes.len() as u64, FUZZ_KEY);
}

/// The key of [`fuzz_seed`]'s file.
#[cfg(test)]
const FUZZ_KEY: &str = "fuzz model";

/// A good file for the fuzzer to mutate.
#[cfg(test)]
pub(crate) fn fuzz_seed() -> Vec<u8> {
    encode(FUZZ_KEY, &[1, 2, 3, 40000], b"\x01\0\0\0sequence state")
}

/// Marks the file as just used, for least-recently-used trimming (through a
/// read-only handle: the owner may set its times; a FIFO planted in its place
/// since is not opened for writing).
fn touch(path: &Path) {
    if let Ok((file, _)) = open_untrusted(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Removes the least recently used cache files (of every model) until the
/// directory holds at most `max_bytes`.
fn trim(dir: &Path, max_bytes: u64) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "kv"))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((meta.modified().ok()?, meta.len(), e.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
    files.sort();
    for (_, len, path) in files {
        if total <= max_bytes {
            break;
        }
        if fs::remove_file(&path).is_ok() {
            total -= len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::fs::test_support::temp_dir;

    fn cache(dir: &Path, key: &str, max_bytes: u64) -> PromptCache {
        let config = PromptCacheConfig {
            dir: dir.to_path_buf(),
            max_bytes,
        };
        PromptCache::new(&config, key.into())
    }

    /// Saves and waits for the file to be written.
    fn saved(cache: &mut PromptCache, tokens: &[Token], state: &[u8]) {
        cache.save(tokens.to_vec(), state.to_vec());
        for writer in cache.writers.drain(..) {
            writer.join().unwrap();
        }
    }

    #[test]
    fn the_longest_shared_prefix_wins_and_a_short_one_is_a_miss() {
        let dir = temp_dir("kv-best");
        let mut kv = cache(&dir, "model A", u64::MAX);
        saved(&mut kv, &[1, 2, 3, 4, 5], b"state five");
        saved(&mut kv, &[1, 2, 9], b"state three");
        let entry = kv.best(&[1, 2, 3, 4, 7, 8], 2).expect("a hit");
        assert_eq!(
            (entry.tokens, entry.state),
            (vec![1, 2, 3, 4, 5], b"state five".to_vec())
        );
        assert!(kv.best(&[1, 2, 3, 4], 5).is_none(), "only 4 shared");
        assert!(kv
            .best(&[7], 0)
            .is_some_and(|e| e.tokens.len() == 5 || e.tokens.len() == 3));
        // The same prompt again replaces its own file.
        saved(&mut kv, &[1, 2, 9], b"newer");
        assert_eq!(own_files(&dir, &kv.tag).len(), 2);
        assert_eq!(kv.best(&[1, 2, 9], 3).unwrap().state, b"newer");
        // For a sliding-window model only a whole prefix of the prompt will do.
        let mut kv = cache(&dir, "model A", u64::MAX).whole_prefixes();
        saved(&mut kv, &[1, 2], b"state two");
        assert_eq!(kv.best(&[1, 2, 3, 4, 7, 8], 2).unwrap().tokens, [1, 2]);
        assert!(kv.best(&[1, 2, 9, 4], 3).is_some(), "[1, 2, 9] is whole");
        assert!(kv.best(&[1, 2, 3], 3).is_none(), "[1, 2] is too short");
    }

    #[test]
    fn another_models_files_are_never_loaded() {
        let dir = temp_dir("kv-foreign");
        saved(
            &mut cache(&dir, "model A", u64::MAX),
            &[1, 2, 3],
            b"A's state",
        );
        let mut other = cache(&dir, "model B", u64::MAX);
        assert!(other.best(&[1, 2, 3], 1).is_none());
        // Even renamed to look like B's, A's file is refused (by the next run) and removed.
        let file = fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
        let disguised = dir.join(format!("{}-0000000000000000.kv", other.tag));
        fs::rename(&file, &disguised).unwrap();
        assert!(cache(&dir, "model B", u64::MAX)
            .best(&[1, 2, 3], 1)
            .is_none());
        assert!(!disguised.exists());
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_a_miss_never_a_panic() {
        let dir = temp_dir("kv-corrupt");
        let mut kv = cache(&dir, "model A", u64::MAX);
        saved(&mut kv, &[10, 20, 30], b"the state bytes");
        let path = own_files(&dir, &kv.tag).pop().unwrap();
        let good = fs::read(&path).unwrap();
        assert!(decode(&good, "model A").is_ok());
        for cut in 0..good.len() {
            assert!(decode(&good[..cut], "model A").is_err(), "cut at {cut}");
        }
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            assert!(decode(&bad, "model A").is_err(), "flipped byte {at}");
        }
        // A huge token count in a short file is refused before allocating.
        let mut lying = good.clone();
        let at = 8 + 4 + "model A".len();
        lying[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(read_head(&mut &lying[..], lying.len() as u64, "model A").is_err());
        // On disk: a truncated file is removed and the next save replaces it.
        fs::write(&path, &good[..good.len() / 2]).unwrap();
        assert!(kv.best(&[10, 20, 30], 1).is_none());
        assert!(!path.exists());
        saved(&mut kv, &[10, 20, 30], b"the state bytes");
        assert!(kv.best(&[10, 20, 30], 1).is_some());
    }

    /// Runs `f` on a thread of its own and waits at most 10 s for its answer,
    /// so a read that blocks fails the test instead of hanging it.
    fn within_deadline<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the read blocked")
    }

    #[test]
    fn a_fifo_a_symlink_or_a_directory_is_refused_at_once_and_never_read() {
        let dir = temp_dir("kv-untrusted");
        let good = dir.join("good.bin");
        write_state_file(&good, "model A", &[1, 2], b"state").unwrap();
        let fifo = dir.join("fifo.bin");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero.bin")).unwrap();
        std::os::unix::fs::symlink(&good, dir.join("link.bin")).unwrap();
        fs::create_dir(dir.join("dir.bin")).unwrap();
        for name in ["fifo.bin", "zero.bin", "link.bin", "dir.bin"] {
            let path = dir.join(name);
            let read = within_deadline({
                let path = path.clone();
                move || read_entry(&path, "model A").map(|_| ())
            });
            let error = read.expect_err(name);
            assert_ne!(error.kind(), io::ErrorKind::NotFound, "{name}: {error}");
            let tokens = within_deadline(move || read_tokens(&path, "model A").map(|_| ()));
            assert!(tokens.is_err(), "{name}");
        }
        let refused = |name: &str| read_entry(&dir.join(name), "k").unwrap_err().to_string();
        assert!(refused("link.bin").contains("symbolic link"));
        assert!(refused("fifo.bin").contains("not a regular file"));
        let missing = read_entry(&dir.join("none.bin"), "model A").map(|_| ());
        assert_eq!(missing.unwrap_err().kind(), io::ErrorKind::NotFound);
        let (entry, size) = read_entry(&good, "model A").unwrap();
        assert_eq!((entry.tokens, entry.state), (vec![1, 2], b"state".to_vec()));
        assert_eq!(size, fs::metadata(&good).unwrap().len());
    }

    #[test]
    fn the_reader_never_reads_past_the_size_it_was_given() {
        /// Counts what is read from an endless source.
        struct Counted<R>(R, u64);
        impl<R: Read> Read for Counted<R> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.0.read(buf)?;
                self.1 += n as u64;
                Ok(n)
            }
        }
        let good = encode("model A", &[1, 2, 3], b"the state");
        let size = good.len() as u64;
        let mut endless = Counted(good.as_slice().chain(io::repeat(0)), 0);
        assert!(read(&mut endless, size, "model A").is_ok());
        assert_eq!(endless.1, size);
        // /dev/zero with any size it is said to have: refused, no more read.
        for size in [0, 7, 8, 100, 1 << 20] {
            let mut zeros = Counted(io::repeat(0), 0);
            assert!(read(&mut zeros, size, "model A").is_err());
            assert!(zeros.1 <= size.min(8), "{size}: read {}", zeros.1);
        }
        // A header that promises a state larger than the file: refused before
        // that state is read or allocated.
        let mut lying = good.clone();
        let at = 8 + 4 + "model A".len() + 4 + 3 * 4;
        lying[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let mut source = Counted(lying.as_slice().chain(io::repeat(0)), 0);
        let error = read(&mut source, size, "model A").unwrap_err();
        assert!(error.to_string().contains("state length"), "{error}");
        assert_eq!(source.1, at as u64 + 8);
    }

    #[test]
    fn the_checksum_is_the_same_however_the_bytes_arrive() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        for len in [0, 1, 7, 8, 9, 63, 1000] {
            let whole = hash(&bytes[..len]);
            for step in [1, 3, 8, 13, 1000] {
                let mut sum = Checksum::new(len as u64);
                for chunk in bytes[..len].chunks(step) {
                    sum.update(chunk);
                }
                assert_eq!(sum.finish(), whole, "len {len} step {step}");
            }
        }
    }

    #[test]
    fn the_cache_keeps_to_its_cap_dropping_the_least_recently_used() {
        let dir = temp_dir("kv-cap");
        let state = vec![7u8; 1000];
        let mut kv = cache(&dir, "model A", 2500);
        saved(&mut kv, &[1], &state);
        saved(&mut kv, &[2], &state);
        // Using the first makes the second the least recently used.
        let old = SystemTime::now() - std::time::Duration::from_secs(60);
        for path in own_files(&dir, &kv.tag) {
            fs::File::options()
                .append(true)
                .open(&path)
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        assert!(kv.best(&[1], 1).is_some());
        saved(&mut kv, &[3], &state);
        assert_eq!(own_files(&dir, &kv.tag).len(), 2);
        assert!(kv.best(&[1], 1).is_some(), "used recently: kept");
        assert!(kv.best(&[2], 1).is_none(), "least recently used: removed");
        assert!(kv.best(&[3], 1).is_some(), "just written: kept");
    }
}

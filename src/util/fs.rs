//! Atomic file replacement: a crash leaves the old content or the new, never a
//! mix. Config, sessions, credentials and the line editor's history all save
//! through [`write_atomic`].

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Replaces `path` with `bytes` so that a crash leaves either the old or the new
/// content, never a mix: temp file in the same directory, fsync, rename, fsync
/// the directory. The new file has mode 0600; missing parent directories are
/// created with mode 0700.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |file| file.write_all(bytes))
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// [`write_atomic`] with the writing step supplied, so tests can make it fail.
fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let (dir, temp) = temp_path_for(path)?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    let result = write_temp(&temp, write).and_then(|()| fs::rename(&temp, path));
    if result.is_err() {
        // Best effort: the temp file may not exist if creating it was what failed.
        let _ = fs::remove_file(&temp);
        return result;
    }
    File::open(&dir)?.sync_all()
}

fn write_temp(temp: &Path, write: impl FnOnce(&mut File) -> io::Result<()>) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(temp)?;
    write(&mut file)?;
    file.sync_all()
}

/// The directory of `path` and a temp name beside it that no other writer uses.
fn temp_path_for(path: &Path) -> io::Result<(PathBuf, PathBuf)> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a file path", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let unique = format!(
        ".{}.tmp-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let temp = dir.join(unique);
    Ok((dir, temp))
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    static DIR_COUNTER: AtomicU64 = AtomicU64::new(0);

    /// A fresh, empty directory under the system temp dir, unique per test and process.
    pub fn temp_dir(label: &str) -> PathBuf {
        let n = DIR_COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("shepherd-test-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the temp dir must be writable for tests");
        dir
    }

    /// A unique temporary directory, removed on drop.
    pub struct TempDir(pub PathBuf);

    impl TempDir {
        pub fn new(label: &str) -> Self {
            static COUNTER: AtomicU32 = AtomicU32::new(0);
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir()
                .join(format!("shepherd-test-{label}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("temp dir must be creatable");
            TempDir(dir.canonicalize().expect("temp dir exists"))
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::temp_dir;
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .expect("test dir exists")
            .map(|e| {
                e.expect("readable entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }

    #[test]
    fn atomic_write_creates_dirs_and_leaves_no_temp_files() {
        let dir = temp_dir("atomic");
        let path = dir.join("a/b/config.json");
        write_atomic(&path, b"one").expect("writable");
        write_atomic(&path, b"two").expect("writable");
        assert_eq!(fs::read(&path).expect("written"), b"two");
        assert_eq!(entries(&dir.join("a/b")), ["config.json"]);
        let mode = fs::metadata(&path).expect("written").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = fs::metadata(dir.join("a"))
            .expect("created")
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
    }

    #[test]
    fn failed_write_keeps_the_old_file() {
        let dir = temp_dir("atomic-fail");
        let path = dir.join("config.json");
        write_atomic(&path, b"old").expect("writable");
        let result = write_atomic_with(&path, |f| {
            f.write_all(b"half")?;
            Err(io::Error::other("disk full"))
        });
        assert_eq!(
            result.map_err(|e| e.to_string()),
            Err("disk full".to_string())
        );
        assert_eq!(fs::read(&path).expect("still there"), b"old");
        assert_eq!(entries(&dir), ["config.json"]);
    }

    #[test]
    fn failed_rename_removes_the_temp_file() {
        let dir = temp_dir("atomic-rename");
        // Renaming a file over a non-empty directory fails, even for root.
        let target = dir.join("taken");
        fs::create_dir_all(target.join("inside")).expect("writable");
        assert!(write_atomic(&target, b"new").is_err());
        assert_eq!(entries(&dir), ["taken"]);
        assert!(write_atomic(Path::new("/"), b"x").is_err());
    }
}

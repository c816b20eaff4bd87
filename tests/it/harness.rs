//! Runs the built binary in an isolated home and working directory, with a deadline.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// No test run of the binary may take longer than this.
const DEADLINE: Duration = Duration::from_secs(60);

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let path =
            std::env::temp_dir().join(format!("shepherd-it-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a run of the binary produced.
pub struct Run {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The `stats` event of a `--json` run.
    pub fn json_stats(&self) -> serde_json::Value {
        self.stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["type"] == "stats")
            .unwrap_or_else(|| panic!("a stats event: {} {}", self.stdout, self.stderr))
    }

    fn from(output: Output) -> Run {
        Run {
            status: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Every stdout line parsed as JSON (panics with the line if one is not).
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
            .collect()
    }
}

/// A sandbox for one run: its own HOME, config dir and working directory.
pub struct Sandbox {
    pub root: TempDir,
}

impl Sandbox {
    pub fn new(tag: &str) -> Sandbox {
        let root = TempDir::new(tag);
        for dir in ["home", "config", "work"] {
            std::fs::create_dir_all(root.path().join(dir)).expect("sandbox dir");
        }
        Sandbox { root }
    }

    pub fn work(&self) -> PathBuf {
        self.root.path().join("work")
    }

    pub fn config_dir(&self) -> PathBuf {
        self.root.path().join("config")
    }

    /// Starts `shepherd args...` with piped stdio, without waiting.
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        self.command(args).spawn().expect("spawn shepherd")
    }

    fn command(&self, args: &[&str]) -> Command {
        self.command_of(env!("CARGO_BIN_EXE_shepherd"), args)
    }

    /// `program args...` in this sandbox's environment (what `spawn` runs shepherd in).
    pub fn command_of(&self, program: &str, args: &[&str]) -> Command {
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(self.work())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.root.path().join("home"))
            .env("XDG_CONFIG_HOME", self.config_dir())
            .env("XDG_STATE_HOME", self.root.path().join("home/state"))
            .env("XDG_RUNTIME_DIR", runtime_dir())
            .env("NO_COLOR", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Runs `shepherd args...` with `stdin` as input and waits at most [`DEADLINE`].
    pub fn run(&self, args: &[&str], stdin: &str) -> Run {
        let mut child = self.spawn(args);
        let mut input = child.stdin.take().expect("stdin");
        let stdin = stdin.to_string();
        let writer = std::thread::spawn(move || {
            let _ = input.write_all(stdin.as_bytes());
        });
        let (rx, pid) = collect(child);
        let output = wait_output(rx, pid, DEADLINE)
            .unwrap_or_else(|| panic!("shepherd {args:?} did not finish within {DEADLINE:?}"));
        let _ = writer.join();
        output
    }
}

type OutputReceiver = crossbeam_channel::Receiver<std::io::Result<Output>>;

/// Waits for a child's output on `rx`; kills `pid` and returns `None` after `deadline`.
fn wait_output(rx: OutputReceiver, pid: u32, deadline: Duration) -> Option<Run> {
    match rx.recv_timeout(deadline) {
        Ok(output) => Some(Run::from(output.expect("wait for shepherd"))),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            None
        }
    }
}

/// Collects a spawned child's output on a thread; see [`wait_output`].
pub fn collect(child: std::process::Child) -> (OutputReceiver, u32) {
    let pid = child.id();
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    (rx, pid)
}

/// Waits at most `deadline` for a child started with [`collect`].
pub fn finish(collected: (OutputReceiver, u32), deadline: Duration) -> Option<Run> {
    wait_output(collected.0, collected.1, deadline)
}

/// Polls `condition` until it holds or `deadline` passes; returns whether it held.
pub fn poll_until(deadline: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + deadline;
    while std::time::Instant::now() < end {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    condition()
}

/// Whether any process's command line contains `needle`.
pub fn process_running(needle: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&cmdline)
            .replace('\0', " ")
            .contains(needle)
    })
}

/// Reads a server's stderr on a thread of its own, keeping every line in the
/// returned log, and waits (at most 30 s) for its `listening on ADDRESS` line.
/// Returns the address as printed (`http://127.0.0.1:PORT` or `127.0.0.1:PORT`).
pub fn wait_listening(
    child: &mut std::process::Child,
) -> (String, std::sync::Arc<std::sync::Mutex<String>>) {
    use std::io::{BufRead, BufReader};
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (tx, rx) = crossbeam_channel::bounded(1);
    let stderr = child.stderr.take().expect("the server's stderr is piped");
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(at) = line.find("listening on ") {
                let rest = &line[at + "listening on ".len()..];
                let address = rest.split_whitespace().next().unwrap_or_default();
                let _ = tx.try_send(address.to_string());
            }
            sink.lock().unwrap().push_str(&(line + "\n"));
        }
    });
    let address = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("no listening line; log: {}", log.lock().unwrap()));
    (address, log)
}

/// `--threads` for every test that runs a model: one. Cargo runs the tests side
/// by side, one per core, and ggml's thread pool waits at each barrier by
/// spinning, so two models of two threads each on CI's two cores wait for the
/// threads the other holds (measured: the four official-client server tests
/// 231 s at two threads, 15 s at one; on CI a request ran past its client's
/// 120 s timeout). The unit tests' `TEST_THREADS` is the same.
pub const MODEL_THREADS: &str = "1";

/// The token the tests' servers that run tools are started with (`--auth-token`).
pub const TOKEN: &str = "it-token-5d1f0c9e27b4";

/// A ureq agent for the tests' servers: no proxy, error statuses as responses,
/// at most `timeout` per request, and [`TOKEN`] on every request that carries
/// no `Authorization` of its own.
pub fn http_agent(timeout: Duration) -> ureq::Agent {
    use ureq::http::header::{HeaderValue, AUTHORIZATION};
    let config = ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .middleware(
            |mut request: ureq::http::Request<ureq::SendBody>,
             next: ureq::middleware::MiddlewareNext| {
                if !request.headers().contains_key(AUTHORIZATION) {
                    let value = HeaderValue::from_static("Bearer it-token-5d1f0c9e27b4");
                    request.headers_mut().insert(AUTHORIZATION, value);
                }
                next.handle(request)
            },
        )
        .build();
    ureq::Agent::new_with_config(config)
}

/// The `XDG_RUNTIME_DIR` every sandbox of this test run shares, as every
/// process of one user on one machine does: servers publish their tokens
/// there and shepherd's own clients find them.
pub fn runtime_dir() -> &'static Path {
    use std::os::unix::fs::DirBuilderExt;
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("shepherd-it-run-{}", std::process::id()));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .expect("runtime dir");
        dir
    })
}

/// Writes a real RGB PNG of `width` x `height` pixels to `path` (the image
/// tests' attachment); returns its bytes.
pub fn write_png(path: &Path, width: u32, height: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut bytes, width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().expect("png header");
        let pixels: Vec<u8> = (0..width * height * 3).map(|i| (i * 37) as u8).collect();
        writer.write_image_data(&pixels).expect("png data");
    }
    std::fs::write(path, &bytes).expect("write the png");
    bytes
}

/// Lower-case hex SHA-256 of `path`, by `sha256sum`.
pub fn sha256_of(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("run sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

//! ggml's RPC backend, used the way llama.cpp's `rpc-server` and `--rpc` use it:
//! a worker process lends its devices ([`serve`], `shepherd --rpc-worker`), and a
//! host registers workers as devices ([`connect`], `--rpc HOST:PORT,...`), after
//! which `Model::load` spreads the layers over them by their free memory, like
//! GPUs. llama.cpp lists RPC devices first, before local GPUs, so they come first
//! in `--tensor-split` and `--main-gpu` too.
//!
//! ggml's protocol has no authentication and no encryption: whoever reaches a
//! worker's port can allocate its memory and run graphs there. Where a worker
//! listens is the front-end's decision (loopback unless told otherwise).
//!
//! ggml's RPC client has no error path: when a worker goes away it calls
//! `GGML_ABORT` from its dispatcher thread, and the process ends. So
//!  - [`connect`] checks every worker before ggml sees it (a TCP connect and
//!    ggml's own HELLO, each with a timeout): a wrong address, a worker busy with
//!    another host or another protocol version is an error naming the worker,
//!    not an abort and not a hang;
//!  - once workers are registered, a ggml abort callback finds the worker that no
//!    longer accepts connections and hands a message naming it, and the fix, to
//!    the hook the front-end installed with [`on_lost_worker`], which ends the
//!    process. Nothing can go on: the layers that lived on that worker are gone.

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::{c_char, c_void, CStr, CString};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Mutex, Once, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use llama_cpp_sys_2 as sys;

use crate::util::sys::tcp as sys_tcp;

/// The RPC protocol's major version in the pinned ggml (`RPC_PROTO_MAJOR_VERSION`
/// in ggml-rpc.h of llama-cpp-sys-2); ggml refuses a worker with another one.
const PROTO_MAJOR: u8 = 7;
/// `RPC_CMD_HELLO`, 14 in every version of the protocol.
const CMD_HELLO: u8 = 14;
/// `RPC_CONN_CAPS_SIZE`: transport capabilities sent with HELLO (all zero: plain TCP).
const CONN_CAPS: usize = 24;
/// `GGML_RPC_MAX_SERVERS`.
pub const MAX_WORKERS: usize = 16;
/// The port llama.cpp's `rpc-server` listens on by default.
pub const DEFAULT_PORT: u16 = 50052;

/// How long a worker may take to accept the connection, and then to answer HELLO.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the abort callback waits for each worker to accept a connection.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long [`serve`] waits for ggml's server to listen.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(30);

/// `ggml_backend_rpc_add_server`, found through the RPC registry's proc address.
type AddServerFn = unsafe extern "C" fn(endpoint: *const c_char) -> sys::ggml_backend_reg_t;
/// `ggml_backend_rpc_start_server`, likewise.
type StartServerFn = unsafe extern "C" fn(
    endpoint: *const c_char,
    cache_dir: *const c_char,
    n_threads: usize,
    n_devices: usize,
    devices: *mut sys::ggml_backend_dev_t,
);

/// A worker as the user named it, and the IPv4 address ggml is given: ggml takes
/// IPv4 only, and resolving names here means a static binary never asks ggml's
/// `gethostbyname` to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    pub name: String,
    pub addr: SocketAddrV4,
}

impl Worker {
    /// `HOST:PORT` with an IPv4 address or a host name, resolved to its first
    /// IPv4 address.
    pub fn resolve(name: &str) -> Result<Worker, RpcError> {
        let bad = |reason: &str| RpcError::BadAddress {
            name: name.to_string(),
            reason: reason.to_string(),
        };
        let (host, port) = name
            .rsplit_once(':')
            .ok_or_else(|| bad("expected HOST:PORT"))?;
        if host.is_empty() || host.contains([':', '[', ']']) {
            return Err(bad(
                "expected HOST:PORT with an IPv4 address or a host name (ggml's RPC has no IPv6)",
            ));
        }
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return Err(bad("the port must be a number from 1 to 65535")),
        }
        let found = name
            .to_socket_addrs()
            .map_err(|e| bad(&format!("cannot resolve {host}: {e}")))?;
        let addr = found
            .filter_map(|a| match a {
                SocketAddr::V4(v4) => Some(v4),
                SocketAddr::V6(_) => None,
            })
            .next()
            .ok_or_else(|| bad(&format!("{host} has no IPv4 address")))?;
        Ok(Worker {
            name: name.to_string(),
            addr,
        })
    }
}

impl fmt::Display for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.name == self.addr.to_string() {
            write!(f, "{}", self.name)
        } else {
            write!(f, "{} ({})", self.name, self.addr)
        }
    }
}

/// What went wrong with a worker, on either side.
#[derive(Debug)]
pub enum RpcError {
    /// This binary's ggml has no RPC backend.
    NotBuilt,
    BadAddress {
        name: String,
        reason: String,
    },
    TooMany(usize),
    /// The TCP connection failed.
    Unreachable {
        worker: Worker,
        error: io::Error,
    },
    /// Connected, but no answer to HELLO in time: a worker serves one host at a time.
    NoAnswer {
        worker: Worker,
    },
    /// Something answered, but not ggml's HELLO.
    NotAWorker {
        worker: Worker,
        detail: String,
    },
    /// A worker of another protocol version.
    Version {
        worker: Worker,
        version: (u8, u8, u8),
    },
    NoDevices {
        worker: Worker,
    },
    /// Worker side: the address cannot be bound.
    Bind {
        addr: SocketAddrV4,
        error: io::Error,
    },
    /// Worker side: ggml found nothing to lend.
    NoLocalDevices,
    /// Worker side: ggml's server returned (it does only when it cannot listen or accept).
    Stopped {
        addr: SocketAddrV4,
    },
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcError::NotBuilt => write!(
                f,
                "this shepherd was built without ggml's RPC backend. Rebuild it with \
                 `cargo clean -p llama-cpp-sys-2 && make`: a target directory whose llama.cpp \
                 was built before GGML_RPC=ON (.cargo/config.toml) keeps that old build"
            ),
            RpcError::BadAddress { name, reason } => {
                write!(f, "RPC worker '{name}': {reason}")
            }
            RpcError::TooMany(n) => write!(
                f,
                "{n} RPC workers given: ggml takes at most {MAX_WORKERS}"
            ),
            RpcError::Unreachable { worker, error } => write!(
                f,
                "cannot reach the RPC worker {worker}: {error}. Start one there with \
                 `shepherd --rpc-worker --host ADDRESS --port {}` (a non-loopback ADDRESS also \
                 needs --rpc-allow-remote), or correct --rpc",
                worker.addr.port()
            ),
            RpcError::NoAnswer { worker } => write!(
                f,
                "the RPC worker {worker} accepted the connection but did not answer within {} s. \
                 A worker serves one host at a time: stop the other shepherd (or llama.cpp) \
                 using it, or start another worker on a different --port",
                HELLO_TIMEOUT.as_secs()
            ),
            RpcError::NotAWorker { worker, detail } => write!(
                f,
                "{worker} is not a ggml RPC worker ({detail}); check the port in --rpc"
            ),
            RpcError::Version { worker, version } => write!(
                f,
                "the RPC worker {worker} speaks RPC protocol {}.{}.{}, this shepherd {PROTO_MAJOR}.x: \
                 run the same shepherd version on every box",
                version.0, version.1, version.2
            ),
            RpcError::NoDevices { worker } => {
                write!(f, "the RPC worker {worker} offers no devices")
            }
            RpcError::Bind { addr, error } => write!(
                f,
                "cannot listen on {addr}: {error}. Choose another --port (0 picks a free one)"
            ),
            RpcError::NoLocalDevices => write!(
                f,
                "ggml found no device to lend on this box (see `shepherd --version`)"
            ),
            RpcError::Stopped { addr } => write!(
                f,
                "ggml's RPC server on {addr} stopped (its own message is above)"
            ),
        }
    }
}

impl std::error::Error for RpcError {}

/// Whether this build has ggml's RPC backend.
pub fn supported() -> bool {
    super::init();
    // SAFETY: a pure query of the registered backends; no arguments.
    unsafe { sys::llama_supports_rpc() }
}

/// A function the RPC backend exports by name, or `NotBuilt`.
fn proc_address(name: &CStr) -> Result<*mut c_void, RpcError> {
    if !supported() {
        return Err(RpcError::NotBuilt);
    }
    // SAFETY: the name is a NUL-terminated literal; the registry lives for the process.
    let reg = unsafe { sys::ggml_backend_reg_by_name(c"RPC".as_ptr()) };
    if reg.is_null() {
        return Err(RpcError::NotBuilt);
    }
    // SAFETY: `reg` is the RPC registry (non-null above) and `name` is NUL-terminated.
    let address = unsafe { sys::ggml_backend_reg_get_proc_address(reg, name.as_ptr()) };
    if address.is_null() {
        return Err(RpcError::NotBuilt);
    }
    Ok(address)
}

// ------------------------------------------------------------------------ host side

/// The workers registered with ggml in this process, for the abort callback.
static WORKERS: Mutex<Vec<Worker>> = Mutex::new(Vec::new());
/// What ends the process once a worker is lost (see [`on_lost_worker`]).
static LOST_WORKER: OnceLock<fn(&str) -> !> = OnceLock::new();
static ABORT_CALLBACK: Once = Once::new();

/// Installs what ends the process when ggml aborts over a lost worker: it gets
/// the message to show (naming the worker and the fix) and must not return.
/// Without one the message goes to stderr and ggml aborts the process.
pub fn on_lost_worker(hook: fn(&str) -> !) {
    let _ = LOST_WORKER.set(hook);
}

/// Checks every worker, then registers each one's devices with ggml, so that
/// every model loaded afterwards spreads its layers over them. A worker already
/// registered in this process is not added twice.
pub fn connect(workers: &[Worker]) -> Result<(), RpcError> {
    if workers.len() > MAX_WORKERS {
        return Err(RpcError::TooMany(workers.len()));
    }
    let address = proc_address(c"ggml_backend_rpc_add_server")?;
    // SAFETY: ggml's RPC registry hands out `ggml_backend_rpc_add_server` under this
    // name, whose C signature is `AddServerFn`'s.
    let add_server = unsafe { std::mem::transmute::<*mut c_void, AddServerFn>(address) };
    for worker in workers {
        hello(worker, HELLO_TIMEOUT)?;
    }
    install_abort_callback();
    for worker in workers {
        {
            let mut registered = crate::util::sync::lock(&WORKERS);
            if registered.contains(worker) {
                continue;
            }
            // Before ggml connects: if it aborts in there, the callback names this one.
            registered.push(worker.clone());
        }
        let endpoint = CString::new(worker.addr.to_string()).unwrap_or_default();
        // SAFETY: `endpoint` is NUL-terminated and outlives the call (ggml copies it).
        let reg = unsafe { add_server(endpoint.as_ptr()) };
        if reg.is_null() {
            return Err(RpcError::NoDevices {
                worker: worker.clone(),
            });
        }
        // SAFETY: `reg` is the registry ggml just made for this worker; registering
        // hands it to ggml's device list for the rest of the process.
        unsafe { sys::ggml_backend_register(reg) };
    }
    Ok(())
}

/// When a worker that stays silent counts as gone: keepalive probes after 10 s of
/// silence, every 5 s, 3 unanswered ones (about 25 s), and 30 s for sent data to
/// be acknowledged. A live worker's kernel answers probes however long its
/// devices compute, so only a box that vanished (power cut, cable pulled, a
/// network that drops its packets) trips it.
const KEEPALIVE: sys_tcp::KeepAlive = sys_tcp::KeepAlive {
    idle_secs: 10,
    interval_secs: 5,
    probes: 3,
    user_timeout_ms: 30_000,
};

/// Gives the connections ggml holds to the registered workers TCP keepalive
/// ([`KEEPALIVE`]), and returns how many it found. ggml sets no timeout on its
/// sockets, so a worker box that vanishes without closing its connections would
/// leave ggml waiting for ever; with keepalive its read fails, ggml aborts, and the
/// abort callback names the workers. Call it once the model and its context are
/// made: ggml connects for good while loading (the probe in [`connect`] and the
/// device count ask on connections of their own, closed at once).
pub fn keep_connections_alive() -> usize {
    let workers: Vec<SocketAddrV4> = crate::util::sync::lock(&WORKERS)
        .iter()
        .map(|w| w.addr)
        .collect();
    keep_alive_to(&workers)
}

/// Sets [`KEEPALIVE`] on every socket of this process whose peer is one of
/// `peers`: ggml keeps its sockets to itself, so they are found among the
/// process's descriptors by their peer.
fn keep_alive_to(peers: &[SocketAddrV4]) -> usize {
    if peers.is_empty() {
        return 0;
    }
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    let fds: Vec<i32> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect();
    fds.into_iter()
        .filter(|fd| sys_tcp::peer_v4(*fd).is_some_and(|peer| peers.contains(&peer)))
        .filter(|fd| sys_tcp::keep_alive(*fd, &KEEPALIVE).is_ok())
        .count()
}

/// ggml's HELLO, with timeouts: connects, sends the request, checks the major version.
fn hello(worker: &Worker, timeout: Duration) -> Result<(), RpcError> {
    let addr = SocketAddr::V4(worker.addr);
    let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|error| {
        RpcError::Unreachable {
            worker: worker.clone(),
            error,
        }
    })?;
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    let mut request = vec![CMD_HELLO];
    request.extend_from_slice(&(CONN_CAPS as u64).to_le_bytes());
    request.extend_from_slice(&[0u8; CONN_CAPS]);
    let answer = stream
        .write_all(&request)
        .and_then(|()| read_hello_answer(&mut stream));
    let not_a_worker = |detail: String| RpcError::NotAWorker {
        worker: worker.clone(),
        detail,
    };
    match answer {
        Ok(version) if version.0 == PROTO_MAJOR => Ok(()),
        Ok(version) => Err(RpcError::Version {
            worker: worker.clone(),
            version,
        }),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Err(RpcError::NoAnswer {
                worker: worker.clone(),
            })
        }
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(not_a_worker(
            "it closed the connection without answering".into(),
        )),
        Err(e) => Err(not_a_worker(e.to_string())),
    }
}

/// The version in a HELLO answer: its size (8 bytes), then major, minor, patch,
/// padding and the capabilities.
fn read_hello_answer(stream: &mut TcpStream) -> io::Result<(u8, u8, u8)> {
    let mut size = [0u8; 8];
    stream.read_exact(&mut size)?;
    let size = u64::from_le_bytes(size);
    let expected = 4 + CONN_CAPS;
    if size != expected as u64 {
        // Read no further: a size that is not HELLO's says enough.
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("an answer of {size} bytes, not HELLO's {expected}"),
        ));
    }
    let mut body = [0u8; 4 + CONN_CAPS];
    stream.read_exact(&mut body)?;
    Ok((body[0], body[1], body[2]))
}

fn install_abort_callback() {
    ABORT_CALLBACK.call_once(|| {
        // SAFETY: stores a plain function pointer; `on_ggml_abort` is a valid
        // `extern "C"` function for the whole program.
        unsafe { sys::ggml_set_abort_callback(Some(on_ggml_abort)) };
    });
}

/// ggml's abort callback: ggml calls `abort()` when it returns.
unsafe extern "C" fn on_ggml_abort(message: *const c_char) {
    let ggml = if message.is_null() {
        String::new()
    } else {
        // SAFETY: ggml passes its NUL-terminated message buffer, alive during the call.
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .trim()
            .to_string()
    };
    // A panic must not unwind into C.
    let _ = std::panic::catch_unwind(|| {
        // `try_lock`: the thread that aborted may be the one holding it.
        let workers = WORKERS.try_lock().map(|w| w.clone()).unwrap_or_default();
        let lost = lost_workers(&workers);
        match (
            lost_worker_message(&workers, &lost, &ggml),
            LOST_WORKER.get(),
        ) {
            (Some(text), Some(hook)) => hook(&text),
            (Some(text), None) => eprintln!("shepherd: {text}"),
            (None, _) => eprintln!("ggml: {ggml}"),
        }
    });
}

/// The workers that refuse connections: their process is gone. A worker that
/// just died may still hold its listening socket for a moment after its
/// connection to us closed, so a round in which every worker accepts is tried
/// again after a pause. Two rounds at most reach a live worker: ggml's server
/// listens with a backlog of 1, so a third connection would wait, unaccepted,
/// and time out (a timeout is not taken for a refusal).
fn lost_workers(workers: &[Worker]) -> Vec<Worker> {
    for pause in [Duration::ZERO, Duration::from_millis(300)] {
        std::thread::sleep(pause);
        let lost: Vec<Worker> = workers
            .iter()
            .filter(|w| refuses(w.addr))
            .cloned()
            .collect();
        if !lost.is_empty() {
            return lost;
        }
    }
    Vec::new()
}

/// Whether nothing listens at `addr` any more (refused or unreachable; not a timeout).
fn refuses(addr: SocketAddrV4) -> bool {
    match TcpStream::connect_timeout(&SocketAddr::V4(addr), PROBE_TIMEOUT) {
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
        ),
    }
}

/// What to say when ggml aborts with `ggml` while `workers` are registered and
/// `lost` of them no longer accept connections; `None` when the abort is not about
/// the workers.
fn lost_worker_message(workers: &[Worker], lost: &[Worker], ggml: &str) -> Option<String> {
    let names = |list: &[Worker]| {
        list.iter()
            .map(Worker::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if workers.is_empty() || (lost.is_empty() && !ggml.contains("RPC")) {
        return None;
    }
    let what = match lost {
        [] => format!(
            "an RPC worker (one of {}) stopped answering",
            names(workers)
        ),
        [one] => format!("lost the RPC worker {one}: it no longer accepts connections"),
        many => format!(
            "lost the RPC workers {}: they no longer accept connections",
            names(many)
        ),
    };
    Some(format!(
        "{what}. The model's layers there are gone, so shepherd stops. Restart \
         `shepherd --rpc-worker` on that box (or leave it out of --rpc) and start shepherd \
         again. (ggml: {ggml})"
    ))
}

// ---------------------------------------------------------------------- worker side

/// Where a worker listens and how many CPU threads its CPU device computes with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Port 0 picks a free one.
    pub addr: SocketAddrV4,
    pub threads: usize,
}

/// ggml's RPC server, listening.
#[derive(Debug)]
pub struct Serving {
    pub addr: SocketAddrV4,
    /// The devices lent, as `NAME (description)`.
    pub devices: Vec<String>,
    thread: JoinHandle<()>,
}

impl Serving {
    /// Blocks while ggml serves hosts, one at a time; its server returns only when
    /// it can no longer accept connections.
    pub fn wait(self) -> RpcError {
        let _ = self.thread.join();
        RpcError::Stopped { addr: self.addr }
    }
}

/// Starts ggml's RPC server on a named thread, lending the devices llama.cpp's
/// `rpc-server` lends (every GPU or accelerator, else the CPU), and returns once
/// it accepts connections.
pub fn serve(config: &WorkerConfig) -> Result<Serving, RpcError> {
    let address = proc_address(c"ggml_backend_rpc_start_server")?;
    // SAFETY: ggml's RPC registry hands out `ggml_backend_rpc_start_server` under
    // this name, whose C signature is `StartServerFn`'s.
    let start = unsafe { std::mem::transmute::<*mut c_void, StartServerFn>(address) };
    let devices = lendable_devices();
    if devices.is_empty() {
        return Err(RpcError::NoLocalDevices);
    }
    let addr = bindable(config.addr)?;
    let endpoint = CString::new(addr.to_string()).unwrap_or_default();
    let threads = config.threads.max(1);
    let thread = std::thread::Builder::new()
        .name("rpc-worker".into())
        .spawn(move || {
            // Looked up again here: device handles are raw pointers, not `Send`.
            let mut handles: Vec<sys::ggml_backend_dev_t> =
                lendable_devices().into_iter().map(|(dev, _)| dev).collect();
            // SAFETY: `endpoint` is NUL-terminated, a null cache directory means none,
            // and `handles` holds `handles.len()` valid device handles; all outlive
            // the call, which serves until the process ends.
            unsafe {
                start(
                    endpoint.as_ptr(),
                    std::ptr::null(),
                    threads,
                    handles.len(),
                    handles.as_mut_ptr(),
                )
            };
        })
        .map_err(|error| RpcError::Bind { addr, error })?;
    wait_listening(addr, &thread)?;
    Ok(Serving {
        addr,
        devices: devices.into_iter().map(|(_, name)| name).collect(),
        thread,
    })
}

/// The devices a worker lends: every GPU, else the CPU. (llama.cpp's `rpc-server`
/// lends every device that is not the CPU; an accelerator such as BLAS only helps
/// the CPU, so it is not lent on its own here.)
fn lendable_devices() -> Vec<(sys::ggml_backend_dev_t, String)> {
    let all = super::devices::handles();
    let gpus: Vec<_> = all
        .iter()
        .filter(|(_, device)| device.is_gpu())
        .map(|(dev, device)| (*dev, device.summary()))
        .collect();
    if !gpus.is_empty() {
        return gpus;
    }
    all.into_iter()
        .filter(|(_, device)| device.kind == super::devices::DeviceKind::Cpu)
        .map(|(dev, device)| (dev, device.summary()))
        .take(1)
        .collect()
}

/// `addr` if it can be bound, with port 0 replaced by a free port. The listener is
/// closed again before ggml binds (with SO_REUSEADDR): ggml takes an address, not
/// a socket.
fn bindable(addr: SocketAddrV4) -> Result<SocketAddrV4, RpcError> {
    let listener = TcpListener::bind(addr).map_err(|error| RpcError::Bind { addr, error })?;
    let port = listener
        .local_addr()
        .map_err(|error| RpcError::Bind { addr, error })?
        .port();
    Ok(SocketAddrV4::new(*addr.ip(), port))
}

/// Waits until ggml's server accepts connections on `addr`, or its thread ended.
fn wait_listening(addr: SocketAddrV4, thread: &JoinHandle<()>) -> Result<(), RpcError> {
    // A server on every interface is reached on loopback.
    let target = if addr.ip().is_unspecified() {
        SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, addr.port())
    } else {
        addr
    };
    let deadline = Instant::now() + LISTEN_TIMEOUT;
    while Instant::now() < deadline && !thread.is_finished() {
        let probe = TcpStream::connect_timeout(&SocketAddr::V4(target), PROBE_TIMEOUT);
        if probe.is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(RpcError::Stopped { addr })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(name: &str) -> Worker {
        Worker::resolve(name).unwrap()
    }

    #[test]
    fn workers_are_ipv4_host_port_pairs() {
        let w = worker("127.0.0.1:50052");
        assert_eq!(w.addr, "127.0.0.1:50052".parse().unwrap());
        assert_eq!(w.to_string(), "127.0.0.1:50052");
        let named = worker("localhost:7");
        assert_eq!(named.addr.ip().octets()[0], 127);
        assert!(
            named.to_string().starts_with("localhost:7 (127."),
            "{named}"
        );
        for (bad, why) in [
            ("127.0.0.1", "HOST:PORT"),
            (":50052", "IPv4"),
            ("[::1]:50052", "no IPv6"),
            ("::1:50052", "no IPv6"),
            ("127.0.0.1:0", "1 to 65535"),
            ("127.0.0.1:http", "1 to 65535"),
        ] {
            let message = Worker::resolve(bad).unwrap_err().to_string();
            assert!(message.contains(why), "{bad}: {message}");
            assert!(message.contains(bad), "{bad}: {message}");
        }
    }

    /// A one-connection server on 127.0.0.1:0 that reads HELLO and answers `reply`
    /// (nothing at all for `None`, keeping the connection open until dropped).
    fn fake_worker(reply: Option<Vec<u8>>) -> (Worker, std::thread::JoinHandle<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let name = listener.local_addr().unwrap().to_string();
        let thread = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = vec![0u8; 1 + 8 + CONN_CAPS];
            conn.read_exact(&mut request).unwrap();
            match reply {
                Some(reply) => conn.write_all(&reply).unwrap(),
                // Hold the connection until the client gives up.
                None => {
                    let _ = conn.read(&mut [0u8; 1]);
                }
            }
            request
        });
        (worker(&name), thread)
    }

    fn answer(major: u8) -> Vec<u8> {
        let mut reply = ((4 + CONN_CAPS) as u64).to_le_bytes().to_vec();
        reply.extend_from_slice(&[major, 0, 0, 0]);
        reply.extend_from_slice(&[0u8; CONN_CAPS]);
        reply
    }

    #[test]
    fn hello_is_ggml_s_and_its_answer_is_checked() {
        let (w, server) = fake_worker(Some(answer(PROTO_MAJOR)));
        hello(&w, HELLO_TIMEOUT).unwrap();
        let request = server.join().unwrap();
        assert_eq!(request[0], 14);
        assert_eq!(&request[1..9], &24u64.to_le_bytes());

        let (w, _) = fake_worker(Some(answer(3)));
        let message = hello(&w, HELLO_TIMEOUT).unwrap_err().to_string();
        assert!(message.contains("protocol 3.0.0"), "{message}");
        assert!(message.contains("same shepherd version"), "{message}");

        let (w, _) = fake_worker(Some(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec()));
        let message = hello(&w, HELLO_TIMEOUT).unwrap_err().to_string();
        assert!(message.contains("is not a ggml RPC worker"), "{message}");

        let (w, _) = fake_worker(Some(Vec::new()));
        let message = hello(&w, HELLO_TIMEOUT).unwrap_err().to_string();
        assert!(message.contains("closed the connection"), "{message}");
    }

    #[test]
    fn a_busy_or_absent_worker_is_an_error_that_names_it() {
        let (w, _server) = fake_worker(None);
        let message = hello(&w, Duration::from_millis(200))
            .unwrap_err()
            .to_string();
        assert!(message.contains(&w.name), "{message}");
        assert!(message.contains("one host at a time"), "{message}");

        // A port nobody listens on: bound, then closed.
        let closed = TcpListener::bind("127.0.0.1:0").unwrap();
        let name = closed.local_addr().unwrap().to_string();
        drop(closed);
        let message = hello(&worker(&name), HELLO_TIMEOUT)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains(&format!("cannot reach the RPC worker {name}")),
            "{message}"
        );
        assert!(message.contains("shepherd --rpc-worker"), "{message}");
    }

    #[test]
    fn a_lost_worker_is_named_with_the_fix() {
        let (a, b) = (worker("127.0.0.1:5001"), worker("127.0.0.1:5002"));
        let both = [a.clone(), b.clone()];
        let ggml = "ggml-rpc.cpp:566: Remote RPC server crashed or returned malformed response";
        let text = lost_worker_message(&both, std::slice::from_ref(&b), ggml).unwrap();
        assert!(
            text.contains("lost the RPC worker 127.0.0.1:5002"),
            "{text}"
        );
        assert!(!text.contains("5001"), "{text}");
        assert!(text.contains("Restart `shepherd --rpc-worker`"), "{text}");
        assert!(text.ends_with(&format!("(ggml: {ggml})")), "{text}");
        let text = lost_worker_message(&both, &both, ggml).unwrap();
        assert!(
            text.contains("workers 127.0.0.1:5001, 127.0.0.1:5002"),
            "{text}"
        );
        // Every worker still accepts, but ggml says RPC: one of them misbehaved.
        let text = lost_worker_message(&both, &[], ggml).unwrap();
        assert!(
            text.contains("one of 127.0.0.1:5001, 127.0.0.1:5002"),
            "{text}"
        );
        // Aborts that have nothing to do with workers keep ggml's own message.
        assert_eq!(
            lost_worker_message(&both, &[], "ggml.c:1: GGML_ASSERT(x) failed"),
            None
        );
        assert_eq!(lost_worker_message(&[], &[], ggml), None);
    }

    #[test]
    fn connections_to_workers_get_keepalive_and_others_do_not() {
        use std::os::fd::AsRawFd;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(worker) = listener.local_addr().unwrap() else {
            unreachable!("bound on IPv4")
        };
        let to_worker = TcpStream::connect(worker).unwrap();
        let (from_host, _) = listener.accept().unwrap();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let to_other = TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert_eq!(sys_tcp::peer_v4(to_worker.as_raw_fd()), Some(worker));
        assert_eq!(
            sys_tcp::peer_v4(listener.as_raw_fd()),
            None,
            "not connected"
        );
        // Only the connection whose peer is the worker: the test process holds no other.
        assert_eq!(keep_alive_to(&[worker]), 1);
        let option = |stream: &TcpStream, (level, name)| {
            sys_tcp::get(stream.as_raw_fd(), level, name).unwrap()
        };
        assert_eq!(option(&to_worker, sys_tcp::KEEPALIVE_OPTION), 1);
        assert_eq!(option(&to_worker, sys_tcp::KEEPIDLE_OPTION), 10);
        assert_eq!(option(&from_host, sys_tcp::KEEPALIVE_OPTION), 0);
        assert_eq!(option(&to_other, sys_tcp::KEEPALIVE_OPTION), 0);
        assert_eq!(keep_alive_to(&[]), 0);
    }

    #[test]
    fn this_build_has_the_rpc_backend() {
        assert!(supported(), "{}", RpcError::NotBuilt);
        let devices = lendable_devices();
        if crate::llama::devices::offload_device_count() == 0 {
            assert_eq!(devices.len(), 1, "with no GPU the CPU is lent: {devices:?}");
            assert!(devices[0].1.starts_with("CPU"), "{devices:?}");
        } else {
            assert!(
                devices.iter().all(|d| !d.1.starts_with("CPU")),
                "{devices:?}"
            );
        }
    }
}

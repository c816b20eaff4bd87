//! `shepherd --rpc-worker`: this box's devices lent to `--rpc` hosts over ggml's
//! RPC protocol, as llama.cpp's `rpc-server` does (the same binary on every box).
//!
//! The worker holds no model and reads no config file: a host connects, allocates
//! buffers for its share of the layers, sends their weights and then a graph per
//! step. ggml serves one host at a time; when it disconnects, the next may come.
//!
//! Security: the protocol has no authentication and no encryption, so anyone who
//! reaches the port can use the devices and read what is computed. The worker
//! listens on 127.0.0.1 unless told otherwise; any other address needs
//! `--rpc-allow-remote` and prints a warning: a worker belongs on a trusted
//! network only. `--host` must be an IPv4 address (ggml binds IPv4 only).

use std::net::{Ipv4Addr, SocketAddrV4};

use crate::config::resolve::Settings;
use crate::llama::rpc::{self, WorkerConfig};
use crate::util::net;

use crate::frontend::exit::{EXIT_FAILURE, EXIT_USAGE};

/// Most CPU threads a worker's CPU device computes with unless `--threads` says.
const MAX_DEFAULT_THREADS: usize = 16;

/// Runs the worker until it is killed; returns an exit code only on failure.
pub fn run(settings: &Settings) -> i32 {
    let config = match worker_config(settings) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("shepherd: {message}");
            return EXIT_USAGE;
        }
    };
    if !config.addr.ip().is_loopback() {
        eprintln!("shepherd: {}", remote_warning(&config.addr));
    }
    let serving = match rpc::serve(&config) {
        Ok(serving) => serving,
        Err(error) => {
            eprintln!("shepherd: {error}");
            return EXIT_FAILURE;
        }
    };
    eprintln!(
        "shepherd: RPC worker listening on {} with {} thread(s), lending {}; \
         use it with --rpc {}",
        serving.addr,
        config.threads,
        serving.devices.join(", "),
        host_example(&serving.addr)
    );
    eprintln!("shepherd: {}", serving.wait());
    EXIT_FAILURE
}

/// Where to listen and with how many threads, or why not.
fn worker_config(settings: &Settings) -> Result<WorkerConfig, String> {
    let host = &settings.server.host;
    let ip = match host.parse::<Ipv4Addr>() {
        Ok(ip) => ip,
        Err(_) if net::is_loopback_host(host) => Ipv4Addr::LOCALHOST,
        Err(_) => {
            return Err(format!(
                "--rpc-worker --host {host}: expected an IPv4 address (ggml's RPC server binds \
                 IPv4 only), e.g. 127.0.0.1, 0.0.0.0 or this box's address on the trusted network"
            ))
        }
    };
    if !ip.is_loopback() && !settings.local.rpc_allow_remote {
        return Err(format!(
            "refusing to serve ggml's RPC on {ip}: the protocol has no authentication, so \
             anyone who reaches the port can use this box's devices. On a trusted network \
             only, add --rpc-allow-remote; otherwise listen on 127.0.0.1"
        ));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = settings
        .local
        .threads
        .map_or(cores.min(MAX_DEFAULT_THREADS), |t| t as usize);
    Ok(WorkerConfig {
        addr: SocketAddrV4::new(ip, settings.server.port),
        threads,
    })
}

fn remote_warning(addr: &SocketAddrV4) -> String {
    format!(
        "warning: serving ggml's RPC on {addr}, which is not loopback. The protocol has no \
         authentication and no encryption: anyone who reaches this port can run work on \
         this box's devices and read it. Keep it on a trusted network (a firewall that lets \
         only the host in)."
    )
}

/// The `--rpc` value a host uses: this address, or this box's name in its place
/// when listening on every interface.
fn host_example(addr: &SocketAddrV4) -> String {
    if addr.ip().is_unspecified() {
        format!("THIS_BOX:{}", addr.port())
    } else {
        addr.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args;
    use crate::config::resolve;

    fn settings(words: &[&str]) -> Settings {
        let low = args::parse(words.iter().copied()).unwrap();
        resolve::resolve(&low, &|_| None).unwrap()
    }

    #[test]
    fn a_worker_listens_on_loopback_unless_allowed_elsewhere() {
        let config = worker_config(&settings(&["--rpc-worker", "--threads", "3"])).unwrap();
        assert_eq!(config.addr, "127.0.0.1:50052".parse().unwrap());
        assert_eq!(config.threads, 3);
        let config = worker_config(&settings(&["--rpc-worker", "--host", "localhost"])).unwrap();
        assert!(config.addr.ip().is_loopback());

        let refused = worker_config(&settings(&["--rpc-worker", "--host", "0.0.0.0"]));
        let message = refused.unwrap_err();
        assert!(message.contains("no authentication"), "{message}");
        assert!(message.contains("--rpc-allow-remote"), "{message}");
        let allowed = ["--rpc-worker", "--rpc-allow-remote", "--host", "0.0.0.0"];
        let config = worker_config(&settings(&allowed)).unwrap();
        assert_eq!(config.addr, "0.0.0.0:50052".parse().unwrap());
        assert!(remote_warning(&config.addr).contains("trusted network"));
        assert_eq!(host_example(&config.addr), "THIS_BOX:50052");

        let named = ["--rpc-worker", "--rpc-allow-remote", "--host", "box2.lan"];
        let message = worker_config(&settings(&named)).unwrap_err();
        assert!(message.contains("IPv4 address"), "{message}");
    }
}

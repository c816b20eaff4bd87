//! Several boxes on one machine: two `shepherd --rpc-worker`s on 127.0.0.1 and a
//! host with `--rpc` over them give the greedy reply a local run gives, and a
//! worker killed in the middle of a reply ends the host with a message naming
//! it, not a hang.

use std::io::Read;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::api_server::test_model;
use crate::harness::{wait_listening, Sandbox};

/// A `shepherd --rpc-worker` on 127.0.0.1, on a port it picked; killed on drop.
struct Worker {
    child: Child,
    address: String,
    log: Arc<Mutex<String>>,
}

impl Worker {
    fn start(sandbox: &Sandbox) -> Worker {
        let mut child = sandbox.spawn(&[
            "--rpc-worker",
            "--port",
            "0",
            "--threads",
            crate::harness::MODEL_THREADS,
        ]);
        // ggml prints its banner and every connection to stdout: drain it.
        let mut stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let (address, log) = wait_listening(&mut child);
        Worker {
            child,
            address,
            log,
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn model() -> String {
    test_model().to_str().expect("UTF-8 path").to_string()
}

/// A one-shot greedy chat with the test model, plus `extra` flags.
fn chat_args<'a>(model: &'a str, prompt: &'a str, max_tokens: &'a str) -> Vec<&'a str> {
    vec![
        "-m",
        model,
        "--notools",
        "--no-prompt-cache",
        "--threads",
        crate::harness::MODEL_THREADS,
        "--temperature",
        "0",
        "--max-tokens",
        max_tokens,
        "-e",
        prompt,
    ]
}

#[test]
fn two_workers_give_the_local_greedy_reply() {
    let sandbox = Sandbox::new("rpc-same");
    let (a, b) = (Worker::start(&sandbox), Worker::start(&sandbox));
    let model = model();
    let args = chat_args(&model, "What is the capital of France?", "24");
    let local = sandbox.run(&args, "");
    assert_eq!(local.status, Some(0), "{}", local.stderr);
    assert!(!local.stdout.trim().is_empty(), "{}", local.stderr);

    let workers = format!("{},{}", a.address, b.address);
    let mut spread = args.clone();
    spread.extend_from_slice(&["--rpc", &workers, "--stats", "--debug=llm"]);
    let remote = sandbox.run(&spread, "");
    assert_eq!(remote.status, Some(0), "{}", remote.stderr);
    assert_eq!(remote.stdout, local.stdout, "{}", remote.stderr);
    // The layers really went to both workers: each holds a share of the weights.
    let placement = format!("model on: the RPC workers {}, {}", a.address, b.address);
    assert!(remote.stderr.contains(&placement), "{}", remote.stderr);
    for (index, worker) in [&a, &b].iter().enumerate() {
        let device = format!("RPC{index} ({}", worker.address);
        assert!(
            remote.stderr.contains(&device),
            "{device}: {}",
            remote.stderr
        );
        // Buffer types are named after the device's index on its worker: RPC0 on each.
        let weights = format!("RPC0[{}] model buffer size", worker.address);
        assert!(
            remote.stderr.contains(&weights),
            "{weights}: {}",
            remote.stderr
        );
    }
    // ggml's connection to each worker got TCP keepalive (a vanished box is an error).
    let keepalive = "TCP keepalive on 2 connection(s) to RPC workers";
    assert!(remote.stderr.contains(keepalive), "{}", remote.stderr);
    assert!(a.log.lock().unwrap().contains("listening on"));
}

#[test]
fn a_worker_killed_mid_reply_ends_the_host_with_a_message_naming_it() {
    let sandbox = Sandbox::new("rpc-dead");
    let (a, mut b) = (Worker::start(&sandbox), Worker::start(&sandbox));
    let model = model();
    let workers = format!("{},{}", a.address, b.address);
    // SmolLM2 tells this story greedily for far longer than the test waits.
    let prompt = "Write a long story about a dragon who learns to fly.";
    let mut args = chat_args(&model, prompt, "2000");
    args.extend_from_slice(&["--rpc", &workers]);
    let mut host = sandbox.spawn(&args);
    let mut stdout = host.stdout.take().expect("stdout");
    let (first_tx, first_rx) = crossbeam_channel::bounded(1);
    let reader = std::thread::spawn(move || {
        let mut shown = Vec::new();
        let mut chunk = [0u8; 256];
        while let Ok(n @ 1..) = stdout.read(&mut chunk) {
            shown.extend_from_slice(&chunk[..n]);
            let _ = first_tx.try_send(());
        }
        String::from_utf8_lossy(&shown).into_owned()
    });
    let mut stderr = host.stderr.take().expect("stderr");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    // The reply has begun: the model is spread over both workers and decoding.
    first_rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the reply never began");
    b.kill();
    let killed = Instant::now();
    let status = loop {
        if let Some(status) = host.try_wait().expect("wait for the host") {
            break status;
        }
        if killed.elapsed() > Duration::from_secs(60) {
            let _ = host.kill();
            panic!("the host still runs 60 s after its worker died");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = killed.elapsed();
    let shown = reader.join().unwrap();
    let stderr = errors.join().unwrap();
    eprintln!("the host stopped {took:?} after its worker was killed");
    assert_eq!(status.code(), Some(1), "{stderr}\nshown: {shown}");
    let lost = format!("lost the RPC worker {}", b.address);
    assert!(stderr.contains(&lost), "{lost}: {stderr}");
    assert!(!stderr.contains(&a.address), "only the dead one: {stderr}");
    assert!(
        stderr.contains("Restart `shepherd --rpc-worker`"),
        "{stderr}"
    );
    assert!(!shown.trim().is_empty());
}

#[test]
fn workers_that_cannot_serve_are_refused_before_the_model_loads() {
    let sandbox = Sandbox::new("rpc-refused");
    let model = model();
    // A port nobody listens on: bound, then closed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = closed.local_addr().unwrap().to_string();
    drop(closed);
    let mut args = chat_args(&model, "hi", "4");
    args.extend_from_slice(&["--rpc", &address]);
    let run = sandbox.run(&args, "");
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    let unreachable = format!("cannot reach the RPC worker {address}");
    assert!(run.stderr.contains(&unreachable), "{}", run.stderr);
    assert!(
        run.stderr.contains("shepherd --rpc-worker"),
        "{}",
        run.stderr
    );

    let run = sandbox.run(&["--rpc", "[::1]:50052", "-e", "hi"], "");
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("no IPv6"), "{}", run.stderr);
    // A worker listens on loopback unless told, with the reason, to do otherwise.
    let run = sandbox.run(&["--rpc-worker", "--host", "0.0.0.0", "--port", "0"], "");
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("no authentication"), "{}", run.stderr);
    assert!(run.stderr.contains("--rpc-allow-remote"), "{}", run.stderr);
    let run = sandbox.run(&["--rpc-worker", "-e", "hi"], "");
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("cannot be used together"),
        "{}",
        run.stderr
    );
}

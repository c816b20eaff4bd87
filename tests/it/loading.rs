//! Model loading: progress (a bar on a terminal, `loading` lines with
//! `--json`, nothing on a pipe) and placement over devices.

use serde_json::Value;

use crate::api_server::test_model;
use crate::harness::Sandbox;

fn model() -> String {
    test_model().to_str().expect("UTF-8 path").to_string()
}

#[test]
fn a_terminal_shows_a_loading_bar_that_erases_itself() {
    let sandbox = Sandbox::new("loading-tty");
    let command = format!(
        "'{}' -m '{}' --notools --threads {} --max-tokens 4 -e hi",
        env!("CARGO_BIN_EXE_shepherd"),
        model(),
        crate::harness::MODEL_THREADS
    );
    // `script` gives shepherd a terminal and copies everything it shows.
    let output = sandbox
        .command_of("script", &["-qec", &command, "/dev/null"])
        .output()
        .expect("script runs");
    assert!(output.status.success(), "{output:?}");
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(shown.contains("\rloading model [....."), "{shown:?}");
    assert!(shown.contains("] 100%\r\x1b[K"), "{shown:?}");
}

#[test]
fn a_pipe_gets_no_bar() {
    let sandbox = Sandbox::new("loading-pipe");
    let model = model();
    let args = [
        "-m",
        &model,
        "--notools",
        "--threads",
        crate::harness::MODEL_THREADS,
        "--max-tokens",
        "4",
        "-e",
        "hi",
    ];
    let run = sandbox.run(&args, "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(!run.stderr.contains("loading model"), "{}", run.stderr);
    assert!(!run.stdout.contains("loading model"), "{}", run.stdout);
}

#[test]
fn json_mode_reports_loading_as_lines_before_the_session() {
    let sandbox = Sandbox::new("loading-json");
    let model = model();
    let args = [
        "-m",
        &model,
        "--notools",
        "--threads",
        crate::harness::MODEL_THREADS,
        "--max-tokens",
        "4",
        "--json",
    ];
    let run = sandbox.run(&args, "{\"type\":\"user\",\"content\":\"hi\"}\n");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(!run.stderr.contains("loading model"), "{}", run.stderr);
    let lines: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let loading: Vec<f64> = lines
        .iter()
        .take_while(|l| l["type"] == "loading")
        .map(|l| l["progress"].as_f64().expect("a number"))
        .collect();
    assert!(loading.len() >= 2, "{lines:?}");
    assert!(loading.windows(2).all(|w| w[0] < w[1]), "{loading:?}");
    assert_eq!(loading.last(), Some(&1.0));
    // Nothing else reports loading, and the session follows.
    let rest = &lines[loading.len()..];
    assert!(rest.iter().all(|l| l["type"] != "loading"), "{rest:?}");
    assert!(rest.iter().any(|l| l["type"] == "end_turn"), "{rest:?}");
}

#[test]
fn gpu_placement_flags_are_checked_and_stats_say_where_the_model_runs() {
    let sandbox = Sandbox::new("placement");
    let model = model();
    for bad in [
        &["--tensor-split", "1,-1"][..],
        &["--tensor-split", "0,0"],
        &["--tensor-split", "a,b"],
        &["--split-mode", "diagonal"],
        &["--main-gpu", "-1"],
    ] {
        let mut args = vec!["-m", &model, "-e", "hi"];
        args.extend_from_slice(bad);
        let run = sandbox.run(&args, "");
        assert_eq!(run.status, Some(2), "{bad:?}: {}", run.stderr);
        assert!(run.stderr.contains(bad[0]), "{bad:?}: {}", run.stderr);
    }
    // More shares than llama.cpp has devices is refused before loading.
    let many = vec!["1"; 300].join(",");
    let args = [
        "-m",
        &model,
        "--gpu-layers",
        "-1",
        "--tensor-split",
        &many,
        "-e",
        "hi",
    ];
    let run = sandbox.run(&args, "");
    assert_ne!(run.status, Some(0), "{}", run.stderr);
    assert!(run.stderr.contains("at most"), "{}", run.stderr);
    // On this CPU build the model runs on the CPU, and --stats says so with the devices.
    let args = [
        "-m",
        &model,
        "--threads",
        crate::harness::MODEL_THREADS,
        "--max-tokens",
        "2",
        "--stats",
        "-e",
        "hi",
    ];
    let run = sandbox.run(&args, "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(run.stderr.contains("model on: the CPU"), "{}", run.stderr);
    assert!(run.stderr.contains("devices:\n  CPU"), "{}", run.stderr);
    let version = sandbox.run(&["--version"], "");
    assert!(
        version.stdout.contains("devices:\n  CPU ("),
        "{}",
        version.stdout
    );
}

//! `--help` for every command and action, the completion scripts run by real
//! shells, and the man page: all generated from the binary's own tables.

use std::process::Command;

use crate::harness::{Sandbox, TempDir};

/// The commands `shepherd --help` lists.
fn commands(sandbox: &Sandbox) -> Vec<String> {
    let run = sandbox.run(&["--help"], "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let list = run
        .stdout
        .split("Commands")
        .nth(1)
        .expect("--help lists the commands");
    let names: Vec<String> = list
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect();
    assert!(names.len() >= 5, "{}", run.stdout);
    names
}

/// The actions `shepherd COMMAND --help` lists.
fn actions(help: &str) -> Vec<String> {
    let Some(list) = help.split("\nActions:\n").nth(1) else {
        return Vec::new();
    };
    list.lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

fn check_help(sandbox: &Sandbox, words: &[&str], flag: &str) -> String {
    let mut args = words.to_vec();
    args.push(flag);
    let run = sandbox.run(&args, "");
    assert_eq!(run.status, Some(0), "{args:?}: {}", run.stderr);
    let usage = format!("Usage: shepherd {}", words[0]);
    assert!(run.stdout.starts_with(&usage), "{args:?}:\n{}", run.stdout);
    for word in words {
        assert!(
            run.stdout.contains(word),
            "{args:?} does not name {word}:\n{}",
            run.stdout
        );
    }
    run.stdout
}

#[test]
fn every_command_and_action_answers_help_and_h() {
    let sandbox = Sandbox::new("help-all");
    let mut checked = 0;
    for command in commands(&sandbox) {
        for flag in ["--help", "-h"] {
            let help = check_help(&sandbox, &[&command], flag);
            for action in actions(&help) {
                check_help(&sandbox, &[&command, &action], flag);
                checked += 1;
            }
        }
    }
    assert!(checked >= 40, "only {checked} action helps were checked");
    let add = check_help(&sandbox, &["provider", "add"], "--help");
    assert!(
        add.contains("--type TYPE") && add.contains("--base-url"),
        "{add}"
    );
    assert!(check_help(&sandbox, &["mcp", "add"], "--help").contains("--url URL"));
}

#[test]
fn help_wins_anywhere_but_as_a_value() {
    let sandbox = Sandbox::new("help-where");
    let cfg = sandbox.root.path().join("c.json");
    let cfg = cfg.to_str().expect("UTF-8 path");
    let run = sandbox.run(
        &["-c", cfg, "provider", "add", "x", "--type", "ollama", "-h"],
        "",
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(
        run.stdout.starts_with("Usage: shepherd provider add"),
        "{}",
        run.stdout
    );
    assert!(!cfg_exists(cfg), "help must not add the provider");
    // `-h` as the value of --model is a model name, not a request for help.
    let run = sandbox.run(&["-c", cfg, "provider", "add", "x", "--model", "-h"], "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("Added provider 'x'"), "{}", run.stdout);
    let shown = sandbox.run(&["-c", cfg, "provider", "show", "x"], "");
    assert!(shown.stdout.contains("model: -h"), "{}", shown.stdout);
}

fn cfg_exists(path: &str) -> bool {
    std::path::Path::new(path).exists()
}

fn script(shell: &str) -> (TempDir, std::path::PathBuf) {
    let sandbox = Sandbox::new("complete-script");
    let run = sandbox.run(&["completions", shell], "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let dir = TempDir::new(&format!("script-{shell}"));
    let path = dir.path().join(format!("shepherd.{shell}"));
    std::fs::write(&path, run.stdout).expect("write script");
    (dir, path)
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `shell -n` (syntax only) on the generated script.
fn syntax_ok(shell: &str) {
    if !have(shell) {
        eprintln!("SKIPPED: {shell} is not installed, so its completion script was not checked");
        return;
    }
    let (_dir, path) = script(shell);
    let out = Command::new(shell)
        .arg("-n")
        .arg(&path)
        .output()
        .expect("run shell");
    assert!(
        out.status.success(),
        "{shell} -n: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn completion_scripts_pass_their_shells_syntax_check() {
    syntax_ok("bash");
    syntax_ok("zsh");
    syntax_ok("fish");
}

/// Sources the bash script, completes `words` (the last one is the word being typed)
/// with the script's function and returns what it offers.
fn complete_bash(words: &[&str]) -> Vec<String> {
    let (_dir, path) = script("bash");
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source '{}' && COMP_WORDS=({}) && COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)) && _shepherd && printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        path.display(),
        quoted.join(" ")
    );
    let out = Command::new("bash")
        .args(["-c", &program])
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn bash_completes_prov_to_provider() {
    let bin = env!("CARGO_BIN_EXE_shepherd");
    assert_eq!(complete_bash(&[bin, "prov"]), ["provider"]);
    // compgen over the generated command list offers the same.
    let (_dir, path) = script("bash");
    let program = format!(
        "source '{}' && compgen -W \"$_shepherd_commands\" -- prov",
        path.display()
    );
    let out = Command::new("bash")
        .args(["-c", &program])
        .output()
        .expect("bash");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "provider\n");
    assert_eq!(complete_bash(&[bin, "--backend", "ol"]), ["ollama"]);
    let add = complete_bash(&[bin, "provider", "add", "x", "--ty"]);
    assert_eq!(add, ["--type"]);
}

#[test]
fn bash_completes_configured_provider_and_profile_names() {
    let sandbox = Sandbox::new("complete-names");
    let cfg = sandbox.root.path().join("config.json");
    let cfg = cfg.to_str().expect("UTF-8 path");
    for name in ["work", "home"] {
        let run = sandbox.run(
            &["-c", cfg, "provider", "add", name, "--type", "ollama"],
            "",
        );
        assert_eq!(run.status, Some(0), "{}", run.stderr);
    }
    let run = sandbox.run(&["-c", cfg, "profile", "add", "review"], "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let bin = env!("CARGO_BIN_EXE_shepherd");
    let mut offered = complete_bash(&[bin, "-c", cfg, "-p", ""]);
    offered.sort();
    assert_eq!(offered, ["home", "work"]);
    assert_eq!(
        complete_bash(&[bin, "-c", cfg, "provider", "show", "w"]),
        ["work"]
    );
    assert!(complete_bash(&[bin, "-c", cfg, "--profile", ""]).contains(&"review".to_string()));
}

#[test]
fn man_page_has_every_long_flag_and_renders() {
    let sandbox = Sandbox::new("man");
    let help = sandbox.run(&["--help"], "").stdout;
    let longs: Vec<&str> = help
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| w.trim_end_matches(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_')))
        .map(|w| w.split(['=', '[']).next().unwrap_or(w))
        .filter(|w| !w.is_empty())
        .collect();
    assert!(longs.len() > 40, "{help}");
    let run = sandbox.run(&["man"], "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(run.stdout.starts_with(".TH SHEPHERD 1"), "{}", run.stdout);
    for long in longs {
        let roff = format!("\\-\\-{}", long.replace('-', "\\-"));
        assert!(run.stdout.contains(&roff), "the man page lacks --{long}");
    }
    if !have("groff") {
        eprintln!("SKIPPED: groff is not installed, so the man page was not rendered");
        return;
    }
    let dir = TempDir::new("man");
    let page = dir.path().join("shepherd.1");
    std::fs::write(&page, &run.stdout).expect("write");
    let out = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(&page)
        .output()
        .expect("groff");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

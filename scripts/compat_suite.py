#!/usr/bin/env python3
"""llama.cpp's own server test suite against llama-server and `shepherd --server`.

Usage: compat_suite.py --tree LLAMA_CPP_DIR --llama-server BIN --shepherd BIN
                       --cache DIR --model GGUF [--threads N] [--workers N]
                       [--timeout SECS] [--slow] [--only llama-server|shepherd]
                       [--no-together] [PYTEST_ARGS...]

`make compat-suite` runs it (not part of `make test`). Steps:
1. A virtual environment under CACHE/venv with the suite's requirements
   (tools/server/tests/requirements.txt) and pytest-timeout, from PyPI, made once.
2. A fresh copy of tools/server/tests under CACHE/llama.cpp/tools/server/tests
   (the cached llama.cpp tree is never written), beside a link to the tree's
   models/ (the tests read chat templates as ../../../models/templates/...).
3. pytest twice in the copy, with the plugin scripts/compat_suite_plugin.py
   (local models instead of the HF hub, no network): once with
   LLAMA_SERVER_BIN_PATH=llama-server, once with scripts/llama_server_shim.py,
   which maps llama-server's flags to shepherd's. Both runs at the same time
   (--no-together: one after the other), each over --workers pytest-xdist
   workers (2) whose servers get --threads threads (1) unless a test sets its own.
   Slow tests (marked `slow`) only with --slow; each test has --timeout seconds
   (120).
4. Per test file, passed/failed/skipped/errors for each server and the totals;
   every case with both results in CACHE/results/cases.tsv (the shepherd
   failure's first line too), the junit XML and pytest's output beside it.
Extra arguments go to pytest (e.g. unit/test_tokenize.py or -k EXPR).
Standard library only (pytest runs in the venv). Exits 0 when both runs ran.
"""
import argparse
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = ("passed", "failed", "skipped", "error")


def venv(cache, requirements):
    """CACHE/venv with the suite's requirements; rebuilt when they change."""
    path = os.path.join(cache, "venv")
    python = os.path.join(path, "bin", "python")
    with open(requirements, "rb") as f:
        want = hashlib.sha256(f.read() + b"pytest-timeout").hexdigest()
    stamp = os.path.join(path, "compat-suite.stamp")
    if os.path.exists(stamp) and open(stamp).read() == want:
        return python
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", path], check=True)
    subprocess.run([python, "-m", "pip", "install", "--quiet", "-r", requirements,
                    "pytest-timeout~=2.3"], check=True)
    with open(stamp, "w") as f:
        f.write(want)
    return python


def copy_suite(tree, cache):
    """A fresh copy of the tests under CACHE/llama.cpp, models/ linked; its path."""
    root = os.path.join(cache, "llama.cpp")
    shutil.rmtree(root, ignore_errors=True)
    tests = os.path.join(root, "tools", "server", "tests")
    shutil.copytree(os.path.join(tree, "tools", "server", "tests"), tests,
                    ignore=shutil.ignore_patterns("tmp", "__pycache__", ".pytest_cache"))
    os.symlink(os.path.join(tree, "models"), os.path.join(root, "models"))
    return tests


def free_ports(n):
    """n consecutive free loopback ports (checked now; the servers bind them later)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        try:
            for port in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue


def start_suite(python, tests, label, binary, args, results, extra_env, pytest_args):
    """pytest in the copy against BINARY, started; (process, its log, the XML path)."""
    xml = os.path.join(results, f"{label}.xml")
    log = os.path.join(results, f"{label}.log")
    env = dict(os.environ, **extra_env)
    env.update({
        "LLAMA_SERVER_BIN_PATH": binary,
        "COMPAT_PORT": str(free_ports(max(args.workers, 1))),
        "PYTHONPATH": HERE + os.pathsep + env.get("PYTHONPATH", ""),
        "PYTHONDONTWRITEBYTECODE": "1",
        "COMPAT_MODEL": args.model,
        "COMPAT_THREADS": str(args.threads),
        # The suite's own knob: no slow tests unless asked.
        "SLOW_TESTS": "1" if args.slow else "0",
    })
    for var in ("DEBUG", "DEBUG_EXTERNAL", "PORT"):
        env.pop(var, None)
    command = [python, "-m", "pytest", "-p", "compat_suite_plugin", "-p", "no:cacheprovider",
               "-o", "junit_family=xunit1", f"--junitxml={xml}", f"--timeout={args.timeout}",
               "-rN", "--color=no", "-v", "--durations=20"]
    if args.workers > 1:
        command += ["-n", str(args.workers), "--dist=worksteal"]
    if not args.slow:
        command += ["-m", "not slow"]
    command += pytest_args or ["unit"]
    print(f"compat-suite: {label}: {' '.join(command[1:])} (output in {log})", flush=True)
    out = open(log, "w")
    proc = subprocess.Popen(command, cwd=tests, env=env, stdout=out, stderr=subprocess.STDOUT)
    return proc, out, xml


def read_junit(xml):
    """{case id: (result, first line of the message)} from pytest's junit XML."""
    cases = {}
    if not os.path.exists(xml):
        return cases
    for case in ET.parse(xml).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        file = module + ".py" if module else case.get("file", "?")
        cid = f"{file}::{case.get('name')}"
        result, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                result = "failed" if kind == "failure" else kind
                message = (node.get("message") or node.text or "").strip().splitlines()
                message = message[0][:300] if message else ""
                break
        # A teardown error after a failure keeps the failure.
        if cid in cases and cases[cid][0] == "failed":
            continue
        cases[cid] = (result, message)
    return cases


def counts(cases):
    per_file = {}
    for cid, (result, _) in cases.items():
        file = cid.split("::", 1)[0]
        per_file.setdefault(file, dict.fromkeys(RESULTS, 0))[result] += 1
    return per_file


def report(runs, results):
    labels = list(runs)
    per = {label: counts(cases) for label, cases in runs.items()}
    files = sorted(set().union(*(p.keys() for p in per.values())))
    head = "file".ljust(34) + "".join(f"{label + ' p/f/s/e':>26}" for label in labels)
    print(head)
    print("-" * len(head))
    totals = {label: dict.fromkeys(RESULTS, 0) for label in labels}
    for file in files:
        row = file.replace("unit/", "").ljust(34)
        for label in labels:
            c = per[label].get(file, dict.fromkeys(RESULTS, 0))
            for r in RESULTS:
                totals[label][r] += c[r]
            row += f"{'/'.join(str(c[r]) for r in RESULTS):>26}"
        print(row)
    print("-" * len(head))
    print("total".ljust(34) + "".join(
        f"{'/'.join(str(totals[label][r]) for r in RESULTS):>26}" for label in labels))
    table = os.path.join(results, "cases.tsv")
    ids = sorted(set().union(*(cases.keys() for cases in runs.values())))
    with open(table, "w") as f:
        f.write("case\t" + "\t".join(labels) + "\tshepherd message\n")
        for cid in ids:
            cells = [runs[label].get(cid, ("-", ""))[0] for label in labels]
            message = runs.get("shepherd", {}).get(cid, ("", ""))[1]
            f.write(cid + "\t" + "\t".join(cells) + "\t" + message.replace("\t", " ") + "\n")
    if len(labels) == 2:
        lost = [cid for cid in ids if runs[labels[0]].get(cid, ("",))[0] == "passed"
                and runs[labels[1]].get(cid, ("",))[0] in ("failed", "error")]
        won = [cid for cid in ids if runs[labels[1]].get(cid, ("",))[0] == "passed"
               and runs[labels[0]].get(cid, ("",))[0] in ("failed", "error")]
        print(f"{labels[1]} fails where {labels[0]} passes: {len(lost)}; "
              f"the other way round: {len(won)}")
    print(f"per-case table: {table}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", required=True, help="the llama.cpp source tree")
    parser.add_argument("--llama-server", required=True)
    parser.add_argument("--shepherd", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", type=int, default=1, help="--threads of each server")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per test")
    parser.add_argument("--slow", action="store_true", help="also the tests marked slow")
    parser.add_argument("--only", choices=("llama-server", "shepherd"))
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers per run")
    parser.add_argument("--together", action=argparse.BooleanOptionalAction, default=True,
                        help="run both servers' suites at the same time (default)")
    args, pytest_args = parser.parse_known_args()
    cache = os.path.abspath(args.cache)
    os.makedirs(cache, exist_ok=True)
    tests_src = os.path.join(args.tree, "tools", "server", "tests")
    python = venv(cache, os.path.join(tests_src, "requirements.txt"))
    tests = copy_suite(os.path.abspath(args.tree), cache)
    results = os.path.join(cache, "results")
    os.makedirs(results, exist_ok=True)
    home = os.path.join(cache, "shepherd-home")
    shutil.rmtree(home, ignore_errors=True)
    servers = {
        "llama-server": (os.path.abspath(args.llama_server), {}),
        "shepherd": (os.path.join(HERE, "llama_server_shim.py"),
                     {"SHEPHERD_BIN": os.path.abspath(args.shepherd),
                      "COMPAT_SHEPHERD_HOME": home}),
    }
    started, runs = {}, {}
    start = time.monotonic()
    for label, (binary, env) in servers.items():
        if not args.only or args.only == label:
            started[label] = start_suite(python, tests, label, binary, args, results, env,
                                         pytest_args)
            if not args.together:
                started[label][0].wait()
    for label in servers:
        if label in started:
            proc, out, xml = started[label]
            proc.wait()
            out.close()
            print(f"compat-suite: {label} done after {time.monotonic() - start:.0f} s",
                  flush=True)
        # A server not run this time: its last run's results, for the comparison.
        runs[label] = read_junit(os.path.join(results, f"{label}.xml"))
    report(runs, results)


if __name__ == "__main__":
    main()

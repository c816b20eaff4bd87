#!/usr/bin/env python3
"""`make bench`, part three: the cold one-shot's time to first token with the
default tools (an agent's whole opening: system prompt and tool descriptions),
with the prompt cache empty, with it warm (the previous run's opening on disk),
and with --notools (the floor: a prompt of a few dozen tokens).

Each sample is a new `shepherd -e` process, timed from spawn to its first `text`
line in --json mode (model load included, as a user waits for it). The three
kinds take turns in interleaved rounds, each going first in turn, and are
compared by median, as the rest of `make bench` is.

Usage: bench_oneshot.py SHEPHERD MODEL THREADS [ROUNDS]
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

QUESTION = "What is the capital of France?"


def first_token_secs(shepherd, model, threads, cache_home, extra):
    """Seconds from spawn to the first `text` line; the run is then waited for."""
    env = dict(os.environ, XDG_CACHE_HOME=cache_home)
    args = [shepherd, "-m", model, "--threads", str(threads), "--temperature", "0",
            "--max-tokens", "8", "--json", "-e", QUESTION] + extra
    started = time.monotonic()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=env, text=True)
    first, text = None, ""
    for line in proc.stdout:
        event = json.loads(line)
        if event.get("type") == "text":
            first = first or time.monotonic() - started
            text += event.get("content", "")
    if proc.wait() != 0 or first is None:
        sys.exit(f"shepherd {' '.join(extra)} failed (exit {proc.returncode})")
    return first, text


def main():
    shepherd, model, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 6
    times = {"empty": [], "warm": [], "notools": []}
    answers = {}
    for n in range(rounds):
        home = tempfile.mkdtemp(prefix="shepherd-bench-kv-")
        try:
            # Empty, then warm, in one cache home; --notools goes first, between or last in turn.
            order = ["empty", "warm"]
            order.insert(n % 3, "notools")
            for kind in order:
                extra = ["--notools", "--no-prompt-cache"] if kind == "notools" else []
                secs, text = first_token_secs(shepherd, model, threads, home, extra)
                times[kind].append(secs)
                answers.setdefault(kind, text)
                if kind != "notools" and answers[kind] != text:
                    sys.exit(f"{kind}: the answer changed between rounds: {text!r}")
        finally:
            shutil.rmtree(home, ignore_errors=True)
    if answers["warm"] != answers["empty"]:
        sys.exit(f"the warm cache changed the answer: {answers['warm']!r} vs {answers['empty']!r}")
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"cold one-shot, time to first token (median of {rounds} interleaved rounds, {threads} threads):")
    for kind, label in [("empty", "default tools, cache empty"), ("warm", "default tools, cache warm"),
                        ("notools", "--notools")]:
        print(f"  {label:28} {med[kind]:7.3f} s")
    print(f"  warm / --notools: {med['warm'] / med['notools']:.2f}x   "
          f"empty / warm: {med['empty'] / med['warm']:.2f}x   (answers identical: yes)")


if __name__ == "__main__":
    main()

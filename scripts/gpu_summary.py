#!/usr/bin/env python3
"""The GPU check's summary (scripts/gpu-check.sh): results.jsonl in, Markdown out.

Usage: gpu_summary.py RESULTS.jsonl GPU.txt VERSION.txt

Prints the device, shepherd's CUDA line, the one-shot, then shepherd bench against
llama-bench per test (pp512, tg128, tg128 at depth) and flash-attention setting with
the ratio, and the servers' medians with the ratio at each stream count. Standard
library only (it runs on the GPU box).
"""
import json
import statistics
import sys


def read_lines(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        print(f"(could not read {path}: {e})", file=sys.stderr)
        return []


def text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def test_name(line):
    name = f"pp{line['n_prompt']}" if line.get("n_prompt") else f"tg{line['n_gen']}"
    return name + (f" @ d{line['n_depth']}" if line.get("n_depth") else "")


def main():
    results, gpu, version = read_lines(sys.argv[1]), text(sys.argv[2]), text(sys.argv[3])
    print("# GPU check\n")
    print(f"- device: {gpu or 'none (CPU dry run)'}")
    for line in version.splitlines():
        if line.startswith(("shepherd ", "cuda:", "cublas:", "  CUDA", "no CUDA")):
            print(f"- {line.strip()}")
    for r in results:
        if r["kind"] == "oneshot":
            print(f"- one-shot on {r['model']}: rc {r['rc']}, {r['seconds']} s: {r['answer'][:120]!r}")
    bench = {}
    for r in results:
        if r["kind"] == "bench":
            bench[(test_name(r["line"]), r["fa"], r["side"])] = r["line"]["avg_ts"]
    if bench:
        print("\n## shepherd bench against llama-bench (t/s)\n")
        print("| test | flash attention | llama-bench | shepherd | ratio |")
        print("|---|---|---:|---:|---:|")
        for test, fa in sorted({(t, f) for t, f, _ in bench}, key=lambda k: (k[1], k[0])):
            ours, theirs = bench.get((test, fa, "shepherd")), bench.get((test, fa, "llama-bench"))
            ratio = f"{ours / theirs:.2f}x" if ours and theirs else "n/a"
            cell = lambda v: f"{v:.1f}" if v else "n/a"
            print(f"| {test} | {fa} | {cell(theirs)} | {cell(ours)} | {ratio} |")
    servers = [r for r in results if r["kind"] == "servers"]
    if servers:
        print("\n## shepherd --server against llama-server (t/s, medians of interleaved rounds)\n")
        print("| streams | llama-server | shepherd | ratio | paired |")
        print("|---:|---:|---:|---:|---:|")
        rows = {}
        for r in servers:
            speeds = r["result"]["speeds"]
            rows.setdefault(1, speeds)
            rows[r["streams"]] = speeds
        for streams, speeds in sorted(rows.items()):
            test = "single" if streams == 1 else "aggregate"
            base, ours = speeds["llama-server"][test], speeds["shepherd"][test]
            mb, mo = statistics.median(base), statistics.median(ours)
            paired = statistics.median(o / b for b, o in zip(base, ours) if b)
            print(f"| {streams} | {mb:.1f} | {mo:.1f} | {mo / mb:.2f}x | {paired:.2f}x |")


if __name__ == "__main__":
    main()

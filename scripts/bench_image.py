#!/usr/bin/env python3
"""`make bench` part six: image prefill, shepherd against llama-server.

Usage: bench_image.py NAME=URL [NAME=URL ...]

Every server runs the same vision model (a text model and its projector,
`--mmproj`) with the same threads and context; each gets the same chat request
through POST /v1/chat/completions: one user message holding a PNG (a data URL,
SIDE x SIDE pixels, 384 by default) and a short question, temperature 0,
max_tokens 1, not streamed. Per round (ROUNDS, 8; servers interleaved, the first
of a round rotating, each turn starting once the machine is quiet: `quiet`) each
server is sent

  fresh:  a picture no request has sent before (every round's pixels differ, so
          no cache holds its embeddings): the projector encodes it and the
          model decodes its tokens;
  cached: the same request again at once: the image's tokens should come from
          the slot's cache, not from the projector and the model again.

From each answer's `timings` (which both servers report) it takes prompt_n (the
tokens decoded, the cached prefix left out) and prompt_ms, and from the client
the wall time of the request (one token: about the time to the first token).
It prints the medians per server: the fresh image's prompt tokens per second
and wall time, each server's ratio to the first one named (>= 1.00x is the
goal for shepherd), and the cached request's prompt time over the fresh one's
(<= 5% is the goal). The pictures are made once, before the first round:
gradients and shapes, a real PNG (zlib), different in every round. Standard
library only.
"""
import base64
import os
import statistics
import struct
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_spec import quiet, request  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "8"))
SIDE = int(os.environ.get("SIDE", "384"))
QUESTION = "What is in this picture? Answer in one word."


def png(width, height, rows):
    """A truecolour PNG of `rows` (each `width * 3` bytes of RGB)."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    raw = b"".join(b"\x00" + row for row in rows)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def picture(n, side):
    """Picture number `n`: a diagonal gradient whose colours turn with `n`, and a
    disc whose place and size move with it; no two numbers give the same pixels."""
    cx, cy = (37 * n + side // 3) % side, (53 * n + side // 2) % side
    radius = side // 8 + (11 * n) % (side // 4)
    rows = []
    for y in range(side):
        row = bytearray(side * 3)
        dy = (y - cy) ** 2
        for x in range(side):
            if (x - cx) ** 2 + dy < radius * radius:
                rgb = (250 - 7 * n % 200, 40 + 13 * n % 180, 90)
            else:
                rgb = ((x + 5 * n) & 255, (y + 3 * n) & 255, (x + y + 17 * n) // 2 & 255)
            row[3 * x:3 * x + 3] = bytes(rgb)
        rows.append(bytes(row))
    return png(side, side, rows)


def ask(url, image):
    """One request with `image`: (prompt_n, prompt_ms, cache_n, wall ms)."""
    data_url = "data:image/png;base64," + base64.b64encode(image).decode()
    body = {"model": "bench", "max_tokens": 1, "temperature": 0, "stream": False,
            "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": data_url}},
                {"type": "text", "text": QUESTION}]}]}
    started = time.perf_counter()
    data = request(url, "/v1/chat/completions", body)
    wall = (time.perf_counter() - started) * 1000
    timings = data.get("timings") or {}
    return (timings.get("prompt_n") or 0, timings.get("prompt_ms") or 0.0,
            timings.get("cache_n") or 0, wall)


def main():
    servers = [arg.split("=", 1) for arg in sys.argv[1:]]
    if not servers or any(len(s) != 2 for s in servers):
        sys.exit(__doc__)
    # One picture for the warm-up (the first image allocates the projector's
    # graph on either side), one per round.
    pictures = [picture(n, SIDE) for n in range(ROUNDS + 1)]
    for _, url in servers:
        ask(url, pictures[0])
    fresh = {name: [] for name, _ in servers}
    cached = {name: [] for name, _ in servers}
    for round_no in range(ROUNDS):
        order = servers[round_no % len(servers):] + servers[:round_no % len(servers)]
        for name, url in order:
            quiet()
            fresh[name].append(ask(url, pictures[round_no + 1]))
            cached[name].append(ask(url, pictures[round_no + 1]))
        print(f"round {round_no + 1}/{ROUNDS}: " + ", ".join(
            f"{n} {fresh[n][-1][0]} tokens {fresh[n][-1][1]:.0f}/{cached[n][-1][1]:.1f} ms"
            for n, _ in servers), file=sys.stderr)
    report(servers, fresh, cached)


def report(servers, fresh, cached):
    """The table: medians per server, ratios to the first server named."""
    med = statistics.median

    def speed(run):
        return run[0] / run[1] * 1000 if run[1] else 0.0

    base = servers[0][0]
    w = max(len(name) for name, _ in servers)
    print(f"image prefill: one {SIDE}x{SIDE} PNG and a question, max_tokens 1, medians of "
          f"{ROUNDS} interleaved rounds; a fresh picture each round, then the same request again")
    print(f"  {'server':<{w}} {'tokens':>6} {'prompt t/s':>10} {'ratio':>6} {'paired':>7} "
          f"{'wall ms':>8} {'ratio':>6} {'cached ms':>9} {'cached/fresh':>12} {'cached wall':>11}")
    for name, _ in servers:
        mine, first = fresh[name], fresh[base]
        tps = med(speed(r) for r in mine)
        ratio = tps / med(speed(r) for r in first)
        # The median of each round's own ratio cancels the machine's drift.
        paired = med(speed(m) / speed(f) for m, f in zip(mine, first) if speed(f))
        wall = med(r[3] for r in mine)
        # Wall time: lower is better, so the ratio is the first server's over this one's.
        wall_ratio = med(r[3] for r in first) / wall
        cached_ms = med(r[1] for r in cached[name])
        share = med(c[1] / f[1] for c, f in zip(cached[name], mine) if f[1])
        cached_wall = med(c[3] / f[3] for c, f in zip(cached[name], mine))
        tokens = "-".join(str(t) for t in sorted({min(r[0] for r in mine), max(r[0] for r in mine)}))
        print(f"  {name:<{w}} {tokens:>6} {tps:10.1f} {ratio:5.2f}x {paired:6.2f}x {wall:8.0f} "
              f"{wall_ratio:5.2f}x {cached_ms:9.1f} {100 * share:11.1f}% {100 * cached_wall:10.1f}%")
    cached_n = {name: med(r[2] for r in cached[name]) for name, _ in servers}
    print("  (tokens: the fresh request's prompt_n, the cached text before the image left out; "
          "the cached request reused " + ", ".join(f"{n} {c:.0f}" for n, c in cached_n.items())
          + " tokens)")


if __name__ == "__main__":
    main()

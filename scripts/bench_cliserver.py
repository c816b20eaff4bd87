#!/usr/bin/env python3
"""Benchmark of `shepherd --cliserver` fan-out: events per second and latency
with 64 `/updates` subscribers. Not a test; run with `make bench-cliserver`.

A fake OpenAI upstream (stdlib HTTP server, in this process) streams deltas
whose text is the monotonic clock at the moment it was written; every
subscriber notes when each delta arrives, so latency is upstream write ->
shepherd (decode, agent, hub, SSE) -> subscriber read. Two runs: one paced at
a steady rate (latency), one unpaced (throughput).

Usage: bench_cliserver.py [PATH_TO_SHEPHERD] [--subscribers N] [--events N] [--rate N]
"""

import argparse
import json
import re
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STAMP = re.compile(rb"\|(\d+)\|")


def chunk(content, finish=None):
    delta = {} if content is None else {"content": content}
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    plan = {"events": 1000, "rate": 0}

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        events, rate = self.plan["events"], self.plan["rate"]
        start = time.monotonic()
        for i in range(events):
            if rate:
                wait = start + i / rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            data = json.dumps(chunk("|%d| " % time.monotonic_ns()))
            self.wfile.write(("data: %s\n\n" % data).encode())
            self.wfile.flush()
        self.wfile.write(("data: %s\n\n" % json.dumps(chunk(None, "stop"))).encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def subscribe(addr, results, ready):
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.sendall(("GET /updates HTTP/1.1\r\nHost: %s\r\n\r\n" % addr).encode())
    latencies, count, buffer = [], 0, b""
    first = last = None
    ready.release()
    while True:
        data = sock.recv(65536)
        if not data:
            break
        now = time.monotonic_ns()
        buffer += data
        lines = buffer.split(b"\n")
        buffer = lines.pop()
        done = False
        for line in lines:
            if not line.startswith(b"data: "):
                continue
            if b'"type":"delta"' in line:
                match = STAMP.search(line)
                if match:
                    latencies.append(now - int(match.group(1)))
                    count += 1
                    first = first or now
                    last = now
            elif b'"response_complete"' in line:
                done = True
        if done:
            break
    sock.close()
    results.append((count, first, last, latencies))


def post(addr, body):
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        payload = json.dumps(body).encode()
        head = "POST /request HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        sock.sendall((head % (addr, len(payload))).encode() + payload)
        return sock.recv(65536)


def run_once(addr, subscribers, events, rate):
    Upstream.plan = {"events": events, "rate": rate}
    results, ready, threads = [], threading.Semaphore(0), []
    for _ in range(subscribers):
        thread = threading.Thread(target=subscribe, args=(addr, results, ready))
        thread.start()
        threads.append(thread)
    for _ in range(subscribers):
        ready.acquire()
    time.sleep(0.5)  # let every subscriber's `connected` event go out first
    post(addr, {"prompt": "bench", "async": True})
    for thread in threads:
        thread.join()
    latencies = sorted(l for r in results for l in r[3])
    received = sum(r[0] for r in results)
    span = (max(r[2] for r in results) - min(r[1] for r in results)) / 1e9
    per_sub = received / len(results)
    pct = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))] / 1e6
    label = "paced at %d/s" % rate if rate else "unpaced"
    print(
        "%-16s %d subscribers x %d events: %.0f events/s per subscriber, %.0f deliveries/s total; "
        "latency p50 %.2f ms, p99 %.2f ms, max %.2f ms; lost %d"
        % (label, len(results), events, per_sub / span, received / span,
           pct(0.50), pct(0.99), latencies[-1] / 1e6, events * len(results) - received)
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shepherd", nargs="?", default="target/release/shepherd")
    parser.add_argument("--subscribers", type=int, default=64)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--rate", type=int, default=200)
    args = parser.parse_args()
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    base = "http://127.0.0.1:%d/v1" % upstream.server_address[1]
    server = subprocess.Popen(
        [args.shepherd, "--cliserver", "--port", "0", "--backend", "openai",
         "--api-base", base, "-m", "bench", "--notools"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
    )
    try:
        addr = None
        for line in server.stderr:
            found = re.search(rb"listening on http://(\S+)", line)
            if found:
                addr = found.group(1).decode()
                break
        threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
        run_once(addr, args.subscribers, args.events // 2, args.rate)
        run_once(addr, args.subscribers, args.events, 0)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()

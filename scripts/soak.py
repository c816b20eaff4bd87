#!/usr/bin/env python3
"""Soak of `shepherd --cliserver` and `shepherd --server` in front of a fake
OpenAI upstream: requests without pause for a while, with long-lived `/updates`
subscribers and churning connections (health checks, subscribers that hang up
mid-stream, streamed completions abandoned halfway). Not a test; run with
`make soak` (SOAK_SECS per server, default 300).

Reports for each server: requests served, RSS after warm-up (the first fifth)
and at the end with the growth between them, open descriptors after warm-up
and at the end, and (cliserver) the events the long-lived subscribers lost:
gaps in `seq` and deltas missing against what the upstream sent. Exits 1 when
RSS grew more than 5% after warm-up, descriptors changed, or an event was lost.

Usage: soak.py [PATH_TO_SHEPHERD] [--secs N] [--subscribers N]
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DELTAS = 40
TOKEN = "soak-token-1f0e"


def chunk(content, finish=None):
    delta = {} if content is None else {"content": content}
    return {"id": "chatcmpl-soak", "object": "chat.completion.chunk", "created": 0,
            "model": "soak", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "soak", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for i in range(DELTAS):
                self.wfile.write(("data: %s\n\n" % json.dumps(chunk("w%d " % i))).encode())
            self.wfile.write(("data: %s\n\n" % json.dumps(chunk(None, "stop"))).encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:
            pass


def connect(addr):
    host, port = addr.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=60)


def request(addr, method, path, body=None, read_all=True):
    payload = b"" if body is None else json.dumps(body).encode()
    head = ("%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n"
            "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % (method, path, addr, TOKEN, len(payload)))
    with connect(addr) as sock:
        sock.sendall(head.encode() + payload)
        if not read_all:
            return sock.recv(4096)
        data = b""
        while True:
            part = sock.recv(65536)
            if not part:
                return data
            data += part


class Subscriber(threading.Thread):
    """Reads `/updates` for the whole soak; counts deltas and gaps in `seq`."""

    def __init__(self, addr):
        super().__init__(daemon=True)
        self.addr, self.deltas, self.gaps, self.last_seq = addr, 0, 0, None
        self.ready = threading.Event()

    def run(self):
        sock = connect(self.addr)
        sock.settimeout(None)
        sock.sendall(("GET /updates HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n"
                      % (self.addr, TOKEN)).encode())
        buffer = b""
        while True:
            data = sock.recv(65536)
            if not data:
                return
            buffer += data
            lines = buffer.split(b"\n")
            buffer = lines.pop()
            for line in lines:
                if not line.startswith(b"data: "):
                    continue
                try:
                    event = json.loads(line[6:])
                except ValueError:
                    continue
                self.ready.set()
                seq = event.get("seq")
                if isinstance(seq, int):
                    if self.last_seq is not None and seq != self.last_seq + 1:
                        self.gaps += seq - self.last_seq - 1
                    self.last_seq = seq
                if event.get("type") == "delta":
                    self.deltas += 1


def churn(addr, mode, stop, pause, idle):
    """Connections that come and go: health checks, abandoned streams. While
    `pause` is set it opens none and says so through `idle`."""
    while not stop.is_set():
        if pause.is_set():
            idle.set()
            time.sleep(0.01)
            continue
        idle.clear()
        try:
            request(addr, "GET", "/health")
            if mode == "--cliserver":
                with connect(addr) as sock:
                    sock.sendall(("GET /updates HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n"
                                  % (addr, TOKEN)).encode())
                    sock.recv(4096)
            else:
                body = {"model": "soak", "stream": True,
                        "messages": [{"role": "user", "content": "abandon me"}]}
                request(addr, "POST", "/v1/chat/completions", body, read_all=False)
        except OSError:
            pass
        time.sleep(0.05)


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def quiet_sample(pid):
    """(RSS, descriptors) once the descriptor count holds still for 200 ms (closed
    connections are released a moment after their last byte)."""
    last, deadline = fds(pid), time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = fds(pid)
        if now == last:
            break
        last = now
    return rss_kb(pid), last


def soak(shepherd, base, mode, secs, subscribers):
    server = subprocess.Popen(
        [shepherd, mode, "--port", "0", "--auth-token", TOKEN, "--backend", "openai",
         "--api-base", base, "-m", "soak", "--notools"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        addr = None
        for line in server.stderr:
            found = re.search(rb"listening on (?:http://)?(\S+)", line)
            if found:
                addr = found.group(1).decode()
                break
        threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
        subs = [Subscriber(addr) for _ in range(subscribers if mode == "--cliserver" else 0)]
        for sub in subs:
            sub.start()
        # The first event every subscriber gets is `connected`.
        for sub in subs:
            sub.ready.wait(30)
        stop, pause, idle = threading.Event(), threading.Event(), threading.Event()
        churner = threading.Thread(target=churn, args=(addr, mode, stop, pause, idle), daemon=True)
        churner.start()
        start, served, samples, failures = time.monotonic(), 0, [], 0
        warm_at = start + secs / 5
        warm = None
        while time.monotonic() < start + secs:
            if mode == "--cliserver":
                answer = request(addr, "POST", "/request", {"prompt": "soak %d" % served})
                ok = b'"success":true' in answer
                if served % 20 == 19:
                    request(addr, "POST", "/clear")
            else:
                body = {"model": "soak", "messages": [{"role": "user", "content": "soak"}]}
                ok = b"w39" in request(addr, "POST", "/v1/chat/completions", body)
            served += 1
            failures += 0 if ok else 1
            if warm is None and time.monotonic() >= warm_at:
                pause.set()
                idle.wait(30)
                warm = quiet_sample(server.pid)
                pause.clear()
        stop.set()
        churner.join()
        # Let the subscribers read what is still in flight.
        deadline = time.monotonic() + 10
        expected = served * DELTAS
        while time.monotonic() < deadline and any(s.deltas < expected for s in subs):
            time.sleep(0.1)
        end = quiet_sample(server.pid)
        lost = sum(max(0, expected - s.deltas) + s.gaps for s in subs)
        growth = (end[0] - warm[0]) / warm[0] * 100
        print("%-11s %6d requests (%d failed) in %ds; RSS %d kB after warm-up, %d kB at the end "
              "(%+.1f%%); descriptors %d -> %d; %d subscribers lost %d events"
              % (mode, served, failures, secs, warm[0], end[0], growth, warm[1], end[1],
                 len(subs), lost))
        return growth <= 5.0 and end[1] == warm[1] and lost == 0 and failures == 0
    finally:
        server.terminate()
        server.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shepherd", nargs="?", default="target/release/shepherd")
    parser.add_argument("--secs", type=int, default=300)
    parser.add_argument("--subscribers", type=int, default=8)
    args = parser.parse_args()
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    base = "http://127.0.0.1:%d/v1" % upstream.server_address[1]
    ok = all([soak(args.shepherd, base, mode, args.secs, args.subscribers)
              for mode in ("--cliserver", "--server")])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Side by side: the same requests to llama-server and `shepherd --server` on
the same model, and a table of what each answered.

Usage: compat_llama_server.py LLAMA_SERVER SHEPHERD MODEL [THREADS]

Starts both servers on free loopback ports (one slot, a 4,096-token context,
temperature 0 in every request), sends each request of REQUESTS to both, and
prints one row per request: both statuses, whether they agree, the top-level
keys one answer has and the other lacks ("shape"), and whether each answer
holds what its API documents for that route (the REQUIRED keys). A row where
shepherd differs carries the reason from REASONS. `make compat` runs it with
the llama-server that `make bench` builds from the llama-cpp-python sdist.
Standard library only. Exits 1 when a row differs without a reason.
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

USER = [{"role": "user", "content": "Name a colour."}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
SCHEMA = {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}
PROMPT = "1, 2, 3, 4,"


def chat(**extra):
    return dict({"messages": USER, "max_tokens": 12, "temperature": 0}, **extra)


# (name, method, path, body or None, streamed)
REQUESTS = [
    ("chat", "POST", "/v1/chat/completions", chat(), False),
    ("chat streamed", "POST", "/v1/chat/completions", chat(stream=True), True),
    ("chat streamed with usage", "POST", "/v1/chat/completions",
     chat(stream=True, stream_options={"include_usage": True}), True),
    ("chat, system message", "POST", "/v1/chat/completions",
     chat(messages=[{"role": "system", "content": "Answer in one word."}] + USER), False),
    ("chat, max_tokens 1", "POST", "/v1/chat/completions", chat(max_tokens=1), False),
    ("chat, stop", "POST", "/v1/chat/completions", chat(stop=["e"]), False),
    ("chat, samplers", "POST", "/v1/chat/completions",
     chat(top_p=0.9, top_k=20, min_p=0.05, repeat_penalty=1.1, seed=3), False),
    ("chat, n_predict", "POST", "/v1/chat/completions",
     {"messages": USER, "n_predict": 5, "temperature": 0}, False),
    ("chat, cache_prompt and id_slot", "POST", "/v1/chat/completions",
     chat(cache_prompt=True, id_slot=0), False),
    ("chat, unknown field", "POST", "/v1/chat/completions", chat(frobnicate=1), False),
    ("chat, json_object", "POST", "/v1/chat/completions",
     chat(response_format={"type": "json_object"}, max_tokens=30), False),
    ("chat, json_schema", "POST", "/v1/chat/completions",
     chat(response_format={"type": "json_schema",
                           "json_schema": {"name": "c", "schema": SCHEMA}}, max_tokens=30), False),
    ("chat, top-level json_schema", "POST", "/v1/chat/completions",
     chat(json_schema=SCHEMA, max_tokens=30), False),
    ("chat, grammar", "POST", "/v1/chat/completions",
     chat(grammar='root ::= "red" | "blue"'), False),
    ("chat, tools auto", "POST", "/v1/chat/completions",
     chat(tools=[WEATHER], max_tokens=40), False),
    ("chat, tool forced", "POST", "/v1/chat/completions",
     chat(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}},
          max_tokens=40), False),
    ("chat, tool forced, streamed", "POST", "/v1/chat/completions",
     chat(tools=[WEATHER], tool_choice="required", max_tokens=40, stream=True), True),
    ("chat, logprobs", "POST", "/v1/chat/completions", chat(logprobs=True, top_logprobs=2), False),
    ("chat, n 2", "POST", "/v1/chat/completions", chat(n=2), False),
    ("chat, logit_bias", "POST", "/v1/chat/completions", chat(logit_bias={"15": -100}), False),
    ("completions, logprobs", "POST", "/v1/completions",
     {"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "logprobs": 2}, False),
    ("completion (native), n_probs", "POST", "/completion",
     {"prompt": PROMPT, "n_predict": 4, "temperature": 0, "n_probs": 2}, False),
    ("infill (no FIM tokens)", "POST", "/infill",
     {"input_prefix": "def f():", "input_suffix": "\n", "n_predict": 4}, False),
    ("chat, no messages", "POST", "/v1/chat/completions", {"messages": []}, False),
    ("chat, bad temperature", "POST", "/v1/chat/completions", chat(temperature="hot"), False),
    ("chat, not JSON", "POST", "/v1/chat/completions", "{not json", False),
    ("chat, unprefixed", "POST", "/chat/completions", chat(), False),
    ("completions", "POST", "/v1/completions",
     {"prompt": PROMPT, "max_tokens": 8, "temperature": 0}, False),
    ("completions streamed", "POST", "/v1/completions",
     {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "stream": True}, True),
    ("completions, stop", "POST", "/v1/completions",
     {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "stop": [","]}, False),
    ("completion (native)", "POST", "/completion",
     {"prompt": PROMPT, "n_predict": 8, "temperature": 0}, False),
    ("completion (native) streamed", "POST", "/completion",
     {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "stream": True}, True),
    ("completion (native), stop word", "POST", "/completion",
     {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "stop": [","]}, False),
    ("completion (native), grammar", "POST", "/completion",
     {"prompt": "Yes or no?", "n_predict": 4, "temperature": 0,
      "grammar": 'root ::= " yes" | " no"'}, False),
    ("completion (native), json_schema", "POST", "/completion",
     {"prompt": "A colour as JSON:", "n_predict": 30, "temperature": 0, "json_schema": SCHEMA}, False),
    ("tokenize", "POST", "/tokenize", {"content": "Hello world"}, False),
    ("tokenize with pieces", "POST", "/tokenize", {"content": "Hello", "with_pieces": True}, False),
    ("detokenize", "POST", "/detokenize", {"tokens": [19556, 905]}, False),
    ("apply-template", "POST", "/apply-template", {"messages": USER}, False),
    ("props", "GET", "/props", None, False),
    ("health", "GET", "/health", None, False),
    ("models", "GET", "/v1/models", None, False),
    ("models unprefixed", "GET", "/models", None, False),
    ("messages", "POST", "/v1/messages",
     {"model": "m", "max_tokens": 12, "messages": USER, "temperature": 0}, False),
    ("messages streamed", "POST", "/v1/messages",
     {"model": "m", "max_tokens": 12, "messages": USER, "temperature": 0, "stream": True}, True),
    ("messages, stop sequence", "POST", "/v1/messages",
     {"model": "m", "max_tokens": 12, "messages": USER, "temperature": 0,
      "stop_sequences": ["e"]}, False),
    ("messages count_tokens", "POST", "/v1/messages/count_tokens",
     {"model": "m", "messages": USER}, False),
    ("responses", "POST", "/v1/responses",
     {"model": "m", "input": "Name a colour.", "max_output_tokens": 12, "temperature": 0}, False),
    ("responses streamed", "POST", "/v1/responses",
     {"model": "m", "input": "Name a colour.", "max_output_tokens": 12, "temperature": 0,
      "stream": True}, True),
    ("embeddings", "POST", "/v1/embeddings", {"input": "a cat"}, False),
    ("slots", "GET", "/slots", None, False),
    ("metrics", "GET", "/metrics", None, False),
    ("no such route", "GET", "/nowhere", None, False),
]

# What each route's answer must hold (top-level keys), by the API it speaks.
REQUIRED = {
    "/v1/chat/completions": ["id", "object", "created", "model", "choices"],
    "/chat/completions": ["id", "object", "created", "model", "choices"],
    "/v1/completions": ["id", "object", "created", "model", "choices"],
    "/completion": ["content", "stop"],
    "/tokenize": ["tokens"],
    "/detokenize": ["content"],
    "/apply-template": ["prompt"],
    "/props": ["default_generation_settings", "total_slots", "chat_template"],
    "/v1/models": ["object", "data"],
    "/models": ["data"],
    "/v1/messages": ["id", "type", "role", "content", "stop_reason", "usage"],
    "/v1/messages/count_tokens": ["input_tokens"],
    "/v1/responses": ["id", "object", "status", "output"],
    "/v1/embeddings": ["object", "data"],
    "/health": ["status"],
}

# Why shepherd answers otherwise, where it does.
REASONS = {
    "chat streamed with usage": "the figures ride on the chunk with the finish reason here, "
                                "on the usage chunk in llama-server",
    "chat, no messages": "OpenAI's API requires at least one message: a 400 naming 'messages'",
    "chat, not JSON": "a body that is not JSON is the client's fault: a 400, not a 500",
    "props": "llama-server's web UI and router settings (ui, ui_settings, endpoint_*, "
             "cors_proxy_enabled, is_sleeping, media_marker) have no counterpart",
    "models": "llama-server adds an Ollama-style 'models' list beside OpenAI's 'data'",
    "models unprefixed": "llama-server adds an Ollama-style 'models' list beside OpenAI's 'data'",
    "responses": "shepherd echoes the request's settings as OpenAI's response object "
                 "documents them; llama-server adds completed_at and leaves them out",
    "responses streamed": "OpenAI documents sequence_number on every event (llama-server "
                          "leaves it out) and no timings there",
    "completions streamed": "OpenAI sends usage only with stream_options.include_usage; "
                            "llama-server always does",
    "chat, n 2": "llama-server caps n at its --parallel slots (1 here); shepherd runs "
                 "the choices it cannot place at once from its queue",
    "embeddings": "llama-server needs --embeddings for it; shepherd serves embeddings always",
    "slots": "each slot's cached and decoded tokens (n_cached, n_decoded) rather than "
             "llama-server's per-task figures and its last prompt's text",
    "metrics": "llama-server needs --metrics; shepherd serves Prometheus text always",
    "chat, unknown field": "",
    "messages count_tokens": "",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body, streamed):
    """Status, the answer as JSON (a stream: its last JSON event), and the raw text."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    data = body if isinstance(body, str) else (None if body is None else json.dumps(body))
    conn.request(method, path, data, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    text = resp.read().decode("utf-8", "replace")
    conn.close()
    if streamed and resp.status == 200:
        events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        events = [e for e in events if e.strip() != "[DONE]"]
        for event in reversed(events):
            try:
                value = json.loads(event)
            except ValueError:
                continue
            if isinstance(value, dict) and (value.get("choices") or "usage" not in value
                                            or value.get("type")):
                return resp.status, value, text
        return resp.status, None, text
    try:
        return resp.status, json.loads(text), text
    except ValueError:
        return resp.status, None, text


def start(command, port, log):
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{command[0]} exited; see {log.name}")
        try:
            if request(port, "GET", "/health", None, False)[0] == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"{command[0]} never became healthy; see {log.name}")


def valid(path, status, value):
    """Whether a 200 holds its route's keys, or an error is a JSON error object."""
    if status != 200:
        return isinstance(value, dict) and "error" in value or value is None and status == 404
    keys = REQUIRED.get(path)
    if keys is None:
        return True
    if not isinstance(value, dict):
        return False
    # A stream's last event: its own keys (a chunk, or an SSE event with a type).
    if "type" in value and value.get("type", "").startswith(("response.", "message")):
        return True
    if path == "/completion" and value.get("stop") is True:
        return True
    return all(k in value for k in keys) or "choices" in value


def main():
    llama, shepherd, model = sys.argv[1:4]
    threads = sys.argv[4] if len(sys.argv) > 4 else "2"
    logs = tempfile.mkdtemp(prefix="compat-")
    lport, sport = free_port(), free_port()
    with open(os.path.join(logs, "llama-server.log"), "w") as llog, \
            open(os.path.join(logs, "shepherd.log"), "w") as slog:
        procs = [
            start([llama, "-m", model, "-t", threads, "-c", "4096", "--parallel", "1",
                   "--host", "127.0.0.1", "--port", str(lport)], lport, llog),
            start([shepherd, "--server", "-m", model, "--threads", threads, "--context-size",
                   "4096", "--host", "127.0.0.1", "--port", str(sport), "--no-prompt-cache"],
                  sport, slog),
        ]
        try:
            rows = [compare(lport, sport, *r) for r in REQUESTS]
        finally:
            for proc in procs:
                proc.kill()
    unexplained = report(rows)
    print(f"{len(rows)} requests; logs in {logs}")
    sys.exit(1 if unexplained else 0)


def compare(lport, sport, name, method, path, body, streamed):
    ls, lv, _ = request(lport, method, path, body, streamed)
    ss, sv, _ = request(sport, method, path, body, streamed)
    lkeys = set(lv) if isinstance(lv, dict) else set()
    skeys = set(sv) if isinstance(sv, dict) else set()
    shape = ""
    if ls == ss == 200 and lkeys != skeys:
        missing, extra = sorted(lkeys - skeys), sorted(skeys - lkeys)
        shape = " ".join([f"-{k}" for k in missing] + [f"+{k}" for k in extra])
    return {
        "name": name, "llama": ls, "shepherd": ss, "same": ls == ss, "shape": shape,
        "valid": (valid(path, ls, lv), valid(path, ss, sv)),
    }


def report(rows):
    unexplained = 0
    print(f"{'request':34} {'llama':>5} {'shep':>5} same  valid  shape / reason")
    for r in rows:
        differs = not r["same"] or not r["valid"][1] or r["shape"]
        reason = REASONS.get(r["name"], "")
        if differs and not reason:
            unexplained += 1
        valid = "".join("y" if v else "n" for v in r["valid"])
        note = r["shape"] + (f"  [{reason}]" if reason else "")
        flag = "" if r["same"] else "DIFF"
        print(f"{r['name']:34} {r['llama']:>5} {r['shepherd']:>5} {flag:4}  {valid:5}  {note}")
    return unexplained


if __name__ == "__main__":
    main()

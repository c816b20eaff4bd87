#!/usr/bin/env python3
"""`make bench` part five: the agent as it runs, shepherd against llama-server.

Usage: bench_agent.py --record SHEPHERD OUT.json
           Runs `SHEPHERD -e` once against a recording OpenAI endpoint on 127.0.0.1
           and writes the request the agent sent: its real system prompt and its real
           tool list (read, write, edit, bash, ...), exactly as a provider gets them.
       bench_agent.py REQUEST.json MODEL.gguf NAME=URL [NAME=URL ...]
           The workloads below on every server, one request at a time, servers
           interleaved within each round (the first of a round rotates).

Every request carries the recorded system prompt and tools, temperature 0, and
bans the model's end-of-generation tokens (llama-server's `ignore_eos`, spelled as
a `logit_bias` both servers take), so both sides generate the same number of tokens:

  answer:  a long free answer (ANSWER_TOKENS, 800) with the tools offered and
           `tool_choice` auto: the lazy tool-call grammar waits for its marker at
           every token. Also asked of each server without the tools (`answer, no
           tools`): the same messages, nothing to wait for, and a prompt about
           1,500 tokens shorter; and at the same depth (`answer, no tools, same
           depth`): the tools' JSON as text in the system prompt instead, so that
           only the tools being offered differs, not the context decoded over.
  write:   a `write` call whose content runs to WRITE_TOKENS (600, about 2 KB):
           the call is forced (`tool_choice` names `write`), and tokens holding a
           double quote get a bias of -100 (taken only where the grammar allows
           nothing else) so that the content string never closes: the grammar
           constrains every token of a long argument.
  repeat:  the agent's edit turn of bench_spec.py (a file read by the read tool,
           written back with one name changed) with the tools offered: text that
           repeats its context, where n-gram speculation should pay (servers named
           with `ngram` in them draft).

Prompts change every round (bench_spec.py's SETTINGS and NAMES), so no server is
asked the same thing twice. Speeds are each answer's own `timings` (predicted_n
over predicted_ms). Standard library only.
"""
import http.server
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_spec import SETTINGS, STORIES, edit, quiet, request  # noqa: E402
from synthetic_gguf import array_header, decode_scalar, read_metadata  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "3"))
ANSWER_TOKENS = int(os.environ.get("ANSWER_TOKENS", "800"))
WRITE_TOKENS = int(os.environ.get("WRITE_TOKENS", "600"))
REPEAT_TOKENS = int(os.environ.get("REPEAT_TOKENS", "400"))


def record(shepherd, out):
    """Writes the chat request shepherd's agent sends to a provider (see the usage)."""
    bodies = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def reply(self, kind, data):
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            models = {"object": "list", "data": [{"id": "bench", "object": "model"}]}
            self.reply("application/json", json.dumps(models).encode())

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            bodies.append(body)
            message = {"role": "assistant", "content": "ok"}
            if body.get("stream"):
                chunk = {"choices": [{"index": 0, "delta": message, "finish_reason": "stop"}]}
                self.reply("text/event-stream",
                           f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
            else:
                whole = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
                self.reply("application/json", json.dumps(whole).encode())

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as home:
        subprocess.run([shepherd, "--backend", "openai", "--api-base",
                        f"http://127.0.0.1:{server.server_address[1]}/v1", "-m", "bench",
                        "--api-key", "bench", "--nomcp", "-e", "hello"],
                       env=dict(os.environ, HOME=home), capture_output=True, timeout=120,
                       check=True)
    server.shutdown()
    chats = [b for b in bodies if b.get("tools")]
    if not chats:
        raise SystemExit("shepherd's agent sent no request with tools")
    body = chats[0]
    system = [m for m in body["messages"] if m["role"] == "system"]
    with open(out, "w") as f:
        json.dump({"system": system[0]["content"] if system else "", "tools": body["tools"]}, f)
    print(f"recorded the agent's system prompt ({len(system[0]['content']) if system else 0} "
          f"chars) and {len(body['tools'])} tools", file=sys.stderr)


def vocabulary(gguf):
    """The model's token texts and its end-of-generation ids (from the GGUF file)."""
    kvs = {key: (vtype, payload) for key, vtype, payload in read_metadata(gguf)}
    _, payload = kvs["tokenizer.ggml.tokens"]
    _, n = array_header(payload)
    tokens, at = [], 12
    for _ in range(n):
        (length,) = struct.unpack_from("<Q", payload, at)
        tokens.append(payload[at + 8:at + 8 + length].decode("utf-8", "replace"))
        at += 8 + length
    ends = {decode_scalar(*kvs[k]) for k in ("tokenizer.ggml.eos_token_id",
                                             "tokenizer.ggml.eot_token_id") if k in kvs}
    # The turn ends that llama.cpp also counts as end of generation.
    ends |= {i for i, t in enumerate(tokens) if t in (
        "<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>", "<|end|>", "<eos>")}
    return tokens, sorted(ends)


def workloads(agent, tokens, ends):
    """The round's requests per workload: (workload, server filter, body) lists."""
    no_end = [[t, False] for t in ends]
    # Not banned: the call's own JSON needs its quotes where the grammar allows
    # nothing else; -100 keeps every other token ahead of them.
    quotes = [[i, -100] for i, t in enumerate(tokens) if '"' in t]
    system = {"role": "system", "content": agent["system"]}

    def answer(round_no):
        setting = SETTINGS[round_no % len(SETTINGS)]
        story = STORIES[round_no % len(STORIES)]
        user = {"role": "user", "content": f"Write a long, detailed story about {story}, "
                                           f"set {setting}. Do not use any tools."}
        return {"messages": [system, user], "max_tokens": ANSWER_TOKENS, "logit_bias": no_end}

    def write(round_no):
        setting = SETTINGS[round_no % len(SETTINGS)]
        user = {"role": "user", "content": f"Write notes.md: a long travel guide to a town "
                                           f"{setting}, with sections and lists."}
        return {"messages": [system, user], "max_tokens": WRITE_TOKENS,
                "logit_bias": no_end + quotes,
                "tool_choice": {"type": "function", "function": {"name": "write"}}}

    def repeat(round_no):
        messages = edit(round_no)[0]
        messages[0] = system
        return {"messages": messages, "max_tokens": REPEAT_TOKENS, "logit_bias": no_end}

    def answer_as_text(round_no):
        # The same answer with nothing to wait for, at the same depth: the tools'
        # descriptions are text in the system prompt (attention over a longer
        # context costs every token, tools or not).
        body = answer(round_no)
        tools = "\n".join(json.dumps(t) for t in agent["tools"])
        text = {"role": "system", "content": f"{agent['system']}\n\nTools:\n{tools}"}
        return dict(body, messages=[text] + body["messages"][1:])

    return [("answer", answer, True), ("answer, no tools", answer, False),
            ("answer, no tools, same depth", answer_as_text, False),
            ("write", write, True), ("repeat", repeat, True)]


def generate(url, body, tools):
    """One request; (tokens, ms) from the server's own timings, and the drafts."""
    body = dict(body, model="bench", temperature=0, stream=False)
    if tools:
        body["tools"] = tools
    data = request(url, "/v1/chat/completions", body)
    timings = data.get("timings") or {}
    drafts = (timings.get("draft_n_accepted", 0), timings.get("draft_n", 0))
    depth = (timings.get("prompt_n") or 0) + (timings.get("cache_n") or 0)
    return timings.get("predicted_n") or 0, timings.get("predicted_ms") or 0.0, drafts, depth


def main():
    if sys.argv[1:2] == ["--record"]:
        return record(sys.argv[2], sys.argv[3])
    agent = json.load(open(sys.argv[1]))
    tokens, ends = vocabulary(sys.argv[2])
    servers = [arg.split("=", 1) for arg in sys.argv[3:]]
    loads = workloads(agent, tokens, ends)
    speeds, counts, drafts, depths = {}, {}, {}, {}
    for round_no in range(ROUNDS):
        order = servers[round_no % len(servers):] + servers[:round_no % len(servers)]
        for workload, body_of, with_tools in loads:
            body = body_of(round_no)
            for name, url in order:
                # Without tools only the servers that do not draft: the answer's
                # baseline on each side.
                if not with_tools and "ngram" in name:
                    continue
                quiet()
                n, ms, (taken, made), depth = generate(url, body,
                                                       agent["tools"] if with_tools else None)
                depths[(name, workload)] = depth
                speeds.setdefault((name, workload), []).append(n / ms * 1000 if ms else 0.0)
                counts.setdefault((name, workload), []).append(n)
                t, m = drafts.get((name, workload), (0, 0))
                drafts[(name, workload)] = (t + taken, m + made)
    med = statistics.median
    base = servers[0][0]
    print(f"the agent as it runs: its system prompt and {len(agent['tools'])} tools in every "
          f"request, generation tokens/s (median of {ROUNDS} interleaved rounds)")
    for workload, _, _ in loads:
        print(f"  {workload}:")
        for name, _ in servers:
            if (name, workload) not in speeds:
                continue
            mine = speeds[(name, workload)]
            first = speeds[(base, workload)]
            paired = med([m / f for m, f in zip(mine, first) if f])
            taken, made = drafts[(name, workload)]
            note = f"  (drafts: {taken} of {made} accepted)" if made else ""
            print(f"    {name:<28} {med(mine):8.1f} t/s  {med(mine) / med(first):5.2f}x {base}"
                  f" (paired {paired:.2f}x)  {min(counts[(name, workload)])}-"
                  f"{max(counts[(name, workload)])} tokens after {depths[(name, workload)]}"
                  f"{note}")
    # The ratios the agent lives by.
    print("  ratios:")
    for name, _ in servers:
        for baseline in ("answer, no tools", "answer, no tools, same depth"):
            if (name, baseline) in speeds:
                ratio = med(speeds[(name, "answer")]) / med(speeds[(name, baseline)])
                print(f"    {name:<28} answer with tools / {baseline[7:]}: {ratio:.2f}x")
    for name, _ in servers:
        off = name.replace("-ngram-mod", "").replace("-ngram", "")
        if name != off and (off, "repeat") in speeds:
            print(f"    {name:<28} repeat, drafting / not: "
                  f"{med(speeds[(name, 'repeat')]) / med(speeds[(off, 'repeat')]):.2f}x")


if __name__ == "__main__":
    main()

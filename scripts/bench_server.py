#!/usr/bin/env python3
"""`make bench` part two: shepherd's OpenAI-compatible server against llama-server.

Usage: bench_server.py NAME=URL [NAME=URL ...]

Drives every server through POST /v1/chat/completions with the same client:
streaming, temperature 0, a fixed max_tokens. Per round and per server (servers
interleaved within each round, so machine load hits both alike) it measures

  single: one stream alone, completion tokens / wall time of the request;
  aggregate: STREAMS concurrent streams, all their completion tokens / wall time
             from the first request sent to the last stream finished.

and prints medians and the ratio of each server to the first one. Then the time to
first token in a scripted 10-turn chat (the in-process bench's conversation, over
HTTP): turn 1 from a cold cache, turn 10 with nine turns before it, each turn sent
either as soon as the last answer is in (a script) or after a pause (a user); the
servers again interleaved (TTFT_ROUNDS=0 leaves this part out). RESULTS_JSON=FILE also
writes every round's speeds there. SYSTEM_WORDS=N opens every request of the speed
rounds with the same long system prompt of about N words (an agent's opening: its
instructions and tool descriptions), as a front-end's requests do. Standard library
only: http.client and threads.
"""
import http.client
import json
import os
import statistics
import sys
import threading
import time
import urllib.parse

ROUNDS = int(os.environ.get("ROUNDS", "5"))
STREAMS = int(os.environ.get("STREAMS", "4"))
MAX_TOKENS = int(os.environ.get("MAX_TOKENS", "128"))
TTFT_ROUNDS = int(os.environ.get("TTFT_ROUNDS", "4"))
PAUSE = int(os.environ.get("PAUSE_MS", "300")) / 1000
SYSTEM_WORDS = int(os.environ.get("SYSTEM_WORDS", "0"))
TOOLS = ["read_file", "write_file", "list_directory", "search_files", "run_command",
         "fetch_url", "edit_file", "move_file", "git_status", "git_diff"]


def system_prompt():
    """The system prompt of every speed request: short, or about SYSTEM_WORDS words of
    instructions and tool descriptions, the same for every request."""
    if SYSTEM_WORDS <= 0:
        return "You are a helpful assistant."
    words = ["You are a careful coding agent working in the user's repository."]
    i = 0
    while sum(len(w.split()) for w in words) < SYSTEM_WORDS:
        tool = TOOLS[i % len(TOOLS)]
        words.append(
            f"Tool {tool} (variant {i // len(TOOLS)}): takes a JSON object with a path, "
            f"an optional limit of lines and an optional offset; returns the result as "
            f"text. Use {tool} only when the task needs it, explain why before you call "
            f"it, and never call it twice with the same arguments.")
        i += 1
    return " ".join(words)


PROMPTS = [
    "Write a long story about a dragon who learns to cook.",
    "Write a long story about a lighthouse keeper and a storm.",
    "Write a long story about a robot that plants a garden.",
    "Write a long story about two friends crossing a desert.",
    "Write a long story about a cat who runs a bakery.",
    "Write a long story about a city under the sea.",
    "Write a long story about a clock that runs backwards.",
    "Write a long story about the last train of the night.",
]


def stream_chat(url, messages, max_tokens):
    """One streamed chat completion: (completion tokens, seconds, seconds to the first
    content, the content)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    body = json.dumps({
        "model": "bench",
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
        "temperature": 0,
        # The same end for both servers. A model without a chat template (the
        # tests' Gemma 3 270M is a base model) gets ChatML from both, but
        # `<|im_end|>` is no token of its vocabulary: shepherd stops at it as text
        # and llama-server writes on to max_tokens, so without this the two would
        # not do the same work (17 tokens against 128 a request). Where it is a
        # token this changes nothing.
        "stop": ["<|im_end|>"],
    })
    started = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"{url}: HTTP {response.status}: {response.read()[:300]!r}")
    chunks, usage, first, text = 0, None, None, []
    for raw in response:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        event = json.loads(data)
        if event.get("usage"):
            usage = event["usage"]
        for choice in event.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if content:
                if first is None:
                    first = time.perf_counter() - started
                chunks += 1
                text.append(content)
    elapsed = time.perf_counter() - started
    conn.close()
    tokens = usage["completion_tokens"] if usage and usage.get("completion_tokens") else chunks
    return tokens, elapsed, elapsed if first is None else first, "".join(text)


def stream_completion(url, prompt, max_tokens=None):
    """One streamed answer to PROMPT; returns (completion tokens, seconds)."""
    messages = [
        {"role": "system", "content": system_prompt()},
        {"role": "user", "content": prompt},
    ]
    tokens, elapsed, _, _ = stream_chat(url, messages, max_tokens or MAX_TOKENS)
    return tokens, elapsed


def ten_turns(url, conversation_no, pause):
    """Milliseconds to the first content of each turn of the scripted chat. The system
    prompt opens with the conversation's number, so turn 1 shares next to nothing with
    what any slot holds."""
    messages = [
        {"role": "system", "content": f"Conversation {conversation_no}. Keep answers concise."},
        {"role": "user", "content": "Say hello."},
    ]
    ttft = []
    for turn in range(1, 11):
        if turn > 1:
            time.sleep(pause)
            messages.append({"role": "user", "content": f"Tell me one fact about the number {turn}."})
        _, _, first, text = stream_chat(url, messages, 16)
        ttft.append(first * 1000)
        messages.append({"role": "assistant", "content": text})
    return ttft


def single(url, round_no):
    tokens, secs = stream_completion(url, PROMPTS[round_no % len(PROMPTS)])
    return tokens / secs


def aggregate(url, round_no):
    results, errors = [], []

    def run(i):
        try:
            results.append(stream_completion(url, PROMPTS[(round_no + i) % len(PROMPTS)]))
        except Exception as err:  # reported below; a failed stream fails the bench
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(STREAMS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return sum(tokens for tokens, _ in results) / elapsed


def main():
    servers = [arg.split("=", 1) for arg in sys.argv[1:]]
    if not servers or any(len(s) != 2 for s in servers):
        sys.exit(__doc__)
    # Warm-up: page faults, caches, first-request setup in either server.
    for _, url in servers:
        stream_completion(url, "Say hello.")
    speeds = {name: {"single": [], "aggregate": []} for name, _ in servers}
    for round_no in range(ROUNDS):
        order = servers if round_no % 2 == 0 else servers[::-1]
        for name, url in order:
            # The first request to a server that sat idle while the other one ran is
            # slower (cold caches; measured up to 20%), whichever server it is: a
            # short unmeasured request first puts both in the same state.
            stream_completion(url, "Say hello.", max_tokens=16)
            speeds[name]["single"].append(single(url, round_no))
            speeds[name]["aggregate"].append(aggregate(url, round_no))
        print(f"round {round_no + 1}/{ROUNDS}: " + ", ".join(
            f"{n} {speeds[n]['single'][-1]:.1f}/{speeds[n]['aggregate'][-1]:.1f}" for n, _ in servers),
            file=sys.stderr)
    base = servers[0][0]
    system = f", a {SYSTEM_WORDS}-word system prompt" if SYSTEM_WORDS > 0 else ""
    print(f"servers: medians of {ROUNDS} interleaved rounds, tokens/s "
          f"(max_tokens {MAX_TOKENS}, {STREAMS} concurrent streams for aggregate{system})")
    print(f"{'test':12} " + " ".join(f"{n:>14}" for n, _ in servers)
          + "   ratio  paired  spread(min-max)")
    for test in ("single", "aggregate"):
        meds = {n: statistics.median(speeds[n][test]) for n, _ in servers}
        cells = " ".join(f"{meds[n]:14.1f}" for n, _ in servers)
        # "paired": the median of each round's own ratio (cancels drift between rounds).
        ratios = " ".join(
            f"{meds[n] / meds[base]:.2f}x  "
            f"{statistics.median(m / b for b, m in zip(speeds[base][test], speeds[n][test])):.2f}x"
            for n, _ in servers[1:])
        spread = " ".join(f"{n}:{min(speeds[n][test]):.0f}-{max(speeds[n][test]):.0f}" for n, _ in servers)
        print(f"{test:12} {cells}   {ratios}  {spread}")
    if os.environ.get("RESULTS_JSON"):
        with open(os.environ["RESULTS_JSON"], "w") as f:
            json.dump({"streams": STREAMS, "max_tokens": MAX_TOKENS, "rounds": ROUNDS, "speeds": speeds}, f)
    if TTFT_ROUNDS > 0:
        time_to_first_token(servers)


def time_to_first_token(servers):
    modes = (("back to back", 0.0), (f"after {PAUSE * 1000:.0f} ms", PAUSE))
    ttft = {(name, mode): [] for name, _ in servers for mode, _ in modes}
    conversation_no = 0
    for round_no in range(TTFT_ROUNDS):
        order = servers if round_no % 2 == 0 else servers[::-1]
        for mode, pause in modes:
            for name, url in order:
                conversation_no += 1
                # As in the rounds above: a server that sat idle is slower at first
                # (here for a few hundred ms after the switch, for either server), so
                # an unmeasured request, and turn 1 after a pause in both modes.
                stream_completion(url, "Say hello.", max_tokens=16)
                time.sleep(PAUSE)
                ttft[(name, mode)].append(ten_turns(url, conversation_no, pause))
    base = servers[0][0]
    print(f"time to first token, ms: a scripted 10-turn chat (max_tokens 16), medians of "
          f"{TTFT_ROUNDS} interleaved rounds")
    print(f"{'':14} " + " ".join(f"{n + ' t1/t10/ratio':>26}" for n, _ in servers)
          + f"  t10 vs {base}")
    for mode, _ in modes:
        cells, t10s = [], {}
        for name, _ in servers:
            runs = ttft[(name, mode)]
            t1 = statistics.median(run[0] for run in runs)
            t10s[name] = statistics.median(run[9] for run in runs)
            cells.append(f"{t1:8.0f} {t10s[name]:8.0f} {t10s[name] / t1:7.2f}x")
        versus = " ".join(f"{t10s[n] / t10s[base]:.2f}x" for n, _ in servers[1:])
        print(f"{mode:14} " + " ".join(f"{c:>26}" for c in cells) + f"  {versus}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""`make bench` part four: speculative decoding, shepherd against llama-server.

Usage: bench_spec.py NAME=URL [NAME=URL ...]

Every server gets the same two workloads through POST /v1/chat/completions,
temperature 0, not streamed, one request at a time, servers interleaved within
each round (the first server of a round rotates, so machine load hits all alike):

  edit:  an agent turn: the user asks for a function renamed in a file of about
         80 lines, the assistant called the read tool, the tool returned the file;
         the model writes the file back with the name changed. Each round asks for
         another new name (NAMES), for the reason the prose's settings change;
  prose: four stories, where the context holds nothing to copy; the speed of a
         round is all four answers' tokens over their time. A small model's greedy
         story falls into a loop now and then, which drafts far better, and where
         the kernels round differently the loop comes in one server's text and not
         in another's: over four stories the luck of one text weighs a quarter.
         Each round sets the four stories somewhere else (SETTINGS), so that no
         server is asked a prompt twice: llama-server's ngram-mod keeps the n-grams
         of earlier requests, and the same story asked again drafts from its last
         answer (measured: one story three times, 83, 70 and 92 t/s, 18, 133 and
         260 draft tokens accepted), which is a retry, not prose.

A model without a chat template (a base model, such as the tests' Gemma 3 270M)
does not follow instructions, and a chat request would measure each server's
fallback template instead: for it both workloads go as raw prompts through
POST /v1/completions (the file, then a comment asking for it again renamed;
each story's first sentence), told apart by shepherd's `/props` (an empty
`chat_template`). The rename check then says whether the base model copied it.

It reads each answer's generation time from the server's own `timings`
(`predicted_n` and `predicted_ms`, which both servers report, so client and HTTP
time are left out), prints medians per server and workload, each server's ratio to
the first one named, and marks on how many of a workload's prompts a server's
first-round answer was another text than the first server's (greedy answers differ
where the kernels round differently, and a text that repeats itself drafts far
better). Standard library only.
"""
import http.client
import json
import os
import statistics
import sys
import time
import urllib.parse

ROUNDS = int(os.environ.get("ROUNDS", "6"))
EDIT_TOKENS = int(os.environ.get("EDIT_TOKENS", "400"))
PROSE_TOKENS = int(os.environ.get("PROSE_TOKENS", "200"))

SOURCE = '''"""Inventory: items, stock levels and the orders that change them."""
from dataclasses import dataclass, field


@dataclass
class Item:
    name: str
    price: float
    quantity: int = 0
    tags: list = field(default_factory=list)


def compute_total(items):
    """The value of everything in stock."""
    total = 0.0
    for item in items:
        total += item.price * item.quantity
    return total


def restock(item, amount):
    if amount <= 0:
        raise ValueError("amount must be positive")
    item.quantity += amount
    return item.quantity


def sell(item, amount):
    if amount > item.quantity:
        raise ValueError(f"only {item.quantity} of {item.name} left")
    item.quantity -= amount
    return item.price * amount


def find(items, name):
    for item in items:
        if item.name == name:
            return item
    return None


def tagged(items, tag):
    return [item for item in items if tag in item.tags]


def apply_discount(total, rate):
    if rate < 0 or rate > 1:
        raise ValueError("rate must be between 0 and 1")
    return total * (1 - rate)


def report(items, rate=0.0):
    total = compute_total(items)
    lines = []
    for item in sorted(items, key=lambda i: i.name):
        lines.append(f"{item.name:<20} {item.quantity:>5} x {item.price:>8.2f}")
    lines.append(f"{'total':<20} {total:>16.2f}")
    if rate:
        lines.append(f"{'after discount':<20} {apply_discount(total, rate):>16.2f}")
    return "\\n".join(lines)


def low_stock(items, threshold=5):
    return [item.name for item in items if item.quantity < threshold]


def main():
    items = [
        Item("hammer", 12.5, 10, ["tools"]),
        Item("nails", 0.05, 2000, ["tools", "small"]),
        Item("paint", 21.0, 3, ["decor"]),
    ]
    sell(find(items, "hammer"), 2)
    restock(find(items, "paint"), 4)
    print(report(items, rate=0.1))
    print("low stock:", ", ".join(low_stock(items)) or "none")
    print("value:", compute_total(items))


if __name__ == "__main__":
    main()
'''

# compute_total's new name in round r: one a round, so no edit prompt repeats either.
# Asked the same rename every round, llama-server's ngram-mod drafted round two's
# answer from round one's (348 of 348 drafts accepted): recall, not drafting.
NAMES = [
    "stock_value", "inventory_value", "total_value", "value_in_stock", "stock_worth",
    "sum_of_stock", "holdings_value", "worth_on_hand", "stock_total", "valuation",
    "shelf_value", "asset_total",
]


def edit(round_no):
    """Round `round_no`'s edit request: compute_total renamed to NAMES[round]."""
    name = NAMES[round_no % len(NAMES)]
    return [[
        {"role": "system", "content": "You are a coding assistant. You edit files exactly as asked."},
        {"role": "user", "content": f"In inventory.py, rename the function compute_total to "
                                    f"{name} everywhere. Reply with the whole new file only."},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "read", "arguments": json.dumps({"path": "inventory.py"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": SOURCE},
    ]]
STORIES = [
    "a lighthouse keeper who finds a map in a bottle",
    "a girl who builds a robot from scrap in her grandfather's barn",
    "a baker in a mountain village during the first snow of winter",
    "two rival chess players stranded at a small train station",
]
# Where round r's stories take place: one setting a round, so no prompt repeats.
SETTINGS = [
    "on a rainy coast in the 1890s", "in a desert city at the height of summer",
    "on a research ship in the Arctic", "in a busy market town before a festival",
    "in a quiet valley after a long war", "on an island cut off by a storm",
    "in a river port during a flood", "in a mountain monastery in spring",
    "in a mining town at the edge of a forest", "on a night train crossing a border",
    "in a seaside village at the end of the season", "in an old city under fog",
]


def prose(round_no):
    """Round `round_no`'s four story requests."""
    setting = SETTINGS[round_no % len(SETTINGS)]
    return [[
        {"role": "system", "content": "You are a storyteller."},
        {"role": "user", "content": f"Write a long story about {story}, set {setting}."},
    ] for story in STORIES]


# The same two workloads for a base model: text it continues.
def raw_edit(round_no):
    """Round `round_no`'s edit prompt for a base model."""
    return [f"# inventory.py\n{SOURCE}\n\n# inventory.py again, with the function "
            f"compute_total renamed to {NAMES[round_no % len(NAMES)]} everywhere:\n"]
RAW_OPENINGS = [
    "The lighthouse keeper found a map in a bottle. ",
    "The girl built a robot from scrap in her grandfather's barn. ",
    "The first snow of winter fell on the mountain village before dawn. ",
    "Two rival chess players were stranded at a small train station. ",
]


def raw_prose(round_no):
    """Round `round_no`'s four story openings for a base model."""
    setting = SETTINGS[round_no % len(SETTINGS)]
    return [f"A story set {setting}.\n\n{opening}" for opening in RAW_OPENINGS]


def cpu_times():
    """The machine's (busy, total) CPU time so far, in clock ticks (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def quiet(limit=3.0, window=0.05, busy_most=0.1):
    """Returns once the machine's CPUs were at most `busy_most` busy over one
    `window`, or after `limit` seconds. Called before each server's turn: a server
    that just answered may still spin its thread pool (ggml's workers poll for new
    work up to ~100 ms after a decode unless put to sleep), and the next server
    measured would share its cores with that. Without /proc it returns at once."""
    deadline = time.monotonic() + limit
    try:
        before = cpu_times()
    except OSError:
        return
    while time.monotonic() < deadline:
        time.sleep(window)
        after = cpu_times()
        busy, total = after[0] - before[0], after[1] - before[1]
        if total and busy / total <= busy_most:
            return
        before = after


def request(url, path, body):
    """POSTs `body` (JSON) to `path`; the answer's JSON."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=900)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = json.loads(resp.read())
    conn.close()
    if resp.status != 200:
        raise SystemExit(f"{url}{path}: HTTP {resp.status}: {data}")
    return data


def chat(url, prompt, max_tokens):
    """One completion (a chat, or a raw prompt when `prompt` is text): its
    generation tokens/s from `timings`, and the text."""
    body = {"model": "bench", "max_tokens": max_tokens, "temperature": 0, "stream": False}
    if isinstance(prompt, str):
        data = request(url, "/v1/completions", dict(body, prompt=prompt))
        text = data["choices"][0].get("text") or ""
    else:
        data = request(url, "/v1/chat/completions", dict(body, messages=prompt))
        text = data["choices"][0]["message"].get("content") or ""
    timings = data.get("timings") or {}
    return timings.get("predicted_per_second") or 0.0, timings, text


def has_template(servers):
    """Whether the model has a chat template, as shepherd's `/props` says."""
    for name, url in servers:
        if name.startswith("shepherd"):
            parts = urllib.parse.urlsplit(url)
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
            conn.request("GET", "/props")
            props = json.loads(conn.getresponse().read())
            conn.close()
            return bool(props.get("chat_template"))
    return True


def main():
    servers = [arg.split("=", 1) for arg in sys.argv[1:]]
    chat_model = has_template(servers)
    edits, stories = (edit, prose) if chat_model else (raw_edit, raw_prose)
    if not chat_model:
        print("no chat template: raw prompts through /v1/completions", file=sys.stderr)
    if ROUNDS > min(len(SETTINGS), len(NAMES)):
        print(f"more rounds than settings or names: round "
              f"{min(len(SETTINGS), len(NAMES)) + 1} on asks again", file=sys.stderr)
    # Each workload's prompts for a round.
    workloads = [("edit", edits, EDIT_TOKENS), ("prose", stories, PROSE_TOKENS)]
    speeds = {(name, w): [] for name, _ in servers for w, _, _ in workloads}
    drafts = {}
    texts = {}
    for round_no in range(ROUNDS):
        order = servers[round_no % len(servers):] + servers[:round_no % len(servers)]
        for workload, prompts_of, max_tokens in workloads:
            prompts = prompts_of(round_no)
            for name, url in order:
                # A round's speed over the workload's prompts: their tokens over their
                # time (each answer's `predicted_ms`, or its tokens/s where a server
                # reports no time).
                tokens = ms = 0.0
                quiet()
                for k, prompt in enumerate(prompts):
                    tps, timings, text = chat(url, prompt, max_tokens)
                    n = timings.get("predicted_n") or 0
                    tokens += n
                    ms += timings.get("predicted_ms") or (n / tps * 1000 if tps else 0.0)
                    if round_no > 0:
                        continue
                    texts[(name, workload, k)] = text
                    if "draft_n" in timings:
                        taken, made = drafts.get((name, workload), (0, 0))
                        drafts[(name, workload)] = (taken + timings["draft_n_accepted"],
                                                    made + timings["draft_n"])
                    if workload == "edit":
                        renamed = NAMES[0] in text and "compute_total" not in text
                        print(f"  {name}: edit answer {len(text)} chars, renamed: {renamed}",
                              file=sys.stderr)
                speeds[(name, workload)].append(tokens / ms * 1000 if ms else 0.0)
    base = servers[0][0]
    print(f"speculative decoding, generation tokens/s (median of {ROUNDS} interleaved rounds)")
    for workload, prompts_of, _ in workloads:
        prompts = prompts_of(0)
        first = statistics.median(speeds[(base, workload)])
        print(f"  {workload}:")
        for name, _ in servers:
            median = statistics.median(speeds[(name, workload)])
            ratio = median / first if first else 0.0
            accepted = drafts.get((name, workload))
            note = f"  (drafts: {accepted[0]} of {accepted[1]} accepted)" if accepted else ""
            # Greedy answers differ where the kernels' rounding does (flash attention
            # on or off, another build): a text that repeats itself drafts far
            # better, so a speed is only comparable to another on the same text.
            other = sum(texts.get((name, workload, k)) != texts.get((base, workload, k))
                        for k in range(len(prompts)))
            text = f"  [another text: {other} of {len(prompts)}]" if other else ""
            print(f"    {name:<28} {median:8.1f} t/s  {ratio:5.2f}x {base}{note}{text}")


if __name__ == "__main__":
    main()

"""The official `ollama` package against `shepherd --server` on SmolLM2.

Run by tests/it/ollama_routes.rs with OLLAMA_HOST (the server's base URL) and
OLLAMA_API_KEY (its token, sent as a bearer token) set; prints "all checks
passed", or exits non-zero with the failing check's message.
"""

import functools
import http.server
import json
import os
import struct
import sys
import tempfile
import threading

import ollama

client = ollama.Client(timeout=120)
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
QUESTION = [
    {"role": "system", "content": "Keep answers concise."},
    {"role": "user", "content": "What is the capital of France?"},
]
OPTIONS = {"temperature": 0, "num_predict": 24, "seed": 1}


def check(condition, message):
    if not condition:
        print("FAILED:", message)
        sys.exit(1)


# Chat, whole and streamed: the same text at temperature 0, figures on the last.
whole = client.chat(model=MODEL, messages=QUESTION, options=OPTIONS, stream=False)
text = whole.message.content
check(whole.model == MODEL, f"model {whole.model}")
check("Paris" in text, f"answer {text!r}")
check(whole.done and whole.done_reason in ("stop", "length"), f"{whole}")
check(whole.prompt_eval_count > 0 and whole.eval_count > 0, f"counts {whole}")
check(whole.total_duration > 0 and whole.eval_duration > 0, f"durations {whole}")
pieces, last = [], None
for part in client.chat(model=MODEL, messages=QUESTION, options=OPTIONS, stream=True):
    pieces.append(part.message.content or "")
    last = part
check("".join(pieces) == text, f"streamed {''.join(pieces)!r} != whole {text!r}")
check(last.done and last.eval_count == whole.eval_count, f"last {last}")

# Generate, whole and streamed; raw continues the prompt as it is.
gen = client.generate(model=MODEL, prompt="What is the capital of France?", options=OPTIONS)
check(gen.done and gen.response, f"generate {gen}")
parts = list(client.generate(model=MODEL, prompt="What is the capital of France?", options=OPTIONS, stream=True))
check("".join(p.response for p in parts) == gen.response, f"streamed generate {parts}")
check(parts[-1].done and not any(p.done for p in parts[:-1]), f"done flags {parts}")
raw = client.generate(model=MODEL, prompt="1, 2, 3, 4,", raw=True, options={"temperature": 0, "num_predict": 4})
check(raw.response.startswith(" 5"), f"raw {raw.response!r}")

# Tools: the request with tools is accepted and the message has Ollama's shape;
# a history with an assistant call (arguments an object) and its result is read.
tools = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
ask = [{"role": "user", "content": "What is the weather in Paris?"}]
called = client.chat(model=MODEL, messages=ask, tools=tools, options=OPTIONS)
check(called.message.role == "assistant", f"message {called.message}")
for call in called.message.tool_calls or []:
    check(isinstance(call.function.arguments, dict), f"arguments {call}")
history = ask + [
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "sunny, 21 C", "tool_name": "get_weather"},
]
answered = client.chat(model=MODEL, messages=history, tools=tools, options=OPTIONS)
check(answered.done and answered.message.role == "assistant", f"after the result {answered}")

# format: a JSON schema the answer follows.
schema = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"],
}
shaped = client.chat(
    model=MODEL,
    messages=[{"role": "user", "content": "Name a city and its country as JSON."}],
    format=schema,
    options={"temperature": 0, "num_predict": 200},
)
data = json.loads(shaped.message.content)
check(isinstance(data.get("city"), str) and isinstance(data.get("country"), str), f"json {data}")
loose = client.generate(model=MODEL, prompt="Reply with a JSON object.", format="json", options={"temperature": 0, "num_predict": 200})
check(isinstance(json.loads(loose.response), dict), f"json {loose.response!r}")

# The model routes.
listed = client.list()
check([m.model for m in listed.models] == [MODEL], f"list {listed}")
entry = listed.models[0]
check(entry.details.format == "gguf" and entry.details.family == "llama", f"details {entry.details}")
check(entry.details.quantization_level == "Q4_1" and entry.size > 0, f"details {entry}")
check(entry.digest and entry.modified_at is not None, f"entry {entry}")
shown = client.show(MODEL)
check("completion" in shown.capabilities, f"capabilities {shown.capabilities}")
check(shown.modelinfo["general.architecture"] == "llama", f"model_info {shown.modelinfo}")
check(shown.modelinfo["llama.context_length"] > 0, f"model_info {shown.modelinfo}")
check("im_start" in (shown.template or ""), f"template {shown.template!r}")
running = client.ps()
check(running.models[0].model == MODEL and running.models[0].size_vram == 0, f"ps {running}")
check(running.models[0].expires_at is not None, f"ps {running}")
version = client._client.get("/api/version").json()
check(version["version"].count(".") == 2, f"version {version}")

# Embeddings, current and legacy.
embedded = client.embed(model=MODEL, input=["hello", "world"])
check(len(embedded.embeddings) == 2 and len(embedded.embeddings[0]) > 0, f"embed {len(embedded.embeddings)}")
legacy = client.embeddings(model=MODEL, prompt="hello")
check(len(legacy.embedding) == len(embedded.embeddings[0]), "legacy embedding length")

# Another model is Ollama's 404.
try:
    client.chat(model="llama3:8b", messages=ask)
    check(False, "a wrong model was served")
except ollama.ResponseError as error:
    check(error.status_code == 404 and "not found" in error.error, f"{error.status_code} {error.error}")

# Pull: a GGUF file from a local file server into the models directory,
# streamed (Ollama's progress lines) and whole; then it is listed.
MODELS_DIR = os.environ["SHEPHERD_MODELS_DIR"]
SERVED = os.environ["SHEPHERD_SERVED_MODEL"]


def tiny_gguf(seed, size):
    """A whole GGUF file: one I8 tensor of `size` bytes (a multiple of 32)."""
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 0)
    head += struct.pack("<Q", 1) + b"w" + struct.pack("<IQIQ", 1, size, 24, 0)
    head += b"\0" * (-len(head) % 32)
    return head + bytes((i * 131 + seed) % 251 for i in range(size))


served_dir = tempfile.mkdtemp(prefix="shepherd-pull-src-")
files = {"tiny.gguf": tiny_gguf(1, 3 << 20), "tiny2.gguf": tiny_gguf(2, 4096), "notes.gguf": b"not a model\n" * 100}
for name, data in files.items():
    with open(os.path.join(served_dir, name), "wb") as f:
        f.write(data)


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


files_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=served_dir))
threading.Thread(target=files_server.serve_forever, daemon=True).start()
base = f"http://127.0.0.1:{files_server.server_address[1]}"

lines = list(client.pull(f"{base}/tiny.gguf", stream=True))
statuses = [line.status for line in lines]
check(statuses[0] == "pulling manifest", f"first {statuses[:3]}")
check(statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"], f"last {statuses[-3:]}")
progress = [line for line in lines if line.status == "pulling tiny.gguf"]
check(len(progress) >= 2 and len(statuses) == len(progress) + 4, f"statuses {statuses}")
# Rate-limited: one line a percent at most (and one each 100 ms), not one a chunk.
check(len(progress) <= 120, f"{len(progress)} progress lines")
size = len(files["tiny.gguf"])
check(all(p.total == size and p.digest.startswith("sha256:") and len(p.digest) == 71 for p in progress), f"{progress[0]}")
done = [p.completed for p in progress]
check(done == sorted(done) and done[-1] == size, f"completed {done[:3]}...{done[-1]}")
whole = client.pull(f"{base}/tiny2.gguf", stream=False)
check(whole.status == "success", f"whole pull {whole}")
listed = {m.model: m for m in client.list().models}
check(list(listed)[0] == MODEL and "tiny.gguf" in listed and "tiny2.gguf" in listed, f"list {list(listed)}")
check(listed["tiny.gguf"].size == size and listed["tiny.gguf"].details.format == "gguf", f"{listed['tiny.gguf']}")
with open(os.path.join(MODELS_DIR, "tiny.gguf"), "rb") as f:
    check(f.read() == files["tiny.gguf"], "the pulled file is the served bytes")


def refused(call, status, words):
    try:
        answer = call()
        if not isinstance(answer, ollama.ProgressResponse):
            list(answer)
        check(False, f"answered: {words}")
    except ollama.ResponseError as error:
        check(error.status_code == status and words in error.error, f"{error.status_code} {error.error}")


# A bare name is told where shepherd pulls from; a server path is not read;
# a pulled name is not pulled over.
refused(lambda: client.pull("llama3.2"), 400, "from URLs")
refused(lambda: client.pull("file://" + SERVED), 400, "http:// and https:// URLs only")
refused(lambda: client.pull(f"{base}/tiny.gguf"), 409, "exists already")
# A body that is not a GGUF: an error line mid-stream (or a 502), nothing kept.
refused(lambda: client.pull(f"{base}/notes.gguf", stream=True), -1, "not a GGUF")
refused(lambda: client.pull(f"{base}/notes.gguf", stream=False), 502, "not a GGUF")
refused(lambda: client.pull(f"{base}/missing.gguf", stream=False), 502, "HTTP 404")
leftover = [n for n in os.listdir(MODELS_DIR) if n.startswith(("notes", "missing"))]
check(leftover == [], f"kept {leftover}")

# Copy and delete work on the models directory's files, and only there.
check(client.copy("tiny.gguf", "tiny-copy.gguf").status == "success", "copy")
with open(os.path.join(MODELS_DIR, "tiny-copy.gguf"), "rb") as f:
    check(f.read() == files["tiny.gguf"], "the copy is the file")
refused(lambda: client.copy("tiny.gguf", "tiny2.gguf"), 409, "exists already")
refused(lambda: client.copy("tiny.gguf", "../escape.gguf"), 400, "'..'")
refused(lambda: client.copy("nothing.gguf", "x.gguf"), 404, "not found")
check(client.delete("tiny-copy.gguf").status == "success", "delete")
check(not os.path.exists(os.path.join(MODELS_DIR, "tiny-copy.gguf")), "deleted")
refused(lambda: client.delete("tiny-copy.gguf"), 404, "not found")
refused(lambda: client.delete("sub/tiny.gguf"), 400, "may hold only")
os.symlink(SERVED, os.path.join(MODELS_DIR, "served.gguf"))
refused(lambda: client.delete("served.gguf"), 409, "serves")
check(os.path.islink(os.path.join(MODELS_DIR, "served.gguf")), "the served model's link is kept")
files_server.shutdown()

print("all checks passed")

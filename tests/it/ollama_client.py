"""The official `ollama` package against `shepherd --server` on SmolLM2.

Run by tests/it/ollama_routes.rs with OLLAMA_HOST (the server's base URL) and
OLLAMA_API_KEY (its token, sent as a bearer token) set; prints "all checks
passed", or exits non-zero with the failing check's message.
"""

import json
import sys

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

# Another model is Ollama's 404; pulling is refused with a pointer.
try:
    client.chat(model="llama3:8b", messages=ask)
    check(False, "a wrong model was served")
except ollama.ResponseError as error:
    check(error.status_code == 404 and "not found" in error.error, f"{error.status_code} {error.error}")
try:
    client.pull("llama3:8b")
    check(False, "pull answered")
except ollama.ResponseError as error:
    check(error.status_code == 501 and "shepherd pull" in error.error, f"{error.status_code} {error.error}")

print("all checks passed")

"""The official `openai` package's text completions and embeddings against
`shepherd --server` on SmolLM2.

Run by tests/it/api_server.rs with OPENAI_BASE_URL and OPENAI_API_KEY set;
exits non-zero with the failing check's message.
"""

import base64
import math
import os
import struct
import sys

import httpx
import openai

client = openai.OpenAI(max_retries=0, timeout=120)
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
N_EMBD = 576
PROMPT = "1, 2, 3, 4,"


def check(condition, message):
    if not condition:
        print("FAILED:", message)
        sys.exit(1)


def tokens_of(text):
    """The prompt's tokens from /tokenize: what a raw, untemplated prompt costs."""
    root = os.environ["OPENAI_BASE_URL"].removesuffix("/v1")
    headers = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}
    answer = httpx.post(root + "/tokenize", json={"content": text}, headers=headers)
    check(answer.status_code == 200, f"/tokenize {answer.status_code} {answer.text}")
    return answer.json()["tokens"]


# A text completion: the prompt continued as it is, no chat template.
whole = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=8)
text = whole.choices[0].text
check(whole.object == "text_completion", f"object {whole.object}")
check(whole.id.startswith("cmpl-"), f"id {whole.id}")
check(whole.model == MODEL, f"model {whole.model}")
check(text.startswith(" 5"), f"the count goes on: {text!r}")
check(whole.choices[0].finish_reason in ("stop", "length"), whole.choices[0].finish_reason)
check(
    whole.usage.prompt_tokens == len(tokens_of(PROMPT)),
    f"prompt tokens {whole.usage.prompt_tokens} != the raw prompt's {len(tokens_of(PROMPT))}: templated?",
)
check(whole.usage.completion_tokens > 0, f"usage {whole.usage}")

# The same, streamed with usage: identical text at temperature 0.
pieces, usage, finish = [], None, None
for chunk in client.completions.create(
    model=MODEL,
    prompt=PROMPT,
    temperature=0,
    max_tokens=8,
    stream=True,
    stream_options={"include_usage": True},
):
    check(chunk.object == "text_completion", f"chunk object {chunk.object}")
    if chunk.usage is not None:
        usage = chunk.usage
    for choice in chunk.choices:
        pieces.append(choice.text)
        if choice.finish_reason:
            finish = choice.finish_reason
streamed = "".join(pieces)
check(streamed == text, f"streamed {streamed!r} != whole {text!r}")
check(finish == whole.choices[0].finish_reason, f"finish {finish}")
check(usage is not None and usage.completion_tokens == whole.usage.completion_tokens, f"usage {usage}")

# A stop string ends it early.
stopped = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=8, stop=[","])
check(stopped.choices[0].text == " 5", f"stopped {stopped.choices[0].text!r}")
check(stopped.choices[0].finish_reason == "stop", stopped.choices[0].finish_reason)

# The prompt as token ids (OpenAI's and llama-server's other spelling): the
# same tokens, the same greedy text.
ids = tokens_of(PROMPT)
by_ids = client.completions.create(model=MODEL, prompt=ids, temperature=0, max_tokens=8)
check(by_ids.choices[0].text == text, f"token-id prompt {by_ids.choices[0].text!r} != {text!r}")
check(by_ids.usage.prompt_tokens == len(ids), f"usage {by_ids.usage}")
check(whole.system_fingerprint, f"system_fingerprint {whole.system_fingerprint!r}")

# A client given the server's root (no /v1), as llama-server's users write it:
# the unprefixed routes are the same routes.
root = os.environ["OPENAI_BASE_URL"].removesuffix("/v1")
bare = openai.OpenAI(base_url=root, max_retries=0, timeout=120)
check([m.id for m in bare.models.list().data] == [MODEL], "GET /models")
check(bare.models.retrieve(MODEL).id == MODEL, "GET /models/ID")
again = bare.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=8)
check(again.choices[0].text == text, f"/completions {again.choices[0].text!r}")
chat = bare.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": "Say hi."}], temperature=0, max_tokens=4
)
check(chat.object == "chat.completion" and chat.system_fingerprint, f"/chat/completions {chat}")
check(len(bare.embeddings.create(model=MODEL, input="x").data[0].embedding) == N_EMBD, "/embeddings")

# An unsupported field is a 400 naming it.
try:
    client.completions.create(model=MODEL, prompt=PROMPT, echo=True)
    check(False, "echo was accepted")
except openai.BadRequestError as error:
    check(error.status_code == 400 and error.body.get("param") == "echo", f"body {error.body}")

# Token log-probabilities in chat's shape. Greedy takes the likeliest token, so
# each chosen token heads its own list of alternatives; the tokens spell the
# answer; the stream carries the same tokens in its chunks.
ASK = [{"role": "user", "content": "Count on: 1, 2, 3,"}]
lp_chat = client.chat.completions.create(
    model=MODEL, messages=ASK, temperature=0, max_tokens=8, logprobs=True, top_logprobs=3
)
content_lp = lp_chat.choices[0].logprobs.content
check(len(content_lp) == lp_chat.usage.completion_tokens, f"{len(content_lp)} tokens {lp_chat.usage}")
for t in content_lp:
    tops = t.top_logprobs
    check(len(tops) == 3, f"top_logprobs {tops}")
    check(tops[0].token == t.token and abs(tops[0].logprob - t.logprob) < 1e-4, f"{t}")
    check(all(a.logprob >= b.logprob for a, b in zip(tops, tops[1:])), f"unsorted {tops}")
    check(t.logprob <= 0 and bytes(t.bytes).decode("utf-8", "replace") == t.token, f"{t}")
spelled = "".join(t.token for t in content_lp)
check(spelled.strip() == lp_chat.choices[0].message.content.strip(), f"{spelled!r}")
streamed_lp = []
for chunk in client.chat.completions.create(
    model=MODEL, messages=ASK, temperature=0, max_tokens=8, logprobs=True, top_logprobs=3, stream=True
):
    for choice in chunk.choices:
        if choice.logprobs is not None and choice.logprobs.content:
            streamed_lp.extend(choice.logprobs.content)
check([t.token for t in streamed_lp] == [t.token for t in content_lp], f"streamed {streamed_lp}")
plain = client.chat.completions.create(model=MODEL, messages=ASK, temperature=0, max_tokens=2)
check(plain.choices[0].logprobs is None, f"logprobs not asked for: {plain.choices[0].logprobs}")

# logit_bias: banning the greedy first token makes the answer start otherwise.
first = content_lp[0]
banned_id = getattr(first, "id")
banned = client.chat.completions.create(
    model=MODEL, messages=ASK, temperature=0, max_tokens=4, logprobs=True,
    logit_bias={str(banned_id): -100},
)
check(banned.choices[0].logprobs.content[0].token != first.token, f"{banned.choices[0]}")
try:
    client.chat.completions.create(model=MODEL, messages=ASK, logit_bias={"99999999": 1})
    check(False, "a token outside the vocabulary was accepted")
except openai.BadRequestError as error:
    check(error.body.get("param") == "logit_bias", f"body {error.body}")

# Several choices (n): each with its index and finish reason; the usage counts
# every choice's tokens (the logprobs list one entry per token).
many = client.chat.completions.create(
    model=MODEL, messages=ASK, temperature=1.0, seed=5, max_tokens=6, n=3, logprobs=True
)
check([c.index for c in many.choices] == [0, 1, 2], f"indices {many.choices}")
check(all(c.finish_reason in ("stop", "length") for c in many.choices), f"{many.choices}")
counted = sum(len(c.logprobs.content) for c in many.choices)
check(many.usage.completion_tokens == counted, f"usage {many.usage} != {counted} tokens")
finishes, streamed_n, stream_usage = {}, {0: 0, 1: 0}, None
for chunk in client.chat.completions.create(
    model=MODEL, messages=ASK, temperature=1.0, seed=5, max_tokens=6, n=2, logprobs=True,
    stream=True, stream_options={"include_usage": True},
):
    if chunk.usage is not None:
        stream_usage = chunk.usage
    for choice in chunk.choices:
        if choice.logprobs is not None and choice.logprobs.content:
            streamed_n[choice.index] += len(choice.logprobs.content)
        if choice.finish_reason:
            check(choice.index not in finishes, f"choice {choice.index} finished twice")
            finishes[choice.index] = choice.finish_reason
check(sorted(finishes) == [0, 1], f"finishes {finishes}")
check(all(streamed_n.values()), f"tokens per choice {streamed_n}")
check(
    stream_usage is not None and stream_usage.completion_tokens == sum(streamed_n.values()),
    f"usage {stream_usage} != {streamed_n}",
)
texts = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, n=2, temperature=1.0)
check([c.index for c in texts.choices] == [0, 1], f"text choices {texts.choices}")
try:
    client.chat.completions.create(model=MODEL, messages=ASK, n=17)
    check(False, "n=17 was accepted")
except openai.BadRequestError as error:
    check(error.body.get("param") == "n", f"body {error.body}")

# Text completions' legacy logprobs: parallel lists, offsets into the text.
lp_text = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=8, logprobs=2)
lp = lp_text.choices[0].logprobs
check("".join(lp.tokens) == lp_text.choices[0].text, f"{lp.tokens} != {lp_text.choices[0].text!r}")
check(len(lp.token_logprobs) == len(lp.tokens) == len(lp.top_logprobs), f"{lp}")
offsets = [0]
for token in lp.tokens[:-1]:
    offsets.append(offsets[-1] + len(token.encode()))
check(lp.text_offset == offsets, f"offsets {lp.text_offset} != {offsets}")
for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
    check(1 <= len(top) <= 2 and abs(max(top.values()) - chosen) < 1e-4, f"{chosen} {top}")

# Keep-alive: a client that asks for it (httpx and urllib3 do) sends its next
# requests over the same connection, a generation included.
import http.client
import json as jsonlib
from urllib.parse import urlparse

base = urlparse(os.environ["OPENAI_BASE_URL"])
conn = http.client.HTTPConnection(base.hostname, base.port, timeout=60)
auth = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Connection": "keep-alive"}
ports = []
for method, path, body in [
    ("GET", "/v1/models", None),
    ("POST", "/v1/chat/completions", {"messages": ASK, "max_tokens": 2, "temperature": 0}),
    ("GET", "/health", None),
]:
    headers = dict(auth, **({"Content-Type": "application/json"} if body else {}))
    conn.request(method, path, body=jsonlib.dumps(body) if body else None, headers=headers)
    answer = conn.getresponse()
    answer.read()
    check(answer.status == 200, f"{path}: {answer.status}")
    check(answer.getheader("Connection") == "keep-alive", f"{path}: {answer.getheaders()}")
    ports.append(conn.sock.getsockname()[1])
check(len(set(ports)) == 1, f"a new connection per request: local ports {ports}")
conn.close()

# Embeddings: a batch, floats.
CAT = "The cat sat on the mat."
PHYSICS = "Quantum chromodynamics describes the strong interaction."
batch = client.embeddings.create(model=MODEL, input=[CAT, PHYSICS, CAT], encoding_format="float")
vectors = [item.embedding for item in batch.data]
check([item.index for item in batch.data] == [0, 1, 2], f"indices {[i.index for i in batch.data]}")
check(all(len(v) == N_EMBD for v in vectors), f"dimensions {[len(v) for v in vectors]}")
check(vectors[0] != vectors[1], "two different sentences gave the same vector")
check(vectors[0] == vectors[2], "one sentence twice gave different vectors")
for v in vectors:
    norm = math.sqrt(sum(x * x for x in v))
    check(abs(norm - 1.0) < 1e-4, f"not normalised: {norm}")
cosine = sum(a * b for a, b in zip(vectors[0], vectors[1]))
check(cosine < 0.999, f"different sentences nearly identical: cosine {cosine}")
expected_tokens = len(tokens_of(CAT)) * 2 + len(tokens_of(PHYSICS))
check(batch.usage.prompt_tokens == expected_tokens, f"usage {batch.usage} != {expected_tokens}")

# The SDK's default: base64 on the wire, decoded by the SDK; the same vector.
default = client.embeddings.create(model=MODEL, input=CAT)
check(len(default.data[0].embedding) == N_EMBD, "base64 dimensions")
check(
    max(abs(a - b) for a, b in zip(default.data[0].embedding, vectors[0])) < 1e-6,
    "base64 and float vectors differ",
)

# base64 asked for explicitly: little-endian f32 bytes.
raw = client.embeddings.create(model=MODEL, input=CAT, encoding_format="base64").data[0].embedding
check(isinstance(raw, str), f"base64 came back as {type(raw)}")
decoded = struct.unpack(f"<{N_EMBD}f", base64.b64decode(raw))
check(max(abs(a - b) for a, b in zip(decoded, vectors[0])) < 1e-6, "decoded base64 differs")

try:
    client.embeddings.create(model=MODEL, input="")
    check(False, "an empty input was accepted")
except openai.BadRequestError as error:
    check(error.body.get("param") == "input", f"body {error.body}")

print("all checks passed")

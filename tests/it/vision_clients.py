"""The official clients send images to `shepherd --server` on a vision model:
the `openai` package (chat `image_url` data URLs, Responses `input_image`), the
`anthropic` package (a base64 `image` block), the `ollama` package (`images`),
and llama-server's `/completion` with `multimodal_data` over plain HTTP.

Run by tests/it/vision.rs against a random-weight SmolLM2 shape with a random
idefics3 projector, with SHEPHERD_URL, SHEPHERD_MODEL and IMAGE_TOKENS (what
one 64x48 image adds to a prompt: its embeddings and the projector's framing
tokens) set. For every route: the image adds exactly IMAGE_TOKENS prompt
tokens, the same image again is cached (and answered alike), two images give
two greedy answers.
Prints "all checks passed", or exits non-zero with the failing check.
"""

import base64
import json
import os
import struct
import sys
import urllib.request
import zlib

import anthropic
import ollama
import openai

URL = os.environ["SHEPHERD_URL"]
MODEL = os.environ["SHEPHERD_MODEL"]
IMAGE_TOKENS = int(os.environ["IMAGE_TOKENS"])
QUESTION = "Describe it."


def check(condition, message):
    if not condition:
        print("FAILED:", message)
        sys.exit(1)


def png(width, height, seed):
    """A real RGB PNG whose pixels `seed` picks (zlib and struct only)."""
    rows = b"".join(
        b"\x00" + bytes(((x * seed + y * 7 + c * 50) % 256) for x in range(width) for c in range(3))
        for y in range(height)
    )

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


A = base64.b64encode(png(64, 48, 3)).decode()
B = base64.b64encode(png(64, 48, 101)).decode()


def distinct(route, answers):
    check(answers[0] != answers[1], f"{route}: two images, one greedy answer {answers[0]!r}")


# ------------------------------------------------------------------ OpenAI chat
chat = openai.OpenAI(base_url=URL + "/v1", api_key="unused", max_retries=0, timeout=300)


def ask_chat(image):
    content = [{"type": "text", "text": QUESTION}]
    if image:
        content.insert(0, {"type": "image_url", "image_url": {"url": "data:image/png;base64," + image}})
    reply = chat.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], max_tokens=8, temperature=0
    )
    return reply.choices[0].message.content, reply.usage


_, plain = ask_chat(None)
first, with_a = ask_chat(A)
check(with_a.prompt_tokens == plain.prompt_tokens + IMAGE_TOKENS, f"chat: {plain} then {with_a}")
again, cached = ask_chat(A)
check(again == first, f"chat: the same image, another answer: {again!r} vs {first!r}")
details = cached.prompt_tokens_details
check(details is not None and details.cached_tokens >= IMAGE_TOKENS, f"chat: not cached: {cached}")
second, _ = ask_chat(B)
distinct("chat", [first, second])

# ------------------------------------------------------------------ Responses


def ask_responses(image):
    content = [{"type": "input_text", "text": QUESTION}]
    if image:
        content.insert(0, {"type": "input_image", "image_url": "data:image/png;base64," + image})
    reply = chat.responses.create(
        model=MODEL,
        input=[{"role": "user", "content": content}],
        max_output_tokens=16,
        temperature=0,
    )
    return reply.output_text, reply.usage


_, plain = ask_responses(None)
first, with_a = ask_responses(A)
check(with_a.input_tokens == plain.input_tokens + IMAGE_TOKENS, f"responses: {plain} then {with_a}")
_, cached = ask_responses(A)
check(cached.input_tokens_details.cached_tokens >= IMAGE_TOKENS, f"responses: not cached: {cached}")
second, _ = ask_responses(B)
distinct("responses", [first, second])

# ------------------------------------------------------------------ Anthropic
messages = anthropic.Anthropic(base_url=URL, api_key="unused", max_retries=0, timeout=300)


def ask_anthropic(image):
    content = [{"type": "text", "text": QUESTION}]
    if image:
        source = {"type": "base64", "media_type": "image/png", "data": image}
        content.insert(0, {"type": "image", "source": source})
    reply = messages.messages.create(
        model=MODEL,
        max_tokens=8,
        messages=[{"role": "user", "content": content}],
        extra_body={"temperature": 0},
    )
    usage = reply.usage
    # Anthropic counts the cached part of the prompt apart from the rest.
    total = usage.input_tokens + (usage.cache_read_input_tokens or 0)
    return reply.content[0].text if reply.content else "", total, usage


_, plain, _ = ask_anthropic(None)
first, with_a, _ = ask_anthropic(A)
check(with_a == plain + IMAGE_TOKENS, f"anthropic: {plain} then {with_a}")
_, _, usage = ask_anthropic(A)
check((usage.cache_read_input_tokens or 0) >= IMAGE_TOKENS, f"anthropic: not cached: {usage}")
second, _, _ = ask_anthropic(B)
distinct("anthropic", [first, second])

# ------------------------------------------------------------------ Ollama
local = ollama.Client(host=URL, timeout=300)


def ask_ollama(image):
    message = {"role": "user", "content": QUESTION}
    if image:
        message["images"] = [image]
    reply = local.chat(
        model=MODEL, messages=[message], options={"temperature": 0, "num_predict": 8}, stream=False
    )
    return reply.message.content, reply.prompt_eval_count


_, plain = ask_ollama(None)
first, with_a = ask_ollama(A)
check(with_a == plain + IMAGE_TOKENS, f"ollama: {plain} then {with_a}")
second, _ = ask_ollama(B)
distinct("ollama", [first, second])

# ------------------------------------------------------------------ /completion


def complete(prompt):
    request = urllib.request.Request(
        URL + "/completion",
        data=json.dumps({"prompt": prompt, "n_predict": 8, "temperature": 0, "cache_prompt": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as answer:
        body = json.load(answer)
    return body["content"], body["tokens_evaluated"], body["timings"]


def multimodal(image):
    return {"prompt_string": "<__media__>" + QUESTION, "multimodal_data": [image]}


_, plain, _ = complete(QUESTION)
first, with_a, _ = complete(multimodal(A))
check(with_a == plain + IMAGE_TOKENS, f"completion: {plain} then {with_a}")
_, _, timings = complete(multimodal(A))
check(timings["cache_n"] >= IMAGE_TOKENS, f"completion: not cached: {timings}")
second, _, _ = complete(multimodal(B))
distinct("completion", [first, second])

print("all checks passed")

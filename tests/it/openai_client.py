"""The official `openai` package against `shepherd --server` on SmolLM2.

Run by tests/it/api_server.rs with OPENAI_BASE_URL and OPENAI_API_KEY set;
exits non-zero with the failing check's message.
"""

import json
import os
import sys

import openai

client = openai.OpenAI(max_retries=0, timeout=120)
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
# With this system prompt every token of SmolLM2's answer leads its runner-up by over
# 1.1 nats, with flash attention or without; with none (the template's default) the
# first token is a near-tie that the attention kernel decides (see docs/LLAMA.md).
QUESTION = [
    {"role": "system", "content": "Keep answers concise."},
    {"role": "user", "content": "What is the capital of France?"},
]


def check(condition, message):
    if not condition:
        print("FAILED:", message)
        sys.exit(1)


# A chat completion.
whole = client.chat.completions.create(
    model=MODEL, messages=QUESTION, temperature=0, max_tokens=24
)
text = whole.choices[0].message.content
check(whole.id.startswith("chatcmpl-"), f"id {whole.id}")
check(whole.model == MODEL, f"model {whole.model}")
check("Paris" in text, f"answer {text!r}")
check(whole.choices[0].finish_reason in ("stop", "length"), whole.choices[0].finish_reason)
check(whole.usage.prompt_tokens > 0 and whole.usage.completion_tokens > 0, f"usage {whole.usage}")

# The same, streamed, with usage: identical text at temperature 0.
pieces, usage, finish = [], None, None
for chunk in client.chat.completions.create(
    model=MODEL,
    messages=QUESTION,
    temperature=0,
    max_tokens=24,
    stream=True,
    stream_options={"include_usage": True},
):
    if chunk.usage is not None:
        usage = chunk.usage
    for choice in chunk.choices:
        if choice.delta.content:
            pieces.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
streamed = "".join(pieces)
check(streamed == text, f"streamed {streamed!r} != whole {text!r}")
check(finish == whole.choices[0].finish_reason, f"finish {finish}")
check(usage is not None and usage.completion_tokens == whole.usage.completion_tokens, f"usage {usage}")

# A tool call returned to the client (forced by tool_choice, through the grammar).
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
called = client.chat.completions.create(
    model=MODEL,
    messages=ask,
    tools=tools,
    tool_choice="required",
    temperature=0,
    max_tokens=64,
)
choice = called.choices[0]
check(choice.finish_reason == "tool_calls", f"finish {choice.finish_reason}")
call = choice.message.tool_calls[0]
check(call.function.name == "get_weather", f"call {call}")
args = json.loads(call.function.arguments)
check(isinstance(args.get("city"), str), f"arguments {args}")

# The follow-up with the tool result.
follow = client.chat.completions.create(
    model=MODEL,
    messages=ask
    + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 degrees."},
    ],
    tools=tools,
    tool_choice="none",
    temperature=0,
    max_tokens=32,
)
check(follow.choices[0].message.content, f"follow-up {follow.choices[0].message}")
check(follow.choices[0].finish_reason in ("stop", "length"), follow.choices[0].finish_reason)

# response_format with a JSON schema, enforced by grammar.
shaped = client.chat.completions.create(
    model=MODEL,
    messages=[{"role": "user", "content": "How many legs does a cat have?"}],
    temperature=0,
    max_tokens=48,
    response_format={
        "type": "json_schema",
        "json_schema": {
            "name": "answer",
            "schema": {
                "type": "object",
                "properties": {"legs": {"type": "integer"}},
                "required": ["legs"],
            },
        },
    },
)
value = json.loads(shaped.choices[0].message.content)
check(isinstance(value.get("legs"), int), f"shaped {value}")

# Error cases: a bad field, and a bad key.
try:
    client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=5)
    check(False, "temperature 5 was accepted")
except openai.BadRequestError as error:
    check(error.status_code == 400, f"status {error.status_code}")
    check(error.body.get("param") == "temperature", f"body {error.body}")
try:
    openai.OpenAI(api_key="wrong", max_retries=0).chat.completions.create(
        model=MODEL, messages=QUESTION
    )
    check(False, "a wrong key was accepted")
except openai.AuthenticationError as error:
    check(error.status_code == 401, f"status {error.status_code}")

models = client.models.list()
check(models.data[0].id == MODEL, f"models {models}")
print("all checks passed")

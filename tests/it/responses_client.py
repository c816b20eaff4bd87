"""The official `openai` package's Responses API (what Codex and the Agents SDK
speak) and structured outputs against `shepherd --server` on SmolLM2.

Run by tests/it/api_server.rs with OPENAI_BASE_URL and OPENAI_API_KEY set;
exits non-zero with the failing check's message.
"""

import json
import sys

import openai

client = openai.OpenAI(max_retries=0, timeout=120)
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"


def check(condition, message):
    if not condition:
        print("FAILED:", message)
        sys.exit(1)


# A plain answer, whole and streamed: the same text at temperature 0.
ASK = dict(model=MODEL, input="Name a colour.", max_output_tokens=12, temperature=0)
whole = client.responses.create(**ASK)
check(whole.object == "response" and whole.id.startswith("resp_"), f"{whole.object} {whole.id}")
check(whole.status in ("completed", "incomplete"), f"status {whole.status}")
check(whole.output_text.strip() != "", f"no text: {whole}")
check(whole.usage.input_tokens > 0 and whole.usage.output_tokens > 0, f"usage {whole.usage}")
if whole.status == "incomplete":
    check(whole.incomplete_details.reason == "max_output_tokens", f"{whole.incomplete_details}")

kinds, deltas = [], []
with client.responses.stream(**ASK) as stream:
    for event in stream:
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
    # The SDK builds its final response from `response.completed` only (openai 3.57
    # raises otherwise); a stream cut by max_output_tokens ends with
    # `response.incomplete`, whose event carries the response itself.
    final = stream.get_final_response() if kinds[-1] == "response.completed" else event.response
check(kinds[0] == "response.created" and kinds[1] == "response.in_progress", f"opening {kinds[:2]}")
check(kinds[-1] in ("response.completed", "response.incomplete"), f"closing {kinds[-1]}")
for needed in ("response.output_item.added", "response.content_part.added",
               "response.output_text.done", "response.output_item.done"):
    check(needed in kinds, f"no {needed} in {kinds}")
check("".join(deltas) == whole.output_text, f"streamed {''.join(deltas)!r} != {whole.output_text!r}")
check(final.output_text == whole.output_text, f"final {final.output_text!r}")
check(final.status == whole.status, f"final status {final.status} != {whole.status}")

# A function call, forced, then its output sent back as the Agents SDK does
# (the previous output items, then a function_call_output), stateless; then
# the same by previous_response_id.
WEATHER = {
    "type": "function", "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False},
}
question = [{"role": "user", "content": "What is the weather in Paris?"}]
called = client.responses.create(
    model=MODEL, input=question, tools=[WEATHER], temperature=0,
    tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=60,
)
calls = [item for item in called.output if item.type == "function_call"]
check(len(calls) == 1 and calls[0].name == "get_weather", f"output {called.output}")
check("city" in json.loads(calls[0].arguments), f"arguments {calls[0].arguments}")
follow = question + [item.model_dump(exclude_none=True) for item in called.output] + [
    {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"}
]
answered = client.responses.create(model=MODEL, input=follow, tools=[WEATHER],
                                   temperature=0, max_output_tokens=40)
check(answered.output_text.strip() != "", f"no answer after the tool: {answered.output}")
chained = client.responses.create(
    model=MODEL, previous_response_id=called.id, tools=[WEATHER], temperature=0,
    max_output_tokens=40,
    input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"}],
)
check(chained.output_text == answered.output_text, f"{chained.output_text!r} != {answered.output_text!r}")
check(chained.usage.input_tokens == answered.usage.input_tokens, f"{chained.usage} != {answered.usage}")

# Stored answers: the streamed one is kept as it was answered.
kept = client.responses.retrieve(final.id)
check(kept.id == final.id and kept.output_text == final.output_text, f"kept {kept}")

# A second turn chained by previous_response_id reads the first turn's input and
# output: its prompt is longer than the same question alone by at least the
# first answer (and the first question's turn).
first = client.responses.create(model=MODEL, input="My name is Ada. Say hello.",
                                max_output_tokens=8, temperature=0)
check(first.store is True, f"store {first.store}")
QUESTION = dict(model=MODEL, input="What is my name?", max_output_tokens=8, temperature=0)
alone = client.responses.create(**QUESTION, store=False)
check(alone.store is False, f"store {alone.store}")
second = client.responses.create(**QUESTION, previous_response_id=first.id)
check(second.previous_response_id == first.id, f"echo {second.previous_response_id}")
check(second.usage.input_tokens >= alone.usage.input_tokens + first.usage.output_tokens,
      f"chained {second.usage} vs alone {alone.usage} and first {first.usage}")
# ... and the chain goes on from the second.
third = client.responses.create(**QUESTION, previous_response_id=second.id)
check(third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens,
      f"third {third.usage} vs second {second.usage}")

# `store: false` is not kept; a deleted answer is gone; an unknown id is OpenAI's 404.
for gone in (alone.id, "resp_nothing"):
    try:
        client.responses.retrieve(gone)
        check(False, f"{gone} was retrieved")
    except openai.NotFoundError:
        pass
client.responses.delete(first.id)
try:
    client.responses.create(**QUESTION, previous_response_id=first.id)
    check(False, "a deleted previous_response_id was accepted")
except openai.NotFoundError as error:
    check(error.body.get("code") == "previous_response_not_found", f"body {error.body}")
    check(error.body.get("param") == "previous_response_id", f"body {error.body}")
    check(error.body.get("message") == f"Previous response with id '{first.id}' not found.",
          f"body {error.body}")

# Structured output: the schema's constraints hold (exactly two items of an enum).
SCHEMA = {
    "type": "object",
    "properties": {"colours": {"type": "array", "minItems": 2, "maxItems": 2,
                               "items": {"enum": ["red", "green", "blue"]}}},
    "required": ["colours"], "additionalProperties": False,
}
shaped = client.responses.create(
    model=MODEL, input="List two colours.", temperature=0, max_output_tokens=40,
    text={"format": {"type": "json_schema", "name": "colours", "schema": SCHEMA}},
)
colours = json.loads(shaped.output_text)["colours"]
check(len(colours) == 2 and set(colours) <= {"red", "green", "blue"}, f"colours {colours}")
chat = client.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": "Pick a number."}], temperature=0,
    max_tokens=20, response_format={"type": "json_schema", "json_schema": {
        "name": "n", "schema": {"type": "object", "required": ["n"], "additionalProperties": False,
                                "properties": {"n": {"type": "integer", "minimum": 10, "maximum": 20}}}}},
)
n = json.loads(chat.choices[0].message.content)["n"]
check(10 <= n <= 20, f"n {n}")

# A keyword the grammar cannot enforce is a 400 naming it, never ignored.
try:
    client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}],
        response_format={"type": "json_schema", "json_schema": {
            "name": "n", "schema": {"type": "integer", "multipleOf": 7}}},
    )
    check(False, "multipleOf was accepted")
except openai.BadRequestError as error:
    check("multipleOf" in error.body.get("message", ""), f"body {error.body}")
    check(error.body.get("param") == "response_format.json_schema.schema", f"body {error.body}")

print("all checks passed")

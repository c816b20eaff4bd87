"""The official `anthropic` package against `shepherd --server` on SmolLM2:
a stop sequence ends the message with `stop_reason: "stop_sequence"` and names
the sequence, whole and streamed; usage counts what the model read.

Run by tests/it/api_server.rs with ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY set;
exits non-zero with the failing check's message.
"""

import sys

import anthropic

client = anthropic.Anthropic(max_retries=0, timeout=120)
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Greedy, so every answer to COUNT is the same text (this SDK no longer takes
# `temperature` as an argument; the API still does).
GREEDY = {"temperature": 0}
COUNT = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]


def check(condition, message):
    if not condition:
        print("FAILED:", message)
        sys.exit(1)


# Without a stop sequence: the model's own end, or the length.
free = client.messages.create(model=MODEL, max_tokens=40, messages=COUNT, extra_body=GREEDY)
text = free.content[0].text
check("3" in text, f"the model counts: {text!r}")
check(free.stop_reason in ("end_turn", "max_tokens"), f"stop_reason {free.stop_reason}")
check(free.stop_sequence is None, f"stop_sequence {free.stop_sequence!r}")

# A stop sequence that the answer reaches: named, and the text ends before it.
stop = "3"
whole = client.messages.create(
    model=MODEL, max_tokens=40, messages=COUNT, extra_body=GREEDY, stop_sequences=["never", stop]
)
check(whole.stop_reason == "stop_sequence", f"stop_reason {whole.stop_reason}")
check(whole.stop_sequence == stop, f"stop_sequence {whole.stop_sequence!r}")
cut = whole.content[0].text
check(stop not in cut and text.startswith(cut), f"cut {cut!r} of {text!r}")
check(whole.usage.input_tokens > 0 and whole.usage.output_tokens > 0, f"usage {whole.usage}")

# The same, streamed: the message_delta says so, and the final message too.
with client.messages.stream(
    model=MODEL, max_tokens=40, messages=COUNT, extra_body=GREEDY, stop_sequences=["never", stop]
) as stream:
    streamed = "".join(stream.text_stream)
    final = stream.get_final_message()
check(streamed == cut, f"streamed {streamed!r} != whole {cut!r}")
check(final.stop_reason == "stop_sequence", f"streamed stop_reason {final.stop_reason}")
check(final.stop_sequence == stop, f"streamed stop_sequence {final.stop_sequence!r}")
check(final.usage.input_tokens > 0, f"streamed usage {final.usage}")

# message_start already counts the prompt (as llama-server's does): what it
# says is what the whole answer says, the cached part apart.
with client.messages.stream(model=MODEL, max_tokens=8, messages=COUNT, extra_body=GREEDY) as stream:
    opening = None
    for event in stream:
        if event.type == "message_start":
            opening = event.message.usage
    final = stream.get_final_message()
check(opening is not None and opening.input_tokens + (opening.cache_read_input_tokens or 0) > 0, f"message_start usage {opening}")
check(
    opening.input_tokens + (opening.cache_read_input_tokens or 0)
    == final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0),
    f"message_start {opening} != final {final.usage}",
)

print("all checks passed")

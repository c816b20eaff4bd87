"""Reference chat-template renderer: Python jinja2 configured the way Hugging Face
transformers renders chat templates. The Rust template tests (src/template.rs) pipe
a JSON request to it and byte-compare its output with minijinja's.

stdin: {"template", "messages", "tools" (null or list), "add_generation_prompt",
        "bos_token", "eos_token"}; stdout: the rendered prompt, exactly.
"""
import json
import sys
from datetime import datetime

from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    """transformers' handling of {% generation %}: render the body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def main():
    request = json.load(sys.stdin)
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    template = env.from_string(request["template"])
    sys.stdout.write(
        template.render(
            messages=request["messages"],
            tools=request["tools"],
            add_generation_prompt=request["add_generation_prompt"],
            bos_token=request["bos_token"],
            eos_token=request["eos_token"],
        )
    )


if __name__ == "__main__":
    main()

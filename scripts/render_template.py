"""Reference chat-template renderer: Python jinja2 configured the way Hugging Face
transformers renders chat templates. The Rust template tests byte-compare its output
with minijinja's.

One request (src/template.rs tests):
    stdin: {"template": source, "context": {variables: messages, tools,
            add_generation_prompt, bos_token, eos_token, ...}};
    stdout: the rendered prompt, exactly.

A batch (`--lines`, the corpus test in src/backend/local/template_corpus.rs): one
process for the whole corpus.
    stdin: one JSON object per line, {"template": source, "context": {variables}};
    stdout: one line per request, {"ok": prompt} or {"error": "Type: message"}, plus
            "llama": the same, rendered in llama.cpp mode.
llama.cpp mode is transformers' configuration with the four things llama.cpp's own
engine does differently: lists that `append`/`pop` change (transformers' sandbox is
immutable), `tojson` of any iterable (a `map` result is a generator in Python, a
list there), `"text"|safe + other` not escaping `other` (jinja2's Markup does), and
`tools` left undefined rather than none when no tools are offered.
"""
import json
import sys
from datetime import datetime

from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment


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


def iterable_as_list(value):
    """json.dumps' fallback in llama.cpp mode: any other iterable is a list."""
    try:
        return list(iter(value))
    except TypeError:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable") from None


def llama_tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys,
        default=iterable_as_list,
    )


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def environment(llama=False):
    """transformers' environment; with `llama`, llama.cpp's differences (module doc)."""
    kind = SandboxedEnvironment if llama else ImmutableSandboxedEnvironment
    env = kind(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = llama_tojson if llama else tojson
    if llama:
        env.filters["safe"] = str
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_one(request):
    """The single-request mode, transformers' configuration only."""
    return environment().from_string(request["template"]).render(**request["context"])


class Batch:
    """Renders requests with both environments, each template compiled once."""

    def __init__(self):
        self.envs = {False: environment(), True: environment(llama=True)}
        self.compiled = {}

    def render(self, source, context, llama):
        key = (source, llama)
        if key not in self.compiled:
            self.compiled[key] = self.envs[llama].from_string(source)
        if llama and context.get("tools") is None:
            context = {k: v for k, v in context.items() if k != "tools"}
        return self.compiled[key].render(**context)

    def answer(self, source, context, llama=False):
        try:
            return {"ok": self.render(source, context, llama)}
        except Exception as err:  # every failure is an answer: the test reports it
            return {"error": f"{type(err).__name__}: {err}"}

    def request(self, line):
        request = json.loads(line)
        source, context = request["template"], request["context"]
        result = self.answer(source, context)
        result["llama"] = self.answer(source, context, llama=True)
        return result


def main():
    if sys.argv[1:] == ["--lines"]:
        batch = Batch()
        for line in sys.stdin:
            if line.strip():
                sys.stdout.write(json.dumps(batch.request(line), ensure_ascii=False) + "\n")
        return
    sys.stdout.write(render_one(json.load(sys.stdin)))


if __name__ == "__main__":
    main()

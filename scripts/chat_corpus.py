#!/usr/bin/env python3
"""llama.cpp's chat parser corpus, read out of its own test source.

`tests/test-chat.cpp` (in the llama.cpp tree that `make test` unpacks from the
llama-cpp-python sdist) states every parse expectation as a builder chain:

    auto tst = peg_tester("models/templates/X.jinja", ...);
    tst.test("<model output>").tools({ special_function_tool })
       .enable_thinking(true).expect(message_assist_call_thoughts).run();

This script evaluates those chains (the C++ string literals, the named messages
and tools the file defines, the loops over template paths) and prints one JSON
object per case and template, so that shepherd's unit test
(`src/backend/local/chat_corpus.rs`) can run every case through the output filter.
Nothing here parses model output: it only reads the test file.

Usage: chat_corpus.py LLAMA_CPP_TREE  (prints a JSON list on stdout)
"""

import json
import re
import sys

# ---------------------------------------------------------------------------
# Tokens


class Tok:
    __slots__ = ("kind", "value", "line")

    def __init__(self, kind, value, line):
        self.kind, self.value, self.line = kind, value, line

    def __repr__(self):
        return f"{self.kind}:{self.value!r}@{self.line}"


SIMPLE_ESCAPES = {
    "n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'",
    "a": "\a", "b": "\b", "f": "\f", "v": "\v", "?": "?",
}


def unescape(body):
    """A C++ narrow string literal's bytes (UTF-8 source), as text."""
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        n = body[i + 1]
        if n == "x":
            m = re.match(r"[0-9a-fA-F]+", body[i + 2:])
            out.append(int(m.group(0), 16) & 0xFF)
            i += 2 + len(m.group(0))
        elif n in "uU":
            width = 4 if n == "u" else 8
            out += chr(int(body[i + 2:i + 2 + width], 16)).encode()
            i += 2 + width
        elif n in "01234567":
            m = re.match(r"[0-7]{1,3}", body[i + 1:])
            out.append(int(m.group(0), 8))
            i += 1 + len(m.group(0))
        else:
            out += SIMPLE_ESCAPES[n].encode()
            i += 2
    return out.decode("utf-8", errors="surrogateescape")


def tokenize(src):
    toks = []
    i, line, n = 0, 1, len(src)
    ident = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*")
    number = re.compile(r"[0-9][0-9a-zA-Z_.']*")
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.index("*/", i)
            line += src.count("\n", i, j)
            i = j + 2
        elif c == "#" and (i == 0 or src[i - 1] == "\n"):
            j = src.find("\n", i)
            i = n if j < 0 else j
        else:
            m = re.match(r'(u8|u|U|L)?R"([^(\s]*)\(', src[i:])
            if m:
                delim = ")" + m.group(2) + '"'
                start = i + m.end()
                end = src.index(delim, start)
                toks.append(Tok("str", src[start:end], line))
                line += src.count("\n", i, end)
                i = end + len(delim)
                continue
            m = re.match(r'(u8|u|U|L)?"', src[i:])
            if m:
                j = i + m.end()
                body = []
                while src[j] != '"':
                    if src[j] == "\\":
                        body.append(src[j:j + 2])
                        j += 2
                    else:
                        body.append(src[j])
                        j += 1
                toks.append(Tok("str", unescape("".join(body)), line))
                i = j + 1
                continue
            if c == "'":
                j = i + 1
                while src[j] != "'":
                    j += 2 if src[j] == "\\" else 1
                toks.append(Tok("char", src[i + 1:j], line))
                i = j + 1
                continue
            m = ident.match(src, i)
            if m:
                toks.append(Tok("id", m.group(0), line))
                i = m.end()
                continue
            m = number.match(src, i)
            if m:
                toks.append(Tok("num", m.group(0), line))
                i = m.end()
                continue
            two = src[i:i + 2]
            if two in ("->", "::", "&&", "||", "==", "!=", "<=", ">=", "<<", ">>", "++", "--"):
                toks.append(Tok("p", two, line))
                i += 2
            else:
                toks.append(Tok("p", c, line))
                i += 1
    # Adjacent string literals are one.
    merged = []
    for t in toks:
        if t.kind == "str" and merged and merged[-1].kind == "str":
            merged[-1] = Tok("str", merged[-1].value + t.value, merged[-1].line)
        else:
            merged.append(t)
    return merged


# ---------------------------------------------------------------------------
# Values: messages, tools, calls


def msg(content="", reasoning="", name="", arguments="", call_id=""):
    calls = []
    if name or call_id:
        calls.append({"name": name, "arguments": arguments, "id": call_id})
    return {"role": "assistant", "content": content, "reasoning": reasoning, "calls": calls}


def call_of(value):
    """`{ "name", "arguments", "id" }` as the file writes a `common_chat_tool_call`."""
    parts = [v if isinstance(v, str) else "" for v in value]
    parts += [""] * (3 - len(parts))
    return {"name": parts[0], "arguments": parts[1], "id": parts[2]}


def tool_of(value):
    name, description, parameters = (list(value) + ["", "", "{}"])[:3]
    try:
        schema = json.loads(parameters)
    except ValueError:
        # html_tool's schema has a trailing comma; read it as JSON5 would.
        schema = json.loads(re.sub(r",(\s*[}\]])", r"\1", parameters))
    return {"name": name, "description": description, "parameters": schema}


FUNCTIONS = {
    "simple_assist_msg": lambda *a: msg(*a),
    "message_with_tool_calls": lambda name, args: msg("", "", name, args),
    "message_with_tool_calls_and_reasoning": lambda name, args, r: msg("", r, name, args),
    "message_with_content_and_tool_call": lambda c, name, args: msg(c, "", name, args),
    "message_with_reasoning_and_tool_call": lambda r, name, args: msg("", r, name, args),
    "message_with_reasoning_content_and_multiple_tool_calls": lambda r, c, calls: {
        "role": "assistant", "content": c, "reasoning": r,
        "calls": [{"name": n, "arguments": a, "id": ""} for n, a in calls],
    },
    "std::string": lambda s="": s,
}


class Unknown(Exception):
    pass


class Evaluator:
    def __init__(self, toks):
        self.toks = toks
        self.names = {"true": True, "false": False, "nullptr": None}

    def expr(self, i):
        """The value of the expression at token `i`, and the index after it (`a + b`
        concatenates strings)."""
        value, i = self.primary(i)
        while self.toks[i].kind == "p" and self.toks[i].value == "+":
            more, i = self.primary(i + 1)
            value += more
        return value, i

    def primary(self, i):
        t = self.toks[i]
        if t.kind == "str":
            return t.value, i + 1
        if t.kind == "num":
            return t.value, i + 1
        if t.kind == "p" and t.value == "{":
            return self.brace(i)
        if t.kind == "id":
            nxt = self.toks[i + 1]
            if nxt.kind == "p" and nxt.value == "(":
                args, j = self.args(i + 1, ")")
                fn = FUNCTIONS.get(t.value)
                if fn is None:
                    raise Unknown(f"{t.value}() at line {t.line}")
                return fn(*args), j
            if nxt.kind == "p" and nxt.value == "{":
                return self.brace(i + 1)
            if t.value in self.names:
                return self.names[t.value], i + 1
            if t.value.startswith("COMMON_"):
                return t.value, i + 1
            raise Unknown(f"{t.value} at line {t.line}")
        raise Unknown(f"{t} ")

    def brace(self, i):
        return self.args(i, "}")

    def args(self, i, close):
        """A parenthesised or braced, comma-separated list starting at token `i`."""
        values = []
        i += 1
        while not (self.toks[i].kind == "p" and self.toks[i].value == close):
            value, i = self.expr(i)
            values.append(value)
            if self.toks[i].kind == "p" and self.toks[i].value == ",":
                i += 1
        return values, i + 1

    def definitions(self):
        """The file's named messages (`const common_chat_msg x = …;`) and tools."""
        toks = self.toks
        for i, t in enumerate(toks):
            if t.kind != "id" or t.value not in ("common_chat_msg", "common_chat_tool"):
                continue
            if i + 2 >= len(toks) or toks[i + 1].kind != "id":
                continue
            name, after = toks[i + 1].value, toks[i + 2]
            try:
                if t.value == "common_chat_msg" and after.value == "=":
                    self.names[name], _ = self.expr(i + 3)
                elif t.value == "common_chat_tool" and after.value == "{":
                    value, _ = self.brace(i + 2)
                    self.names[name] = tool_of(value)
            except Unknown:
                pass
        # message_user and message_user_parts are brace-initialised.
        self.names.setdefault("message_user", {"role": "user", "content": "Hey there!"})
        self.names["message_user"] = {"role": "user", "content": "Hey there!", "reasoning": "", "calls": []}
        self.names["message_user_parts"] = {"role": "user", "content": "Hey there", "reasoning": "", "calls": []}
        # `static std::vector<common_chat_tool> tools{ … }`
        for i, t in enumerate(toks):
            if t.value == "tools" and toks[i - 1].value == ">" and toks[i + 1].value == "{":
                self.names["tools"], _ = self.brace(i + 1)


# ---------------------------------------------------------------------------
# Cases


def message_of(value):
    if isinstance(value, dict):
        return value
    raise Unknown(f"not a message: {value!r}")


def chain(ev, i):
    """The case of `X.test(…)….run()` starting at the `test` token `i`."""
    toks = ev.toks
    (text,), i = ev.args(i + 1, ")")
    case = {
        "input": text, "reasoning_format": None, "enable_thinking": None, "tools": [],
        "tool_choice": None, "parallel_tool_calls": None, "add_generation_prompt": True,
        "continue_final_message": None, "messages": None, "json_schema": False,
        "is_partial": False,
        "expect": {"content": "", "reasoning": "", "calls": []},
    }
    while toks[i].value == ".":
        method = toks[i + 1].value
        args, i = ev.args(i + 2, ")")
        if method == "run":
            break
        arg = args[0] if args else True
        if method == "expect":
            m = message_of(arg)
            case["expect"] = {"content": m["content"], "reasoning": m["reasoning"],
                              "calls": list(m["calls"])}
        elif method == "expect_content":
            case["expect"]["content"] = arg
        elif method == "expect_reasoning":
            case["expect"]["reasoning"] = arg
        elif method == "expect_tool_calls":
            case["expect"]["calls"] = [call_of(c) for c in arg]
        elif method == "tools":
            case["tools"] = arg
        elif method == "messages":
            case["messages"] = [message_of(m) for m in arg]
        elif method == "json_schema":
            case["json_schema"] = True
        elif method in case:
            case[method] = arg
        elif method == "expect_reconstruction":
            pass
        else:
            raise Unknown(f".{method}() at line {toks[i].line}")
    return case


# The types a local definition the cases use is declared with (the last token of it).
LOCAL_TYPES = ("auto", "std::string", "*", "common_chat_msg")
# A message's fields as the cases assign them.
FIELDS = {"role": "role", "content": "content", "reasoning_content": "reasoning",
          "tool_call_id": "tool_call_id", "tool_name": "tool_name"}


def cases(path):
    src = open(path, encoding="utf-8").read()
    toks = tokenize(src)
    ev = Evaluator(toks)
    ev.definitions()
    loops = {}  # loop variable -> its list of template paths, as last seen
    functions = []  # (token index, name) of every `static void name(`
    testers = {}  # tester variable -> what it was made from (a path or a variable)
    calls_of = {}  # function name -> the loop variable it is called with
    out = []
    for i, t in enumerate(toks):
        if t.kind != "id":
            continue
        if t.value == "void" and toks[i - 1].value == "static" and toks[i + 2].value == "(":
            functions.append(toks[i + 1].value)
        elif t.value == "for" and toks[i + 1].value == "(":
            # for (const auto & path : { "a", "b" }) / for (const char * tmpl : { … })
            j = i + 2
            while toks[j].value not in (":", ";"):
                j += 1
            if toks[j].value == ":" and toks[j + 1].value == "{":
                paths, _ = ev.brace(j + 1) if all(
                    k.kind in ("str", "p") for k in toks[j + 1:j + 4]) else ([], 0)
                if paths and all(isinstance(p, str) for p in paths):
                    loops[toks[j - 1].value] = paths
        elif t.value in functions and toks[i + 1].value == "(" and toks[i + 2].kind == "id" \
                and toks[i - 1].value not in ("void",):
            calls_of[t.value] = loops.get(toks[i + 2].value, [])
        elif t.value == "peg_tester" and toks[i + 1].value == "(" and toks[i - 1].value == "=":
            var = toks[i - 2].value
            arg = toks[i + 2]
            if arg.kind == "str":
                testers[var] = [arg.value]
            elif arg.value in loops:
                testers[var] = loops[arg.value]
            else:
                testers[var] = ("function", functions[-1])
        elif toks[i + 1].value == "=" and toks[i - 1].value in LOCAL_TYPES:
            # A local: `const std::string x = "…" + y;`, `auto m = simple_assist_msg(…);`
            try:
                ev.names[t.value], _ = ev.expr(i + 2)
            except Unknown:
                pass
        elif toks[i - 1].value == "common_chat_msg" and toks[i + 1].value == ";":
            ev.names[t.value] = {"role": "", "content": "", "reasoning": "", "calls": []}
        elif isinstance(ev.names.get(t.value), dict) and toks[i + 1].value == "." \
                and toks[i + 3].value == "=" and toks[i - 1].value != ".":
            field = FIELDS.get(toks[i + 2].value)
            try:
                value, _ = ev.expr(i + 4)
            except Unknown:
                field = None
            if field:
                ev.names[t.value] = dict(ev.names[t.value], **{field: value})
        elif t.value in testers and toks[i + 1].value == "." and toks[i + 2].value == "test":
            try:
                case = chain(ev, i + 2)
            except Unknown as e:
                print(f"chat_corpus: case at line {t.line} not read: {e}", file=sys.stderr)
                continue
            out.append((testers[t.value], dict(case, line=t.line)))
    # A tester made from a function's parameter takes the paths the function is
    # called with, known only once the whole file is read.
    found = []
    for paths, case in out:
        if isinstance(paths, tuple):
            paths = calls_of.get(paths[1], [])
        for p in paths:
            name = p.rsplit("/", 1)[-1].removesuffix(".jinja")
            found.append(dict(case, template=name))
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    found = cases(sys.argv[1].rstrip("/") + "/tests/test-chat.cpp")
    json.dump(found, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

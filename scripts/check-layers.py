#!/usr/bin/env python3
"""Checks that shepherd's modules depend on each other one way only.

Reads every `.rs` file under `src/`, drops comments and string literals, and
collects the module paths each file names: `crate::a::...`, `use crate::{a,
b}` and, inside `frontend/`, `super::x`. Each file belongs to a node: its
top-level module (`src/store.rs`, `src/backend/*` -> `store`, `backend`), or
`frontend/x` for a front-end submodule (`frontend` itself is `frontend.rs`).

It fails, printing the offending edges, when
  * the graph has a cycle (any strongly connected group of two or more nodes),
  * an edge runs from a lower layer to a higher one in LAYERS below, or
  * modules of one folder form a circle: inside every module, its child modules
    (`a/b.rs`, `a/c.rs`, ...) are the nodes, and `b -> c` when code in `b` (or
    below it) names a path into `c`, through `crate::`, `super::`, `self::` or a
    child's bare name. A module and its own children are not a circle: a parent
    declares its children and they use the parent's items.
Nodes in the same layer may depend on each other as long as there is no cycle.

Test code (`#[cfg(test)]` or `#[cfg(all(test, ...))]` items, and the files
such an item declares with `mod x;`) is checked too, as its own set of edges:
an upward or circular edge that only tests make fails unless it is listed in
TEST_EXCEPTIONS with its reason. Listed exceptions are printed on every run
so they stay visible, and one that no code makes any more fails too.

Usage: scripts/check-layers.py [--graph]   (--graph prints every edge)
"""

import os
import re
import sys

# Lowest first. A module may use modules in its own layer or below.
LAYERS = [
    # util holds the process-wide services too (log, redact, sys, stop, auth).
    ["util"],
    ["core"],
    ["stream", "llama", "template", "args"],
    # tools holds the tool-run gate and its audit log (approval, audit).
    ["tools", "backend"],
    ["store", "config"],
    # MCP reads its servers' settings from config::mcp, so it sits above config.
    ["mcp"],
    ["agent"],
    ["commands"],
    ["frontend"],
    # The fuzzer (tests only) reaches the parsers of every layer, the HTTP server's too.
    ["fuzz"],
    ["main"],
]

# Upward edges made only by test code, each with why it is there. Every entry
# is a known debt, printed on every run; remove it once fixed. None today.
TEST_EXCEPTIONS = {}

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
CODE_TOKEN = re.compile(
    r'//[^\n]*|/\*.*?\*/|b?r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|'
    r"b?'(?:\\.|[^'\\\n])'|[^/\"'rb]+|.",
    re.S,
)


def code_only(text):
    """The text with comments, strings and char literals removed."""
    out = []
    for m in CODE_TOKEN.finditer(text):
        tok = m.group(0)
        if tok.startswith(("//", "/*")) or tok.endswith(('"', "'")) and len(tok) > 1:
            out.append(" " if not tok.startswith("//") else "")
        else:
            out.append(tok)
    # `pub(in crate::a)` limits who sees an item; it names no dependency.
    return re.sub(r"\bpub\s*\(\s*in\s+[^)]*\)", "pub", "".join(out))


CFG_TEST = re.compile(r"#\[cfg\((?:test|all\(\s*test\b[^\]]*\))\)\]")


def split_tests(code):
    """(code outside `#[cfg(test)]` items, code inside them, test submodule names)."""
    prod, tests, test_mods, pos = [], [], [], 0
    for m in CFG_TEST.finditer(code):
        if m.start() < pos:
            continue
        prod.append(code[pos : m.start()])
        brace, semi = code.find("{", m.end()), code.find(";", m.end())
        if semi != -1 and (brace == -1 or semi < brace):
            item = code[m.end() : semi + 1]
            decl = re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", item)
            if decl:
                test_mods.append(decl.group(1))
            tests.append(item)
            pos = semi + 1
            continue
        depth, end = 0, brace
        while end < len(code):
            depth += {"{": 1, "}": -1}.get(code[end], 0)
            end += 1
            if depth == 0:
                break
        tests.append(code[m.end() : end])
        pos = end
    prod.append(code[pos:])
    return "".join(prod), "".join(tests), test_mods


def child_files(rel, name):
    """The paths (relative to src/) a `mod name;` in file `rel` may load."""
    base = os.path.dirname(rel)
    stem = os.path.basename(rel)[:-3]
    if stem not in ("mod", "main"):
        base = os.path.join(base, stem)
    return [os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")]


def node_of(rel):
    """The graph node of a file, from its path relative to src/."""
    parts = rel[:-3].split("/")
    if parts[0] != "frontend" or len(parts) == 1:
        return parts[0]
    if parts[1] == "mod":
        return "frontend"
    return "frontend/" + parts[1]


def layer_of(node):
    top = node.split("/")[0]
    for idx, layer in enumerate(LAYERS):
        if top in layer:
            return idx
    return None


def frontend_children():
    root = os.path.join(SRC, "frontend")
    names = set()
    for entry in os.listdir(root):
        if entry.endswith(".rs") and entry != "mod.rs":
            names.add(entry[:-3])
        elif os.path.isdir(os.path.join(root, entry)):
            names.add(entry)
    return names


def target(first, second, children):
    """The node a path `crate::first::second...` names."""
    if first == "frontend" and second in children:
        return "frontend/" + second
    return first


def edges_of(rel, code, children):
    node = node_of(rel)
    found = set()
    for m in re.finditer(r"\bcrate::(\w+)(?:::(\w+))?", code):
        found.add(target(m.group(1), m.group(2), children))
    for m in re.finditer(r"\bcrate::\{([^}]*)\}", code):
        for item in m.group(1).split(","):
            first = item.strip().split("::")[0]
            if first:
                found.add(first)
    # `super::` from a front-end submodule's top file climbs to `frontend`.
    depth = rel.count("/")
    is_top_file = rel.endswith("/mod.rs") and depth == 2 or depth == 1
    if node.startswith("frontend/") and is_top_file:
        for m in re.finditer(r"\bsuper::(?:\{([^}]*)\}|(\w+))", code):
            names = m.group(1).split(",") if m.group(1) else [m.group(2)]
            for name in names:
                first = name.strip().split("::")[0]
                if first in ("self", "*") or first in children:
                    found.add("frontend/" + first if first in children else "frontend")
                elif first:
                    found.add("frontend")
    # `frontend/mod.rs` names its own submodules by relative paths.
    if node == "frontend":
        for child in children:
            if re.search(rf"(?<!::)\b{child}::", code):
                found.add("frontend/" + child)
    found.discard(node)
    found = {t for t in found if t.split("/")[0] not in ("self", "super", "crate")}
    return node, found


def collect():
    """(edges of non-test code, edges of test code), each node -> set of nodes."""
    children = frontend_children()
    sources = {}
    for dirpath, _, files in os.walk(SRC):
        for name in sorted(files):
            if name.endswith(".rs"):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    sources[os.path.relpath(path, SRC)] = code_only(f.read())
    parts, test_files = {}, set()
    for rel, code in sources.items():
        prod, tests, test_mods = split_tests(code)
        parts[rel] = (prod, tests)
        for name in test_mods:
            test_files.update(child_files(rel, name))
    graph, test_graph = {}, {}
    for rel, (prod, tests) in sorted(parts.items()):
        if rel in test_files:
            prod, tests = "", prod + tests
        for g, code in ((graph, prod), (test_graph, tests)):
            node, targets = edges_of(rel, code, children)
            for n in (graph, test_graph):
                n.setdefault(node, set())
                for t in targets:
                    n.setdefault(t, set())
            g[node].update(targets)
    return graph, test_graph


def cycles(graph):
    """Strongly connected groups of two or more nodes (Tarjan)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def upward(graph):
    """Edges (v, w) that run from a lower layer to a higher one."""
    found = []
    for v in sorted(graph):
        for w in sorted(graph[v]):
            lv, lw = layer_of(v), layer_of(w)
            if lv is not None and lw is not None and lw > lv:
                found.append((v, w))
    return found


def report_cycles(graph, label):
    groups = cycles(graph)
    for group in groups:
        members = set(group)
        inner = [f"{v} -> {w}" for v in group for w in sorted(graph[v]) if w in members]
        print(f"{label}cycle among {', '.join(group)}: {'; '.join(inner)}")
    return bool(groups)


def module_of(rel):
    """A file's module path: `a/b.rs` -> [a, b], `main.rs` -> [], `a/mod.rs` -> [a]."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "main"):
        parts = parts[:-1]
    return parts


def paths_named(module, code, children):
    """The absolute module paths (lists of names) that `code`, in `module`, names."""
    found = []

    def add(base, rest):
        names = [n for n in re.split(r"\s*::\s*", rest.strip()) if n]
        if names and names[0] not in ("self", "*"):
            found.append(base + names)

    def expand(base, rest):
        # `{a, b::c, d::{e}}`: the first name of each item is enough.
        rest = rest.strip()
        if rest.startswith("{"):
            depth, item = 0, ""
            for ch in rest[1:]:
                if ch in "{" :
                    depth += 1
                if ch == "}":
                    if depth == 0:
                        break
                    depth -= 1
                if ch == "," and depth == 0:
                    add(base, item.split("{")[0])
                    item = ""
                else:
                    item += ch
            add(base, item.split("{")[0])
        else:
            add(base, rest)

    path = r"((?:\w+\s*::\s*)*(?:\w+|\{[^;]*?\}))"
    for m in re.finditer(r"(?<![\w:])crate\s*::\s*" + path, code):
        expand([], m.group(1))
    for m in re.finditer(r"(?<![\w:])((?:super\s*::\s*)+)" + path, code):
        ups = m.group(1).count("super")
        if ups <= len(module):
            expand(module[: len(module) - ups], m.group(2))
    for m in re.finditer(r"(?<![\w:])self\s*::\s*" + path, code):
        expand(module, m.group(1))
    for child in children:
        for m in re.finditer(rf"(?<![\w:]){child}\s*::\s*(\w+)", code):
            found.append(module + [child, m.group(1)])
    return found


def sibling_circles():
    """Circles between the child modules of one module (production code only)."""
    files = {}
    for dirpath, _, names in os.walk(SRC):
        for name in sorted(names):
            if name.endswith(".rs"):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    files[os.path.relpath(path, SRC)] = code_only(f.read())
    modules = {tuple(module_of(rel)) for rel in files}
    test_files = set()
    for rel, code in files.items():
        for name in split_tests(code)[2]:
            test_files.update(child_files(rel, name))
    graphs = {}
    for rel, code in sorted(files.items()):
        if rel in test_files:
            continue
        module = module_of(rel)
        prod = split_tests(code)[0]
        children = [m[-1] for m in modules if len(m) == len(module) + 1 and list(m[:-1]) == module]
        for target_path in paths_named(module, prod, children):
            # The deepest common parent of the two modules, and the child of it each lies in.
            common = 0
            while (
                common < min(len(module), len(target_path))
                and module[common] == target_path[common]
            ):
                common += 1
            if common >= len(module) or common >= len(target_path):
                continue  # a module naming itself, a parent or its own child
            parent = tuple(module[:common])
            src_child, dst_child = module[common], target_path[common]
            if parent + (dst_child,) not in modules or src_child == dst_child:
                continue  # an item of the parent, not a sibling module
            graphs.setdefault(parent, {}).setdefault(src_child, set()).add(dst_child)
    found = []
    for parent, graph in sorted(graphs.items()):
        for node in list(graph):
            for w in list(graph[node]):
                graph.setdefault(w, set())
        for group in cycles(graph):
            members = set(group)
            inner = [f"{v} -> {w}" for v in group for w in sorted(graph[v]) if w in members]
            folder = "/".join(parent) or "src"
            found.append(f"circle in {folder}/: {'; '.join(inner)}")
    return found


def main():
    graph, test_graph = collect()
    if "--graph" in sys.argv:
        for v in sorted(graph):
            extra = sorted(test_graph[v] - graph[v])
            tail = f"  (tests: {', '.join(extra)})" if extra else ""
            print(f"{v} -> {', '.join(sorted(graph[v])) or '(nothing)'}{tail}")
    failed = False
    unplaced = sorted(v for v in graph if layer_of(v) is None)
    if unplaced:
        failed = True
        print("modules with no layer (add them to LAYERS):", ", ".join(unplaced))
    failed |= report_cycles(graph, "")
    for v, w in upward(graph):
        failed = True
        print(f"upward edge: {v} (layer {layer_of(v)}) -> {w} (layer {layer_of(w)})")
    # Test code: the same rules, less the listed exceptions.
    excused = set(TEST_EXCEPTIONS)
    test_only = {v: {w for w in test_graph[v] if (v, w) not in excused} | graph[v] for v in graph}
    failed |= report_cycles(test_only, "test code: ")
    for v, w in upward(test_graph):
        if (v, w) in excused:
            print(f"known test-only upward edge: {v} -> {w} ({TEST_EXCEPTIONS[(v, w)]})")
        else:
            failed = True
            print(f"test code: upward edge: {v} -> {w}")
    for v, w in sorted(excused):
        if w not in test_graph.get(v, ()):
            failed = True
            print(f"stale exception {v} -> {w}: no code makes it now; remove it from TEST_EXCEPTIONS")
        elif w in graph.get(v, ()):
            failed = True
            print(f"excepted edge {v} -> {w} is now made by non-test code")
    for line in sibling_circles():
        failed = True
        print(line)
    if failed:
        sys.exit(1)
    print(f"check-layers: {len(graph)} modules, no cycles, no upward edges, no circle inside a folder")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Checks that no function outside test code is longer than 80 lines unless the
comment above it says why it is long, and that no file's production part (its
lines outside top-level `#[cfg(test)]` items) is longer than FILE_LIMIT:
a file that grows past it holds more than one job, and is split by job.

A function is long when its lines, from `fn` to its closing brace at the same
indentation, number more than LIMIT. Its reason is a `//` or `///` comment in
the lines right above it (attributes may sit in between) that says "long"
(as in "Long on purpose: ..."). Test code is skipped: files named `tests.rs` or
`*_tests.rs`, and everything from a top-level `#[cfg(test)]` on.

Usage: scripts/check-long-functions.py
"""

import os
import re
import sys

LIMIT = 80
FILE_LIMIT = 700
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
FN = re.compile(r'^(\s*)(?:pub(?:\([^)]*\))? )?(?:const )?(?:unsafe )?(?:extern "C" )?fn (\w+)')


def reason_above(lines, at):
    """Whether the comment block above line `at` says why the function is long."""
    i = at - 1
    while i >= 0 and lines[i].strip().startswith("#["):
        i -= 1
    comment = []
    while i >= 0 and lines[i].strip().startswith("//"):
        comment.append(lines[i])
        i -= 1
    return any("long" in line.lower() for line in comment)


def production_lines(lines):
    """The file's lines outside its top-level `#[cfg(test)]` items (the tests
    module, test-only helpers and impls), comments and blank lines included."""
    count, i = 0, 0
    while i < len(lines):
        if not lines[i].startswith("#[cfg(test)]"):
            count += 1
            i += 1
            continue
        # The item ends at its first line ending in `;` before any `{`, or at the
        # `}` that closes it at column 0 (rustfmt's layout of a top-level item).
        j = i + 1
        while j < len(lines) and lines[j].startswith("#["):
            j += 1
        if j < len(lines) and "{" not in lines[j] and lines[j].rstrip().endswith(";"):
            i = j + 1
            continue
        while j < len(lines) and not lines[j].startswith("}"):
            j += 1
        i = j + 1
    return count


def main():
    found, big = [], []
    for root, _, files in os.walk(SRC):
        for name in sorted(files):
            if not name.endswith(".rs") or name == "tests.rs" or name.endswith("_tests.rs"):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
            production = production_lines(lines)
            end = next((i for i, l in enumerate(lines) if l.startswith("#[cfg(test)]")), len(lines))
            if production > FILE_LIMIT:
                rel = os.path.relpath(path, os.path.join(SRC, ".."))
                big.append(f"{rel}: {production} lines outside its tests")
            for at in range(end):
                m = FN.match(lines[at])
                if not m:
                    continue
                # A declaration without a body (in an `extern` block or a trait),
                # on one line or several: its signature ends with `;`, not `{`.
                head = next((j for j in range(at, end) if lines[j].rstrip().endswith(("{", ";"))), at)
                if lines[head].rstrip().endswith(";"):
                    continue
                close = m.group(1) + "}"
                last = next((j for j in range(at + 1, end) if lines[j] == close), at)
                length = last - at + 1
                if length > LIMIT and not reason_above(lines, at):
                    rel = os.path.relpath(path, os.path.join(SRC, ".."))
                    found.append(f"{rel}:{at + 1}: fn {m.group(2)} is {length} lines")
    if big:
        print(f"files whose production part is over {FILE_LIMIT} lines (split them by job):")
        print("\n".join("  " + f for f in big))
    if found:
        print(f"functions over {LIMIT} lines without a comment saying why they are long:")
        print("\n".join("  " + f for f in found))
    if big or found:
        return 1
    print(f"check-long-functions: no unexplained function over {LIMIT} lines, no file over {FILE_LIMIT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

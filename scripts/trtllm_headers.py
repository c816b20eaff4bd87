"""The headers `make check-trtllm-shim` compiles ffi/trtllm_shim.cpp against.

    trtllm_headers.py cuda DEST WHEEL...
        The CUDA headers from NVIDIA's PyPI wheels (nvidia-cuda-runtime-cu12,
        -nvcc-cu12 for crt/, -cccl-cu12 for <nv/target>), laid out as one
        toolkit-style DEST/include. Written to a temporary name and renamed, so
        an interrupted run leaves nothing half-extracted.

    trtllm_headers.py vendor TREE TAG COMMIT DEST -- CXXFLAGS...
        Copies into DEST/include exactly the TensorRT-LLM headers that the shim
        includes, directly or not (the preprocessor's own dependency list, `g++ -M`
        with CXXFLAGS plus -I for TREE's include directory), with TREE's LICENSE
        and a README naming TAG and COMMIT and listing every file's SHA-256.
        TREE is a TensorRT-LLM source checkout at TAG (cpp/include) or an installed
        tensorrt_llm package of that release (include/). Run it through
        `make vendor-trtllm-headers` (docs/tensorrt.md).
"""
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

SHIM = "ffi/trtllm_shim.cpp"
# (wheel member prefix, what of it to keep) per wheel; every wheel puts its
# headers under nvidia/<component>/include/.
CUDA_PARTS = {"cuda_runtime": "", "cuda_nvcc": "crt/", "cuda_cccl": ""}


def extract_cuda(dest, wheels):
    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".cuda-headers-", dir=parent)
    count = 0
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                parts = name.split("/", 3)
                if len(parts) < 4 or parts[0] != "nvidia" or parts[2] != "include" or name.endswith("/"):
                    continue
                keep = CUDA_PARTS.get(parts[1])
                relative = parts[3]
                if keep is None or not relative.startswith(keep) or relative == "__init__.py":
                    continue
                target = os.path.join(staging, "include", relative)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with archive.open(name) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                count += 1
    for probe in ("cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "crt/host_defines.h", "nv/target"):
        if not os.path.isfile(os.path.join(staging, "include", probe)):
            shutil.rmtree(staging)
            sys.exit(f"the CUDA header wheels lack {probe}")
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    os.replace(staging, dest)
    print(f"CUDA headers ready: {dest}/include ({count} files)")


def tree_include(tree):
    for candidate in ("cpp/include", "include"):
        path = os.path.join(tree, candidate)
        if os.path.isfile(os.path.join(path, "tensorrt_llm/executor/executor.h")):
            return os.path.abspath(path)
    sys.exit(f"{tree} holds neither cpp/include nor include/tensorrt_llm/executor/executor.h")


def tree_license(tree):
    # A checkout has it at its root; an installed package in its .dist-info.
    candidates = ["LICENSE", "../LICENSE", "../../LICENSE"]
    candidates += sorted(glob.glob(os.path.join(tree, "../tensorrt_llm-*.dist-info/**/LICENSE*"), recursive=True))
    for candidate in candidates:
        path = os.path.join(tree, candidate)
        if os.path.isfile(path):
            return path
    sys.exit(f"no LICENSE found in or above {tree}: the vendored headers must carry it")


def dependencies(include, cxxflags):
    cmd = ["g++", "-M", *cxxflags, "-I", include, SHIM]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    words = out.replace("\\\n", " ").split()
    files = set()
    for word in words[1:]:
        path = os.path.abspath(word)
        if path.startswith(include + os.sep):
            files.add(os.path.relpath(path, include))
    return sorted(files)


def vendor(tree, tag, commit, dest, cxxflags):
    include = tree_include(tree)
    files = dependencies(include, cxxflags)
    if "tensorrt_llm/executor/executor.h" not in files:
        sys.exit("g++ -M did not list executor.h: the flags do not reach the TensorRT-LLM headers")
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    rows = []
    for relative in files:
        target = os.path.join(dest, "include", relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(include, relative), target)
        with open(target, "rb") as f:
            data = f.read()
        rows.append(f"| `include/{relative}` | {len(data)} | `{hashlib.sha256(data).hexdigest()}` |")
    shutil.copyfile(tree_license(tree), os.path.join(dest, "LICENSE"))
    with open(os.path.join(dest, "README.md"), "w") as readme:
        readme.write(
            f"# TensorRT-LLM headers, {tag}\n\n"
            f"Release `{tag}`, commit `{commit}`, of NVIDIA's TensorRT-LLM (Apache-2.0, `LICENSE`\n"
            "beside this file). Only the headers that `ffi/trtllm_shim.cpp` includes, directly\n"
            "or through other headers, are here, unmodified, so that `make check-trtllm-shim`\n"
            "(part of `make test`) compiles the shim against the real API without network\n"
            "access. They are never linked into anything.\n\n"
            "Regenerate them for another release with\n"
            "`make vendor-trtllm-headers TRTLLM_TREE=DIR TRTLLM_TAG=TAG TRTLLM_COMMIT=SHA`\n"
            "(docs/tensorrt.md).\n\n"
            "| file | bytes | sha256 |\n| --- | --- | --- |\n" + "\n".join(rows) + "\n")
    print(f"vendored {len(files)} headers of TensorRT-LLM {tag} ({commit}) into {dest}")


def main(argv):
    if len(argv) >= 3 and argv[0] == "cuda":
        extract_cuda(argv[1], argv[2:])
    elif len(argv) >= 6 and argv[0] == "vendor" and argv[5] == "--":
        vendor(argv[1], argv[2], argv[3], argv[4], argv[6:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])

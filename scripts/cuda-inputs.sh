#!/usr/bin/env bash
# Prints the hash of what the CUDA build is made of, for `make check-cuda-if-changed`:
#
#   cuda-inputs.sh [MAKEFILE]    (default: the tree's Makefile)
#
# Not whole files, which change for other reasons (a comment in the Makefile, an
# unrelated target, a crate bump) and then cost CI a cold CUDA build of 45 minutes:
#   * the commands `make check-cuda-build` runs, as `make -n -B` prints them (every
#     variable, flag and environment setting of the CUDA build expanded, comments and
#     other targets absent), with this tree's and the cache's paths written as names,
#     and with the machine's state and other jobs' settings taken out (vendored crates
#     or not, sudo or not, the apt package lists, the CPU binary's size cap);
#   * build.rs, Cargo.toml and .cargo/config.toml without their comment lines;
#   * of Cargo.lock, the packages that build llama.cpp (llama-cpp-sys-2 and its build
#     dependencies), not the rest of the graph;
#   * the CUDA build's own sources and scripts (ffi/cuda_driver.c, ffi/cublas_open.c,
#     scripts/cuda-toolkit.sh, cuda-prune.sh, release-check.sh, this script), and the
#     Rust files with items compiled only in a CUDA build (#[cfg(feature = "cuda")],
#     #[cfg(cublas_dlopen)]).
# `make test` checks that a comment added to the Makefile keeps the hash and that a
# changed CUDA setting changes it (check-cuda-inputs).
set -euo pipefail
cd "$(dirname "$0")/.."
makefile=${1:-Makefile}
tree=$(pwd -P)
cache=${CACHE:-$HOME/.cache/shepherd}
uncommented() { grep -vE '^[[:space:]]*(#|//)' "$@" || true; }
{
    make --no-print-directory -n -B -f "$makefile" check-cuda-build VENDORED= SUDO= APT_PACKAGES= RELEASE_PACKAGES= MAX_STATIC_MB= \
        CACHE="$cache" 2>&1 |
        grep -v '^make\[' | sed -e "s|$cache|<cache>|g" -e "s|$tree|<tree>|g"
    uncommented build.rs Cargo.toml .cargo/config.toml
    awk -v RS= '/\nname = "(llama-cpp-sys-2|cc|cmake|find_cuda_helper|bindgen|glob)"\n/' Cargo.lock
    cat ffi/cuda_driver.c ffi/cublas_open.c scripts/cuda-toolkit.sh scripts/cuda-prune.sh \
        scripts/release-check.sh scripts/cuda-inputs.sh
    grep -rlE '#\[cfg\(.*(feature = "cuda"|cublas_dlopen)' src | LC_ALL=C sort | xargs cat
} | sha256sum | cut -c1-16

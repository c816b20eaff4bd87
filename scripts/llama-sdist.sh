#!/usr/bin/env bash
# Fetches the llama-cpp-python 0.3.36 sdist from PyPI and unpacks it once under DIR
# (it vendors the full llama.cpp tree that `make bench` builds llama-bench and
# llama-server from, and that `make gpu-carry` packs for the GPU box); prints the
# llama.cpp tree's path.
#
#   llama-sdist.sh DIR
set -euo pipefail
DIR=${1:?usage: llama-sdist.sh DIR}
PYTHON=${PYTHON:-python3}
VERSION=0.3.36
TREE=$DIR/llama_cpp_python-$VERSION/vendor/llama.cpp
if [ ! -d "$TREE" ]; then
    mkdir -p "$DIR/sdist"
    # scikit-build-core only lets pip read the sdist's metadata; nothing is built by pip.
    $PYTHON -c 'import scikit_build_core' 2>/dev/null || $PYTHON -m pip install --quiet scikit-build-core >&2
    $PYTHON -m pip download --quiet --no-deps --no-binary=:all: --no-build-isolation \
        -d "$DIR/sdist" "llama-cpp-python==$VERSION" >&2
    tar xzf "$DIR/sdist/llama_cpp_python-$VERSION.tar.gz" -C "$DIR"
fi
echo "$TREE"

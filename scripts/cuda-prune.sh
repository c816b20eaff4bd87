#!/usr/bin/env bash
# Prunes the toolkit's static cuBLAS to the GPU code a build's architectures need
# (`make CUDA=1 static`, docs/INSTALL.md "CUDA"), with the toolkit's own nvprune:
#
#   cuda-prune.sh TOOLKIT 'CUDA_ARCHS' DEST
#
# CUDA_ARCHS as CMake takes it ("80-real;89-real;90-real"): NN-real keeps machine code
# for sm_NN and for the lower minor versions of the same major (a GPU runs those
# too: an sm_89 card runs cuBLAS's sm_80 and sm_86 kernels where it has no sm_89
# one), NN-virtual keeps compute_NN PTX, a bare NN both. DEST gets
# libcublas_static.a and libcublasLt_static.a; DEST/complete is written last, so an
# interrupted run starts over. About 10 s per architecture list, once.
set -euo pipefail
TOOLKIT=${1:?usage: cuda-prune.sh TOOLKIT CUDA_ARCHS DEST}
ARCHS=${2:?usage: cuda-prune.sh TOOLKIT CUDA_ARCHS DEST}
DEST=${3:?usage: cuda-prune.sh TOOLKIT CUDA_ARCHS DEST}
[[ -f $DEST/complete ]] && exit 0

gencode=()
IFS=';, ' read -ra list <<<"$ARCHS"
for arch in "${list[@]}"; do
    [[ -n $arch ]] || continue
    n=${arch%%-*} kind=${arch#*-}
    [[ $arch == *-* ]] || kind=both
    [[ $n =~ ^[0-9]+$ ]] || { echo "cuda-prune: '$arch' is not an architecture (NN, NN-real or NN-virtual)" >&2; exit 1; }
    if [[ $kind == real || $kind == both ]]; then
        major=$((n / 10)) minor=$((n % 10))
        for ((m = 0; m <= minor; m++)); do
            gencode+=(-gencode "arch=compute_$major$m,code=sm_$major$m")
        done
    fi
    if [[ $kind == virtual || $kind == both ]]; then
        gencode+=(-gencode "arch=compute_$n,code=compute_$n")
    fi
done
((${#gencode[@]})) || { echo "cuda-prune: no architectures in '$ARCHS'" >&2; exit 1; }

rm -rf "$DEST" && mkdir -p "$DEST"
for lib in libcublas_static.a libcublasLt_static.a; do
    "$TOOLKIT/bin/nvprune" "${gencode[@]}" "$TOOLKIT/lib64/$lib" -o "$DEST/$lib"
    echo "cuda-prune: $lib $(stat -c %s "$TOOLKIT/lib64/$lib") -> $(stat -c %s "$DEST/$lib") bytes ($ARCHS)"
done
touch "$DEST/complete"

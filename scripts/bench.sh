#!/usr/bin/env bash
# `make bench`: llama.cpp's own llama-bench against shepherd's in-process loop on the
# same model and thread count; prints pp512/tg128 for both with the ratio, and
# shepherd's time to first token at turn 1 and turn 10 of a scripted conversation.
# llama-bench is built once from the llama-cpp-python==0.3.36 sdist (it vendors the
# full llama.cpp tree) and cached under $CACHE/llama-bench.
set -euo pipefail
MODEL=${MODEL:?set MODEL to a GGUF file}
THREADS=${THREADS:-2}
CACHE=${CACHE:-$HOME/.cache/shepherd}
PYTHON=${PYTHON:-python3}
DIR="$CACHE/llama-bench"
BENCH="$DIR/build/bin/llama-bench"

build_llama_bench() {
  mkdir -p "$DIR/sdist"
  if [ ! -d "$DIR/llama_cpp_python-0.3.36" ]; then
    # scikit-build-core only lets pip read the sdist's metadata; nothing is built by pip.
    $PYTHON -c 'import scikit_build_core' 2>/dev/null || $PYTHON -m pip install --quiet scikit-build-core
    $PYTHON -m pip download --quiet --no-deps --no-binary=:all: --no-build-isolation \
      -d "$DIR/sdist" llama-cpp-python==0.3.36
    tar xzf "$DIR/sdist/llama_cpp_python-0.3.36.tar.gz" -C "$DIR"
  fi
  cmake -S "$DIR/llama_cpp_python-0.3.36/vendor/llama.cpp" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF \
    -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF >/dev/null
  cmake --build "$DIR/build" -j"$(nproc)" --target llama-bench >/dev/null
}

[ -x "$BENCH" ] || build_llama_bench
[ "${1:-}" = "--build-only" ] && exit 0

echo "llama-bench: $MODEL, $THREADS threads" >&2
"$BENCH" -m "$MODEL" -t "$THREADS" -p 512 -n 128 -r 3 -o json > "$DIR/llama-bench.json"

echo "shepherd bench (release build of the test binary)" >&2
SHEPHERD_TEST_MODEL="$MODEL" SHEPHERD_BENCH_FULL=1 SHEPHERD_BENCH_THREADS="$THREADS" \
  cargo test --release --quiet bench_reports_speeds_and_turn_latency -- --nocapture 2>/dev/null \
  | grep '^SHEPHERD_BENCH ' | sed 's/^SHEPHERD_BENCH //' > "$DIR/shepherd-bench.json"

$PYTHON - "$DIR/llama-bench.json" "$DIR/shepherd-bench.json" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))
ours = json.load(open(sys.argv[2]))
def ref_speed(n_prompt, n_gen):
    return next(r["avg_ts"] for r in ref if r["n_prompt"] == n_prompt and r["n_gen"] == n_gen)
rows = [("pp512", ref_speed(512, 0), ours["pp_tps"]), ("tg128", ref_speed(0, 128), ours["tg_tps"])]
print(f"{'test':8} {'llama-bench':>12} {'shepherd':>10} {'ratio':>7}")
for name, theirs, mine in rows:
    print(f"{name:8} {theirs:12.1f} {mine:10.1f} {mine / theirs:7.2f}x")
t1, t10 = ours["ttft_turn1_ms"], ours["ttft_turn10_ms"]
print(f"TTFT turn 1: {t1:.0f} ms, turn 10: {t10:.0f} ms, ratio {t10 / t1:.2f}")
PY

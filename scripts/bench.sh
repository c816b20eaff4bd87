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

# Timing noise on a shared 2-core VM is ±20% run to run, so the two are measured in
# interleaved rounds (llama-bench, then shepherd, ROUNDS times) and compared by median.
ROUNDS=${ROUNDS:-5}
echo "building shepherd's bench (release test binary)" >&2
SHEPHERD_TEST_MODEL="$MODEL" cargo test --release --quiet --no-run 2>/dev/null
: > "$DIR/llama-bench.jsonl"
: > "$DIR/shepherd-bench.jsonl"
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS: llama-bench, then shepherd ($MODEL, $THREADS threads)" >&2
  "$BENCH" -m "$MODEL" -t "$THREADS" -p 512 -n 128 -r 1 -o jsonl >> "$DIR/llama-bench.jsonl"
  SHEPHERD_TEST_MODEL="$MODEL" SHEPHERD_BENCH_FULL=1 SHEPHERD_BENCH_THREADS="$THREADS" \
    cargo test --release --quiet bench_reports_speeds_and_turn_latency -- --nocapture 2>/dev/null \
    | grep '^SHEPHERD_BENCH ' | sed 's/^SHEPHERD_BENCH //' >> "$DIR/shepherd-bench.jsonl"
done

$PYTHON - "$DIR/llama-bench.jsonl" "$DIR/shepherd-bench.jsonl" <<'PY'
import json, statistics, sys
ref = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ours = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
med = statistics.median
def ref_speeds(n_prompt, n_gen):
    return [r["avg_ts"] for r in ref if r["n_prompt"] == n_prompt and r["n_gen"] == n_gen]
rows = [
    ("pp512", ref_speeds(512, 0), [o["pp_tps"] for o in ours]),
    ("tg128", ref_speeds(0, 128), [o["tg_tps"] for o in ours]),
]
print(f"medians of {len(ours)} interleaved rounds (tokens/s)")
print(f"{'test':8} {'llama-bench':>12} {'shepherd':>10} {'ratio':>7}")
for name, theirs, mine in rows:
    print(f"{name:8} {med(theirs):12.1f} {med(mine):10.1f} {med(mine) / med(theirs):7.2f}x")
t1 = med([o["ttft_turn1_ms"] for o in ours])
t10 = med([o["ttft_turn10_ms"] for o in ours])
print(f"TTFT turn 1: {t1:.0f} ms, turn 10: {t10:.0f} ms, ratio {t10 / t1:.2f}")
PY

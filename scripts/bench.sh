#!/usr/bin/env bash
# `make bench`: llama.cpp's own llama-bench against shepherd's in-process loop on the
# same model and thread count; prints pp512/tg128 (and tg128 deep in a conversation,
# llama-bench's -d) for both with the ratio, with llama-bench at its default flash
# attention and at shepherd's (which depends on the CPU kernels: see docs/LLAMA.md), and
# shepherd's time to first token at turn 1 and turn 10 of a scripted conversation; then
# shepherd's API server against llama-server: single-stream and 4-stream aggregate
# tokens/s, and the same scripted conversation's time to first token over HTTP; and
# the cold one-shot's time to first token with the prompt cache empty and warm
# against --notools (scripts/bench_oneshot.py); then speculative decoding against
# llama-server's draftless drafters (scripts/bench_spec.py); the agent's own requests
# (scripts/bench_agent.py); and image prefill with a vision projector, a new picture and
# the same one again (scripts/bench_image.py).
# llama-bench is built once from the llama-cpp-python==0.3.36 sdist (it vendors the
# full llama.cpp tree) and cached under $CACHE/llama-bench; a second llama-bench, the
# same source built against the llama.cpp that shepherd links, takes the version
# difference out of the ratio.
set -euo pipefail
# MODELS="A.gguf B.gguf" (what `make bench` passes: the shipped SmolLM2 Q4_1 and the
# tests' Gemma 3 Q4_K_M) runs the whole bench once per model.
if [ -n "${MODELS:-}" ]; then
  for model in $MODELS; do
    echo "=== $(basename "$model") ===" >&2
    MODELS="" MODEL="$model" "$0" "$@"
  done
  exit 0
fi
MODEL=${MODEL:?set MODEL to a GGUF file}
THREADS=${THREADS:-2}
# Layers on the GPU for both sides (a `make CUDA=1` build; llama-bench built with CUDA too).
NGL=${NGL:-0}
CACHE=${CACHE:-$HOME/.cache/shepherd}
PYTHON=${PYTHON:-python3}
DIR="$CACHE/llama-bench"
# CUDA=1 (from `make CUDA=1 bench`): llama.cpp's tools with their CUDA backend, in a
# build dir of their own; CARGO_FEATURES carries `--features cuda` to shepherd's builds.
FEATURES=${CARGO_FEATURES:-}
# NATIVE=1 (the default, as shepherd's builds are: .cargo/config.toml): llama.cpp's tools
# built for this CPU too, as llama.cpp builds by default (GGML_NATIVE); NATIVE= for a
# `make PORTABLE=1` shepherd, both then built for any AVX2 CPU.
NATIVE=${NATIVE-1}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
# The compiler flags the Makefile exports for llama.cpp (-mno-amx-*: see NO_AMX there)
# name a build of their own, so that a build made with other flags is never reused.
FLAGS_KEY=$(printf '%s|%s' "${CFLAGS:-}" "${CXXFLAGS:-}" | sha256sum | cut -c1-8)
BUILD="$DIR/build${NATIVE:+-native}${CUDA:+-cuda}${CFLAGS:+-$FLAGS_KEY}"
BENCH="$BUILD/bin/llama-bench"
SERVER="$BUILD/bin/llama-server"

build_llama_bench() {
  local tree
  tree=$(PYTHON=$PYTHON scripts/llama-sdist.sh "$DIR")
  cmake -S "$tree" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="${CFLAGS:-}" -DCMAKE_CXX_FLAGS="${CXXFLAGS:-}" \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE="$([ -n "$NATIVE" ] && echo ON || echo OFF)" \
    -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF ${CUDA:+-DGGML_CUDA=ON -DGGML_CUDA_NCCL=OFF} >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target llama-bench llama-server >/dev/null
}

{ [ -x "$BENCH" ] && [ -x "$SERVER" ]; } || build_llama_bench

# llama-bench on the very llama.cpp shepherd links. llama-cpp-sys-2 vendors its own
# llama.cpp (newer than the sdist's) without the tools' sources, so the sdist's
# llama-bench source is built against the crate's tree, configured as the crate's build
# script configured it (read from that build's CMakeCache.txt: compiler flags and every
# GGML_ option). The ratio against it has no version difference in it.
# Prints the binary's path, or nothing when no crate build is found.
same_version_bench() {
  local cache="" c
  for c in $(ls -t "$TARGET_DIR"/release/build/llama-cpp-sys-2-*/out/build/CMakeCache.txt 2>/dev/null); do
    # The build whose CUDA and CPU settings are this run's.
    if grep -q '^GGML_CUDA:BOOL=ON' "$c"; then [ -n "${CUDA:-}" ]; else [ -z "${CUDA:-}" ]; fi \
      && if grep -q '^GGML_NATIVE:BOOL=ON' "$c"; then [ -n "$NATIVE" ]; else [ -z "$NATIVE" ]; fi \
      && { cache=$c; break; }
  done
  [ -n "$cache" ] || return 0
  local src opts cflags cxxflags key build
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$cache")
  cflags=$(sed -n 's/^CMAKE_C_FLAGS:STRING=//p' "$cache")
  cxxflags=$(sed -n 's/^CMAKE_CXX_FLAGS:STRING=//p' "$cache")
  opts=$(grep -E '^GGML_[A-Z0-9_]+:(BOOL|STRING)=' "$cache" | sed 's/^\([^:]*\):[A-Z]*=\(.*\)$/-D\1=\2/' | sort || true)
  key=$(printf '%s\n' "$src" "$cflags" "$cxxflags" "$opts" | sha256sum | cut -c1-12)
  build="$DIR/build-same-version-$key"
  if [ ! -x "$build/bin/llama-bench" ]; then
    echo "building llama-bench against shepherd's llama.cpp ($src)" >&2
    mkdir -p "$build-src"
    cat > "$build-src/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.14)
project(llama-bench-same-version C CXX)
add_subdirectory("$src" llama.cpp)
add_subdirectory("$DIR/llama_cpp_python-0.3.36/vendor/llama.cpp/tools/llama-bench" llama-bench)
CMAKE
    # shellcheck disable=SC2086  # $opts is one -D per word
    if ! { cmake -S "$build-src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="$cflags" \
        -DCMAKE_CXX_FLAGS="$cxxflags" -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
        -DBUILD_SHARED_LIBS=OFF -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$build/bin" $opts \
        && cmake --build "$build" -j"$(nproc)" --target llama-bench; } > "$build.log" 2>&1; then
      echo "could not build llama-bench against shepherd's llama.cpp (see $build.log);" \
        "that comparison is left out" >&2
      return 0
    fi
  fi
  if [ -x "$build/bin/llama-bench" ]; then echo "$build/bin/llama-bench"; fi
}
# --build-only (`make compat`): the tools built, llama-server's path printed.
if [ "${1:-}" = "--build-only" ]; then echo "$SERVER"; exit 0; fi
PART=${1:-all}  # all | --llama-only (part one) | --servers-only (parts two to four, and six) | --spec-only | --agent-only | --image-only (part four, five or six alone)
# Whether this run measures part $1 (a number).
runs() {
  case $PART in
    all) true ;;
    --llama-only) [ "$1" = 1 ] ;;
    --servers-only) [ "$1" != 1 ] && [ "$1" != 5 ] ;;
    --spec-only) [ "$1" = 4 ] ;;
    --agent-only) [ "$1" = 5 ] ;;
    --image-only) [ "$1" = 6 ] ;;
    *) echo "bench.sh: no part $PART" >&2; exit 2 ;;
  esac
}

# What the numbers were measured on: the CPU, and the instruction sets the builds
# use (a native build everything the CPU has, as llama.cpp's GGML_NATIVE; a portable
# one x86-64-v3).
cpu_features() {
  local have="" f
  for f in avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni avx512_bf16 avx_vnni amx_tile; do
    grep -qw "$f" /proc/cpuinfo && have="$have $f"
  done
  # The Makefile's NO_AMX keeps AMX out of both sides' builds.
  case " ${CFLAGS:-} " in *" -mno-amx-tile "*) have="${have/ amx_tile/} (amx_tile left out)" ;; esac
  echo "${have# }"
}
echo "model: $(basename "$MODEL"); CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)," \
  "$(nproc) cores, $THREADS threads; builds: $([ -n "$NATIVE" ] && echo "native ($(cpu_features))" \
  || echo "portable (x86-64-v3: avx2 fma f16c)")"

# Timing noise on a shared 2-core VM is ±20% run to run, so the two are measured in
# interleaved rounds (each program once per round, ROUNDS times) and compared by median.
ROUNDS=${ROUNDS:-5}
# The depth of the deep generation test: about an agent's opening (system prompt and
# tool descriptions).
DEPTH=${DEPTH:-1536}
if runs 1; then
# SHEPHERD_TEST_BIN: a release test binary built elsewhere (a GPU box with no Rust
# toolchain); by default cargo builds it here.
if [ -n "${SHEPHERD_TEST_BIN:-}" ]; then
  run_bench() { "$SHEPHERD_TEST_BIN" --quiet bench_reports_speeds_and_turn_latency --nocapture; }
else
  echo "building shepherd's bench (release test binary)" >&2
  SHEPHERD_TEST_MODEL="$MODEL" cargo test --release $FEATURES --quiet --no-run 2>/dev/null
  run_bench() { cargo test --release $FEATURES --quiet bench_reports_speeds_and_turn_latency -- --nocapture; }
fi
# SAME_BENCH: a llama-bench already built on shepherd's llama.cpp (a GPU box with no Rust
# toolchain builds it beside the CUDA libraries it links shepherd with). A test binary
# built elsewhere was not built from this target directory's crate build.
SAME=${SAME_BENCH:-}
[ -n "$SAME" ] || [ -n "${SHEPHERD_TEST_BIN:-}" ] || SAME=$(same_version_bench)
# One round of one llama-bench binary: pp512 and tg128, then tg128 at $DEPTH.
llama_bench_round() {
  "$1" -m "$MODEL" -t "$THREADS" -ngl "$NGL" -p 512 -n 128 -fa auto,off -r 3 -o jsonl >> "$2"
  "$1" -m "$MODEL" -t "$THREADS" -ngl "$NGL" -p 0 -n 128 -d "$DEPTH" -fa auto,off -r 3 -o jsonl >> "$2"
}
: > "$DIR/llama-bench.jsonl"
: > "$DIR/llama-bench-same.jsonl"
: > "$DIR/shepherd-bench.jsonl"
shepherd_round() {
  SHEPHERD_TEST_MODEL="$MODEL" SHEPHERD_BENCH_FULL=1 SHEPHERD_BENCH_THREADS="$THREADS" SHEPHERD_BENCH_GPU_LAYERS="$NGL" \
    SHEPHERD_BENCH_DEPTH="$DEPTH" \
    run_bench 2>/dev/null \
    | grep '^SHEPHERD_BENCH ' | sed 's/^SHEPHERD_BENCH //' >> "$DIR/shepherd-bench.jsonl"
}
# The programs take turns going first, so that none always runs after the others' load
# (this VM's speed drifts within a round).
PROGRAMS=(sdist shepherd)
[ -z "$SAME" ] || PROGRAMS=(sdist same shepherd)
for round in $(seq "$ROUNDS"); do
  shift_by=$(( (round - 1) % ${#PROGRAMS[@]} ))
  order=("${PROGRAMS[@]:shift_by}" "${PROGRAMS[@]:0:shift_by}")
  echo "round $round/$ROUNDS: ${order[*]} ($MODEL, $THREADS threads)" >&2
  for program in "${order[@]}"; do
    # -r 3: the mean of three runs, as shepherd's bench reports. Flash attention both at
    # llama-bench's default (auto) and off, shepherd's default on the CPU.
    case $program in
      sdist) llama_bench_round "$BENCH" "$DIR/llama-bench.jsonl" ;;
      same) llama_bench_round "$SAME" "$DIR/llama-bench-same.jsonl" ;;
      shepherd) shepherd_round ;;
    esac
  done
done

# llama.cpp's own floor for the TTFT ratio: llama-bench decoding the tokens that
# shepherd's turn 1 and turn 10 decoded, at the depths they went in at (the prompt
# tests only: no sampling, no template, no tokenizer), on the llama.cpp shepherd links
# where that llama-bench was built. Three alternations of the two, 5 runs each.
: > "$DIR/llama-bench-ttft.jsonl"
FLOOR_BENCH=${SAME:-$BENCH}
# shellcheck disable=SC2046  # one word per value
set -- $($PYTHON - "$DIR/shepherd-bench.jsonl" <<'PY'
import json, sys
o = json.loads(open(sys.argv[1]).readline())
fa = {"off": "0", "on": "1"}.get(o["flash_attn"], "auto")
print(fa, *(o[k][f] for k in ("at_once_turn1", "at_once_turn10", "turn1", "turn10")
            for f in ("decoded", "depth")))
PY
)
FLOOR_FA=$1; shift
for _ in 1 2 3; do
  for pair in "$1 $2" "$3 $4" "$5 $6" "$7 $8"; do
    read -r n d <<< "$pair"
    "$FLOOR_BENCH" -m "$MODEL" -t "$THREADS" -ngl "$NGL" -p "$n" -n 0 -d "$d" -fa "$FLOOR_FA" -r 5 \
      -o jsonl >> "$DIR/llama-bench-ttft.jsonl"
  done
done

$PYTHON - "$DIR/llama-bench.jsonl" "$DIR/shepherd-bench.jsonl" "$DIR/llama-bench-same.jsonl" \
  "$DIR/llama-bench-ttft.jsonl" "$([ -n "$SAME" ] && echo same || echo sdist)" <<'PY'
import json, statistics, sys
def jsonl(path):
    return [json.loads(l) for l in open(path) if l.strip()]
sdist, ours, same = jsonl(sys.argv[1]), jsonl(sys.argv[2]), jsonl(sys.argv[3])
med = statistics.median
depth = ours[0]["depth"]
# llama-bench's flash_attn: -1 auto, 0 off. shepherd reports what its auto chose ("auto"
# where llama.cpp decides, as llama-bench's auto does; "on" only when forced, which is
# what auto gives wherever the op is supported).
theirs_fa = 0 if ours[0]["flash_attn"] == "off" else -1
def ref_speeds(ref, n_prompt, n_gen, n_depth, fa):
    return [r["avg_ts"] for r in ref if (r["n_prompt"], r["n_gen"], r["n_depth"], r["flash_attn"])
            == (n_prompt, n_gen, n_depth, fa)]
tests = [("pp512", 512, 0, 0, "pp_tps"), ("tg128", 0, 128, 0, "tg_tps"),
         (f"tg128 @ d{depth}", 0, 128, depth, "tg_deep_tps")]
print(f"medians of {len(ours)} interleaved rounds (tokens/s); 'paired' is the median of")
print("the rounds' own ratios, which cancels the machine's drift between rounds; 'range'")
print("is the span of those ratios: where it holds 1.00 the programs are not told apart")
kernels = (f"llama-bench -fa {'off' if theirs_fa == 0 else 'auto'}, "
           f"shepherd's flash attention {ours[0]['flash_attn']}; physical batch: llama-bench "
           f"512, shepherd {ours[0].get('ubatch', 512)}")
sections = [(f"same attention kernels ({kernels})", sdist, theirs_fa)]
if theirs_fa != -1:
    sections.append(("each at its default (llama-bench -fa auto, which turns flash attention "
                     "on wherever it runs)", sdist, -1))
if same:
    sections.append(("same llama.cpp and kernels (llama-bench built on the llama.cpp shepherd "
                     f"links; {kernels})", same, theirs_fa))
for title, ref, fa in sections:
    print(title)
    print(f"  {'test':16} {'llama-bench':>12} {'shepherd':>10} {'ratio':>7} {'paired':>7} {'range':>11}")
    for name, n_prompt, n_gen, n_depth, key in tests:
        theirs = ref_speeds(ref, n_prompt, n_gen, n_depth, fa)
        mine = [o[key] for o in ours]
        ratios = [m / t for t, m in zip(theirs, mine)]
        paired = med(ratios)
        print(f"  {name:16} {med(theirs):12.1f} {med(mine):10.1f} {med(mine) / med(theirs):7.2f}x "
              f"{paired:6.2f}x {min(ratios):5.2f}-{max(ratios):.2f}")
for label, key in ((f"after a {ours[0]['pause_ms']} ms pause (a user)", "ttft"),
                   ("back to back (a script)", "ttft_at_once")):
    t1 = med([o[key + "_turn1_ms"] for o in ours])
    t10 = med([o[key + "_turn10_ms"] for o in ours])
    print(f"TTFT {label}: turn 1 {t1:.0f} ms, turn 10 {t10:.0f} ms, ratio {t10 / t1:.2f}")
    # The same tokens at the same depths through llama-bench's prompt test.
    floor = jsonl(sys.argv[4])
    turns = ("at_once_turn1", "at_once_turn10") if key == "ttft_at_once" else ("turn1", "turn10")
    n1, n10 = (ours[0][t] for t in turns)
    def ms(turn):
        return med([1000 * r["n_prompt"] / r["avg_ts"] for r in floor
                    if (r["n_prompt"], r["n_depth"]) == (turn["decoded"], turn["depth"])])
    f1, f10 = ms(n1), ms(n10)
    which = "on the llama.cpp shepherd links" if sys.argv[5] == "same" else "the sdist's"
    print(f"  llama-bench ({which}) decoding the same tokens: turn 1 {n1['decoded']} tokens "
          f"{f1:.0f} ms, turn 10 {n10['decoded']} tokens {n10['depth']} deep {f10:.0f} ms, "
          f"ratio {f10 / f1:.2f}; shepherd's ratio over it {(t10 / t1) / (f10 / f1):.2f}")
PY
fi
[ "$PART" = "--llama-only" ] && exit 0

# Part two: shepherd's OpenAI-compatible server against llama-server (same sdist tree),
# both with --parallel $STREAMS slots over the same total context, driven through
# /v1/chat/completions by one Python client (scripts/bench_server.py).
STREAMS=${STREAMS:-4}
SERVER_CTX=${SERVER_CTX:-4096}
SHEPHERD=${SHEPHERD:-$TARGET_DIR/release/shepherd}
if [ "$SHEPHERD" = "$TARGET_DIR/release/shepherd" ]; then
  echo "building shepherd (release)" >&2
  cargo build --release $FEATURES --quiet 2>/dev/null
fi
LOGS="$DIR/server-logs"
mkdir -p "$LOGS"
PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { $PYTHON -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits for GET /health to answer 200; false if the process died or 120 s passed.
wait_healthy() {
  local port=$1 pid=$2
  for _ in $(seq 240); do
    kill -0 "$pid" 2>/dev/null || return 1
    $PYTHON - "$port" <<'PY' && return 0
import http.client, sys
try:
    c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=2)
    c.request("GET", "/health")
    sys.exit(0 if c.getresponse().status == 200 else 1)
except OSError:
    sys.exit(1)
PY
    sleep 0.5
  done
  return 1
}

# Both servers with $STREAMS slots over a context of $1 tokens; then bench_server.py
# with the environment given after it.
server_pair() {
  local ctx=$1; shift
  PIDS=()
  LLAMA_PORT=$(free_port)
  "$SERVER" -m "$MODEL" -t "$THREADS" -tb "$THREADS" -ngl "$NGL" --parallel "$STREAMS" -c "$ctx" \
    --host 127.0.0.1 --port "$LLAMA_PORT" > "$LOGS/llama-server.log" 2>&1 &
  PIDS+=($!)
  if ! wait_healthy "$LLAMA_PORT" "${PIDS[-1]}"; then
    echo "llama-server did not start; see $LOGS/llama-server.log" >&2
    exit 1
  fi
  SHEPHERD_PORT=$(free_port)
  "$SHEPHERD" --server --host 127.0.0.1 --port "$SHEPHERD_PORT" --parallel "$STREAMS" \
    --threads "$THREADS" --gpu-layers "$NGL" --context-size "$ctx" -m "$MODEL" > "$LOGS/shepherd.log" 2>&1 &
  PIDS+=($!)
  if ! wait_healthy "$SHEPHERD_PORT" "${PIDS[-1]}"; then
    echo "shepherd's server did not start; see $LOGS/shepherd.log" >&2
    exit 1
  fi
  # An even number of rounds: each server goes first in half of them.
  env ROUNDS="${SERVER_ROUNDS:-8}" STREAMS="$STREAMS" "$@" $PYTHON scripts/bench_server.py \
    "llama-server=http://127.0.0.1:$LLAMA_PORT" "shepherd=http://127.0.0.1:$SHEPHERD_PORT"
  cleanup
}
if runs 2; then
server_pair "$SERVER_CTX"
# The same streams, each opening with one long system prompt (about 1,500 tokens: an
# agent's instructions and tools), as a front-end's requests do; each slot has room
# for it (2,048 tokens a slot).
server_pair "$(( STREAMS * 2048 ))" SYSTEM_WORDS="${SYSTEM_WORDS:-1100}" TTFT_ROUNDS=0

# Part three: the cold one-shot with the default tools, prompt cache empty and warm,
# against --notools (scripts/bench_oneshot.py).
$PYTHON scripts/bench_oneshot.py "$SHEPHERD" "$MODEL" "$THREADS" "${ONESHOT_ROUNDS:-6}"
fi

# Part four: speculative decoding (scripts/bench_spec.py): the edit and prose workloads,
# one request at a time, shepherd without and with its n-gram drafter against
# llama-server without speculation and with its draftless drafters (ngram-simple,
# ngram-mod, and ngram-mod without flash attention), each drafter at its defaults:
# shepherd's --draft-max 64, llama-server's ngram-mod 48 to 64 tokens and ngram-simple
# 48 (`--spec-draft-n-max` is for a draft model; its n-gram drafters ignore it).
# DRAFT_MAX=N caps all three at N.
PIDS=()
start_server() {  # NAME PORT COMMAND...
  local name=$1 port=$2; shift 2
  "$@" --host 127.0.0.1 --port "$port" > "$LOGS/spec-$name.log" 2>&1 &
  PIDS+=($!)
  wait_healthy "$port" "${PIDS[-1]}" || { echo "$name did not start; see $LOGS/spec-$name.log" >&2; exit 1; }
  SPEC_SERVERS+=("$name=http://127.0.0.1:$port")
}
SPEC_SERVERS=()
SHEPHERD_DRAFT=() MOD_DRAFT=() SIMPLE_DRAFT=()
if [ -n "${DRAFT_MAX:-}" ]; then
  SHEPHERD_DRAFT=(--draft-max "$DRAFT_MAX")
  MOD_DRAFT=(--spec-ngram-mod-n-max "$DRAFT_MAX" --spec-ngram-mod-n-min "$(( DRAFT_MAX < 48 ? DRAFT_MAX : 48 ))")
  SIMPLE_DRAFT=(--spec-ngram-simple-size-m "$DRAFT_MAX")
fi
if runs 4; then
SHEPHERD_ARGS=(--server --threads "$THREADS" --gpu-layers "$NGL" --context-size "$SERVER_CTX" -m "$MODEL" --no-prompt-cache)
LLAMA_ARGS=(-m "$MODEL" -t "$THREADS" -tb "$THREADS" -ngl "$NGL" --parallel 1 -c "$SERVER_CTX")
start_server shepherd-off "$(free_port)" "$SHEPHERD" "${SHEPHERD_ARGS[@]}" --spec off
start_server shepherd-ngram "$(free_port)" "$SHEPHERD" "${SHEPHERD_ARGS[@]}" --spec ngram "${SHEPHERD_DRAFT[@]}"
start_server llama-server "$(free_port)" "$SERVER" "${LLAMA_ARGS[@]}"
start_server llama-server-ngram-simple "$(free_port)" "$SERVER" "${LLAMA_ARGS[@]}" \
  --spec-type ngram-simple "${SIMPLE_DRAFT[@]}"
start_server llama-server-ngram-mod "$(free_port)" "$SERVER" "${LLAMA_ARGS[@]}" \
  --spec-type ngram-mod "${MOD_DRAFT[@]}"
# llama-server's flash attention is its auto (on, the CPU included); shepherd's is off
# on the CPU for small heads (docs/LLAMA.md). Its best drafter without it too, so that
# the comparison holds the attention kernels equal as well.
start_server llama-server-ngram-mod-fa-off "$(free_port)" "$SERVER" "${LLAMA_ARGS[@]}" \
  -fa off --spec-type ngram-mod "${MOD_DRAFT[@]}"
ROUNDS=${SPEC_ROUNDS:-6} $PYTHON scripts/bench_spec.py "${SPEC_SERVERS[@]}"
cleanup
fi

# Part five: the agent as it runs (scripts/bench_agent.py): every request carries the
# agent's own system prompt and tools (recorded from `shepherd -e`), both servers render
# them with the same template (Qwen2.5's, from the sdist: Hermes-style `<tool_call>`
# markup), llama-server with --jinja; a long free answer with the tools offered and
# without, a long `write` call, and a repeating edit turn, speculation off and on.
# The model's own weights with that template, where the marker is text of several
# tokens; and for SmolLM2, also its shape with random weights and the marker as one
# control token (scripts/synthetic_gguf.py), where llama-server triggers its grammar on
# the token itself, its fastest path.
# Only with the whole bench or --agent-only.
if runs 5; then
TEMPLATE="$(PYTHON=$PYTHON scripts/llama-sdist.sh "$DIR")/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja"
AGENT_REQUEST="$DIR/agent-request.json"
$PYTHON scripts/bench_agent.py --record "$SHEPHERD" "$AGENT_REQUEST"
agent_servers() {  # MODEL: the four servers, then bench_agent.py on them
  local model=$1
  PIDS=() SPEC_SERVERS=()
  local shepherd_args=(--server --threads "$THREADS" --gpu-layers "$NGL" --context-size "$SERVER_CTX" -m "$model"
    --no-prompt-cache --chat-template-file "$TEMPLATE")
  local llama_args=(-m "$model" -t "$THREADS" -tb "$THREADS" -ngl "$NGL" --parallel 1 -c "$SERVER_CTX" --jinja
    --chat-template-file "$TEMPLATE")
  start_server shepherd "$(free_port)" "$SHEPHERD" "${shepherd_args[@]}" --spec off
  start_server llama-server "$(free_port)" "$SERVER" "${llama_args[@]}"
  start_server shepherd-ngram "$(free_port)" "$SHEPHERD" "${shepherd_args[@]}" --spec ngram "${SHEPHERD_DRAFT[@]}"
  start_server llama-server-ngram-mod "$(free_port)" "$SERVER" "${llama_args[@]}" --spec-type ngram-mod "${MOD_DRAFT[@]}"
  echo "agent workloads on $(basename "$model")" >&2
  ROUNDS=${AGENT_ROUNDS:-3} $PYTHON scripts/bench_agent.py "$AGENT_REQUEST" "$model" "${SPEC_SERVERS[@]}"
  cleanup
}
agent_servers "$MODEL"
# AGENT_SYNTHETIC=0 leaves the random-weight shape out.
case ${AGENT_SYNTHETIC:-1}:$(basename "$MODEL") in
  1:SmolLM2*)
    SYNTHETIC="$DIR/smollm2-shape-qwen-tools.gguf"
    [ -f "$SYNTHETIC" ] || $PYTHON scripts/synthetic_gguf.py --like smollm2-135m --tokenizer-from "$MODEL" \
      --special '<tool_call>' --special '</tool_call>' --chat-template "$TEMPLATE" "$SYNTHETIC" >&2
    agent_servers "$SYNTHETIC"
    ;;
esac
fi

# Part six: image prefill (scripts/bench_image.py): a vision model (a text model and
# its projector, `--mmproj`) in both servers with the same threads and context, the
# same chat request with one picture, a new one each round and then the same again.
# For SmolLM2, its shape with random weights and SmolVLM's image markers and a random
# idefics3 projector (SmolVLM's); for Gemma 3 270M, the model itself and a random
# gemma3 projector (scripts/synthetic_gguf.py). Written once into $DIR/vision, where
# no other model lies: shepherd loads an mmproj-*.gguf it finds beside a model.
VISION="$DIR/vision"
case $(basename "$MODEL") in
  SmolLM2*) VISION_MODEL="$VISION/smollm2-shape-vision.gguf" PROJECTOR=idefics3 ;;
  gemma-3*) VISION_MODEL="$MODEL" PROJECTOR=gemma3 ;;
  *) VISION_MODEL="" PROJECTOR="" ;;
esac
if runs 6 && [ -n "$PROJECTOR" ]; then
  mkdir -p "$VISION"
  MMPROJ="$VISION/mmproj-$PROJECTOR.gguf"
  [ -f "$MMPROJ" ] || $PYTHON scripts/synthetic_gguf.py --projector "$PROJECTOR" "$MMPROJ" >&2
  [ -f "$VISION_MODEL" ] || $PYTHON scripts/synthetic_gguf.py --like smollm2-135m --tokenizer-from "$MODEL" \
    --special '<fake_token_around_image>' --special '<global-img>' "$VISION_MODEL" >&2
  PIDS=() SPEC_SERVERS=()
  VISION_LLAMA=(-m "$VISION_MODEL" --mmproj "$MMPROJ" -t "$THREADS" -tb "$THREADS" -ngl "$NGL" --parallel 1
    -c "$SERVER_CTX")
  start_server llama-server "$(free_port)" "$SERVER" "${VISION_LLAMA[@]}"
  # llama-server's flash attention is its auto (on, the CPU included); shepherd's text
  # model's is off on the CPU for small heads: llama-server without it as well, so
  # that one row holds the text model's kernels equal (-fa off turns it off in
  # llama-server's projector too, where shepherd leaves the projector at libmtmd's auto).
  start_server llama-server-fa-off "$(free_port)" "$SERVER" "${VISION_LLAMA[@]}" -fa off
  start_server shepherd "$(free_port)" "$SHEPHERD" --server -m "$VISION_MODEL" --mmproj "$MMPROJ" \
    --threads "$THREADS" --gpu-layers "$NGL" --context-size "$SERVER_CTX" --no-prompt-cache
  echo "image prefill on $(basename "$VISION_MODEL") with a random $PROJECTOR projector" >&2
  ROUNDS=${IMAGE_ROUNDS:-8} $PYTHON scripts/bench_image.py "${SPEC_SERVERS[@]}"
  cleanup
fi

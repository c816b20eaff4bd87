#!/usr/bin/env bash
# The GPU check: shepherd's CUDA build on a GPU box beside llama.cpp's own tools, in one
# call of the borrowed GPU machine (docs/LLAMA.md, "GPU"; INSTALL.md, "CUDA").
#
#   scripts/gpu-check.sh [CARRY]             on the GPU box; results under $OUT
#   scripts/gpu-check.sh --dry-run [CARRY]   here, without a GPU: the same steps on the
#                                            CPU, small shapes, to debug before the GPU
#
# CARRY (default target/gpu-carry, made by `make gpu-carry`) holds what travels:
#   shepherd.xz       `make CUDA=1 static CUDA_CUBLAS=dlopen CUDA_ARCHS=90-real`, which
#                     opens the box's own libcublas.so.13 (or .12) at run time
#   llama-src.tar.xz  the llama.cpp tree of the llama-cpp-python sdist `make bench` uses
#                     (backends other than CPU and CUDA, models and docs left out)
#   crate-src.tar.xz  the llama.cpp tree shepherd links (llama-cpp-sys-2's), for
#                     LLAMA_TREE=crate
#   tokenizer.gguf    SmolLM2's tokenizer, for the random-weight models
#   model.gguf        optional: the real SmolLM2, for a one-shot that answers sensibly
#   qwen2.5.jinja     Qwen2.5's chat template (the sdist's), for the agent's workloads
#   crate-cmake.txt   the CMake options of the crate's CUDA build, for LLAMA_OPTS=crate
#
# What it does, each step timed and skipped when the time left (BUDGET seconds from
# the start, default 540) cannot hold it, everything written under $OUT:
#   1. the device (nvidia-smi), shepherd --version (the GPU and the cuBLAS it found);
#   2. llama-bench and llama-server built from the carried tree for the GPU's
#      architecture (in the background, while 3 and 4 run);
#   3. random-weight GGUFs written by scripts/synthetic_gguf.py: the SmolLM2 shape
#      and Llama-3.1-8B's (Q4_0, 4.5 GB; BIG_SHAPE picks another);
#   4. a one-shot answer on the GPU (the real SmolLM2 if carried, else the synthetic);
#   5. shepherd bench against llama-bench on the 8B shape: pp512, tg128 and tg128 at
#      depth 4096, flash attention at each side's default and forced on;
#   6. shepherd --server against llama-server on the 8B shape: one stream, 4 and 16
#      concurrent streams (scripts/bench_server.py), both with as many slots;
#   7. the agent's workloads (scripts/bench_agent.py) on the 8B shape with the tools
#      offered, Qwen2.5's template and its `<tool_call>` token (carried qwen2.5.jinja).
# 5 and 6 run in the order of STEPS (default: bench-default servers-16 bench-on
# servers-4), so that what is left out when time runs short is the least wanted.
# On the H200 of 2026-11-26 the whole run took 353 s, 285 of them the llama.cpp build.
# The files it leaves: summary.md (the ratios), results.jsonl (every measurement),
# log.txt (every step's output), servers.txt. Work files stay in $WORK (default
# /tmp/gpu-check), which a second call on a still-warm machine reuses: the llama.cpp
# build and the models are not made twice.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=
[ "${1:-}" = "--dry-run" ] && { DRY=1; shift; }
CARRY=$(realpath "${1:-target/gpu-carry}")
OUT=${OUT:?set OUT to the directory for the results}
BUDGET=${BUDGET:-540}
WORK=${WORK:-/tmp/gpu-check}
PYTHON=${PYTHON:-python3}
START=$(date +%s)
mkdir -p "$OUT" "$WORK"
LOG=$OUT/log.txt
RESULTS=$OUT/results.jsonl
: >"$LOG"
: >"$RESULTS"

left() { echo $((BUDGET - ($(date +%s) - START))); }
say() { echo "[$(($(date +%s) - START))s] $*" | tee -a "$LOG" >&2; }
# step NAME SECONDS: false (and says so) when fewer than SECONDS are left.
step() {
    if (($(left) < $2)); then
        say "SKIPPED $1: $(left) s left, it needs about $2"
        return 1
    fi
    say "== $1"
}
record() { echo "$1" >>"$RESULTS"; }

# ---------------------------------------------------------------- 1. device, binary
if [ -z "$DRY" ] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader >"$WORK/gpu.txt" 2>&1
    say "device: $(head -1 "$WORK/gpu.txt")"
    CC=$(head -1 "$WORK/gpu.txt" | awk -F', ' '{print $4}' | tr -d .)
    ARCH=${CUDA_ARCH:-${CC:-90}-real}
    NGL=99
else
    DRY=1 NGL=0 ARCH=
    say "device: none (dry run on the CPU)"
fi
# CPU threads: each program's own default on the GPU (shepherd's is 2 with every layer
# there, llama.cpp's one per core: docs/LLAMA.md, "CPU threads decide the rest");
# THREADS=N gives both N. The dry run gives both every core.
THREADS=${THREADS:-$([ -n "$DRY" ] && nproc)}
T_BENCH=() T_SHEPHERD=() T_SERVER=()
if [ -n "$THREADS" ]; then
    T_BENCH=(-t "$THREADS") T_SHEPHERD=(--threads "$THREADS") T_SERVER=(-t "$THREADS" -tb "$THREADS")
fi

SHEPHERD=$WORK/shepherd
if [ ! -x "$SHEPHERD" ] || [ "$CARRY/shepherd.xz" -nt "$SHEPHERD" ]; then
    if command -v xz >/dev/null; then xz -dc "$CARRY/shepherd.xz" >"$SHEPHERD.tmp"; else
        $PYTHON -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' \
            "$CARRY/shepherd.xz" "$SHEPHERD.tmp"; fi && chmod +x "$SHEPHERD.tmp" && mv "$SHEPHERD.tmp" "$SHEPHERD"
fi
# The box's cuBLAS: on the loader's path, else where CUDA toolkits and NVIDIA's wheels
# (PyTorch's) put it.
if ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.1[23] '; then
    for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
        $($PYTHON -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null | xargs -n1 -I{} sh -c 'ls -d {}/nvidia/*/lib 2>/dev/null'); do
        if ls "$dir"/libcublas.so.1[23] >/dev/null 2>&1; then
            export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            break
        fi
    done
fi
"$SHEPHERD" --version >"$WORK/version.txt" 2>&1
say "shepherd --version:"
tee -a "$LOG" <"$WORK/version.txt" >&2

# ---------------------------------------------------------------- 2. llama.cpp tools
# LLAMA_TREE=crate: llama-bench built instead against the llama.cpp tree shepherd links
# (crate-src.tar.xz, llama-cpp-sys-2's; the sdist's tools/llama-bench on top, as
# scripts/bench.sh's same-version build does), so that the ratio has no version
# difference in it; no llama-server then.
# LLAMA_OPTS=crate: the tree built with the CMake options of shepherd's own CUDA build
# (crate-cmake.txt: its GGML_* settings and compiler flags, as llama-cpp-sys-2 set
# them) instead of llama.cpp's defaults. The four builds (sdist or crate tree, each
# with either options) tell a version difference from a build-option one:
#   LLAMA_TREE=sdist LLAMA_OPTS=crate scripts/gpu-check.sh   (then LLAMA_TREE=crate)
LLAMA_TREE=${LLAMA_TREE:-sdist}
LLAMA_OPTS=${LLAMA_OPTS:-default}
LLAMA=$WORK/llama-build-$LLAMA_TREE${ARCH:+-$ARCH}$([ "$LLAMA_OPTS" = crate ] && echo -crate-opts)
# The crate build's options, one -D each; the architecture stays this GPU's.
CRATE_OPTS=()
if [ "$LLAMA_OPTS" = crate ]; then
    if [ -s "$CARRY/crate-cmake.txt" ]; then
        while IFS= read -r line; do
            case $line in CMAKE_CUDA_ARCHITECTURES:* | GGML_NATIVE:* | GGML_CUDA_NCCL:*) continue ;; esac
            CRATE_OPTS+=("-D${line%%:*}=${line#*=}")
        done <"$CARRY/crate-cmake.txt"
        say "llama.cpp with the crate build's options: ${CRATE_OPTS[*]}"
    else
        say "LLAMA_OPTS=crate but no crate-cmake.txt in $CARRY (make gpu-carry writes it): llama.cpp's defaults"
    fi
fi
unpack() { # TARBALL DIR
    if [ ! -f "$2/.unpacked" ] || [ "$1" -nt "$2/.unpacked" ]; then
        rm -rf "$2" && mkdir -p "$2" && tar -xJf "$1" -C "$2" --strip-components=1 && touch "$2/.unpacked"
    fi
}
build_llama() {
    local src=$WORK/llama-src targets=(llama-bench llama-server)
    unpack "$CARRY/llama-src.tar.xz" "$src" || return 1
    if [ "$LLAMA_TREE" = crate ]; then
        unpack "$CARRY/crate-src.tar.xz" "$WORK/crate-src" || return 1
        src=$WORK/same-src targets=(llama-bench)
        mkdir -p "$src"
        printf '%s\n' 'cmake_minimum_required(VERSION 3.14)' 'project(llama-bench-same-version C CXX)' \
            "add_subdirectory(\"$WORK/crate-src\" llama.cpp)" \
            "add_subdirectory(\"$WORK/llama-src/tools/llama-bench\" llama-bench)" >"$src/CMakeLists.txt"
    fi
    local gen=() cuda=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    local c cxx nvcc
    c=$(command -v gcc || command -v cc || command -v clang) cxx=$(command -v g++ || command -v c++ || command -v clang++)
    nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
    gen+=(${c:+-DCMAKE_C_COMPILER=$c} ${cxx:+-DCMAKE_CXX_COMPILER=$cxx} ${nvcc:+-DCMAKE_CUDA_COMPILER=$nvcc})
    echo "compilers: C $c, C++ $cxx, CUDA $nvcc; cmake $(cmake --version | head -1)"
    [ -n "$ARCH" ] && cuda=(-DGGML_CUDA=ON -DGGML_CUDA_NCCL=OFF "-DCMAKE_CUDA_ARCHITECTURES=$ARCH")
    cmake -S "$src" -B "$LLAMA" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DGGML_OPENMP=OFF \
        -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS="$([ "$LLAMA_TREE" = crate ] && echo OFF || echo ON)" \
        -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$LLAMA/bin" "${cuda[@]}" "${CRATE_OPTS[@]}" &&
        cmake --build "$LLAMA" -j"$(nproc)" --target "${targets[@]}"
}
if [ -x "$LLAMA/bin/llama-bench" ] && { [ "$LLAMA_TREE" = crate ] || [ -x "$LLAMA/bin/llama-server" ]; }; then
    say "llama.cpp: built already in $LLAMA"
    BUILD_PID=
else
    say "llama.cpp ($LLAMA_TREE tree): building llama-bench${ARCH:+ for $ARCH} (background)"
    build_started=$(date +%s)
    (build_llama >"$WORK/llama-build.log" 2>&1; echo $? >"$WORK/llama-build.rc") &
    BUILD_PID=$!
fi

# ---------------------------------------------------------------- 3. models
SMALL=$WORK/smollm2-135m.gguf
BIG_SHAPE=${BIG_SHAPE:-$([ -n "$DRY" ] && echo smollm2-135m || echo llama3.1-8b)}
BIG=$WORK/$BIG_SHAPE.gguf
for shape in smollm2-135m "$BIG_SHAPE"; do
    [ -s "$WORK/$shape.gguf" ] && continue
    step "write the $shape model" 20 || continue
    $PYTHON scripts/synthetic_gguf.py --like "$shape" --tokenizer-from "$CARRY/tokenizer.gguf" \
        "$WORK/$shape.gguf" 2>&1 | tee -a "$LOG" >&2
done

# ---------------------------------------------------------------- 4. one-shot
ONESHOT_MODEL=$SMALL
[ -s "$CARRY/model.gguf" ] && ONESHOT_MODEL=$CARRY/model.gguf
if step "one-shot on $(basename "$ONESHOT_MODEL")" 30; then
    t0=$(date +%s%N)
    answer=$("$SHEPHERD" -m "$ONESHOT_MODEL" --gpu-layers "$NGL" --temperature 0 --max-tokens 32 --notools \
        -e "What is the capital of France?" </dev/null 2>"$WORK/oneshot.err")
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    secs=$((ms / 1000)).$(printf %03d $((ms % 1000)))
    say "one-shot rc=$rc in ${secs}s: $(echo "$answer" | head -c 300)"
    sed 's/^/  stderr: /' "$WORK/oneshot.err" | head -20 | tee -a "$LOG" >&2
    record "$($PYTHON -c 'import json,sys; print(json.dumps({"kind":"oneshot","model":sys.argv[1],"rc":int(sys.argv[2]),"seconds":float(sys.argv[3]),"answer":sys.argv[4]}))' \
        "$(basename "$ONESHOT_MODEL")" "$rc" "$secs" "$answer")"
fi

if [ -n "${BUILD_PID:-}" ]; then
    say "waiting for the llama.cpp build"
    while kill -0 "$BUILD_PID" 2>/dev/null && (($(left) > 0)); do sleep 2; done
    if kill -0 "$BUILD_PID" 2>/dev/null; then
        say "the llama.cpp build did not finish within the budget"
        kill "$BUILD_PID" 2>/dev/null
    fi
    say "llama.cpp build: rc $(cat "$WORK/llama-build.rc" 2>/dev/null || echo none) in $(($(date +%s) - build_started)) s"
    tail -5 "$WORK/llama-build.log" | tee -a "$LOG" >&2
fi
BENCH=$LLAMA/bin/llama-bench
SERVER=$LLAMA/bin/llama-server

# ---------------------------------------------------------------- 5. bench
if [ -n "$DRY" ]; then P=64 N=16 DEPTH=256 REPS=2; else P=512 N=128 DEPTH=4096 REPS=3; fi
# one_bench SIDE FA: pp and tg, then tg at DEPTH, as jsonl lines tagged with side and fa.
one_bench() {
    local side=$1 fa=$2 lines
    if [ "$side" = llama-bench ]; then
        local fa_args=()
        [ "$fa" = on ] && fa_args=(-fa on)
        lines=$({ "$BENCH" -m "$BIG" -ngl "$NGL" "${T_BENCH[@]}" -p "$P" -n "$N" -r "$REPS" "${fa_args[@]}" -o jsonl &&
            "$BENCH" -m "$BIG" -ngl "$NGL" "${T_BENCH[@]}" -p 0 -n "$N" -d "$DEPTH" -r "$REPS" "${fa_args[@]}" -o jsonl; } 2>>"$LOG")
    else
        local fa_args=()
        [ "$fa" = on ] && fa_args=(--flash-attn=on)
        lines=$({ "$SHEPHERD" -m "$BIG" --gpu-layers "$NGL" "${T_SHEPHERD[@]}" "${fa_args[@]}" bench -p "$P" -n "$N" -r "$REPS" -o jsonl &&
            "$SHEPHERD" -m "$BIG" --gpu-layers "$NGL" "${T_SHEPHERD[@]}" "${fa_args[@]}" bench -p 0 -n "$N" -d "$DEPTH" -r "$REPS" -o jsonl; } 2>>"$LOG")
    fi
    echo "$lines" | while read -r line; do
        [ -n "$line" ] && record "{\"kind\":\"bench\",\"side\":\"$side\",\"tree\":\"$LLAMA_TREE\",\"fa\":\"$fa\",\"line\":$line}"
    done
    say "$side fa=$fa: $(echo "$lines" | $PYTHON -c 'import json,sys; print(", ".join("%s%s %.1f t/s" % ("pp%d" % r["n_prompt"] if r["n_prompt"] else "tg%d" % r["n_gen"], " @ d%d" % r["n_depth"] if r.get("n_depth") else "", r["avg_ts"]) for r in map(json.loads, filter(None, sys.stdin.read().splitlines()))))' 2>&1)"
}
bench_pair() { # FA
    if [ -x "$BENCH" ] && [ -s "$BIG" ]; then
        for side in llama-bench shepherd; do
            step "$side, flash attention $1" 45 && one_bench "$side" "$1"
        done
    else
        say "SKIPPED the bench: no llama-bench ($BENCH) or no model ($BIG)"
    fi
}

# ---------------------------------------------------------------- 6. servers
free_port() { $PYTHON -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_healthy() { # PORT PID
    for _ in $(seq 240); do
        kill -0 "$2" 2>/dev/null || return 1
        $PYTHON -c 'import http.client,sys; c=http.client.HTTPConnection("127.0.0.1",int(sys.argv[1]),timeout=2); c.request("GET","/health"); sys.exit(c.getresponse().status!=200)' "$1" 2>/dev/null && return 0
        sleep 0.5
    done
    return 1
}
if [ -n "$DRY" ]; then MAX_TOKENS=16; SROUNDS=1; else MAX_TOKENS=128; SROUNDS=3; fi
: >"$OUT/servers.txt"
servers() { # STREAMS
    local streams=$1
    [ -x "$SERVER" ] && [ -s "$BIG" ] || { say "SKIPPED the servers: no llama-server or no model"; return; }
    step "servers, $streams streams" 60 || return
    ctx=$((streams * 1024))
    lport=$(free_port)
    "$SERVER" -m "$BIG" -ngl "$NGL" "${T_SERVER[@]}" --parallel "$streams" -c "$ctx" --host 127.0.0.1 --port "$lport" \
        >"$WORK/llama-server.log" 2>&1 &
    lpid=$!
    sport=$(free_port)
    "$SHEPHERD" --server --host 127.0.0.1 --port "$sport" --parallel "$streams" "${T_SHEPHERD[@]}" \
        --gpu-layers "$NGL" --context-size "$ctx" -m "$BIG" --no-prompt-cache >"$WORK/shepherd-server.log" 2>&1 &
    spid=$!
    if wait_healthy "$lport" "$lpid" && wait_healthy "$sport" "$spid"; then
        ROUNDS=$SROUNDS STREAMS=$streams MAX_TOKENS=$MAX_TOKENS TTFT_ROUNDS=0 RESULTS_JSON="$WORK/servers-$streams.json" \
            $PYTHON scripts/bench_server.py "llama-server=http://127.0.0.1:$lport" "shepherd=http://127.0.0.1:$sport" \
            2>&1 | tee -a "$OUT/servers.txt" "$LOG" >&2
        [ -s "$WORK/servers-$streams.json" ] && record "{\"kind\":\"servers\",\"streams\":$streams,\"result\":$(cat "$WORK/servers-$streams.json")}"
    else
        say "a server did not come up: llama-server $(tail -3 "$WORK/llama-server.log" | tr '\n' ' ') / shepherd $(tail -3 "$WORK/shepherd-server.log" | tr '\n' ' ')"
    fi
    kill "$lpid" "$spid" 2>/dev/null
    wait "$lpid" "$spid" 2>/dev/null
}

# ---------------------------------------------------------------- 7. the agent
# The agent's own request (its system prompt and tools, recorded from `shepherd -e`)
# on both servers, Qwen2.5's template on the big shape with `<tool_call>` as one
# control token: a long answer with the tools offered and without, a long `write`
# call, a repeating edit turn (scripts/bench_agent.py, one round).
agent() {
    [ -x "$SERVER" ] && [ -s "$CARRY/qwen2.5.jinja" ] || { say "SKIPPED the agent: no llama-server or no qwen2.5.jinja"; return; }
    step "the agent's workloads" 120 || return
    local model=$WORK/$BIG_SHAPE-tools.gguf
    [ -s "$model" ] || $PYTHON scripts/synthetic_gguf.py --like "$BIG_SHAPE" --tokenizer-from "$CARRY/tokenizer.gguf" \
        --special '<tool_call>' --special '</tool_call>' --chat-template "$CARRY/qwen2.5.jinja" "$model" 2>&1 | tee -a "$LOG" >&2
    $PYTHON scripts/bench_agent.py --record "$SHEPHERD" "$WORK/agent-request.json" 2>&1 | tee -a "$LOG" >&2
    local ctx=4096 lport sport lpid spid
    lport=$(free_port)
    "$SERVER" -m "$model" -ngl "$NGL" "${T_SERVER[@]}" --parallel 1 -c "$ctx" --jinja --host 127.0.0.1 --port "$lport" \
        >"$WORK/llama-server-agent.log" 2>&1 &
    lpid=$!
    sport=$(free_port)
    "$SHEPHERD" --server --host 127.0.0.1 --port "$sport" "${T_SHEPHERD[@]}" --gpu-layers "$NGL" --context-size "$ctx" \
        -m "$model" --no-prompt-cache >"$WORK/shepherd-agent.log" 2>&1 &
    spid=$!
    if wait_healthy "$lport" "$lpid" && wait_healthy "$sport" "$spid"; then
        ROUNDS=1 $([ -n "$DRY" ] && echo "ANSWER_TOKENS=64 WRITE_TOKENS=64 REPEAT_TOKENS=64") \
            $PYTHON scripts/bench_agent.py "$WORK/agent-request.json" "$model" "llama-server=http://127.0.0.1:$lport" \
            "shepherd=http://127.0.0.1:$sport" 2>&1 | tee -a "$OUT/agent.txt" "$LOG" >&2
    else
        say "a server did not come up: llama-server $(tail -3 "$WORK/llama-server-agent.log" | tr '\n' ' ') / shepherd $(tail -3 "$WORK/shepherd-agent.log" | tr '\n' ' ')"
    fi
    kill "$lpid" "$spid" 2>/dev/null
    wait "$lpid" "$spid" 2>/dev/null
}

# The measurements, most wanted first (STEPS picks some: a second call on a warm
# machine runs what the first had no time for).
STEPS=${STEPS:-$([ -n "$DRY" ] && echo "bench-default servers-2 agent bench-on" || echo "bench-default servers-16 agent bench-on servers-4")}
for s in $STEPS; do
    case $s in
        bench-*) bench_pair "${s#bench-}" ;;
        servers-*) servers "${s#servers-}" ;;
        agent) agent ;;
        *) say "unknown step $s" ;;
    esac
done

# ---------------------------------------------------------------- summary
$PYTHON scripts/gpu_summary.py "$RESULTS" "$WORK/gpu.txt" "$WORK/version.txt" >"$OUT/summary.md" 2>>"$LOG"
cat "$OUT/summary.md" >&2
say "done in $(($(date +%s) - START)) s"

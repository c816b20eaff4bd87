#!/usr/bin/env bash
# Checks the release binary and its packaging; `make static` and `make check-static` run it.
#
#   release-check.sh linkage BIN static|cuda|cuda-dlopen|cuda-dynamic MAX_MB
#       static: `file` says static and nothing is NEEDED (the silent failure of a
#       +crt-static build without static-stdcxx is a PIE that still needs
#       libstdc++.so and has no interpreter); at most MAX_MB (10^6 bytes).
#       cuda (`make CUDA=1 static`): only glibc is NEEDED, not even the driver
#       (libcuda.so.1 is opened at run time), and CUDA code is linked in.
#       cuda-dlopen (`make CUDA=1 static CUDA_CUBLAS=dlopen`): the same, and cuBLAS
#       is opened at run time too (ffi/cublas_open.c is in).
#       cuda-dynamic (`make CUDA=1`): libcudart and libcublas are NEEDED, and
#       otherwise only glibc and the C++ runtime.
#   release-check.sh cuda-cpu BIN MODEL
#       a CUDA build run on this machine (check_cuda_cpu below).
#   release-check.sh all BIN MODEL UNIT SAMPLE_CONFIG MAX_MB
#       linkage as above, then: --version and a one-shot chat inside an empty root
#       (the binary and the model only); the systemd unit passes `systemd-analyze
#       verify` and its hardening score; the unit's ExecStart command line, run as an
#       unprivileged user with no passwd entry (as DynamicUser= gives it) in a network
#       namespace of its own, serves /health and /status on loopback and nowhere else.
#
# Every check says what it proved; the first failure stops with exit status 1.
set -euo pipefail

# A uid/gid from systemd's DynamicUser= range: unprivileged and owning nothing.
SERVICE_UID=61184
DEADLINE_S=120

fail() {
    echo "release-check: FAIL: $*" >&2
    exit 1
}
ok() { echo "release-check: ok: $*"; }

check_linkage() { # BIN KIND MAX_MB
    local bin=$1 kind=$2 max_mb=$3 desc needed bytes
    desc=$(file -b "$bin")
    needed=$(readelf -d "$bin" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p')
    bytes=$(stat -c %s "$bin")
    case $kind in
    static)
        [[ $desc == *"static-pie linked"* || $desc == *"statically linked"* ]] ||
            fail "$bin is not static: $desc"
        [[ -z $needed ]] || fail "$bin still needs shared libraries: $(echo "$needed" | tr '\n' ' ')"
        ((bytes <= max_mb * 1000 * 1000)) || fail "$bin is $bytes bytes, more than $max_mb MB"
        ok "$bin is static ($(echo "$desc" | grep -o 'static[-a-z]* linked')), $bytes bytes stripped"
        ;;
    cuda | cuda-dlopen | cuda-dynamic)
        local glibc='libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|ld-linux-x86-64\.so\.2|libgcc_s\.so\.1'
        local allowed=$glibc extra
        [[ $kind == cuda-dynamic ]] && allowed="$glibc|libstdc\+\+\.so\.6|libcudart\.so\.[0-9]+|libcublas\.so\.[0-9]+|libcublasLt\.so\.[0-9]+"
        extra=$(echo "$needed" | grep -vxE "$allowed" || true)
        [[ -z $extra ]] || fail "$bin needs more than it should ($kind): $(echo "$extra" | tr '\n' ' ')"
        # The CUDA kernels are in (captured first: grep -q would stop the pipe early,
        # which pipefail reports as a failure).
        local sections
        sections=$(readelf -SW "$bin")
        grep -q ' \.nv_fatbin ' <<<"$sections" || fail "$bin has no CUDA kernels (.nv_fatbin)"
        if [[ $kind == cuda ]]; then
            ok "$bin needs only glibc (the driver is opened at run time), cudart and cuBLAS linked in, $bytes bytes"
        elif [[ $kind == cuda-dlopen ]]; then
            grep -q 'libcublas\.so\.13' "$bin" || fail "$bin does not open cuBLAS at run time (no libcublas.so.13 in it)"
            ok "$bin needs only glibc (the driver and cuBLAS are opened at run time), cudart linked in, $bytes bytes"
        else
            grep -qx 'libcudart\.so\.[0-9]*' <<<"$needed" && grep -qx 'libcublas\.so\.[0-9]*' <<<"$needed" ||
                fail "$bin does not link libcudart/libcublas dynamically: $(echo "$needed" | tr '\n' ' ')"
            ok "$bin links $(grep -E 'cudart|cublas' <<<"$needed" | tr '\n' ' ')dynamically (the driver is opened at run time), $bytes bytes"
        fi
        ;;
    *) fail "unknown linkage kind $kind" ;;
    esac
}

# The binary and the model alone in a directory used as /: no /lib, /etc, /dev, /proc.
check_empty_root() { # BIN MODEL TMP
    local bin=$1 model=$2 tmp=$3 root out
    root=$tmp/root
    # env -i clears PATH too, so chroot goes by its full path.
    local chroot
    chroot=$(command -v chroot) || fail "chroot is missing"
    mkdir -p "$root/.cache/shepherd/models"
    install -m 0755 "$bin" "$root/shepherd"
    # HOME=/ puts the embedded default model at /.cache/shepherd/models/.
    ln "$model" "$root/.cache/shepherd/models/" 2>/dev/null || cp "$model" "$root/.cache/shepherd/models/"
    [[ $(find "$root" -type f | wc -l) == 2 ]] || fail "the empty root holds more than the binary and the model"

    out=$(env -i HOME=/ "$chroot" "$root" /shepherd --version </dev/null 2>"$tmp/version.err") ||
        fail "--version in the empty root: $(cat "$tmp/version.err")"
    [[ $out == "shepherd "*"static"* && $out == *"llama.cpp: ggml "* ]] || fail "unexpected --version: $out"
    ok "--version in an empty root: $(head -1 <<<"$out")"
    # For any AVX2 CPU, never for the build machine's (.cargo/config.toml builds native).
    [[ $out == *"AVX2 = 1"* && $out != *"AVX512"* && $out != *"AVX_VNNI"* ]] ||
        fail "the release must be built for any AVX2 CPU, not this one: $(grep '^CPU' <<<"$out")"
    ok "kernels for any AVX2 CPU: $(grep -o 'AVX2 = 1' <<<"$out")"

    out=$(env -i HOME=/ "$chroot" "$root" /shepherd -e "What is the capital of France?" --temperature 0 \
        </dev/null 2>"$tmp/chat.err") || fail "one-shot chat in the empty root: $(cat "$tmp/chat.err")"
    grep -qi paris <<<"$out" || fail "the one-shot chat did not answer Paris: $out"
    ok "one-shot chat on the embedded model in an empty root: $(tr '\n' ' ' <<<"$out" | cut -c1-100)"
}

# `systemd-analyze verify` checks the unit's syntax, directives and that ExecStart's
# binary exists and is executable; it needs no running systemd. Hence a copy of the
# unit with the install path replaced by the binary under test.
check_unit_file() { # BIN UNIT TMP
    local bin=$1 unit=$2 tmp=$3 copy out
    copy=$tmp/$(basename "$unit")
    sed "s#/usr/local/bin/shepherd#$bin#g" "$unit" >"$copy"
    out=$(systemd-analyze verify "$copy" 2>&1) || fail "systemd-analyze verify: $out"
    if grep -F "$(basename "$unit")" <<<"$out"; then fail "systemd-analyze verify complained about the unit"; fi
    ok "systemd-analyze verify accepts $(basename "$unit")"
    # Exposure is reported as 0.0-10.0; --threshold takes tenths. 2.9 is the top of "OK".
    out=$(systemd-analyze security --offline=yes --threshold=29 "$copy" 2>&1) ||
        fail "the unit's hardening is weaker than it should be: $(tail -1 <<<"$out")"
    ok "systemd-analyze security: $(grep -o 'exposure level.*' <<<"$out")"
}

# Runs the unit's ExecStart command line as systemd would (its Environment=HOME and
# WorkingDirectory=, an unprivileged uid/gid with no supplementary groups and no
# capabilities), with the sample config as that user's config.
check_unit_serves() { # BIN MODEL UNIT SAMPLE_CONFIG TMP
    local bin=$1 model=$2 unit=$3 sample=$4 tmp=$5 cmdline home workdir state
    cmdline=$(sed -n 's/^ExecStart=//p' "$unit" | head -1)
    home=$(sed -n 's/^Environment=HOME=//p' "$unit" | head -1)
    workdir=$(sed -n 's/^WorkingDirectory=//p' "$unit" | head -1)
    [[ -n $cmdline && -n $home && $workdir == "$home" ]] || fail "unexpected unit layout: ExecStart, HOME, WorkingDirectory"
    [[ $cmdline == *"--host 127.0.0.1"* ]] || fail "ExecStart does not bind loopback: $cmdline"

    # The state directory (StateDirectory=shepherd) owned by the service's uid, mode 0700.
    state=$tmp/state
    mkdir -p "$state/models" "$state/.config/shepherd"
    install -m 0755 "$bin" "$tmp/shepherd"
    ln "$model" "$state/models/" 2>/dev/null || cp "$model" "$state/models/"
    sed "s#$home#$state#g" "$sample" >"$state/.config/shepherd/config.json"
    chown -R "$SERVICE_UID:$SERVICE_UID" "$state"
    chmod 0700 "$state"
    chmod 0755 "$tmp"

    local cmd=${cmdline//\/usr\/local\/bin\/shepherd/$tmp/shepherd}
    unshare --net "$0" serve "$cmd" "$state" "$tmp/serve.log" || fail "the unit's ExecStart did not serve (log: $(tail -5 "$tmp/serve.log"))"
}

# Inside a fresh network namespace: only its own loopback exists, so the port is free
# and whatever listens is visible to `ss` alone.
serve() { # CMD STATE LOG
    local cmd=$1 state=$2 log=$3 port status uid listeners
    port=$(grep -o -- '--port [0-9]*' <<<"$cmd" | cut -d' ' -f2)
    ip link set lo up
    # Word splitting of $cmd is what systemd does with ExecStart (no quotes in ours).
    # shellcheck disable=SC2086
    setpriv --reuid="$SERVICE_UID" --regid="$SERVICE_UID" --clear-groups --no-new-privs \
        --inh-caps=-all --bounding-set=-all \
        env -i HOME="$state" PATH=/usr/bin:/bin bash -c 'cd "$1" && shift && exec "$@"' _ "$state" $cmd \
        </dev/null >"$log" 2>&1 &
    SERVER_PID=$!
    trap 'kill -TERM $SERVER_PID 2>/dev/null || true; wait $SERVER_PID 2>/dev/null || true' EXIT
    local pid=$SERVER_PID
    local deadline=$((SECONDS + DEADLINE_S))
    until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do
        kill -0 "$pid" 2>/dev/null || { echo "the server exited" >>"$log"; return 1; }
        ((SECONDS < deadline)) || { echo "no /health within ${DEADLINE_S}s" >>"$log"; return 1; }
        sleep 0.2
    done
    # A server that runs tools needs a token even on loopback: without one it
    # generated its own and stored it (0600) for its user, the service's.
    local token_file=$state/.local/state/shepherd/run/server-$port.json token
    [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/status") == 401 ]] || { echo "/status answered without a token" >>"$log"; return 1; }
    [[ $(stat -c '%a %u' "$token_file") == "600 $SERVICE_UID" ]] || { echo "token file: $(stat -c '%a %u' "$token_file" 2>&1)" >>"$log"; return 1; }
    token=$(sed -n 's/.*"token": *"\([0-9a-f]*\)".*/\1/p' "$token_file")
    status=$(curl -sf -H "Authorization: Bearer $token" "http://127.0.0.1:$port/status")
    [[ $status == *'"server_type":"cliserver"'* && $status == *SmolLM2* ]] || { echo "unexpected /status: $status" >>"$log"; return 1; }
    uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
    [[ $uid == "$SERVICE_UID" ]] || { echo "runs as uid $uid" >>"$log"; return 1; }
    listeners=$(ss -ltnH | awk '{print $4}')
    [[ $listeners == "127.0.0.1:$port" ]] || { echo "listening on: $listeners" >>"$log"; return 1; }
    ok "the unit's ExecStart serves /health, and /status with its generated token only, on 127.0.0.1:$port only, as uid $uid: $status"
}

# A CUDA build run here: --version names the CUDA toolkit and the architectures, and
# the one-shot chat answers. Where there is no GPU (CI) both say that no CUDA device
# was found and the model answers on the CPU; where there is one, it answers on it.
check_cuda_cpu() { # BIN MODEL
    local bin=$1 model=$2 out err
    out=$("$bin" --version </dev/null) || fail "$bin --version failed"
    grep -q '^cuda: CUDA [0-9]' <<<"$out" || fail "--version does not name the CUDA build: $out"
    ok "$(grep '^cuda:' <<<"$out")"
    local gpu=yes
    grep -q '^  CUDA[0-9]' <<<"$out" || gpu=no
    if [[ $gpu == no ]]; then
        grep -q '^no CUDA device found (.*): running on the CPU$' <<<"$out" ||
            fail "--version on a machine without a GPU does not say so: $out"
        ok "--version: $(grep '^no CUDA device' <<<"$out")"
    fi
    err=$(mktemp)
    out=$("$bin" -m "$model" --threads 2 --temperature 0 -e "What is the capital of France?" </dev/null 2>"$err") ||
        fail "the one-shot chat failed: $(cat "$err")"
    grep -qi paris <<<"$out" || fail "the one-shot chat did not answer Paris: $out"
    if [[ $gpu == no ]]; then
        [[ $(grep -c '^shepherd: no CUDA device found' "$err") == 1 ]] ||
            fail "the chat did not say once that it runs on the CPU: $(cat "$err")"
        ok "one-shot chat without a GPU: $(grep '^shepherd: no CUDA' "$err"); answer: $out"
    else
        ok "one-shot chat on the GPU: $out"
    fi
    rm -f "$err"
}

main() {
    local mode=${1:-}
    case $mode in
    linkage)
        check_linkage "$2" "$3" "$4"
        ;;
    all)
        local bin model unit sample max_mb tmp
        bin=$(realpath "$2") model=$(realpath "$3") unit=$(realpath "$4") sample=$(realpath "$5") max_mb=$6
        tmp=$(mktemp -d "${TMPDIR:-/tmp}/shepherd-release.XXXXXX")
        # The trap runs after main returns: it must not name a local.
        TMP_ROOT=$tmp
        trap 'rm -rf "$TMP_ROOT"' EXIT
        check_linkage "$bin" static "$max_mb"
        check_empty_root "$bin" "$model" "$tmp"
        check_unit_file "$bin" "$unit" "$tmp"
        check_unit_serves "$bin" "$model" "$unit" "$sample" "$tmp"
        ;;
    serve)
        serve "$2" "$3" "$4"
        ;;
    cuda-cpu)
        check_cuda_cpu "$2" "$3"
        ;;
    *)
        echo "usage: $0 linkage BIN static|cuda|cuda-dlopen|cuda-dynamic MAX_MB | all BIN MODEL UNIT SAMPLE_CONFIG MAX_MB | cuda-cpu BIN MODEL" >&2
        exit 2
        ;;
    esac
}

main "$@"

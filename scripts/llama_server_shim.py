#!/usr/bin/env python3
"""llama-server's command line, run as `shepherd --server`.

Usage: llama_server_shim.py [llama-server flags...]

`make compat-suite` (scripts/compat_suite.py) names this script as the server
binary of llama.cpp's own server tests (LLAMA_SERVER_BIN_PATH), which start
llama-server with its flags. Each flag is mapped to shepherd's (FLAGS below) or
dropped; the dropped ones are printed on stderr with the reason, then shepherd
replaces this process (exec, so the tests' SIGTERM reaches it).

Environment:
  SHEPHERD_BIN          the shepherd binary (required)
  COMPAT_MODEL          the model served when no --model is given (llama-server's
                        router mode, which shepherd does not have)
  COMPAT_SHEPHERD_HOME  a directory for shepherd's config, data and state, so that
                        the user's own config.json and saved prompt caches are not used
Standard library only.
"""
import os
import sys

# llama-server flag -> (takes a value, how to map it). A mapping is a shepherd flag
# (the value passed on), a function of the value returning shepherd's arguments,
# or a string starting with "drop:" (dropped, with that reason).
SAME = object()


def cors(value):
    """--cors-origins A,B: shepherd's --cors-origin, once per origin."""
    out = []
    for origin in value.split(","):
        if origin.strip():
            out += ["--cors-origin", origin.strip()]
    return out


def spec_type(value):
    """--spec-type: shepherd knows ngram and draft (drafting model) speculation."""
    if value.startswith("ngram"):
        return ["--spec", "ngram"]
    if value.startswith("draft"):
        return ["--spec", "draft"]
    if value in ("none", "off"):
        return ["--spec", "off"]
    return None


FLAGS = {
    "--port": (True, "--port"),
    "--host": (True, "--host"),
    "--temp": (True, "--temperature"),
    "--seed": (True, "--seed"),
    "--model": (True, "-m"),
    "-m": (True, "-m"),
    "--model-draft": (True, "--model-draft"),
    "-md": (True, "--model-draft"),
    "--alias": (True, "--alias"),
    "-a": (True, "--alias"),
    "--ctx-size": (True, "--context-size"),
    "-c": (True, "--context-size"),
    "--parallel": (True, "--parallel"),
    "-np": (True, "--parallel"),
    "--batch-size": (True, "--n_batch"),
    "-b": (True, "--n_batch"),
    "--ubatch-size": (True, "--ubatch"),
    "-ub": (True, "--ubatch"),
    "--threads": (True, "--threads"),
    "-t": (True, "--threads"),
    "--n-gpu-layers": (True, "--n-gpu-layers"),
    "-ngl": (True, "--n-gpu-layers"),
    "--n-predict": (True, "--max-tokens"),
    "-n": (True, "--max-tokens"),
    "--pooling": (True, "--pooling"),
    "--slot-save-path": (True, "--slot-save-path"),
    "--sleep-idle-seconds": (True, "--sleep-idle-seconds"),
    "--api-key": (True, "--api-key"),
    "--chat-template": (True, "--chat-template"),
    "--chat-template-file": (True, "--chat-template-file"),
    "--cors-origins": (True, cors),
    "-fa": (True, lambda v: ["--flash-attn=" + v]),
    "--flash-attn": (True, lambda v: ["--flash-attn=" + v]),
    "--spec-draft-n-max": (True, "--draft-max"),
    "--spec-type": (True, spec_type),
    "--reasoning": (True, "--reasoning"),
    "--chat-template-kwargs": (True, "--chat-template-kwargs"),
    # -ctk/-ctv: shepherd has one type for K and V; see main() for the pair.
    "-ctk": (True, "cache-type"),
    "--cache-type-k": (True, "cache-type"),
    "-ctv": (True, "cache-type"),
    "--cache-type-v": (True, "cache-type"),
    # Dropped: shepherd does this always, never, or its own way.
    "--cont-batching": (False, "drop: batching is always continuous"),
    "--embedding": (False, "drop: /v1/embeddings is always served"),
    "--embeddings": (False, "drop: /v1/embeddings is always served"),
    "--reranking": (False, "--reranking"),
    "--rerank": (False, "--reranking"),
    "--metrics": (False, "--metrics"),
    "--slots": (False, "--slots"),
    "--no-slots": (False, "--no-slots"),
    "--kv-unified": (False, "drop: each slot owns n_ctx/N positions"),
    "--swa-full": (False, "drop: no full-size SWA cache"),
    "--jinja": (False, "drop: templates are always Jinja"),
    "--no-jinja": (False, "drop: templates are always Jinja"),
    "--offline": (False, "drop: shepherd never downloads a model on start"),
    "--verbose": (False, "--verbose"),
    "-v": (False, "--verbose"),
    "--log-verbose": (False, "--verbose"),
    "--context-shift": (False, "drop: no context shift"),
    "--no-ui": (False, "drop: the chat page is always served"),
    "--no-models-autoload": (False, "drop: no router mode"),
    "--no-mmproj": (False, "drop: no multimodal projector"),
    "--no-cache-idle-slots": (False, "drop: no RAM prompt cache"),
    "--ui-mcp-proxy": (False, "drop: no MCP proxy"),
    "--backend_sampling": (False, "drop: sampling is on the CPU"),
    "--tags": (True, "--tags"),
    "--grp-attn-n": (True, "drop: no group attention"),
    "--grp-attn-w": (True, "drop: no group attention"),
    "--lora": (True, "drop: no LoRA adapters"),
    "--spec-draft-n-min": (True, "drop: shepherd's drafting adapts its own length"),
    "--spec-synth-len": (True, "drop: no synthetic drafting"),
    "--spec-synth-rates": (True, "drop: no synthetic drafting"),
    "--reasoning-format": (True, "drop: reasoning is always split into reasoning_content"),
    "--mmproj-url": (True, "drop: no multimodal projector"),
    "--media-path": (True, "drop: no media"),
    "--cache-ram": (True, "drop: no RAM prompt cache (--no-prompt-cache is passed)"),
    "--tools": (True, "drop: server tools are --use-tools (shepherd's own)"),
    "--tools-runtime": (True, "drop: no tool runtimes"),
    "--mcp-servers-config": (True, "drop: MCP servers come from shepherd's config"),
    "--mcp-servers-json": (True, "drop: MCP servers come from shepherd's config"),
    "--models-dir": (True, "drop: no router mode"),
    "--models-max": (True, "drop: no router mode"),
    "--models-preset": (True, "drop: no router mode"),
    "--hf-repo": (True, "drop: no model hub"),
    "-hf": (True, "drop: no model hub"),
    "--hf-file": (True, "drop: no model hub"),
    "-hff": (True, "drop: no model hub"),
    "--model-url": (True, "drop: no model hub"),
    "-mu": (True, "drop: no model hub"),
}


def translate(argv):
    """shepherd's arguments and the dropped flags ([(flag, value, reason)])."""
    out, dropped, cache_types, model = [], [], [], None
    i = 0
    while i < len(argv):
        flag = argv[i]
        value = None
        if "=" in flag and flag.startswith("--") and flag.split("=", 1)[0] in FLAGS:
            flag, value = flag.split("=", 1)
        known = FLAGS.get(flag)
        if known is None:
            # Unknown: a value follows when the next word is not a flag.
            if value is None and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                value = argv[i + 1]
                i += 1
            dropped.append((flag, value, "unknown to this shim"))
            i += 1
            continue
        takes, how = known
        if takes and value is None:
            if i + 1 >= len(argv):
                dropped.append((flag, None, "no value given"))
                break
            value = argv[i + 1]
            i += 1
        i += 1
        if how == "cache-type":
            cache_types.append(value)
        elif isinstance(how, str) and how.startswith("drop:"):
            dropped.append((flag, value, how[len("drop: "):]))
        elif isinstance(how, str):
            if how == "-m":
                model = value
            out += [how] + ([value] if takes else [])
        else:
            mapped = how(value)
            if mapped is None:
                dropped.append((flag, value, "no shepherd equivalent for this value"))
            else:
                out += mapped
    if cache_types:
        if len(set(cache_types)) == 1:
            out += ["--cache-type", cache_types[0]]
        else:
            dropped.append(("-ctk/-ctv", ",".join(cache_types),
                            "shepherd has one type for K and V: the K type is used"))
            out += ["--cache-type", cache_types[0]]
    # llama-server drafts only when asked (a draft model or --spec-type);
    # shepherd drafts n-grams from the context by default.
    if not any(flag in out for flag in ("--spec", "--model-draft")):
        out += ["--spec", "off"]
    if model is None:
        fallback = os.environ.get("COMPAT_MODEL")
        if fallback:
            dropped.append(("(no --model)", None, f"no router mode: serving {fallback}"))
            out += ["-m", fallback]
    return out, dropped


def main():
    shepherd = os.environ.get("SHEPHERD_BIN")
    if not shepherd:
        sys.exit("llama_server_shim.py: set SHEPHERD_BIN to the shepherd binary")
    args, dropped = translate(sys.argv[1:])
    home = os.environ.get("COMPAT_SHEPHERD_HOME")
    env = dict(os.environ)
    if home:
        for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"),
                         ("XDG_STATE_HOME", "state"), ("XDG_CACHE_HOME", "cache"),
                         ("XDG_RUNTIME_DIR", "run")):
            path = os.path.join(home, sub)
            os.makedirs(path, mode=0o700, exist_ok=True)
            env[var] = path
    for flag, value, reason in dropped:
        shown = flag if value is None else f"{flag} {value}"
        print(f"llama_server_shim: dropped {shown}: {reason}", file=sys.stderr)
    command = [shepherd, "--server", "--no-prompt-cache"] + args
    print("llama_server_shim: " + " ".join(command), file=sys.stderr)
    sys.stderr.flush()
    os.execve(shepherd, command, env)


if __name__ == "__main__":
    main()

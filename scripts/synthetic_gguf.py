#!/usr/bin/env python3
"""Writes a random-weight GGUF shaped like a real model, for benchmarks and load
tests where only the shape matters (speed, memory, offload), not the answers.

    synthetic_gguf.py --like NAME --tokenizer-from SRC.gguf [--type q4_0|q8_0|f16]
                      [--seed N] OUT.gguf
        Writes OUT.gguf: the tensors of the named shape (see --list) with
        pseudo-random weights, and SRC's tokenizer (every `tokenizer.*` key,
        copied verbatim). If the shape's vocabulary is larger than SRC's token
        list, the list is padded with `<|synthetic_pad_N|>` tokens of type 5
        (UNUSED) so that token_embd/output have the real model's vocab size.
        --special TEXT (repeatable) appends TEXT to the token list as a control
        token and --chat-template FILE sets tokenizer.chat_template: a real
        family's template and markers on a borrowed tokenizer.
    synthetic_gguf.py --extract-tokenizer SRC.gguf OUT.gguf
        Writes a GGUF with no tensors that holds only SRC's `tokenizer.*` keys
        (and general.name): a file of a few MB to carry in place of a whole
        model, and itself accepted as --tokenizer-from.
    synthetic_gguf.py --projector NAME [--seed N] OUT.gguf
        Writes a vision projector (an "mmproj" file for llama.cpp's libmtmd,
        `--mmproj`): a SigLIP encoder cut down to a few narrow layers, with the
        real connector's tensor names, `clip.*` keys and image geometry, and
        random weights. idefics3 is SmolVLM's connector, whose text model is
        SmolLM2-135M (output width 576); gemma3 is Gemma 3's, for gemma-3-270m
        (640). libmtmd frames an idefics3 image with the control tokens
        `<fake_token_around_image>` and `<global-img>`, which SmolLM2's own
        vocabulary lacks (SmolVLM adds them; without them libmtmd looks them up
        as token -1 and aborts): pair it with a text model written with
        `--like smollm2-135m --special '<fake_token_around_image>'
        --special '<global-img>'`. gemma-3-270m has Gemma 3's image markers.
    synthetic_gguf.py --list
        Prints the known shapes and projectors.

Standard library only (Python 3.9+): no numpy. It is fast on multi-GB files
because it never makes random numbers per block: for each (type, scale) it
builds one chunk of a few MB of valid quantised blocks and writes it over and
over, each tensor starting at a random block of the chunk.

Weights are scaled so that activations stay O(1) and generation gives no
NaN/inf: a matrix with n_in inputs gets weights of variance 1/n_in (zero mean),
norm weights are 1.0 and biases 0.0, the MoE router is F32. Tensor names, shapes and metadata
keys are the ones llama.cpp's loader expects for each architecture (llama,
qwen3, qwen3moe); GGUF lists dims innermost first, so a weight matrix is
ne = [n_in, n_out]. The file is GGUF v3 with tensor data aligned to 32 bytes.

The rows of the output matrix (token_embd where the embeddings are tied) for the
tokenizer's control tokens and its end-of-generation ids are zeros: their logit is
then 0 while the others spread around it, so greedy decoding never ends a reply or
emits a marker by chance, and two programs asked for N tokens both generate N.

The last line printed is: OUT, its size in bytes, seconds taken, parameters.
"""
import argparse
import math
import mmap
import os
import random
import statistics
import struct
import sys
import time

ALIGNMENT = 32

# GGUF metadata value types.
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
FIXED_SIZE = {T_U8: 1, T_I8: 1, T_U16: 2, T_I16: 2, T_U32: 4, T_I32: 4, T_F32: 4,
              T_BOOL: 1, T_U64: 8, T_I64: 8, T_F64: 8}
PACK = {T_U8: "B", T_I8: "b", T_U16: "H", T_I16: "h", T_U32: "I", T_I32: "i", T_F32: "f",
        T_BOOL: "?", T_U64: "Q", T_I64: "q", T_F64: "d"}

# ggml tensor types: id -> (elements per block, bytes per block).
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0 = 0, 1, 2, 8
GGML_BLOCK = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_Q4_0: (32, 18), GGML_Q8_0: (32, 34)}
# --type -> (ggml type, general.file_type).
WEIGHT_TYPES = {"q4_0": (GGML_Q4_0, 2), "q8_0": (GGML_Q8_0, 7), "f16": (GGML_F16, 1)}

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_UNUSED = 5

# Blocks (or values) per repeated chunk: odd counts, so that rows, whose
# lengths are powers of two times small numbers, do not line up with the chunk.
CHUNK_UNITS = {GGML_Q4_0: 131071, GGML_Q8_0: 65521, GGML_F16: 1048573, GGML_F32: 524287}

SHAPES = {
    "smollm2-135m": dict(arch="llama", n_embd=576, n_layer=30, n_head=9, n_head_kv=3,
                         n_ff=1536, n_vocab=49152, n_ctx=8192, rope_theta=100000.0,
                         rms_eps=1e-5, tied=True),
    "llama3.1-8b": dict(arch="llama", n_embd=4096, n_layer=32, n_head=32, n_head_kv=8,
                        n_ff=14336, n_vocab=128256, n_ctx=131072, rope_theta=500000.0,
                        rms_eps=1e-5, tied=False),
    "qwen3-8b": dict(arch="qwen3", n_embd=4096, n_layer=36, n_head=32, n_head_kv=8,
                     head_dim=128, n_ff=12288, n_vocab=151936, n_ctx=40960,
                     rope_theta=1000000.0, rms_eps=1e-6, tied=False, qk_norm=True),
    # feed_forward_length 6144 is the dense intermediate_size real Qwen3-30B-A3B
    # GGUFs carry; the expert tensors use expert_feed_forward_length.
    "qwen3-30b-a3b": dict(arch="qwen3moe", n_embd=2048, n_layer=48, n_head=32, n_head_kv=4,
                          head_dim=128, n_ff=6144, n_vocab=151936, n_ctx=40960,
                          rope_theta=1000000.0, rms_eps=1e-6, tied=False, qk_norm=True,
                          n_expert=128, n_expert_used=8, n_ff_exp=768),
}

# Vision projectors: the encoder is SigLIP's (pre-norm ViT, biased attention and
# GELU MLP, post-LN) at a fraction of its width and depth (libmtmd takes any:
# SmolVLM-256M's has 12 layers of 768, Gemma 3's 27 of 1152); the image
# geometry is the real one, so an image costs as many tokens as with the real
# projector: idefics3 cuts a 512-pixel tile into 32x32 patches and pixel-shuffles
# them 4x4 into 64 tokens per tile (preproc_size 512: one tile plus the overview
# libmtmd always adds, so 128 per image); gemma3 average-pools 64x64 patches of
# an 896-pixel image 4x4 into 256 tokens. n_ff differs from n_embd: libmtmd takes
# a SigLIP ffn_down of width n_embd for an old file's swapped up/down.
PROJECTORS = {
    "idefics3": dict(n_embd_text=576, image_size=512, patch_size=16, scale_factor=4,
                     preproc_size=512, n_embd=64, n_ff=128, n_layer=2, n_head=2,
                     eps=1e-6, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
    "gemma3": dict(n_embd_text=640, image_size=896, patch_size=14, scale_factor=4,
                   n_embd=64, n_ff=128, n_layer=2, n_head=2,
                   eps=1e-6, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
}


# ---------------------------------------------------------------- GGUF reading

def _skip_value(buf, off, vtype):
    """Offset just past the value of type `vtype` that starts at `off`."""
    if vtype == T_STR:
        return off + 8 + struct.unpack_from("<Q", buf, off)[0]
    if vtype == T_ARR:
        sub, n = struct.unpack_from("<IQ", buf, off)
        off += 12
        if sub in FIXED_SIZE:
            return off + n * FIXED_SIZE[sub]
        for _ in range(n):
            off = _skip_value(buf, off, sub)
        return off
    if vtype not in FIXED_SIZE:
        raise ValueError(f"unknown GGUF value type {vtype}")
    return off + FIXED_SIZE[vtype]


def read_metadata(path):
    """The key/value pairs of a GGUF file, as (key, type, encoded value) in
    file order; the encoded value is the bytes after the type, kept verbatim."""
    if os.path.getsize(path) < 24:
        raise SystemExit(f"{path}: not a GGUF file")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise SystemExit(f"{path}: not a GGUF file")
        version, _n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version not in (2, 3):
            raise SystemExit(f"{path}: GGUF version {version} not supported (2 or 3 only)")
        off = 24
        kvs = []
        for _ in range(n_kv):
            klen = struct.unpack_from("<Q", buf, off)[0]
            key = buf[off + 8:off + 8 + klen].decode("utf-8")
            off += 8 + klen
            vtype = struct.unpack_from("<I", buf, off)[0]
            off += 4
            end = _skip_value(buf, off, vtype)
            kvs.append((key, vtype, bytes(buf[off:end])))
            off = end
        return kvs


def decode_scalar(vtype, payload):
    if vtype == T_STR:
        return payload[8:].decode("utf-8", "replace")
    return struct.unpack("<" + PACK[vtype], payload)[0]


def array_header(payload):
    """(element type, count) of an encoded array value."""
    return struct.unpack_from("<IQ", payload, 0)


# ---------------------------------------------------------------- GGUF writing

def enc_str(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv_u32(key, v):
    return (key, T_U32, struct.pack("<I", v))


def kv_f32(key, v):
    return (key, T_F32, struct.pack("<f", v))


def kv_str(key, v):
    return (key, T_STR, enc_str(v))


def kv_bool(key, v):
    return (key, T_BOOL, struct.pack("<?", v))


def kv_f32_array(key, values):
    return (key, T_ARR, struct.pack("<IQ", T_F32, len(values)) +
            struct.pack("<%df" % len(values), *values))


def encode_kv(kv):
    key, vtype, payload = kv
    return enc_str(key) + struct.pack("<I", vtype) + payload


def pad_len(n):
    return (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT


def tensor_nbytes(ne, gtype):
    per_block, block_bytes = GGML_BLOCK[gtype]
    n = math.prod(ne)
    if ne[0] % per_block:
        raise SystemExit(f"dim {ne[0]} is not a multiple of the block size {per_block}")
    return n // per_block * block_bytes


def encode_header(kvs, tensors):
    """Header, metadata and tensor infos, padded to the alignment; and the
    offset of each tensor within the data section."""
    out = bytearray(b"GGUF")
    out += struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for kv in kvs:
        out += encode_kv(kv)
    offsets = []
    offset = 0
    for t in tensors:
        out += enc_str(t.name)
        out += struct.pack("<I", len(t.ne))
        out += struct.pack("<%dQ" % len(t.ne), *t.ne)
        out += struct.pack("<IQ", t.gtype, offset)
        offsets.append(offset)
        offset += t.nbytes + pad_len(t.nbytes)
    if tensors:
        out += b"\0" * pad_len(len(out))
    return bytes(out), offsets


# ---------------------------------------------------------------- tokenizer

def tokenizer_kvs(src):
    """SRC's `tokenizer.*` keys verbatim, and its general.name if any."""
    kvs = read_metadata(src)
    tok = [kv for kv in kvs if kv[0].startswith("tokenizer.")]
    if not any(kv[0] == "tokenizer.ggml.tokens" for kv in tok):
        raise SystemExit(f"{src}: no tokenizer.ggml.tokens key")
    names = [kv for kv in kvs if kv[0] == "general.name"]
    return tok, (decode_scalar(T_STR, names[0][2]) if names else None)


def add_specials(tok, specials):
    """The tokenizer keys with `specials` appended to the token list as control
    tokens (type 3, score 0): a real family's markers on a borrowed tokenizer.
    Those the list holds already are left as they are."""
    payload = dict((k, p) for k, _, p in tok)["tokenizer.ggml.tokens"]
    _, n_tokens = array_header(payload)
    known, at = set(), 12
    for _ in range(n_tokens):
        (length,) = struct.unpack_from("<Q", payload, at)
        known.add(payload[at + 8:at + 8 + length].decode("utf-8", "replace"))
        at += 8 + length
    # A token the vocabulary has already keeps its place (llama.cpp refuses duplicates).
    specials = [t for t in dict.fromkeys(specials) if t not in known]
    if not specials:
        return tok
    out = []
    for key, vtype, payload in tok:
        if vtype == T_ARR and key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                                      "tokenizer.ggml.scores"):
            sub, n = array_header(payload)
            if key == "tokenizer.ggml.tokens":
                items = b"".join(enc_str(t) for t in specials)
            elif key == "tokenizer.ggml.token_type":
                items = struct.pack("<%d%s" % (len(specials), PACK[sub]),
                                    *([TOKEN_TYPE_CONTROL] * len(specials)))
            else:
                items = struct.pack("<%d%s" % (len(specials), PACK[sub]), *([0] * len(specials)))
            payload = struct.pack("<IQ", sub, n + len(specials)) + payload[12:] + items
        out.append((key, vtype, payload))
    return out


def set_chat_template(tok, source):
    """The tokenizer keys with tokenizer.chat_template set to `source`."""
    return [kv for kv in tok if kv[0] != "tokenizer.chat_template"] + [
        kv_str("tokenizer.chat_template", source)]


def pad_tokenizer(tok, n_vocab):
    """The tokenizer keys with the token list (and its per-token arrays) padded
    to n_vocab entries; the number of pad tokens added."""
    by_key = {kv[0]: kv for kv in tok}
    _, n_tokens = array_header(by_key["tokenizer.ggml.tokens"][2])
    extra = n_vocab - n_tokens
    if extra <= 0:
        return tok, 0
    out = []
    for key, vtype, payload in tok:
        if vtype == T_ARR and key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                                      "tokenizer.ggml.scores"):
            sub, n = array_header(payload)
            if n != n_tokens:
                raise SystemExit(f"{key} has {n} entries but there are {n_tokens} tokens")
            if key == "tokenizer.ggml.tokens":
                items = b"".join(enc_str(f"<|synthetic_pad_{i}|>") for i in range(extra))
            elif key == "tokenizer.ggml.token_type":
                items = struct.pack("<%d%s" % (extra, PACK[sub]), *([TOKEN_TYPE_UNUSED] * extra))
            else:  # scores: what llama.cpp's converter gives its pad tokens
                items = struct.pack("<%d%s" % (extra, PACK[sub]), *([-1000] * extra))
            payload = struct.pack("<IQ", sub, n + extra) + payload[12:] + items
        out.append((key, vtype, payload))
    return out, extra


# ---------------------------------------------------------------- tensors

class Tensor:
    """One tensor: ne innermost first; fill is "ones" (F32 1.0), "zeros" or
    "random" (zero-mean weights of variance 1/n_in, n_in being ne[0] unless
    given: a convolution's inputs span several dims, a projection may be
    stored transposed)."""

    def __init__(self, name, ne, gtype, fill, zero_rows=(), n_in=None):
        self.name, self.ne, self.gtype, self.fill = name, list(ne), gtype, fill
        self.n_in = n_in or self.ne[0]
        self.nbytes = tensor_nbytes(self.ne, gtype)
        # Rows (indices along ne[1]) written as zeros after the random fill.
        self.zero_rows = sorted(zero_rows)


def plan_tensors(s, n_vocab, wtype, silent=()):
    """The shape's tensors; `silent` token ids get zero rows in the output matrix."""
    e, v = s["n_embd"], n_vocab
    hd = s.get("head_dim", e // s["n_head"])
    q, kv = s["n_head"] * hd, s["n_head_kv"] * hd

    def norm(name, n):
        return Tensor(name, [n], GGML_F32, "ones")

    def mat(name, ne):
        return Tensor(name, ne, wtype, "random")

    ts = [mat("token_embd.weight", [e, v])]
    if s["tied"]:
        ts[0].zero_rows = sorted(silent)
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        ts += [norm(p + "attn_norm.weight", e),
               mat(p + "attn_q.weight", [e, q]),
               mat(p + "attn_k.weight", [e, kv]),
               mat(p + "attn_v.weight", [e, kv]),
               mat(p + "attn_output.weight", [q, e])]
        if s.get("qk_norm"):
            ts += [norm(p + "attn_q_norm.weight", hd), norm(p + "attn_k_norm.weight", hd)]
        ts.append(norm(p + "ffn_norm.weight", e))
        if s.get("n_expert"):
            x, f = s["n_expert"], s["n_ff_exp"]
            ts += [Tensor(p + "ffn_gate_inp.weight", [e, x], GGML_F32, "random"),
                   mat(p + "ffn_gate_exps.weight", [e, f, x]),
                   mat(p + "ffn_up_exps.weight", [e, f, x]),
                   mat(p + "ffn_down_exps.weight", [f, e, x])]
        else:
            f = s["n_ff"]
            ts += [mat(p + "ffn_gate.weight", [e, f]),
                   mat(p + "ffn_up.weight", [e, f]),
                   mat(p + "ffn_down.weight", [f, e])]
    ts.append(norm("output_norm.weight", e))
    if not s["tied"]:
        ts.append(mat("output.weight", [e, v]))
        ts[-1].zero_rows = sorted(silent)
    return ts


def silent_tokens(tok):
    """Token ids that must never win greedy decoding: control tokens (type 3) and
    the end-of-sequence, end-of-turn and end-of-message ids."""
    by_key = {k: (vtype, payload) for k, vtype, payload in tok}
    ids = set()
    if "tokenizer.ggml.token_type" in by_key:
        sub, n = array_header(by_key["tokenizer.ggml.token_type"][1])
        types = struct.unpack_from("<%d%s" % (n, PACK[sub]), by_key["tokenizer.ggml.token_type"][1], 12)
        ids.update(i for i, t in enumerate(types) if t == TOKEN_TYPE_CONTROL)
    for key in ("eos", "eot", "eom"):
        entry = by_key.get(f"tokenizer.ggml.{key}_token_id")
        if entry and entry[0] in PACK:
            ids.add(struct.unpack_from("<" + PACK[entry[0]], entry[1], 0)[0])
    return ids


def arch_kvs(s, n_vocab):
    a = s["arch"]
    hd = s.get("head_dim", s["n_embd"] // s["n_head"])
    kvs = [kv_u32(f"{a}.context_length", s["n_ctx"]),
           kv_u32(f"{a}.embedding_length", s["n_embd"]),
           kv_u32(f"{a}.block_count", s["n_layer"]),
           kv_u32(f"{a}.feed_forward_length", s["n_ff"]),
           kv_u32(f"{a}.attention.head_count", s["n_head"]),
           kv_u32(f"{a}.attention.head_count_kv", s["n_head_kv"]),
           kv_f32(f"{a}.rope.freq_base", s["rope_theta"]),
           kv_f32(f"{a}.attention.layer_norm_rms_epsilon", s["rms_eps"]),
           kv_u32(f"{a}.vocab_size", n_vocab),
           kv_u32(f"{a}.rope.dimension_count", hd)]
    if a in ("qwen3", "qwen3moe"):
        kvs += [kv_u32(f"{a}.attention.key_length", hd),
                kv_u32(f"{a}.attention.value_length", hd)]
    if s.get("n_expert"):
        kvs += [kv_u32(f"{a}.expert_count", s["n_expert"]),
                kv_u32(f"{a}.expert_used_count", s["n_expert_used"]),
                kv_u32(f"{a}.expert_feed_forward_length", s["n_ff_exp"])]
    return kvs


def plan_projector(name, p):
    """A projector's tensors: libmtmd's names (clip-impl.h) for SigLIP and the
    connector. Matrices are F16, as the converter writes them; the patch and
    position embeddings, norms and biases F32."""
    e, f, t = p["n_embd"], p["n_ff"], p["n_embd_text"]
    ps, n_patches = p["patch_size"], (p["image_size"] // p["patch_size"]) ** 2

    def vec(tname, n, fill):
        return Tensor(tname, [n], GGML_F32, fill)

    def mat(tname, n_in, n_out):
        return [Tensor(tname + ".weight", [n_in, n_out], GGML_F16, "random"),
                vec(tname + ".bias", n_out, "zeros")]

    def norm(tname):
        return [vec(tname + ".weight", e, "ones"), vec(tname + ".bias", e, "zeros")]

    # The convolution's kernel is [width, height, channels, n_embd].
    ts = [Tensor("v.patch_embd.weight", [ps, ps, 3, e], GGML_F32, "random", n_in=ps * ps * 3),
          vec("v.patch_embd.bias", e, "zeros"),
          Tensor("v.position_embd.weight", [e, n_patches], GGML_F32, "random")]
    for i in range(p["n_layer"]):
        b = f"v.blk.{i}."
        ts += norm(b + "ln1") + mat(b + "attn_q", e, e) + mat(b + "attn_k", e, e)
        ts += mat(b + "attn_v", e, e) + mat(b + "attn_out", e, e)
        ts += norm(b + "ln2") + mat(b + "ffn_up", e, f) + mat(b + "ffn_down", f, e)
    ts += norm("v.post_ln")
    if name == "idefics3":
        # The pixel shuffle puts scale_factor^2 neighbouring patches side by side.
        width = e * p["scale_factor"] ** 2
        ts.append(Tensor("mm.model.fc.weight", [width, t], GGML_F16, "random"))
    else:
        # Gemma 3 keeps the projection as [vision, text] and multiplies by its
        # transpose: ne = [text, vision], n_in the vision width.
        ts += [vec("mm.soft_emb_norm.weight", e, "ones"),
               Tensor("mm.input_projection.weight", [t, e], GGML_F16, "random", n_in=e)]
    return ts


def projector_kvs(name, p):
    """The `clip.*` keys libmtmd reads (clip.cpp's load_hparams), as
    convert_hf_to_gguf.py writes them for SmolVLM and Gemma 3."""
    v = "clip.vision."
    kvs = [kv_str("general.architecture", "clip"),
           kv_str("general.type", "mmproj"),
           kv_str("general.name", f"synthetic {name} projector"),
           kv_u32("general.file_type", 1),
           kv_u32("general.alignment", ALIGNMENT),
           kv_bool("clip.has_vision_encoder", True),
           kv_str("clip.projector_type", name),
           kv_bool("clip.use_gelu", True),
           kv_u32(v + "projection_dim", p["n_embd_text"]),
           kv_u32(v + "image_size", p["image_size"]),
           kv_u32(v + "patch_size", p["patch_size"]),
           kv_u32(v + "embedding_length", p["n_embd"]),
           kv_u32(v + "feed_forward_length", p["n_ff"]),
           kv_u32(v + "block_count", p["n_layer"]),
           kv_u32(v + "attention.head_count", p["n_head"]),
           kv_f32(v + "attention.layer_norm_epsilon", p["eps"]),
           kv_f32_array(v + "image_mean", p["mean"]),
           kv_f32_array(v + "image_std", p["std"]),
           kv_u32(v + "projector.scale_factor", p["scale_factor"])]
    if "preproc_size" in p:
        kvs.append(kv_u32(v + "preproc_image_size", p["preproc_size"]))
    return kvs


# ---------------------------------------------------------------- random data
#
# A chunk is built one byte plane at a time: random index bytes mapped through
# 256-entry tables (bytes.translate) and interleaved with extended-slice
# assignment, so all per-byte work runs in C.

def _f16_planes(values):
    """Two 256-byte tables: the low and high bytes of each value as fp16."""
    packed = [struct.pack("<e", v) for v in values]
    return bytes(p[0] for p in packed), bytes(p[1] for p in packed)


def _scale_tables(sigma_per_unit):
    """fp16 scale tables for 256 scales spread over 0.5..1.5 of the nominal
    one, normalised so that the mean square multiplier is 1."""
    mult = [0.5 + k / 255 for k in range(256)]
    rms = math.sqrt(sum(m * m for m in mult) / 256)
    return _f16_planes([sigma_per_unit * m / rms for m in mult])


def _q4_table():
    """Byte -> two nibbles, uniform over 1..15 each (values -7..7), and the
    31 bytes left over map to nibble 8 (value 0), so the mean is exactly 0."""
    pairs = [(lo, hi) for hi in range(1, 16) for lo in range(1, 16)] + [(8, 8)] * 31
    table = bytes(lo | hi << 4 for lo, hi in pairs)
    var = sum((lo - 8) ** 2 + (hi - 8) ** 2 for lo, hi in pairs) / (2 * len(pairs))
    return table, var


def _q8_table():
    """Byte -> int8 uniform over -127..127 (byte 0 -> 0)."""
    vals = [0] + [b - 128 for b in range(1, 256)]
    return bytes(v & 0xFF for v in vals), sum(v * v for v in vals) / 256


def _normal_levels():
    """256 equiprobable N(0,1) quantiles, rescaled to variance exactly 1."""
    nd = statistics.NormalDist()
    lv = [nd.inv_cdf((k + 0.5) / 256) for k in range(256)]
    rms = math.sqrt(sum(x * x for x in lv) / 256)
    return [x / rms for x in lv]


def _interleave(n, unit, planes):
    """n units of `unit` bytes; planes[p] holds byte p of every unit."""
    buf = bytearray(n * unit)
    for p, plane in enumerate(planes):
        buf[p::unit] = plane
    return buf


def make_chunk(gtype, n_in, rng):
    """CHUNK_UNITS[gtype] valid blocks of weights of variance 1/n_in."""
    n = CHUNK_UNITS[gtype]
    sigma = 1 / math.sqrt(n_in)
    if gtype in (GGML_Q4_0, GGML_Q8_0):
        table, var = _q4_table() if gtype == GGML_Q4_0 else _q8_table()
        qbytes = 16 if gtype == GGML_Q4_0 else 32
        lo, hi = _scale_tables(sigma / math.sqrt(var))
        idx = rng.randbytes(n)
        q = rng.randbytes(n * qbytes).translate(table)
        planes = [idx.translate(lo), idx.translate(hi)] + [q[j::qbytes] for j in range(qbytes)]
        return _interleave(n, 2 + qbytes, planes)
    levels = [sigma * x for x in _normal_levels()]
    if gtype == GGML_F16:
        tables = _f16_planes(levels)
    else:
        packed = [struct.pack("<f", x) for x in levels]
        tables = [bytes(p[j] for p in packed) for j in range(4)]
    idx = rng.randbytes(n)
    return _interleave(n, len(tables), [idx.translate(t) for t in tables])


class DataWriter:
    """Writes tensor data from cached chunks, one per (type, n_in)."""

    ONE_F32 = struct.pack("<f", 1.0)

    def __init__(self, f, seed):
        self.f, self.rng, self.chunks = f, random.Random(seed), {}

    def write(self, t):
        start = self.f.tell()
        if t.fill == "ones":
            self.f.write(self.ONE_F32 * math.prod(t.ne))
        elif t.fill == "zeros":
            self.f.write(b"\0" * t.nbytes)
        else:
            self._random(t)
        if t.zero_rows:
            row = tensor_nbytes([t.ne[0], 1], t.gtype)
            for r in t.zero_rows:
                self.f.seek(start + r * row)
                self.f.write(b"\0" * row)
            self.f.seek(start + t.nbytes)
        self.f.write(b"\0" * pad_len(t.nbytes))

    def _random(self, t):
        key = (t.gtype, t.n_in)
        if key not in self.chunks:
            chunk = make_chunk(t.gtype, t.n_in, self.rng)
            self.chunks[key] = memoryview(bytes(chunk) * 2)  # doubled: any rotation is one slice
        doubled = self.chunks[key]
        clen = len(doubled) // 2
        unit = GGML_BLOCK[t.gtype][1]
        start = self.rng.randrange(clen // unit) * unit
        left = t.nbytes
        while left >= clen:
            self.f.write(doubled[start:start + clen])
            left -= clen
        if left:
            self.f.write(doubled[start:start + left])


# ---------------------------------------------------------------- commands

def write_file(out, kvs, tensors, seed):
    header, _ = encode_header(kvs, tensors)
    partial = out + ".partial"
    with open(partial, "wb") as f:
        f.write(header)
        dw = DataWriter(f, seed)
        for t in tensors:
            dw.write(t)
    os.replace(partial, out)


def synthesize(name, src, wtype_name, seed, out, specials=(), template=None):
    s = SHAPES[name]
    gtype, file_type = WEIGHT_TYPES[wtype_name]
    tok, _ = tokenizer_kvs(src)
    tok = add_specials(tok, list(specials))
    if template is not None:
        tok = set_chat_template(tok, template)
    n_tokens = array_header(dict((k, p) for k, _, p in tok)["tokenizer.ggml.tokens"])[1]
    n_vocab = max(s["n_vocab"], n_tokens)
    tok, padded = pad_tokenizer(tok, n_vocab)
    kvs = [kv_str("general.architecture", s["arch"]),
           kv_str("general.name", f"synthetic {name}"),
           kv_u32("general.file_type", file_type)]
    if gtype != GGML_F16:
        kvs.append(kv_u32("general.quantization_version", 2))
    kvs.append(kv_u32("general.alignment", ALIGNMENT))
    kvs += arch_kvs(s, n_vocab) + tok
    tensors = plan_tensors(s, n_vocab, gtype, {i for i in silent_tokens(tok) if i < n_vocab})
    if padded:
        print(f"padded the {n_tokens}-token vocabulary with {padded} unused tokens to {n_vocab}",
              file=sys.stderr)
    write_file(out, kvs, tensors, seed)
    return sum(math.prod(t.ne) for t in tensors)


def projector(name, seed, out):
    p = PROJECTORS[name]
    tensors = plan_projector(name, p)
    write_file(out, projector_kvs(name, p), tensors, seed)
    return sum(math.prod(t.ne) for t in tensors)


def extract_tokenizer(src, out):
    tok, name = tokenizer_kvs(src)
    kvs = ([kv_str("general.name", name)] if name is not None else []) + tok
    write_file(out, kvs, [], 0)
    return 0


def list_shapes():
    for name, s in SHAPES.items():
        ts = plan_tensors(s, s["n_vocab"], GGML_Q4_0)
        params = sum(math.prod(t.ne) for t in ts)
        size = sum(t.nbytes for t in ts)
        hd = s.get("head_dim", s["n_embd"] // s["n_head"])
        moe = (f" experts={s['n_expert']} used={s['n_expert_used']} ff_exp={s['n_ff_exp']}"
               if s.get("n_expert") else "")
        print(f"{name:14} arch={s['arch']} embd={s['n_embd']} layers={s['n_layer']} "
              f"heads={s['n_head']}/{s['n_head_kv']} head_dim={hd} ff={s['n_ff']}{moe} "
              f"vocab={s['n_vocab']} ctx={s['n_ctx']} theta={s['rope_theta']:g} "
              f"eps={s['rms_eps']:g} tied={s['tied']} "
              f"params={params / 1e9:.3f}B q4_0~{size / 1e9:.2f}GB")
    for name, p in PROJECTORS.items():
        ts = plan_projector(name, p)
        side = p["image_size"] // p["patch_size"] // p["scale_factor"]
        print(f"projector {name:9} image={p['image_size']} patch={p['patch_size']} "
              f"scale={p['scale_factor']} tokens/tile={side * side} embd={p['n_embd']} "
              f"layers={p['n_layer']} heads={p['n_head']} ff={p['n_ff']} "
              f"out={p['n_embd_text']} params={sum(math.prod(t.ne) for t in ts) / 1e6:.2f}M")


def main():
    ap = argparse.ArgumentParser(
        description="Write a random-weight GGUF shaped like a real model.",
        epilog="Shapes: " + ", ".join(SHAPES) + ". Projectors: " + ", ".join(PROJECTORS) + ".")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--like", metavar="NAME", choices=sorted(SHAPES),
                      help="shape to copy (see --list)")
    mode.add_argument("--extract-tokenizer", metavar="SRC.gguf",
                      help="write only SRC's tokenizer keys to OUT (no tensors)")
    mode.add_argument("--projector", metavar="NAME", choices=sorted(PROJECTORS),
                      help="write a vision projector for libmtmd (--mmproj) to OUT")
    mode.add_argument("--list", action="store_true", help="print the known shapes and projectors")
    ap.add_argument("--tokenizer-from", metavar="SRC.gguf",
                    help="GGUF whose tokenizer.* keys are copied (needed with --like)")
    ap.add_argument("--type", choices=sorted(WEIGHT_TYPES), default="q4_0",
                    help="type of token_embd and the weight matrices (default q4_0)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--special", action="append", default=[], metavar="TEXT",
                    help="append TEXT to the vocabulary as a control token (repeatable)")
    ap.add_argument("--chat-template", metavar="FILE",
                    help="set tokenizer.chat_template to FILE's text")
    ap.add_argument("out", nargs="?", metavar="OUT.gguf")
    args = ap.parse_args()

    if args.list:
        list_shapes()
        return
    if not args.out:
        ap.error("OUT.gguf is required")
    started = time.monotonic()
    if args.like:
        if not args.tokenizer_from:
            ap.error("--like needs --tokenizer-from")
        template = None
        if args.chat_template:
            with open(args.chat_template, encoding="utf-8") as f:
                template = f.read()
        params = synthesize(args.like, args.tokenizer_from, args.type, args.seed, args.out,
                            args.special, template)
    elif args.projector:
        params = projector(args.projector, args.seed, args.out)
    else:
        params = extract_tokenizer(args.extract_tokenizer, args.out)
    elapsed = time.monotonic() - started
    print(f"{args.out} {os.path.getsize(args.out)} bytes {elapsed:.2f} s {params} params")


if __name__ == "__main__":
    main()

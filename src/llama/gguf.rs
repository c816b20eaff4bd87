//! Reads what `shepherd models` shows from a GGUF file's header, without
//! loading the weights and without llama.cpp: the architecture, the name, the
//! file type (quantisation), the context length, whether a chat template is
//! present, the parameter count summed over the tensor infos, and the element
//! types of its matrices (which of ggml's CPU kernels will multiply them).
//!
//! The layout (GGUF versions 2 and 3, little-endian): the magic `GGUF`, a
//! `u32` version, `u64` tensor and key-value counts, the key-value pairs
//! (a string key, a `u32` type, a typed value; arrays carry an element type
//! and a `u64` count), then one info per tensor (name, `u32` dimension count,
//! `u64` dimensions, `u32` type, `u64` offset). The weights follow and are
//! never read.
//!
//! [`read`] takes what `shepherd models` shows. [`check_whole`] also checks
//! that the weights are all there, as llama.cpp's `gguf_init_from_file` and
//! its model loader do: every tensor's type is one ggml knows, its rows are
//! whole blocks, its offset is where the one before it ends (padded to
//! `general.alignment`, 32 by default), and the data section (from the padded
//! end of the header) ends where the file ends, give or take the last tensor's
//! padding. A download cut short or spliced from two files fails it.
//!
//! Every file is untrusted: each length and count is checked against the
//! bytes the file still has before anything is allocated or skipped, so a
//! truncated, corrupt or hostile file gives a [`GgufError`] naming the
//! offset, never a panic or a huge allocation. Array contents (a vocabulary of
//! 250 000 strings) are skipped, not stored.

#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// Longest key or kept string value (a chat template is a few tens of KB).
const MAX_STRING: u64 = 1 << 24;
/// Deepest nesting of arrays inside arrays accepted.
const MAX_ARRAY_DEPTH: u32 = 4;
/// Skips up to this many bytes by reading them, longer ones by seeking.
const SMALL_SKIP: u64 = 4096;
/// llama.cpp's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// llama.cpp's `GGUF_DEFAULT_ALIGNMENT`.
const DEFAULT_ALIGNMENT: u64 = 32;

/// What the header says about a model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GgufInfo {
    pub version: u32,
    /// `general.architecture` (`llama`, `gemma3`, …).
    pub architecture: Option<String>,
    /// `general.name`.
    pub name: Option<String>,
    /// `general.file_type`, llama.cpp's `llama_ftype`.
    pub file_type: Option<u32>,
    /// `ARCH.context_length`: the context the model was trained for.
    pub context_length: Option<u64>,
    /// Whether `tokenizer.chat_template` is present.
    pub has_chat_template: bool,
    pub tensor_count: u64,
    /// Elements over every tensor.
    pub parameters: u64,
    /// The ggml element types (`ggml_type`) of the tensors with two or more
    /// dimensions over 1: the weights a matrix product reads.
    pub matrix_types: BTreeSet<u32>,
}

impl GgufInfo {
    /// The quantisation as llama.cpp names it (`Q4_K_M`), or `?` when unknown.
    pub fn quantisation(&self) -> String {
        match self.file_type {
            Some(t) => file_type_name(t).map_or_else(|| format!("type {t}"), str::to_string),
            None => "?".to_string(),
        }
    }
}

/// Why a file could not be read as GGUF.
#[derive(Debug)]
pub enum GgufError {
    Io(io::Error),
    /// Not a GGUF file, or a version this reader does not know.
    Format(String),
    /// A length, count or type that the file cannot hold, at this byte offset.
    Corrupt {
        offset: u64,
        message: String,
    },
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgufError::Io(e) => write!(f, "cannot read: {e}"),
            GgufError::Format(message) => f.write_str(message),
            GgufError::Corrupt { offset, message } => {
                write!(f, "corrupt GGUF header at byte {offset}: {message}")
            }
        }
    }
}

impl std::error::Error for GgufError {}

/// Reads the header of the GGUF file at `path`.
pub fn read_file(path: &Path) -> Result<GgufInfo, GgufError> {
    let file = File::open(path).map_err(GgufError::Io)?;
    let len = file.metadata().map_err(GgufError::Io)?.len();
    read(BufReader::new(file), len)
}

/// Reads a GGUF header from `source`, which holds `len` bytes.
pub fn read<R: Read + Seek>(source: R, len: u64) -> Result<GgufInfo, GgufError> {
    parse(source, len, false)
}

/// Reads a GGUF header from `source`, which holds `len` bytes, and checks that
/// the tensor data it describes fills the rest exactly: a file cut short, one
/// with bytes past its last tensor, or a tensor of an unknown type is an error.
pub fn check_whole<R: Read + Seek>(source: R, len: u64) -> Result<GgufInfo, GgufError> {
    parse(source, len, true)
}

/// [`read`], and with `whole` [`check_whole`].
fn parse<R: Read + Seek>(source: R, len: u64, whole: bool) -> Result<GgufInfo, GgufError> {
    let mut r = Reader {
        source,
        pos: 0,
        len,
    };
    let mut info = header(&mut r)?;
    let kv_count = r.u64()?;
    r.check_count(info.tensor_count, 24, "tensor count")?;
    r.check_count(kv_count, 12, "key-value count")?;
    let mut keys = Keys {
        context: None,
        alignment: DEFAULT_ALIGNMENT,
    };
    for _ in 0..kv_count {
        key_value(&mut r, &mut info, &mut keys)?;
    }
    let alignment = keys.alignment;
    if whole && !alignment.is_power_of_two() {
        return Err(r.corrupt(&format!(
            "general.alignment {alignment} is not a power of two (or not a u32)"
        )));
    }
    // Where the next tensor's data must start, from the data section's start.
    let mut data_size: u64 = 0;
    let mut last_end: u64 = 0;
    for _ in 0..info.tensor_count {
        let tensor = tensor_info(&mut r)?;
        info.matrix_types.extend(tensor.matrix_type);
        info.parameters = info
            .parameters
            .checked_add(tensor.elements)
            .ok_or_else(|| r.corrupt("the parameter count overflows"))?;
        if whole {
            let nbytes = tensor_bytes(&r, &tensor)?;
            if tensor.offset != data_size {
                return Err(r.corrupt(&format!(
                    "a tensor's data is at offset {}, not {data_size} where the one before ends",
                    tensor.offset
                )));
            }
            last_end = data_size
                .checked_add(nbytes)
                .ok_or_else(|| r.corrupt("the tensor data size overflows"))?;
            data_size = pad(last_end, alignment)
                .ok_or_else(|| r.corrupt("the tensor data size overflows"))?;
        }
    }
    if whole {
        let header_end = r.pos;
        let start = match info.tensor_count {
            0 => header_end,
            _ => pad(header_end, alignment).ok_or_else(|| r.corrupt("the header overflows"))?,
        };
        let needed = start.checked_add(last_end);
        let padded = start.checked_add(data_size).and_then(|n| pad(n, alignment));
        let (Some(needed), Some(padded)) = (needed, padded) else {
            return Err(r.corrupt("the tensor data size overflows"));
        };
        if len < needed {
            return Err(GgufError::Format(format!(
                "the file is cut short: {len} bytes, its tensors need {needed}"
            )));
        }
        if len > padded {
            return Err(GgufError::Format(format!(
                "the file has {} bytes past its last tensor ({len} bytes, the tensors end at {needed})",
                len - padded
            )));
        }
    }
    Ok(info)
}

/// `n` rounded up to a multiple of `alignment` (a power of two), unless it overflows.
fn pad(n: u64, alignment: u64) -> Option<u64> {
    Some(n.checked_add(alignment - 1)? & !(alignment - 1))
}

/// A tensor's data size in bytes, as ggml's `ggml_nbytes` computes it.
fn tensor_bytes<R: Read + Seek>(r: &Reader<R>, tensor: &TensorInfo) -> Result<u64, GgufError> {
    let (block, size) = type_block(tensor.ggml_type)
        .ok_or_else(|| r.corrupt(&format!("unknown tensor type {}", tensor.ggml_type)))?;
    if tensor.row % block != 0 {
        return Err(r.corrupt(&format!(
            "a tensor of type {} has rows of {} elements, not a multiple of its block of {block}",
            tensor.ggml_type, tensor.row
        )));
    }
    (tensor.elements / block)
        .checked_mul(size)
        .ok_or_else(|| r.corrupt("a tensor's byte size overflows"))
}

/// ggml's block size (elements) and block byte size for a `ggml_type`, from
/// the `type_traits` table in ggml.c (sizes of the `block_*` structs in
/// ggml-common.h); `None` for a type ggml does not know or no longer reads.
fn type_block(ggml_type: u32) -> Option<(u64, u64)> {
    Some(match ggml_type {
        0 => (1, 4),      // F32
        1 => (1, 2),      // F16
        2 => (32, 18),    // Q4_0
        3 => (32, 20),    // Q4_1
        6 => (32, 22),    // Q5_0
        7 => (32, 24),    // Q5_1
        8 => (32, 34),    // Q8_0
        9 => (32, 36),    // Q8_1
        10 => (256, 84),  // Q2_K
        11 => (256, 110), // Q3_K
        12 => (256, 144), // Q4_K
        13 => (256, 176), // Q5_K
        14 => (256, 210), // Q6_K
        15 => (256, 292), // Q8_K
        16 => (256, 66),  // IQ2_XXS
        17 => (256, 74),  // IQ2_XS
        18 => (256, 98),  // IQ3_XXS
        19 => (256, 50),  // IQ1_S
        20 => (32, 18),   // IQ4_NL
        21 => (256, 110), // IQ3_S
        22 => (256, 82),  // IQ2_S
        23 => (256, 136), // IQ4_XS
        24 => (1, 1),     // I8
        25 => (1, 2),     // I16
        26 => (1, 4),     // I32
        27 => (1, 8),     // I64
        28 => (1, 8),     // F64
        29 => (256, 56),  // IQ1_M
        30 => (1, 2),     // BF16
        34 => (256, 54),  // TQ1_0
        35 => (256, 66),  // TQ2_0
        39 => (32, 17),   // MXFP4
        40 => (64, 36),   // NVFP4
        41 => (128, 18),  // Q1_0
        42 => (64, 18),   // Q2_0
        _ => return None,
    })
}

/// Values of keys that [`GgufInfo`] does not show but the reading needs.
struct Keys {
    /// `ARCH.context_length` once `general.architecture` is known.
    context: Option<String>,
    /// `general.alignment`; 0 when it is not a `u32`.
    alignment: u64,
}

fn header<R: Read + Seek>(r: &mut Reader<R>) -> Result<GgufInfo, GgufError> {
    let mut magic = [0u8; 4];
    r.bytes(&mut magic)
        .map_err(|_| GgufError::Format("not a GGUF file (shorter than its magic)".into()))?;
    if &magic != b"GGUF" {
        return Err(GgufError::Format("not a GGUF file (no GGUF magic)".into()));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::Format(format!(
            "GGUF version {version} is not supported (2 and 3 are)"
        )));
    }
    let tensor_count = r.u64()?;
    Ok(GgufInfo {
        version,
        tensor_count,
        ..GgufInfo::default()
    })
}

/// Reads one key-value pair, keeping the values [`GgufInfo`] names.
fn key_value<R: Read + Seek>(
    r: &mut Reader<R>,
    info: &mut GgufInfo,
    keys: &mut Keys,
) -> Result<(), GgufError> {
    let key = r.string()?;
    let kind = r.u32()?;
    let context_key = &mut keys.context;
    match (key.as_str(), kind) {
        ("general.architecture", TYPE_STRING) => {
            let arch = r.string()?;
            *context_key = Some(format!("{arch}.context_length"));
            info.architecture = Some(arch);
        }
        ("general.alignment", TYPE_U32) => keys.alignment = u64::from(r.u32()?),
        ("general.alignment", _) => {
            keys.alignment = 0;
            r.skip_value(kind, 0)?;
        }
        ("general.name", TYPE_STRING) => info.name = Some(r.string()?),
        ("general.file_type", TYPE_U32) => info.file_type = Some(r.u32()?),
        ("tokenizer.chat_template", TYPE_STRING) => {
            r.skip_string()?;
            info.has_chat_template = true;
        }
        (key, TYPE_U32) if key.ends_with(".context_length") => {
            let n = u64::from(r.u32()?);
            keep_context(info, context_key, key, n);
        }
        (key, TYPE_U64) if key.ends_with(".context_length") => {
            let n = r.u64()?;
            keep_context(info, context_key, key, n);
        }
        _ => r.skip_value(kind, 0)?,
    }
    Ok(())
}

/// Keeps `ARCH.context_length` for the file's own architecture; before
/// `general.architecture` was read (it comes first in every converter's
/// output) any context length is kept provisionally.
fn keep_context(info: &mut GgufInfo, context_key: &Option<String>, key: &str, n: u64) {
    if context_key.as_deref().is_none_or(|k| k == key) {
        info.context_length = Some(n);
    }
}

/// One tensor info, as far as the checks need it.
struct TensorInfo {
    /// Elements over every dimension.
    elements: u64,
    /// Elements in a row (the first dimension; 1 for a tensor of none).
    row: u64,
    ggml_type: u32,
    /// `ggml_type` when the tensor is a matrix.
    matrix_type: Option<u32>,
    /// Where its data starts, from the data section's start.
    offset: u64,
}

/// Reads one tensor info.
fn tensor_info<R: Read + Seek>(r: &mut Reader<R>) -> Result<TensorInfo, GgufError> {
    r.skip_string()?;
    let n_dims = r.u32()?;
    if n_dims > MAX_DIMS {
        return Err(r.corrupt(&format!(
            "a tensor has {n_dims} dimensions (at most {MAX_DIMS})"
        )));
    }
    let mut elements: u64 = 1;
    let mut row: u64 = 1;
    let mut long_dims = 0;
    for i in 0..n_dims {
        let dim = r.u64()?;
        if i == 0 {
            row = dim;
        }
        long_dims += usize::from(dim > 1);
        elements = elements
            .checked_mul(dim)
            .ok_or_else(|| r.corrupt("a tensor's element count overflows"))?;
    }
    let ggml_type = r.u32()?;
    let offset = r.u64()?;
    Ok(TensorInfo {
        elements,
        row,
        ggml_type,
        matrix_type: (long_dims >= 2).then_some(ggml_type),
        offset,
    })
}

const TYPE_U32: u32 = 4;
const TYPE_STRING: u32 = 8;
const TYPE_ARRAY: u32 = 9;
const TYPE_U64: u32 = 10;

/// The size of a fixed-size value type, `None` for strings, arrays and unknown types.
fn fixed_size(kind: u32) -> Option<u64> {
    match kind {
        0 | 1 | 7 => Some(1), // u8, i8, bool
        2 | 3 => Some(2),     // u16, i16
        4..=6 => Some(4),     // u32, i32, f32
        10..=12 => Some(8),   // u64, i64, f64
        _ => None,
    }
}

/// A reader that knows how many bytes are left, so no length is trusted.
struct Reader<R> {
    source: R,
    pos: u64,
    len: u64,
}

impl<R: Read + Seek> Reader<R> {
    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    fn corrupt(&self, message: &str) -> GgufError {
        GgufError::Corrupt {
            offset: self.pos,
            message: message.to_string(),
        }
    }

    fn truncated(&self, need: u64) -> GgufError {
        self.corrupt(&format!(
            "the file ends early ({need} bytes needed, {} left)",
            self.remaining()
        ))
    }

    /// Refuses a count of items of at least `min_size` bytes each that the rest of the file cannot hold.
    fn check_count(&self, count: u64, min_size: u64, what: &str) -> Result<(), GgufError> {
        if count > self.remaining() / min_size {
            return Err(self.corrupt(&format!("{what} {count} is more than the file can hold")));
        }
        Ok(())
    }

    fn bytes(&mut self, buf: &mut [u8]) -> Result<(), GgufError> {
        let need = buf.len() as u64;
        if need > self.remaining() {
            return Err(self.truncated(need));
        }
        self.source.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => self.truncated(need),
            _ => GgufError::Io(e),
        })?;
        self.pos += need;
        Ok(())
    }

    fn u32(&mut self) -> Result<u32, GgufError> {
        let mut buf = [0u8; 4];
        self.bytes(&mut buf)?;
        Ok(u32::from_le_bytes(buf))
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        let mut buf = [0u8; 8];
        self.bytes(&mut buf)?;
        Ok(u64::from_le_bytes(buf))
    }

    fn skip(&mut self, n: u64) -> Result<(), GgufError> {
        if n > self.remaining() {
            return Err(self.truncated(n));
        }
        if n <= SMALL_SKIP {
            // Read through short values: a seek would drop the read buffer,
            // costing two system calls per token of a 250 000-token vocabulary.
            let copied = io::copy(&mut (&mut self.source).take(n), &mut io::sink())
                .map_err(GgufError::Io)?;
            if copied != n {
                return Err(self.truncated(n));
            }
        } else {
            let step = i64::try_from(n).map_err(|_| self.truncated(n))?;
            self.source
                .seek(SeekFrom::Current(step))
                .map_err(GgufError::Io)?;
        }
        self.pos += n;
        Ok(())
    }

    /// A string's length, checked against the file and [`MAX_STRING`].
    fn string_len(&mut self) -> Result<u64, GgufError> {
        let n = self.u64()?;
        if n > self.remaining() {
            return Err(self.truncated(n));
        }
        Ok(n)
    }

    fn string(&mut self) -> Result<String, GgufError> {
        let n = self.string_len()?;
        if n > MAX_STRING {
            return Err(self.corrupt(&format!("a string of {n} bytes is too long to keep")));
        }
        let mut buf = vec![0u8; n as usize];
        self.bytes(&mut buf)?;
        String::from_utf8(buf).map_err(|_| self.corrupt("a string is not valid UTF-8"))
    }

    fn skip_string(&mut self) -> Result<(), GgufError> {
        let n = self.string_len()?;
        self.skip(n)
    }

    /// Skips a value of type `kind`; `depth` counts the arrays it is inside.
    fn skip_value(&mut self, kind: u32, depth: u32) -> Result<(), GgufError> {
        if let Some(size) = fixed_size(kind) {
            return self.skip(size);
        }
        match kind {
            TYPE_STRING => self.skip_string(),
            TYPE_ARRAY => self.skip_array(depth),
            other => Err(self.corrupt(&format!("unknown value type {other}"))),
        }
    }

    fn skip_array(&mut self, depth: u32) -> Result<(), GgufError> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(self.corrupt("arrays are nested too deeply"));
        }
        let kind = self.u32()?;
        let count = self.u64()?;
        if let Some(size) = fixed_size(kind) {
            let total = count
                .checked_mul(size)
                .ok_or_else(|| self.truncated(u64::MAX))?;
            return self.skip(total);
        }
        // Every string or array element takes at least 8 bytes.
        self.check_count(count, 8, "array length")?;
        for _ in 0..count {
            self.skip_value(kind, depth + 1)?;
        }
        Ok(())
    }
}

/// llama.cpp's name for a `general.file_type` (`llama_ftype` in llama.h).
pub fn file_type_name(file_type: u32) -> Option<&'static str> {
    const NAMES: [(u32, &str); 36] = [
        (0, "F32"),
        (1, "F16"),
        (2, "Q4_0"),
        (3, "Q4_1"),
        (7, "Q8_0"),
        (8, "Q5_0"),
        (9, "Q5_1"),
        (10, "Q2_K"),
        (11, "Q3_K_S"),
        (12, "Q3_K_M"),
        (13, "Q3_K_L"),
        (14, "Q4_K_S"),
        (15, "Q4_K_M"),
        (16, "Q5_K_S"),
        (17, "Q5_K_M"),
        (18, "Q6_K"),
        (19, "IQ2_XXS"),
        (20, "IQ2_XS"),
        (21, "Q2_K_S"),
        (22, "IQ3_XS"),
        (23, "IQ3_XXS"),
        (24, "IQ1_S"),
        (25, "IQ4_NL"),
        (26, "IQ3_S"),
        (27, "IQ3_M"),
        (28, "IQ2_S"),
        (29, "IQ2_M"),
        (30, "IQ4_XS"),
        (31, "IQ1_M"),
        (32, "BF16"),
        (36, "TQ1_0"),
        (37, "TQ2_0"),
        (38, "MXFP4_MOE"),
        (39, "NVFP4"),
        (40, "Q1_0"),
        (41, "Q2_0"),
    ];
    NAMES
        .iter()
        .find(|(n, _)| *n == file_type)
        .map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// Builds GGUF bytes the way the converters write them.
    #[derive(Default)]
    struct Builder {
        kvs: Vec<u8>,
        n_kv: u64,
        tensors: Vec<u8>,
        n_tensors: u64,
    }

    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }

    impl Builder {
        fn kv(mut self, key: &str, kind: u32, value: &[u8]) -> Builder {
            string(&mut self.kvs, key);
            self.kvs.extend(kind.to_le_bytes());
            self.kvs.extend(value);
            self.n_kv += 1;
            self
        }

        fn str_kv(self, key: &str, value: &str) -> Builder {
            let mut v = Vec::new();
            string(&mut v, value);
            self.kv(key, TYPE_STRING, &v)
        }

        fn tensor(mut self, name: &str, dims: &[u64]) -> Builder {
            string(&mut self.tensors, name);
            self.tensors.extend((dims.len() as u32).to_le_bytes());
            dims.iter()
                .for_each(|d| self.tensors.extend(d.to_le_bytes()));
            self.tensors.extend(2u32.to_le_bytes());
            self.tensors.extend(0u64.to_le_bytes());
            self.n_tensors += 1;
            self
        }

        fn bytes(&self) -> Vec<u8> {
            let mut out = b"GGUF".to_vec();
            out.extend(3u32.to_le_bytes());
            out.extend(self.n_tensors.to_le_bytes());
            out.extend(self.n_kv.to_le_bytes());
            out.extend(&self.kvs);
            out.extend(&self.tensors);
            out
        }
    }

    fn sample() -> Builder {
        let mut tokens = Vec::new();
        tokens.extend(TYPE_STRING.to_le_bytes());
        tokens.extend(3u64.to_le_bytes());
        for t in ["<s>", "a", "bc"] {
            string(&mut tokens, t);
        }
        let mut scores = Vec::new();
        scores.extend(6u32.to_le_bytes());
        scores.extend(2u64.to_le_bytes());
        scores.extend([0u8; 8]);
        let mut nested = Vec::new();
        nested.extend(TYPE_ARRAY.to_le_bytes());
        nested.extend(1u64.to_le_bytes());
        nested.extend(0u32.to_le_bytes());
        nested.extend(2u64.to_le_bytes());
        nested.extend([1u8, 2]);
        Builder::default()
            .str_kv("general.architecture", "llama")
            .str_kv("general.name", "Tiny")
            .kv("general.file_type", TYPE_U32, &15u32.to_le_bytes())
            .kv("gemma3.context_length", TYPE_U32, &99u32.to_le_bytes())
            .kv("llama.context_length", TYPE_U32, &8192u32.to_le_bytes())
            .kv("llama.rope.freq_base", 6, &1.0f32.to_le_bytes())
            .kv("tokenizer.ggml.tokens", TYPE_ARRAY, &tokens)
            .kv("tokenizer.ggml.scores", TYPE_ARRAY, &scores)
            .kv("x.nested", TYPE_ARRAY, &nested)
            .kv("x.flag", 7, &[1])
            .str_kv("tokenizer.chat_template", "{{ messages }}")
            .tensor("token_embd.weight", &[64, 10])
            .tensor("output_norm.weight", &[64])
            .tensor("rope_freqs.weight", &[32, 1])
    }

    fn parse(bytes: &[u8]) -> Result<GgufInfo, GgufError> {
        read(Cursor::new(bytes), bytes.len() as u64)
    }

    #[test]
    fn reads_the_fields_shown() {
        let info = parse(&sample().bytes()).expect("parses");
        assert_eq!(info.version, 3);
        assert_eq!(info.architecture.as_deref(), Some("llama"));
        assert_eq!(info.name.as_deref(), Some("Tiny"));
        assert_eq!(info.quantisation(), "Q4_K_M");
        assert_eq!(
            info.context_length,
            Some(8192),
            "the file's own architecture's"
        );
        assert!(info.has_chat_template);
        assert_eq!((info.tensor_count, info.parameters), (3, 736));
        assert_eq!(
            info.matrix_types,
            BTreeSet::from([2]),
            "the one matrix's type; a vector is none, whatever its dimension count"
        );
    }

    #[test]
    fn a_truncation_at_every_offset_is_an_error() {
        let bytes = sample().bytes();
        for cut in 0..bytes.len() {
            let result = parse(&bytes[..cut]);
            assert!(result.is_err(), "cut at {cut} of {} parsed", bytes.len());
            // The length the caller states is also honoured when the source has more.
            assert!(read(Cursor::new(&bytes), cut as u64).is_err(), "len {cut}");
        }
    }

    #[test]
    fn every_single_byte_corruption_is_survived() {
        let bytes = sample().bytes();
        for i in 0..bytes.len() {
            for value in [0x00, 0xff, 0x7f, 0x80] {
                let mut bad = bytes.clone();
                bad[i] = value;
                let _ = parse(&bad); // an error or other values, never a panic
            }
        }
    }

    #[test]
    fn bogus_lengths_and_counts_are_refused_before_allocating() {
        let huge = u64::MAX.to_le_bytes();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("string length", {
                let mut v = Vec::new();
                v.extend(huge);
                Builder::default()
                    .kv("general.name", TYPE_STRING, &v)
                    .bytes()
            }),
            ("array count", {
                let mut v = TYPE_STRING.to_le_bytes().to_vec();
                v.extend((u64::MAX / 2).to_le_bytes());
                Builder::default().kv("a", TYPE_ARRAY, &v).bytes()
            }),
            ("fixed array bytes", {
                let mut v = 12u32.to_le_bytes().to_vec();
                v.extend(huge);
                Builder::default().kv("a", TYPE_ARRAY, &v).bytes()
            }),
            (
                "value type",
                Builder::default().kv("a", 99, &[0; 8]).bytes(),
            ),
            ("dimensions", {
                Builder::default().tensor("t", &[1, 1, 1, 1, 1]).bytes()
            }),
            ("element overflow", {
                Builder::default().tensor("t", &[u64::MAX, 2]).bytes()
            }),
            ("parameter overflow", {
                Builder::default()
                    .tensor("t", &[u64::MAX / 2 + 1])
                    .tensor("u", &[u64::MAX / 2 + 1])
                    .bytes()
            }),
        ];
        for (what, bytes) in cases {
            assert!(
                matches!(parse(&bytes), Err(GgufError::Corrupt { .. })),
                "{what}"
            );
        }
        let mut counts = Builder::default().bytes();
        counts[8..16].copy_from_slice(&huge);
        assert!(parse(&counts).is_err(), "tensor count");
        let mut counts = Builder::default().bytes();
        counts[16..24].copy_from_slice(&huge);
        assert!(parse(&counts).is_err(), "key-value count");
    }

    #[test]
    fn deep_nesting_is_refused() {
        let mut v = Vec::new();
        for _ in 0..10 {
            v.extend(TYPE_ARRAY.to_le_bytes());
            v.extend(1u64.to_le_bytes());
        }
        v.extend([0u8; 64]);
        let bytes = Builder::default().kv("a", TYPE_ARRAY, &v).bytes();
        assert!(parse(&bytes).is_err());
    }

    #[test]
    fn other_files_and_versions_are_named() {
        for (bytes, expect) in [
            (b"GGU".to_vec(), "shorter"),
            (b"GGML\x03\0\0\0".to_vec(), "no GGUF magic"),
            (b"GGUF\x01\0\0\0".to_vec(), "version 1"),
        ] {
            let message = parse(&bytes).unwrap_err().to_string();
            assert!(message.contains(expect), "{message}");
        }
    }

    /// A whole GGUF file: `tensors` as (dimensions, ggml type), their data laid
    /// out as the converters write it, padded to `alignment`.
    fn whole(tensors: &[(&[u64], u32)], alignment: u64) -> Vec<u8> {
        let mut b = Builder::default();
        if alignment != DEFAULT_ALIGNMENT {
            b = b.kv(
                "general.alignment",
                TYPE_U32,
                &(alignment as u32).to_le_bytes(),
            );
        }
        let mut offset = 0;
        let mut sizes = Vec::new();
        for (i, (dims, kind)) in tensors.iter().enumerate() {
            string(&mut b.tensors, &format!("t{i}"));
            b.tensors.extend((dims.len() as u32).to_le_bytes());
            dims.iter().for_each(|d| b.tensors.extend(d.to_le_bytes()));
            b.tensors.extend(kind.to_le_bytes());
            b.tensors.extend((offset as u64).to_le_bytes());
            b.n_tensors += 1;
            let (block, size) = type_block(*kind).unwrap();
            let n = (dims.iter().product::<u64>() / block * size) as usize;
            sizes.push(n);
            offset += n.next_multiple_of(alignment as usize);
        }
        let mut out = b.bytes();
        for n in sizes {
            out.resize(out.len().next_multiple_of(alignment as usize), 0);
            out.extend((0..n).map(|i| (i % 251) as u8));
        }
        out.resize(out.len().next_multiple_of(alignment as usize), 0);
        out
    }

    fn check(bytes: &[u8]) -> Result<GgufInfo, GgufError> {
        check_whole(Cursor::new(bytes), bytes.len() as u64)
    }

    #[test]
    fn a_whole_file_passes_and_a_cut_or_longer_one_does_not() {
        let tensors: &[(&[u64], u32)] = &[(&[64, 10], 2), (&[7], 0), (&[256, 2], 14)];
        for alignment in [32, 64] {
            let bytes = whole(tensors, alignment);
            let info = check(&bytes).expect("a whole file");
            assert_eq!((info.tensor_count, info.parameters), (3, 640 + 7 + 512));
            // The last tensor's padding may be missing (420 bytes, padded to 448).
            let unpadded = bytes.len() - 28;
            assert!(check(&bytes[..unpadded]).is_ok(), "alignment {alignment}");
            let cut = check(&bytes[..unpadded - 1]).unwrap_err().to_string();
            assert!(cut.contains("cut short"), "{cut}");
            for end in 0..unpadded {
                assert!(check(&bytes[..end]).is_err(), "cut at {end}");
            }
            let mut longer = bytes.clone();
            longer.extend([0u8; 64]);
            let long = check(&longer).unwrap_err().to_string();
            assert!(long.contains("past its last tensor"), "{long}");
            // The lenient reader still reads both.
            assert!(parse(&longer).is_ok() && parse(&bytes[..unpadded - 1]).is_ok());
        }
        let empty = whole(&[], 32);
        assert!(check(&empty).is_ok(), "no tensors: the header alone");
    }

    #[test]
    fn a_bad_tensor_table_is_refused() {
        let unknown = whole(&[(&[32], 2)], 32);
        // The one tensor's info: its name `t0`, a u32 and a u64 dimension, the type, the offset.
        let name = unknown.windows(2).position(|w| w == b"t0").unwrap() + 2;
        let mut bad = unknown.clone();
        let at = name + 12;
        bad[at..at + 4].copy_from_slice(&4u32.to_le_bytes());
        let message = check(&bad).unwrap_err().to_string();
        assert!(message.contains("unknown tensor type 4"), "{message}");
        let mut moved = unknown.clone();
        let at = name + 16;
        moved[at..at + 8].copy_from_slice(&32u64.to_le_bytes());
        let message = check(&moved).unwrap_err().to_string();
        assert!(message.contains("offset 32"), "{message}");
        let ragged = Builder::default().tensor("t", &[33, 2]).bytes();
        let message = check(&ragged).unwrap_err().to_string();
        assert!(message.contains("block of 32"), "{message}");
        let odd = Builder::default()
            .kv("general.alignment", TYPE_U32, &24u32.to_le_bytes())
            .bytes();
        assert!(check(&odd)
            .unwrap_err()
            .to_string()
            .contains("power of two"));
        let huge = Builder::default()
            .tensor("t", &[u64::MAX / 16 * 16])
            .bytes();
        assert!(
            check(&huge).is_err(),
            "a size past u64 is an error, not a wrap"
        );
    }

    #[test]
    fn every_single_byte_corruption_of_a_whole_file_is_survived() {
        let bytes = whole(&[(&[64, 2], 8), (&[3], 0)], 32);
        for i in 0..bytes.len() {
            for value in [0x00, 0xff, 0x7f, 0x80] {
                let mut bad = bytes.clone();
                bad[i] = value;
                let _ = check(&bad);
            }
        }
    }

    /// The real models pass the whole-file check (`SHEPHERD_TEST_MODEL` when set).
    #[test]
    fn the_test_models_are_whole() {
        use crate::util::dirs::test_models::{swa_test_model_path, test_model_path};
        for path in [test_model_path(), swa_test_model_path()] {
            let file = File::open(&path).unwrap();
            let len = file.metadata().unwrap().len();
            let info = check_whole(BufReader::new(file), len)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(info.tensor_count > 0);
        }
    }

    #[test]
    fn the_test_models_are_read() {
        use crate::util::dirs::test_models::{swa_test_model_path, test_model_path};
        let smol = read_file(&test_model_path()).expect("SmolLM2");
        assert_eq!(smol.architecture.as_deref(), Some("llama"));
        assert_eq!(smol.quantisation(), "Q4_1");
        assert_eq!(smol.context_length, Some(8192));
        assert_eq!(smol.parameters, 134_515_008);
        assert_eq!(smol.matrix_types, BTreeSet::from([3, 8]), "Q4_1, Q8_0");
        assert!(smol.has_chat_template);
        // Values checked against an independent reader of the same files.
        let gemma = read_file(&swa_test_model_path()).expect("gemma 3");
        assert_eq!(gemma.architecture.as_deref(), Some("gemma3"));
        assert_eq!(gemma.quantisation(), "Q4_K_M");
        assert_eq!(gemma.context_length, Some(32768));
        assert_eq!(gemma.parameters, 268_098_176);
        let types = BTreeSet::from([6, 8, 12, 14]);
        assert_eq!(gemma.matrix_types, types, "Q5_0, Q8_0, Q4_K, Q6_K");
        assert!(!gemma.has_chat_template, "this GGUF carries no template");
    }
}

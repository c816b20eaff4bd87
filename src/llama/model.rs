//! The loaded GGUF model: tokenizer, detokenizer, chat template and metadata.
//!
//! A [`Model`] is created on the generation thread and borrowed by its
//! [`super::Context`]; it is neither `Send` nor `Sync` because the thread that
//! loads it is the only one that uses it.

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::collections::BTreeSet;
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

use llama_cpp_sys_2 as sys;

use super::error::{InvalidParam, LoadError, TemplateError, TokenizeError};

/// A token id of the model's vocabulary.
pub type Token = sys::llama_token;

/// Told how far loading has got, from 0.0 to 1.0, on the loading thread
/// (llama.cpp calls it many times per percent; the receiver thins it out).
#[derive(Clone)]
pub struct LoadProgress(Arc<dyn Fn(f32) + Send + Sync>);

impl LoadProgress {
    pub fn new(report: impl Fn(f32) + Send + Sync + 'static) -> LoadProgress {
        LoadProgress(Arc::new(report))
    }
}

impl std::fmt::Debug for LoadProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LoadProgress")
    }
}

/// How to load a model.
#[derive(Debug, Clone, Default)]
pub struct ModelParams {
    /// Layers to offload to the GPU; -1 means all of them.
    pub gpu_layers: i32,
    /// How offloaded layers go over several GPUs.
    pub split: super::GpuSplit,
    /// Where loading progress goes; `None`: nowhere.
    pub progress: Option<LoadProgress>,
}

/// A model's fill-in-the-middle tokens ([`Model::fim_tokens`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FimTokens {
    pub pre: Option<Token>,
    pub suf: Option<Token>,
    pub mid: Option<Token>,
    /// The repository and file separators of repo-level FIM (Qwen2.5-Coder's).
    pub rep: Option<Token>,
    pub sep: Option<Token>,
}

/// An owned `llama_model`.
#[derive(Debug)]
pub struct Model {
    raw: NonNull<sys::llama_model>,
    vocab: NonNull<sys::llama_vocab>,
    /// The file's matrix types ([`super::gguf::GgufInfo::matrix_types`]); `None` when
    /// its header could not be read a second time.
    matrix_types: Option<BTreeSet<u32>>,
}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `llama_model_load_from_file`, is freed exactly once here,
        // and no context can outlive it because contexts borrow the model.
        unsafe { sys::llama_model_free(self.raw.as_ptr()) };
    }
}

/// Hands llama.cpp's loading progress to the [`LoadProgress`] behind `data`;
/// returning true tells llama.cpp to go on.
extern "C" fn report_progress(progress: f32, data: *mut c_void) -> bool {
    // SAFETY: `data` is the `&LoadProgress` that `Model::load` passed as the
    // callback's user data; it outlives the load call, the only time this runs.
    let report = unsafe { &*(data as *const LoadProgress) };
    // A panic must not unwind into C; a failed report does not stop the load.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        (report.0)(progress.clamp(0.0, 1.0))
    }));
    true
}

impl Model {
    /// Loads a GGUF file.
    pub fn load(path: &Path, params: &ModelParams) -> Result<Model, LoadError> {
        super::init();
        if params.gpu_layers < -1 {
            let message = "must be -1 (all) or a layer count";
            return Err(LoadError::Param(InvalidParam::new("gpu_layers", message)));
        }
        if !path.is_file() {
            return Err(LoadError::NotFound(path.display().to_string()));
        }
        let gpus = super::devices::devices()
            .iter()
            .filter(|d| d.is_gpu())
            .count();
        let offloading = params.gpu_layers != 0 && super::supports_gpu_offload();
        let max_devices = super::devices::max_devices();
        params
            .split
            .check(offloading, gpus, max_devices)
            .map_err(LoadError::Param)?;
        // llama.cpp reads `max_devices` shares; the rest are 0.
        let mut shares = params.split.tensor_split.clone();
        shares.resize(max_devices, 0.0);
        let c_path = path
            .to_str()
            .and_then(|p| CString::new(p).ok())
            .ok_or_else(|| LoadError::InvalidPath(path.display().to_string()))?;
        // SAFETY: returns a plain struct of defaults; no pointers are dereferenced.
        let mut raw_params = unsafe { sys::llama_model_default_params() };
        raw_params.n_gpu_layers = if params.gpu_layers == -1 {
            i32::MAX
        } else {
            params.gpu_layers
        };
        raw_params.split_mode = params.split.mode.raw();
        raw_params.main_gpu = i32::try_from(params.split.main_gpu).unwrap_or(i32::MAX);
        if !params.split.tensor_split.is_empty() {
            raw_params.tensor_split = shares.as_ptr();
        }
        if let Some(report) = &params.progress {
            raw_params.progress_callback = Some(report_progress);
            raw_params.progress_callback_user_data = report as *const LoadProgress as *mut c_void;
        }
        // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call, and
        // `raw_params` holds either null or valid pointers (defaults, a static callback,
        // `params.progress`, borrowed for the whole call, and `shares`, which holds the
        // `llama_max_devices()` floats llama.cpp reads and outlives the call).
        let raw = unsafe { sys::llama_model_load_from_file(c_path.as_ptr(), raw_params) };
        let raw = NonNull::new(raw).ok_or_else(|| LoadError::Failed(path.display().to_string()))?;
        // SAFETY: `raw` is a valid model; the vocab it returns lives as long as the model.
        let vocab = unsafe { sys::llama_model_get_vocab(raw.as_ptr()) };
        // What llama.cpp loaded, read again for what it does not say: the types of the
        // weights (the header only; the vocabulary's arrays are skipped, not read).
        let matrix_types = super::gguf::read_file(path)
            .ok()
            .map(|info| info.matrix_types);
        match NonNull::new(vocab.cast_mut()) {
            Some(vocab) => Ok(Model {
                raw,
                vocab,
                matrix_types,
            }),
            None => {
                // SAFETY: `raw` is valid and not yet owned by a `Model`, so it is freed once here.
                unsafe { sys::llama_model_free(raw.as_ptr()) };
                Err(LoadError::Failed(format!(
                    "{} has no vocabulary",
                    path.display()
                )))
            }
        }
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::llama_model {
        self.raw.as_ptr()
    }

    pub(crate) fn vocab_ptr(&self) -> *const sys::llama_vocab {
        self.vocab.as_ptr()
    }

    /// The context length the model was trained with.
    pub fn n_ctx_train(&self) -> u32 {
        // SAFETY: `raw` is a valid model for the lifetime of `self`.
        let n = unsafe { sys::llama_model_n_ctx_train(self.raw.as_ptr()) };
        u32::try_from(n).unwrap_or(0)
    }

    /// How many positions back the model's sliding-window layers attend (0: it has
    /// none; every layer sees the whole context).
    pub fn n_swa(&self) -> u32 {
        // SAFETY: `raw` is a valid model for the lifetime of `self`.
        let n = unsafe { sys::llama_model_n_swa(self.raw.as_ptr()) };
        u32::try_from(n).unwrap_or(0)
    }

    /// Whether the last few cached positions of a sequence can always be removed and
    /// decoding go on from there (what speculative decoding does with a rejected
    /// draft): not with a recurrent state. Sliding-window layers can: llama.cpp
    /// reuses a cell for a batch only when the cell is outside the window of the
    /// position right after the sequence's last one (`find_slot`), so the cells that
    /// position attends to outlive a batch decoded after it and then removed
    /// ([`crate::llama::Context::truncate_seq`] checks it all the same, and
    /// llama-server's own test, decoding two tokens and removing one, passes too).
    pub fn can_rewind(&self) -> bool {
        // SAFETY: `raw` is a valid model for the lifetime of `self`; both only read.
        let recurrent = unsafe {
            sys::llama_model_is_recurrent(self.raw.as_ptr())
                || sys::llama_model_is_hybrid(self.raw.as_ptr())
        };
        !recurrent
    }

    /// The ggml element types of the model's weight matrices, `None` if unknown.
    pub fn matrix_types(&self) -> Option<&BTreeSet<u32>> {
        self.matrix_types.as_ref()
    }

    /// The number of repeating layers (the output layer not counted).
    pub fn n_layer(&self) -> u32 {
        // SAFETY: `raw` is a valid model for the lifetime of `self`.
        let n = unsafe { sys::llama_model_n_layer(self.raw.as_ptr()) };
        u32::try_from(n).unwrap_or(0)
    }

    /// The length of the model's output embeddings (what pooling yields).
    pub fn n_embd(&self) -> i32 {
        // SAFETY: `raw` is a valid model for the lifetime of `self`.
        unsafe { sys::llama_model_n_embd_out(self.raw.as_ptr()) }
    }

    pub fn n_vocab(&self) -> i32 {
        // SAFETY: `vocab` is valid for the lifetime of `self`.
        unsafe { sys::llama_vocab_n_tokens(self.vocab.as_ptr()) }
    }

    /// A one-line description such as `llama 135M Q4_1`.
    pub fn description(&self) -> String {
        let mut buf = vec![0u8; 256];
        // SAFETY: `buf` is writable for `buf.len()` bytes and llama.cpp NUL-terminates within it.
        let n =
            unsafe { sys::llama_model_desc(self.raw.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        let n = usize::try_from(n).unwrap_or(0).min(buf.len());
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// The weights' type as llama.cpp names it (`Q4_1`, `Q4_K - Medium`, ...).
    pub fn ftype_name(&self) -> String {
        // SAFETY: `raw` is a loaded model; `llama_ftype_name` returns a pointer to a
        // static NUL-terminated string for any value, "unknown, may not work" included.
        let name = unsafe { sys::llama_ftype_name(sys::llama_model_ftype(self.raw.as_ptr())) };
        if name.is_null() {
            return String::new();
        }
        // SAFETY: non-null, NUL-terminated and static (see above).
        unsafe { std::ffi::CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    }

    /// A GGUF metadata value as text (`general.architecture`, ...); `None` when the
    /// file has no such key.
    pub fn meta_str(&self, key: &str) -> Option<String> {
        let key = CString::new(key).ok()?;
        let mut buf = vec![0u8; 128];
        // Two tries at most: llama.cpp answers with the value's full length (as
        // snprintf does), so the second buffer always holds it.
        for _ in 0..2 {
            // SAFETY: `raw` is valid, `key` is NUL-terminated, and `buf` is writable for
            // `buf.len()` bytes; llama.cpp writes at most that many, NUL included.
            let n = unsafe {
                sys::llama_model_meta_val_str(
                    self.raw.as_ptr(),
                    key.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            let n = usize::try_from(n).ok()?;
            if n < buf.len() {
                buf.truncate(n);
                return String::from_utf8(buf).ok();
            }
            buf = vec![0u8; n + 1];
        }
        None
    }

    /// The size of one attention head's keys: GGUF `<arch>.attention.key_length` where
    /// the file sets it (Gemma 3 does: 256, not n_embd / n_head), else n_embd / n_head.
    pub fn head_dim(&self) -> Option<u32> {
        let explicit = self
            .meta_str("general.architecture")
            .and_then(|arch| self.meta_str(&format!("{arch}.attention.key_length")))
            .and_then(|value| value.trim().parse::<u32>().ok());
        if explicit.is_some() {
            return explicit;
        }
        // SAFETY: `raw` is a valid model for the lifetime of `self`.
        let (embd, heads) = unsafe {
            (
                sys::llama_model_n_embd(self.raw.as_ptr()),
                sys::llama_model_n_head(self.raw.as_ptr()),
            )
        };
        let (embd, heads) = (u32::try_from(embd).ok()?, u32::try_from(heads).ok()?);
        (heads > 0).then(|| embd / heads)
    }

    /// Whether `token` ends a generation (end of sequence, end of turn, ...).
    pub fn is_eog(&self, token: Token) -> bool {
        // SAFETY: `vocab` is valid; llama.cpp checks the token id against its own tables.
        unsafe { sys::llama_vocab_is_eog(self.vocab.as_ptr(), token) }
    }

    /// Whether the tokenizer expects a beginning-of-sequence token in front of a prompt.
    pub fn adds_bos(&self) -> bool {
        // SAFETY: `vocab` is valid for the lifetime of `self`.
        unsafe { sys::llama_vocab_get_add_bos(self.vocab.as_ptr()) }
    }

    /// Whether the tokenizer appends an end-of-sequence token to a prompt.
    pub fn adds_eos(&self) -> bool {
        // SAFETY: `vocab` is valid for the lifetime of `self`.
        unsafe { sys::llama_vocab_get_add_eos(self.vocab.as_ptr()) }
    }

    /// Whether the tokenizer puts a separator token between two texts of a pair
    /// (BERT-style rerankers).
    pub fn adds_sep(&self) -> bool {
        // SAFETY: `vocab` is valid for the lifetime of `self`.
        unsafe { sys::llama_vocab_get_add_sep(self.vocab.as_ptr()) }
    }

    /// The end-of-sequence token, else the separator (a BERT vocabulary has no
    /// EOS); `None` where the model has neither.
    pub fn eos_or_sep(&self) -> Option<Token> {
        // SAFETY: `vocab` is valid for the lifetime of `self`.
        let (eos, sep) = unsafe {
            (
                sys::llama_vocab_eos(self.vocab.as_ptr()),
                sys::llama_vocab_sep(self.vocab.as_ptr()),
            )
        };
        [eos, sep]
            .into_iter()
            .find(|&t| t >= 0 && t < self.n_vocab())
    }

    /// The separator token, `None` where the model has none.
    pub fn sep(&self) -> Option<Token> {
        // SAFETY: `vocab` is valid for the lifetime of `self`.
        let sep = unsafe { sys::llama_vocab_sep(self.vocab.as_ptr()) };
        (sep >= 0 && sep < self.n_vocab()).then_some(sep)
    }

    /// How many scores a reranker's classification head gives (1 without one).
    pub fn n_cls_out(&self) -> u32 {
        // SAFETY: `raw` is a valid model for the lifetime of `self`.
        unsafe { sys::llama_model_n_cls_out(self.raw.as_ptr()) }
    }

    /// Whether the tokenizer is byte-level BPE or SentencePiece (the kinds whose
    /// special-token fragments are tokenized independently of each other).
    pub fn fragments_independent(&self) -> bool {
        // SAFETY: `vocab` is valid for the lifetime of `self`.
        let kind = unsafe { sys::llama_vocab_type(self.vocab.as_ptr()) };
        kind == sys::LLAMA_VOCAB_TYPE_BPE || kind == sys::LLAMA_VOCAB_TYPE_SPM
    }

    /// Whether `token` is one the tokenizer matches in text before anything else
    /// (control or user-defined), without whitespace stripping around it.
    pub fn is_special_fragment(&self, token: Token) -> bool {
        if token < 0 || token >= self.n_vocab() {
            return false;
        }
        // SAFETY: `vocab` is valid and `token` is in range (checked above).
        let attr = unsafe { sys::llama_vocab_get_attr(self.vocab.as_ptr(), token) };
        let special = sys::LLAMA_TOKEN_ATTR_CONTROL | sys::LLAMA_TOKEN_ATTR_USER_DEFINED;
        let strip = sys::LLAMA_TOKEN_ATTR_LSTRIP | sys::LLAMA_TOKEN_ATTR_RSTRIP;
        attr & special != 0 && attr & strip == 0
    }

    /// The length in bytes of the longest special token's text.
    pub fn longest_special_text(&self) -> usize {
        (0..self.n_vocab())
            .filter(|&t| {
                // SAFETY: `vocab` is valid and `t` is in range.
                let attr = unsafe { sys::llama_vocab_get_attr(self.vocab.as_ptr(), t) };
                attr & (sys::LLAMA_TOKEN_ATTR_CONTROL | sys::LLAMA_TOKEN_ATTR_USER_DEFINED) != 0
            })
            .map(|t| self.piece_bytes(t, true).map_or(0, |p| p.len()))
            .max()
            .unwrap_or(0)
    }

    /// The control tokens whose text `keep` accepts, in id order: the in-process
    /// backend decodes these as text (a chat format's markers) and hides the rest.
    pub fn control_tokens(&self, keep: impl Fn(&str) -> bool) -> Vec<Token> {
        (0..self.n_vocab())
            .filter(|&t| {
                // SAFETY: `vocab` is valid and `t` is in range.
                let attr = unsafe { sys::llama_vocab_get_attr(self.vocab.as_ptr(), t) };
                attr & sys::LLAMA_TOKEN_ATTR_CONTROL != 0
            })
            .filter(|&t| {
                self.piece_bytes(t, true)
                    .is_ok_and(|p| std::str::from_utf8(&p).is_ok_and(&keep))
            })
            .collect()
    }

    /// The text of the beginning-of-sequence token, empty when the model has none.
    pub fn bos_text(&self) -> String {
        // SAFETY: `vocab` is valid for the lifetime of `self`.
        let bos = unsafe { sys::llama_vocab_bos(self.vocab.as_ptr()) };
        self.special_text(bos)
    }

    /// The text of the end-of-sequence token, empty when the model has none.
    pub fn eos_text(&self) -> String {
        // SAFETY: `vocab` is valid for the lifetime of `self`.
        let eos = unsafe { sys::llama_vocab_eos(self.vocab.as_ptr()) };
        self.special_text(eos)
    }

    fn special_text(&self, token: Token) -> String {
        if token < 0 || token >= self.n_vocab() {
            return String::new();
        }
        self.piece_bytes(token, true)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The fill-in-the-middle tokens (`None` each where the model has none), for
    /// llama-server's `/infill`.
    pub fn fim_tokens(&self) -> FimTokens {
        let vocab = self.vocab.as_ptr();
        let known = |token: Token| (token >= 0 && token < self.n_vocab()).then_some(token);
        // SAFETY: `vocab` is valid for the lifetime of `self`; these only read ids.
        unsafe {
            FimTokens {
                pre: known(sys::llama_vocab_fim_pre(vocab)),
                suf: known(sys::llama_vocab_fim_suf(vocab)),
                mid: known(sys::llama_vocab_fim_mid(vocab)),
                rep: known(sys::llama_vocab_fim_rep(vocab)),
                sep: known(sys::llama_vocab_fim_sep(vocab)),
            }
        }
    }

    /// The beginning-of-sequence token when the model adds one to a prompt.
    pub fn bos_added(&self) -> Option<Token> {
        // SAFETY: `vocab` is valid for the lifetime of `self`.
        let bos = unsafe { sys::llama_vocab_bos(self.vocab.as_ptr()) };
        (self.adds_bos() && bos >= 0 && bos < self.n_vocab()).then_some(bos)
    }

    /// Tokenizes `text`, parsing special-token markup such as `<|im_start|>`.
    pub fn tokenize(&self, text: &str, add_bos: bool) -> Result<Vec<Token>, TokenizeError> {
        self.tokenize_with(text, add_bos, true)
    }

    /// Tokenizes `text` as plain text: markup such as `<|fim_prefix|>` in it is
    /// text, never the special token (what a user's code must be).
    pub fn tokenize_plain(&self, text: &str) -> Result<Vec<Token>, TokenizeError> {
        self.tokenize_with(text, false, false)
    }

    fn tokenize_with(
        &self,
        text: &str,
        add_bos: bool,
        special: bool,
    ) -> Result<Vec<Token>, TokenizeError> {
        let len = i32::try_from(text.len()).map_err(|_| TokenizeError::TooLong(text.len()))?;
        let mut tokens: Vec<Token> = vec![0; text.len() + 2];
        let mut n = self.tokenize_into(text, len, (add_bos, special), &mut tokens)?;
        if n < 0 {
            tokens.resize(n.unsigned_abs() as usize, 0);
            n = self.tokenize_into(text, len, (add_bos, special), &mut tokens)?;
        }
        let n = usize::try_from(n).map_err(|_| TokenizeError::Failed(n))?;
        tokens.truncate(n);
        Ok(tokens)
    }

    fn tokenize_into(
        &self,
        text: &str,
        len: i32,
        (add_bos, special): (bool, bool),
        out: &mut [Token],
    ) -> Result<i32, TokenizeError> {
        let cap = i32::try_from(out.len()).map_err(|_| TokenizeError::TooLong(out.len()))?;
        // SAFETY: `text` is readable for `len` bytes (no NUL needed: the length is passed),
        // `out` is writable for `cap` tokens, and `vocab` is valid.
        let n = unsafe {
            sys::llama_tokenize(
                self.vocab.as_ptr(),
                text.as_ptr().cast::<c_char>(),
                len,
                out.as_mut_ptr(),
                cap,
                add_bos,
                special,
            )
        };
        if n == i32::MIN {
            return Err(TokenizeError::Failed(n));
        }
        Ok(n)
    }

    /// The bytes of one token (not necessarily valid UTF-8 on their own).
    /// Special tokens are rendered only when `special` is true.
    pub fn piece_bytes(&self, token: Token, special: bool) -> Result<Vec<u8>, TokenizeError> {
        let mut buf = vec![0u8; 32];
        let mut n = self.piece_into(token, special, &mut buf);
        if n < 0 {
            buf.resize(n.unsigned_abs() as usize, 0);
            n = self.piece_into(token, special, &mut buf);
        }
        let n = usize::try_from(n).map_err(|_| TokenizeError::Failed(n))?;
        buf.truncate(n);
        Ok(buf)
    }

    fn piece_into(&self, token: Token, special: bool, buf: &mut [u8]) -> i32 {
        let len = i32::try_from(buf.len()).unwrap_or(i32::MAX);
        // SAFETY: `buf` is writable for `len` bytes; llama.cpp writes at most `len` bytes
        // and returns the negated size needed when the buffer is too small.
        unsafe {
            sys::llama_token_to_piece(
                self.vocab.as_ptr(),
                token,
                buf.as_mut_ptr().cast(),
                len,
                0,
                special,
            )
        }
    }

    /// The Jinja chat template stored in the GGUF file, if any.
    pub fn chat_template(&self) -> Option<String> {
        self.named_template(None)
    }

    /// A reranker's prompt (`tokenizer.chat_template.rerank`), if the GGUF file
    /// has one: text with `{query}` and `{document}` to fill in.
    pub fn rerank_template(&self) -> Option<String> {
        self.named_template(Some(c"rerank"))
    }

    /// The chat template called `name` in the GGUF file (`None`: the default one).
    fn named_template(&self, name: Option<&CStr>) -> Option<String> {
        let name = name.map_or(std::ptr::null(), CStr::as_ptr);
        // SAFETY: `name` is null (the default template) or a NUL-terminated string that
        // outlives the call; the returned pointer is owned by the model's metadata (or
        // null) and valid while the model lives.
        let tmpl = unsafe { sys::llama_model_chat_template(self.raw.as_ptr(), name) };
        if tmpl.is_null() {
            return None;
        }
        // SAFETY: non-null, NUL-terminated, and copied out at once.
        Some(
            unsafe { CStr::from_ptr(tmpl) }
                .to_string_lossy()
                .into_owned(),
        )
    }
}

/// The names of llama.cpp's built-in chat templates (`chatml`, `llama3`, `mistral-v7`,
/// …), the names `--chat-template` takes as llama-server does.
pub fn builtin_template_names() -> Vec<String> {
    // SAFETY: a null array with length 0 only asks for the count.
    let count = unsafe { sys::llama_chat_builtin_templates(std::ptr::null_mut(), 0) };
    let Ok(count) = usize::try_from(count) else {
        return Vec::new();
    };
    let mut names: Vec<*const std::os::raw::c_char> = vec![std::ptr::null(); count];
    // SAFETY: `names` has room for `count` pointers; llama.cpp writes at most `len`
    // of them, each to a static NUL-terminated name.
    let written = unsafe { sys::llama_chat_builtin_templates(names.as_mut_ptr(), names.len()) };
    let written = usize::try_from(written).unwrap_or(0).min(count);
    names[..written]
        .iter()
        .filter(|name| !name.is_null())
        .map(|&name| {
            // SAFETY: non-null pointers to static NUL-terminated strings (see above).
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// Renders messages with llama.cpp's built-in (non-Jinja) template heuristics.
/// `template` is a template source or a name such as `chatml`.
pub fn apply_builtin_template(
    template: &str,
    messages: &[(&str, &str)],
    add_generation_prompt: bool,
) -> Result<String, TemplateError> {
    let to_c = |s: &str| CString::new(s).map_err(|_| TemplateError::Failed("NUL in text".into()));
    let tmpl = to_c(template)?;
    let owned: Vec<(CString, CString)> = messages
        .iter()
        .map(|(role, content)| Ok((to_c(role)?, to_c(content)?)))
        .collect::<Result<_, TemplateError>>()?;
    let chat: Vec<sys::llama_chat_message> = owned
        .iter()
        .map(|(role, content)| sys::llama_chat_message {
            role: role.as_ptr(),
            content: content.as_ptr(),
        })
        .collect();
    let total: usize = messages.iter().map(|(r, c)| r.len() + c.len()).sum();
    let mut buf = vec![0u8; total * 2 + 256];
    let mut n = builtin_into(&tmpl, &chat, add_generation_prompt, &mut buf)?;
    if n > buf.len() {
        buf.resize(n, 0);
        n = builtin_into(&tmpl, &chat, add_generation_prompt, &mut buf)?;
    }
    buf.truncate(n.min(buf.len()));
    String::from_utf8(buf).map_err(|_| TemplateError::Failed("template output is not UTF-8".into()))
}

fn builtin_into(
    tmpl: &CStr,
    chat: &[sys::llama_chat_message],
    add_ass: bool,
    buf: &mut [u8],
) -> Result<usize, TemplateError> {
    let len =
        i32::try_from(buf.len()).map_err(|_| TemplateError::Failed("prompt too long".into()))?;
    // SAFETY: `tmpl` and every role/content pointer in `chat` are NUL-terminated strings
    // owned by the caller for the duration of the call; `buf` is writable for `len` bytes.
    let n = unsafe {
        sys::llama_chat_apply_template(
            tmpl.as_ptr(),
            chat.as_ptr(),
            chat.len(),
            add_ass,
            buf.as_mut_ptr().cast(),
            len,
        )
    };
    usize::try_from(n)
        .map_err(|_| TemplateError::Failed("template not supported by llama.cpp".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_chatml_fallback_renders_roles_and_generation_prompt() {
        let out = apply_builtin_template("chatml", &[("user", "hi")], true).unwrap();
        assert_eq!(
            out,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn unknown_builtin_template_is_an_error() {
        let out = apply_builtin_template("no-such-template-name", &[("user", "hi")], true);
        assert!(out.is_err());
    }

    #[test]
    fn metadata_and_head_size_of_the_test_model() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        let params = ModelParams {
            gpu_layers: 0,
            progress: Some(LoadProgress::new(move |p| record.lock().unwrap().push(p))),
            ..Default::default()
        };
        let model =
            Model::load(&crate::util::dirs::test_models::test_model_path(), &params).unwrap();
        // Loading reported its progress, rising to the end.
        let seen = seen.lock().unwrap().clone();
        assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
        assert_eq!(seen.last(), Some(&1.0), "{seen:?}");
        assert_eq!(
            model.meta_str("general.architecture").as_deref(),
            Some("llama")
        );
        assert_eq!(model.meta_str("no.such.key"), None);
        // A value longer than the first buffer comes back whole.
        let template = model.meta_str("tokenizer.chat_template").unwrap();
        assert!(template.len() > 128, "{}", template.len());
        assert_eq!(Some(template), model.chat_template());
        // SmolLM2-135M: 576 wide with 9 heads, and no explicit key length.
        assert_eq!(model.meta_str("llama.attention.key_length"), None);
        assert_eq!(model.head_dim(), Some(64));
        // 30 layers, as the GGUF's own block count says.
        assert_eq!(model.meta_str("llama.block_count").as_deref(), Some("30"));
        assert_eq!(model.n_layer(), 30);
    }

    #[test]
    fn missing_model_file_is_not_found() {
        let err = Model::load(
            Path::new("/nonexistent/model.gguf"),
            &ModelParams::default(),
        );
        assert!(matches!(err, Err(LoadError::NotFound(_))));
    }

    #[test]
    fn gpu_layers_below_minus_one_are_rejected_before_c() {
        let params = ModelParams {
            gpu_layers: -2,
            progress: None,
            ..Default::default()
        };
        let err = Model::load(Path::new("/nonexistent/model.gguf"), &params);
        assert!(matches!(err, Err(LoadError::Param(_))));
    }
}

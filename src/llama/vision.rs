//! libmtmd: a vision projector (`--mmproj`) that turns an image into embeddings
//! the model reads in its prompt.
//!
//! [`Vision`] owns an `mtmd_context`, made for one [`Model`] and used on the
//! generation thread only, as the model's context is. An image goes in already
//! decoded to RGB (by `crate::core::image`, in Rust, under its limits), never as
//! a file: libmtmd's own image decoder is not used. [`Vision::pieces`] gives the
//! tokens the projector wraps an image in (`<start_of_image>` and the like) and
//! the image chunk itself; [`Vision::eval`] encodes that chunk and decodes its
//! embeddings into a sequence of the context at a position.

use std::ffi::CString;
use std::marker::PhantomData;
use std::path::Path;
use std::ptr::NonNull;

use llama_cpp_sys_2 as sys;

use super::{Context, Model, Token};

/// Why a projector did not load or an image did not go in.
#[derive(Debug, Clone, PartialEq)]
pub enum VisionError {
    /// The projector file did not load (missing, corrupt, or not for this model).
    Load(String),
    /// The projector reads no images (an audio-only one).
    NoVision,
    /// libmtmd refused the image (its preprocessing failed).
    Image(String),
    /// Encoding the image or decoding its embeddings failed.
    Eval(String),
}

impl std::fmt::Display for VisionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VisionError::Load(why) => write!(f, "the vision projector did not load: {why}"),
            VisionError::NoVision => write!(f, "the projector reads no images"),
            VisionError::Image(why) => write!(f, "the projector refused the image: {why}"),
            VisionError::Eval(why) => write!(f, "the image did not decode into the context: {why}"),
        }
    }
}

impl std::error::Error for VisionError {}

/// A vision projector loaded for one model.
pub struct Vision<'m> {
    raw: NonNull<sys::mtmd_context>,
    _model: PhantomData<&'m Model>,
}

impl Drop for Vision<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `mtmd_init_from_file` and is freed once, here.
        unsafe { sys::mtmd_free(self.raw.as_ptr()) };
    }
}

/// What an image becomes in the prompt: the projector's own tokens around it,
/// and the image.
pub enum Piece {
    Text(Vec<Token>),
    Image(ImageChunk),
}

/// An image chunk, owned: its tokens are embeddings that [`Vision::eval`] makes.
pub struct ImageChunk {
    raw: NonNull<sys::mtmd_input_chunk>,
    n_tokens: usize,
}

impl Drop for ImageChunk {
    fn drop(&mut self) {
        // SAFETY: `raw` is our own copy (`mtmd_input_chunk_copy`), freed once, here.
        unsafe { sys::mtmd_input_chunk_free(self.raw.as_ptr()) };
    }
}

impl ImageChunk {
    /// The positions' worth of embeddings the image takes in the prompt.
    pub fn n_tokens(&self) -> usize {
        self.n_tokens
    }
}

/// An owned `mtmd_input_chunks` list, freed on every path.
struct Chunks(NonNull<sys::mtmd_input_chunks>);

impl Drop for Chunks {
    fn drop(&mut self) {
        // SAFETY: made by `mtmd_input_chunks_init`, freed once, here.
        unsafe { sys::mtmd_input_chunks_free(self.0.as_ptr()) };
    }
}

/// An owned `mtmd_bitmap`, freed on every path.
struct Bitmap(NonNull<sys::mtmd_bitmap>);

impl Drop for Bitmap {
    fn drop(&mut self) {
        // SAFETY: made by `mtmd_bitmap_init`, freed once, here.
        unsafe { sys::mtmd_bitmap_free(self.0.as_ptr()) };
    }
}

impl<'m> Vision<'m> {
    /// Loads the projector at `path` for `model`, encoding on `threads` threads
    /// (and on the GPU when `use_gpu` and this build has one).
    pub fn load(
        path: &Path,
        model: &'m Model,
        threads: i32,
        use_gpu: bool,
    ) -> Result<Vision<'m>, VisionError> {
        if !path.is_file() {
            return Err(VisionError::Load(format!(
                "{}: no such file",
                path.display()
            )));
        }
        let c_path = CString::new(path.to_string_lossy().as_bytes())
            .map_err(|_| VisionError::Load("the path holds a NUL byte".into()))?;
        // SAFETY: plain function pointers to `forward_log`, valid for the whole program.
        unsafe { sys::mtmd_helper_log_set(Some(super::forward_log), std::ptr::null_mut()) };
        // SAFETY: returns a plain struct of defaults.
        let mut params = unsafe { sys::mtmd_context_params_default() };
        params.use_gpu = use_gpu;
        params.print_timings = false;
        params.n_threads = threads.max(1);
        // libmtmd's default and llama-server's: the warm-up reserves the encoder's
        // graph (no image is encoded) and is where flash attention's auto is
        // decided; without it the projector never uses flash attention.
        params.warmup = true;
        // SAFETY: `c_path` is NUL-terminated and outlives the call; `model` is a live
        // model that outlives the context (`'m`); `params` is a valid struct by value.
        let raw = unsafe { sys::mtmd_init_from_file(c_path.as_ptr(), model.as_ptr(), params) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            VisionError::Load(format!(
                "{}: not a projector libmtmd reads, or not for this model (llama.cpp's log, --debug llm, says why)",
                path.display()
            ))
        })?;
        let vision = Vision {
            raw,
            _model: PhantomData,
        };
        // SAFETY: `raw` is a live context.
        if !unsafe { sys::mtmd_support_vision(vision.raw.as_ptr()) } {
            return Err(VisionError::NoVision);
        }
        Ok(vision)
    }

    /// Whether the model places an image's embeddings with M-RoPE (Qwen2-VL and
    /// its successors): their positions are not one per token.
    pub fn uses_mrope(&self) -> bool {
        // SAFETY: `raw` is a live context.
        unsafe { sys::mtmd_decode_use_mrope(self.raw.as_ptr()) }
    }

    /// The pieces an RGB image (`width` x `height`, 3 bytes a pixel) becomes:
    /// the projector's text tokens around it and the image chunk, which libmtmd
    /// caches under `id` (the file's SHA-256). Long because each C object it
    /// makes (bitmap, chunk list, copied chunks) is wrapped and checked in turn.
    pub fn pieces(
        &self,
        rgb: &[u8],
        width: u32,
        height: u32,
        id: &str,
    ) -> Result<Vec<Piece>, VisionError> {
        if rgb.len() as u64 != u64::from(width) * u64::from(height) * 3 || rgb.is_empty() {
            return Err(VisionError::Image(format!(
                "{} bytes for {width}x{height} RGB pixels",
                rgb.len()
            )));
        }
        // SAFETY: `rgb` holds width * height * 3 bytes (checked above); libmtmd copies them.
        let bitmap = unsafe { sys::mtmd_bitmap_init(width, height, rgb.as_ptr()) };
        let bitmap =
            Bitmap(NonNull::new(bitmap).ok_or_else(|| VisionError::Image("out of memory".into()))?);
        let c_id = CString::new(id).map_err(|_| VisionError::Image("an id with NUL".into()))?;
        // SAFETY: a live bitmap; libmtmd copies the id.
        unsafe { sys::mtmd_bitmap_set_id(bitmap.0.as_ptr(), c_id.as_ptr()) };
        // SAFETY: no preconditions.
        let chunks = unsafe { sys::mtmd_input_chunks_init() };
        let chunks =
            Chunks(NonNull::new(chunks).ok_or_else(|| VisionError::Image("out of memory".into()))?);
        // SAFETY: returns a pointer to a static NUL-terminated string.
        let marker = unsafe { sys::mtmd_default_marker() };
        // SAFETY: as above; read at once.
        let marker_len = unsafe { std::ffi::CStr::from_ptr(marker) }.to_bytes().len();
        let text = sys::mtmd_input_text {
            text: marker,
            text_len: marker_len,
            add_special: false,
            parse_special: true,
        };
        let bitmaps = [bitmap.0.as_ptr() as *const sys::mtmd_bitmap];
        // SAFETY: a live context, an empty chunk list, a text holding exactly one
        // marker, and one live bitmap, all outliving the call.
        let code = unsafe {
            sys::mtmd_tokenize(
                self.raw.as_ptr(),
                chunks.0.as_ptr(),
                &text,
                bitmaps.as_ptr(),
                1,
            )
        };
        if code != 0 {
            return Err(VisionError::Image(match code {
                1 => "the marker and the image did not pair".to_string(),
                2 => "its preprocessing failed".to_string(),
                _ => format!("mtmd_tokenize returned {code}"),
            }));
        }
        // SAFETY: a live chunk list.
        let n = unsafe { sys::mtmd_input_chunks_size(chunks.0.as_ptr()) };
        let mut pieces = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: `i` is within the list; the chunk lives as long as the list.
            let chunk = unsafe { sys::mtmd_input_chunks_get(chunks.0.as_ptr(), i) };
            if chunk.is_null() {
                return Err(VisionError::Image("a missing chunk".into()));
            }
            // SAFETY: a live chunk.
            let kind = unsafe { sys::mtmd_input_chunk_get_type(chunk) };
            match kind {
                sys::MTMD_INPUT_CHUNK_TYPE_TEXT => {
                    let mut len = 0usize;
                    // SAFETY: a live text chunk; the pointer covers `len` tokens and is
                    // copied before the list is freed.
                    let tokens = unsafe { sys::mtmd_input_chunk_get_tokens_text(chunk, &mut len) };
                    let tokens = if tokens.is_null() || len == 0 {
                        Vec::new()
                    } else {
                        // SAFETY: as above.
                        unsafe { std::slice::from_raw_parts(tokens, len) }.to_vec()
                    };
                    pieces.push(Piece::Text(tokens));
                }
                sys::MTMD_INPUT_CHUNK_TYPE_IMAGE => {
                    // SAFETY: a live chunk; the copy is ours to free.
                    let copy = unsafe { sys::mtmd_input_chunk_copy(chunk) };
                    let raw = NonNull::new(copy)
                        .ok_or_else(|| VisionError::Image("out of memory".into()))?;
                    // SAFETY: a live chunk (our copy).
                    let n_tokens = unsafe { sys::mtmd_input_chunk_get_n_tokens(raw.as_ptr()) };
                    pieces.push(Piece::Image(ImageChunk { raw, n_tokens }));
                }
                _ => return Err(VisionError::Image("an audio chunk for an image".into())),
            }
        }
        Ok(pieces)
    }

    /// Encodes `chunk` and decodes its embeddings into sequence `seq` of `ctx`
    /// from position `n_past`, `n_batch` at a time; returns the position after it.
    pub fn eval(
        &mut self,
        ctx: &mut Context<'_>,
        chunk: &ImageChunk,
        n_past: usize,
        seq: i32,
    ) -> Result<usize, VisionError> {
        let n_batch = ctx.n_batch().max(1) as i32;
        // SAFETY: a live projector and a live image chunk.
        let whole =
            unsafe { sys::mtmd_decode_use_non_causal(self.raw.as_ptr(), chunk.raw.as_ptr()) };
        // SAFETY: a live context.
        let n_ubatch = unsafe { sys::llama_n_ubatch(ctx.as_ptr()) } as usize;
        if whole && chunk.n_tokens > n_ubatch {
            // libmtmd would fail with a bare code: attention over an image that
            // sees both ways (Gemma 3) needs the whole image in one physical batch.
            return Err(VisionError::Eval(format!(
                "this projector decodes an image's {} tokens in one physical batch: --ubatch must be at least {} (it is {n_ubatch})",
                chunk.n_tokens, chunk.n_tokens
            )));
        }
        let mut new_n_past: sys::llama_pos = 0;
        let n_past = i32::try_from(n_past).map_err(|_| VisionError::Eval("position".into()))?;
        // The encoder computes on threads of its own: the context's must not spin
        // beside them (the embeddings' decode wakes them).
        ctx.rest_threads();
        // SAFETY: a live projector and context (the context's model is the one the
        // projector was made for: both belong to the same generation thread's
        // worker); `chunk` is a live image chunk; `new_n_past` outlives the call.
        let code = unsafe {
            sys::mtmd_helper_eval_chunk_single(
                self.raw.as_ptr(),
                ctx.as_ptr(),
                chunk.raw.as_ptr(),
                n_past,
                seq,
                n_batch,
                false,
                &mut new_n_past,
            )
        };
        if code != 0 {
            return Err(VisionError::Eval(format!(
                "libmtmd returned {code} (llama.cpp's log, --debug llm, says why)"
            )));
        }
        Ok(new_n_past.max(0) as usize)
    }
}

//! The sampling chain: penalties, top-k, top-p, min-p, temperature, then
//! a seeded random draw, or greedy at temperature 0.
//!
//! A [`Sampler`] reads the logits of the last decode of a [`Context`]; it keeps the
//! penalty history, so one sampler serves one generation. A grammar stays out of
//! the chain: it checks the chain's pick and masks the vocabulary only when it
//! refuses it; a lazy grammar watches for its trigger in a bounded window.

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::collections::VecDeque;
use std::ffi::{CStr, CString};
use std::ptr::NonNull;

use llama_cpp_sys_2 as sys;

use super::context::Context;
use super::error::{InvalidParam, SamplerError};
use super::model::{Model, Token};

mod logits;
pub use logits::log_probs;
use logits::*;

/// Sampling settings; [`SamplerParams::validate`] checks every number.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerParams {
    /// 0 (or less) means greedy.
    pub temperature: f32,
    /// 0 disables top-k.
    pub top_k: i32,
    /// 1 disables top-p.
    pub top_p: f32,
    /// 0 disables min-p.
    pub min_p: f32,
    /// 1 disables the repetition penalty.
    pub repeat_penalty: f32,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub penalty_last_n: i32,
    pub seed: u32,
    /// A GBNF grammar (root rule `root`) that constrains the output.
    pub grammar: Option<String>,
    /// Makes the grammar lazy: it constrains nothing until this text appears in the
    /// output, then holds from the text's first byte on, as llama.cpp's lazy grammars
    /// do. The watch costs one piece and the trigger's length per token, however long
    /// the reply. `None`: the grammar holds from the start.
    pub grammar_trigger: Option<String>,
    /// Added to these tokens' logits before any other stage (`-inf` bans one).
    pub logit_bias: Vec<(Token, f32)>,
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams {
            temperature: 0.7,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            penalty_last_n: 64,
            seed: 0xFFFF_FFFF,
            grammar: None,
            grammar_trigger: None,
            logit_bias: Vec::new(),
        }
    }
}

impl SamplerParams {
    pub fn validate(&self) -> Result<(), InvalidParam> {
        let finite = [
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("repeat_penalty", self.repeat_penalty),
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ];
        if let Some((name, _)) = finite.iter().find(|(_, v)| !v.is_finite()) {
            return Err(InvalidParam::new(name, "must be a finite number"));
        }
        check(
            "temperature",
            (0.0..=100.0).contains(&self.temperature.max(0.0)),
        )?;
        check("top_k", self.top_k >= 0)?;
        check(
            "logit_bias",
            self.logit_bias
                .iter()
                .all(|&(token, bias)| token >= 0 && !bias.is_nan() && bias != f32::INFINITY),
        )?;
        check("top_p", (0.0..=1.0).contains(&self.top_p))?;
        check("min_p", (0.0..=1.0).contains(&self.min_p))?;
        check(
            "repeat_penalty",
            (0.0..=10.0).contains(&self.repeat_penalty),
        )?;
        check(
            "frequency_penalty",
            (-2.0..=2.0).contains(&self.frequency_penalty),
        )?;
        check(
            "presence_penalty",
            (-2.0..=2.0).contains(&self.presence_penalty),
        )?;
        check(
            "penalty_last_n",
            (-1..=1 << 20).contains(&self.penalty_last_n),
        )
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    fn penalties_on(&self) -> bool {
        self.repeat_penalty != 1.0 || self.frequency_penalty != 0.0 || self.presence_penalty != 0.0
    }
}

fn check(name: &'static str, ok: bool) -> Result<(), InvalidParam> {
    if ok {
        Ok(())
    } else {
        Err(InvalidParam::new(name, "out of range"))
    }
}

/// One llama.cpp sampler this side owns (a chain, or a grammar kept out of it).
#[derive(Debug)]
struct Stage(NonNull<sys::llama_sampler>);

// SAFETY: a `llama_sampler` has no thread affinity: it is heap state llama.cpp
// touches only inside calls on it, and a `Stage` is owned by one `Sampler`, used by
// one thread at a time (the generation thread, or the sampling helper it hands the
// whole sampler to and takes it back from). A grammar stage reads the model's
// vocabulary, which is immutable once loaded (llama-server tokenizes on its HTTP
// threads while its loop samples); the generation thread joins the helper before
// the model is freed.
unsafe impl Send for Stage {}

impl Drop for Stage {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from one of llama.cpp's constructors and is owned here
        // alone (a chain frees the stages added to it, exactly once).
        unsafe { sys::llama_sampler_free(self.0.as_ptr()) };
    }
}

impl Stage {
    fn new(raw: *mut sys::llama_sampler, what: &'static str) -> Result<Stage, SamplerError> {
        NonNull::new(raw)
            .map(Stage)
            .ok_or(SamplerError::Failed(what))
    }

    /// A grammar that constrains from its first token (llama.cpp parses it here).
    fn grammar(model: &Model, grammar: &CStr) -> Result<Stage, SamplerError> {
        let root = c"root";
        // SAFETY: the vocab is valid while `model` lives; both strings are NUL-terminated
        // and outlive the call (llama.cpp copies what it keeps).
        let raw = unsafe {
            sys::llama_sampler_init_grammar(model.vocab_ptr(), grammar.as_ptr(), root.as_ptr())
        };
        NonNull::new(raw).map(Stage).ok_or_else(|| {
            let text = grammar.to_string_lossy();
            SamplerError::Grammar(text.chars().take(200).collect())
        })
    }

    fn apply(&self, candidates: &mut sys::llama_token_data_array) {
        // SAFETY: `self.0` is a valid sampler; `candidates` points at `size` initialised
        // entries that outlive the call, which the stage rewrites in place.
        unsafe { sys::llama_sampler_apply(self.0.as_ptr(), candidates) };
    }

    /// Whether this stage leaves `token` a chance: its logit is not masked to -inf
    /// when it is the only candidate (what a grammar does to a token it rejects, end
    /// of generation included). One token is checked, not the vocabulary.
    fn allows(&self, token: Token) -> bool {
        let mut data = [sys::llama_token_data {
            id: token,
            logit: 0.0,
            p: 0.0,
        }];
        let mut candidates = sys::llama_token_data_array {
            data: data.as_mut_ptr(),
            size: data.len(),
            selected: -1,
            sorted: false,
        };
        self.apply(&mut candidates);
        data[0].logit != f32::NEG_INFINITY
    }

    /// Records `token` as generated. For a grammar, only a token it
    /// [`Stage::allows`]: llama.cpp's grammar throws (aborting the process) on one
    /// it rejects.
    fn accept(&mut self, token: Token) {
        // SAFETY: `self.0` is a valid sampler and `token` an id of the vocabulary that
        // a grammar stage allows now (every caller checks).
        unsafe { sys::llama_sampler_accept(self.0.as_ptr(), token) };
    }
}

/// The grammar of a request, kept out of the chain, as llama-server keeps it: the
/// chain picks from every candidate, the grammar checks that one pick, and only when
/// it refuses it does the grammar mask the whole vocabulary for a second pick. At
/// temperature 0 that is the very token the masked pick gives; when sampling, the
/// pick is still drawn from the allowed tokens in proportion to their probability.
#[derive(Debug)]
enum Grammar {
    None,
    Waiting(Box<Waiting>),
    Active(Stage),
}

/// A lazy grammar: nothing is constrained until its trigger text appears in the
/// output, then the grammar holds from the trigger's first byte on (llama.cpp's lazy
/// grammars, without their regex over the whole output at every token).
#[derive(Debug)]
struct Waiting {
    grammar: CString,
    /// The grammar parsed and untouched (parsed again only when a start failed).
    fresh: Option<Stage>,
    trigger: Vec<u8>,
    /// The output's last bytes: fewer than the trigger's, or, once the trigger is
    /// found, the text from it on (until it is whole UTF-8).
    tail: Vec<u8>,
    /// The last tokens, oldest first, with their pieces' lengths: the tail is the
    /// end of their pieces (the first may lie partly before it).
    tokens: VecDeque<(Token, usize)>,
    /// The bytes the last token's watch examined (bounded by the trigger's length and
    /// one piece, whatever the length of the reply).
    examined: usize,
}

impl Waiting {
    /// Follows the output over `token`; the grammar, already past the trigger and
    /// whatever followed it in the same token, once the trigger has appeared.
    fn watch(&mut self, model: &Model, token: Token) -> Result<Option<Stage>, SamplerError> {
        let piece = model
            .piece_bytes(token, true)
            .map_err(|_| SamplerError::Failed("grammar trigger: token piece"))?;
        self.tail.extend_from_slice(&piece);
        self.tokens.push_back((token, piece.len()));
        self.examined = self.tail.len();
        let Some(at) = find(&self.tail, &self.trigger) else {
            let keep = self.trigger.len().saturating_sub(1);
            self.drop_front(self.tail.len().saturating_sub(keep));
            return Ok(None);
        };
        self.drop_front(at);
        let text = match std::str::from_utf8(&self.tail) {
            Ok(text) => text.to_string(),
            // A character split between tokens: the next token completes it.
            Err(e) if e.error_len().is_none() => return Ok(None),
            Err(_) => {
                self.drop_front(self.tail.len());
                return Ok(None);
            }
        };
        // The output's own tokens when the trigger starts one (the usual case: a
        // marker starts a token), else the text tokenized again.
        let covered: usize = self.tokens.iter().map(|&(_, len)| len).sum();
        let own =
            (covered == self.tail.len()).then(|| self.tokens.iter().map(|&(t, _)| t).collect());
        self.drop_front(self.tail.len());
        let stage = match self.fresh.take() {
            Some(stage) => stage,
            None => Stage::grammar(model, &self.grammar)?,
        };
        Ok(start(model, stage, &text, own))
    }

    /// Forgets the tail's first `n` bytes, and the tokens wholly before what is left.
    fn drop_front(&mut self, n: usize) {
        self.tail.drain(..n);
        let mut covered: usize = self.tokens.iter().map(|&(_, len)| len).sum();
        while let Some(&(_, len)) = self.tokens.front() {
            if covered - len < self.tail.len() {
                break;
            }
            covered -= len;
            self.tokens.pop_front();
        }
    }
}

/// `stage` advanced over `text` (the trigger and what followed it): over `own`, the
/// output's tokens that spell it, or else token by token as the tokenizer splits it
/// (a grammar state depends on the text alone). `None` when the text does not fit
/// the grammar (the model's own markup, left free, as the output filter then reads
/// it) or does not tokenize back to itself.
fn start(model: &Model, mut stage: Stage, text: &str, own: Option<Vec<Token>>) -> Option<Stage> {
    let tokens = match own {
        Some(tokens) => tokens,
        None => {
            let tokens = model.tokenize(text, false).ok()?;
            let mut pieces = Vec::with_capacity(text.len());
            for &token in &tokens {
                pieces.extend(model.piece_bytes(token, true).ok()?);
            }
            if pieces != text.as_bytes() {
                return None;
            }
            tokens
        }
    };
    for token in tokens {
        if !stage.allows(token) {
            return None;
        }
        stage.accept(token);
    }
    Some(stage)
}

/// The first position of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// An owned sampler chain and the request's grammar.
#[derive(Debug)]
pub struct Sampler {
    pick: Pick,
    grammar: Grammar,
}

/// The chain and what it picks from.
#[derive(Debug)]
struct Pick {
    chain: Stage,
    /// The chain is greedy with no penalties: the token is the first highest logit
    /// (after `biases`), found here without llama.cpp's candidate array (a 12-byte
    /// entry written for every vocabulary entry on every token).
    argmax: bool,
    /// The request's logit biases, one summed entry per token, by token id: what the
    /// chain's bias stage adds, applied by the fast path to the few it names.
    biases: Vec<(Token, f32)>,
    /// The candidate array, kept between tokens.
    candidates: Vec<sys::llama_token_data>,
}

impl Pick {
    /// The chain's pick from `logits`, masked first by `grammar` when given.
    fn pick(&mut self, logits: &[f32], grammar: Option<&Stage>) -> Result<Token, SamplerError> {
        if self.argmax && grammar.is_none() {
            return Token::try_from(biased_first_max(logits, &self.biases))
                .map_err(|_| SamplerError::Failed("sample: token id"));
        }
        self.candidates.clear();
        self.candidates
            .extend(
                logits
                    .iter()
                    .enumerate()
                    .map(|(id, &logit)| sys::llama_token_data {
                        id: id as Token,
                        logit,
                        p: 0.0,
                    }),
            );
        let mut candidates = sys::llama_token_data_array {
            data: self.candidates.as_mut_ptr(),
            size: self.candidates.len(),
            selected: -1,
            sorted: false,
        };
        if let Some(grammar) = grammar {
            grammar.apply(&mut candidates);
        }
        self.chain.apply(&mut candidates);
        let selected = usize::try_from(candidates.selected)
            .ok()
            .filter(|&at| at < candidates.size)
            .ok_or(SamplerError::Failed("sample: the chain selected no token"))?;
        // SAFETY: the stages rewrite the array in place and leave `data` pointing at
        // `size` initialised entries (`self.candidates` or a buffer of their own that
        // lives as long as the chain); `selected` is within `size` (checked above).
        Ok(unsafe { (*candidates.data.add(selected)).id })
    }
}

impl Sampler {
    pub fn new(model: &Model, params: &SamplerParams) -> Result<Sampler, SamplerError> {
        params.validate().map_err(SamplerError::Param)?;
        // SAFETY: plain struct of defaults, then a fresh chain (null on allocation failure).
        let chain =
            unsafe { sys::llama_sampler_chain_init(sys::llama_sampler_chain_default_params()) };
        let mut sampler = Sampler {
            pick: Pick {
                chain: Stage::new(chain, "chain")?,
                argmax: params.is_greedy() && !params.penalties_on(),
                biases: summed_biases(&params.logit_bias),
                candidates: Vec::new(),
            },
            grammar: Grammar::None,
        };
        if !params.logit_bias.is_empty() {
            let biases: Vec<sys::llama_logit_bias> = params
                .logit_bias
                .iter()
                .map(|&(token, bias)| sys::llama_logit_bias { token, bias })
                .collect();
            let n = i32::try_from(biases.len()).map_err(|_| SamplerError::Failed("logit_bias"))?;
            // SAFETY: `biases` holds `n` initialised entries and outlives the call
            // (llama.cpp copies them); every token id was checked against the vocabulary.
            sampler.add(unsafe {
                sys::llama_sampler_init_logit_bias(model.n_vocab(), n, biases.as_ptr())
            })?;
        }
        if let Some(grammar) = &params.grammar {
            super::grammar::limits::check(grammar)
                .map_err(|e| SamplerError::Limit(e.to_string()))?;
            let text = CString::new(grammar.as_str())
                .map_err(|_| SamplerError::Grammar("NUL in grammar".into()))?;
            let stage = Stage::grammar(model, &text)?;
            sampler.grammar = match &params.grammar_trigger {
                Some(trigger) if !trigger.is_empty() => Grammar::Waiting(Box::new(Waiting {
                    grammar: text,
                    fresh: Some(stage),
                    trigger: trigger.as_bytes().to_vec(),
                    tail: Vec::new(),
                    tokens: VecDeque::new(),
                    examined: 0,
                })),
                _ => Grammar::Active(stage),
            };
        }
        sampler.add_stages(model, params)?;
        Ok(sampler)
    }

    fn add_stages(&mut self, model: &Model, p: &SamplerParams) -> Result<(), SamplerError> {
        if p.penalties_on() {
            // SAFETY: plain constructor with range-checked arguments.
            self.add(unsafe {
                sys::llama_sampler_init_penalties(
                    model.n_vocab(),
                    p.penalty_last_n,
                    p.repeat_penalty,
                    p.frequency_penalty,
                    p.presence_penalty,
                )
            })?;
        }
        if p.is_greedy() {
            // SAFETY: plain constructor.
            return self.add(unsafe { sys::llama_sampler_init_greedy() });
        }
        if p.top_k > 0 {
            // SAFETY: plain constructor with a positive k.
            self.add(unsafe { sys::llama_sampler_init_top_k(p.top_k) })?;
        }
        // SAFETY: plain constructors with arguments checked by `validate`.
        unsafe {
            self.add(sys::llama_sampler_init_top_p(p.top_p, 1))?;
            self.add(sys::llama_sampler_init_min_p(p.min_p, 1))?;
            self.add(sys::llama_sampler_init_temp(p.temperature))?;
            self.add(sys::llama_sampler_init_dist(p.seed))
        }
    }

    /// Takes ownership of `stage` (which may be null when its constructor failed).
    fn add(&mut self, stage: *mut sys::llama_sampler) -> Result<(), SamplerError> {
        if stage.is_null() {
            return Err(SamplerError::Failed("stage"));
        }
        // SAFETY: `chain` is a valid chain and `stage` a valid, unowned sampler; the chain
        // takes ownership of it.
        unsafe { sys::llama_sampler_chain_add(self.pick.chain.0.as_ptr(), stage) };
        Ok(())
    }

    /// Samples the next token from the logits of entry `index` of the batch `ctx` last
    /// decoded, and records it for penalties and grammar.
    pub fn sample_at(
        &mut self,
        ctx: &mut Context<'_>,
        index: usize,
    ) -> Result<Token, SamplerError> {
        let model = ctx.model();
        let logits = ctx.logits_at(index).ok_or(SamplerError::Failed(
            "sample: no logits there (decode first)",
        ))?;
        let token = self.choose(logits)?;
        self.record(model, token)?;
        Ok(token)
    }

    /// Whether the grammar constrains the next token (a lazy one after its trigger):
    /// then a sample may cost far more than the chain's pick.
    pub fn constraining(&self) -> bool {
        matches!(self.grammar, Grammar::Active(_))
    }

    /// [`Sampler::sample_at`] over a copy of the `logits`, while the grammar
    /// constrains ([`Sampler::constraining`]; an error otherwise): what needs no
    /// model, so that another thread can do it.
    pub fn sample_constrained(&mut self, logits: &[f32]) -> Result<Token, SamplerError> {
        if !self.constraining() {
            return Err(SamplerError::Failed("sample: no grammar constrains"));
        }
        let token = self.choose(logits)?;
        self.pick.chain.accept(token);
        if let Grammar::Active(grammar) = &mut self.grammar {
            grammar.accept(token);
        }
        Ok(token)
    }

    /// The token to take from `logits`: the chain's pick, within the grammar while it
    /// constrains.
    fn choose(&mut self, logits: &[f32]) -> Result<Token, SamplerError> {
        let token = match &self.grammar {
            Grammar::Active(grammar) => {
                let first = self.pick.pick(logits, None)?;
                // Greedy, the masked pick is the allowed token of highest logit (the
                // lower id among equals): the likeliest few are asked first, which
                // spares most masks of the whole vocabulary (a newline refused inside
                // a JSON string, say).
                let biases = &self.pick.biases;
                let likeliest = || {
                    top_biased(logits, biases, GREEDY_GRAMMAR_TRIES)
                        .into_iter()
                        .map(|(token, _)| token)
                        .find(|&token| grammar.allows(token))
                };
                if grammar.allows(first) {
                    first
                } else if let Some(token) = self.pick.argmax.then(likeliest).flatten() {
                    token
                } else {
                    let token = self.pick.pick(logits, Some(grammar))?;
                    if !grammar.allows(token) {
                        return Err(SamplerError::Failed("sample: the grammar allows no token"));
                    }
                    token
                }
            }
            _ => self.pick.pick(logits, None)?,
        };
        Ok(token)
    }

    /// Records `token` as generated: the chain's penalties, and the grammar, which
    /// advances over it or, while it waits, watches for its trigger.
    fn record(&mut self, model: &Model, token: Token) -> Result<(), SamplerError> {
        self.pick.chain.accept(token);
        match &mut self.grammar {
            Grammar::None => {}
            Grammar::Active(grammar) => grammar.accept(token),
            Grammar::Waiting(waiting) => {
                if let Some(stage) = waiting.watch(model, token)? {
                    self.grammar = Grammar::Active(stage);
                }
            }
        }
        Ok(())
    }
}

/// Stepping a sampler by hand, for tests that check what its grammar allows.
#[cfg(test)]
impl Sampler {
    /// Whether the grammar (while it constrains) and the chain let `token` through now.
    pub(crate) fn allows(&mut self, token: Token) -> bool {
        let grammar = match &self.grammar {
            Grammar::Active(grammar) => grammar.allows(token),
            _ => true,
        };
        grammar && self.pick.chain.allows(token)
    }

    /// Records `token` as generated. Call it only with a token [`Sampler::allows`]:
    /// llama.cpp's grammar throws (aborting the process) on one it rejects.
    pub(crate) fn accept(&mut self, model: &Model, token: Token) {
        self.record(model, token)
            .expect("a token of the vocabulary");
    }

    /// The bytes the trigger watch examined at the last token, while it waits.
    pub(crate) fn watched_bytes(&self) -> Option<usize> {
        match &self.grammar {
            Grammar::Waiting(waiting) => Some(waiting.examined),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llama::Batch;

    #[test]
    fn first_max_picks_as_llama_cpp_greedy_does() {
        assert_eq!(first_max(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(first_max(&[5.0]), 0);
        assert_eq!(first_max(&[f32::NAN, 9.0]), 0);
        assert_eq!(first_max(&[1.0, f32::NAN, 2.0]), 2);
        assert_eq!(first_max(&[-1.0, f32::NEG_INFINITY, -0.5]), 2);
        // Against llama.cpp's loop, on lengths around the 16-lane chunks, with ties,
        // NaNs and signed zeros drawn often.
        let greedy = |values: &[f32]| {
            let mut best = 0;
            for i in 1..values.len() {
                if values[i] > values[best] {
                    best = i;
                }
            }
            best
        };
        let pool = [
            0.0,
            -0.0,
            1.0,
            1.0,
            2.5,
            -3.0,
            f32::NAN,
            f32::INFINITY,
            7.0,
            7.0,
        ];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for round in 0..2000 {
            let len = 1 + round % 70;
            let values: Vec<f32> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    pool[(seed % pool.len() as u64) as usize]
                })
                .collect();
            assert_eq!(first_max(&values), greedy(&values), "{values:?}");
        }
    }

    /// Decodes `user`'s question in SmolLM2's chat form on sequence 0, logits for its
    /// last token; the batch (for the steps after it) and the prompt's length.
    fn decode_prompt(ctx: &mut Context<'_>, user: &str) -> (Batch, usize) {
        let text = format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n");
        let prompt = ctx.model().tokenize(&text, false).unwrap();
        let mut batch = Batch::new(256).unwrap();
        for (i, &t) in prompt.iter().enumerate() {
            batch.push_seq(t, i, 0, i + 1 == prompt.len()).unwrap();
        }
        ctx.decode(&batch).unwrap();
        (batch, prompt.len())
    }

    /// The greedy fast path and llama.cpp's own greedy chain pick the same tokens on
    /// the real model, step after step.
    #[test]
    fn greedy_fast_path_matches_the_llama_cpp_chain() {
        let model = crate::llama::test_model();
        let mut ctx = Context::new(&model, &crate::llama::test_context_params(256, 1)).unwrap();
        let greedy = SamplerParams {
            temperature: 0.0,
            ..Default::default()
        };
        let mut fast = Sampler::new(&model, &greedy).unwrap();
        let mut chain = Sampler::new(&model, &greedy).unwrap();
        assert!(fast.pick.argmax);
        chain.pick.argmax = false;
        let (mut batch, n_prompt) = decode_prompt(&mut ctx, "Name three rivers.");
        let mut at = n_prompt - 1;
        for pos in n_prompt..n_prompt + 40 {
            let token = fast.sample_at(&mut ctx, at).unwrap();
            assert_eq!(
                chain.sample_at(&mut ctx, at).unwrap(),
                token,
                "at position {pos}"
            );
            batch.clear();
            batch.push_seq(token, pos, 0, true).unwrap();
            ctx.decode(&batch).unwrap();
            at = 0;
        }
        // Biases stay on the fast path, and pick what llama.cpp's bias stage does:
        // the tokens the chain would pick banned, others pushed up, repeats summed.
        let mut logits = ctx.logits_at(0).unwrap().to_vec();
        let top = first_max(&logits) as Token;
        let biased = SamplerParams {
            logit_bias: vec![(top, f32::NEG_INFINITY), (7, 3.0), (7, 2.5), (0, 1.0)],
            ..greedy.clone()
        };
        let mut fast = Sampler::new(&model, &biased).unwrap();
        let mut chain = Sampler::new(&model, &biased).unwrap();
        assert!(fast.pick.argmax);
        chain.pick.argmax = false;
        for boost in [0.0, 40.0] {
            logits[7] += boost;
            let fast_pick = fast.pick.pick(&logits, None).unwrap();
            assert_eq!(
                fast_pick,
                chain.pick.pick(&logits, None).unwrap(),
                "boost {boost}"
            );
            assert_ne!(fast_pick, top);
            let top = top_biased(&logits, &fast.pick.biases, 5);
            assert_eq!(top[0].0, fast_pick, "{top:?}");
        }
        assert_eq!(fast.pick.pick(&logits, None).unwrap(), 7);
        // Penalties, a grammar or a temperature leave it to llama.cpp.
        let penalised = SamplerParams {
            repeat_penalty: 1.1,
            ..greedy.clone()
        };
        assert!(!Sampler::new(&model, &penalised).unwrap().pick.argmax);
    }

    /// Tokens of `text` one by one through `sampler` as generated output, each one
    /// checked first (a grammar aborts on a token it refuses).
    fn generate(sampler: &mut Sampler, model: &Model, text: &str) {
        for token in model.tokenize(text, false).unwrap() {
            assert!(sampler.allows(token), "{text:?}: token {token} refused");
            sampler.accept(model, token);
        }
    }

    /// A lazy grammar's watch examines a bounded number of bytes per token however
    /// long the reply grows (llama.cpp's lazy grammar runs its regex over the whole
    /// output at every token), and the grammar holds from its trigger on.
    #[test]
    fn a_lazy_grammar_watches_a_bounded_window_and_holds_from_its_trigger() {
        let model = crate::llama::test_model();
        let trigger = "<tool_call>";
        let params = SamplerParams {
            temperature: 0.0,
            grammar: Some(r#"root ::= "<tool_call>" [ \n]* "{\"name\": \"" [a-z]+ "\"}""#.into()),
            grammar_trigger: Some(trigger.into()),
            ..Default::default()
        };
        let mut sampler = Sampler::new(&model, &params).unwrap();
        // Over 2,000 tokens of prose with near misses: never constrained, and each
        // token's watch looks at no more than the trigger's length and its own piece.
        let prose: String = (0..200)
            .map(|i| format!("Line {i}: a <tool and a call> or <tool_call, no. "))
            .collect();
        let tokens = model.tokenize(&prose, false).unwrap();
        assert!(tokens.len() > 2000, "{} tokens", tokens.len());
        let mut most = 0;
        for &token in &tokens {
            assert!(sampler.allows(token));
            sampler.accept(&model, token);
            let piece = model.piece_bytes(token, true).unwrap().len();
            let examined = sampler.watched_bytes().expect("still waiting");
            assert!(
                examined < trigger.len() + piece,
                "{examined} bytes for one token"
            );
            most = most.max(examined);
        }
        assert!(
            most >= trigger.len() - 1,
            "the window spans a split trigger"
        );
        // A trigger whose own token goes on with text the grammar cannot continue
        // (markup that is not a call) leaves the output free, and the watch goes on.
        let overhang = [
            "<tool_call>.",
            "<tool_call>>",
            "<tool_call>);",
            "<tool_call>?",
        ]
        .into_iter()
        .find(|text| {
            let last = *model.tokenize(text, false).unwrap().last().unwrap();
            let piece = model.piece_bytes(last, true).unwrap();
            piece.starts_with(b">") && piece.len() > 1
        })
        .expect("a token that holds the trigger's '>' and more");
        generate(&mut sampler, &model, overhang);
        assert!(!sampler.constraining(), "{overhang:?}");
        generate(&mut sampler, &model, " ");
        // The trigger, split over tokens, starts the grammar from its first byte.
        generate(&mut sampler, &model, "Now <tool_call>\n{\"name\": \"");
        assert!(sampler.constraining());
        let letters = model.tokenize_plain("abc").unwrap();
        let digits = model.tokenize_plain("42").unwrap();
        assert!(sampler.allows(letters[0]));
        assert!(!sampler.allows(digits[0]));
        let eog = (0..model.n_vocab()).find(|&t| model.is_eog(t)).unwrap();
        assert!(
            !sampler.allows(eog),
            "a call cut short may not end the reply"
        );
        generate(&mut sampler, &model, "abc\"}");
        assert!(sampler.allows(eog));
    }

    /// With a grammar, the chain picks first and the grammar checks only that pick;
    /// a pick it refuses is made again from the allowed tokens. Greedy, that is
    /// exactly the masked pick, step after step on the real model.
    #[test]
    fn the_grammar_checks_the_pick_and_masks_only_when_it_refuses_it() {
        let model = crate::llama::test_model();
        let mut ctx = Context::new(&model, &crate::llama::test_context_params(256, 1)).unwrap();
        let grammar = r#"root ::= "The answer is " [0-9]+ ("." | " or " [0-9]+ ".")"#;
        let params = SamplerParams {
            temperature: 0.0,
            grammar: Some(grammar.into()),
            ..Default::default()
        };
        let mut sampler = Sampler::new(&model, &params).unwrap();
        let (mut batch, n_prompt) = decode_prompt(&mut ctx, "What is six times seven?");
        let mut at = n_prompt - 1;
        let mut text = Vec::new();
        for pos in n_prompt..n_prompt + 20 {
            // The masked pick, computed apart: the allowed token of highest logit.
            let logits = ctx.logits_at(at).unwrap().to_vec();
            let best = (0..model.n_vocab())
                .filter(|&t| match &sampler.grammar {
                    Grammar::Active(g) => g.allows(t),
                    _ => true,
                })
                .max_by(|&a, &b| {
                    logits[a as usize]
                        .total_cmp(&logits[b as usize])
                        .then(b.cmp(&a))
                })
                .unwrap();
            let token = sampler.sample_at(&mut ctx, at).unwrap();
            assert_eq!(token, best, "at position {pos}");
            if model.is_eog(token) {
                break;
            }
            text.extend(model.piece_bytes(token, true).unwrap());
            batch.clear();
            batch.push_seq(token, pos, 0, true).unwrap();
            ctx.decode(&batch).unwrap();
            at = 0;
        }
        let text = String::from_utf8(text).unwrap();
        assert!(text.starts_with("The answer is "), "{text:?}");
        assert!(text.ends_with('.'), "{text:?}");
    }

    /// A bias that bans every token the grammar allows leaves nothing to pick: an
    /// error for the request, not an abort of the process (llama.cpp's grammar aborts
    /// on accepting a token it refuses, which the chain's pick then was).
    #[test]
    fn a_grammar_left_nothing_by_the_biases_is_an_error() {
        let model = crate::llama::test_model();
        let mut ctx = Context::new(&model, &crate::llama::test_context_params(256, 1)).unwrap();
        let a = model.tokenize_plain("a").unwrap()[0];
        let params = SamplerParams {
            temperature: 0.0,
            grammar: Some(r#"root ::= "a""#.into()),
            logit_bias: vec![(a, f32::NEG_INFINITY)],
            ..Default::default()
        };
        let mut sampler = Sampler::new(&model, &params).unwrap();
        let (_, n_prompt) = decode_prompt(&mut ctx, "Say a.");
        assert!(sampler.sample_at(&mut ctx, n_prompt - 1).is_err());
    }

    fn check_params(params: SamplerParams, ok: bool) {
        assert_eq!(params.validate().is_ok(), ok, "{params:?}");
    }

    #[test]
    fn log_probs_are_a_softmax_over_the_logits_with_the_likeliest_first() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let z: f64 = logits.iter().map(|&l| f64::from(l).exp()).sum();
        let expect = |l: f32| (f64::from(l) - z.ln()) as f32;
        let (chosen, top) = log_probs(&logits, 2, 3);
        assert!((chosen - expect(2.0)).abs() < 1e-6);
        // Equal logits keep the lower id first; then the next likeliest.
        let ids: Vec<Token> = top.iter().map(|&(id, _)| id).collect();
        assert_eq!(ids, [1, 3, 2]);
        assert!((top[0].1 - expect(3.0)).abs() < 1e-6);
        let total: f64 = logits.iter().map(|&l| f64::from(expect(l)).exp()).sum();
        assert!((total - 1.0).abs() < 1e-5);
        // No alternatives asked for; an id outside the logits has no chance.
        assert!(log_probs(&logits, 0, 0).1.is_empty());
        assert_eq!(log_probs(&logits, 9, 0).0, f32::NEG_INFINITY);
        // Huge logits do not overflow.
        let (big, _) = log_probs(&[1000.0, 1000.0], 0, 1);
        assert!((big - 0.5f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn sampling_numbers_are_range_checked() {
        check_params(SamplerParams::default(), true);
        check_params(
            SamplerParams {
                temperature: 0.0,
                ..Default::default()
            },
            true,
        );
        check_params(
            SamplerParams {
                temperature: f32::NAN,
                ..Default::default()
            },
            false,
        );
        check_params(
            SamplerParams {
                top_p: 1.5,
                ..Default::default()
            },
            false,
        );
        check_params(
            SamplerParams {
                top_k: -1,
                ..Default::default()
            },
            false,
        );
        check_params(
            SamplerParams {
                min_p: -0.1,
                ..Default::default()
            },
            false,
        );
        check_params(
            SamplerParams {
                presence_penalty: 3.0,
                ..Default::default()
            },
            false,
        );
    }
}

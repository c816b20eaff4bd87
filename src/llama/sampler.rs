//! The sampling chain: grammar, penalties, top-k, top-p, min-p, temperature, then
//! a seeded random draw, or greedy at temperature 0.
//!
//! A [`Sampler`] reads the logits of the last decode of a [`Context`]; it keeps the
//! penalty history, so one sampler serves one generation.

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::CString;
use std::ptr::NonNull;

use llama_cpp_sys_2 as sys;

use super::context::Context;
use super::error::{InvalidParam, SamplerError};
use super::model::{Model, Token};

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
    /// Makes the grammar lazy: it constrains nothing until one of these regexes
    /// (matched against the whole output so far) matches, then applies from the
    /// match's first group on, as llama.cpp's lazy grammars do. Empty: from the start.
    pub grammar_triggers: Vec<String>,
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
            grammar_triggers: Vec::new(),
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

/// An owned sampler chain.
#[derive(Debug)]
pub struct Sampler {
    raw: NonNull<sys::llama_sampler>,
    /// The chain is greedy alone (no grammar, no penalties): the token is the first
    /// highest logit, found here without llama.cpp's candidate array (a 12-byte entry
    /// written for every vocabulary entry on every token).
    argmax: bool,
}

impl Drop for Sampler {
    fn drop(&mut self) {
        // SAFETY: `raw` is the chain from `llama_sampler_chain_init`; freeing the chain
        // frees every sampler added to it, exactly once.
        unsafe { sys::llama_sampler_free(self.raw.as_ptr()) };
    }
}

impl Sampler {
    pub fn new(model: &Model, params: &SamplerParams) -> Result<Sampler, SamplerError> {
        params.validate().map_err(SamplerError::Param)?;
        // SAFETY: plain struct of defaults, then a fresh chain (null on allocation failure).
        let chain =
            unsafe { sys::llama_sampler_chain_init(sys::llama_sampler_chain_default_params()) };
        let mut sampler = Sampler {
            raw: NonNull::new(chain).ok_or(SamplerError::Failed("chain"))?,
            argmax: params.grammar.is_none()
                && params.is_greedy()
                && !params.penalties_on()
                && params.logit_bias.is_empty(),
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
            sampler.add(grammar_sampler(model, grammar, &params.grammar_triggers)?)?;
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
        // SAFETY: `raw` is a valid chain and `stage` a valid, unowned sampler; the chain
        // takes ownership of it.
        unsafe { sys::llama_sampler_chain_add(self.raw.as_ptr(), stage) };
        Ok(())
    }

    /// Samples the next token from the logits of entry `index` of the batch `ctx` last
    /// decoded, and records it for penalties and grammar.
    pub fn sample_at(
        &mut self,
        ctx: &mut Context<'_>,
        index: usize,
    ) -> Result<Token, SamplerError> {
        if !ctx.has_logits_at(index) {
            return Err(SamplerError::Failed(
                "sample: no logits there (decode first)",
            ));
        }
        if self.argmax {
            let logits = ctx
                .logits_at(index)
                .ok_or(SamplerError::Failed("sample: no logits there"))?;
            let token = Token::try_from(first_max(logits))
                .map_err(|_| SamplerError::Failed("sample: token id"))?;
            // SAFETY: `raw` is a valid chain; accepting a token of the vocabulary only
            // updates the chain's counters (greedy keeps no state).
            unsafe { sys::llama_sampler_accept(self.raw.as_ptr(), token) };
            return Ok(token);
        }
        let idx = i32::try_from(index).map_err(|_| SamplerError::Failed("sample: index"))?;
        // SAFETY: `ctx` holds logits for batch entry `index` of its last decode (checked
        // above). The call also accepts the token into the chain's state.
        Ok(unsafe { sys::llama_sampler_sample(self.raw.as_ptr(), ctx.as_ptr(), idx) })
    }
}

/// Stepping a chain by hand, for tests that check what its grammar allows.
#[cfg(test)]
impl Sampler {
    /// Whether the chain lets `token` through now: its logit is not masked to
    /// -inf when it is the only candidate (what a grammar does to a token it
    /// rejects, end of generation included).
    pub(crate) fn allows(&mut self, token: Token) -> bool {
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
        // SAFETY: `raw` is a valid chain; `candidates` points at `data`, one
        // initialised entry that outlives the call; the stages only rewrite the
        // entry's fields and `selected`.
        unsafe { sys::llama_sampler_apply(self.raw.as_ptr(), &mut candidates) };
        data[0].logit != f32::NEG_INFINITY
    }

    /// Records `token` as generated: the grammar advances over it. Call it only
    /// with a token [`Sampler::allows`]: llama.cpp's grammar throws (aborting
    /// the process) on one it rejects.
    pub(crate) fn accept(&mut self, token: Token) {
        // SAFETY: `raw` is a valid chain and `token` one the grammar allows now.
        unsafe { sys::llama_sampler_accept(self.raw.as_ptr(), token) };
    }
}

/// The log-probability of `chosen` under `logits` (a softmax over the whole
/// vocabulary, before any sampling stage) and the `top` likeliest tokens, most
/// likely first (the lower id first among equals): what llama-server reports
/// as `logprobs` without `post_sampling_probs`.
pub fn log_probs(logits: &[f32], chosen: Token, top: usize) -> (f32, Vec<(Token, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    let log_z = f64::from(max) + sum.ln();
    let lp = |l: f32| (f64::from(l) - log_z) as f32;
    let mut best: Vec<(Token, f32)> = Vec::with_capacity(top + 1);
    if top > 0 {
        for (id, &l) in logits.iter().enumerate() {
            if best.len() == top && best.last().is_some_and(|&(_, worst)| l <= worst) {
                continue;
            }
            let at = best.partition_point(|&(_, v)| v >= l);
            best.insert(at, (id as Token, l));
            best.truncate(top);
        }
    }
    let chosen_logit = usize::try_from(chosen)
        .ok()
        .and_then(|i| logits.get(i))
        .copied()
        .unwrap_or(f32::NEG_INFINITY);
    let top = best.into_iter().map(|(id, l)| (id, lp(l))).collect();
    (lp(chosen_logit), top)
}

/// The index of the first highest value, as llama.cpp's greedy sampler picks it
/// (a later value wins only if strictly greater; NaN never wins).
fn first_max(values: &[f32]) -> usize {
    let Some(&first) = values.first() else {
        return 0;
    };
    if first.is_nan() {
        return 0;
    }
    // The highest value in 16 independent lanes (the compiler turns this into vector
    // max instructions), then the first index holding it: two streaming passes instead
    // of one compare-and-branch per entry.
    let mut lanes = [first; 16];
    let chunks = values.chunks_exact(16);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = if v > *lane { v } else { *lane };
        }
    }
    let mut max = first;
    for &v in lanes.iter().chain(rest) {
        if v > max {
            max = v;
        }
    }
    values.iter().position(|&v| v == max).unwrap_or(0)
}

fn grammar_sampler(
    model: &Model,
    grammar: &str,
    triggers: &[String],
) -> Result<*mut sys::llama_sampler, SamplerError> {
    let text = CString::new(grammar).map_err(|_| SamplerError::Grammar("NUL in grammar".into()))?;
    let root = CString::new("root").map_err(|_| SamplerError::Failed("grammar root"))?;
    let patterns = triggers
        .iter()
        .map(|t| CString::new(t.as_str()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| SamplerError::Grammar("NUL in a grammar trigger".into()))?;
    let pointers: Vec<*const std::ffi::c_char> = patterns.iter().map(|p| p.as_ptr()).collect();
    let raw = if pointers.is_empty() {
        // SAFETY: the vocab is valid while `model` lives; both strings are NUL-terminated
        // and outlive the call (llama.cpp copies what it keeps).
        unsafe { sys::llama_sampler_init_grammar(model.vocab_ptr(), text.as_ptr(), root.as_ptr()) }
    } else {
        // SAFETY: as above; `pointers` holds `pointers.len()` NUL-terminated strings that
        // outlive the call (`patterns` owns them), and no trigger tokens (null, 0).
        unsafe {
            sys::llama_sampler_init_grammar_lazy_patterns(
                model.vocab_ptr(),
                text.as_ptr(),
                root.as_ptr(),
                pointers.as_ptr().cast_mut(),
                pointers.len(),
                std::ptr::null(),
                0,
            )
        }
    };
    if raw.is_null() {
        return Err(SamplerError::Grammar(grammar.chars().take(200).collect()));
    }
    Ok(raw)
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
        assert!(fast.argmax);
        chain.argmax = false;
        let prompt = model
            .tokenize(
                "<|im_start|>user\nName three rivers.<|im_end|>\n<|im_start|>assistant\n",
                false,
            )
            .unwrap();
        let mut batch = Batch::new(256).unwrap();
        for (i, &t) in prompt.iter().enumerate() {
            batch.push_seq(t, i, 0, i + 1 == prompt.len()).unwrap();
        }
        ctx.decode(&batch).unwrap();
        let mut at = prompt.len() - 1;
        for pos in prompt.len()..prompt.len() + 40 {
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
        // Penalties, a grammar or a temperature leave it to llama.cpp.
        let penalised = SamplerParams {
            repeat_penalty: 1.1,
            ..greedy.clone()
        };
        assert!(!Sampler::new(&model, &penalised).unwrap().argmax);
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

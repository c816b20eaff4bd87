//! Reading the logits: log-probabilities of the chosen and the top tokens, and
//! greedy picks with logit biases, as llama.cpp's samplers order ties.

use super::*;

/// The log-probability of `chosen` under `logits` (a softmax over the whole
/// vocabulary, before any sampling stage) and the `top` likeliest tokens, most
/// likely first (the lower id first among equals): what llama-server reports
/// as `logprobs` without `post_sampling_probs`.
pub fn log_probs(logits: &[f32], chosen: Token, top: usize) -> (f32, Vec<(Token, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    let log_z = f64::from(max) + sum.ln();
    let lp = |l: f32| (f64::from(l) - log_z) as f32;
    let best = top_logits(logits, top);
    let chosen_logit = usize::try_from(chosen)
        .ok()
        .and_then(|i| logits.get(i))
        .copied()
        .unwrap_or(f32::NEG_INFINITY);
    let top = best.into_iter().map(|(id, l)| (id, lp(l))).collect();
    (lp(chosen_logit), top)
}

/// The `n` highest of `logits` with their ids, highest first and the lower id first
/// among equals (the order in which llama.cpp's greedy pick prefers them); NaN is
/// never among them.
pub(super) fn top_logits(logits: &[f32], n: usize) -> Vec<(Token, f32)> {
    let mut best: Vec<(Token, f32)> = Vec::with_capacity(n + 1);
    if n == 0 {
        return best;
    }
    for (id, &l) in logits.iter().enumerate() {
        if l.is_nan() || best.len() == n && best.last().is_some_and(|&(_, worst)| l <= worst) {
            continue;
        }
        let at = best.partition_point(|&(_, v)| v >= l);
        best.insert(at, (id as Token, l));
        best.truncate(n);
    }
    best
}

/// `biases` with one entry per token (llama.cpp adds every entry: repeats sum), by id.
pub(super) fn summed_biases(biases: &[(Token, f32)]) -> Vec<(Token, f32)> {
    let mut summed: Vec<(Token, f32)> = biases.to_vec();
    summed.sort_by_key(|&(token, _)| token);
    summed.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            kept.1 += later.1;
        }
        same
    });
    summed
}

/// The logit of `id` after its bias, if it has one (`biases` by id).
pub(super) fn biased(logits: &[f32], biases: &[(Token, f32)], id: Token) -> Option<f32> {
    let at = biases.binary_search_by_key(&id, |&(token, _)| token).ok()?;
    let logit = usize::try_from(id).ok().and_then(|i| logits.get(i))?;
    Some(logit + biases[at].1)
}

/// [`first_max`] of `logits` with `biases` added, what llama.cpp's bias and greedy
/// stages pick: the first maximum of each unbiased stretch between the biased ids
/// (vectorised as without biases) and each biased token's own value, in id order.
pub(super) fn biased_first_max(logits: &[f32], biases: &[(Token, f32)]) -> usize {
    if biases.is_empty() {
        return first_max(logits);
    }
    let mut best: Option<(usize, f32)> = None;
    let mut consider = |id: usize, value: f32| {
        // Ids come in increasing order: a later one wins only if strictly greater.
        if !value.is_nan() && best.is_none_or(|(_, top)| value > top) {
            best = Some((id, value));
        }
    };
    let stretch = |from: usize, to: usize, consider: &mut dyn FnMut(usize, f32)| {
        if from < to {
            let at = from + first_max(&logits[from..to]);
            consider(at, logits[at]);
        }
    };
    let mut from = 0;
    for &(token, bias) in biases {
        let Some(at) = usize::try_from(token).ok().filter(|&at| at < logits.len()) else {
            continue;
        };
        stretch(from, at, &mut consider);
        consider(at, logits[at] + bias);
        from = at + 1;
    }
    stretch(from, logits.len(), &mut consider);
    best.map_or(0, |(id, _)| id)
}

/// [`top_logits`] with `biases` added: the raw top `n + biases.len()` (at least `n`
/// of them unbiased) and the biased tokens, ranked again.
pub(super) fn top_biased(logits: &[f32], biases: &[(Token, f32)], n: usize) -> Vec<(Token, f32)> {
    if biases.is_empty() {
        return top_logits(logits, n);
    }
    let mut best: Vec<(Token, f32)> = top_logits(logits, n + biases.len())
        .into_iter()
        .filter(|&(id, _)| biased(logits, biases, id).is_none())
        .collect();
    best.extend(
        biases
            .iter()
            .filter_map(|&(id, _)| Some((id, biased(logits, biases, id)?)))
            // A banned token is never among the likeliest (the chain never picks it).
            .filter(|&(_, v)| v > f32::NEG_INFINITY),
    );
    best.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    best.truncate(n);
    best
}

/// How many of the likeliest tokens a greedy pick asks the grammar about, one check
/// each, before it masks the whole vocabulary.
pub(super) const GREEDY_GRAMMAR_TRIES: usize = 32;

/// The index of the first highest value, as llama.cpp's greedy sampler picks it
/// (a later value wins only if strictly greater; NaN never wins).
pub(super) fn first_max(values: &[f32]) -> usize {
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

//! Incremental tokenization of rendered prompts.
//!
//! Every turn renders the whole conversation again, so the prompt of turn N+1 starts
//! with the text of turn N's prompt. Tokenizing all of it costs time linear in the
//! conversation (about 3 µs a token on a small CPU, 100 ms at 32k tokens), paid before
//! the first new token decodes. [`PromptTokens`] keeps the last few prompts with their
//! tokens and tokenizes only what follows a shared prefix.
//!
//! **Why the result is exact.** llama.cpp first splits text at special tokens
//! (`<|im_start|>`, ...) and then tokenizes each plain fragment on its own; for BPE
//! nothing carries from one fragment to the next, and for SentencePiece only "the
//! previous fragment was special", which is also the state at the start of a text. So
//! the tokens of `text[cut..]`, where a special token starts at `cut`, are exactly the
//! tail of the tokens of `text`. A cut is only used when
//! - the pieces of the cached tokens before it spell the text before it byte for byte
//!   (checked when the entry is made; a tokenizer that strips or inserts whitespace
//!   fails the check and gets no cuts there),
//! - the special token is neither left- nor right-stripping, and
//! - the new text agrees with the cached one for twice the longest special token's
//!   length past the cut, so no longer special token can match across it.
//!
//! Anything else (another tokenizer kind, a model that appends EOS, no shared prefix)
//! is tokenized whole.

use std::collections::VecDeque;

use crate::llama::{Model, Token};

/// One tokenized prompt.
struct Entry {
    text: String,
    tokens: Vec<Token>,
    /// Whether `tokens[0]` is a BOS the tokenizer added (not in `text`).
    bos_added: bool,
    /// `(token index, byte offset)` of each usable cut, in order.
    cuts: Vec<(usize, usize)>,
}

/// A small cache of recent prompts and their tokens (see the module docs).
pub(crate) struct PromptTokens {
    entries: VecDeque<Entry>,
    capacity: usize,
    /// Bytes the new text must agree with the cached one past a cut.
    margin: usize,
    enabled: bool,
    /// Tokens taken from the cache instead of tokenized, over the cache's life.
    reused: u64,
}

impl PromptTokens {
    /// A cache of `capacity` prompts for `model`'s tokenizer.
    pub(crate) fn new(model: &Model, capacity: usize) -> PromptTokens {
        let enabled = model.fragments_independent() && !model.adds_eos();
        PromptTokens {
            entries: VecDeque::new(),
            capacity: capacity.max(1),
            margin: if enabled {
                2 * model.longest_special_text()
            } else {
                0
            },
            enabled,
            reused: 0,
        }
    }

    /// Tokens taken from the cache so far.
    #[cfg(test)]
    pub(crate) fn reused(&self) -> u64 {
        self.reused
    }

    /// The tokens of `text` (with a BOS in front when `add_bos`), as
    /// `model.tokenize(text, add_bos)` gives them.
    pub(crate) fn tokenize(
        &mut self,
        model: &Model,
        text: &str,
        add_bos: bool,
    ) -> Result<Vec<Token>, crate::llama::error::TokenizeError> {
        if !self.enabled {
            return model.tokenize(text, add_bos);
        }
        // The tokenizer puts a BOS in front only if the model asks for one.
        let bos = add_bos && model.adds_bos();
        // A cut is always at a character boundary (a special token's text starts
        // there); `get` keeps that from being a panic if it ever were not.
        let found = self.best_cut(text, bos).and_then(|(entry, cut)| {
            let (index, offset) = self.entries[entry].cuts[cut];
            Some((entry, cut, index, offset, text.get(offset..)?))
        });
        let (tokens, cuts) = match found {
            Some((entry, cut, index, offset, rest)) => {
                let mut tokens = self.entries[entry].tokens[..index].to_vec();
                let tail = model.tokenize(rest, false)?;
                let mut cuts = self.entries[entry].cuts[..cut].to_vec();
                cuts.extend(find_cuts(model, &tail, index, text, offset));
                self.reused += index as u64;
                tokens.extend(tail);
                (tokens, cuts)
            }
            None => {
                let tokens = model.tokenize(text, add_bos)?;
                let skip = usize::from(bos && !tokens.is_empty());
                let cuts = find_cuts(model, &tokens[skip..], skip, text, 0);
                (tokens, cuts)
            }
        };
        if let Some(same) = self.entries.iter().position(|e| e.text == text) {
            self.entries.remove(same);
        }
        self.entries.push_front(Entry {
            text: text.to_string(),
            tokens: tokens.clone(),
            bos_added: bos,
            cuts,
        });
        self.entries.truncate(self.capacity);
        Ok(tokens)
    }

    /// The entry and cut that keep the most tokens, if any is usable for `text`.
    fn best_cut(&self, text: &str, bos: bool) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize, usize)> = None;
        for (i, entry) in self.entries.iter().enumerate() {
            if entry.bos_added != bos {
                continue;
            }
            let shared = shared_prefix(&entry.text, text);
            // The last cut far enough inside the shared prefix.
            let usable = entry
                .cuts
                .partition_point(|&(_, offset)| offset + self.margin < shared);
            if usable == 0 {
                continue;
            }
            let cut = usable - 1;
            let kept = entry.cuts[cut].0;
            if best.is_none_or(|(_, _, most)| kept > most) {
                best = Some((i, cut, kept));
            }
        }
        best.map(|(entry, cut, _)| (entry, cut))
    }
}

/// The bytes two texts share at their start.
fn shared_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// The cuts among `tokens` (whose first is token `first_index` of the prompt and
/// starts at byte `offset` of `text`), while their pieces spell `text` exactly.
fn find_cuts(
    model: &Model,
    tokens: &[Token],
    first_index: usize,
    text: &str,
    mut offset: usize,
) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut cuts = Vec::new();
    for (j, &token) in tokens.iter().enumerate() {
        let Ok(piece) = model.piece_bytes(token, true) else {
            break;
        };
        if !bytes[offset..].starts_with(&piece) {
            break;
        }
        if model.is_special_fragment(token) && !piece.is_empty() {
            cuts.push((first_index + j, offset));
        }
        offset += piece.len();
    }
    cuts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llama::ModelParams;

    fn model() -> Model {
        let params = ModelParams {
            gpu_layers: 0,
            progress: None,
            ..Default::default()
        };
        Model::load(&crate::util::dirs::test_models::test_model_path(), &params)
            .expect("test model loads")
    }

    fn chatml(turns: &[(&str, &str)]) -> String {
        let mut text = String::from("<|im_start|>system\nYou are brief.<|im_end|>\n");
        for (role, content) in turns {
            text.push_str(&format!("<|im_start|>{role}\n{content}<|im_end|>\n"));
        }
        text + "<|im_start|>assistant\n"
    }

    #[test]
    fn a_growing_conversation_tokenizes_only_its_new_turn() {
        let model = model();
        let mut cache = PromptTokens::new(&model, 4);
        let mut turns: Vec<(&str, String)> = Vec::new();
        let mut reused_before = 0;
        let mut previous = 0;
        for turn in 1..=10 {
            turns.push((
                "user",
                format!("Tell me one fact about the number {turn}. "),
            ));
            let borrowed: Vec<(&str, &str)> = turns.iter().map(|(r, c)| (*r, c.as_str())).collect();
            let text = chatml(&borrowed);
            let whole = model.tokenize(&text, false).unwrap();
            assert_eq!(
                cache.tokenize(&model, &text, false).unwrap(),
                whole,
                "turn {turn}"
            );
            if turn > 1 {
                // The previous prompt came from the cache, up to a cut a few tokens
                // before its end (`<|im_end|>\n<|im_start|>assistant\n` is 5).
                let reused = (cache.reused() - reused_before) as usize;
                assert!(
                    reused + 8 >= previous,
                    "turn {turn}: {reused} of {previous}"
                );
            }
            reused_before = cache.reused();
            previous = whole.len();
            turns.push((
                "assistant",
                format!("{turn} is a number, and 😀 héllo 数字 {turn}."),
            ));
        }
    }

    /// Prompts derived from each other by cuts, appends and edits at random places,
    /// with special-token text, whitespace and multi-byte characters around the
    /// joins: the cache's tokens always equal a whole tokenization.
    #[test]
    fn cached_tokens_always_equal_a_whole_tokenization() {
        let model = model();
        let pieces = [
            "<|im_start|>",
            "<|im_end|>",
            "<|im_start|>user\n",
            "\n",
            " ",
            "  ",
            "\n\n",
            "hello",
            " world",
            "é",
            "😀",
            "数字",
            "<|endoftext|>",
            "<|im_end|>x",
            "<",
            "|",
            "im",
            "<|im_start",
            "|>",
            "assistant\n",
            "12345",
            "\t",
            "Paris.",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for add_bos in [false, true] {
            let mut cache = PromptTokens::new(&model, 3);
            let mut texts = vec![chatml(&[
                ("user", "Hi, what is the capital of France?"),
                ("assistant", "The capital of France is Paris."),
                ("user", "And of Italy? Answer in one word, 😀 please."),
                ("assistant", "Rome."),
            ])];
            for round in 0..300 {
                let base = texts[next(texts.len())].clone();
                let mut text = match next(3) {
                    0 => base.clone(),
                    1 => {
                        let mut cut = next(base.len() + 1);
                        while !base.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        base[..cut].to_string()
                    }
                    _ => {
                        let mut cut = next(base.len() + 1);
                        while !base.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        let mut edited = base[..cut].to_string();
                        edited.push_str(pieces[next(pieces.len())]);
                        edited.push_str(&base[cut..]);
                        edited
                    }
                };
                for _ in 0..next(4) {
                    text.push_str(pieces[next(pieces.len())]);
                }
                let whole = model.tokenize(&text, add_bos).unwrap();
                let cached = cache.tokenize(&model, &text, add_bos).unwrap();
                assert_eq!(cached, whole, "round {round}, add_bos {add_bos}: {text:?}");
                texts.push(text);
            }
            assert!(
                cache.reused() > 0,
                "the cache was never used (margin {})",
                cache.margin
            );
        }
    }
}

//! Tokens: what a piece of text costs a language model's context, counted with a real
//! tokenizer — OpenAI's BPE encodings through `tiktoken-rs` (`o200k_base`, the GPT-4o/4.1/5
//! family's, by default; `cl100k_base` with `--tokenizer cl100k`). An encoding's tables are
//! read on its first use (tens of milliseconds): nothing on the proxy path counts tokens
//! unless something reads them.
//!
//! The crate's encoder unwraps its pre-tokenizing regex's result, which can fail on a
//! pathological input (the backtracking limit): such a text is counted by its bytes (four to a
//! token, the usual rule of thumb) and the count says it is an estimate, so recorded network
//! input never panics the process.

use std::str::FromStr;

/// An encoding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Tokenizer {
    #[default]
    O200k,
    Cl100k,
}

impl FromStr for Tokenizer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "o200k" | "o200k_base" => Ok(Tokenizer::O200k),
            "cl100k" | "cl100k_base" => Ok(Tokenizer::Cl100k),
            _ => Err(format!(
                "--tokenizer {s}: use o200k (o200k_base: GPT-4o, GPT-4.1, GPT-5, o-series) or cl100k (cl100k_base: GPT-4, GPT-3.5)"
            )),
        }
    }
}

/// A count of tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    pub tokens: usize,
    /// The tokenizer could not read the text; `tokens` is its bytes divided by four.
    pub estimated: bool,
}

impl Tokenizer {
    /// The encoding's name.
    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::O200k => "o200k_base",
            Tokenizer::Cl100k => "cl100k_base",
        }
    }

    /// The tokens of `text`, read as plain text (a special token's spelling in it is text).
    pub fn count(self, text: &str) -> Count {
        if text.is_empty() {
            return Count::default();
        }
        let counted = std::panic::catch_unwind(|| {
            let bpe = match self {
                Tokenizer::O200k => tiktoken_rs::o200k_base_singleton(),
                Tokenizer::Cl100k => tiktoken_rs::cl100k_base_singleton(),
            };
            bpe.encode_ordinary(text).len()
        });
        match counted {
            Ok(tokens) => Count {
                tokens,
                estimated: false,
            },
            Err(_) => {
                tracing::warn!(
                    bytes = text.len(),
                    tokenizer = self.name(),
                    "the tokenizer could not read a text: its tokens are estimated from its bytes"
                );
                Count {
                    tokens: text.len().div_ceil(4),
                    estimated: true,
                }
            }
        }
    }

    /// The tokens of a JSON value as compact JSON text (as a message carries it).
    pub fn count_json(self, v: &serde_json::Value) -> Count {
        self.count(&v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_texts_count_as_the_encodings_do() {
        // The counts OpenAI's tiktoken gives (its README's and its test suite's examples);
        // the integration tests hold many more to js-tiktoken's.
        assert_eq!(Tokenizer::Cl100k.count("hello world").tokens, 2);
        assert_eq!(Tokenizer::O200k.count("hello world").tokens, 2);
        assert_eq!(Tokenizer::O200k.count("").tokens, 0);
        assert_eq!(
            Tokenizer::Cl100k.count("<|endoftext|>").tokens,
            7,
            "a special token's spelling is text"
        );
        assert!("o200k".parse::<Tokenizer>().is_ok() && "gpt2".parse::<Tokenizer>().is_err());
    }
}

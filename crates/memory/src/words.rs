//! What the word index holds for a chunk, and what a query term becomes before it
//! reaches it: the text's runs of letters and digits, lower-cased, English words
//! reduced to their stem (Snowball English, "Porter 2"), behind the chunk's
//! context (file title › heading path). Pure: no database.
//!
//! The stems are made here, in Rust, and handed to both backends as plain text
//! (SQLite's FTS5 `unicode61` word index, PostgreSQL's `simple` tsvector), so both
//! index the same tokens and compute the same BM25 by construction; FTS5's own
//! `porter` tokenizer is the original Porter algorithm, which PostgreSQL does not
//! have. Only tokens of ASCII letters are stemmed: identifiers with digits
//! (`INFRA-4127`, hashes), CJK and other scripts pass through unchanged.
//!
//! Invariant: [`index_words`] and [`query_term`] tokenise and stem the same way,
//! so a query word matches every form of it the notes hold (`deploys`,
//! `deployed`, `deploying` → `deploy`). The word index is derived: what it holds
//! is part of the index identity (`chunk::CHUNKER_VERSION`), so a change here
//! rebuilds existing indexes once.
#![warn(missing_docs)]

use rust_stemmers::{Algorithm, Stemmer};
use std::sync::LazyLock;

/// The word-index version, part of `chunk::CHUNKER_VERSION`.
pub const WORDS_VERSION: &str = "words-1";

/// Tokens longer than this are kept whole, not stemmed (a stemmer is meant for
/// words; a 5,000-letter run is not one).
const MAX_STEM_LEN: usize = 64;

static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// Whether `c` is part of a token: a letter or a digit (FTS5 `unicode61`'s
/// token characters are Unicode letters, numbers and private-use characters;
/// PostgreSQL's `[:alnum:]` is letters and digits).
fn is_token_char(c: char) -> bool {
    c.is_alphanumeric()
}

/// Append the word-index tokens of `text` to `out`, space-separated.
fn push_tokens(text: &str, out: &mut String) {
    let mut lower = String::new();
    for tok in text.split(|c: char| !is_token_char(c)) {
        if tok.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        if tok.len() <= MAX_STEM_LEN && tok.bytes().all(|b| b.is_ascii_alphabetic()) {
            lower.clear();
            lower.extend(tok.chars().map(|c| c.to_ascii_lowercase()));
            out.push_str(&STEMMER.stem(&lower));
        } else {
            out.extend(tok.chars().flat_map(char::to_lowercase));
        }
    }
}

/// The word-index text of a chunk: the tokens of its `context` (file title ›
/// heading path; may be empty), then those of its `text`, space-separated, each
/// lower-cased and English words stemmed.
pub fn index_words(context: &str, text: &str) -> String {
    let mut out = String::with_capacity(context.len() + text.len());
    push_tokens(context, &mut out);
    push_tokens(text, &mut out);
    out
}

/// One query word as the word index holds it: its tokens (a word with
/// punctuation inside, `a/b`, is several) stemmed like [`index_words`] and
/// space-separated, so the backends match it as a phrase.
pub fn query_term(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    push_tokens(word, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inflections_meet_at_one_stem() {
        let forms = ["deploy", "deploys", "deployed", "deploying", "Deployment"];
        let stems: Vec<String> = forms.iter().map(|w| query_term(w)).collect();
        assert_eq!(&stems[..4], &["deploy"; 4]);
        assert_eq!(stems[4], "deploy", "{stems:?}");
        assert_eq!(query_term("studies"), query_term("study"));
    }

    #[test]
    fn identifiers_numbers_and_other_scripts_pass_through() {
        assert_eq!(query_term("INFRA-4127"), "infra 4127");
        assert_eq!(query_term("3f9a2c1e"), "3f9a2c1e");
        assert_eq!(query_term("v1.2.3"), "v1 2 3");
        assert_eq!(query_term("数据库"), "数据库");
        assert_eq!(query_term("Ärger"), "ärger");
        assert_eq!(query_term("...---"), "");
    }

    #[test]
    fn context_comes_first_and_tokens_match_the_query_side() {
        let w = index_words(
            "Billing › Databases",
            "We chose PostgreSQL; it runs queries.",
        );
        assert_eq!(w, "bill databas we chose postgresql it run queri");
        for word in ["billing", "databases", "running", "Queries"] {
            let t = query_term(word);
            assert!(w.split(' ').any(|x| x == t), "{word} → {t} not in {w}");
        }
        assert_eq!(index_words("", "  "), "");
        assert_eq!(index_words("", "a-b"), "a b");
    }

    #[test]
    fn very_long_runs_are_not_stemmed() {
        let long = "s".repeat(MAX_STEM_LEN + 1);
        assert_eq!(query_term(&long), long);
    }
}

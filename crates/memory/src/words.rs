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

/// The raw tokens of `text`: its runs of token characters.
fn raw_tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !is_token_char(c))
        .filter(|t| !t.is_empty())
}

/// Whether a raw token is stemmed (an English word: ASCII letters only, not
/// absurdly long); every other token is only lower-cased.
fn is_stemmed(tok: &str) -> bool {
    tok.len() <= MAX_STEM_LEN && tok.bytes().all(|b| b.is_ascii_alphabetic())
}

/// Append the word-index tokens of `text` to `out`, space-separated.
fn push_tokens(text: &str, out: &mut String) {
    let mut lower = String::new();
    for tok in raw_tokens(text) {
        if !out.is_empty() {
            out.push(' ');
        }
        if is_stemmed(tok) {
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

/// Which of a query's word-index terms a chunk holds (for term coverage), read off
/// its context and text without writing its word-index text: the same bits as
/// `search::score::terms_held(terms, &index_words(context, text))`, for a fraction
/// of the stemming. A Snowball English stem keeps its word's first letter and is
/// never longer than the word (checked over the vocabularies of SciFact, the TWIR
/// notes and 200k generated forms, `dying` → `die` included), so a chunk word is
/// stemmed only when its first letter starts some query token and it is at least as
/// long as the shortest one; every other word cannot become a query token.
#[derive(Debug, Clone)]
pub struct TermMatcher {
    /// The distinct tokens of the terms (at most 64).
    tokens: Vec<String>,
    /// Per term, the bits of its tokens in `tokens`.
    term_masks: Vec<u64>,
    /// Bit `b` set when some query token starts with ASCII byte `b` (0..128).
    firsts: u128,
    /// The length of the shortest query token, in bytes.
    min_len: usize,
}

impl TermMatcher {
    /// A matcher for `terms` as the word index holds them (stems; a phrase's
    /// tokens space-separated, as `ParsedQuery::fts_terms` makes them). `None`
    /// when they hold more than 64 distinct tokens (the caller then compares
    /// whole word-index texts).
    pub fn new(terms: &[String]) -> Option<TermMatcher> {
        let mut tokens: Vec<String> = Vec::new();
        let mut term_masks = Vec::with_capacity(terms.len());
        for t in terms.iter().take(64) {
            let mut mask = 0u64;
            for tok in t.split(' ') {
                let i = match tokens.iter().position(|x| x == tok) {
                    Some(i) => i,
                    None => {
                        tokens.push(tok.to_string());
                        tokens.len() - 1
                    }
                };
                if i >= 64 {
                    return None;
                }
                mask |= 1 << i;
            }
            term_masks.push(mask);
        }
        let mut firsts = 0u128;
        for t in &tokens {
            if let Some(&b) = t.as_bytes().first()
                && b < 128
            {
                firsts |= 1 << b;
            }
        }
        let min_len = tokens.iter().map(String::len).min().unwrap_or(0);
        Some(TermMatcher {
            tokens,
            term_masks,
            firsts,
            min_len,
        })
    }

    /// The bit of term `i` is set when the chunk (`context`, `text`) holds all of
    /// its tokens.
    pub fn held(&self, context: &str, text: &str) -> u64 {
        let all = if self.tokens.len() == 64 {
            u64::MAX
        } else {
            (1u64 << self.tokens.len()) - 1
        };
        let mut have = 0u64;
        let mut buf = String::new();
        'pieces: for piece in [context, text] {
            for tok in raw_tokens(piece) {
                if let Some(i) = self.token_index(tok, &mut buf) {
                    have |= 1 << i;
                    if have == all {
                        break 'pieces;
                    }
                }
            }
        }
        let mut mask = 0u64;
        for (i, m) in self.term_masks.iter().enumerate() {
            if have & m == *m {
                mask |= 1 << i;
            }
        }
        mask
    }

    /// The query token that chunk token `tok` becomes in the word index, if any.
    fn token_index(&self, tok: &str, buf: &mut String) -> Option<usize> {
        buf.clear();
        if is_stemmed(tok) {
            let first = tok.as_bytes()[0].to_ascii_lowercase();
            if tok.len() < self.min_len || self.firsts & (1 << first) == 0 {
                return None;
            }
            buf.extend(tok.chars().map(|c| c.to_ascii_lowercase()));
            let stem = STEMMER.stem(buf);
            self.tokens.iter().position(|t| *t == stem)
        } else {
            buf.extend(tok.chars().flat_map(char::to_lowercase));
            self.tokens.iter().position(|t| t == buf)
        }
    }
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

    #[test]
    fn the_term_matcher_agrees_with_the_word_index_text() {
        use crate::search::score::terms_held;
        let chunks = [
            (
                "Billing › Databases",
                "We chose PostgreSQL; it runs queries.",
            ),
            (
                "",
                "The dying tree, the skies, dies and ties: INFRA-4127 at 3f9a2c1e.",
            ),
            (
                "2022-07-10",
                "Parked the car by the Ärger café; deploys, deployed, deploying.",
            ),
            (
                "Notes",
                "数据库 迁移 and a/b tests; v1.2.3 shipped; Studies of study.",
            ),
            ("", ""),
        ];
        let queries = [
            "billing databases running queries",
            "die sky tie infra-4127 3f9a2c1e",
            "parking ärger deployment caf",
            "数据库 a/b v1.2.3 studies",
            "nothing here at all",
            "s",
        ];
        for q in queries {
            let terms: Vec<String> = q.split(' ').map(query_term).collect();
            let m = TermMatcher::new(&terms).expect("few tokens");
            for (c, t) in chunks {
                let want = terms_held(&terms, &index_words(c, t));
                assert_eq!(m.held(c, t), want, "{q:?} in {c:?} / {t:?}");
            }
        }
        // More than 64 distinct tokens (phrases): no matcher.
        let many: Vec<String> = (0..40).map(|i| format!("a{i} b{i}")).collect();
        assert!(TermMatcher::new(&many).is_none());
        assert!(TermMatcher::new(&many[..32]).is_some());
    }
}

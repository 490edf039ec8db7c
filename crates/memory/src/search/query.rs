//! Query analysis for keyword search: the FTS5 query sanitiser (word index and
//! trigram index), CJK run handling and identifier detection. Pure: no database.
//!
//! Invariant: user text never reaches `MATCH` raw. Every term is emitted as an
//! FTS5 string (`"..."` with `""` escaping), so quotes, parentheses, `*`, `^`,
//! `:`, `NEAR` and `AND`/`OR`/`NOT` are plain text; control characters (NUL
//! included) are dropped; terms without a letter or digit are dropped.
#![warn(missing_docs)]

use crate::chunk::is_cjk;
use regex::Regex;
use std::sync::LazyLock;

/// At most this many word terms reach the word index (bounds query cost).
pub const MAX_TERMS: usize = 64;
/// At most this many trigrams reach the trigram index.
pub const MAX_TRIGRAMS: usize = 96;
/// A word term is an FTS5 phrase of the tokens inside it (`a/b/c` is the phrase
/// `a b c`); at most this many tokens are kept, so a 10 kB `a/a/a/…` costs one
/// short phrase, not a phrase of thousands of positions on every row.
pub const MAX_PHRASE_TOKENS: usize = 8;
/// At most this many one- or two-character CJK runs are searched (each is a
/// substring scan of the chunks, so each one costs a full pass).
pub const MAX_CJK_SHORT: usize = 8;
/// At most this many longer CJK runs reach the trigram stage.
pub const MAX_CJK_LONG: usize = 16;
/// Only the first this many characters of a query are analysed (bounds the
/// parsing work itself; nobody types a longer query, hostile input may).
pub const MAX_QUERY_CHARS: usize = 4096;

/// What kind of identifier a query is (see [`detect_identifier`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentKind {
    /// `ABC-123`, `PROJ-42`.
    Ticket,
    /// Hex digests and UUIDs: `3f9a2c1`, `e3b0c442…`.
    Hash,
    /// `src/memory/store.rs`, `config.json`, `a::b`.
    Path,
    /// `vector_weight`, `MAX_TERMS`.
    SnakeCase,
    /// `CamelCase`, `camelCase`.
    CamelCase,
    /// `1234`, `#1234`, `v1.2.3`, `3.14`.
    Number,
}

/// A user query analysed for the keyword stages.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedQuery {
    /// Non-CJK terms (whitespace-separated, control characters removed), de-duplicated
    /// case-insensitively, in query order.
    pub words: Vec<String>,
    /// CJK runs of three or more characters (searched through the trigram index).
    pub cjk_long: Vec<String>,
    /// CJK runs of one or two characters (the trigram index cannot match them;
    /// searched by substring scan).
    pub cjk_short: Vec<String>,
    /// Set when the whole query is one identifier.
    pub identifier: Option<(IdentKind, String)>,
}

impl ParsedQuery {
    /// Analyse `query`.
    pub fn parse(query: &str) -> ParsedQuery {
        let clean: String = query
            .chars()
            .filter(|c| !c.is_control())
            .take(MAX_QUERY_CHARS)
            .collect();
        let mut words: Vec<String> = Vec::new();
        let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut cjk_long: Vec<String> = Vec::new();
        let mut cjk_short: Vec<String> = Vec::new();
        for raw in clean.split_whitespace() {
            if words.len() >= MAX_TERMS {
                break;
            }
            // Non-CJK pieces of each whitespace term go to the word index.
            let mut piece = String::new();
            let mut flush = |piece: &mut String| {
                let p = cap_phrase(&std::mem::take(piece));
                if words.len() < MAX_TERMS
                    && p.chars().any(char::is_alphanumeric)
                    && seen.insert(p.to_lowercase())
                {
                    words.push(p);
                }
            };
            for c in raw.chars() {
                if is_cjk(c) {
                    flush(&mut piece);
                } else {
                    piece.push(c);
                }
            }
            flush(&mut piece);
        }
        // Runs of letters/digits that contain CJK go to the trigram index whole
        // (CJK text has no spaces: `308分` or `NFL联赛` are one run in a chunk too).
        for run in clean.split(|c: char| !c.is_alphanumeric()) {
            if !run.chars().any(is_cjk) {
                continue;
            }
            let list = if run.chars().count() >= 3 {
                &mut cjk_long
            } else {
                &mut cjk_short
            };
            if !list.iter().any(|r| r == run) {
                list.push(run.to_string());
            }
        }
        words.truncate(MAX_TERMS);
        cjk_long.truncate(MAX_CJK_LONG);
        cjk_short.truncate(MAX_CJK_SHORT);
        let identifier = detect_identifier(clean.trim()).map(|k| (k, clean.trim().to_string()));
        ParsedQuery {
            words,
            cjk_long,
            cjk_short,
            identifier,
        }
    }

    /// Whether nothing searchable is left (the keyword stage is skipped).
    pub fn is_empty(&self) -> bool {
        self.words.is_empty() && self.cjk_long.is_empty() && self.cjk_short.is_empty()
    }

    /// The terms for the word index (`chunks_fts`), unquoted, as it holds them:
    /// each word's tokens stemmed ([`crate::words::query_term`]; a word with
    /// punctuation inside is a phrase), duplicates after stemming dropped. English
    /// stop words are left out when other terms remain (they add little to BM25 and
    /// make OR queries match nearly every chunk).
    pub fn fts_terms(&self) -> Vec<String> {
        let content: Vec<&String> = self.words.iter().filter(|w| !is_stopword(w)).collect();
        let chosen = if content.is_empty() {
            self.words.iter().collect()
        } else {
            content
        };
        let mut out: Vec<String> = Vec::with_capacity(chosen.len());
        for w in chosen {
            let t = crate::words::query_term(w);
            if !t.is_empty() && !out.contains(&t) {
                out.push(t);
            }
        }
        out
    }

    /// The `MATCH` expression for the word index (`chunks_fts`): every term of
    /// [`ParsedQuery::fts_terms`] quoted, combined with OR (BM25 ranks chunks with
    /// more and rarer terms higher).
    pub fn fts_match(&self) -> Option<String> {
        or_of(self.fts_terms().iter().map(String::as_str))
    }

    /// The terms for the trigram index (`chunks_trigram`), unquoted: the
    /// overlapping trigrams of every CJK run of three or more characters.
    pub fn trigram_terms(&self) -> Vec<String> {
        let mut grams: Vec<String> = Vec::new();
        for run in &self.cjk_long {
            for g in trigrams(run) {
                if !grams.contains(&g) {
                    grams.push(g);
                }
            }
        }
        grams.truncate(MAX_TRIGRAMS);
        grams
    }

    /// The `MATCH` expression for the trigram index: [`ParsedQuery::trigram_terms`]
    /// quoted and OR-ed.
    pub fn trigram_match(&self) -> Option<String> {
        or_of(self.trigram_terms().iter().map(String::as_str))
    }

    /// A relative weight per keyword sub-stage, proportional to how much of the query
    /// it covers: (word index, trigram index, short-CJK scan). Sums to 1 unless empty.
    pub fn stage_shares(&self) -> (f64, f64, f64) {
        let w = self.words.len() as f64;
        let t: f64 = self
            .cjk_long
            .iter()
            .map(|r| (r.chars().count() as f64 / 2.0).ceil())
            .sum();
        let s = self.cjk_short.len() as f64;
        let total = w + t + s;
        if total == 0.0 {
            return (0.0, 0.0, 0.0);
        }
        (w / total, t / total, s / total)
    }
}

/// Common English words dropped from OR queries (when other terms remain).
const STOPWORDS: &[&str] = &[
    "a", "about", "an", "and", "are", "as", "at", "be", "by", "did", "do", "does", "for", "from",
    "how", "i", "in", "is", "it", "my", "of", "on", "or", "that", "the", "this", "to", "was", "we",
    "what", "when", "where", "which", "who", "why", "with",
];

/// Whether `w` is an English stop word (case-insensitive, whole term).
pub fn is_stopword(w: &str) -> bool {
    STOPWORDS.iter().any(|s| s.eq_ignore_ascii_case(w))
}

/// Quote one term as an FTS5 string: wrapped in `"`, inner `"` doubled.
pub fn quote(term: &str) -> String {
    let mut s = String::with_capacity(term.len() + 2);
    s.push('"');
    for c in term.chars() {
        if c == '"' {
            s.push('"');
        }
        if !c.is_control() {
            s.push(c);
        }
    }
    s.push('"');
    s
}

fn or_of<'a>(terms: impl Iterator<Item = &'a str>) -> Option<String> {
    let parts: Vec<String> = terms.map(quote).collect();
    (!parts.is_empty()).then(|| parts.join(" OR "))
}

/// Which terms of an OR query the keyword stage ranks, chosen to bound the BM25
/// work (FTS5 scores every matching row before it sorts, so the cost grows with
/// the rows the query matches, not with `LIMIT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TermPlan {
    /// Rank the OR of every term: exact BM25.
    All,
    /// Rank the OR of these terms (indices into the term list, in query order):
    /// the rarest terms whose document counts fit the budget together. The terms
    /// left out are the query's most frequent, so their BM25 weight (idf) is the
    /// lowest of the query's; they act as stop words.
    Subset(Vec<usize>),
    /// Every term occurs in more chunks than the budget: rank the conjunction
    /// (and, if that matches too many rows, only its newest rows; see
    /// `engine::keyword_plan`).
    AllCommon,
}

/// Choose the terms to rank from their document counts (each capped at
/// `budget + 1`, so a count above `budget` means "more than the budget").
/// Pure.
pub fn plan_terms(doc_counts: &[usize], budget: usize) -> TermPlan {
    if doc_counts.iter().sum::<usize>() <= budget {
        return TermPlan::All;
    }
    let mut order: Vec<usize> = (0..doc_counts.len()).collect();
    order.sort_by_key(|&i| (doc_counts[i], i));
    let mut used = 0usize;
    let mut keep = Vec::new();
    for i in order {
        if used + doc_counts[i] > budget {
            break;
        }
        used += doc_counts[i];
        keep.push(i);
    }
    if keep.is_empty() {
        return TermPlan::AllCommon;
    }
    keep.sort_unstable();
    TermPlan::Subset(keep)
}

/// Overlapping three-character windows of `s` (empty if shorter than three).
pub fn trigrams(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.windows(3).map(|w| w.iter().collect()).collect()
}

static TICKET: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z][A-Za-z0-9]*-[0-9]+$").expect("static regex"));
static HEX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[0-9a-fA-F]{7,128}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")
        .expect("static regex")
});
static PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[~.]?/?(?:[\w.@+-]+/)+[\w.@+-]+/?|[\w@+-][\w.@+-]*\.[A-Za-z][A-Za-z0-9]{0,9}|\w+(?:::\w+)+)$")
        .expect("static regex")
});
static SNAKE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^_*[A-Za-z0-9]+(?:_+[A-Za-z0-9]+)+_*$").expect("static regex"));
static CAMEL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z][A-Za-z0-9]*[a-z0-9][A-Z][A-Za-z0-9]*$").expect("static regex")
});
static NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:#[0-9]+|[vV]?[0-9]+(?:[.,][0-9]+)*)$").expect("static regex")
});

/// Whether the whole (trimmed) query is one identifier, and which kind.
/// Hex strings count as hashes only when they have a digit and a letter (so
/// `deadline` or `1234567` are not hashes), or are at least 32 characters.
pub fn detect_identifier(q: &str) -> Option<IdentKind> {
    let q = q.trim();
    if q.is_empty() || q.chars().any(char::is_whitespace) || q.chars().count() > 256 {
        return None;
    }
    if NUMBER.is_match(q) {
        return Some(IdentKind::Number);
    }
    if TICKET.is_match(q) {
        return Some(IdentKind::Ticket);
    }
    if HEX.is_match(q) {
        let digit = q.chars().any(|c| c.is_ascii_digit());
        let letter = q.chars().any(|c| c.is_ascii_alphabetic());
        if (digit && letter) || q.len() >= 32 || q.contains('-') {
            return Some(IdentKind::Hash);
        }
    }
    if PATH.is_match(q) && q.chars().any(|c| c.is_alphanumeric()) {
        return Some(IdentKind::Path);
    }
    if SNAKE.is_match(q) {
        return Some(IdentKind::SnakeCase);
    }
    if CAMEL.is_match(q) {
        return Some(IdentKind::CamelCase);
    }
    None
}

/// `word` cut after its [`MAX_PHRASE_TOKENS`]th run of letters/digits (the
/// tokens FTS5 will see), so one term never becomes a huge phrase.
fn cap_phrase(word: &str) -> String {
    let mut runs = 0;
    let mut in_run = false;
    for (i, c) in word.char_indices() {
        let alnum = c.is_alphanumeric();
        if alnum && !in_run {
            runs += 1;
            if runs > MAX_PHRASE_TOKENS {
                return word[..i]
                    .trim_end_matches(|c: char| !c.is_alphanumeric())
                    .to_string();
            }
        }
        in_run = alnum;
    }
    word.to_string()
}

/// Whether `needle` occurs in `text` verbatim (case-sensitive) as a whole token:
/// the characters around the occurrence are not letters, digits or `_`.
pub fn contains_verbatim(text: &str, needle: &str) -> bool {
    if needle.is_empty() {
        return false;
    }
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let first_word = needle.chars().next().is_some_and(is_word);
    let last_word = needle.chars().next_back().is_some_and(is_word);
    let mut from = 0;
    while let Some(pos) = text[from..].find(needle) {
        let start = from + pos;
        let end = start + needle.len();
        let before_ok = !first_word || !text[..start].chars().next_back().is_some_and(is_word);
        let after_ok = !last_word || !text[end..].chars().next().is_some_and(is_word);
        if before_ok && after_ok {
            return true;
        }
        from = start + needle.chars().next().map_or(1, char::len_utf8);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_queries_are_bounded() {
        // One 10 kB "word" of 5,000 tokens becomes a phrase of MAX_PHRASE_TOKENS.
        let q = vec!["a"; 5000].join("/");
        let p = ParsedQuery::parse(&q);
        assert_eq!(p.words.len(), 1);
        assert_eq!(
            p.words[0].split('/').count(),
            MAX_PHRASE_TOKENS,
            "{}",
            p.words[0]
        );
        assert!(!p.words[0].ends_with('/'));
        // Thousands of distinct words: at most MAX_TERMS, in query order.
        let q: Vec<String> = (0..3000).map(|i| format!("w{i}")).collect();
        let p = ParsedQuery::parse(&q.join(" "));
        assert_eq!(p.words.len(), MAX_TERMS);
        assert_eq!(p.words[0], "w0");
        // Only the first MAX_QUERY_CHARS characters are read.
        let q = format!("{} tail", "x".repeat(MAX_QUERY_CHARS));
        assert!(!ParsedQuery::parse(&q).words.iter().any(|w| w == "tail"));
        // Distinct CJK runs are bounded (each short run is a substring scan).
        let q: String = (0..400)
            .map(|i| {
                format!(
                    "{}x",
                    ['的', '是', '东', '猫'][i % 4]
                        .to_string()
                        .repeat(1 + i % 2)
                )
            })
            .collect();
        let p = ParsedQuery::parse(&q);
        assert!(p.cjk_short.len() <= MAX_CJK_SHORT && p.cjk_long.len() <= MAX_CJK_LONG);
        // Ordinary words are untouched.
        assert_eq!(
            ParsedQuery::parse("src/memory/store.rs").words,
            vec!["src/memory/store.rs"]
        );
    }

    #[test]
    fn operators_lose_meaning() {
        let q = ParsedQuery::parse(r#"foo AND bar OR NOT baz NEAR(a b) "x" * ^c col:d"#);
        // (OR / AND / NOT are stop-word-free here: "or"/"and" are stop words, so use the raw list.)
        let m = or_of(q.words.iter().map(String::as_str)).unwrap();
        assert_eq!(
            m,
            r#""foo" OR "AND" OR "bar" OR "OR" OR "NOT" OR "baz" OR "NEAR(a" OR "b)" OR """x""" OR "^c" OR "col:d""#
        );
        // `*` alone has no letter or digit: dropped.
        assert!(!q.words.iter().any(|w| w == "*"));
    }

    #[test]
    fn stopwords_dropped_only_when_others_remain() {
        let q = ParsedQuery::parse("what is the deploy plan");
        assert_eq!(q.fts_match().unwrap(), r#""deploy" OR "plan""#);
        let q = ParsedQuery::parse("what is it");
        assert_eq!(q.fts_match().unwrap(), r#""what" OR "is" OR "it""#);
    }

    #[test]
    fn word_terms_are_stemmed_and_deduplicated() {
        let q = ParsedQuery::parse("Deploying deploys the backups, INFRA-4127");
        assert_eq!(q.fts_terms(), ["deploy", "backup", "infra 4127"]);
        assert_eq!(
            q.fts_match().unwrap(),
            r#""deploy" OR "backup" OR "infra 4127""#
        );
    }

    #[test]
    fn empty_after_sanitising() {
        for s in ["", "   ", "* ^ : ( ) \"", "\0\0", "🎉🎉", "-- ++"] {
            let q = ParsedQuery::parse(s);
            assert!(q.is_empty(), "{s:?} -> {q:?}");
            assert!(q.fts_match().is_none() && q.trigram_match().is_none());
        }
    }

    #[test]
    fn quoting_doubles_quotes_and_drops_controls() {
        assert_eq!(quote(r#"a"b"#), r#""a""b""#);
        assert_eq!(quote("a\0b"), r#""ab""#);
    }

    #[test]
    fn duplicates_collapse_case_insensitively() {
        let q = ParsedQuery::parse("Rust rust RUST tokio");
        assert_eq!(q.words, vec!["Rust", "tokio"]);
    }

    #[test]
    fn cjk_runs_split_by_length() {
        let q = ParsedQuery::parse("黑豹队的防守 猫 东京 tower东京塔");
        assert_eq!(q.cjk_long, vec!["黑豹队的防守", "tower东京塔"]);
        assert_eq!(q.cjk_short, vec!["猫", "东京"]);
        assert_eq!(q.words, vec!["tower"]);
        let m = q.trigram_match().unwrap();
        assert!(m.starts_with(r#""黑豹队" OR "豹队的""#), "{m}");
        assert!(m.contains(r#""东京塔""#) && m.contains(r#""r东京""#));
        let (w, t, s) = q.stage_shares();
        assert!((w + t + s - 1.0).abs() < 1e-9 && w > 0.0 && t > 0.0 && s > 0.0);
    }

    #[test]
    fn trigram_windows() {
        assert_eq!(trigrams("abcd"), vec!["abc", "bcd"]);
        assert!(trigrams("ab").is_empty());
    }

    #[test]
    fn identifiers() {
        use IdentKind::*;
        let cases = [
            ("ABC-123", Some(Ticket)),
            ("proj-7", Some(Ticket)),
            ("3f9a2c1", Some(Hash)),
            (
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                Some(Hash),
            ),
            ("123e4567-e89b-12d3-a456-426614174000", Some(Hash)),
            ("src/memory/store.rs", Some(Path)),
            ("config.json", Some(Path)),
            ("~/.claw/config.json", Some(Path)),
            ("std::fs::read", Some(Path)),
            ("vector_weight", Some(SnakeCase)),
            ("MAX_TERMS", Some(SnakeCase)),
            ("CamelCase", Some(CamelCase)),
            ("getHTTPResponse", Some(CamelCase)),
            ("1234", Some(Number)),
            ("#1234", Some(Number)),
            ("v1.2.3", Some(Number)),
            ("3.14", Some(Number)),
            ("deadline", None),
            ("hello", None),
            ("Hello", None),
            ("two words", None),
            ("", None),
            ("东京", None),
            ("e.g.", None),
        ];
        for (q, want) in cases {
            assert_eq!(detect_identifier(q), want, "{q}");
        }
        assert_eq!(
            ParsedQuery::parse("  ABC-123 ").identifier,
            Some((Ticket, "ABC-123".to_string()))
        );
    }

    #[test]
    fn verbatim_respects_token_boundaries() {
        assert!(contains_verbatim("see ABC-123 today", "ABC-123"));
        assert!(contains_verbatim("(ABC-123)", "ABC-123"));
        assert!(!contains_verbatim("see ABC-1234", "ABC-123"));
        assert!(!contains_verbatim("see XABC-123", "ABC-123"));
        assert!(!contains_verbatim("see abc-123", "ABC-123"));
        assert!(contains_verbatim("x ABC-1234 and ABC-123.", "ABC-123"));
        assert!(contains_verbatim("path src/a.rs:12", "src/a.rs"));
        assert!(!contains_verbatim("", "x"));
    }

    #[test]
    fn term_plan_bounds_the_ranked_rows() {
        // Cheap enough: every term.
        assert_eq!(plan_terms(&[10, 200, 3], 1000), TermPlan::All);
        assert_eq!(plan_terms(&[], 1000), TermPlan::All);
        // Too many rows: the rarest terms that fit, in query order.
        assert_eq!(
            plan_terms(&[1001, 300, 1001, 600, 200], 1000),
            TermPlan::Subset(vec![1, 4])
        );
        assert_eq!(plan_terms(&[1001, 5], 1000), TermPlan::Subset(vec![1]));
        // Ties keep query order; the budget is inclusive.
        assert_eq!(
            plan_terms(&[500, 500, 500], 1000),
            TermPlan::Subset(vec![0, 1])
        );
        // Every term above the budget.
        assert_eq!(plan_terms(&[1001, 1001], 1000), TermPlan::AllCommon);
        assert_eq!(plan_terms(&[1001], 1000), TermPlan::AllCommon);
    }
}

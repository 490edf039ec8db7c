//! Second-pass retrieval variants measured for conversational recall (issue 29,
//! item 4): pseudo-relevance feedback and entity expansion (words of the first
//! hits added to the query), an LLM's rewrite of the question, neighbouring
//! turns folded into a hit, and a selection that spreads hits across sessions.
//! Pure: the caller runs the searches (and the model) and hands the first hits'
//! texts (or the model's reply) here.
//!
//! BENCHMARKS.md ("Retrieval quality: conversations", "what was tried") has the
//! figures of each on the MemoryBank and synthetic sets; `claw memory eval
//! --expand VARIANT` measures them.
#![warn(missing_docs)]

use super::query::is_stopword;
use std::collections::HashMap;

/// A retrieval variant on top of a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expansion {
    /// Pseudo-relevance feedback: the words the first hits share, added to the
    /// query; the two rankings fused by reciprocal rank.
    Prf,
    /// Entity expansion: capitalised names from the first hits added to the
    /// query; the two rankings fused by reciprocal rank.
    Entities,
    /// A hit also spans its neighbouring turns of the same session.
    Neighbours,
    /// The first hits spread across sessions: a hit from a session already
    /// chosen is demoted.
    Spread,
    /// An LLM rewrites the question as a search query ([`REWRITE_SYSTEM`]); its
    /// new words are added to the query and the two rankings fused by
    /// reciprocal rank.
    Rewrite,
}

impl Expansion {
    /// Every variant, in report order.
    pub const ALL: [Expansion; 5] = [
        Expansion::Prf,
        Expansion::Entities,
        Expansion::Neighbours,
        Expansion::Spread,
        Expansion::Rewrite,
    ];

    /// The name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Expansion::Prf => "prf",
            Expansion::Entities => "entities",
            Expansion::Neighbours => "neighbours",
            Expansion::Spread => "spread",
            Expansion::Rewrite => "rewrite",
        }
    }

    /// The variant named `s`.
    pub fn parse(s: &str) -> Option<Expansion> {
        Expansion::ALL.into_iter().find(|e| e.name() == s)
    }
}

/// First hits whose texts feed the expansion.
pub const FEEDBACK_HITS: usize = 3;
/// Words added to the query by pseudo-relevance feedback.
pub const FEEDBACK_TERMS: usize = 5;
/// Names added to the query by entity expansion.
pub const ENTITY_TERMS: usize = 4;

/// Lower-case alphabetic words of `text`, with the role prefix (`user:`,
/// `assistant:`) skipped.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
}

fn is_role(w: &str) -> bool {
    w.eq_ignore_ascii_case("user") || w.eq_ignore_ascii_case("assistant")
}

/// Feedback words: content words (4+ letters, not stop words, not in the query,
/// not a speaker's role) of the first hits' `texts`, ranked by how many of the
/// texts hold them, then by how often they occur; at most `n`, ties in first
/// occurrence order.
pub fn feedback_terms(query: &str, texts: &[&str], n: usize) -> Vec<String> {
    let asked: Vec<String> = words(query).map(str::to_lowercase).collect();
    let mut order: Vec<String> = Vec::new();
    let mut counts: HashMap<String, (usize, usize)> = HashMap::new();
    for text in texts {
        let mut seen: Vec<String> = Vec::new();
        for w in words(text) {
            let lw = w.to_lowercase();
            if lw.chars().count() < 4
                || !lw.chars().all(char::is_alphabetic)
                || is_stopword(&lw)
                || is_role(&lw)
                || EXTRA_STOP.contains(&lw.as_str())
                || asked.contains(&lw)
            {
                continue;
            }
            let e = counts.entry(lw.clone()).or_insert_with(|| {
                order.push(lw.clone());
                (0, 0)
            });
            e.1 += 1;
            if !seen.contains(&lw) {
                e.0 += 1;
                seen.push(lw);
            }
        }
    }
    let mut ranked: Vec<(usize, &String)> = order.iter().enumerate().collect();
    ranked.sort_by(|(ia, a), (ib, b)| {
        let (ca, cb) = (counts[*a], counts[*b]);
        cb.cmp(&ca).then(ia.cmp(ib))
    });
    ranked.into_iter().take(n).map(|(_, w)| w.clone()).collect()
}

/// Words too common in conversation to carry evidence.
const EXTRA_STOP: &[&str] = &[
    "have", "been", "your", "you're", "that's", "what", "with", "this", "they", "them", "there",
    "their", "then", "than", "also", "just", "like", "very", "really", "some", "would", "could",
    "should", "will", "into", "about", "more", "most", "much", "many", "other", "such", "only",
    "even", "well", "here", "know", "think", "sure", "great", "good", "it's", "i'm", "don't",
    "can't", "make", "help", "feel", "find", "need", "want", "things", "thing", "time", "while",
    "were", "when", "where", "which", "these", "those", "because", "being", "does", "doing",
];

/// Names: capitalised words of the first hits' `texts` that do not open a
/// sentence (nor follow a role prefix), not the query's own words, not `I`;
/// ranked by how many texts hold them, then by count; at most `n`.
pub fn entity_terms(query: &str, texts: &[&str], n: usize) -> Vec<String> {
    let asked: Vec<String> = words(query).map(str::to_lowercase).collect();
    let mut order: Vec<String> = Vec::new();
    let mut counts: HashMap<String, (usize, usize)> = HashMap::new();
    for text in texts {
        let mut seen: Vec<String> = Vec::new();
        let mut sentence_start = true;
        let mut rest: &str = text;
        while !rest.is_empty() {
            let start = rest
                .find(|c: char| c.is_alphanumeric())
                .unwrap_or(rest.len());
            let gap = &rest[..start];
            if gap.contains(['.', '!', '?', ':', '\n', '"']) {
                sentence_start = true;
            }
            rest = &rest[start..];
            let end = rest
                .find(|c: char| !c.is_alphanumeric() && c != '\'')
                .unwrap_or(rest.len());
            let w = &rest[..end];
            rest = &rest[end..];
            if w.is_empty() {
                continue;
            }
            let opens = sentence_start;
            sentence_start = false;
            let capital = w.chars().next().is_some_and(char::is_uppercase);
            let lw = w.to_lowercase();
            if opens
                || !capital
                || w.chars().count() < 3
                || is_role(w)
                || is_stopword(&lw)
                || EXTRA_STOP.contains(&lw.as_str())
                || asked.contains(&lw)
            {
                continue;
            }
            let e = counts.entry(w.to_string()).or_insert_with(|| {
                order.push(w.to_string());
                (0, 0)
            });
            e.1 += 1;
            if !seen.iter().any(|s| s == w) {
                e.0 += 1;
                seen.push(w.to_string());
            }
        }
    }
    let mut ranked: Vec<(usize, &String)> = order.iter().enumerate().collect();
    ranked.sort_by(|(ia, a), (ib, b)| {
        let (ca, cb) = (counts[*a], counts[*b]);
        cb.cmp(&ca).then(ia.cmp(ib))
    });
    ranked.into_iter().take(n).map(|(_, w)| w.clone()).collect()
}

/// The instructions of [`Expansion::Rewrite`]'s model call; the user message
/// is the question alone.
pub const REWRITE_SYSTEM: &str = "You turn a question about the user's past \
conversations into a search query. Reply with one line: the question's key words, then \
other words a conversation about it would likely have used (synonyms, names, related \
things). No answer, no explanation.";

/// Words of a rewrite added to the query, at most.
pub const REWRITE_TERMS: usize = 12;

/// The words a model's rewrite (`reply` to [`REWRITE_SYSTEM`]) adds to `query`:
/// from its first non-empty line, content words (3+ letters or digits, not stop
/// words, not a speaker's role, not already asked), lower-cased, each once, in
/// order; at most `n`. Empty when the reply adds nothing.
pub fn rewrite_terms(query: &str, reply: &str, n: usize) -> Vec<String> {
    let asked: Vec<String> = words(query).map(str::to_lowercase).collect();
    let line = reply.lines().map(str::trim).find(|l| !l.is_empty());
    let mut out: Vec<String> = Vec::new();
    for w in line.into_iter().flat_map(words) {
        let lw = w.to_lowercase();
        if out.len() == n {
            break;
        }
        if lw.chars().count() < 3
            || is_stopword(&lw)
            || is_role(&lw)
            || EXTRA_STOP.contains(&lw.as_str())
            || asked.contains(&lw)
            || out.contains(&lw)
        {
            continue;
        }
        out.push(lw);
    }
    out
}

/// The query with `terms` appended.
pub fn expanded_query(query: &str, terms: &[String]) -> String {
    if terms.is_empty() {
        return query.to_string();
    }
    format!("{query} {}", terms.join(" "))
}

/// Reciprocal-rank fusion (k = 60) of two rankings of keys; the first ranking
/// wins ties. At most `limit` keys.
pub fn rrf<K: Clone + Eq + std::hash::Hash>(first: &[K], second: &[K], limit: usize) -> Vec<K> {
    let mut score: HashMap<K, f64> = HashMap::new();
    let mut order: Vec<K> = Vec::new();
    for list in [first, second] {
        for (r, k) in list.iter().enumerate() {
            let s = score.entry(k.clone()).or_insert_with(|| {
                order.push(k.clone());
                0.0
            });
            *s += 1.0 / (60.0 + r as f64 + 1.0);
        }
    }
    let mut idx: Vec<usize> = (0..order.len()).collect();
    idx.sort_by(|&a, &b| {
        score[&order[b]]
            .total_cmp(&score[&order[a]])
            .then(a.cmp(&b))
    });
    idx.into_iter()
        .take(limit)
        .map(|i| order[i].clone())
        .collect()
}

/// Spread a ranking across sessions: walk `sessions` (each hit's session, best
/// first) greedily, taking the hit with the best `1/(rank+1) − penalty·(hits of
/// its session already taken)/(taken+1)`; returns indices, at most `limit`.
pub fn spread(sessions: &[&str], penalty: f64, limit: usize) -> Vec<usize> {
    let n = sessions.len();
    let mut taken = vec![false; n];
    let mut out: Vec<usize> = Vec::with_capacity(limit.min(n));
    let mut per: HashMap<&str, usize> = HashMap::new();
    while out.len() < limit.min(n) {
        let mut best: Option<(usize, f64)> = None;
        for i in 0..n {
            if taken[i] {
                continue;
            }
            let same = per.get(sessions[i]).copied().unwrap_or(0) as f64;
            let v = 1.0 / (i as f64 + 1.0) - penalty * same / (out.len() as f64 + 1.0);
            if best.is_none_or(|(_, b)| v > b) {
                best = Some((i, v));
            }
        }
        let Some((pick, _)) = best else { break };
        taken[pick] = true;
        *per.entry(sessions[pick]).or_insert(0) += 1;
        out.push(pick);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feedback_prefers_words_several_hits_share_and_skips_the_query() {
        let texts = [
            "user: I adopted a kitten called Miso last spring",
            "assistant: Miso sounds lovely, kittens need patience",
            "user: Miso scratched the sofa again",
        ];
        let t = feedback_terms("what pet did I adopt", &texts, 3);
        assert_eq!(t[0], "miso", "{t:?}");
        assert!(!t.iter().any(|w| w == "user" || w == "assistant"), "{t:?}");
        let t = feedback_terms("tell me about Miso", &texts, 3);
        assert!(!t.contains(&"miso".to_string()), "{t:?}");
    }

    #[test]
    fn entities_are_capitalised_words_inside_sentences() {
        let texts = [
            "user: Yesterday I watched Interstellar with Anna. It was long.",
            "assistant: Interstellar is by Christopher Nolan.",
        ];
        let e = entity_terms("which film did I see", &texts, 4);
        assert_eq!(e[0], "Interstellar", "{e:?}");
        assert!(e.contains(&"Anna".to_string()), "{e:?}");
        assert!(!e.contains(&"Yesterday".to_string()), "{e:?}");
        assert!(!e.contains(&"It".to_string()), "{e:?}");
    }

    #[test]
    fn a_rewrite_adds_its_first_lines_new_content_words() {
        let reply =
            "\n  Sister book recommendation, novel gift reading\nI think the answer is Dune";
        let t = rewrite_terms("What book did I recommend to my sister?", reply, 12);
        assert_eq!(t, ["recommendation", "novel", "gift", "reading"], "{t:?}");
        assert_eq!(
            rewrite_terms("What book?", "novel gift reading", 2).len(),
            2
        );
        // Control: a reply of the query's own words adds nothing.
        assert!(rewrite_terms("book sister", "Book, sister!", 12).is_empty());
        assert!(rewrite_terms("book sister", "  \n", 12).is_empty());
    }

    #[test]
    fn rrf_and_spread() {
        assert_eq!(rrf(&["a", "b", "c"], &["c", "a"], 3), vec!["a", "c", "b"]);
        // Three hits of one session then one of another: the other moves up.
        let order = spread(&["s1", "s1", "s1", "s2"], 1.0, 4);
        assert_eq!(order[0], 0);
        assert!(order.iter().position(|&i| i == 3).unwrap() < 3, "{order:?}");
        assert_eq!(spread(&["s1", "s2", "s3"], 1.0, 3), vec![0, 1, 2]);
        assert_eq!(spread(&["s1", "s1"], 0.0, 2), vec![0, 1]);
    }
}

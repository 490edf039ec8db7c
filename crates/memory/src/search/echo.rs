//! The query's echo in the transcripts: an earlier session where the user asked
//! the very same question. That turn matches the query almost word for word, so
//! by relevance alone the exchange holding it outranks the note that answers it
//! (the assistant's answer there is only the note said again). A question asked
//! before is not evidence of its answer, so such a chunk scores [`ECHO_FACTOR`]
//! of its score, on top of the transcript's source factor
//! (`score::source_factor`). Like that factor it only reorders: the minimum score
//! tests the relevance before it, and with no note on the subject the exchange
//! still comes back.
//!
//! A user line echoes the query when it holds at least 4/5 of the query's
//! distinct words (CJK: character bigrams, `score::token_set`) and is not much
//! longer than the query (at most 1.5 × its words + 2): a long turn that
//! happens to hold the words is a statement, not the question again. A query of
//! two distinct words is judged only by a line that holds both and at most two
//! words more ("topoi marinov?", "what about topoi marinov"); a one-word query
//! never (too little to tell).
//!
//! An echo's words are the query's own, so its keyword score would be the
//! query's best and, scaled against it, every note's would fall: the engine
//! scales the keyword scores against the best hit that is not an echo
//! (`engine::search_in_zone`).
//!
//! What the rest of such an exchange says is judged without the echoing line
//! ([`without_echoes`]): an answer that repeats a kept note ranks below that
//! note (`score::cap_repeats_of_notes`), even where the question's own words
//! would have made the exchange look like more than the note.

use super::score::token_set;

/// The share of its score a transcript chunk keeps when a user line in it
/// asks the query again.
pub const ECHO_FACTOR: f64 = 0.5;

/// [`ECHO_FACTOR`] for a transcript chunk (source `sessions`) with a user
/// line that echoes `query`, else 1.
pub fn echo_factor(query: &str, source: &str, text: &str) -> f64 {
    if source != crate::walk::SOURCE_SESSIONS {
        return 1.0;
    }
    let q = token_set(query);
    if text.lines().any(|l| echoes(&q, l)) {
        ECHO_FACTOR
    } else {
        1.0
    }
}

/// `text` without the lines that echo `query` (the lines [`echo_factor`]
/// judges), for weighing what the rest of the exchange says. The question asked
/// again is the query, not content: an exchange whose answer repeats a note is a
/// repeat of that note (`score::cap_repeats_of_notes`), whether or not it opens
/// with the query.
pub fn without_echoes(query: &str, text: &str) -> String {
    let q = token_set(query);
    text.lines()
        .filter(|l| !echoes(&q, l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `line` is a user line that asks the query (`q`, its [`token_set`])
/// again.
fn echoes(q: &[u64], line: &str) -> bool {
    let Some(said) = line.strip_prefix("user: ") else {
        return false;
    };
    if q.len() < 2 {
        return false;
    }
    let l = token_set(said);
    let covered = q.iter().filter(|t| l.binary_search(t).is_ok()).count();
    if q.len() == 2 {
        covered == 2 && l.len() <= 4
    } else {
        covered * 5 >= q.len() * 4 && l.len() * 2 <= q.len() * 3 + 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_echoes_drops_only_the_question_asked_again() {
        let q = "how much money can we spend on the company trip";
        let text = "user: How much money can we spend on the company trip?\n\
                    assistant: The Lisbon retreat has 18,000 EUR for 14 people.\n\
                    user: how much money did we spend last year\n\
                    assistant: 15,500 EUR.";
        assert_eq!(
            without_echoes(q, text),
            "assistant: The Lisbon retreat has 18,000 EUR for 14 people.\n\
             user: how much money did we spend last year\n\
             assistant: 15,500 EUR."
        );
        // Controls: nothing echoes, nothing is dropped; an assistant line with
        // the same words is not a question asked again.
        let other = "user: what is the retreat budget\nassistant: 18,000 EUR";
        assert_eq!(without_echoes(q, other), other);
        let said = "assistant: how much money can we spend on the company trip";
        assert_eq!(without_echoes(q, said), said);
        assert_eq!(without_echoes("budget", "user: budget"), "user: budget");
    }

    #[test]
    fn a_question_asked_again_is_an_echo_and_other_turns_are_not() {
        let q = "does foam detect orphan nodes";
        let s = "sessions";
        // The same question, in other words' order and case, with a "?".
        assert_eq!(
            echo_factor(
                q,
                s,
                "user: Does Foam detect orphan nodes?\nassistant: Yes: the graph view lists them."
            ),
            ECHO_FACTOR
        );
        // One word dropped of six still echoes (5/6 ≥ 4/5).
        assert_eq!(
            echo_factor(
                "how long does the UPS last",
                s,
                "user: how long does the UPS last?"
            ),
            ECHO_FACTOR
        );
        // Controls: notes never; the assistant's line never; a long statement
        // that holds the words is not the question again; a different question.
        assert_eq!(
            echo_factor(q, "memory", "user: does foam detect orphan nodes"),
            1.0
        );
        assert_eq!(
            echo_factor(
                q,
                s,
                "user: what now?\nassistant: does foam detect orphan nodes"
            ),
            1.0
        );
        assert_eq!(
            echo_factor(
                q,
                s,
                "user: I read that foam can detect orphan nodes and also does backlinks, tags, \
                 graph views, daily notes and templates, which is why I switched to it last year"
            ),
            1.0
        );
        assert_eq!(echo_factor(q, s, "user: does obsidian sync my vault"), 1.0);
        // Two words: the line holds both and little more.
        assert_eq!(
            echo_factor("topoi marinov", s, "user: topoi marinov"),
            ECHO_FACTOR
        );
        assert_eq!(
            echo_factor("topoi marinov", s, "user: what about Topoi Marinov?"),
            ECHO_FACTOR
        );
        // Controls: one of the two words; both inside a longer statement.
        assert_eq!(echo_factor("topoi marinov", s, "user: topoi again"), 1.0);
        assert_eq!(
            echo_factor(
                "topoi marinov",
                s,
                "user: Marinov wrote the topoi chapter of the handbook last spring"
            ),
            1.0
        );
        // Too short a query to judge.
        assert_eq!(echo_factor("orphans", s, "user: orphans"), 1.0);
        // CJK: bigrams.
        assert_eq!(
            echo_factor(
                "黑豹队的防守丢了多少分",
                s,
                "user: 黑豹队的防守丢了多少分？"
            ),
            ECHO_FACTOR
        );
    }
}

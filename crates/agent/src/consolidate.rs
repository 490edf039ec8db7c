//! Consolidation into MEMORY.md: the model distils durable facts (people,
//! decisions, preferences, standing instructions) from the conversation not yet
//! consolidated; this module builds that request, parses the reply and merges
//! the facts into the current MEMORY.md — deduplicated against what is there,
//! an update replacing the fact it changes (with the old value kept as dated
//! history: `- Budget cap: 15000 EUR (since 2026-12-02; was 12000 EUR)`),
//! grouped under headings, redacted, and bounded: when the file would pass its
//! size limit, older consolidated entries are rewritten tersely instead of the
//! file growing (and facts that still do not fit are left out, never the user's
//! own text). Pure: the core asks the driver for the file and writes the result
//! through the `write_file` tool.

use crate::compaction::{FLUSH_DONE, render_transcript};
use crate::message::{ChatRequest, Message};
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;

/// Default bound of MEMORY.md in bytes (`agent.memory_max_bytes`).
pub const DEFAULT_MAX_BYTES: usize = 8 * 1024;
/// The file consolidation writes, relative to the workspace.
pub const MEMORY_FILE: &str = "MEMORY.md";
/// The headings facts are grouped under, in this order.
pub const HEADINGS: [&str; 4] = [
    "People",
    "Decisions",
    "Preferences",
    "Standing instructions",
];
/// A rewritten (terse) entry is at most this many characters.
pub const TERSE_CHARS: usize = 72;
/// Where a fact came from ends its bullet: `- fact — from memory/2026-12-01.md#L3-L4`
/// (the scheduled consolidation's facts; `/remember`'s carry none). Ignored
/// when facts are compared.
pub const PROVENANCE: &str = " — from ";
/// The start of the dated headings the scheduled consolidation adds its facts
/// under (`## Consolidated on 2026-12-03`).
pub const DATED_PREFIX: &str = "Consolidated on ";

/// The dated heading of a scheduled consolidation on `day`.
pub fn dated_heading(day: chrono::NaiveDate) -> String {
    format!("{DATED_PREFIX}{}", day.format("%Y-%m-%d"))
}

/// Whether a `## ` section is consolidation's own: one of [`HEADINGS`] or a
/// dated heading (its older bullets may be rewritten tersely to keep the bound).
fn is_managed(name: &str) -> bool {
    HEADINGS.iter().any(|h| h.eq_ignore_ascii_case(name)) || name.starts_with(DATED_PREFIX)
}

const SYSTEM: &str = "You maintain MEMORY.md, the long-term memory of a personal AI \
assistant. From the conversation, extract only durable facts worth remembering for months: \
people (who they are, roles, relationships), decisions (what was decided, and why), \
preferences (how the user likes things done), standing instructions (rules the user wants \
always followed). Leave out what MEMORY.md already says unchanged, small talk, one-off \
tasks, and anything secret (passwords, keys, tokens). When the conversation changes a fact \
MEMORY.md holds (same subject, new value, or the user corrects it), write the new fact and end \
its bullet with `(replaces: <the old fact as MEMORY.md words it>)`. Reply with Markdown only: \
the headings `## People`, `## Decisions`, `## Preferences`, `## Standing instructions`, each \
followed by `- ` bullets, one short self-contained fact per bullet; omit empty headings. If \
there is nothing new, reply exactly NO_REPLY.";

/// The model call that distils `messages` given the current MEMORY.md.
pub fn request(memory_md: &str, messages: &[Message], max_tokens: u32) -> ChatRequest {
    let conversation = render_transcript(messages, 2000, 24_000);
    let current = if memory_md.trim().is_empty() {
        "(empty)".to_string()
    } else {
        memory_md.to_string()
    };
    ChatRequest {
        system: SYSTEM.into(),
        messages: vec![Message::user(
            format!(
                "Current MEMORY.md:\n<memory>\n{current}\n</memory>\n\n\
                 Conversation to distil:\n<conversation>\n{conversation}</conversation>"
            ),
            // The request is not part of any history: its time is irrelevant.
            DateTime::<Utc>::UNIX_EPOCH,
        )],
        tools: Vec::new(),
        max_tokens,
    }
}

/// One distilled fact under its heading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    pub heading: String,
    pub text: String,
    /// Where it came from (a citation), written after it as [`PROVENANCE`].
    pub source: Option<String>,
}

/// The canonical heading for a heading the model wrote (unknown ones are kept).
fn canonical_heading(h: &str) -> String {
    let l = h.trim().trim_matches('#').trim().to_ascii_lowercase();
    let known = if l.contains("people") || l.contains("person") || l.contains("contact") {
        Some(HEADINGS[0])
    } else if l.contains("decision") {
        Some(HEADINGS[1])
    } else if l.contains("preference") {
        Some(HEADINGS[2])
    } else if l.contains("instruction") || l.contains("rule") {
        Some(HEADINGS[3])
    } else {
        None
    };
    known
        .map(str::to_string)
        .unwrap_or_else(|| h.trim().to_string())
}

/// The facts of a reply (`## Heading` + `- fact` lines; `NO_REPLY`: none).
/// Bullets before any heading go under "Notes".
pub fn parse_reply(reply: &str) -> Vec<Fact> {
    let reply = crate::think::strip(reply);
    let mut heading = "Notes".to_string();
    let mut out = Vec::new();
    for line in reply.lines() {
        let t = line.trim();
        if let Some(h) = t.strip_prefix("##") {
            heading = canonical_heading(h);
        } else if let Some(f) = t.strip_prefix("- ").or_else(|| t.strip_prefix("* ")) {
            let f = f.trim();
            if !f.is_empty() && f != FLUSH_DONE {
                out.push(Fact {
                    heading: heading.clone(),
                    text: f.to_string(),
                    source: None,
                });
            }
        }
    }
    out
}

/// What a merge did with one fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FactOutcome {
    /// Added as a new bullet.
    Added,
    /// Replaced the bullet it changes; `was` is the old value kept as history.
    Updated { was: String },
    /// Already there (or repeated in the reply).
    Duplicate,
    /// Left out: even the terse file had no room.
    Dropped,
    /// Nothing left once redacted and trimmed.
    Empty,
}

/// What a merge did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// The new MEMORY.md.
    pub text: String,
    /// Facts added.
    pub added: usize,
    /// Facts that replaced the one they change (its old value kept as history).
    pub updated: usize,
    /// Facts already there (or repeated in the reply).
    pub duplicates: usize,
    /// Older entries rewritten tersely to stay within the bound.
    pub condensed: usize,
    /// Facts left out because even the terse file had no room.
    pub dropped: usize,
    /// What happened to each fact, in the order given.
    pub outcomes: Vec<FactOutcome>,
}

impl Merged {
    /// Whether the file changes.
    pub fn changed(&self) -> bool {
        self.added > 0 || self.updated > 0 || self.condensed > 0
    }
}

#[derive(Debug, Clone)]
struct Section {
    /// The heading's name (`None`: text before the first `##`).
    name: Option<String>,
    lines: Vec<String>,
}

fn parse_doc(text: &str) -> Vec<Section> {
    let mut out = vec![Section {
        name: None,
        lines: Vec::new(),
    }];
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            out.push(Section {
                name: Some(h.trim().to_string()),
                lines: vec![line.to_string()],
            });
        } else if let Some(last) = out.last_mut() {
            last.lines.push(line.to_string());
        }
    }
    out
}

fn render_doc(doc: &[Section]) -> String {
    let mut out = String::new();
    for (i, s) in doc.iter().enumerate() {
        let mut lines = s.lines.clone();
        // One blank line between sections.
        while lines.last().is_some_and(|l| l.trim().is_empty()) {
            lines.pop();
        }
        if lines.is_empty() {
            continue;
        }
        if i > 0 && !out.is_empty() {
            out.push('\n');
        }
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

/// Lower-case words of a text (letters and digits), for comparing facts.
fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether `fact` says what `line` already says: the same words, one inside the
/// other, or most words shared.
fn same_fact(fact: &[String], line: &[String]) -> bool {
    if fact.is_empty() || line.is_empty() {
        return false;
    }
    let (f, l) = (fact.join(" "), line.join(" "));
    if f == l || (fact.len() >= 3 && l.contains(&f)) || (line.len() >= 3 && f.contains(&l)) {
        return true;
    }
    let a: BTreeSet<&String> = fact.iter().collect();
    let b: BTreeSet<&String> = line.iter().collect();
    let shared = a.intersection(&b).count() as f64;
    shared / (a.union(&b).count() as f64) >= 0.75
}

/// Words that say nothing about a fact's subject.
const STOP: &[&str] = &[
    "a",
    "an",
    "the",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "at",
    "to",
    "of",
    "in",
    "on",
    "for",
    "by",
    "with",
    "and",
    "or",
    "now",
    "currently",
    "still",
    "new",
    "it",
    "its",
    "my",
    "our",
    "their",
    "his",
    "her",
    "this",
    "that",
    "has",
    "have",
    "had",
    "as",
    "from",
    "per",
];

/// Whether a word is a value (it holds a digit: amounts, dates, versions).
fn is_value(w: &str) -> bool {
    w.chars().any(|c| c.is_ascii_digit())
}

/// Two words name the same thing: equal, or one a prefix of the other of at
/// least 3 letters (`cap` / `capped`, `deploy` / `deploys`).
fn word_match(a: &str, b: &str) -> bool {
    a == b || (a.len().min(b.len()) >= 3 && (a.starts_with(b) || b.starts_with(a)))
}

/// Share of the subject words (not values, not stop words) two facts have in
/// common (0 when either has fewer than 2).
fn subject_overlap(a: &[String], b: &[String]) -> f64 {
    let subj = |w: &[String]| -> Vec<String> {
        let mut v: Vec<String> = w
            .iter()
            .filter(|x| !is_value(x) && !STOP.contains(&x.as_str()))
            .cloned()
            .collect();
        v.dedup();
        v
    };
    let (a, b) = (subj(a), subj(b));
    if a.len() < 2 || b.len() < 2 {
        return 0.0;
    }
    let shared = a
        .iter()
        .filter(|x| b.iter().any(|y| word_match(x, y)))
        .count();
    shared as f64 / (a.len() + b.len() - shared) as f64
}

fn values(w: &[String]) -> BTreeSet<&str> {
    w.iter()
        .filter(|x| is_value(x))
        .map(String::as_str)
        .collect()
}

/// The history a bullet carries, ` (since …; was …)`, split off.
fn split_history(line: &str) -> (&str, Option<&str>) {
    match line.rfind(" (since ") {
        Some(i) if line.ends_with(')') => (&line[..i], Some(&line[i + 2..line.len() - 1])),
        _ => (line, None),
    }
}

/// A bullet's provenance, ` — from …` at its end, split off.
fn split_provenance(line: &str) -> (&str, Option<&str>) {
    match line.rfind(PROVENANCE) {
        Some(i) => (&line[..i], Some(&line[i + PROVENANCE.len()..])),
        None => (line, None),
    }
}

/// The fact a bullet states: without its marker, provenance and history.
fn bare(line: &str) -> &str {
    split_history(
        split_provenance(line.trim_start_matches(['-', '*', ' ']))
            .0
            .trim_end(),
    )
    .0
}

/// A fact's `(replaces: …)` marker, split off.
fn split_replaces(text: &str) -> (&str, Option<&str>) {
    let lower = text.to_ascii_lowercase();
    match lower.rfind("(replaces:") {
        Some(i) => {
            let inner = text[i + "(replaces:".len()..].trim_end();
            let inner = inner.strip_suffix(')').unwrap_or(inner).trim();
            (text[..i].trim_end(), Some(inner))
        }
        None => (text, None),
    }
}

/// How a new fact relates to a bullet already in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Relation {
    /// It says the same (a duplicate or a paraphrase, values equal).
    Same,
    /// Same subject, a different value: it replaces the bullet.
    Updates,
    Unrelated,
}

fn relation(new: &[String], old: &[String]) -> Relation {
    let (nv, ov) = (values(new), values(old));
    if nv != ov && !nv.is_empty() && !ov.is_empty() && subject_overlap(new, old) >= 0.6 {
        return Relation::Updates;
    }
    if (same_fact(new, old) && (nv == ov || nv.is_empty()))
        || (nv == ov && subject_overlap(new, old) >= 0.75)
    {
        return Relation::Same;
    }
    Relation::Unrelated
}

/// `was …` for a replaced bullet: the span of its words the new fact does not
/// have (with a short unit word after it, `12000 EUR`), else the whole bullet.
fn old_value(old: &str, new_words: &[String]) -> String {
    let toks: Vec<&str> = old.split_whitespace().collect();
    let differs = |t: &str| {
        words(t)
            .iter()
            .any(|x| !STOP.contains(&x.as_str()) && !new_words.iter().any(|n| word_match(x, n)))
    };
    let (Some(first), Some(last)) = (
        toks.iter().position(|t| differs(t)),
        toks.iter().rposition(|t| differs(t)),
    ) else {
        return old.to_string();
    };
    let mut end = last + 1;
    // A unit the new fact keeps too (`12000 EUR` → `15000 EUR`).
    if let Some(unit) = toks.get(end)
        && unit.chars().count() <= 4
        && words(unit)
            .first()
            .is_some_and(|u| !STOP.contains(&u.as_str()) && new_words.contains(u))
    {
        end += 1;
    }
    if end - first > 8 {
        return old.to_string();
    }
    toks[first..end]
        .join(" ")
        .trim_end_matches(['.', ',', ';'])
        .to_string()
}

const FILLER: &[&str] = &[
    "the",
    "a",
    "an",
    "that",
    "which",
    "who",
    "really",
    "very",
    "just",
    "also",
    "currently",
];

/// A terse rewrite of an entry: filler words dropped, cut at a word to
/// [`TERSE_CHARS`] with an ellipsis.
pub fn terse(entry: &str) -> String {
    let kept: Vec<&str> = entry
        .split_whitespace()
        .filter(|w| !FILLER.contains(&w.to_ascii_lowercase().as_str()))
        .collect();
    let mut out = String::new();
    for w in kept {
        if out.chars().count() + w.chars().count() + 1 > TERSE_CHARS {
            out.push('…');
            return out;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w);
    }
    out
}

/// Merge `facts` into `memory_md`: new facts (redacted) are appended as bullets
/// under their heading (created in [`HEADINGS`] order when missing), facts
/// already present are skipped, and the result stays within `max_bytes` by
/// rewriting the oldest bullets of the headings tersely first.
pub fn merge(memory_md: &str, facts: &[Fact], max_bytes: usize) -> Merged {
    merge_on(memory_md, facts, max_bytes, None)
}

/// [`merge`] on `today`: a fact that changes a bullet (same subject, another
/// value — or marked `(replaces: …)` by the model) replaces it in place, the
/// old value kept as history `(since today; was OLD)`; it is never dropped as
/// a duplicate, and the file never holds the old and the new value as current.
pub fn merge_on(
    memory_md: &str,
    facts: &[Fact],
    max_bytes: usize,
    today: Option<chrono::NaiveDate>,
) -> Merged {
    let mut doc = parse_doc(memory_md);
    if memory_md.trim().is_empty() {
        doc[0].lines = vec!["# Memory".into(), String::new()];
    }
    let mut known: Vec<Vec<String>> = doc
        .iter()
        .flat_map(|s| s.lines.iter())
        .map(|l| words(bare(l)))
        .collect();
    let mut merged = Merged {
        text: String::new(),
        added: 0,
        updated: 0,
        duplicates: 0,
        condensed: 0,
        dropped: 0,
        outcomes: Vec::with_capacity(facts.len()),
    };
    // Bullets written by this merge: (section index, line index, fact index,
    // whether it is an update), newest last.
    let mut fresh: Vec<(usize, usize, usize, bool)> = Vec::new();
    for (fi, fact) in facts.iter().enumerate() {
        let redacted = claw_memory_api::redact::redact(fact.text.trim()).into_owned();
        let (text, replaces) = split_replaces(&redacted);
        let text = text.to_string();
        let w = words(&text);
        if w.is_empty() {
            merged.outcomes.push(FactOutcome::Empty);
            continue;
        }
        let from = fact
            .source
            .as_deref()
            .map(|s| format!("{PROVENANCE}{s}"))
            .unwrap_or_default();
        // An update replaces the bullet it changes, in place.
        if let Some((si, li)) = find_updated(&doc, &w, replaces) {
            let line = &doc[si].lines[li];
            let (old, history) = split_history(split_provenance(line[2..].trim()).0.trim_end());
            if words(old) == w {
                merged.duplicates += 1;
                merged.outcomes.push(FactOutcome::Duplicate);
                continue;
            }
            let mut was = old_value(old, &w);
            if let Some(h) = history.and_then(|h| h.split_once("; was ")) {
                was.push_str("; before: ");
                was.push_str(h.1);
            }
            let since = today
                .map(|d| format!("since {}; ", d.format("%Y-%m-%d")))
                .unwrap_or_default();
            doc[si].lines[li] = format!("- {text} ({since}was {was}){from}");
            known[line_index(&doc, si, li)] = w;
            fresh.push((si, li, fi, true));
            merged.updated += 1;
            merged.outcomes.push(FactOutcome::Updated { was });
            continue;
        }
        if known.iter().any(|k| relation(&w, k) == Relation::Same) {
            merged.duplicates += 1;
            merged.outcomes.push(FactOutcome::Duplicate);
            continue;
        }
        let idx = match doc.iter().position(|s| {
            s.name
                .as_deref()
                .is_some_and(|n| n.eq_ignore_ascii_case(&fact.heading))
        }) {
            Some(i) => i,
            None => {
                let at = insert_position(&doc, &fact.heading);
                doc.insert(
                    at,
                    Section {
                        name: Some(fact.heading.clone()),
                        lines: vec![format!("## {}", fact.heading)],
                    },
                );
                for f in fresh.iter_mut().filter(|f| f.0 >= at) {
                    f.0 += 1;
                }
                at
            }
        };
        // After the section's last non-blank line.
        let sec = &mut doc[idx];
        let at = sec
            .lines
            .iter()
            .rposition(|l| !l.trim().is_empty())
            .map_or(sec.lines.len(), |i| i + 1);
        sec.lines.insert(at, format!("- {text}{from}"));
        for f in fresh.iter_mut().filter(|f| f.0 == idx && f.1 >= at) {
            f.1 += 1;
        }
        fresh.push((idx, at, fi, false));
        known.push(w);
        merged.added += 1;
        merged.outcomes.push(FactOutcome::Added);
    }
    // The bound: condense older bullets of the headings (never the user's other
    // text, never this merge's own facts), then drop this merge's newest facts.
    let managed: Vec<usize> = (0..doc.len())
        .filter(|&i| doc[i].name.as_deref().is_some_and(is_managed))
        .collect();
    let mut older: Vec<(usize, usize)> = Vec::new();
    for &si in &managed {
        for (li, l) in doc[si].lines.iter().enumerate() {
            if l.starts_with("- ") && !fresh.iter().any(|f| (f.0, f.1) == (si, li)) {
                older.push((si, li));
            }
        }
    }
    let mut next_old = 0;
    while render_doc(&doc).len() > max_bytes {
        if let Some(&(si, li)) = older.get(next_old) {
            next_old += 1;
            let line = &doc[si].lines[li];
            // The fact is shortened; where it came from stays.
            let (body, from) = split_provenance(&line[2..]);
            let from = from.map(|f| format!("{PROVENANCE}{f}")).unwrap_or_default();
            let short = format!("- {}{from}", terse(body));
            if short.len() < line.len() {
                doc[si].lines[li] = short;
                merged.condensed += 1;
            }
            continue;
        }
        // The newest added fact goes (an update stays: its old value is gone).
        let Some(pos) = fresh.iter().rposition(|f| !f.3) else {
            break;
        };
        let (si, li, fi, _) = fresh.remove(pos);
        doc[si].lines.remove(li);
        for f in fresh.iter_mut().filter(|f| f.0 == si && f.1 > li) {
            f.1 -= 1;
        }
        merged.added -= 1;
        merged.dropped += 1;
        merged.outcomes[fi] = FactOutcome::Dropped;
    }
    merged.text = render_doc(&doc);
    if !merged.changed() {
        merged.text = memory_md.to_string();
    }
    merged
}

/// The bullet a new fact (`w`) updates: the one its `(replaces: …)` marker
/// names (most words shared), else one with the same subject and another value.
fn find_updated(doc: &[Section], w: &[String], replaces: Option<&str>) -> Option<(usize, usize)> {
    let bullets = doc.iter().enumerate().flat_map(|(si, s)| {
        s.lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.starts_with("- ") || l.starts_with("* "))
            .map(move |(li, l)| (si, li, words(bare(l))))
    });
    if let Some(r) = replaces.map(words).filter(|r| !r.is_empty()) {
        let best = bullets
            .clone()
            .map(|(si, li, b)| {
                let shared = r.iter().filter(|x| b.contains(x)).count();
                (shared as f64 / r.len().max(b.len()) as f64, si, li)
            })
            .filter(|(score, _, _)| *score >= 0.5)
            .max_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((_, si, li)) = best {
            return Some((si, li));
        }
    }
    bullets
        .filter(|(_, _, b)| relation(w, b) == Relation::Updates)
        .map(|(si, li, _)| (si, li))
        .next()
}

/// The index in `known` (every line of the file, in order) of line `li` of
/// section `si`.
fn line_index(doc: &[Section], si: usize, li: usize) -> usize {
    doc[..si].iter().map(|s| s.lines.len()).sum::<usize>() + li
}

/// Where a new section for `heading` goes: before the first known heading
/// that comes after it in [`HEADINGS`] order, else at the end.
fn insert_position(doc: &[Section], heading: &str) -> usize {
    let rank = |n: &str| HEADINGS.iter().position(|h| h.eq_ignore_ascii_case(n));
    let Some(r) = rank(heading) else {
        return doc.len();
    };
    doc.iter()
        .position(|s| {
            s.name
                .as_deref()
                .and_then(rank)
                .is_some_and(|other| other > r)
        })
        .unwrap_or(doc.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(h: &str, t: &str) -> Fact {
        Fact {
            heading: h.into(),
            text: t.into(),
            source: None,
        }
    }

    #[test]
    fn replies_parse_into_facts_under_known_headings() {
        let reply = "<think>hm</think>## People\n- Ada runs payments.\n\n## Decisions made\n* We chose PostgreSQL 16.\n## Rules\n- Always answer in English.\nsome prose\n";
        assert_eq!(
            parse_reply(reply),
            vec![
                fact("People", "Ada runs payments."),
                fact("Decisions", "We chose PostgreSQL 16."),
                fact("Standing instructions", "Always answer in English."),
            ]
        );
        assert!(parse_reply("NO_REPLY").is_empty());
    }

    #[test]
    fn merge_groups_dedupes_and_keeps_the_users_text() {
        let existing = "# Memory\n\nFree text the user wrote.\n\n## Travel\nThe quokka colony is on Rottnest.\n\n## People\n- Ada runs the payments team.\n";
        let m = merge(
            existing,
            &[
                fact("People", "Ada runs the payments team"),
                fact("People", "Grace reviews every schema change."),
                fact("Decisions", "The billing service uses PostgreSQL 16."),
                fact("Decisions", "the billing service uses postgresql 16"),
                fact("Preferences", "The quokka colony is on Rottnest."),
            ],
            DEFAULT_MAX_BYTES,
        );
        assert_eq!((m.added, m.duplicates, m.condensed), (2, 3, 0));
        assert_eq!(
            m.text,
            "# Memory\n\nFree text the user wrote.\n\n## Travel\nThe quokka colony is on Rottnest.\n\n## People\n- Ada runs the payments team.\n- Grace reviews every schema change.\n\n## Decisions\n- The billing service uses PostgreSQL 16.\n"
        );
        // Merging the same facts again changes nothing.
        let again = merge(
            &m.text,
            &[
                fact("People", "Grace reviews every schema change."),
                fact("Decisions", "The billing service uses PostgreSQL 16."),
            ],
            DEFAULT_MAX_BYTES,
        );
        assert!(!again.changed());
        assert_eq!(again.text, m.text);
    }

    fn day(s: &str) -> Option<chrono::NaiveDate> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn an_update_replaces_the_fact_and_keeps_the_old_value_as_history() {
        let md = "# Memory\n\n## Decisions\n- The project budget is capped at 12000 EUR.\n- Ada runs the payments team.\n";
        // A new value for the same subject, worded differently, unmarked.
        let m = merge_on(
            md,
            &[fact("Decisions", "Project budget cap is now 15000 EUR.")],
            DEFAULT_MAX_BYTES,
            day("2026-12-02"),
        );
        assert_eq!((m.added, m.updated, m.duplicates), (0, 1, 0), "{}", m.text);
        assert!(m.changed());
        assert_eq!(
            m.text,
            "# Memory\n\n## Decisions\n- Project budget cap is now 15000 EUR. (since 2026-12-02; was 12000 EUR)\n- Ada runs the payments team.\n"
        );
        assert!(
            !m.text.contains("capped at 12000"),
            "one current value only"
        );
        // The same update again: a duplicate, the file unchanged.
        let again = merge_on(
            &m.text,
            &[fact("Decisions", "Project budget cap is now 15000 EUR.")],
            DEFAULT_MAX_BYTES,
            day("2026-12-03"),
        );
        assert!(!again.changed(), "{}", again.text);
        assert_eq!(again.duplicates, 1);
        // A second change keeps the whole history, newest first.
        let third = merge_on(
            &m.text,
            &[fact(
                "Decisions",
                "The project budget is capped at 18000 EUR.",
            )],
            DEFAULT_MAX_BYTES,
            day("2027-01-10"),
        );
        assert_eq!(third.updated, 1, "{}", third.text);
        assert!(
            third.text.contains(
                "- The project budget is capped at 18000 EUR. (since 2027-01-10; was 15000 EUR; before: 12000 EUR)\n"
            ),
            "{}",
            third.text
        );
    }

    #[test]
    fn a_contradiction_marked_by_the_model_replaces_the_old_fact() {
        let md =
            "# Memory\n\n## Preferences\n- Drinks tea in the morning.\n- Likes window seats.\n";
        let reply = "## Preferences\n- Drinks coffee in the morning (replaces: Drinks tea in the morning.)\n";
        let m = merge_on(
            md,
            &parse_reply(reply),
            DEFAULT_MAX_BYTES,
            day("2026-12-02"),
        );
        assert_eq!((m.added, m.updated), (0, 1), "{}", m.text);
        assert!(
            m.text
                .contains("- Drinks coffee in the morning (since 2026-12-02; was tea)\n"),
            "{}",
            m.text
        );
        assert!(!m.text.contains("Drinks tea"), "{}", m.text);
        assert!(m.text.contains("- Likes window seats.\n"));
        // Without a marker and without a value, a different fact is added
        // (the model decides contradictions in words).
        let m = merge_on(
            md,
            &[fact("Preferences", "Drinks water at night.")],
            DEFAULT_MAX_BYTES,
            day("2026-12-02"),
        );
        assert_eq!((m.added, m.updated), (1, 0), "{}", m.text);
    }

    #[test]
    fn duplicates_exact_and_paraphrased_are_not_updates() {
        let md = "# Memory\n\n## Decisions\n- The billing service uses PostgreSQL 16.\n";
        for dup in [
            "The billing service uses PostgreSQL 16.",
            "the billing service uses postgresql 16",
            "Billing service uses PostgreSQL 16",
        ] {
            let m = merge_on(
                md,
                &[fact("Decisions", dup)],
                DEFAULT_MAX_BYTES,
                day("2026-12-02"),
            );
            assert_eq!((m.added, m.updated, m.duplicates), (0, 0, 1), "{dup}");
            assert_eq!(m.text, md);
        }
        // A new version number is an update, never dropped as a duplicate.
        let m = merge_on(
            md,
            &[fact("Decisions", "The billing service uses PostgreSQL 17.")],
            DEFAULT_MAX_BYTES,
            day("2026-12-02"),
        );
        assert_eq!((m.updated, m.duplicates), (1, 0), "{}", m.text);
        assert!(
            m.text.contains("PostgreSQL 17. (since 2026-12-02; was 16)"),
            "{}",
            m.text
        );
    }

    fn sourced(h: &str, t: &str, from: &str) -> Fact {
        Fact {
            heading: h.into(),
            text: t.into(),
            source: Some(from.into()),
        }
    }

    #[test]
    fn provenance_is_written_after_the_fact_and_ignored_when_comparing() {
        let md = "# Memory\n\n## Decisions\n- The project budget is capped at 12000 EUR.\n";
        let day = "2026-12-03".parse().unwrap();
        let heading = dated_heading(day);
        assert_eq!(heading, "Consolidated on 2026-12-03");
        let m = merge_on(
            md,
            &[
                sourced(
                    &heading,
                    "Ada leads the payments team.",
                    "memory/2026-12-01.md#L3-L3",
                ),
                sourced(
                    &heading,
                    "The project budget is capped at 15000 EUR.",
                    "sessions/cli_default.jsonl#L5",
                ),
                sourced(
                    &heading,
                    "Ada leads the payments team",
                    "memory/2026-12-02.md#L1-L1",
                ),
            ],
            DEFAULT_MAX_BYTES,
            Some(day),
        );
        assert_eq!(
            m.outcomes,
            vec![
                FactOutcome::Added,
                FactOutcome::Updated {
                    was: "12000 EUR".into()
                },
                FactOutcome::Duplicate
            ]
        );
        assert_eq!(
            m.text,
            "# Memory\n\n## Decisions\n- The project budget is capped at 15000 EUR. (since 2026-12-03; was 12000 EUR) — from sessions/cli_default.jsonl#L5\n\n## Consolidated on 2026-12-03\n- Ada leads the payments team. — from memory/2026-12-01.md#L3-L3\n"
        );
        // The same facts from other places (other dates in the citation) are
        // duplicates, not updates; a new value updates and keeps the history.
        let again = merge_on(
            &m.text,
            &[
                sourced(
                    "Consolidated on 2026-12-04",
                    "Ada leads the payments team.",
                    "memory/2026-12-04.md#L9-L9",
                ),
                sourced(
                    "Consolidated on 2026-12-04",
                    "The project budget is capped at 15000 EUR.",
                    "memory/2026-12-04.md#L2-L2",
                ),
            ],
            DEFAULT_MAX_BYTES,
            Some("2026-12-04".parse().unwrap()),
        );
        assert!(!again.changed(), "{}", again.text);
        assert_eq!(
            again.outcomes,
            vec![FactOutcome::Duplicate, FactOutcome::Duplicate]
        );
        let third = merge_on(
            &m.text,
            &[sourced(
                "Consolidated on 2026-12-05",
                "The project budget is capped at 18000 EUR.",
                "memory/2026-12-05.md#L1-L1",
            )],
            DEFAULT_MAX_BYTES,
            Some("2026-12-05".parse().unwrap()),
        );
        assert!(
            third.text.contains("- The project budget is capped at 18000 EUR. (since 2026-12-05; was 15000 EUR; before: 12000 EUR) — from memory/2026-12-05.md#L1-L1\n"),
            "{}",
            third.text
        );
    }

    #[test]
    fn a_full_file_condenses_dated_entries_but_keeps_their_provenance() {
        let mut text = String::from("# Memory\n\n## Consolidated on 2026-12-01\n");
        for i in 0..20 {
            text.push_str(&format!(
                "- Fact {i}: the team agreed that the quarterly report is really very long and written by finance. — from memory/2026-12-01.md#L{i}-L{i}\n"
            ));
        }
        let max = text.len() + 20;
        let m = merge_on(
            &text,
            &[sourced(
                "Consolidated on 2026-12-02",
                "Release train moves to a two-week cadence.",
                "memory/2026-12-02.md#L1-L1",
            )],
            max,
            Some("2026-12-02".parse().unwrap()),
        );
        assert_eq!(m.outcomes, vec![FactOutcome::Added]);
        assert!(m.condensed >= 1);
        assert!(m.text.len() <= max);
        assert!(
            m.text.contains("- Fact 0: team agreed quarterly report is long and written by finance. — from memory/2026-12-01.md#L0-L0\n"),
            "{}",
            m.text
        );
        // No room at all: the new fact is dropped, said per fact.
        let tiny = merge_on(
            &text,
            &[sourced("Consolidated on 2026-12-02", "Someone new.", "x")],
            40,
            None,
        );
        assert_eq!(tiny.outcomes, vec![FactOutcome::Dropped]);
    }

    #[test]
    fn an_empty_file_gets_a_title_and_headings_in_order() {
        let m = merge(
            "",
            &[
                fact("Standing instructions", "Never deploy on Fridays."),
                fact("People", "Linus maintains the kernel fork."),
            ],
            DEFAULT_MAX_BYTES,
        );
        assert_eq!(
            m.text,
            "# Memory\n\n## People\n- Linus maintains the kernel fork.\n\n## Standing instructions\n- Never deploy on Fridays.\n"
        );
    }

    #[test]
    fn secrets_are_redacted() {
        let m = merge(
            "",
            &[fact(
                "Decisions",
                "The staging key is sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD.",
            )],
            DEFAULT_MAX_BYTES,
        );
        assert!(!m.text.contains("sk-proj-abcdef"), "{}", m.text);
        assert!(m.text.contains("REDACTED"), "{}", m.text);
    }

    #[test]
    fn a_full_file_rewrites_older_entries_tersely_instead_of_growing() {
        let mut text = String::from("# Memory\n\n## Decisions\n");
        for i in 0..40 {
            text.push_str(&format!(
                "- Decision {i}: the team agreed that the quarterly report is really very long and written by the finance group.\n"
            ));
        }
        let max = text.len() + 40;
        let m = merge(
            &text,
            &[fact(
                "Decisions",
                "Release train moves to a two-week cadence.",
            )],
            max,
        );
        assert_eq!(m.added, 1);
        assert!(m.condensed >= 1);
        assert!(m.text.len() <= max, "{} > {max}", m.text.len());
        assert!(
            m.text
                .contains("- Release train moves to a two-week cadence.\n")
        );
        assert!(
            m.text
                .starts_with("# Memory\n\n## Decisions\n- Decision 0: team agreed")
        );
        assert!(m.text.contains('…'));
        // A bound too small for anything new: the new fact is left out, the file
        // never grows.
        let tiny = merge(&text, &[fact("People", "Someone new.")], 40);
        assert_eq!((tiny.added, tiny.dropped), (0, 1));
        assert!(tiny.text.len() <= text.len());
    }
}

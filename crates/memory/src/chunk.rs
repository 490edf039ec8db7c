//! Markdown-aware, line-based chunking with a budget counted in the embedding
//! model's own tokens. Pure: no I/O, no database.
//!
//! Invariant: no chunk ever counts more than `ChunkParams::max_tokens` tokens under the
//! given [`TokenCounter`], and every non-blank line of the input is covered by a chunk.
//!
//! How a document is cut:
//! - Lines are split on `\n` with a trailing `\r` stripped; chunk text joins its lines with `\n`.
//! - Lines are grouped into *units* that are never split unless a unit alone exceeds the
//!   budget: a fenced code block (```` ``` ```` or `~~~`, open to its closing fence or the end
//!   of the document), YAML front matter (`---` ... `---`/`...` on the first lines), a setext
//!   heading (text line + `===`/`---` underline); every other line is its own unit.
//! - Units are packed greedily. A heading starts a new chunk when the current chunk already
//!   holds at least a third of the budget (small sections merge). When the next unit does not
//!   fit, the cut goes before the last heading in the chunk (if the part before it is not tiny),
//!   else after the last blank line / around a code block (if the chunk stays at least half
//!   full), else right before the unit that did not fit.
//! - Overlap: after a cut that is not at a heading, the next chunk starts with trailing whole
//!   units of the previous chunk worth at most `overlap_tokens`, never so many that the next
//!   chunk would overflow, and never the previous chunk's whole content (progress is
//!   guaranteed). A heading is a semantic boundary, so a cut before a heading has no overlap.
//! - Front matter is a unit like any other: it is attached to the first chunk when it fits
//!   (or stands alone when a heading follows a large front matter).
//! - Chunk ranges are trimmed of leading and trailing blank lines; a chunk of blank lines only
//!   is never emitted (so empty or whitespace-only input gives no chunks).
//! - A unit over the budget is split: a multi-line unit line by line (with overlap), a single
//!   line into pieces that each claim that line number (`start_line == end_line`). Pieces are
//!   exact contiguous slices of the line, cut at char boundaries, preferably right after
//!   whitespace: concatenating the pieces of a line reproduces the line byte for byte
//!   (whitespace is kept at the end of the piece before the cut, never trimmed).
//!
//! Token counts are taken once per line (and per word of an over-long line), never for joined
//! text, relying on the counter being additive across whitespace (see [`TokenCounter`]).

/// The identity of the indexed text: bumped whenever chunk boundaries change, and it
/// carries [`crate::redact::REDACTION_VERSION`] so that new redaction rules also rebuild
/// an index once (a secret the old rules missed must not stay searchable). A stored
/// index with another version is rebuilt. Its third part is [`crate::words::WORDS_VERSION`]
/// (what the word index holds: stems behind each chunk's context); its fourth how
/// transcripts are chunked (`turns-1`: an exchange or a turn, dated, `crate::transcript`).
pub const CHUNKER_VERSION: &str = "md-2/redact-3/words-1/turns-1";

/// Counts tokens the way the embedding model will (word pieces for MiniLM).
///
/// The chunker counts each line once and sums the counts, so a counter must be additive
/// across whitespace: `count(a + w + b) == count(a) + count(w) + count(b)` whenever `a` ends
/// right before, and `b` starts right after, the whitespace run `w` (at least for `w == "\n"`
/// and for cuts right after whitespace). BERT-style tokenizers (WordPiece tokens never cross
/// whitespace), [`ApproxCounter`] and per-character counters all are.
pub trait TokenCounter: Send + Sync {
    /// Number of model tokens in `text`, without special tokens.
    fn count(&self, text: &str) -> usize;
}

/// A tokenizer-free estimate for keyword-only indexing: an upper-bound-ish guess
/// of word pieces (each word ~1.3 pieces, each CJK character one piece).
#[derive(Debug, Default, Clone, Copy)]
pub struct ApproxCounter;

impl TokenCounter for ApproxCounter {
    fn count(&self, text: &str) -> usize {
        let mut n = 0usize;
        for word in text.split_whitespace() {
            if word.is_ascii() {
                // Fast path: no CJK, one char per byte.
                n += word.len().div_ceil(4).max(1);
                continue;
            }
            let cjk = word.chars().filter(|c| is_cjk(*c)).count();
            let rest = word.chars().count() - cjk;
            n += cjk + if rest > 0 { rest.div_ceil(4).max(1) } else { 0 };
        }
        n
    }
}

/// Whether a character is CJK (Han, Hiragana, Katakana, Hangul).
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF |
        0xAC00..=0xD7AF | 0x20000..=0x2FA1F)
}

/// Chunk size limits, in model tokens.
///
/// `max_tokens` is the hard budget per chunk, net of any special tokens the model adds
/// (a budget of 0 is treated as 1). `overlap_tokens` is capped at half the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkParams {
    pub max_tokens: usize,
    pub overlap_tokens: usize,
}

/// One chunk: 1-based inclusive line range and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
}

/// Split a Markdown document into chunks (see the module docs for the rules).
pub fn chunk_markdown(text: &str, params: &ChunkParams, counter: &dyn TokenCounter) -> Vec<Chunk> {
    let lines = split_lines(text);
    if lines.is_empty() {
        return Vec::new();
    }
    let max = params.max_tokens.max(1);
    let sep = counter.count("\n");
    let blank: Vec<bool> = lines.iter().map(|l| l.trim().is_empty()).collect();
    let mut prefix = Vec::with_capacity(lines.len() + 1);
    let mut acc = 0usize;
    prefix.push(0);
    for l in &lines {
        acc += counter.count(l) + sep;
        prefix.push(acc);
    }
    let units = classify(&lines, &blank);
    let mut packer = Packer {
        lines: &lines,
        blank: &blank,
        prefix: &prefix,
        sep,
        max,
        overlap: params.overlap_tokens.min(max / 2),
        counter,
        out: Vec::new(),
    };
    packer.pack(&units);
    packer.out
}

/// The text a chunk is embedded as: its context (see [`contexts`]) on a line of its
/// own, a blank line, then the chunk's text; the text alone when there is no
/// context (transcripts). The model then knows which note and section a chunk
/// belongs to, as a reader does (`git show 522d4fb:BENCHMARKS.md`, issue 17: SciFact
/// vector-only nDCG@10 0.667 → 0.682). The model reads the text as a reader of
/// the rendered note does: links without their destinations, URLs as their host
/// ([`crate::readable`]).
pub fn embed_text<'a>(context: &str, text: &'a str) -> std::borrow::Cow<'a, str> {
    let text = crate::readable::readable(text);
    if context.is_empty() {
        text
    } else {
        std::borrow::Cow::Owned(format!("{context}\n\n{text}"))
    }
}

/// Where each chunk is: the file's title, then the ATX headings enclosing the chunk's
/// first line (that line's own heading included), joined by " › "; the word index
/// holds it before the chunk's text (see `crate::words`). The title is the file's first
/// level-1 heading, else `file_stem` (the file name without its extension, `-`/`_` as
/// spaces); a first heading equal to the title is not repeated. Headings inside code
/// fences are not headings.
pub fn contexts(text: &str, file_stem: &str, chunks: &[Chunk]) -> Vec<String> {
    let lines = split_lines(text);
    let mut title: Option<String> = None;
    // (line index, level, heading text) of every ATX heading outside fences.
    let mut heads: Vec<(usize, usize, &str)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some((ch, len)) = fence_open(line) {
            i += 1;
            while i < lines.len() && !fence_close(lines[i], ch, len) {
                i += 1;
            }
            i += 1;
            continue;
        }
        if is_atx_heading(line) {
            let t = line.trim_start_matches(' ');
            let level = t.bytes().take_while(|&b| b == b'#').count();
            let body = t[level..].trim().trim_end_matches('#').trim();
            if level == 1 && title.is_none() && !body.is_empty() {
                title = Some(body.to_string());
            }
            heads.push((i, level, body));
        }
        i += 1;
    }
    let title = title.unwrap_or_else(|| file_stem.replace(['-', '_'], " ").trim().to_string());
    chunks
        .iter()
        .map(|c| {
            let first = c.start_line.saturating_sub(1);
            let mut path: Vec<(usize, &str)> = Vec::new();
            for &(_, level, body) in heads.iter().take_while(|h| h.0 <= first) {
                while path.last().is_some_and(|(l, _)| *l >= level) {
                    path.pop();
                }
                path.push((level, body));
            }
            let mut out = title.clone();
            for (_, body) in path {
                if body.is_empty() || (out == title && body == title) {
                    continue;
                }
                if !out.is_empty() {
                    out.push_str(" \u{203a} ");
                }
                out.push_str(body);
            }
            out
        })
        .collect()
}

/// The lines of `text`: split on `\n`, a trailing `\r` stripped, no phantom empty line after
/// a final newline.
pub fn split_lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect()
}

/// Split `line` into contiguous pieces that each count at most `max_tokens` (at least 1)
/// under `counter`. Cuts fall right after whitespace when possible, else at char
/// boundaries; concatenating the pieces gives back `line` exactly. A single char that
/// alone exceeds the budget becomes its own piece (nothing smaller exists).
pub fn split_to_fit<'a>(
    line: &'a str,
    max_tokens: usize,
    counter: &dyn TokenCounter,
) -> Vec<&'a str> {
    let max = max_tokens.max(1);
    let mut pieces = Vec::new();
    let mut piece_start = 0usize;
    let mut piece_cost = 0usize;
    for (s, e) in segments(line) {
        let c = counter.count(&line[s..e]);
        if c > max {
            // One word (with its trailing whitespace) over budget: cut it at char boundaries.
            if piece_start < s {
                pieces.push(&line[piece_start..s]);
            }
            let mut p = s;
            while p < e {
                let q = longest_fit(line, p, e, max, counter);
                pieces.push(&line[p..q]);
                p = q;
            }
            piece_start = e;
            piece_cost = 0;
        } else if piece_cost + c > max {
            pieces.push(&line[piece_start..s]);
            piece_start = s;
            piece_cost = c;
        } else {
            piece_cost += c;
        }
    }
    if piece_start < line.len() {
        pieces.push(&line[piece_start..]);
    }
    pieces
}

/// Byte ranges of `line` cut right after each whitespace run: every range is a word with
/// its trailing whitespace (the first also holds any leading whitespace).
fn segments(line: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut start = 0usize;
    let mut prev_ws = false;
    let mut iter = line.char_indices();
    let mut done = line.is_empty();
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        for (i, c) in iter.by_ref() {
            let ws = c.is_whitespace();
            if prev_ws && !ws && i > start {
                let seg = (start, i);
                start = i;
                prev_ws = ws;
                return Some(seg);
            }
            prev_ws = ws;
        }
        done = true;
        Some((start, line.len()))
    })
}

/// The largest end `q` in `(p, e]` (a char boundary) found by galloping and bisection with
/// `count(line[p..q]) <= max`; at least one char, even when that char alone is over budget.
fn longest_fit(line: &str, p: usize, e: usize, max: usize, counter: &dyn TokenCounter) -> usize {
    let first = p + line[p..].chars().next().map_or(1, char::len_utf8);
    let mut good = first;
    if good >= e {
        return e;
    }
    let mut bad = None;
    let mut probe = p + 64;
    loop {
        let q = floor_boundary(line, probe.min(e));
        if q > good {
            if counter.count(&line[p..q]) <= max {
                good = q;
                if q >= e {
                    break;
                }
            } else {
                bad = Some(q);
                break;
            }
        } else if probe >= e {
            break;
        }
        probe = p + (probe - p) * 2;
    }
    if let Some(mut b) = bad {
        while b - good > 1 {
            let mid = floor_boundary(line, good + (b - good) / 2);
            if mid <= good {
                break;
            }
            if counter.count(&line[p..mid]) <= max {
                good = mid;
            } else {
                b = mid;
            }
        }
    }
    good
}

/// The largest char boundary of `s` at or before byte `i`.
fn floor_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Text,
    Heading,
    Fence,
    FrontMatter,
}

/// Lines `start..end` (0-based, exclusive end) that are kept together when possible.
#[derive(Clone, Copy, Debug)]
struct Unit {
    start: usize,
    end: usize,
    kind: Kind,
    /// Only blank lines (a blank line is a single-line text unit).
    blank: bool,
}

/// How far down front matter may end (a stray `---` on line 1 is not front matter forever).
const FRONT_MATTER_MAX_LINES: usize = 500;

fn classify(lines: &[&str], blank: &[bool]) -> Vec<Unit> {
    let n = lines.len();
    let mut units = Vec::with_capacity(n);
    let mut i = 0;
    if lines[0].trim_end() == "---" {
        let close = (1..n.min(FRONT_MATTER_MAX_LINES)).find(|&j| {
            let t = lines[j].trim_end();
            t == "---" || t == "..."
        });
        if let Some(close) = close {
            units.push(Unit {
                start: 0,
                end: close + 1,
                kind: Kind::FrontMatter,
                blank: false,
            });
            i = close + 1;
        }
    }
    while i < n {
        let line = lines[i];
        // (end, kind, blank) of the unit starting at line i.
        let (end, kind, is_blank) = if let Some((ch, len)) = fence_open(line) {
            let mut j = i + 1;
            while j < n && !fence_close(lines[j], ch, len) {
                j += 1;
            }
            (if j < n { j + 1 } else { n }, Kind::Fence, false)
        } else if is_atx_heading(line) {
            (i + 1, Kind::Heading, false)
        } else if !blank[i]
            && i + 1 < n
            && is_setext_underline(lines[i + 1])
            && fence_open(line).is_none()
        {
            (i + 2, Kind::Heading, false)
        } else {
            (i + 1, Kind::Text, blank[i])
        };
        units.push(Unit {
            start: i,
            end,
            kind,
            blank: is_blank,
        });
        i = end;
    }
    units
}

/// An opening code fence: (fence char, fence length). Indentation is tolerated (fences in
/// list items); a backtick fence's info string may not contain a backtick.
fn fence_open(line: &str) -> Option<(u8, usize)> {
    let t = line.trim_start().as_bytes();
    let ch = *t.first()?;
    if ch != b'`' && ch != b'~' {
        return None;
    }
    let len = t.iter().take_while(|&&b| b == ch).count();
    if len < 3 {
        return None;
    }
    if ch == b'`' && t[len..].contains(&b'`') {
        return None;
    }
    Some((ch, len))
}

fn fence_close(line: &str, ch: u8, len: usize) -> bool {
    let t = line.trim().as_bytes();
    t.len() >= len && t.iter().all(|&b| b == ch)
}

fn is_atx_heading(line: &str) -> bool {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return false;
    }
    let t = &line.as_bytes()[indent..];
    let hashes = t.iter().take_while(|&&b| b == b'#').count();
    (1..=6).contains(&hashes) && t.get(hashes).is_none_or(|b| *b == b' ' || *b == b'\t')
}

fn is_setext_underline(line: &str) -> bool {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return false;
    }
    let t = line.trim();
    let Some(first) = t.bytes().next() else {
        return false;
    };
    let min = if first == b'=' { 2 } else { 3 };
    (first == b'=' || first == b'-') && t.len() >= min && t.bytes().all(|b| b == first)
}

struct Packer<'a> {
    lines: &'a [&'a str],
    blank: &'a [bool],
    /// `prefix[i]` = sum over lines `< i` of (line tokens + separator tokens).
    prefix: &'a [usize],
    /// Tokens of the `\n` that joins two lines.
    sep: usize,
    max: usize,
    overlap: usize,
    counter: &'a dyn TokenCounter,
    out: Vec<Chunk>,
}

impl Packer<'_> {
    /// Tokens of units `a..b` joined into one text.
    fn cost(&self, units: &[Unit], a: usize, b: usize) -> usize {
        if a >= b {
            return 0;
        }
        self.prefix[units[b - 1].end] - self.prefix[units[a].start] - self.sep
    }

    /// Pack `units` into chunks. Invariant kept: units `cs..u` (the current chunk) fit the
    /// budget; units before `fresh` are already in an emitted chunk.
    fn pack(&mut self, units: &[Unit]) {
        let n = units.len();
        let (mut cs, mut fresh, mut u) = (0usize, 0usize, 0usize);
        while u < n {
            let unit = units[u];
            if self.cost(units, u, u + 1) > self.max {
                self.emit(units, cs, u, &mut fresh);
                if unit.blank {
                    // A whitespace-only line over budget: nothing to index.
                } else if unit.end - unit.start == 1 {
                    self.split_line(unit.start);
                } else {
                    let sub: Vec<Unit> = (unit.start..unit.end)
                        .map(|l| Unit {
                            start: l,
                            end: l + 1,
                            kind: Kind::Text,
                            blank: self.blank[l],
                        })
                        .collect();
                    self.pack(&sub);
                }
                u += 1;
                cs = u;
                fresh = u;
                continue;
            }
            if cs < u {
                if unit.kind == Kind::Heading
                    && fresh < u
                    && self.cost(units, cs, u) >= self.max / 3
                {
                    self.emit(units, cs, u, &mut fresh);
                    cs = u;
                    continue;
                }
                if self.cost(units, cs, u + 1) > self.max {
                    if fresh >= u {
                        // Only overlap precedes this unit and it does not fit: drop the overlap.
                        cs = u;
                        continue;
                    }
                    let k = self.choose_cut(units, cs, fresh, u);
                    let first_content = (cs..k).find(|&x| !units[x].blank).unwrap_or(cs);
                    self.emit(units, cs, k, &mut fresh);
                    cs = if units[k].kind == Kind::Heading {
                        k
                    } else {
                        self.overlap_start(units, first_content, k, u)
                    };
                    continue;
                }
            }
            u += 1;
        }
        self.emit(units, cs, n, &mut fresh);
    }

    /// Where to end the current chunk `cs..u` (exclusive unit index in `fresh+1..=u`) when
    /// unit `u` does not fit: last heading, else last soft boundary, else `u`.
    fn choose_cut(&self, units: &[Unit], cs: usize, fresh: usize, u: usize) -> usize {
        let min_heading = self.max / 8;
        let min_soft = self.max / 2;
        let mut soft = None;
        for k in (fresh + 1..=u).rev() {
            let fill = self.cost(units, cs, k);
            if fill < min_heading {
                break;
            }
            if units[k].kind == Kind::Heading {
                return k;
            }
            if soft.is_none() && fill >= min_soft && is_soft(units, k) {
                soft = Some(k);
            }
        }
        soft.unwrap_or(u)
    }

    /// First unit of the next chunk after a cut at `k`: trailing whole units of the previous
    /// chunk worth at most `overlap` tokens, after its first content unit `first_content`,
    /// leaving room for units `k..=u`.
    fn overlap_start(&self, units: &[Unit], first_content: usize, k: usize, u: usize) -> usize {
        if self.overlap == 0 {
            return k;
        }
        let mut j = k;
        while j > first_content + 1 {
            let cand = j - 1;
            if self.cost(units, cand, k) > self.overlap || self.cost(units, cand, u + 1) > self.max
            {
                break;
            }
            j = cand;
        }
        while j < k && units[j].blank {
            j += 1;
        }
        j
    }

    /// Emit units `cs..k` as a chunk if any unit from `fresh` on has content; trims blank
    /// lines at both ends.
    fn emit(&mut self, units: &[Unit], cs: usize, k: usize, fresh: &mut usize) {
        if k <= *fresh {
            return;
        }
        let has_content = units[*fresh..k].iter().any(|x| !x.blank);
        *fresh = k;
        if !has_content {
            return;
        }
        let (mut a, mut b) = (units[cs].start, units[k - 1].end);
        while a < b && self.blank[a] {
            a += 1;
        }
        while b > a && self.blank[b - 1] {
            b -= 1;
        }
        if a == b {
            return;
        }
        self.out.push(Chunk {
            start_line: a + 1,
            end_line: b,
            text: self.lines[a..b].join("\n"),
        });
    }

    /// A single line over the budget: pieces that each claim the line.
    fn split_line(&mut self, l: usize) {
        let line = self.lines[l];
        for piece in split_to_fit(line, self.max, self.counter) {
            self.out.push(Chunk {
                start_line: l + 1,
                end_line: l + 1,
                text: piece.to_string(),
            });
        }
    }
}

/// A good place to cut before unit `k`: next to a blank line or a code block / front matter.
fn is_soft(units: &[Unit], k: usize) -> bool {
    let (prev, next) = (units[k - 1], units[k]);
    prev.blank
        || next.blank
        || matches!(prev.kind, Kind::Fence | Kind::FrontMatter)
        || next.kind == Kind::Fence
}

#[cfg(test)]
mod tests {

    #[test]
    fn chunker_version_carries_the_redaction_and_words_versions() {
        let parts: Vec<&str> = CHUNKER_VERSION.split('/').collect();
        assert_eq!(parts[1], crate::redact::REDACTION_VERSION);
        assert_eq!(parts[2], crate::words::WORDS_VERSION);
    }

    #[test]
    fn contexts_are_title_and_heading_path() {
        let text = "# Billing\n\nintro\n\n## Databases\n\nwe chose pg\n\n```sh\n# not a heading\n```\n\n### Backups\n\nnightly\n\n## Queues\n\nsqs\n";
        let at = |line: usize| Chunk {
            start_line: line,
            end_line: line,
            text: String::new(),
        };
        let chunks = [at(1), at(3), at(5), at(9), at(13), at(17), at(19)];
        let got = contexts(text, "ignored", &chunks);
        assert_eq!(
            got,
            [
                "Billing",
                "Billing",
                "Billing \u{203a} Databases",
                "Billing \u{203a} Databases",
                "Billing \u{203a} Databases \u{203a} Backups",
                "Billing \u{203a} Queues",
                "Billing \u{203a} Queues",
            ]
        );
        // No level-1 heading: the file name is the title.
        let got = contexts("## Setup\nsteps\n", "2024-03-01_server-notes", &[at(2)]);
        assert_eq!(got, ["2024 03 01 server notes \u{203a} Setup"]);
    }

    #[test]
    fn embed_text_puts_the_context_first() {
        assert_eq!(embed_text("", "body"), "body");
        assert_eq!(embed_text("A \u{203a} B", "body"), "A \u{203a} B\n\nbody");
        assert_eq!(
            embed_text("A", "see [docs](https://x.org/a/b)"),
            "A\n\nsee docs"
        );
    }
    use super::*;
    use proptest::prelude::*;

    /// One token per char (whitespace and the joining `\n` included): deterministic and
    /// additive, and unlike the real tokenizer it charges for separators.
    struct CharCounter;
    impl TokenCounter for CharCounter {
        fn count(&self, text: &str) -> usize {
            text.chars().count()
        }
    }

    fn p(max: usize, overlap: usize) -> ChunkParams {
        ChunkParams {
            max_tokens: max,
            overlap_tokens: overlap,
        }
    }

    /// The invariants every chunking must satisfy; panics with a description otherwise.
    fn check(text: &str, params: &ChunkParams, counter: &dyn TokenCounter) -> Vec<Chunk> {
        let chunks = chunk_markdown(text, params, counter);
        let lines = split_lines(text);
        let max = params.max_tokens.max(1);
        let mut covered = vec![false; lines.len()];
        let mut prev_start = 0usize;
        let mut i = 0;
        while i < chunks.len() {
            let c = &chunks[i];
            assert!(
                1 <= c.start_line && c.start_line <= c.end_line && c.end_line <= lines.len(),
                "bad range {}..{} of {} lines",
                c.start_line,
                c.end_line,
                lines.len()
            );
            assert!(c.start_line >= prev_start, "start lines go backwards");
            prev_start = c.start_line;
            assert!(
                counter.count(&c.text) <= max,
                "chunk {}..{} counts {} > {max}",
                c.start_line,
                c.end_line,
                counter.count(&c.text)
            );
            for l in c.start_line..=c.end_line {
                covered[l - 1] = true;
            }
            let line = lines[c.start_line - 1];
            if c.start_line == c.end_line && counter.count(line) > max {
                // A split line: the run of pieces claiming it reproduces it exactly.
                let mut j = i;
                let mut joined = String::new();
                while j < chunks.len()
                    && chunks[j].start_line == c.start_line
                    && chunks[j].end_line == c.end_line
                {
                    assert!(!chunks[j].text.is_empty(), "empty piece");
                    joined.push_str(&chunks[j].text);
                    j += 1;
                }
                assert_eq!(joined, line, "pieces of line {} differ", c.start_line);
                i = j;
                continue;
            }
            assert_eq!(
                c.text,
                lines[c.start_line - 1..c.end_line].join("\n"),
                "chunk text differs from its lines"
            );
            assert!(!c.text.trim().is_empty(), "blank chunk");
            i += 1;
        }
        for (l, line) in lines.iter().enumerate() {
            if !line.trim().is_empty() {
                assert!(covered[l], "line {} not covered: {line:?}", l + 1);
            }
        }
        // Progress: no chunk is contained in its successor's range (unless both are pieces).
        for w in chunks.windows(2) {
            if w[0].start_line == w[1].start_line {
                assert_eq!(w[0].start_line, w[0].end_line, "repeated chunk start");
                assert_eq!(w[1].start_line, w[1].end_line, "repeated chunk start");
            }
            assert!(w[1].end_line >= w[0].end_line, "end lines go backwards");
        }
        chunks
    }

    fn line_strategy() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => prop::collection::vec("[a-zA-Z0-9,.]{1,10}", 1..14).prop_map(|w| w.join(" ")),
            3 => Just(String::new()),
            1 => Just("  \t ".to_string()),
            2 => prop::collection::vec("[a-z]{1,8}", 0..4).prop_map(|w| format!("## {}", w.join(" "))),
            1 => prop::collection::vec("[a-z]{1,8}", 1..4).prop_map(|w| format!("# {}", w.join(" "))),
            1 => Just("```rust".to_string()),
            1 => Just("```".to_string()),
            1 => Just("  ~~~~".to_string()),
            1 => Just("---".to_string()),
            1 => Just("...".to_string()),
            1 => Just("=====".to_string()),
            1 => "[日本語中文한국어カタ ]{1,40}",
            1 => "[a-z]{40,300}",
            1 => prop::collection::vec("[a-z]{1,8}[ \t]{1,3}", 20..150).prop_map(|w| w.concat()),
            1 => "[ ]{0,3}[\u{e9}\u{1F600}x\u{301}]{1,80}",
        ]
    }

    fn doc_strategy() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(line_strategy(), 0..70),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(lines, crlf, trailing)| {
                let nl = if crlf { "\r\n" } else { "\n" };
                let mut s = lines.join(nl);
                if trailing {
                    s.push_str(nl);
                }
                s
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn invariants_hold_with_approx_counter(doc in doc_strategy(), max in 1usize..120, overlap in 0usize..60) {
            check(&doc, &p(max, overlap), &ApproxCounter);
        }

        #[test]
        fn invariants_hold_with_char_counter(doc in doc_strategy(), max in 1usize..300, overlap in 0usize..100) {
            check(&doc, &p(max, overlap), &CharCounter);
        }

        #[test]
        fn split_to_fit_reproduces_the_line(line in "[a-z \u{e9}\u{4e2d}]{0,600}", max in 1usize..40) {
            for counter in [&ApproxCounter as &dyn TokenCounter, &CharCounter] {
                let pieces = split_to_fit(&line, max, counter);
                prop_assert_eq!(pieces.concat(), line.clone());
                for piece in &pieces {
                    prop_assert!(counter.count(piece) <= max);
                    prop_assert!(!piece.is_empty());
                }
            }
        }
    }

    fn words(n: usize, seed: usize) -> String {
        (0..n)
            .map(|i| format!("w{}", (i * 7 + seed) % 1000))
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn empty_and_whitespace_only_input_give_no_chunks() {
        for text in ["", "\n", "\n\n\n", "   \n\t\n", "\r\n\r\n", "  "] {
            assert!(
                chunk_markdown(text, &p(50, 10), &ApproxCounter).is_empty(),
                "{text:?}"
            );
            assert!(
                chunk_markdown(text, &p(1, 0), &CharCounter).is_empty(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn small_document_is_one_chunk_trimmed_of_blank_lines() {
        let text = "\n\n# Title\n\nSome text here.\n\n";
        let chunks = check(text, &p(100, 10), &ApproxCounter);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].start_line, 3);
        assert_eq!(chunks[0].end_line, 5);
        assert_eq!(chunks[0].text, "# Title\n\nSome text here.");
    }

    #[test]
    fn crlf_is_stripped_and_lines_match_lf() {
        let lf = format!(
            "# Title\n\n{}\n{}\n\n## Next\n{}\n",
            words(30, 1),
            words(30, 2),
            words(30, 3)
        );
        let crlf = lf.replace('\n', "\r\n");
        let a = check(&lf, &p(40, 8), &ApproxCounter);
        let b = check(&crlf, &p(40, 8), &ApproxCounter);
        assert_eq!(a, b);
        assert!(b.iter().all(|c| !c.text.contains('\r')));
        assert_eq!(b[0].start_line, 1);
    }

    #[test]
    fn code_fence_is_not_split() {
        let mut text = String::new();
        for i in 0..6 {
            text.push_str(&words(12, i));
            text.push('\n');
        }
        text.push_str("```rust\n");
        for i in 0..20 {
            text.push_str(&format!("let x{i} = {i};\n"));
        }
        text.push_str("```\n");
        for i in 0..6 {
            text.push_str(&words(12, i + 10));
            text.push('\n');
        }
        // The fence (83 tokens) fits budget 120, but not together with the intro (72).
        let params = p(120, 10);
        let chunks = check(&text, &params, &ApproxCounter);
        let open = 7; // 1-based line of ```rust
        let close = 28;
        assert!(chunks.len() >= 2, "expected several chunks, got {chunks:?}");
        for c in &chunks {
            let has_open = (c.start_line..=c.end_line).contains(&open);
            let has_close = (c.start_line..=c.end_line).contains(&close);
            let inside = c.start_line > open && c.start_line <= close
                || c.end_line >= open && c.end_line < close;
            assert!(
                !inside,
                "chunk {}..{} cuts the fence",
                c.start_line, c.end_line
            );
            assert_eq!(has_open, has_close);
        }
        assert!(
            chunks
                .iter()
                .any(|c| c.start_line <= open && c.end_line >= close)
        );
    }

    #[test]
    fn code_fence_larger_than_budget_is_split_within_budget() {
        let mut text = String::from("intro line\n~~~\n");
        for i in 0..200 {
            text.push_str(&format!("call_{i}(argument, other_argument);\n"));
        }
        text.push_str("~~~\nafter\n");
        let chunks = check(&text, &p(50, 10), &ApproxCounter);
        assert!(chunks.len() > 5);
        // An unclosed fence also stays covered and within budget.
        let unclosed = text.replace("~~~\nafter\n", "after\n");
        check(&unclosed, &p(50, 10), &ApproxCounter);
    }

    #[test]
    fn headings_start_chunks_and_small_sections_merge() {
        // Sections of ~45% of the budget: each heading should start a chunk.
        let mut text = String::new();
        for s in 0..6 {
            text.push_str(&format!("## Section {s}\n\n"));
            for l in 0..4 {
                text.push_str(&words(20, s * 10 + l)); // 20 words x 1 token
                text.push('\n');
            }
            text.push('\n');
        }
        let chunks = check(&text, &p(200, 20), &ApproxCounter);
        let lines = split_lines(&text);
        for c in &chunks {
            assert!(
                lines[c.start_line - 1].starts_with("## "),
                "chunk {}..{} does not start at a heading: {:?}",
                c.start_line,
                c.end_line,
                lines[c.start_line - 1]
            );
        }
        // Tiny sections merge into few chunks.
        let mut small = String::new();
        for s in 0..30 {
            small.push_str(&format!("## S{s}\nshort body {s}\n\n"));
        }
        let merged = check(&small, &p(200, 20), &ApproxCounter);
        assert!(
            merged.len() < 10,
            "{} chunks for 30 tiny sections",
            merged.len()
        );
        for c in &merged[1..] {
            assert!(lines_of(&small)[c.start_line - 1].starts_with("## "));
        }
    }

    fn lines_of(text: &str) -> Vec<&str> {
        split_lines(text)
    }

    #[test]
    fn heading_preferred_over_blank_line_when_cutting() {
        // A small intro, then a section that overflows: the cut lands before the heading.
        let text = format!(
            "{}\n\n## Big section\n{}\n\n{}\n{}\n",
            words(30, 0),
            words(60, 1),
            words(60, 2),
            words(60, 3)
        );
        let chunks = check(&text, &p(160, 0), &ApproxCounter);
        assert_eq!(chunks[0].end_line, 1, "{chunks:?}");
        assert_eq!(chunks[1].start_line, 3);
    }

    #[test]
    fn cuts_prefer_blank_lines() {
        // Paragraphs of 3 lines x 10 tokens separated by blank lines; budget 100.
        let mut text = String::new();
        for para in 0..12 {
            for l in 0..3 {
                text.push_str(&words(10, para * 3 + l));
                text.push('\n');
            }
            text.push('\n');
        }
        let chunks = check(&text, &p(100, 0), &ApproxCounter);
        let lines = split_lines(&text);
        for c in &chunks {
            let after = lines.get(c.end_line).copied().unwrap_or("");
            assert!(
                after.trim().is_empty(),
                "chunk {}..{} ends mid-paragraph",
                c.start_line,
                c.end_line
            );
        }
    }

    #[test]
    fn front_matter_is_covered_and_attached_to_first_chunk() {
        let text = format!(
            "---\ntitle: Hello\ntags: [a, b]\n---\n\n# Hello\n\n{}\n\n## More\n{}\n",
            words(40, 0),
            words(80, 1)
        );
        let chunks = check(&text, &p(100, 10), &ApproxCounter);
        assert_eq!(chunks[0].start_line, 1);
        assert!(
            chunks[0]
                .text
                .starts_with("---\ntitle: Hello\ntags: [a, b]\n---")
        );
        // The `---` closing the front matter is not taken as a setext underline or a cut.
        assert!(chunks[0].end_line >= 6, "{chunks:?}");
        // Front matter larger than the budget is split but stays covered.
        let mut big = String::from("---\n");
        for i in 0..100 {
            big.push_str(&format!("key{i}: value number {i}\n"));
        }
        big.push_str("---\nbody\n");
        check(&big, &p(30, 5), &ApproxCounter);
    }

    #[test]
    fn huge_line_is_split_into_pieces_on_that_line() {
        let huge = words(250_000, 5); // ~1.2 MB of words
        assert!(huge.len() > 1_000_000);
        let text = format!("# Title\nbefore\n{huge}\nafter\n");
        let chunks = check(&text, &p(254, 32), &ApproxCounter);
        let pieces: Vec<&Chunk> = chunks.iter().filter(|c| c.start_line == 3).collect();
        assert!(pieces.len() > 100);
        assert!(pieces.iter().all(|c| c.end_line == 3));
        // Cut right after whitespace: every piece but the last ends with a space.
        assert!(
            pieces[..pieces.len() - 1]
                .iter()
                .all(|c| c.text.ends_with(' '))
        );
        assert_eq!(chunks.first().map(|c| c.start_line), Some(1));
        assert_eq!(chunks.last().map(|c| c.text.as_str()), Some("after"));

        // A line without whitespace is cut at char boundaries.
        let word: String = "é中a".repeat(20_000);
        let chunks = check(&word, &p(50, 0), &ApproxCounter);
        assert!(chunks.len() > 10);
        check(&word, &p(50, 0), &CharCounter);
    }

    #[test]
    fn neighbours_overlap_by_whole_lines() {
        let text: String = (0..60).map(|i| words(10, i) + "\n").collect();
        let chunks = check(&text, &p(100, 25), &ApproxCounter);
        assert!(chunks.len() > 3);
        for w in chunks.windows(2) {
            let shared = w[0].end_line as isize - w[1].start_line as isize + 1;
            assert!(
                shared >= 1,
                "no overlap between {:?} and {:?}",
                (w[0].start_line, w[0].end_line),
                (w[1].start_line, w[1].end_line)
            );
            let shared_text = split_lines(&text)[w[1].start_line - 1..w[0].end_line].join("\n");
            assert!(ApproxCounter.count(&shared_text) <= 25);
            assert!(w[1].start_line > w[0].start_line);
        }
        // Without overlap the chunks tile the document.
        let tiles = check(&text, &p(100, 0), &ApproxCounter);
        for w in tiles.windows(2) {
            assert_eq!(w[1].start_line, w[0].end_line + 1);
        }
    }

    #[test]
    fn separator_tokens_are_charged() {
        // With one token per char, "\n" costs one: 10 lines of 9 chars = 99 tokens joined.
        let text: String = (0..10).map(|_| "abcdefghi\n").collect();
        let chunks = check(&text, &p(99, 0), &CharCounter);
        assert_eq!(chunks.len(), 1);
        let chunks = check(&text, &p(98, 0), &CharCounter);
        assert_eq!(chunks.len(), 2);
    }

    #[test]
    fn setext_and_atx_headings_are_recognised() {
        assert!(is_atx_heading("# a"));
        assert!(is_atx_heading("###"));
        assert!(!is_atx_heading("#hashtag"));
        assert!(!is_atx_heading("####### seven"));
        assert!(!is_atx_heading("    # indented code"));
        assert!(is_setext_underline("==="));
        assert!(is_setext_underline("---"));
        assert!(!is_setext_underline("- item"));
        assert_eq!(fence_open("```rust"), Some((b'`', 3)));
        assert_eq!(fence_open("  ~~~~"), Some((b'~', 4)));
        assert_eq!(fence_open("``` a`b"), None);
        assert!(fence_close("````", b'`', 3));
        assert!(!fence_close("~~~", b'`', 3));
    }
}

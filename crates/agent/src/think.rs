//! Reasoning blocks some models emit in their answer text — `<think>…</think>`
//! and `<thinking>…</thinking>` — removed before anything else sees the text:
//! [`ThinkFilter`] for a stream (tags may be cut anywhere by chunk boundaries;
//! a block still open when the stream ends is dropped), [`strip`] for a whole
//! text. Pure.
//!
//! Invariant: text inside a block is never returned, so it never reaches the
//! terminal, the history, the session transcript or the memory index.

/// Opening tags and their closing tags (matched case-insensitively).
const TAGS: [(&str, &str); 2] = [("<think>", "</think>"), ("<thinking>", "</thinking>")];

/// A streaming filter: feed chunks with [`ThinkFilter::push`], then call
/// [`ThinkFilter::finish`] once at the end of the stream.
#[derive(Debug, Clone, Default)]
pub struct ThinkFilter {
    /// The closing tag awaited while inside a block.
    inside: Option<&'static str>,
    /// Text held back: a possible tag cut by a chunk boundary.
    pending: String,
    /// Drop whitespace right after a closed block (models put a blank line there).
    skip_ws: bool,
}

impl ThinkFilter {
    /// A filter outside any block.
    pub fn new() -> ThinkFilter {
        ThinkFilter::default()
    }

    /// Whether the filter is inside an unterminated block.
    pub fn in_block(&self) -> bool {
        self.inside.is_some()
    }

    /// The visible part of `chunk` (possibly empty; a possible tag cut by the
    /// chunk boundary is held back until the next chunk decides it).
    pub fn push(&mut self, chunk: &str) -> String {
        let mut buf = std::mem::take(&mut self.pending);
        buf.push_str(chunk);
        let mut out = String::new();
        let mut rest: &str = &buf;
        loop {
            if let Some(close) = self.inside {
                match find_ci(rest, close) {
                    Some(i) => {
                        rest = &rest[i + close.len()..];
                        self.inside = None;
                        self.skip_ws = true;
                    }
                    None => {
                        // Keep only what could be the start of the closing tag.
                        let keep = partial_suffix(rest, close);
                        self.pending = rest[rest.len() - keep..].to_string();
                        return out;
                    }
                }
                continue;
            }
            match next_open(rest) {
                Open::Tag { at, len, close } => {
                    self.emit(&rest[..at], &mut out);
                    rest = &rest[at + len..];
                    self.inside = Some(close);
                }
                Open::Partial { at } => {
                    self.emit(&rest[..at], &mut out);
                    self.pending = rest[at..].to_string();
                    return out;
                }
                Open::None => {
                    self.emit(rest, &mut out);
                    return out;
                }
            }
        }
    }

    /// The end of the stream: a held-back partial tag outside a block is text
    /// after all; an unterminated block is dropped.
    pub fn finish(&mut self) -> String {
        let pending = std::mem::take(&mut self.pending);
        let mut out = String::new();
        if self.inside.take().is_none() {
            self.emit(&pending, &mut out);
        }
        out
    }

    fn emit(&mut self, text: &str, out: &mut String) {
        let text = if self.skip_ws {
            text.trim_start()
        } else {
            text
        };
        if !text.is_empty() {
            self.skip_ws = false;
            out.push_str(text);
        }
    }
}

/// `text` without its reasoning blocks (an unterminated block runs to the end).
pub fn strip(text: &str) -> String {
    if !text.to_ascii_lowercase().contains("<think") {
        return text.to_string();
    }
    let mut f = ThinkFilter::new();
    let mut out = f.push(text);
    out.push_str(&f.finish());
    out
}

enum Open {
    /// A complete opening tag at byte `at`, `len` bytes long.
    Tag {
        at: usize,
        len: usize,
        close: &'static str,
    },
    /// The text ends with what may become an opening tag, from byte `at`.
    Partial {
        at: usize,
    },
    None,
}

/// The first opening tag (or trailing partial one) in `s`.
fn next_open(s: &str) -> Open {
    for (at, _) in s.match_indices('<') {
        let tail = &s[at..];
        for (open, close) in TAGS {
            if starts_with_ci(tail, open) {
                return Open::Tag {
                    at,
                    len: open.len(),
                    close,
                };
            }
        }
        if TAGS
            .iter()
            .any(|(open, _)| tail.len() < open.len() && starts_with_ci(open, tail))
        {
            return Open::Partial { at };
        }
    }
    Open::None
}

fn starts_with_ci(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len() && s.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// Byte offset of the first case-insensitive occurrence of the ASCII `needle`.
fn find_ci(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    if h.len() < n.len() {
        return None;
    }
    (0..=h.len() - n.len()).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// Length of the longest suffix of `s` that is a proper prefix of `tag`.
fn partial_suffix(s: &str, tag: &str) -> usize {
    let b = s.as_bytes();
    (1..tag.len().min(b.len() + 1))
        .rev()
        .find(|&k| b[b.len() - k..].eq_ignore_ascii_case(&tag.as_bytes()[..k]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `text` split at every pair of cut points; every split must give `want`.
    fn all_splits(text: &str, want: &str) {
        let cuts: Vec<usize> = (0..=text.len())
            .filter(|i| text.is_char_boundary(*i))
            .collect();
        for &a in &cuts {
            for &b in cuts.iter().filter(|b| **b >= a) {
                let mut f = ThinkFilter::new();
                let mut out = f.push(&text[..a]);
                out.push_str(&f.push(&text[a..b]));
                out.push_str(&f.push(&text[b..]));
                out.push_str(&f.finish());
                assert_eq!(out, want, "split at {a},{b} of {text:?}");
            }
        }
        assert_eq!(strip(text), want);
    }

    #[test]
    fn blocks_are_removed_wherever_chunks_are_cut() {
        all_splits(
            "<think>plan: say 42</think>\n\nThe answer is 42.",
            "The answer is 42.",
        );
        all_splits("Sure. <THINKING>hmm, é…</Thinking> Done.", "Sure. Done.");
        all_splits("a <thin b", "a <thin b");
        all_splits("x < y and <b>bold</b>", "x < y and <b>bold</b>");
        all_splits("<think>a</think>1<think>b</think>2", "12");
    }

    #[test]
    fn an_unterminated_block_is_dropped_at_the_end() {
        all_splits("Hello <think>never closed, secret", "Hello ");
        all_splits("<thinking>only thoughts", "");
        let mut f = ThinkFilter::new();
        assert_eq!(f.push("ok <think>x</thi"), "ok ");
        assert!(f.in_block());
        assert_eq!(f.finish(), "");
    }

    #[test]
    fn text_without_tags_passes_through_untouched() {
        assert_eq!(strip("  plain\n"), "  plain\n");
        let mut f = ThinkFilter::new();
        assert_eq!(f.push("a<"), "a");
        assert_eq!(f.push("3"), "<3");
        assert_eq!(f.finish(), "");
    }
}

//! Snippets for search hits: at most N characters of a chunk, cut at a word
//! boundary, starting near the first query-term hit. Pure.
#![warn(missing_docs)]

/// Default snippet length limit, in characters.
pub const SNIPPET_CHARS: usize = 700;

/// A snippet of `text` of at most `max_chars` characters (ellipses included),
/// starting a little before the first case-insensitive occurrence of one of `terms`
/// (or at the start), cut at whitespace when the window has any (CJK text without
/// spaces is cut at a character boundary).
pub fn snippet(text: &str, terms: &[&str], max_chars: usize) -> String {
    let text = text.trim();
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= max_chars {
        return text.to_string();
    }
    if max_chars < 8 {
        return chars[..max_chars].iter().collect();
    }
    // Where the first term occurs, in characters.
    let lower: Vec<char> = chars
        .iter()
        .map(|c| c.to_lowercase().next().unwrap_or(*c))
        .collect();
    let mut first_hit: Option<usize> = None;
    for t in terms {
        let t: Vec<char> = t
            .chars()
            .map(|c| c.to_lowercase().next().unwrap_or(c))
            .collect();
        if t.is_empty() || t.len() > lower.len() {
            continue;
        }
        if let Some(pos) = lower.windows(t.len()).position(|w| w == t.as_slice()) {
            first_hit = Some(first_hit.map_or(pos, |f: usize| f.min(pos)));
        }
    }
    let budget = max_chars - 2; // room for leading and trailing ellipses
    let mut start = match first_hit {
        // Keep the hit in the first third of the window.
        Some(h) if h > budget / 3 => (h - budget / 3).min(chars.len().saturating_sub(budget)),
        _ => 0,
    };
    if start > 0 {
        // Move forward to the start of a word.
        if let Some(ws) = chars[start..]
            .iter()
            .take(40)
            .position(|c| c.is_whitespace())
        {
            start += ws + 1;
        }
    }
    let lead = start > 0;
    let avail = budget + usize::from(!lead);
    let mut end = (start + avail).min(chars.len());
    let tail = end < chars.len();
    if tail {
        // Cut at the last whitespace inside the window, if any in its second half.
        if let Some(ws) = chars[start..end].iter().rposition(|c| c.is_whitespace())
            && ws > (end - start) / 2
        {
            end = start + ws;
        }
    }
    let mut out = String::new();
    if lead {
        out.push('…');
    }
    out.extend(chars[start..end].iter());
    let trimmed_len = out.trim_end().len();
    out.truncate(trimmed_len);
    if tail {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_whole() {
        assert_eq!(snippet("  hello world \n", &[], 700), "hello world");
    }

    #[test]
    fn long_text_cut_at_word_within_limit() {
        let text = "alpha beta gamma delta ".repeat(100);
        let s = snippet(&text, &[], 700);
        assert!(s.chars().count() <= 700, "{}", s.chars().count());
        assert!(s.ends_with('…'));
        let body = s.trim_end_matches('…');
        assert!(text.starts_with(body));
        // Cut at a word: the body ends with a whole word.
        assert!(
            ["alpha", "beta", "gamma", "delta"]
                .iter()
                .any(|w| body.ends_with(w))
        );
    }

    #[test]
    fn window_follows_the_first_hit() {
        let text = format!(
            "{} needle here {}",
            "filler ".repeat(300),
            "tail ".repeat(300)
        );
        let s = snippet(&text, &["NEEDLE"], 700);
        assert!(s.contains("needle here"), "{s}");
        assert!(s.starts_with('…') && s.ends_with('…'));
        assert!(s.chars().count() <= 700);
        assert!(s[3..].starts_with("filler"), "starts at a word: {s}");
    }

    #[test]
    fn cjk_without_spaces() {
        let text = "黑豹队的防守".repeat(300);
        let s = snippet(&text, &["防守"], 700);
        assert!(s.chars().count() <= 700);
        assert!(s.contains("防守"));
    }
}

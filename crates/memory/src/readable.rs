//! What the embedding model reads of a chunk: the words a reader of the rendered
//! note sees, not the markup and the addresses behind them. Pure: no I/O.
//!
//! - A Markdown link or image reads as its label: `[the plan](https://host/a?b=1
//!   "title")` reads `the plan`, `![diagram](arch.png)` reads `diagram`. A reader
//!   sees neither the brackets nor the destination.
//! - A wiki link reads as what it shows: `[[Open Source]]` reads `Open Source`,
//!   `[[target|label]]` reads `label`, an embed `![[note]]` reads `note`.
//! - A bare URL (`http://`, `https://`, `ftp://`, `file://`, also inside `<…>`)
//!   reads as its host: `https://github.com/org/repo/issues/12` reads `github.com`,
//!   `file:///home/me/x.txt` reads nothing. Where a link points is a word; its
//!   path, query and fragment are mostly opaque ids that the model splits into
//!   many word pieces.
//! - Anything else is kept as written, brackets included (`[1]`, `[ ]`, code).
//!
//! Why: the model runs once per word piece, and a bracket is a piece of its own.
//! On the notes garden the brackets of wiki links and the destinations of links
//! were a third of the pieces the model ran, and they pushed the ends of chunks
//! past its 256-piece window (BENCHMARKS.md, "Issue 30"). Only the vector's
//! input changes: the stored text, the word index and snippets keep every link,
//! so a keyword search for a path or an id still finds it.

use std::borrow::Cow;

/// URL schemes read as their host.
const SCHEMES: [&str; 4] = ["https://", "http://", "ftp://", "file://"];

/// `text` as the embedding model reads it (see the module docs); borrowed when
/// it holds no link and no URL.
pub fn readable(text: &str) -> Cow<'_, str> {
    if !text.contains('[') && !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    if push_readable(text, &mut out) {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(text)
    }
}

/// Push `text` as read to `out`; whether anything was left out.
fn push_readable(text: &str, out: &mut String) -> bool {
    let mut rest = text;
    let mut changed = false;
    while let Some(c) = rest.chars().next() {
        let bang = c == '!' && rest[1..].starts_with('[');
        let at = if bang { &rest[1..] } else { rest };
        if at.starts_with("[[")
            && let Some(end) = line_find(&at[2..], "]]")
        {
            let inner = &at[2..2 + end];
            let shown = inner.rsplit('|').next().unwrap_or(inner);
            out.push_str(shown);
            rest = &at[2 + end + 2..];
            changed = true;
            continue;
        }
        if at.starts_with('[')
            && let Some(close) = label_end(at)
            && let Some(len) = destination_len(&at[close + 1..])
        {
            push_readable(&at[1..close], out);
            rest = &at[close + 1 + len..];
            changed = true;
            continue;
        }
        if let Some(scheme) = SCHEMES.iter().find(|s| starts_with_ignore_case(rest, s))
            && !out.chars().next_back().is_some_and(char::is_alphanumeric)
        {
            let len = url_len(rest);
            out.push_str(host(&rest[scheme.len()..len]));
            rest = &rest[len..];
            changed = true;
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    changed
}

/// Where `needle` starts in `s`, before the end of the line.
fn line_find(s: &str, needle: &str) -> Option<usize> {
    let line = s.find('\n').map_or(s, |n| &s[..n]);
    line.find(needle)
}

/// The index of the `]` that closes the `[` at the start of `s` (nested pairs
/// balanced, `\]` escaped), on the same line.
fn label_end(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'[' => depth += 1,
            b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            b'\n' => return None,
            _ => {}
        }
        i += 1;
    }
    None
}

fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len() && s.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// The length of a link destination `(…)` at the start of `s` (CommonMark: an
/// optional `<…>` or a run without spaces and with balanced parentheses, then
/// an optional title in quotes or parentheses, all on one line); `None` when
/// `s` does not start with one.
fn destination_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    if b.first() != Some(&b'(') {
        return None;
    }
    let mut i = 1;
    let skip_spaces = |mut i: usize| {
        while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
            i += 1;
        }
        i
    };
    i = skip_spaces(i);
    if b.get(i) == Some(&b'<') {
        let end = s[i..].find(['>', '\n'])?;
        if b[i + end] != b'>' {
            return None;
        }
        i += end + 1;
    } else {
        let mut depth = 0usize;
        while i < b.len() {
            match b[i] {
                b'(' => depth += 1,
                b')' if depth == 0 => break,
                b')' => depth -= 1,
                b' ' | b'\t' | b'\n' | b'\r' => break,
                b'\\' => i += 1,
                _ => {}
            }
            i += 1;
        }
    }
    i = skip_spaces(i);
    if let Some(&q) = b.get(i)
        && matches!(q, b'"' | b'\'' | b'(')
    {
        let close = if q == b'(' { ')' } else { q as char };
        let end = s[i + 1..].find([close, '\n'])?;
        if b[i + 1 + end] != close as u8 {
            return None;
        }
        i = skip_spaces(i + 1 + end + 1);
    }
    (b.get(i) == Some(&b')')).then_some(i + 1)
}

/// The length of the URL at the start of `s`: up to whitespace or a character
/// that cannot be part of one, without trailing punctuation (a sentence's `.`,
/// or a `)` it did not open).
fn url_len(s: &str) -> usize {
    let mut end = s
        .find(|c: char| c.is_whitespace() || matches!(c, '<' | '>' | '"' | '`' | '[' | ']'))
        .unwrap_or(s.len());
    loop {
        let Some(last) = s[..end].chars().next_back() else {
            return end;
        };
        let unopened_paren =
            last == ')' && s[..end].matches('(').count() < s[..end].matches(')').count();
        if matches!(last, '.' | ',' | ';' | ':' | '!' | '?' | '\'' | '*' | '_') || unopened_paren {
            end -= last.len_utf8();
        } else {
            return end;
        }
    }
}

/// The host of a URL without its scheme: before the first `/`, `?` or `#`,
/// without a `user@` and a `:port`.
fn host(after_scheme: &str) -> &str {
    let authority = after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    match authority.rfind(':') {
        Some(i) if authority[i + 1..].bytes().all(|b| b.is_ascii_digit()) => &authority[..i],
        _ => authority,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_without_links_is_borrowed_unchanged() {
        for t in [
            "The ferry leaves at nine.",
            "a [label] and (parens), [1] and - [ ] a task",
            "",
        ] {
            assert!(matches!(readable(t), Cow::Borrowed(_)), "{t}");
        }
    }

    #[test]
    fn a_link_reads_as_its_label() {
        let cases = [
            (
                "see [the plan](https://x.org/a/b?c=1) now",
                "see the plan now",
            ),
            ("![diagram](img/arch.png \"Arch\")", "diagram"),
            ("[a](<my file.md>) and [b](b.md 'B')", "a and b"),
            ("[wiki](https://en.wikipedia.org/wiki/Foo_(bar))!", "wiki!"),
            ("[ctx](file:///home/me/j.txt#L5-L9): done", "ctx: done"),
            (
                "[see [[Agora]] docs](https://anagora.org/x)",
                "see Agora docs",
            ),
            ("[a \\] b](x.md)", "a \\] b"),
        ];
        for (t, want) in cases {
            assert_eq!(readable(t), want, "{t}");
        }
    }

    #[test]
    fn a_wiki_link_reads_as_what_it_shows() {
        let cases = [
            (
                "- [[Open Source]] and [[flancia]]",
                "- Open Source and flancia",
            ),
            ("[[2021-03-04|yesterday]]", "yesterday"),
            ("![[meeting notes]]", "meeting notes"),
        ];
        for (t, want) in cases {
            assert_eq!(readable(t), want, "{t}");
        }
    }

    #[test]
    fn a_bare_url_reads_as_its_host() {
        let cases = [
            ("https://github.com/org/repo/issues/12", "github.com"),
            (
                "see https://user@Example.org:8443/x?y#z.",
                "see Example.org.",
            ),
            (
                "(via https://twitter.com/a/status/1355)",
                "(via twitter.com)",
            ),
            ("<https://anagora.org/node>", "<anagora.org>"),
            ("open file:///home/me/garden/a.md", "open "),
            ("HTTP://LOUD.example/PATH", "LOUD.example"),
        ];
        for (t, want) in cases {
            assert_eq!(readable(t), want, "{t}");
        }
    }

    #[test]
    fn what_only_looks_like_a_link_is_kept() {
        // Positive controls for the rules above: no destination, no scheme, a
        // scheme inside a word, a destination with a space and no `<…>`, an
        // unclosed pair, a wiki link across lines.
        for t in [
            "[label] (not a link)",
            "call f(x) then g(y)",
            "xhttps://not.a.url/path",
            "[a](b c d)",
            "[open](unclosed",
            "[[open\nclose]]",
            "a[0] = b[1]",
        ] {
            assert_eq!(readable(t), t, "{t}");
        }
    }

    proptest::proptest! {
        /// Any text reads without a panic, never longer than written, and text
        /// without a bracket or a scheme reads as written.
        #[test]
        fn reading_only_leaves_out(s in "[a-z \\[\\]()<>:/!|\"'\\\\\nä→.]{0,80}") {
            let r = readable(&s);
            proptest::prop_assert!(r.len() <= s.len());
            if !s.contains('[') && !s.contains("://") {
                proptest::prop_assert_eq!(r.as_ref(), s.as_str());
            }
        }
    }
}

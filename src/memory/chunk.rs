//! Markdown-aware, line-based chunking with a budget counted in the embedding
//! model's own tokens. Pure: no I/O, no database.

/// Bumped whenever chunk boundaries change; a stored index with another version is rebuilt.
pub const CHUNKER_VERSION: &str = "md-1";

/// Counts tokens the way the embedding model will (word pieces for MiniLM).
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

/// Split a Markdown document into chunks.
pub fn chunk_markdown(text: &str, params: &ChunkParams, counter: &dyn TokenCounter) -> Vec<Chunk> {
    // Placeholder until the Markdown-aware chunker lands: fixed groups of lines.
    let _ = (params, counter);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let end = (i + 20).min(lines.len());
        let t = lines[i..end].join("\n");
        if !t.trim().is_empty() {
            out.push(Chunk {
                start_line: i + 1,
                end_line: end,
                text: t,
            });
        }
        i = end;
    }
    out
}

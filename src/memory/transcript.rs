//! Session transcripts (JSONL) as a memory source: which lines are indexed (user
//! and assistant text, never tool payloads or system prompts), how they group into
//! chunks mapped back to JSONL line numbers, and their timestamps for decay. Pure.

use crate::memory::chunk::{ChunkParams, TokenCounter};

/// A chunk of a transcript: 1-based JSONL line range, redacted text, time for decay.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptChunk {
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
    /// Unix seconds of the newest message in the chunk, if any had a timestamp.
    pub time: Option<i64>,
}

/// The result of reading complete lines of a transcript.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TranscriptRead {
    pub chunks: Vec<TranscriptChunk>,
    /// Bytes of complete lines consumed (a torn last line is left for the next pass).
    pub consumed_bytes: usize,
    /// Complete lines consumed.
    pub consumed_lines: usize,
}

/// Read the complete lines of `bytes` (a transcript's content starting at a line
/// boundary), numbering lines from `first_line` (1-based).
pub fn read_transcript(
    bytes: &[u8],
    first_line: usize,
    params: &ChunkParams,
    counter: &dyn TokenCounter,
) -> TranscriptRead {
    // Placeholder until the transcript reader lands.
    let _ = (bytes, first_line, params, counter);
    TranscriptRead::default()
}

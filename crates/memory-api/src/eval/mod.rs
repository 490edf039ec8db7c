//! Retrieval evaluation on BEIR data sets through the same pipeline users run:
//! the corpus becomes one Markdown note per document in a temporary registered
//! source, is indexed by the normal indexer, and every query of the split goes
//! through the normal search engine. `metrics` (pure) scores the rankings
//! exactly as trec_eval does; `beir` loads the files.
//!
//! Invariant: never touches the user's workspace or database — everything is
//! written under a temporary directory that is removed afterwards.
#![warn(missing_docs)]

pub mod backend;
pub mod beir;
pub mod conversations;
pub mod memorybank;
pub mod metrics;
pub mod runner;
pub mod synthetic;

pub use backend::{EvalBackend, EvalRunError};

use sha2::{Digest, Sha256};

/// The name of the temporary source the corpus is registered as.
pub const EVAL_SOURCE: &str = "beir";

/// File name (relative to the source root) for a document id: `doc-` + the id
/// with every byte outside `[A-Za-z0-9_-]` percent-encoded (so distinct ids give
/// distinct names, and no name looks like a dated note), or a sha256 of the id
/// when that would be longer than a file name may be.
pub fn doc_file_name(id: &str) -> String {
    let mut s = String::with_capacity(id.len() + 7);
    s.push_str("doc-");
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    if s.len() > 200 {
        let h = Sha256::digest(id.as_bytes());
        return format!("doc-sha256-{}.md", hex::encode(h));
    }
    s.push_str(".md");
    s
}

/// The Markdown note for a document: its title as a `# heading`, then its text.
pub fn doc_markdown(title: &str, text: &str) -> String {
    let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = text.trim();
    if title.is_empty() {
        format!("{text}\n")
    } else {
        format!("# {title}\n\n{text}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_safe_distinct_and_undated() {
        assert_eq!(doc_file_name("4983"), "doc-4983.md");
        assert_eq!(doc_file_name("a/b"), "doc-a%2Fb.md");
        assert_eq!(doc_file_name("a%2Fb"), "doc-a%252Fb.md");
        assert_eq!(doc_file_name(".."), "doc-%2E%2E.md");
        assert_eq!(doc_file_name("é"), "doc-%C3%A9.md");
        let long = "x".repeat(300);
        let n = doc_file_name(&long);
        assert!(n.len() < 100 && n.starts_with("doc-sha256-"), "{n}");
        assert_ne!(n, doc_file_name(&"x".repeat(301)));
        assert_eq!(
            claw_memory::dates::note_time_from_path(&doc_file_name("2024-01-01")),
            None
        );
        assert!(claw_memory::walk::is_markdown(&doc_file_name("q")));
    }

    #[test]
    fn markdown_has_title_heading() {
        assert_eq!(doc_markdown("A\ntitle ", " body "), "# A title\n\nbody\n");
        assert_eq!(doc_markdown("", "body"), "body\n");
    }
}

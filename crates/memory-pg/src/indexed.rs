//! A file as the shared index holds it: when several workspaces (machines) share a
//! namespace, a search here can return another workspace's file, which is not on
//! this disk. [`PgStore::indexed_file`] reassembles such a file from its stored
//! chunks (text already redacted at index time) by line range: each line once,
//! even where chunk overlap stored it twice; lines no chunk covers (blank lines
//! between chunks) come back empty.

use crate::store::PgStore;
use claw_memory::store::StoreError;

/// One file of the shared index, reassembled from its chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedFile {
    /// The namespace holding it.
    pub namespace: String,
    /// The id of the workspace that indexed it (see [`crate::workspace_id`]).
    pub workspace: String,
    /// Its source in that workspace.
    pub source: String,
    /// Its path relative to that source's root.
    pub path: String,
    /// The file's text as indexed (redacted), one `\n`-terminated line per line
    /// up to the last indexed line.
    pub text: String,
}

impl PgStore {
    /// The file `path` (relative to its source root) of another workspace in the
    /// namespaces this store searches, reassembled from its chunks; `workspace`
    /// picks one workspace (any workspace but this one when `None`; with several,
    /// this store's own namespace first, then by workspace id). `None` when no
    /// such file is indexed.
    pub fn indexed_file(
        &self,
        path: &str,
        workspace: Option<&str>,
    ) -> Result<Option<IndexedFile>, StoreError> {
        let own_ns = self.cfg.namespace.clone();
        let own_ws = self.cfg.workspace.clone();
        let pick: Option<String> = workspace.map(str::to_string);
        Ok(self.with_client(|c| {
            let Some(f) = c.query_opt(
                "SELECT namespace, workspace, source FROM files
                 WHERE namespace = ANY($1) AND path = $2
                   AND (CASE WHEN $4::text IS NULL THEN workspace <> $3 ELSE workspace = $4 END)
                 ORDER BY (namespace = $5) DESC, workspace, source LIMIT 1",
                &[&self.namespaces, &path, &own_ws, &pick, &own_ns],
            )?
            else {
                return Ok(None);
            };
            let (namespace, workspace, source): (String, String, String) =
                (f.get(0), f.get(1), f.get(2));
            let rows = c.query(
                "SELECT start_line, end_line, text FROM chunks
                 WHERE namespace = $1 AND workspace = $2 AND source = $3 AND path = $4
                 ORDER BY start_line, end_line, rowid",
                &[&namespace, &workspace, &source, &path],
            )?;
            let chunks: Vec<(usize, usize, String)> = rows
                .iter()
                .map(|r| {
                    (
                        r.get::<_, i32>(0).max(1) as usize,
                        r.get::<_, i32>(1).max(1) as usize,
                        r.get(2),
                    )
                })
                .collect();
            Ok(Some(IndexedFile {
                namespace,
                workspace,
                source,
                path: path.to_string(),
                text: reassemble(&chunks),
            }))
        })?)
    }
}

/// The lines of a file from its chunks `(start_line, end_line, text)` ordered by
/// (start, end, insertion): a multi-line chunk's text is its lines joined by `\n`;
/// a line too long for one chunk is stored as consecutive pieces that each claim
/// that line alone (concatenated back). A line stored twice (overlap) appears once.
/// Pure.
pub fn reassemble(chunks: &[(usize, usize, String)]) -> String {
    let last = chunks.iter().map(|c| c.1).max().unwrap_or(0);
    let mut lines: Vec<Option<String>> = vec![None; last];
    let mut i = 0;
    while i < chunks.len() {
        let (start, end, ref text) = chunks[i];
        // Pieces of one over-long line: every chunk claiming exactly that line.
        let mut j = i + 1;
        while start == end && j < chunks.len() && chunks[j].0 == start && chunks[j].1 == end {
            j += 1;
        }
        if j > i + 1 {
            let whole: String = chunks[i..j].iter().map(|c| c.2.as_str()).collect();
            lines[start - 1].get_or_insert(whole);
        } else {
            for (k, line) in text.split('\n').enumerate() {
                let n = start + k;
                if n > end || n > last {
                    break;
                }
                lines[n - 1].get_or_insert_with(|| line.to_string());
            }
        }
        i = j;
    }
    let mut out = String::new();
    for l in lines {
        out.push_str(l.as_deref().unwrap_or(""));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::reassemble;

    fn c(s: usize, e: usize, t: &str) -> (usize, usize, String) {
        (s, e, t.to_string())
    }

    #[test]
    fn overlapping_chunks_give_each_line_once() {
        let chunks = [
            c(1, 3, "# A\none\ntwo"),
            c(3, 5, "two\nthree\nfour"),
            c(7, 7, "six"),
        ];
        assert_eq!(reassemble(&chunks), "# A\none\ntwo\nthree\nfour\n\nsix\n");
    }

    #[test]
    fn pieces_of_a_long_line_are_joined() {
        let chunks = [
            c(1, 1, "short"),
            c(2, 2, "abc "),
            c(2, 2, "def "),
            c(2, 2, "ghi"),
            c(3, 3, "end"),
        ];
        assert_eq!(reassemble(&chunks), "short\nabc def ghi\nend\n");
        assert_eq!(reassemble(&[]), "");
    }
}

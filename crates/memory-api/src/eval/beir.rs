//! Loader for BEIR-layout data sets: `corpus.jsonl` (`{_id, title, text}`),
//! `queries.jsonl` (`{_id, text}`) and `qrels/<split>.tsv` (a header line, then
//! `query-id <TAB> corpus-id <TAB> score`). Malformed input is an error naming the
//! file and line. Blocking file reads only.
#![warn(missing_docs)]

use super::metrics::Qrels;
use std::collections::{BTreeMap, HashSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// Errors while loading a BEIR directory.
#[derive(Debug, thiserror::Error)]
pub enum BeirError {
    #[error("cannot read {path}: {source}")]
    /// A file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    /// A line could not be parsed.
    Malformed {
        /// The file.
        path: PathBuf,
        /// The line (1-based).
        line: usize,
        /// What is wrong.
        message: String,
    },
    #[error("{path}: {message}")]
    /// The data set is inconsistent (e.g. no queries, unknown ids).
    Invalid {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// One corpus document.
#[derive(Debug, Clone, PartialEq)]
pub struct Doc {
    /// Document id (`_id`).
    pub id: String,
    /// Title (may be empty).
    pub title: String,
    /// Body text.
    pub text: String,
}

/// One query.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// Query id (`_id`).
    pub id: String,
    /// The query text.
    pub text: String,
}

/// A loaded data set restricted to one split: only the queries judged in it.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Directory name, for reports.
    pub name: String,
    /// The split (`test`, `dev`, …).
    pub split: String,
    /// Every document of the corpus.
    pub corpus: Vec<Doc>,
    /// Queries of the split, in `queries.jsonl` order.
    pub queries: Vec<Query>,
    /// Relevance judgements of the split.
    pub qrels: Qrels,
}

/// The default split: `test` if `qrels/test.tsv` exists, else `train`.
pub fn default_split(dir: &Path) -> String {
    if dir.join("qrels").join("test.tsv").is_file() {
        "test".into()
    } else {
        "train".into()
    }
}

/// Load `dir` with the qrels of `split`.
pub fn load(dir: &Path, split: &str) -> Result<Dataset, BeirError> {
    if split.is_empty() || split.contains(['/', '\\']) || split.starts_with('.') {
        return Err(BeirError::Invalid {
            path: dir.to_path_buf(),
            message: format!("invalid split name `{split}`"),
        });
    }
    let corpus_path = dir.join("corpus.jsonl");
    let queries_path = dir.join("queries.jsonl");
    let qrels_path = dir.join("qrels").join(format!("{split}.tsv"));

    let corpus = read_jsonl(&corpus_path, |v, line| {
        Ok(Doc {
            id: id_field(v, &corpus_path, line)?,
            title: opt_str(v, "title", &corpus_path, line)?,
            text: opt_str(v, "text", &corpus_path, line)?,
        })
    })?;
    let mut ids = HashSet::new();
    for (i, d) in corpus.iter().enumerate() {
        if !ids.insert(d.id.as_str()) {
            return Err(BeirError::Invalid {
                path: corpus_path.clone(),
                message: format!("duplicate document id `{}` (document {})", d.id, i + 1),
            });
        }
    }

    let all_queries = read_jsonl(&queries_path, |v, line| {
        Ok(Query {
            id: id_field(v, &queries_path, line)?,
            text: opt_str(v, "text", &queries_path, line)?,
        })
    })?;
    let qrels = read_qrels(&qrels_path)?;

    let known: HashSet<&str> = all_queries.iter().map(|q| q.id.as_str()).collect();
    if let Some(q) = qrels.keys().find(|q| !known.contains(q.as_str())) {
        return Err(BeirError::Invalid {
            path: qrels_path,
            message: format!("query id `{q}` is not in {}", queries_path.display()),
        });
    }
    for (q, judged) in &qrels {
        if let Some(d) = judged.keys().find(|d| !ids.contains(d.as_str())) {
            return Err(BeirError::Invalid {
                path: qrels_path,
                message: format!(
                    "query `{q}` judges document `{d}`, which is not in {}",
                    corpus_path.display()
                ),
            });
        }
    }
    let queries = all_queries
        .into_iter()
        .filter(|q| qrels.contains_key(&q.id))
        .collect();
    let name = dir
        .canonicalize()
        .unwrap_or_else(|_| dir.to_path_buf())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string());
    Ok(Dataset {
        name,
        split: split.to_string(),
        corpus,
        queries,
        qrels,
    })
}

fn open(path: &Path) -> Result<std::io::BufReader<std::fs::File>, BeirError> {
    std::fs::File::open(path)
        .map(std::io::BufReader::new)
        .map_err(|source| BeirError::Io {
            path: path.to_path_buf(),
            source,
        })
}

fn read_jsonl<T>(
    path: &Path,
    mut parse: impl FnMut(&serde_json::Value, usize) -> Result<T, BeirError>,
) -> Result<Vec<T>, BeirError> {
    let mut out = Vec::new();
    for line in numbered_lines(path)? {
        let (line_no, line) = line?;
        let v: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| malformed(path, line_no, &format!("invalid JSON: {e}")))?;
        if !v.is_object() {
            return Err(malformed(path, line_no, "expected a JSON object"));
        }
        out.push(parse(&v, line_no)?);
    }
    Ok(out)
}

/// The lines of `path` that are not blank, with their numbers (from 1).
fn numbered_lines(
    path: &Path,
) -> Result<impl Iterator<Item = Result<(usize, String), BeirError>> + '_, BeirError> {
    Ok(open(path)?
        .lines()
        .enumerate()
        .filter_map(move |(i, line)| match line {
            Err(source) => Some(Err(BeirError::Io {
                path: path.to_path_buf(),
                source,
            })),
            Ok(l) if l.trim().is_empty() => None,
            Ok(l) => Some(Ok((i + 1, l))),
        }))
}

/// `_id` as a string (a JSON number is accepted and printed as written).
fn id_field(v: &serde_json::Value, path: &Path, line: usize) -> Result<String, BeirError> {
    let id = match v.get("_id") {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        Some(_) => return Err(malformed(path, line, "`_id` must be a string")),
        None => return Err(malformed(path, line, "missing `_id`")),
    };
    if id.trim().is_empty() {
        return Err(malformed(path, line, "empty `_id`"));
    }
    Ok(id)
}

/// An optional string field (missing or null -> empty).
fn opt_str(
    v: &serde_json::Value,
    key: &str,
    path: &Path,
    line: usize,
) -> Result<String, BeirError> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(String::new()),
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(malformed(path, line, &format!("`{key}` must be a string"))),
    }
}

fn malformed(path: &Path, line: usize, message: &str) -> BeirError {
    BeirError::Malformed {
        path: path.to_path_buf(),
        line,
        message: message.to_string(),
    }
}

/// Parse a qrels TSV: first line is a header, then `query-id corpus-id score`
/// separated by tabs (or, leniently, runs of spaces). Integer grades.
pub fn read_qrels(path: &Path) -> Result<Qrels, BeirError> {
    let mut qrels: Qrels = BTreeMap::new();
    let mut header_seen = false;
    for line in numbered_lines(path)? {
        let (line_no, line) = line?;
        if !header_seen {
            header_seen = true;
            continue;
        }
        let fields: Vec<&str> = if line.contains('\t') {
            line.split('\t').map(str::trim).collect()
        } else {
            line.split_whitespace().collect()
        };
        if fields.len() != 3 {
            return Err(malformed(
                path,
                line_no,
                &format!(
                    "expected 3 fields (query-id, corpus-id, score), found {}",
                    fields.len()
                ),
            ));
        }
        let grade: i64 = fields[2].parse().map_err(|_| {
            malformed(
                path,
                line_no,
                &format!("score `{}` is not an integer", fields[2]),
            )
        })?;
        if fields[0].is_empty() || fields[1].is_empty() {
            return Err(malformed(path, line_no, "empty query-id or corpus-id"));
        }
        qrels
            .entry(fields[0].to_string())
            .or_default()
            .insert(fields[1].to_string(), grade);
    }
    if !header_seen {
        return Err(BeirError::Invalid {
            path: path.to_path_buf(),
            message: "empty qrels file (expected a header line and judgements)".into(),
        });
    }
    Ok(qrels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, corpus: &str, queries: &str, qrels: &str) {
        std::fs::create_dir_all(dir.join("qrels")).unwrap();
        std::fs::write(dir.join("corpus.jsonl"), corpus).unwrap();
        std::fs::write(dir.join("queries.jsonl"), queries).unwrap();
        std::fs::write(dir.join("qrels/test.tsv"), qrels).unwrap();
    }

    #[test]
    fn loads_a_small_set() {
        let t = tempfile::tempdir().unwrap();
        write(
            t.path(),
            "{\"_id\":\"d1\",\"title\":\"T\",\"text\":\"x\"}\n\n{\"_id\":2,\"text\":\"y\"}\n",
            "{\"_id\":\"q1\",\"text\":\"a\"}\n{\"_id\":\"q2\",\"text\":\"b\"}\n",
            "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\t2\t0\n",
        );
        assert_eq!(default_split(t.path()), "test");
        let d = load(t.path(), "test").unwrap();
        assert_eq!(d.corpus.len(), 2);
        assert_eq!(d.corpus[1].id, "2");
        assert_eq!(d.corpus[1].title, "");
        // q2 is not judged in this split.
        assert_eq!(d.queries.len(), 1);
        assert_eq!(d.qrels["q1"]["d1"], 1);
        assert_eq!(d.qrels["q1"]["2"], 0);
    }

    /// The error loading the `test` split of a data set with these files.
    fn load_error(corpus: &str, queries: &str, qrels: &str) -> String {
        let t = tempfile::tempdir().unwrap();
        write(t.path(), corpus, queries, qrels);
        load(t.path(), "test").unwrap_err().to_string()
    }

    #[test]
    fn malformed_files_dangling_ids_and_duplicates_are_errors_naming_the_place() {
        const D1: &str = "{\"_id\":\"d1\"}\n";
        const Q1: &str = "{\"_id\":\"q1\",\"text\":\"a\"}\n";
        for (corpus, queries, qrels, error) in [
            // Bad JSON names the line.
            (
                "{\"_id\":\"d1\",\"text\":\"x\"}\n{\"_id\": \"d2\", \"text\": \n",
                Q1,
                "h\th\th\nq1\td1\t1\n",
                "corpus.jsonl:2:",
            ),
            (
                "{\"title\":\"no id\"}\n",
                Q1,
                "h\nq1\td1\t1\n",
                "corpus.jsonl:1: missing `_id`",
            ),
            (
                D1,
                Q1,
                "h\nq1\td1\t1\nq1\td1\n",
                "test.tsv:3: expected 3 fields",
            ),
            (D1, Q1, "h\nq1\td1\tone\n", "test.tsv:2: score `one`"),
            (D1, Q1, "h\nq9\td1\t1\n", "query id `q9`"),
            (D1, Q1, "h\nq1\td7\t1\n", "document `d7`"),
            (
                "{\"_id\":\"d1\"}\n{\"_id\":\"d1\"}\n",
                Q1,
                "h\nq1\td1\t1\n",
                "duplicate document id `d1`",
            ),
        ] {
            let e = load_error(corpus, queries, qrels);
            assert!(e.contains(error), "{error}: {e}");
        }
    }

    #[test]
    fn missing_file_is_an_io_error_naming_it() {
        let t = tempfile::tempdir().unwrap();
        let e = load(t.path(), "train").unwrap_err().to_string();
        assert!(e.contains("corpus.jsonl"), "{e}");
        assert!(load(t.path(), "../x").is_err());
    }
}

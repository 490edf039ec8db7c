//! Loader for MemoryBank's English evaluation data (`memory_bank_en.json`: per
//! user, `history` maps a day `YYYY-MM-DD` to its exchanges `{query, response}`;
//! `probing_questions_en.jsonl`: per user, the questions) with an evidence file
//! (JSON lines `{id, user, question, kind, evidence: [["2023-04-30#3.u", …], …]}`,
//! `fixtures/memorybank-en/evidence.jsonl` in the repository, its method in the
//! README beside it). Every annotated question must be one of the probing
//! questions of its user, and every probing question annotated. The questions are
//! asked the day after the user's last session, at noon UTC. Blocking reads only.
#![warn(missing_docs)]

use super::conversations::{ConvDataset, ConvQuestion, Conversation, Exchange, Session, TurnRef};
use chrono::NaiveDate;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The histories, in the data directory.
pub const HISTORIES: &str = "memory_bank_en.json";
/// The probing questions, in the data directory.
pub const QUESTIONS: &str = "probing_questions_en.jsonl";

/// Why the data could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum MemoryBankError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file is not what it should be.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong (with the line, when there is one).
        message: String,
    },
}

/// A user name as an id: trimmed, lower-cased, spaces as `-` (`John Zhang` → `john-zhang`).
pub fn user_id(name: &str) -> String {
    name.split_whitespace()
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join("-")
}

fn read(path: &Path) -> Result<String, MemoryBankError> {
    std::fs::read_to_string(path).map_err(|source| MemoryBankError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn invalid(path: &Path, message: impl Into<String>) -> MemoryBankError {
    MemoryBankError::Invalid {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Load the histories of `dir` and the annotated questions of `evidence`.
pub fn load(dir: &Path, evidence: &Path) -> Result<ConvDataset, MemoryBankError> {
    let hist_path = dir.join(HISTORIES);
    let v: Value = serde_json::from_str(&read(&hist_path)?)
        .map_err(|e| invalid(&hist_path, format!("not JSON: {e}")))?;
    let users = v
        .as_object()
        .ok_or_else(|| invalid(&hist_path, "not an object of users"))?;
    let mut conversations = Vec::new();
    for (name, entry) in users {
        let history = entry
            .get("history")
            .and_then(Value::as_object)
            .ok_or_else(|| invalid(&hist_path, format!("user `{name}` has no history")))?;
        let mut sessions = Vec::new();
        for (day, exchanges) in history {
            let date = NaiveDate::parse_from_str(day, "%Y-%m-%d")
                .map_err(|e| invalid(&hist_path, format!("{name}: day `{day}`: {e}")))?;
            let list = exchanges
                .as_array()
                .ok_or_else(|| invalid(&hist_path, format!("{name} {day}: not a list")))?;
            let mut out = Vec::new();
            for (i, ex) in list.iter().enumerate() {
                let field = |k: &str| {
                    ex.get(k)
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .ok_or_else(|| invalid(&hist_path, format!("{name} {day} #{i}: no `{k}`")))
                };
                out.push(Exchange {
                    user: field("query")?,
                    assistant: field("response")?,
                });
            }
            // A day without an exchange is no session (no transcript is written).
            if !out.is_empty() {
                sessions.push(Session {
                    date,
                    exchanges: out,
                });
            }
        }
        sessions.sort_by_key(|s| s.date);
        let Some(last) = sessions.last() else {
            continue;
        };
        let asked = last.date.succ_opt().unwrap_or(last.date);
        conversations.push(Conversation {
            id: user_id(name),
            asked_at: super::conversations::session_start(asked),
            sessions,
        });
    }

    // The probing questions, to check the annotations against.
    let q_path = dir.join(QUESTIONS);
    let mut probing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (i, line) in read(&q_path)?.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .map_err(|e| invalid(&q_path, format!("line {}: {e}", i + 1)))?;
        for (name, qs) in v.as_object().into_iter().flatten() {
            let qs = qs
                .as_array()
                .ok_or_else(|| invalid(&q_path, format!("line {}: not a list", i + 1)))?;
            probing
                .entry(user_id(name))
                .or_default()
                .extend(qs.iter().filter_map(Value::as_str).map(str::to_string));
        }
    }

    let mut questions = Vec::new();
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    for (i, line) in read(evidence)?.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |m: String| invalid(evidence, format!("line {}: {m}", i + 1));
        let v: Value = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let s = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| bad(format!("no `{k}`")))
        };
        let (id, user, text, kind) = (s("id")?, user_id(&s("user")?), s("question")?, s("kind")?);
        let mut pieces = Vec::new();
        for piece in v
            .get("evidence")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("no `evidence` list".into()))?
        {
            let turns = piece
                .as_array()
                .ok_or_else(|| bad("an evidence piece is not a list".into()))?
                .iter()
                .map(|t| {
                    t.as_str()
                        .and_then(TurnRef::parse)
                        .ok_or_else(|| bad(format!("bad turn {t}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            pieces.push(turns);
        }
        if !probing.get(&user).is_some_and(|qs| qs.contains(&text)) {
            return Err(bad(format!(
                "`{text}` is not a probing question of {user} in {}",
                q_path.display()
            )));
        }
        if seen.insert((user.clone(), text.clone()), i).is_some() {
            return Err(bad(format!("`{text}` is annotated twice")));
        }
        questions.push(ConvQuestion {
            id,
            conversation: user,
            text,
            kind,
            evidence: pieces,
        });
    }
    for (user, qs) in &probing {
        if let Some(q) = qs
            .iter()
            .find(|q| !seen.contains_key(&(user.clone(), (*q).clone())))
        {
            return Err(invalid(
                evidence,
                format!("the probing question `{q}` of {user} is not annotated"),
            ));
        }
    }
    let data = ConvDataset {
        name: dir
            .file_name()
            .map_or_else(|| "memorybank".into(), |n| n.to_string_lossy().into_owned()),
        conversations,
        questions,
    };
    data.check().map_err(|m| invalid(evidence, m))?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ids() {
        assert_eq!(user_id(" Jason "), "jason");
        assert_eq!(user_id("John Zhang"), "john-zhang");
    }

    #[test]
    fn loads_and_checks_annotations() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(HISTORIES),
            r#"{" Ann ": {"name": "Ann", "history": {
                "2023-04-28": [{"query": "I saw a squirrel", "response": "Cute!"}],
                "2023-04-27": [{"query": "Hi", "response": "Hello"}, {"query": "I like tea", "response": "Nice"}],
                "2023-04-29": []}}}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join(QUESTIONS),
            "{\"Ann\": [\"What do I drink?\", \"What did I see?\"]}\n",
        )
        .unwrap();
        let ev = dir.path().join("evidence.jsonl");
        let good = "{\"id\":\"ann-1\",\"user\":\"Ann\",\"question\":\"What do I drink?\",\"kind\":\"fact\",\"evidence\":[[\"2023-04-27#1.u\"]]}\n\
                    {\"id\":\"ann-2\",\"user\":\"Ann\",\"question\":\"What did I see?\",\"kind\":\"fact\",\"evidence\":[[\"2023-04-28#0.u\",\"2023-04-28#0.a\"]]}\n";
        std::fs::write(&ev, good).unwrap();
        let d = load(dir.path(), &ev).unwrap();
        assert_eq!(d.conversations.len(), 1);
        let c = &d.conversations[0];
        assert_eq!(c.id, "ann");
        assert_eq!(c.sessions.len(), 2, "the empty day is no session");
        assert_eq!(c.sessions[0].date.to_string(), "2023-04-27");
        assert_eq!(c.asked_at.to_rfc3339(), "2023-04-29T12:00:00+00:00");
        assert_eq!(d.questions[1].evidence[0].len(), 2);
        assert_eq!(d.turns(), 6);

        // A turn that does not exist, a question not asked, one left out.
        for (text, want) in [
            (good.replace("#1.u", "#2.u"), "not a turn"),
            (
                good.replace("What do I drink?", "What do I eat?"),
                "not a probing question",
            ),
            (good.lines().next().unwrap().to_string(), "not annotated"),
        ] {
            std::fs::write(&ev, text).unwrap();
            let e = load(dir.path(), &ev).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }
}

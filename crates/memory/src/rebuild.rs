//! Why an index is rebuilt from scratch: a typed reason, shown and serialised as
//! the `rebuilt` string of `claw memory index --json` and of the watcher's
//! `synced` events (e.g. `"new index"`, `"embedding model changed (a -> b)"`).
#![warn(missing_docs)]

/// Why the whole index was reset and rebuilt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebuildReason {
    /// Asked for (`--force`).
    Forced,
    /// The database had never been indexed.
    NewIndex,
    /// The embedding model differs from the index's (`""` = keyword-only).
    ModelChanged {
        /// The index's model.
        from: String,
        /// The model now configured.
        to: String,
    },
    /// The chunker version differs from the index's.
    ChunkerChanged {
        /// The index's chunker version (`None`: not recorded).
        from: Option<String>,
        /// The current chunker version.
        to: String,
    },
    /// The vector dimension differs from the index's.
    DimsChanged {
        /// The index's dimension.
        from: usize,
        /// The model's dimension.
        to: usize,
    },
    /// The index should have vector tables and has none.
    VectorTablesMissing,
}

/// A model id as shown in a reason (`keyword-only` for none).
fn show_model(m: &str) -> &str {
    if m.is_empty() { "keyword-only" } else { m }
}

impl std::fmt::Display for RebuildReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RebuildReason::Forced => f.write_str("--force"),
            RebuildReason::NewIndex => f.write_str("new index"),
            RebuildReason::ModelChanged { from, to } => write!(
                f,
                "embedding model changed ({} -> {})",
                show_model(from),
                show_model(to)
            ),
            RebuildReason::ChunkerChanged { from, to } => write!(
                f,
                "chunker changed ({} -> {to})",
                from.as_deref().unwrap_or("none")
            ),
            RebuildReason::DimsChanged { from, to } => {
                write!(f, "dimension changed ({from} -> {to})")
            }
            RebuildReason::VectorTablesMissing => f.write_str("vector tables missing"),
        }
    }
}

impl serde::Serialize for RebuildReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_serialise_to_the_json_strings() {
        let cases = [
            (RebuildReason::Forced, "--force"),
            (RebuildReason::NewIndex, "new index"),
            (
                RebuildReason::ModelChanged {
                    from: String::new(),
                    to: "m/x".into(),
                },
                "embedding model changed (keyword-only -> m/x)",
            ),
            (
                RebuildReason::ChunkerChanged {
                    from: None,
                    to: "3".into(),
                },
                "chunker changed (none -> 3)",
            ),
            (
                RebuildReason::DimsChanged { from: 0, to: 384 },
                "dimension changed (0 -> 384)",
            ),
            (RebuildReason::VectorTablesMissing, "vector tables missing"),
        ];
        for (r, s) in cases {
            assert_eq!(serde_json::to_value(&r).unwrap(), serde_json::json!(s));
        }
    }
}

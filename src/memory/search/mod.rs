//! Hybrid retrieval: keyword (FTS5) + vector (vec0) candidates, blended, decayed,
//! MMR-reranked. `query` and `score` are pure; `engine` runs the SQL.

pub mod engine;
pub mod query;
pub mod score;

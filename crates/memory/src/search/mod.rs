//! Hybrid retrieval: keyword (FTS5) + vector (vec0) candidates, blended, decayed,
//! MMR-reranked. `query`, `score` and `snippet` are pure; `engine` runs the SQL.

pub mod engine;
pub mod query;
pub mod score;
pub mod snippet;

pub use engine::{
    GetRequest, GetResponse, Mode, SearchError, SearchHit, SearchRequest, SearchResponse,
    SourceFilter, get_lines, search,
};

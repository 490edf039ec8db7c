//! Hybrid retrieval: keyword (FTS5) + vector (vec0) candidates, blended, decayed,
//! MMR-reranked. `query`, `score` and `snippet` are pure; `keyword`, `vector` and
//! `rows` run the SQL behind the [`storage::SearchStorage`] boundary; `engine`
//! assembles a search, `get` serves lines of indexed files; `types` is the
//! contract every caller (CLI, agent tools, eval) shares.
#![warn(missing_docs)]

pub mod echo;
pub mod engine;
pub mod expand;
pub mod get;
pub mod keyword;
pub mod query;
pub mod rows;
pub mod score;
pub mod snippet;
pub mod storage;
pub mod types;
pub mod vector;
pub mod when;

pub use engine::{get_lines, search};
pub use types::{
    Fallback, GetRequest, GetResponse, Mode, SearchError, SearchHit, SearchRequest, SearchResponse,
    SourceFilter, citation, parse_citation,
};

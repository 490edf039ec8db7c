//! The memory engine's own configuration: where the workspace is, which embedding
//! backend to use, the retrieval and indexing parameters, and the clock. The
//! application resolves it (flags, environment, config file) and hands it over as a
//! value; nothing in this crate reads the environment, `$HOME` or the terminal.

use crate::clock::Clock;
use std::path::PathBuf;

/// Environment variable naming the local embedding model directory (for messages).
pub const ENV_EMBED_MODEL_DIR: &str = "CLAW_EMBED_MODEL_DIR";
/// Environment variable naming the ONNX Runtime library (for messages).
pub const ENV_ORT_DYLIB_PATH: &str = "ORT_DYLIB_PATH";

/// Which embedding backend to use.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbedProvider {
    /// fastembed + ONNX Runtime with a model from a local directory.
    Local {
        model_dir: Option<PathBuf>,
        ort_dylib_path: Option<PathBuf>,
    },
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    OpenAi {
        base_url: String,
        model: String,
        api_key: Option<String>,
        dims: Option<usize>,
    },
    /// Keyword-only indexing.
    None,
}

/// Retrieval and indexing parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct MemorySettings {
    pub vector_weight: f64,
    pub text_weight: f64,
    pub half_life_days: f64,
    pub mmr_lambda: f64,
    pub min_score: f64,
    pub candidate_multiplier: usize,
    pub cache_max_entries: usize,
    pub max_file_bytes: u64,
    pub chunk_tokens: usize,
    pub chunk_overlap_tokens: usize,
    pub embed_batch_size: usize,
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            vector_weight: 0.7,
            text_weight: 0.3,
            half_life_days: 30.0,
            mmr_lambda: 0.7,
            min_score: 0.35,
            candidate_multiplier: 4,
            cache_max_entries: 50_000,
            max_file_bytes: 16 * 1024 * 1024,
            chunk_tokens: 200,
            chunk_overlap_tokens: 32,
            embed_batch_size: 1,
        }
    }
}

/// Everything the engine needs: one value, built once by the application.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryConfig {
    /// The workspace: `MEMORY.md`, `memory/`, `sessions/` and the state dir `.claw/`.
    pub workspace: PathBuf,
    /// The embedding backend.
    pub embed: EmbedProvider,
    /// Retrieval and indexing parameters.
    pub memory: MemorySettings,
    /// "Now" for decay and timestamps.
    pub clock: Clock,
}

impl MemoryConfig {
    /// Defaults everywhere for `workspace` (tests, eval).
    pub fn for_workspace(workspace: impl Into<PathBuf>, embed: EmbedProvider) -> MemoryConfig {
        MemoryConfig {
            workspace: workspace.into(),
            embed,
            memory: MemorySettings::default(),
            clock: Clock::System,
        }
    }

    /// The state directory (database, locks) inside the workspace.
    pub fn state_dir(&self) -> PathBuf {
        self.workspace.join(".claw")
    }

    /// Path of the memory database.
    pub fn db_path(&self) -> PathBuf {
        self.state_dir().join("memory.sqlite")
    }

    /// Directory of session transcripts.
    pub fn sessions_dir(&self) -> PathBuf {
        self.workspace.join("sessions")
    }
}

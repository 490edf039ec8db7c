//! The memory engine's own configuration: where the workspace is, which embedding
//! backend to use, the retrieval and indexing parameters, and the clock. The
//! application resolves it (flags, environment, config file) and hands it over as a
//! value; nothing in this crate reads the environment, `$HOME` or the terminal.

use crate::clock::Clock;
use crate::search::score::{ADAPTIVE_GAIN, Fusion};
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
        /// How ONNX Runtime runs the model: threads and memory.
        runtime: LocalRuntime,
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

/// `embedding.precision`: which graph of the local model runs. `int8` is
/// `model_int8.onnx` (dynamic quantization of `model.onnx`, made by the model
/// installer), `fp32` is `model.onnx`. The precision is part of the model
/// identity, so changing it re-embeds the index (BENCHMARKS.md, "Issue 30").
///
/// The default is int8 (per-channel weight scales), by issue 30's rule: its
/// nDCG@10 is within 0.005 of fp32's on SciFact train (hybrid and vector) and
/// XQuAD-zh, and it embeds the garden in about half the time and a cold search
/// in half the time. It is one query behind fp32 on the small paraphrase
/// fixture (recall@3 29/37 against 30/37), whose test holds it to within one
/// query of fp32. It has its own measured background
/// (`score::MINILM_L6_V2_INT8_BACKGROUND`).
/// Without `model_int8.onnx` (a model installed before int8 existed), int8 runs
/// fp32 and keeps the index, and `status` and `doctor` say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// `model.onnx`: the full-precision graph.
    Fp32,
    /// `model_int8.onnx`: int8 weights (per output channel), dynamically
    /// quantized activations.
    #[default]
    Int8,
}

impl Precision {
    /// The graph file in the model directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Precision::Fp32 => "model.onnx",
            Precision::Int8 => "model_int8.onnx",
        }
    }

    /// `fp32` / `int8`, as the config file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Int8 => "int8",
        }
    }

    /// Parse the config file's spelling.
    pub fn parse(s: &str) -> Option<Precision> {
        match s {
            "fp32" => Some(Precision::Fp32),
            "int8" => Some(Precision::Int8),
            _ => None,
        }
    }
}

/// How the local backend's model runs: which graph ([`Precision`]), how many
/// ONNX Runtime sessions run side by side (one intra-op thread each), the CPU
/// memory arena and thread spinning.
/// [`LocalRuntime::default`] is the measured default (BENCHMARKS.md, "The warm
/// model"); the binary overrides `threads` from `embedding.threads` /
/// `CLAW_EMBED_THREADS` and `precision` from `embedding.precision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LocalRuntime {
    /// Threads the model runs on: as many sessions, one intra-op thread each
    /// (a call of several batches runs them side by side; the sessions after the
    /// first load on the first such call). `None` =
    /// [`LocalRuntime::DEFAULT_MAX_THREADS`] capped by the CPUs this process may use.
    pub threads: Option<usize>,
    /// ONNX Runtime's CPU memory arena. It keeps every block it ever grew to
    /// (1 GiB after long chunks), so it is off by default.
    pub cpu_arena: bool,
    /// Whether idle intra-op threads busy-wait for work (ONNX Runtime's default).
    /// Spinning burns the CPU other processes need and collapses throughput when
    /// the cores are busy, so it is off by default.
    pub spinning: bool,
    /// The graph that runs (`model.onnx` or `model_int8.onnx`).
    pub precision: Precision,
}

impl LocalRuntime {
    /// Most intra-op threads used when `threads` is not set.
    pub const DEFAULT_MAX_THREADS: usize = 2;

    /// ONNX Runtime's own defaults (every core, arena on, spinning on): the
    /// behaviour before `embedding.threads` existed, kept for benchmarks.
    pub fn ort_defaults() -> LocalRuntime {
        LocalRuntime {
            threads: Some(available_cpus()),
            cpu_arena: true,
            spinning: true,
            precision: Precision::default(),
        }
    }

    /// The intra-op thread count this runtime asks for.
    pub fn effective_threads(&self) -> usize {
        self.threads
            .unwrap_or_else(|| available_cpus().min(Self::DEFAULT_MAX_THREADS))
            .max(1)
    }
}

/// CPUs this process may run on (affinity and cgroup aware), at least 1.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
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
    /// How the keyword and vector stages are fused (`memory.fusion`).
    pub fusion: Fusion,
    /// Adaptive fusion's gain (`memory.fusion_gain`; see `score::ADAPTIVE_GAIN`).
    pub fusion_gain: f64,
    /// How much term coverage re-weights keyword hits (`memory.coverage`; see
    /// `score::coverage_exponent`; 0 = off).
    pub coverage: f64,
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
            fusion: Fusion::default(),
            fusion_gain: ADAPTIVE_GAIN,
            coverage: crate::search::score::COVERAGE_STRENGTH,
        }
    }
}

/// Everything the engine needs: one value, built once by the application.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryConfig {
    /// The workspace: `MEMORY.md`, `memory/`, `sessions/`.
    pub workspace: PathBuf,
    /// The state directory: database, source registry, locks, caches, the
    /// gateway's discovery file and token. The application places it outside the
    /// workspace ([`crate::state`]): tools may write anything in the workspace.
    pub state_dir: PathBuf,
    /// The embedding backend.
    pub embed: EmbedProvider,
    /// Retrieval and indexing parameters.
    pub memory: MemorySettings,
    /// "Now" for decay and timestamps.
    pub clock: Clock,
    /// The user's time zone (`agent.timezone`, else the machine's): the days of
    /// a query's date words and of a transcript chunk's context.
    pub zone: DayZone,
    /// Where the index lives (`memory.backend`): the SQLite file in the state
    /// directory, or a shared PostgreSQL database.
    pub backend: Backend,
}

/// The time zone whose days the user lives in, with the offset in force at each
/// instant (daylight saving included): a turn said in July and one said in
/// January are dated with their own offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DayZone {
    /// The machine's zone (`TZ`, else `/etc/localtime`).
    #[default]
    Machine,
    /// An IANA zone (`Europe/Berlin`).
    Named(chrono_tz::Tz),
    /// A fixed offset (`+05:30`, UTC).
    Fixed(chrono::FixedOffset),
}

impl DayZone {
    /// Seconds east of UTC in force at unix time `t`.
    pub fn offset_at(&self, t: i64) -> i32 {
        use chrono::{Offset, TimeZone};
        let Some(at) = chrono::DateTime::from_timestamp(t, 0) else {
            return 0;
        };
        match self {
            DayZone::Machine => chrono::Local
                .offset_from_utc_datetime(&at.naive_utc())
                .fix()
                .local_minus_utc(),
            DayZone::Named(tz) => tz
                .offset_from_utc_datetime(&at.naive_utc())
                .fix()
                .local_minus_utc(),
            DayZone::Fixed(off) => off.local_minus_utc(),
        }
    }

    /// What the index records of the zone its transcript chunks were dated in
    /// (their contexts name the day in it, `transcript::turn_context`): an IANA
    /// zone by name, a fixed offset or the machine's zone by the offsets in
    /// force mid-January and mid-July (so a daylight-saving change is not a
    /// change of zone, and a machine moved to another zone is).
    pub fn key(&self) -> String {
        // 2026-01-15 and 2026-07-15, 12:00 UTC.
        const WINTER: i64 = 1_768_478_400;
        const SUMMER: i64 = 1_784_116_800;
        let fmt = |off: i32| {
            let sign = if off < 0 { '-' } else { '+' };
            let a = off.unsigned_abs();
            format!("{sign}{:02}:{:02}", a / 3600, a % 3600 / 60)
        };
        match self {
            DayZone::Named(tz) => tz.name().to_string(),
            DayZone::Fixed(off) => fmt(off.local_minus_utc()),
            DayZone::Machine => format!(
                "machine {}/{}",
                fmt(self.offset_at(WINTER)),
                fmt(self.offset_at(SUMMER))
            ),
        }
    }

    /// The local date at unix time `t`.
    pub fn date_at(&self, t: i64) -> chrono::NaiveDate {
        chrono::DateTime::from_timestamp(t + i64::from(self.offset_at(t)), 0)
            .unwrap_or_default()
            .date_naive()
    }

    /// Unix time of the first instant of local day `d` (midnight, or the first
    /// time after it where daylight saving skips midnight).
    pub fn day_start(&self, d: chrono::NaiveDate) -> i64 {
        let naive = d
            .and_hms_opt(0, 0, 0)
            .unwrap_or_default()
            .and_utc()
            .timestamp();
        // The offset in force a day either side brackets midnight's; the right
        // one maps back onto day `d`.
        let guess = |off: i32| naive - i64::from(off);
        let mut best: Option<i64> = None;
        for probe in [naive - 86_400, naive, naive + 86_400] {
            let t = guess(self.offset_at(probe));
            if self.date_at(t) == d && best.is_none_or(|b| t < b) {
                best = Some(t);
            }
        }
        best.unwrap_or_else(|| guess(self.offset_at(naive)))
    }
}

/// `memory.backend`: the storage under the memory service. Everything above the
/// memory crates sees one service whichever this is (`claw-memory-api`).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Backend {
    /// `<state dir>/memory.sqlite` (the default).
    #[default]
    Sqlite,
    /// A PostgreSQL + pgvector database shared by several workspaces.
    Postgres(PgSettings),
}

/// The resolved `memory.backend: postgres` (the URL read from its variable).
#[derive(Clone, PartialEq)]
pub struct PgSettings {
    /// Connection URL (may carry a password: never printed, see `Debug`).
    pub url: String,
    /// Namespace written to.
    pub namespace: String,
    /// Extra namespaces searched.
    pub search_namespaces: Vec<String>,
    /// PostgreSQL schema.
    pub schema: String,
}

impl PgSettings {
    /// `postgres:<schema>/<namespace>`: where the rows live, as status and
    /// `--json` outputs name it (never the URL, which may hold a password).
    pub fn location(&self) -> String {
        format!("postgres:{}/{}", self.schema, self.namespace)
    }
}

impl std::fmt::Debug for PgSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSettings")
            .field("url", &"<redacted>")
            .field("namespace", &self.namespace)
            .field("search_namespaces", &self.search_namespaces)
            .field("schema", &self.schema)
            .finish()
    }
}

impl MemoryConfig {
    /// Defaults everywhere for `workspace` (tests, eval, benches), with the state
    /// directory at `<workspace>/.claw` ([`crate::state::LEGACY_DIR`]): only for
    /// workspaces no assistant tool writes. The application sets `state_dir`
    /// outside the workspace.
    pub fn for_workspace(workspace: impl Into<PathBuf>, embed: EmbedProvider) -> MemoryConfig {
        let workspace = workspace.into();
        MemoryConfig {
            state_dir: workspace.join(crate::state::LEGACY_DIR),
            workspace,
            embed,
            memory: MemorySettings::default(),
            clock: Clock::System,
            zone: DayZone::Machine,
            backend: Backend::Sqlite,
        }
    }

    /// The state directory (database, locks, caches).
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir.clone()
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

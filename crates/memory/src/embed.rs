//! Embedding backends behind one [`Embedder`] trait: the local ONNX model run
//! by ONNX Runtime (default; `embed::onnx`), an OpenAI-compatible `/v1/embeddings` endpoint, or none
//! (keyword-only). All calls are blocking; run them off the async runtime.

#![warn(missing_docs)]

mod onnx;

use crate::chunk::{ApproxCounter, TokenCounter};
use crate::config::{
    ENV_EMBED_MODEL_DIR, ENV_ORT_DYLIB_PATH, EmbedProvider, LocalRuntime, Precision,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Model id recorded in the index when there is no embedder.
pub const KEYWORD_ONLY_MODEL: &str = "";

/// Errors from embedding backends. Messages say what is wrong, never which
/// command fixes it: the CLI attaches hints (see [`EmbedError::is_missing_model`]).
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The local provider has no model directory configured.
    #[error("no local embedding model configured")]
    NoModelDir,
    /// The model directory lacks a required file.
    #[error("embedding model directory {0} is missing {1}")]
    MissingFile(PathBuf, &'static str),
    /// No ONNX Runtime library was configured or found.
    #[error("ONNX Runtime library not found (set {ENV_ORT_DYLIB_PATH})")]
    NoRuntime,
    /// The ONNX Runtime library did not load (the failure is cached for the
    /// process, hence shared).
    #[error("cannot load ONNX Runtime from {}: {source}", path.display())]
    Runtime {
        /// The library path.
        path: PathBuf,
        /// Why it did not load.
        source: Arc<RuntimeError>,
    },
    /// The model files did not load.
    #[error("cannot load the embedding model from {}: {source}", path.display())]
    Model {
        /// The model directory or file.
        path: PathBuf,
        /// The loader's error.
        source: BoxError,
    },
    /// Embedding a batch failed.
    #[error("embedding failed: {0}")]
    Inference(#[source] BoxError),
    /// The embeddings endpoint failed or answered something unusable.
    #[error("embedding endpoint {url}: {cause}")]
    Http {
        /// The endpoint.
        url: String,
        /// What went wrong, typed (status, transport error, bad body). Shown
        /// in the message, so not a `source()` too (chains print it once).
        cause: HttpCause,
    },
}

/// Why a request to an embeddings endpoint failed (rendered into
/// [`EmbedError::Http`]'s message; the underlying errors are kept typed here).
#[derive(Debug, thiserror::Error)]
pub enum HttpCause {
    /// No usable response: connection, TLS, timeout.
    #[error("{0}")]
    Transport(Box<ureq::Error>),
    /// The endpoint answered with an error status.
    #[error("HTTP {}: {body}", show_status(*status))]
    Status {
        /// The HTTP status code.
        status: u16,
        /// The start of the response body (at most 300 characters).
        body: String,
    },
    /// The body was not the embeddings JSON.
    #[error("bad response: {0}")]
    BadResponse(Box<ureq::Error>),
    /// A different number of vectors than inputs came back.
    #[error("{got} embeddings for {sent} inputs")]
    CountMismatch {
        /// Vectors received.
        got: usize,
        /// Texts sent.
        sent: usize,
    },
}

impl HttpCause {
    /// The HTTP status, when the endpoint answered with an error status.
    pub fn status(&self) -> Option<u16> {
        match self {
            HttpCause::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// `404 Not Found`, as the HTTP library prints a status.
fn show_status(status: u16) -> String {
    ureq::http::StatusCode::from_u16(status)
        .map(|s| s.to_string())
        .unwrap_or_else(|_| status.to_string())
}

/// A boxed error from a backend library (tokenizers, ort).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why ONNX Runtime did not load.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The configured library path is not a file.
    #[error("file not found")]
    NotFound,
    /// The library could not be loaded.
    #[error(transparent)]
    Load(#[from] ort::LoadDynamicError),
    /// ONNX Runtime refused to initialise.
    #[error(transparent)]
    Ort(#[from] ort::Error),
}

impl EmbedError {
    /// Whether installing the local model (and its runtime) would fix this.
    pub fn is_missing_model(&self) -> bool {
        matches!(
            self,
            EmbedError::NoModelDir
                | EmbedError::MissingFile(..)
                | EmbedError::NoRuntime
                | EmbedError::Runtime { .. }
        )
    }
}

/// A text embedding model.
pub trait Embedder: Send + Sync {
    /// Backend name (`local`, `openai`), part of the embedding cache key.
    fn provider(&self) -> &str;
    /// Model identity recorded in the index (a change triggers a rebuild).
    fn model_id(&self) -> &str;
    /// Vector dimension.
    fn dims(&self) -> usize;
    /// Embed passages; returns one L2-normalised vector per text.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Embed a search query.
    fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
        let mut v = self.embed(&[query])?;
        v.pop()
            .ok_or_else(|| EmbedError::Inference("empty result".into()))
    }
    /// Token counter matching the model's tokenizer (for the chunk budget).
    fn token_counter(&self) -> &dyn TokenCounter;
    /// Most tokens the model accepts per input, including special tokens.
    fn max_input_tokens(&self) -> usize;
}

/// Scale a vector to unit length (zero vectors are left alone).
pub fn normalize(v: &mut [f32]) {
    let n: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

/// The outcome of loading the configured backend: an embedder, or the reason there is none.
pub enum Loaded {
    /// A backend loaded and ready.
    Ready(Box<dyn Embedder>),
    /// Keyword-only because the user chose `none`.
    Disabled,
    /// Keyword-only because the configured backend could not load.
    Unavailable(EmbedError),
}

impl Loaded {
    /// The embedder, when one loaded.
    pub fn embedder(&self) -> Option<&dyn Embedder> {
        match self {
            Loaded::Ready(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

/// Load the configured backend; never fails — a broken backend becomes `Unavailable`.
pub fn load(provider: &EmbedProvider, batch_size: usize) -> Loaded {
    match provider {
        EmbedProvider::None => Loaded::Disabled,
        EmbedProvider::Local {
            model_dir,
            ort_dylib_path,
            runtime,
        } => match LocalEmbedder::load_with(
            model_dir.as_deref(),
            ort_dylib_path.as_deref(),
            batch_size,
            runtime,
        ) {
            Ok(e) => Loaded::Ready(Box::new(e)),
            Err(e) => Loaded::Unavailable(e),
        },
        EmbedProvider::OpenAi {
            base_url,
            model,
            api_key,
            dims,
        } => match OpenAiEmbedder::new(base_url, model, api_key.clone(), *dims) {
            Ok(e) => Loaded::Ready(Box::new(e)),
            Err(e) => Loaded::Unavailable(e),
        },
    }
}

/// Counts word pieces with the model's own `tokenizer.json`.
pub struct HfTokenCounter {
    tokenizer: tokenizers::Tokenizer,
}

impl HfTokenCounter {
    /// Load the tokenizer from a `tokenizer.json` file.
    pub fn from_file(path: &Path) -> Result<HfTokenCounter, EmbedError> {
        let tokenizer =
            tokenizers::Tokenizer::from_file(path).map_err(|source| EmbedError::Model {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(HfTokenCounter::from_tokenizer(tokenizer))
    }

    /// Count with `tokenizer`, its padding and truncation turned off.
    pub fn from_tokenizer(mut tokenizer: tokenizers::Tokenizer) -> HfTokenCounter {
        tokenizer.with_truncation(None).ok();
        tokenizer.with_padding(None);
        HfTokenCounter { tokenizer }
    }
}

/// The first 6 bytes of the SHA-256 of `file`, in hex, read with positional
/// reads (the file's cursor is left to a concurrent reader).
fn file_digest(file: &std::fs::File) -> std::io::Result<String> {
    use sha2::Digest;
    use std::os::unix::fs::FileExt;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    loop {
        let n = match file.read_at(&mut buf, at) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hex::encode(&hasher.finalize()[..6]))
}

/// Whether `path` still names the open `file` (same device, inode, size and
/// modification time): nothing renamed over it or rewrote it since it was opened.
fn same_file(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => {
            (a.dev(), a.ino(), a.len(), a.mtime(), a.mtime_nsec())
                == (b.dev(), b.ino(), b.len(), b.mtime(), b.mtime_nsec())
        }
        _ => false,
    }
}

impl TokenCounter for HfTokenCounter {
    fn count(&self, text: &str) -> usize {
        match self.tokenizer.encode(text, false) {
            Ok(enc) => enc.len(),
            Err(_) => ApproxCounter.count(text),
        }
    }
}

/// The default backend: a user-provided ONNX sentence-embedding model run by ONNX
/// Runtime (mean pooling, normalised; `embed::onnx`), with ONNX Runtime loaded from a
/// configured path.
pub struct LocalEmbedder {
    /// The first session: every call runs on it; a call of several batches also
    /// on [`LocalEmbedder::more`]'s.
    model: Mutex<onnx::OnnxSession>,
    /// The other sessions (`threads − 1` of them, one thread each), loaded on
    /// the first call with work for them: a process that only embeds queries (a
    /// cold search) never loads them.
    more: std::sync::OnceLock<Vec<Mutex<onnx::OnnxSession>>>,
    /// What loading another session takes.
    spec: SessionSpec,
    /// The model's tokenizer (padding, truncation), shared by the sessions.
    tokenizer: tokenizers::Tokenizer,
    counter: HfTokenCounter,
    model_id: String,
    dims: usize,
    max_len: usize,
    batch_size: usize,
    runtime: LocalRuntime,
    /// The graph that runs: the configured precision, or fp32 when the int8
    /// file is missing ([`LocalEmbedder::precision_fallback`]).
    precision: Precision,
}

/// ONNX Runtime is loaded once per process; the environment must outlive every session.
static ORT_ENV: Mutex<Option<Result<ort::environment::Environment, Arc<RuntimeError>>>> =
    Mutex::new(None);

/// The process's ONNX Runtime environment, loading the library at `path` the
/// first time (every later call returns the same environment).
pub fn ort_environment(path: &Path) -> Result<ort::environment::Environment, EmbedError> {
    init_ort(path)
}

fn init_ort(path: &Path) -> Result<ort::environment::Environment, EmbedError> {
    let mut guard = ORT_ENV.lock().unwrap_or_else(|p| p.into_inner());
    if guard.is_none() {
        let result = (|| -> Result<ort::environment::Environment, RuntimeError> {
            if !path.is_file() {
                return Err(RuntimeError::NotFound);
            }
            let builder = ort::init_from(path)?;
            Ok(builder.with_name("claw").build()?)
        })();
        *guard = Some(result.map_err(Arc::new));
    }
    match guard.as_ref() {
        Some(Ok(env)) => Ok(env.clone()),
        Some(Err(e)) => Err(EmbedError::Runtime {
            path: path.to_path_buf(),
            source: e.clone(),
        }),
        None => Err(EmbedError::NoRuntime),
    }
}

/// The files a model directory's tokenizer is built from (as named in a
/// sentence-transformers export).
#[derive(Debug, Clone, Default)]
pub struct TokenizerFiles {
    /// `tokenizer.json`.
    pub tokenizer_file: Vec<u8>,
    /// `config.json`.
    pub config_file: Vec<u8>,
    /// `special_tokens_map.json`.
    pub special_tokens_map_file: Vec<u8>,
    /// `tokenizer_config.json`.
    pub tokenizer_config_file: Vec<u8>,
}

/// The model's tokenizer configured as fastembed 7.7's `load_tokenizer` does for a
/// user-defined model: `tokenizer.json` with padding to the batch's longest text
/// (the pad token of `tokenizer_config.json`, its id from `config.json` or the
/// vocabulary), truncation at `max_length` (capped by `model_max_length`), and
/// the special tokens of `special_tokens_map.json`. A test checks it against
/// fastembed's own on the real model (`embed_runtime`).
pub fn model_tokenizer(
    files: &TokenizerFiles,
    max_length: usize,
) -> Result<tokenizers::Tokenizer, BoxError> {
    use tokenizers::{AddedToken, PaddingParams, PaddingStrategy, TruncationParams};
    let json = |bytes: &[u8], name: &str| -> Result<serde_json::Value, BoxError> {
        serde_json::from_slice(bytes).map_err(|e| format!("{name}: {e}").into())
    };
    let config = json(&files.config_file, "config.json")?;
    let special = json(&files.special_tokens_map_file, "special_tokens_map.json")?;
    let tok_config = json(&files.tokenizer_config_file, "tokenizer_config.json")?;
    let mut tokenizer = tokenizers::Tokenizer::from_bytes(&files.tokenizer_file)
        .map_err(|e| format!("tokenizer.json: {e}"))?;
    let model_max = tok_config["model_max_length"]
        .as_f64()
        .ok_or("tokenizer_config.json has no numeric `model_max_length`")?;
    let max_length = max_length.min(model_max as f32 as usize);
    let pad = &tok_config["pad_token"];
    let pad_token: String = pad
        .as_str()
        .or_else(|| pad["content"].as_str())
        .ok_or("tokenizer_config.json has no string `pad_token`")?
        .into();
    let pad_id = config["pad_token_id"]
        .as_u64()
        .map(|id| id as u32)
        .or_else(|| tokenizer.token_to_id(&pad_token))
        .unwrap_or(0);
    tokenizer
        .with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            pad_token,
            pad_id,
            ..Default::default()
        }))
        .with_truncation(Some(TruncationParams {
            max_length,
            ..Default::default()
        }))
        .map_err(|e| format!("truncation: {e}"))?;
    if let serde_json::Value::Object(map) = special {
        for value in map.values() {
            let token = if let Some(content) = value.as_str() {
                Some(AddedToken {
                    content: content.into(),
                    special: true,
                    ..Default::default()
                })
            } else if let (
                Some(content),
                Some(single_word),
                Some(lstrip),
                Some(rstrip),
                Some(normalized),
            ) = (
                value["content"].as_str(),
                value["single_word"].as_bool(),
                value["lstrip"].as_bool(),
                value["rstrip"].as_bool(),
                value["normalized"].as_bool(),
            ) {
                Some(AddedToken {
                    content: content.into(),
                    special: true,
                    single_word,
                    lstrip,
                    rstrip,
                    normalized,
                })
            } else {
                None
            };
            if let Some(token) = token {
                tokenizer
                    .add_special_tokens([token])
                    .map_err(|e| format!("special tokens: {e}"))?;
            }
        }
    }
    Ok(tokenizer)
}

/// Where a [`LocalEmbedder`]'s sessions come from (to load more on demand).
#[derive(Debug, Clone)]
struct SessionSpec {
    dir: std::path::PathBuf,
    graph: std::path::PathBuf,
    /// The graph's identity digest (`file_digest`), checked again on a re-read.
    digest: String,
    env: ort::environment::Environment,
    runtime: LocalRuntime,
}

impl SessionSpec {
    /// Another session of the same graph, read again and checked against the
    /// identity digest: a graph swapped in since the load is refused.
    fn another(&self) -> Result<onnx::OnnxSession, BoxError> {
        let bytes = std::fs::read(&self.graph)?;
        let digest = {
            use sha2::Digest;
            hex::encode(&sha2::Sha256::digest(&bytes)[..6])
        };
        if digest != self.digest {
            return Err(format!(
                "{} changed since the model was loaded (digest {digest}, loaded {})",
                self.graph.display(),
                self.digest
            )
            .into());
        }
        onnx::OnnxSession::load(&self.env, onnx::Graph::Bytes(&bytes), &self.runtime)
    }
}

impl LocalEmbedder {
    /// Load from `model_dir` (model.onnx, tokenizer.json, config.json, special_tokens_map.json,
    /// tokenizer_config.json) with ONNX Runtime at `ort_path`, with the default
    /// [`LocalRuntime`].
    pub fn load(
        model_dir: Option<&Path>,
        ort_path: Option<&Path>,
        batch_size: usize,
    ) -> Result<LocalEmbedder, EmbedError> {
        Self::load_with(model_dir, ort_path, batch_size, &LocalRuntime::default())
    }

    /// [`LocalEmbedder::load`] with explicit threads and memory settings.
    pub fn load_with(
        model_dir: Option<&Path>,
        ort_path: Option<&Path>,
        batch_size: usize,
        runtime: &LocalRuntime,
    ) -> Result<LocalEmbedder, EmbedError> {
        let dir = model_dir.ok_or(EmbedError::NoModelDir)?;
        let need = |name: &'static str| -> Result<Vec<u8>, EmbedError> {
            std::fs::read(dir.join(name))
                .map_err(|_| EmbedError::MissingFile(dir.to_path_buf(), name))
        };
        let (precision, _) = choose_precision(dir, runtime.precision);
        let graph = std::fs::File::open(dir.join(precision.file_name()))
            .map_err(|_| EmbedError::MissingFile(dir.to_path_buf(), precision.file_name()))?;
        let tokenizer_file = need("tokenizer.json")?;
        let config_file = need("config.json")?;
        let special = need("special_tokens_map.json")?;
        let tok_config = need("tokenizer_config.json")?;
        let ort_path = ort_path.ok_or(EmbedError::NoRuntime)?;
        let env = init_ort(ort_path)?;

        let config: serde_json::Value =
            serde_json::from_slice(&config_file).map_err(|e| EmbedError::Model {
                path: dir.to_path_buf(),
                source: format!("config.json: {e}").into(),
            })?;
        let dims = config["hidden_size"].as_u64().unwrap_or(384) as usize;
        let max_pos = config["max_position_embeddings"].as_u64().unwrap_or(512) as usize;
        // MiniLM accepts 512 positions but was trained on 128..256 word pieces; cap at 256.
        let max_len = max_pos.min(256);
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "local".into());
        let files = TokenizerFiles {
            tokenizer_file,
            config_file,
            special_tokens_map_file: special,
            tokenizer_config_file: tok_config,
        };
        let graph_path = dir.join(precision.file_name());
        let mut spec = SessionSpec {
            dir: dir.to_path_buf(),
            graph: graph_path.clone(),
            digest: String::new(),
            env,
            runtime: *runtime,
        };
        let model_error = |e: BoxError| EmbedError::Model {
            path: dir.to_path_buf(),
            source: e,
        };
        // ONNX Runtime reads the graph file and builds the session while one
        // other thread parses the tokenizer and then hashes the open graph file
        // (int8: ~45 ms of session beside ~20 ms of tokenizer and ~15 ms of
        // digest; fp32: ~140 ms beside ~20 and ~50). One helper thread, not
        // two: on two cores a third busy thread slows the session down.
        let (model, helper) = std::thread::scope(|s| {
            let helper = s.spawn(|| {
                let tokenizer = model_tokenizer(&files, max_len)?;
                let digest = file_digest(&graph)?;
                Ok::<_, BoxError>((tokenizer, digest))
            });
            let model = onnx::OnnxSession::load(&spec.env, onnx::Graph::File(&graph_path), runtime)
                .map_err(model_error);
            let helper = helper
                .join()
                .unwrap_or_else(|_| Err("the tokenizer and digest thread panicked".into()))
                .map_err(model_error);
            (model, helper)
        });
        let (model, (tokenizer, digest)) = (model?, helper?);
        // ONNX Runtime opened the graph by its path: it must still be the file
        // that was hashed (not one renamed over it meanwhile).
        if !same_file(&graph, &graph_path) {
            return Err(model_error(
                format!(
                    "{} was replaced while the model loaded; load it again",
                    graph_path.display()
                )
                .into(),
            ));
        }
        spec.digest = digest.clone();
        // Identity = directory name (+ `:int8`) + a digest of the graph, so a swapped
        // model or another precision rebuilds the index.
        let model_id = format!("{}@{digest}", identity_label(&name, precision));
        // The token counter is the model's own tokenizer without padding or
        // truncation (a copy: parsing tokenizer.json again costs ~20 ms).
        let counter = HfTokenCounter::from_tokenizer(tokenizer.clone());
        Ok(LocalEmbedder {
            model: Mutex::new(model),
            more: std::sync::OnceLock::new(),
            spec,
            tokenizer,
            counter,
            model_id,
            dims,
            max_len,
            // The int8 graph quantizes its activations with ranges taken over the
            // whole batch, so a text's vector would depend on the texts batched
            // with it (cosine 0.996 against its own): one text per run.
            batch_size: match precision {
                Precision::Int8 => 1,
                Precision::Fp32 => batch_size.max(1),
            },
            runtime: *runtime,
            precision,
        })
    }

    /// Texts per model run (`embedding.batch_size`; always 1 for the int8 graph).
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The sessions loaded: 1 until a call had work for more (at most the
    /// runtime's threads).
    pub fn sessions(&self) -> usize {
        1 + self.more.get().map_or(0, Vec::len)
    }

    /// The sessions besides the first, loaded on first use: `threads − 1` of
    /// them, one intra-op thread each. Texts embed faster side by side on
    /// sessions of one thread than on one session of several (2 cores:
    /// BENCHMARKS.md "Issue 30"). A session that does not load is left out,
    /// with a warning: the call runs on the others.
    fn more_sessions(&self) -> &[Mutex<onnx::OnnxSession>] {
        let n = self.runtime.effective_threads();
        if n <= 1 {
            return &[];
        }
        self.more.get_or_init(|| {
            (1..n)
                .filter_map(|_| match self.spec.another() {
                    Ok(m) => Some(Mutex::new(m)),
                    Err(e) => {
                        tracing::warn!(
                            "embedding: another session of {} did not load ({e}); embedding on fewer",
                            self.spec.dir.display()
                        );
                        None
                    }
                })
                .collect()
        })
    }

    /// The threads and memory settings this model runs with.
    pub fn runtime(&self) -> LocalRuntime {
        self.runtime
    }

    /// The precision of the graph that runs (fp32 when int8 was asked for but
    /// its file is missing).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Why the configured precision is not the one that runs, if it is not.
    pub fn precision_fallback(&self) -> Option<PrecisionFallback> {
        (self.precision != self.runtime.precision).then_some(PrecisionFallback {
            configured: self.runtime.precision,
            used: self.precision,
        })
    }
}

/// `embedding.precision` asked for a graph the model directory lacks
/// (`model_int8.onnx`, from a model installed before int8 existed): the full
/// precision graph runs instead. Not an error, so that an upgrade keeps working
/// (and keeps its index) until the model is installed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PrecisionFallback {
    /// What the configuration asked for.
    pub configured: Precision,
    /// What runs.
    pub used: Precision,
}

impl std::fmt::Display for PrecisionFallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "embedding.precision is {} but the model directory has no {}: the {} model ({}) runs instead",
            self.configured.as_str(),
            self.configured.file_name(),
            self.used.as_str(),
            self.used.file_name()
        )
    }
}

/// The graph to run from `dir` for the `configured` precision: int8 falls back
/// to fp32 when `model_int8.onnx` is missing (with the reason).
pub fn choose_precision(
    dir: &Path,
    configured: Precision,
) -> (Precision, Option<PrecisionFallback>) {
    if configured == Precision::Int8 && !dir.join(Precision::Int8.file_name()).is_file() {
        let used = Precision::Fp32;
        (used, Some(PrecisionFallback { configured, used }))
    } else {
        (configured, None)
    }
}

/// Whether the configured local model runs another precision than the one
/// asked for (int8 without `model_int8.onnx`), judged from the files alone.
pub fn precision_fallback(provider: &EmbedProvider) -> Option<PrecisionFallback> {
    match provider {
        EmbedProvider::Local {
            model_dir: Some(dir),
            runtime,
            ..
        } => choose_precision(dir, runtime.precision).1,
        _ => None,
    }
}

/// The name part of a local model identity (before `@digest`): the directory
/// name, with `:int8` for the quantized graph. The fp32 identity is the one
/// indexes had before precisions existed, so they are not rebuilt.
fn identity_label(name: &str, precision: Precision) -> String {
    match precision {
        Precision::Fp32 => name.to_string(),
        Precision::Int8 => format!("{name}:int8"),
    }
}

/// What the configured embedding backend will record as the index's model,
/// known without loading the model: the full id (`openai:<model>`), or for the
/// local model its name part (`all-MiniLM-L6-v2:int8`; the graph digest after
/// `@` needs the file read). `None` when keyword-only or no model is configured.
pub fn configured_identity(provider: &EmbedProvider) -> Option<String> {
    match provider {
        EmbedProvider::None => None,
        EmbedProvider::OpenAi { model, .. } => Some(format!("openai:{model}")),
        EmbedProvider::Local {
            model_dir, runtime, ..
        } => {
            let dir = model_dir.as_deref()?;
            let name = dir.file_name()?.to_string_lossy().into_owned();
            let (used, _) = choose_precision(dir, runtime.precision);
            Some(identity_label(&name, used))
        }
    }
}

/// The index's embeddings came from another model (or precision) than the
/// configured one: the next index run re-embeds every chunk (a rebuild, the
/// way any model change is handled), and until then vector search is off.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ModelChange {
    /// The model id recorded in the index.
    pub index: String,
    /// The configured model (for the local model, its name part: see
    /// [`configured_identity`]).
    pub configured: String,
}

impl std::fmt::Display for ModelChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the index was embedded by {} but {} is configured: the next index run re-embeds every chunk (until then search is keyword-only)",
            self.index, self.configured
        )
    }
}

/// Whether an index whose vectors came from `index_model` (`""` = keyword-only)
/// will be re-embedded by the configured backend, judged without loading the
/// model (a local graph swapped under the same name and precision shows only
/// when the model loads).
pub fn pending_model_change(provider: &EmbedProvider, index_model: &str) -> Option<ModelChange> {
    if index_model.is_empty() {
        return None;
    }
    let configured = configured_identity(provider)?;
    let same = match provider {
        EmbedProvider::Local { .. } => index_model
            .rsplit_once('@')
            .is_some_and(|(label, _)| label == configured),
        _ => index_model == configured,
    };
    (!same).then(|| ModelChange {
        index: index_model.to_string(),
        configured,
    })
}

impl Embedder for LocalEmbedder {
    fn provider(&self) -> &str {
        "local"
    }
    fn model_id(&self) -> &str {
        &self.model_id
    }
    fn dims(&self) -> usize {
        self.dims
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        // A batch is padded to its longest text: with several texts per batch they
        // run shortest first (by tokens), so each batch holds texts of about one
        // length, and the vectors go back to the callers' order.
        let order = batch_order(texts, self.batch_size, &self.counter);
        // One unit of work is one model batch (one session run: its token-level
        // output, up to 256 × 384 floats per text, lives until it is pooled).
        let units: Vec<&[usize]> = order.chunks(self.batch_size).collect();
        let more = if units.len() > 1 {
            self.more_sessions()
        } else {
            &[]
        };
        // Every session pulls the next unit until none is left; each unit's
        // session is locked only while it runs, so a query from another thread
        // waits for one batch, not for the call.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let failed = std::sync::atomic::AtomicBool::new(false);
        let work = |session: &Mutex<onnx::OnnxSession>| {
            let mut done = Vec::new();
            while !failed.load(std::sync::atomic::Ordering::Relaxed) {
                let u = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(unit) = units.get(u) else { break };
                let part: Vec<&str> = unit.iter().map(|&i| texts[i]).collect();
                let mut model = session.lock().unwrap_or_else(|p| p.into_inner());
                match model.embed(&self.tokenizer, &part) {
                    Ok(v) if v.len() == unit.len() => done.push((u, v)),
                    Ok(v) => {
                        failed.store(true, std::sync::atomic::Ordering::Relaxed);
                        return Err(EmbedError::Inference(
                            format!("{} vectors for {} texts", v.len(), unit.len()).into(),
                        ));
                    }
                    Err(e) => {
                        failed.store(true, std::sync::atomic::Ordering::Relaxed);
                        return Err(EmbedError::Inference(e));
                    }
                }
            }
            Ok(done)
        };
        let results: Vec<Result<Vec<UnitVectors>, EmbedError>> = std::thread::scope(|s| {
            let others: Vec<_> = more.iter().map(|m| s.spawn(|| work(m))).collect();
            let mut all = vec![work(&self.model)];
            all.extend(others.into_iter().map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(EmbedError::Inference("an embedding thread panicked".into()))
                })
            }));
            all
        });
        let mut by_unit: Vec<Vec<Vec<f32>>> = vec![Vec::new(); units.len()];
        for r in results {
            for (u, v) in r? {
                by_unit[u] = v;
            }
        }
        let mut out = vec![Vec::new(); texts.len()];
        for (v, &i) in by_unit.into_iter().flatten().zip(&order) {
            out[i] = v;
        }
        for v in &mut out {
            normalize(v);
        }
        Ok(out)
    }
    fn token_counter(&self) -> &dyn TokenCounter {
        &self.counter
    }
    fn max_input_tokens(&self) -> usize {
        self.max_len
    }
}

/// One unit of work's vectors: (its index, a vector per text).
type UnitVectors = (usize, Vec<Vec<f32>>);

/// The order `texts` are embedded in: as given for batches of one text (no
/// padding), else by token count, shortest first (stable), so that a batch pads
/// little.
fn batch_order(texts: &[&str], batch_size: usize, counter: &dyn TokenCounter) -> Vec<usize> {
    let mut order: Vec<usize> = (0..texts.len()).collect();
    if batch_size > 1 {
        let tokens: Vec<usize> = texts.iter().map(|t| counter.count(t)).collect();
        order.sort_by_key(|&i| tokens[i]);
    }
    order
}

/// An OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, vLLM, LM Studio).
pub struct OpenAiEmbedder {
    agent: ureq::Agent,
    url: String,
    model: String,
    model_id: String,
    api_key: Option<String>,
    dims: usize,
}

#[derive(serde::Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingItem>,
}

#[derive(serde::Deserialize)]
struct EmbeddingItem {
    index: usize,
    embedding: Vec<f32>,
}

impl OpenAiEmbedder {
    /// Create a client; when `dims` is not configured, one probe request discovers it.
    pub fn new(
        base_url: &str,
        model: &str,
        api_key: Option<String>,
        dims: Option<usize>,
    ) -> Result<OpenAiEmbedder, EmbedError> {
        let base = base_url.trim_end_matches('/');
        let url = if base.ends_with("/v1") {
            format!("{base}/embeddings")
        } else {
            format!("{base}/v1/embeddings")
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(60)))
            .http_status_as_error(false)
            .build()
            .into();
        let mut e = OpenAiEmbedder {
            agent,
            url,
            model: model.to_string(),
            model_id: format!("openai:{model}"),
            api_key,
            dims: dims.unwrap_or(0),
        };
        if e.dims == 0 {
            e.dims = e
                .request(&["dimension probe"])?
                .first()
                .map(|v| v.len())
                .unwrap_or(0);
        }
        Ok(e)
    }

    fn request(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let err = |cause: HttpCause| EmbedError::Http {
            url: self.url.clone(),
            cause,
        };
        let mut req = self.agent.post(&self.url);
        if let Some(k) = &self.api_key {
            req = req.header("Authorization", format!("Bearer {k}"));
        }
        let mut resp = req
            .send_json(serde_json::json!({"model": self.model, "input": texts}))
            .map_err(|e| err(HttpCause::Transport(Box::new(e))))?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.body_mut().read_to_string().unwrap_or_default();
            return Err(err(HttpCause::Status {
                status: status.as_u16(),
                body: body.chars().take(300).collect(),
            }));
        }
        let parsed: EmbeddingsResponse = resp
            .body_mut()
            .read_json()
            .map_err(|e| err(HttpCause::BadResponse(Box::new(e))))?;
        if parsed.data.len() != texts.len() {
            return Err(err(HttpCause::CountMismatch {
                got: parsed.data.len(),
                sent: texts.len(),
            }));
        }
        let mut data = parsed.data;
        data.sort_by_key(|d| d.index);
        Ok(data
            .into_iter()
            .map(|d| {
                let mut v = d.embedding;
                normalize(&mut v);
                v
            })
            .collect())
    }
}

impl Embedder for OpenAiEmbedder {
    fn provider(&self) -> &str {
        "openai"
    }
    fn model_id(&self) -> &str {
        &self.model_id
    }
    fn dims(&self) -> usize {
        self.dims
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(64) {
            out.extend(self.request(batch)?);
        }
        Ok(out)
    }
    fn token_counter(&self) -> &dyn TokenCounter {
        &ApproxCounter
    }
    fn max_input_tokens(&self) -> usize {
        8192
    }
}

/// Describe where the local model is expected, for messages.
pub fn describe_local(model_dir: Option<&Path>) -> String {
    match model_dir {
        Some(d) => d.display().to_string(),
        None => format!("(not set; {ENV_EMBED_MODEL_DIR})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_renamed_over_the_opened_one_is_not_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.onnx");
        std::fs::write(&path, b"graph one").unwrap();
        let opened = std::fs::File::open(&path).unwrap();
        assert!(same_file(&opened, &path), "control: nothing changed");
        let other = dir.path().join("swap");
        std::fs::write(&other, b"graph two").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert!(!same_file(&opened, &path));
        std::fs::remove_file(&path).unwrap();
        assert!(!same_file(&opened, &path), "gone");
    }

    #[test]
    fn normalize_unit_length() {
        let mut v = vec![3.0, 4.0];
        normalize(&mut v);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        let mut z = vec![0.0, 0.0];
        normalize(&mut z);
        assert_eq!(z, vec![0.0, 0.0]);
    }

    #[test]
    fn batches_of_several_texts_run_shortest_first() {
        let texts = ["three words here", "one", "a b c d e f", "two words"];
        assert_eq!(batch_order(&texts, 1, &ApproxCounter), vec![0, 1, 2, 3]);
        assert_eq!(batch_order(&texts, 8, &ApproxCounter), vec![1, 3, 0, 2]);
    }

    #[test]
    fn missing_model_says_what_to_run() {
        let dir = tempfile::tempdir().unwrap();
        let err = LocalEmbedder::load(Some(dir.path()), None, 1)
            .err()
            .unwrap();
        assert!(matches!(err, EmbedError::MissingFile(..)), "{err}");
        assert!(err.is_missing_model());
        assert!(err.to_string().contains("is missing"), "{err}");
        assert!(!err.to_string().contains("claw "), "no CLI commands: {err}");
        assert!(!EmbedError::Inference("x".into()).is_missing_model());
        let err = LocalEmbedder::load(None, None, 1).err().unwrap();
        assert!(matches!(err, EmbedError::NoModelDir));
    }

    #[test]
    fn a_precision_change_is_a_pending_model_change() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("mini");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("model.onnx"), b"").unwrap();
        let provider = |precision| EmbedProvider::Local {
            model_dir: Some(dir.clone()),
            ort_dylib_path: None,
            runtime: LocalRuntime {
                precision,
                ..LocalRuntime::default()
            },
        };
        let (int8, fp32) = (provider(Precision::Int8), provider(Precision::Fp32));
        // No model_int8.onnx yet: int8 runs fp32, nothing to rebuild.
        assert_eq!(configured_identity(&int8).as_deref(), Some("mini"));
        assert!(precision_fallback(&int8).is_some());
        assert!(precision_fallback(&fp32).is_none());
        assert_eq!(pending_model_change(&int8, "mini@aaaa"), None);
        std::fs::write(dir.join("model_int8.onnx"), b"").unwrap();
        assert!(precision_fallback(&int8).is_none());
        assert_eq!(configured_identity(&int8).as_deref(), Some("mini:int8"));
        let change = pending_model_change(&int8, "mini@aaaa").expect("fp32 -> int8");
        assert_eq!(change.index, "mini@aaaa");
        assert_eq!(change.configured, "mini:int8");
        assert!(
            change.to_string().contains("re-embeds every chunk"),
            "{change}"
        );
        assert_eq!(pending_model_change(&int8, "mini:int8@bbbb"), None);
        assert!(pending_model_change(&fp32, "mini:int8@bbbb").is_some());
        assert!(pending_model_change(&fp32, "other@aaaa").is_some());
        // A keyword-only index has nothing to re-embed (the vector gap covers it).
        assert_eq!(pending_model_change(&int8, ""), None);
        assert_eq!(
            pending_model_change(&EmbedProvider::None, "mini@aaaa"),
            None
        );
        let openai = EmbedProvider::OpenAi {
            base_url: "http://x".into(),
            model: "m".into(),
            api_key: None,
            dims: None,
        };
        assert_eq!(pending_model_change(&openai, "openai:m"), None);
        assert!(pending_model_change(&openai, "mini@aaaa").is_some());
    }
}

//! One ONNX Runtime session of a sentence-embedding graph, run as
//! sentence-transformers runs it: the texts tokenized (padded to the batch's
//! longest, truncated at the model's length), the graph run, and its token
//! vectors mean-pooled over the attention mask.
//!
//! This is what fastembed's `TextEmbedding` did for claw, owned here so that the
//! session is built the fastest way ONNX Runtime offers: from the graph file
//! itself (ONNX Runtime reads it; no copy of the graph passes through this
//! process's memory first), and with the tokenizer shared by every session of
//! the model instead of one copy each. A test holds the vectors to fastembed's
//! (`embed_runtime::the_tokenizer_built_beside_the_session_is_fastembeds_own`).

use super::BoxError;
use crate::config::LocalRuntime;
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::Tensor;
use std::path::Path;

/// The outputs looked for, in order, when a graph has several.
const OUTPUT_NAMES: [&str; 3] = ["text_embeds", "last_hidden_state", "sentence_embedding"];

/// Where a session's graph comes from.
pub(super) enum Graph<'a> {
    /// ONNX Runtime reads the file.
    File(&'a Path),
    /// Bytes already read (and checked) by the caller.
    Bytes(&'a [u8]),
}

/// A loaded graph with one intra-op thread.
pub(super) struct OnnxSession {
    session: Session,
    /// Whether the graph takes `token_type_ids` (BERT-style graphs do).
    token_type_ids: bool,
}

impl OnnxSession {
    /// Build a session of `graph`: all graph optimisations, one intra-op thread
    /// (an embedder's threads are sessions side by side), the runtime's arena
    /// and spinning.
    pub(super) fn load(
        env: &ort::environment::Environment,
        graph: Graph<'_>,
        runtime: &LocalRuntime,
    ) -> Result<OnnxSession, BoxError> {
        let spin = if runtime.spinning { "1" } else { "0" };
        // A builder error carries the builder back; only its message is kept.
        let msg = |e: ort::Error<ort::session::builder::SessionBuilder>| e.to_string();
        let mut builder = Session::builder(env)
            .map_err(|e| e.to_string())?
            // Registering the CPU provider explicitly is how the arena is
            // switched (`EnableCpuMemArena` / `DisableCpuMemArena`); it is the
            // provider used anyway.
            .with_execution_providers([ort::ep::CPU::default()
                .with_arena_allocator(runtime.cpu_arena)
                .build()
                .error_on_failure()])
            .map_err(msg)?
            .with_optimization_level(GraphOptimizationLevel::Level3)
            .map_err(msg)?
            .with_intra_threads(1)
            .map_err(msg)?
            .with_config_entry("session.intra_op.allow_spinning", spin)
            .map_err(msg)?
            .with_config_entry("session.inter_op.allow_spinning", spin)
            .map_err(msg)?;
        let session = match graph {
            Graph::File(path) => builder.commit_from_file(path),
            Graph::Bytes(bytes) => builder.commit_from_memory(bytes),
        }
        .map_err(|e| e.to_string())?;
        let token_type_ids = session
            .inputs()
            .iter()
            .any(|input| input.name() == "token_type_ids");
        Ok(OnnxSession {
            session,
            token_type_ids,
        })
    }

    /// One model run over `texts`: a mean-pooled vector per text, not yet
    /// normalised. The texts are one batch (padded to the longest).
    pub(super) fn embed(
        &mut self,
        tokenizer: &tokenizers::Tokenizer,
        texts: &[&str],
    ) -> Result<Vec<Vec<f32>>, BoxError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| format!("tokenizing: {e}"))?;
        let rows = encodings.len();
        let cols = encodings.first().map_or(0, |e| e.len());
        let mut ids = Vec::with_capacity(rows * cols);
        let mut mask = Vec::with_capacity(rows * cols);
        let mut types = Vec::with_capacity(rows * cols);
        for e in &encodings {
            if e.len() != cols {
                return Err(
                    format!("a batch padded unevenly ({} and {cols} tokens)", e.len()).into(),
                );
            }
            ids.extend(e.get_ids().iter().map(|&x| i64::from(x)));
            mask.extend(e.get_attention_mask().iter().map(|&x| i64::from(x)));
            types.extend(e.get_type_ids().iter().map(|&x| i64::from(x)));
        }
        let tensor = |data: Vec<i64>| Tensor::from_array(([rows, cols], data));
        let mut inputs = ort::inputs![
            "input_ids" => tensor(ids)?,
            "attention_mask" => tensor(mask.clone())?,
        ];
        if self.token_type_ids {
            inputs.push(("token_type_ids".into(), tensor(types)?.into()));
        }
        let outputs = self.session.run(inputs)?;
        // The sole output, else the first of the usual names (fastembed's order).
        let value = if outputs.len() == 1 {
            &outputs[0]
        } else {
            OUTPUT_NAMES
                .iter()
                .find_map(|name| outputs.get(name))
                .ok_or_else(|| {
                    let names: Vec<&str> = outputs.keys().collect();
                    format!(
                        "the graph has no output named one of {OUTPUT_NAMES:?} (it has {names:?})"
                    )
                })?
        };
        let (shape, data) = value.try_extract_tensor::<f32>()?;
        let dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
        match dims.as_slice() {
            // Token vectors: [rows, cols, hidden], averaged over the real tokens.
            &[r, c, hidden] if r == rows && c == cols => Ok((0..rows)
                .map(|row| {
                    let mut sum = vec![0f32; hidden];
                    let mut count = 0f32;
                    for col in 0..cols {
                        if mask[row * cols + col] == 0 {
                            continue;
                        }
                        count += 1.0;
                        let at = (row * cols + col) * hidden;
                        for (s, x) in sum.iter_mut().zip(&data[at..at + hidden]) {
                            *s += x;
                        }
                    }
                    let count = if count == 0.0 { 1.0 } else { count };
                    sum.iter_mut().for_each(|s| *s /= count);
                    sum
                })
                .collect()),
            // Already pooled by the graph: [rows, hidden].
            &[r, hidden] if r == rows => Ok(data
                .chunks_exact(hidden.max(1))
                .map(<[f32]>::to_vec)
                .collect()),
            other => Err(format!(
                "the graph's output has shape {other:?} for {rows} texts of {cols} tokens"
            )
            .into()),
        }
    }
}

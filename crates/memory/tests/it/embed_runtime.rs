//! The local model's runtime settings (`LocalRuntime`: threads, CPU arena,
//! spinning) change how ONNX Runtime runs, never what it computes: every variant
//! embeds to the same vectors, and the settings asked for are the ones used.

use claw_memory::config::{EmbedProvider, LocalRuntime, Precision, available_cpus};
use claw_memory::embed::{self, Embedder, Loaded, LocalEmbedder};

const TEXTS: [&str; 4] = [
    "The payment webhook retried forever because the handler never returned 200.",
    "短文本：周末去爬山。",
    "x",
    // A long passage, past the model's 256-token window (truncated the same way).
    "Rust's async traits landed after years of design work; this week's newsletter \
     covers the stabilisation, the Send bound problem, return-type notation and how \
     libraries are migrating away from the async-trait macro. It also links talks, \
     crate releases, calls for participation and the usual list of merged pull \
     requests across the compiler, Cargo, Clippy and rustdoc, plus RFCs entering \
     their final comment period and the quote of the week about borrow checking. \
     Rust's async traits landed after years of design work; this week's newsletter \
     covers the stabilisation, the Send bound problem, return-type notation and how \
     libraries are migrating away from the async-trait macro. It also links talks, \
     crate releases, calls for participation and the usual list of merged pull \
     requests across the compiler, Cargo, Clippy and rustdoc.",
];

fn load(runtime: LocalRuntime) -> LocalEmbedder {
    let (dir, ort) = claw_testkit::model_paths();
    LocalEmbedder::load_with(Some(&dir), Some(&ort), 1, &runtime).expect("load the local model")
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn every_runtime_embeds_the_same_vectors() {
    let reference = load(LocalRuntime::ort_defaults());
    let want = reference.embed(&TEXTS).unwrap();
    assert_eq!(want.len(), TEXTS.len());
    for runtime in [
        LocalRuntime::default(),
        LocalRuntime {
            threads: Some(1),
            cpu_arena: false,
            spinning: false,
            ..Default::default()
        },
        LocalRuntime {
            threads: Some(3),
            cpu_arena: true,
            spinning: false,
            ..Default::default()
        },
    ] {
        let e = load(runtime);
        assert_eq!(e.runtime(), runtime);
        assert_eq!(e.model_id(), reference.model_id(), "same model identity");
        let got = e.embed(&TEXTS).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.len(), reference.dims());
            let c = cosine(g, w);
            assert!(c > 0.99999, "{runtime:?}, text {i}: cosine {c}");
        }
    }
}

#[test]
fn default_runtime_is_bounded_and_quiet() {
    let d = LocalRuntime::default();
    assert!(
        !d.cpu_arena,
        "the arena keeps its peak for the process's life"
    );
    assert!(
        !d.spinning,
        "spinning threads steal the CPU from other processes"
    );
    assert_eq!(
        d.effective_threads(),
        available_cpus().min(LocalRuntime::DEFAULT_MAX_THREADS)
    );
    let explicit = LocalRuntime {
        threads: Some(0),
        ..d
    };
    assert_eq!(explicit.effective_threads(), 1, "never zero threads");
    assert_eq!(
        LocalRuntime::ort_defaults().effective_threads(),
        available_cpus()
    );
}

#[test]
fn a_provider_with_a_runtime_loads_a_working_model() {
    let (dir, ort) = claw_testkit::model_paths();
    let runtime = LocalRuntime {
        threads: Some(1),
        cpu_arena: false,
        spinning: false,
        ..Default::default()
    };
    let provider = EmbedProvider::Local {
        model_dir: Some(dir),
        ort_dylib_path: Some(ort),
        runtime,
    };
    let Loaded::Ready(e) = embed::load(&provider, 1) else {
        panic!("the local model did not load");
    };
    let v = e.embed_query("where do quokkas live").unwrap();
    assert_eq!(v.len(), e.dims());
    let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "normalised: {norm}");
}

#[test]
fn a_large_call_embeds_like_single_calls() {
    // Many texts in one call: on two sessions side by side (each unit of work
    // one model batch), every vector back in its text's place.
    let e = load(LocalRuntime {
        threads: Some(2),
        ..LocalRuntime::default()
    });
    assert_eq!(e.sessions(), 1, "a loaded model has one session");
    e.embed_query("a query needs no second session").unwrap();
    assert_eq!(e.sessions(), 1);
    let texts: Vec<String> = (0..67)
        .map(|i| format!("note {i}: {}", TEXTS[i % TEXTS.len()]))
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let all = e.embed(&refs).unwrap();
    assert_eq!(all.len(), refs.len());
    assert_eq!(e.sessions(), 2, "the call ran on two sessions");
    for i in [0, 1, 31, 32, refs.len() - 1] {
        let one = e.embed(&refs[i..=i]).unwrap();
        let c = cosine(&all[i], &one[0]);
        assert!(c > 0.99999, "text {i}: cosine {c}");
    }
}

#[test]
fn batches_sorted_by_length_return_each_text_its_own_vector() {
    let (dir, ort) = claw_testkit::model_paths();
    let fp32 = with_precision(Precision::Fp32);
    let one = load(fp32);
    let batched =
        LocalEmbedder::load_with(Some(&dir), Some(&ort), 8, &fp32).expect("load the local model");
    assert_eq!(batched.batch_size(), 8);
    // Long and short texts interleaved, so the shortest-first order differs from
    // the callers'.
    let texts: Vec<&str> = [TEXTS[3], TEXTS[2], TEXTS[0], TEXTS[1], TEXTS[2], TEXTS[3]].to_vec();
    let want = one.embed(&texts).unwrap();
    let got = batched.embed(&texts).unwrap();
    assert_eq!(got.len(), texts.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let c = cosine(g, w);
        assert!(
            c > 0.9999,
            "text {i}: cosine {c} (padding changed it, or another text's vector)"
        );
    }
    // Control: another text's vector is far from it.
    assert!(cosine(&got[0], &want[1]) < 0.9, "the texts differ");
}

#[test]
fn the_int8_graph_embeds_one_text_per_run() {
    // Its activations are quantized with ranges over the whole batch: batched, a
    // text's vector would depend on its neighbours (cosine ~0.996).
    let (dir, ort) = claw_testkit::model_paths();
    let int8 = with_precision(Precision::Int8);
    let e = LocalEmbedder::load_with(Some(&dir), Some(&ort), 8, &int8).expect("load");
    assert_eq!(e.precision(), Precision::Int8);
    assert_eq!(e.batch_size(), 1, "batch_size is not applied to int8");
    let texts: Vec<&str> = [TEXTS[3], TEXTS[2], TEXTS[0], TEXTS[1]].to_vec();
    let all = e.embed(&texts).unwrap();
    for (i, t) in texts.iter().enumerate() {
        let alone = e.embed(&[t]).unwrap();
        let c = cosine(&all[i], &alone[0]);
        assert!(c > 0.99999, "text {i}: cosine {c}");
    }
}

/// The installed model directory, which must hold `model_int8.onnx` too.
fn int8_model_dir() -> std::path::PathBuf {
    let (dir, _) = claw_testkit::model_paths();
    assert!(
        dir.join(Precision::Int8.file_name()).is_file(),
        "this test needs model_int8.onnx: run `bash scripts/install-model.sh --int8-only {}`",
        dir.display()
    );
    dir
}

fn with_precision(precision: Precision) -> LocalRuntime {
    LocalRuntime {
        precision,
        ..LocalRuntime::default()
    }
}

#[test]
fn precision_selects_the_graph_and_the_identity() {
    let dir = int8_model_dir();
    let fp = load(with_precision(Precision::Fp32));
    let q = load(with_precision(Precision::Int8));
    assert_eq!(fp.precision(), Precision::Fp32);
    assert_eq!(q.precision(), Precision::Int8);
    assert!(q.precision_fallback().is_none());
    // fp32 keeps the identity indexes had before precisions existed.
    let (name, fp_digest) = fp.model_id().rsplit_once('@').unwrap();
    assert!(!name.contains(":int8"), "{}", fp.model_id());
    let (qname, q_digest) = q.model_id().rsplit_once('@').unwrap();
    assert_eq!(qname, format!("{name}:int8"));
    assert_ne!(q_digest, fp_digest, "another graph");
    // The digest is the first 6 bytes of each graph file's SHA-256 (hashed beside
    // the load, on its own thread).
    for (file, digest) in [("model.onnx", fp_digest), ("model_int8.onnx", q_digest)] {
        use sha2::Digest;
        let bytes = std::fs::read(dir.join(file)).unwrap();
        let want = hex::encode(&sha2::Sha256::digest(&bytes)[..6]);
        assert_eq!(digest, want, "{file}");
    }
    // What status judges from the config alone agrees with the loaded model.
    let provider = |precision| EmbedProvider::Local {
        model_dir: Some(dir.clone()),
        ort_dylib_path: None,
        runtime: with_precision(precision),
    };
    assert_eq!(
        embed::configured_identity(&provider(Precision::Int8)).as_deref(),
        Some(qname)
    );
    assert_eq!(
        embed::configured_identity(&provider(Precision::Fp32)).as_deref(),
        Some(name)
    );
    assert!(embed::pending_model_change(&provider(Precision::Int8), fp.model_id()).is_some());
    assert!(embed::pending_model_change(&provider(Precision::Int8), q.model_id()).is_none());
    assert!(embed::pending_model_change(&provider(Precision::Fp32), fp.model_id()).is_none());
    // The int8 graph computes other vectors, close to fp32's.
    let a = fp.embed(&TEXTS).unwrap();
    let b = q.embed(&TEXTS).unwrap();
    let mut identical = true;
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(y.len(), fp.dims());
        let c = cosine(x, y);
        assert!(c > 0.9, "text {i}: int8 vs fp32 cosine {c}");
        identical &= c > 0.999999;
    }
    assert!(!identical, "the int8 graph ran, not the fp32 one");
}

#[test]
fn int8_without_its_file_falls_back_to_fp32() {
    let (dir, ort) = claw_testkit::model_paths();
    // A model installed before int8 existed: everything but model_int8.onnx.
    let tmp = tempfile::tempdir().unwrap();
    let old = tmp.path().join(dir.file_name().unwrap());
    std::fs::create_dir(&old).unwrap();
    for f in [
        "model.onnx",
        "tokenizer.json",
        "config.json",
        "special_tokens_map.json",
        "tokenizer_config.json",
    ] {
        std::os::unix::fs::symlink(dir.join(f), old.join(f)).unwrap();
    }
    let fp = load(with_precision(Precision::Fp32));
    let e = LocalEmbedder::load_with(Some(&old), Some(&ort), 1, &with_precision(Precision::Int8))
        .expect("int8 without its file still loads");
    assert_eq!(e.precision(), Precision::Fp32);
    let fallback = e.precision_fallback().expect("the fallback is reported");
    assert_eq!(fallback.configured, Precision::Int8);
    assert_eq!(fallback.used, Precision::Fp32);
    assert!(
        fallback.to_string().contains("model_int8.onnx"),
        "{fallback}"
    );
    assert_eq!(e.model_id(), fp.model_id(), "fp32 identity: no rebuild");
    let provider = EmbedProvider::Local {
        model_dir: Some(old),
        ort_dylib_path: Some(ort),
        runtime: with_precision(Precision::Int8),
    };
    assert_eq!(embed::precision_fallback(&provider), Some(fallback));
    assert!(embed::pending_model_change(&provider, fp.model_id()).is_none());
}

/// claw runs the graph itself (`embed::onnx`), with the tokenizer it builds beside
/// the ONNX Runtime session (`embed::model_tokenizer`): the tokenizer must be the
/// one fastembed builds from the same files (padding, truncation, special
/// tokens), and the vectors those fastembed computes, for single texts, padded
/// batches and the int8 graph.
#[test]
fn the_tokenizer_built_beside_the_session_is_fastembeds_own() {
    let (dir, ort) = claw_testkit::model_paths();
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let files = || fastembed::TokenizerFiles {
        tokenizer_file: read("tokenizer.json"),
        config_file: read("config.json"),
        special_tokens_map_file: read("special_tokens_map.json"),
        tokenizer_config_file: read("tokenizer_config.json"),
    };
    // fastembed's own model of a graph, as claw configured it before its runner.
    let fastembed_model = |graph: &str| {
        let mut opts = fastembed::InitOptionsUserDefined::default();
        opts.max_length = 256;
        opts.environment = Some(embed::ort_environment(&ort).unwrap());
        opts.intra_threads = Some(1);
        let whole = fastembed::UserDefinedEmbeddingModel::new(read(graph), files())
            .with_pooling(fastembed::Pooling::Mean);
        fastembed::TextEmbedding::try_new_from_user_defined(whole, opts).unwrap()
    };
    let mut reference = fastembed_model("model.onnx");

    let f = files();
    let ours = embed::model_tokenizer(
        &embed::TokenizerFiles {
            tokenizer_file: f.tokenizer_file,
            config_file: f.config_file,
            special_tokens_map_file: f.special_tokens_map_file,
            tokenizer_config_file: f.tokenizer_config_file,
        },
        256,
    )
    .unwrap();
    let theirs = &reference.tokenizer;
    assert_eq!(
        format!("{:?}", ours.get_padding()),
        format!("{:?}", theirs.get_padding())
    );
    assert_eq!(
        format!("{:?}", ours.get_truncation()),
        format!("{:?}", theirs.get_truncation())
    );
    let added = |t: &tokenizers::Tokenizer| {
        let mut v: Vec<(u32, String, bool)> = t
            .get_added_tokens_decoder()
            .into_iter()
            .map(|(id, tok)| (id, tok.content, tok.special))
            .collect();
        v.sort();
        v
    };
    assert_eq!(added(&ours), added(theirs));
    let longer = TEXTS[3].repeat(2);
    let mut texts: Vec<&str> = TEXTS.to_vec();
    texts.push(&longer);
    let (a, b) = (
        ours.encode_batch(texts.clone(), true).unwrap(),
        theirs.encode_batch(texts.clone(), true).unwrap(),
    );
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.get_ids(), y.get_ids());
        assert_eq!(x.get_attention_mask(), y.get_attention_mask());
        assert_eq!(x.get_type_ids(), y.get_type_ids());
    }
    // The longest text is truncated at 256 and the batch padded to it.
    assert!(a.iter().all(|e| e.get_ids().len() == 256), "{}", a[0].len());
    assert_eq!(
        a[2].get_attention_mask().iter().sum::<u32>(),
        3,
        "x: [CLS] x [SEP]"
    );

    // And the loaded model embeds as the whole fastembed model does.
    let fp32 = with_precision(Precision::Fp32);
    let model = load(fp32);
    let want = reference.embed(texts.clone(), None).unwrap();
    let got = model.embed(&texts).unwrap();
    for (w, g) in want.iter().zip(&got) {
        let mut w = w.clone();
        embed::normalize(&mut w);
        assert!(cosine(&w, g) > 0.99999, "{}", cosine(&w, g));
    }
    // Batches of several texts, each padded to its longest.
    let batched =
        LocalEmbedder::load_with(Some(&dir), Some(&ort), 3, &fp32).expect("load the local model");
    let got = batched.embed(&texts).unwrap();
    for (w, g) in want.iter().zip(&got) {
        let mut w = w.clone();
        embed::normalize(&mut w);
        assert!(cosine(&w, g) > 0.99999, "batched: {}", cosine(&w, g));
    }
    // The int8 graph, which fastembed (like claw) runs one text at a time.
    let mut reference = fastembed_model("model_int8.onnx");
    let model = load(with_precision(Precision::Int8));
    assert_eq!(model.precision(), Precision::Int8);
    let got = model.embed(&texts).unwrap();
    for (text, g) in texts.iter().zip(&got) {
        let mut w = reference.embed([*text], None).unwrap().remove(0);
        embed::normalize(&mut w);
        assert!(cosine(&w, g) > 0.99999, "int8: {}", cosine(&w, g));
    }
}

/// The second session is loaded from the graph file when a call first needs it:
/// a graph swapped in since the model was loaded (another identity) is refused,
/// and the call runs on the first session alone, with the loaded model.
#[test]
fn a_graph_swapped_after_the_load_is_not_loaded_as_another_session() {
    let (dir, ort) = claw_testkit::model_paths();
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, copy.path().join(p.file_name().unwrap())).unwrap();
        }
    }
    let runtime = LocalRuntime {
        threads: Some(2),
        ..with_precision(Precision::Fp32)
    };
    let e = LocalEmbedder::load_with(Some(copy.path()), Some(&ort), 1, &runtime).unwrap();
    let want = load(runtime).embed(&TEXTS).unwrap();
    // Another graph under the same name (the int8 one: a different digest).
    std::fs::copy(
        int8_model_dir().join(Precision::Int8.file_name()),
        copy.path().join("model.onnx"),
    )
    .unwrap();
    let got = e.embed(&TEXTS).unwrap();
    assert_eq!(e.sessions(), 1, "the swapped graph was not loaded");
    for (g, w) in got.iter().zip(&want) {
        assert!(cosine(g, w) > 0.99999);
    }
}

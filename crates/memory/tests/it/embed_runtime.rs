//! The local model's runtime settings (`LocalRuntime`: threads, CPU arena,
//! spinning) change how ONNX Runtime runs, never what it computes: every variant
//! embeds to the same vectors, and the settings asked for are the ones used.

use claw_memory::config::{EmbedProvider, LocalRuntime, available_cpus};
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
        },
        LocalRuntime {
            threads: Some(3),
            cpu_arena: true,
            spinning: false,
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
    // More texts than one fastembed slice (`EMBED_SLICE`), in one call.
    let e = load(LocalRuntime::default());
    let texts: Vec<String> = (0..embed::EMBED_SLICE * 2 + 3)
        .map(|i| format!("note {i}: {}", TEXTS[i % TEXTS.len()]))
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let all = e.embed(&refs).unwrap();
    assert_eq!(all.len(), refs.len());
    for i in [
        0,
        embed::EMBED_SLICE - 1,
        embed::EMBED_SLICE,
        refs.len() - 1,
    ] {
        let one = e.embed(&refs[i..=i]).unwrap();
        let c = cosine(&all[i], &one[0]);
        assert!(c > 0.99999, "text {i}: cosine {c}");
    }
}

//! The measured procedure behind `score::MINILM_L6_V2_BACKGROUND`: the background
//! similarity of the real all-MiniLM-L6-v2 model, i.e. the mean and standard
//! deviation of the cosine between a short query and an unrelated note. Queries
//! are note titles (file stems, undated ones) of every 40th file of the
//! notes-garden, passages are every 20th *other* file (their whole text, as the model
//! truncates it). Prints the figures, then checks the committed constants match
//! them, so the calibration cannot drift from its measurement. The same for the
//! int8 graph (`score::MINILM_L6_V2_INT8_BACKGROUND`).

use crate::ranking_support;
use crate::search_support;

use claw_memory::embed::Embedder;
use claw_memory::search::score::{self, Background};

/// (titles, passages) sampled deterministically from the extracted garden.
fn sample(root: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let mut files: Vec<std::path::PathBuf> = walkdir::WalkDir::new(root)
        .into_iter()
        .map(|e| e.unwrap().into_path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.sort();
    let mut titles = Vec::new();
    let mut passages = Vec::new();
    for (i, f) in files.iter().enumerate() {
        if i % 40 == 0 {
            let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
            let digits = stem.chars().filter(char::is_ascii_digit).count();
            if digits < 4 && stem.chars().any(char::is_alphabetic) {
                titles.push(stem.replace(['_', '-'], " "));
            }
        } else if i % 20 == 10 {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            if text.trim().chars().count() >= 40 {
                passages.push(text);
            }
        }
    }
    (titles, passages)
}

/// Measure `e`'s background on the garden sample and print it.
fn measure(e: &dyn Embedder, titles: &[String], passages: &[String]) -> Background {
    let embed = |texts: &[String]| -> Vec<Vec<f32>> {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        refs.chunks(32)
            .flat_map(|c| e.embed(c).expect("embed"))
            .collect()
    };
    let q: Vec<Vec<f32>> = titles.iter().map(|t| e.embed_query(t).unwrap()).collect();
    let p = embed(passages);
    let bg = score::background(&q, &p).expect("pairs");
    println!("| background of {} | value |", e.model_id());
    println!("|---|---:|");
    println!(
        "| queries (garden titles) × passages (other garden notes) | {} × {} |",
        q.len(),
        p.len()
    );
    println!("| mean cosine | {:.4} |", bg.mean);
    println!("| standard deviation | {:.4} |", bg.std);
    bg
}

/// The measurement is within 0.005 of the committed constant, and the model's
/// identity finds that constant.
fn assert_committed(e: &dyn Embedder, measured: Background, committed: Background) {
    assert_eq!(score::background_for(e.model_id()), committed);
    assert!(
        (measured.mean - committed.mean).abs() < 0.005
            && (measured.std - committed.std).abs() < 0.005,
        "{}: measured {measured:?}, committed {committed:?}",
        e.model_id()
    );
}

#[test]
fn minilm_background_matches_its_measurement() {
    let garden = ranking_support::garden::extract_garden();
    let (titles, passages) = sample(garden.path());
    assert!(titles.len() >= 100 && passages.len() >= 300);
    let e = search_support::embedder_at(claw_memory::config::Precision::Fp32);
    let bg = measure(&e, &titles, &passages);
    assert_committed(&e, bg, score::MINILM_L6_V2_BACKGROUND);
}

/// The int8 graph (`embedding.precision = "int8"`, `model_int8.onnx` as
/// `claw memory install-model` quantizes it) has its own background: its cosines
/// are not fp32's, and calibrating them against fp32's background misplaces every
/// vector-only hit against the clearing point.
#[test]
fn minilm_int8_background_matches_its_measurement() {
    let e = search_support::embedder_at(claw_memory::config::Precision::Int8);
    let garden = ranking_support::garden::extract_garden();
    let (titles, passages) = sample(garden.path());
    let bg = measure(&e, &titles, &passages);
    assert_committed(&e, bg, score::MINILM_L6_V2_INT8_BACKGROUND);
}

//! Keyword-only retrieval quality on XQuAD-zh (Chinese): the trigram index and the
//! CJK query handling must reach nDCG@10 >= 0.85 (unicode61 alone: 0.114).

use crate::search_support;
use claw_testkit as support;

use claw_memory::config::MemorySettings;
use claw_memory::search::engine::{Mode, SearchRequest, search};
use claw_memory::store::Store;
use std::collections::HashMap;

fn read_jsonl(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn xquad_zh_keyword_ndcg_at_10() {
    let data = support::shared_dir().join("data/xquad-zh");
    let corpus = read_jsonl(&data.join("corpus.jsonl"));
    let queries = read_jsonl(&data.join("queries.jsonl"));
    let mut qrels: HashMap<String, Vec<String>> = HashMap::new();
    for line in std::fs::read_to_string(data.join("qrels/test.tsv"))
        .unwrap()
        .lines()
        .skip(1)
    {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() >= 3 && f[2].trim() != "0" {
            qrels.entry(f[0].into()).or_default().push(f[1].into());
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("m.sqlite")).unwrap();
    let docs: Vec<(String, String)> = corpus
        .iter()
        .map(|d| {
            let id = d["_id"].as_str().unwrap().to_string();
            let title = d["title"].as_str().unwrap_or("");
            let text = d["text"].as_str().unwrap();
            (
                format!("{id}.md"),
                format!("{title}\n{text}").trim().to_string(),
            )
        })
        .collect();
    let refs: Vec<(&str, &str, &str)> = docs
        .iter()
        .map(|(p, t)| ("xquad", p.as_str(), t.as_str()))
        .collect();
    search_support::fill(&mut store, &refs, None);

    let params = MemorySettings::default();
    let (mut total, mut n) = (0.0, 0usize);
    for q in &queries {
        let id = q["_id"].as_str().unwrap();
        let Some(rel) = qrels.get(id) else { continue };
        let req = SearchRequest {
            limit: 10,
            min_score: Some(f64::NEG_INFINITY),
            mode: Mode::Fts,
            mmr: false,
            ..SearchRequest::new(q["text"].as_str().unwrap())
        };
        let resp = search(&store, None, &params, &req, 0).unwrap();
        let mut dcg = 0.0;
        for (i, hit) in resp.results.iter().enumerate() {
            let doc = hit.path.trim_end_matches(".md");
            if rel.iter().any(|r| r == doc) {
                dcg += 1.0 / ((i + 2) as f64).log2();
            }
        }
        let idcg: f64 = (0..rel.len().min(10))
            .map(|i| 1.0 / ((i + 2) as f64).log2())
            .sum();
        total += dcg / idcg;
        n += 1;
    }
    let ndcg = total / n as f64;
    println!("xquad-zh keyword-only nDCG@10 = {ndcg:.4} over {n} queries");
    assert!(n > 1000, "only {n} queries judged");
    assert!(ndcg >= 0.85, "nDCG@10 {ndcg:.4} < 0.85");
}

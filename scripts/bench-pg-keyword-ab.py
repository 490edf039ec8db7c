#!/usr/bin/env python3
"""A/B of two claw binaries' keyword-only search on one indexed SciFact workspace
(e.g. PostgreSQL unbounded vs bounded keyword stage): the first N train queries
plus one all-common-terms query, each as one `claw memory search --mode fts
--no-sync --json --limit 10 Q` process, the two binaries alternating so both see
the same load. Prints wall p50/p95 per binary (process start included), how many
top-10 lists are identical, and nDCG@10 over the queries (hits deduplicated by
document).

    scripts/bench-pg-keyword-ab.py N BIN_A BIN_B WORKSPACE

The workspace must already hold SciFact indexed keyword-only (its config, e.g. a
PostgreSQL backend, comes from CLAW_CONFIG / the environment as usual)."""
import json, math, os, subprocess, sys, time

n, bin_a, bin_b, ws = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "scifact")
rel = {}
for line in open(os.path.join(data, "qrels", "train.tsv")).read().splitlines()[1:]:
    q, d, s = line.split("\t")[:3]
    rel.setdefault(q, {})[d] = int(s)
ids, qs = [], []
for line in open(os.path.join(data, "queries.jsonl")):
    d = json.loads(line)
    if d["_id"] in rel:
        ids.append(d["_id"])
        qs.append(d["text"])
ids, qs = ids[:n], qs[:n] + ["the data of the study"]
bins = {"A": bin_a, "B": bin_b}
wall = {k: [] for k in bins}
top = {k: [] for k in bins}
for i, q in enumerate(qs):
    for k in (list(bins) if i % 2 == 0 else list(bins)[::-1]):
        t = time.perf_counter()
        out = subprocess.run([bins[k], "--workspace", ws, "memory", "search", "--mode", "fts",
                              "--no-sync", "--json", "--limit", "10", q], capture_output=True)
        wall[k].append((time.perf_counter() - t) * 1000)
        try:
            top[k].append([h["path"] for h in json.loads(out.stdout)["results"]])
        except (ValueError, KeyError):
            top[k].append([])
            print(k, q, out.stderr[:300], file=sys.stderr)


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


print(f"load average {open('/proc/loadavg').read().split()[:3]}")
print("| binary | p50 ms | p95 ms | nDCG@10 |\n|---|---:|---:|---:|")
for k in bins:
    nd = []
    for qid, t in zip(ids, top[k]):
        r = rel[qid]
        docs = list(dict.fromkeys(p.split("/")[-1][:-3] for p in t))
        dcg = sum(r.get(d, 0) / math.log2(i + 2) for i, d in enumerate(docs[:10]))
        idcg = sum(v / math.log2(i + 2) for i, v in enumerate(sorted(r.values(), reverse=True)[:10]))
        nd.append(dcg / idcg if idcg else 0.0)
    print(f"| {k} `{bins[k]}` | {pct(wall[k], 50):.0f} | {pct(wall[k], 95):.0f} | {sum(nd) / len(nd):.4f} |")
same = sum(1 for a, b in zip(top["A"], top["B"]) if a == b)
print(f"\nidentical top-10 lists: {same} of {len(qs)}; 'the data of the study': A {wall['A'][-1]:.0f} ms, B {wall['B'][-1]:.0f} ms")

#!/usr/bin/env python3
"""Is one ranking better than another on the same queries, or is it noise?

Reads two TREC run files (as `claw memory eval --save-run DIR` writes them) and a
BEIR qrels file, computes nDCG@10 per query (the eval's formula: graded gains,
log2 discount, ideal from the qrels), and prints both means, the mean paired
difference B - A, its 95 % bootstrap interval (10,000 resamples of the queries,
fixed seed) and a two-sided paired p-value (normal approximation of the paired
t-test; fine for hundreds of queries). Standard library only.

    scripts/compare-runs.py A.run B.run QRELS.tsv
"""

import math
import random
import sys
from collections import defaultdict


def read_qrels(path):
    rel = defaultdict(dict)
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.strip().split("\t")
            if len(parts) < 3 or not parts[2].lstrip("-").isdigit():
                continue  # header or blank
            q, d, g = parts[0], parts[1], int(parts[2])
            if g > 0:
                rel[q][d] = g
    return rel


def read_run(path):
    run = defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 4:
                run[parts[0]].append((int(parts[3]), parts[2]))
    return {q: [d for _, d in sorted(v)] for q, v in run.items()}


def ndcg10(ranked, rels):
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted(rels.values(), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def main():
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    a_run, b_run, qrels = read_run(sys.argv[1]), read_run(sys.argv[2]), read_qrels(sys.argv[3])
    queries = sorted(q for q in qrels if qrels[q])
    a = [ndcg10(a_run.get(q, []), qrels[q]) for q in queries]
    b = [ndcg10(b_run.get(q, []), qrels[q]) for q in queries]
    d = [y - x for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else 0.0
    z = mean / (sd / math.sqrt(n)) if sd > 0 else 0.0
    p = math.erfc(abs(z) / math.sqrt(2))
    rng = random.Random(17)
    boots = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(10000))
    lo, hi = boots[249], boots[9749]
    better = sum(1 for x in d if x > 0)
    worse = sum(1 for x in d if x < 0)
    print(f"| queries | nDCG@10 A | nDCG@10 B | B − A | 95 % bootstrap interval | paired p | B better / worse / same |")
    print(f"|---:|---:|---:|---:|---|---:|---|")
    print(
        f"| {n} | {sum(a) / n:.4f} | {sum(b) / n:.4f} | {mean:+.4f} | [{lo:+.4f}, {hi:+.4f}] | {p:.3f} "
        f"| {better} / {worse} / {n - better - worse} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

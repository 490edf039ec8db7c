#!/usr/bin/env python3
"""The paraphrase fixture through the release CLI under a given config: paraphrase
recall@3 and the should-find-nothing queries that return hits (false positives),
default search flags, clock pinned to the tests' now. For comparing settings that
move the minimum score's meaning (e.g. `memory.vector_weight`); the test
`ranking_paraphrase` measures the defaults through the engine.

    scripts/paraphrase-fixture.py CONFIG.json [CONFIG.json ...]

Needs CLAW_EMBED_MODEL_DIR and ORT_DYLIB_PATH (the local model) and target/release/claw.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLAW = os.path.join(ROOT, "target", "release", "claw")
FIXTURE = os.path.join(ROOT, "fixtures", "paraphrase")


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-3].strip(), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        ws = os.path.join(tmp, "ws")
        shutil.copytree(os.path.join(FIXTURE, "notes"), ws)
        base = dict(os.environ, CLAW_WORKSPACE=ws, CLAW_NOW="2026-11-05T12:00:00Z")
        subprocess.run([CLAW, "memory", "index"], env=base, check=True, capture_output=True)
        print("| config | paraphrase recall@3 | should-find-nothing queries returning hits |")
        print("|---|---:|---:|")
        for cfg in sys.argv[1:]:
            env = dict(base, CLAW_CONFIG=cfg)
            found3 = para = fp = none = 0
            with open(os.path.join(FIXTURE, "queries.tsv"), encoding="utf-8") as f:
                for line in f:
                    if not line.strip() or line.startswith("#"):
                        continue
                    _, q, exp = line.rstrip("\n").split("\t")
                    o = subprocess.run([CLAW, "memory", "search", q, "--json"], env=env, capture_output=True)
                    if o.returncode not in (0, 1):
                        print(o.stderr.decode(errors="replace"), file=sys.stderr)
                        return 2
                    paths = [h["path"] for h in json.loads(o.stdout)["results"]]
                    if exp != "-":
                        para += 1
                        found3 += exp in paths[:3]
                    else:
                        none += 1
                        fp += bool(paths)
            with open(cfg, encoding="utf-8") as f:
                shown = " ".join(f.read().split())
            print(f"| `{shown}` | {found3}/{para} | {fp}/{none} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

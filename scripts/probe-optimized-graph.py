#!/usr/bin/env python3
"""Session build time of the local model's graphs: optimized on load (what claw does) against a
graph ONNX Runtime saved already optimized (issue 30 item 2). Needs the `onnxruntime` wheel claw
installs the model with (1.24.4).

    python3 scripts/probe-optimized-graph.py MODEL_DIR [BUILDS]

MODEL_DIR: an installed all-MiniLM-L6-v2 (model.onnx, model_int8.onnx). Prints the median of BUILDS
(default 15) session builds per variant; the saved graphs go to a temporary directory.
"""
import os
import statistics
import sys
import tempfile
import time

import onnxruntime as ort


def build(path, level):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = 1
    so.enable_cpu_mem_arena = False
    t0 = time.perf_counter()
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return (time.perf_counter() - t0) * 1000


def main():
    model_dir = sys.argv[1]
    builds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    with tempfile.TemporaryDirectory() as tmp:
        for name in ["model.onnx", "model_int8.onnx"]:
            src = os.path.join(model_dir, name)
            if not os.path.exists(src):
                print(f"{name}: not installed")
                continue
            saved = os.path.join(tmp, name)
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            so.optimized_model_filepath = saved
            so.log_severity_level = 3
            ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
            a, b = [], []
            for _ in range(builds):
                a.append(build(src, ort.GraphOptimizationLevel.ORT_ENABLE_ALL))
                b.append(build(saved, ort.GraphOptimizationLevel.ORT_DISABLE_ALL))
            print(f"{name}: optimized on load p50 {statistics.median(a):.1f} ms, "
                  f"saved optimized graph p50 {statistics.median(b):.1f} ms "
                  f"({os.path.getsize(src) >> 20} / {os.path.getsize(saved) >> 20} MiB)")


if __name__ == "__main__":
    main()

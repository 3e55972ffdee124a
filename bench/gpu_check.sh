#!/usr/bin/env bash
# The GPU check: on an NVIDIA machine with nvcc, CMake, ninja and Python 3.12 (numpy, httpx, ...) but no
# network, from the repo root, after `python3 bench/gpu_prepare.py` packed .gpu/ here:
#
#     bench/gpu_check.sh OUT
#
# 1. builds tokchat's engine (libllama + CUDA for this GPU's compute capability only), llama-server, the RPC
#    worker and llama-quantize from the brought sources, with tokchat's patches, in one CMake tree
#    (backends/engine_build.py, exactly what `python3 dev.py run` does on such a machine);
# 2. makes a Qwen2.5-1.5B-shaped model with the real Qwen2 vocabulary and random weights (bench/gpu_model.py),
#    quantized to Q4_K_M by llama-quantize;
# 3. runs bench/gpu_check.py: greedy ids against llama-server, speed side by side, a killed engine, headless
#    and the TUI with every layer on the GPU.
# Everything lands in OUT: results.json, the build log and build.json, doctor.txt, tui.svg, engine and server logs.
set -uo pipefail
OUT=${1:?usage: bench/gpu_check.sh OUT}
mkdir -p "$OUT"
KIT=${GPU_KIT:-.gpu}
# the CUDA build or a loud failure (never a silent CPU build on the GPU machine)
export TOKCHAT_ACCELERATOR=${TOKCHAT_ACCELERATOR:-cuda}
export PYTHONUNBUFFERED=1 XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/tokchat-gpu-cache}
SITE=/tmp/tokchat-gpu-site
WORK=/tmp/tokchat-gpu-work
mkdir -p "$WORK"
started=$(date +%s)
stamp() { echo "gpu_check: $1 at +$(( $(date +%s) - started )) s" | tee -a "$OUT/timeline.txt"; }

{ nvidia-smi; nvcc --version || /usr/local/cuda/bin/nvcc --version; cmake --version; python3 --version; nproc; } \
  > "$OUT/machine.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
  "$KIT"/wheels/*.whl || exit 3
export PYTHONPATH="$SITE:$PWD"
stamp "wheels installed"

python3 -m backends.engine_build --source "$KIT/llama-src.tar.gz" --extra llama-quantize --jobs "$(nproc)" \
  > "$WORK/build.out" 2> >(tee "$OUT/build.txt" >&2) || { stamp "build FAILED"; exit 4; }
BUILD=$(tail -1 "$WORK/build.out")
cp "$BUILD/build.json" "$OUT/" ; cp "$BUILD/build.log" "$OUT/cmake-build.log"
python3 -c "import sys; from pathlib import Path; from backends.engine_build import install_libraries as i; \
i(Path(sys.argv[1]), Path(sys.argv[2]) / 'llama_cpp')" "$BUILD" "$SITE" || exit 5
ls -la "$SITE/llama_cpp/lib" > "$OUT/libs.txt"
stamp "engine built ($BUILD)"

PYTHONPATH="$PYTHONPATH:$KIT/gguf-py" python3 bench/gpu_model.py --vocab "$KIT/ggml-vocab-qwen2.gguf" \
  --out "$WORK/model-f16.gguf" ${GPU_MODEL_BLOCKS:+--blocks $GPU_MODEL_BLOCKS} > "$OUT/model.txt" 2>&1 || exit 6
"$BUILD/llama-quantize" "$WORK/model-f16.gguf" "$WORK/qwen2.5-1.5b-shape-random.Q4_K_M.gguf" Q4_K_M "$(nproc)" \
  >> "$OUT/model.txt" 2>&1 || exit 7
rm -f "$WORK/model-f16.gguf"
stamp "model made"

python3 bench/gpu_check.py "$OUT" --model "$WORK/qwen2.5-1.5b-shape-random.Q4_K_M.gguf" --server-bin "$BUILD" \
  ${GPU_CHECK_ARGS:-} 2>&1 | tee "$OUT/check.txt"
code=${PIPESTATUS[0]}
stamp "checks done (exit $code)"
exit "$code"

#!/usr/bin/env bash
# The GPU check: on an NVIDIA machine with nvcc, CMake, ninja and Python 3.12 (numpy, httpx, ...) but no
# network, from the repo root, after `python3 bench/gpu_prepare.py` packed .gpu/ here:
#
#     bench/gpu_check.sh OUT [all|build|check]
#
# build: 1. builds tokchat's engine (libllama + CUDA for this GPU's compute capability only), llama-server,
#    the RPC worker and llama-quantize from the brought sources, with tokchat's patches, in one CMake tree
#    (backends/engine_build.py, exactly what `python3 dev.py run` does on such a machine);
#    2. makes the models with the real Qwen2 vocabulary and random weights (bench/gpu_model.py), quantized to
#    Q4_K_M by llama-quantize: a Qwen2.5-1.5B-shaped main model whose blocks from $GPU_SILENT_FROM on add
#    nothing, its first K blocks as draft models, and a Qwen2.5-0.5B-shaped model;
# check: 3. runs bench/gpu_check.py: greedy ids against llama-server, speed side by side, a killed engine,
#    headless and the TUI with every layer on the GPU, draft-model speculation.
# The two halves can run as two commands on one warm machine (the build and the models stay in .gpu-work/,
# which git ignores); each is skipped where its result is already there.
# Everything lands in OUT: results.json, the build log and build.json, doctor.txt, tui.svg, engine and server logs.
set -uo pipefail
OUT=${1:?usage: bench/gpu_check.sh OUT [all|build|check]}
PHASE=${2:-all}
mkdir -p "$OUT"
KIT=${GPU_KIT:-.gpu}
WORK=${GPU_WORK:-$PWD/.gpu-work}
# the CUDA build or a loud failure (never a silent CPU build on the GPU machine)
export TOKCHAT_ACCELERATOR=${TOKCHAT_ACCELERATOR:-cuda}
export PYTHONUNBUFFERED=1 XDG_CACHE_HOME=${XDG_CACHE_HOME:-$WORK/cache}
SITE=$WORK/site
# the main model's shape (1.5b; 7b: 15 GB of F16 written beside the build, its first blocks draft) and the
# blocks that draft for it: GPU_MAIN_SHAPE=7b GPU_SILENT_FROM=2 GPU_DRAFT_BLOCKS="2 3 4 6 8" for a 7B
MAIN_SHAPE=${GPU_MAIN_SHAPE:-1.5b}
SILENT=${GPU_SILENT_FROM:-8}
PEAK=${GPU_PEAK:-20}
DRAFT_BLOCKS=${GPU_DRAFT_BLOCKS:-8 12 16 20 24 26}
mkdir -p "$WORK"
started=$(date +%s)
stamp() { echo "gpu_check: $1 at +$(( $(date +%s) - started )) s" | tee -a "$OUT/timeline.txt"; }

{ nvidia-smi; nvcc --version || /usr/local/cuda/bin/nvcc --version; cmake --version; python3 --version; nproc; } \
  > "$OUT/machine.txt" 2>&1
if [ ! -f "$SITE/.installed" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$KIT"/wheels/*.whl || exit 3
  touch "$SITE/.installed"
fi
export PYTHONPATH="$SITE:$PWD"
stamp "wheels installed"

MAIN=$WORK/qwen2.5-$MAIN_SHAPE-shape-random.Q4_K_M.gguf
SMALL=$WORK/qwen2.5-0.5b-shape-random.Q4_K_M.gguf
f16() {  # f16 TARGET.gguf ARGS...: the F16 model for TARGET, written by gpu_model.py (nothing if TARGET is there)
  local target=$1; shift
  [ -f "$target" ] && return 0
  PYTHONPATH="$PYTHONPATH:$KIT/gguf-py" python3 bench/gpu_model.py --vocab "$KIT/ggml-vocab-qwen2.gguf" \
    --out "$target.f16" --peak "$PEAK" "$@" > "$target.txt" 2>&1
}
# the F16 models are written while llama.cpp compiles (numpy on one core beside nvcc)
f16 "$MAIN" --shape "$MAIN_SHAPE" --silent-from "$SILENT" ${GPU_MODEL_BLOCKS:+--blocks $GPU_MODEL_BLOCKS} & writing_main=$!
f16 "$SMALL" --shape 0.5b & writing_small=$!

python3 -m backends.engine_build --source "$KIT/llama-src.tar.gz" --extra llama-quantize --jobs "$(nproc)" \
  > "$WORK/build.out" 2> >(tee "$OUT/build.txt" >&2) || { stamp "build FAILED"; exit 4; }
BUILD=$(tail -1 "$WORK/build.out")
cp "$BUILD/build.json" "$OUT/" ; cp "$BUILD/build.log" "$OUT/cmake-build.log"
python3 -c "import sys; from pathlib import Path; from backends.engine_build import install_libraries as i; \
i(Path(sys.argv[1]), Path(sys.argv[2]) / 'llama_cpp')" "$BUILD" "$SITE" || exit 5
ls -la "$SITE/llama_cpp/lib" > "$OUT/libs.txt"
stamp "engine built ($BUILD)"

wait "$writing_main" || { cat "$MAIN.txt"; exit 6; }
wait "$writing_small" || { cat "$SMALL.txt"; exit 6; }
for target in "$MAIN" "$SMALL"; do
  [ -f "$target" ] && continue
  "$BUILD/llama-quantize" "$target.f16" "$target.partial" Q4_K_M "$(nproc)" > "$target.quantize.txt" 2>&1 \
    || { tail -20 "$target.quantize.txt"; exit 7; }
  rm -f "$target.f16"
  mv "$target.partial" "$target"
done
DRAFTS=()
for k in $DRAFT_BLOCKS; do
  d=$WORK/qwen2.5-$MAIN_SHAPE-shape-random.first$k.Q4_K_M.gguf
  [ -f "$d" ] || PYTHONPATH="$PYTHONPATH:$KIT/gguf-py" python3 bench/gpu_model.py --source "$MAIN" \
    --keep-blocks "$k" --out "$d" > "$d.txt" 2>&1 || { cat "$d.txt"; exit 8; }
  DRAFTS+=("$d")
done
cat "$WORK"/*.txt > "$OUT/model.txt" 2>/dev/null
stamp "models made"
[ "$PHASE" = build ] && exit 0

python3 bench/gpu_check.py "$OUT" --model "$MAIN" --server-bin "$BUILD" --small "$SMALL" --drafts "${DRAFTS[@]}" \
  ${GPU_CHECK_ARGS:-} 2>&1 | tee "$OUT/check.txt"
code=${PIPESTATUS[0]}
stamp "checks done (exit $code)"
exit "$code"

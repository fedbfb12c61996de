#!/usr/bin/env bash
# The GPU check, for a GPU machine that is available only briefly (under 8 minutes on one NVIDIA GPU):
#   1. the GPU test suite (every test marked `gpu`) on real CuPy: the very tests that run on the strict CuPy
#      stand-in in every CPU run (tests/strict_cupy.py), now against the device; CUDA graphs of the decode step
#      first (tests/test_cuda_graphs.py: capture, replay against the eager step, the refusals of capture);
#   2. bench decode: batch-1 decode of a random Llama-3.2-1B-shaped checkpoint in float16 against the GPU's
#      measured memory bandwidth (its HBM bound), and the engine's decode with CUDA graphs against --enforce-eager;
#   3. bench serve: sequential, static and continuous batching on the GPU, continuous once more without graphs.
# Usage: bash scripts/gpu_check.sh [OUT_DIR]   (logs land in OUT_DIR, default ./gpu-check)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python -c "import cupy" 2>/dev/null || python -m pip install --quiet -e ".[gpu]" || exit 1
python -c "import torch, transformers" 2>/dev/null || python -m pip install --quiet -e ".[dev]" || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
status=0
timeout 120 python -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_graphs.py 2>&1 | tee "$out/graph-tests.log" \
    || status=1
timeout 300 python -m pytest -q -p no:cacheprovider -m gpu tests/ --ignore=tests/test_cuda_graphs.py 2>&1 \
    | tee "$out/gpu-tests.log" || status=1
timeout 150 python -m tinyinfer bench decode --random llama-1b --device cuda --dtype float16 --no-hf \
    --prompt-tokens 128 --tokens 128 --rounds 3 2>&1 | tee "$out/bench-decode.log" || status=1
timeout 90 python -m tinyinfer bench serve --device cuda --requests 64 --concurrency 32 --rounds 1 \
    2>&1 | tee "$out/bench-serve.log" || status=1
exit $status

#!/usr/bin/env bash
# On the H200 host (torch 2.11): the eager time of the scatter/indexing problems at full
# size (each should take >= 1 ms), kernelwright against PyTorch on them, and the op tests
# of advanced indexing, scatters, NaN reductions, pooling and LSTM shapes.
#   bash tools/gpu_check_indexing.sh [OUT]   (default OUT: out/gpu_indexing)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/gpu_indexing}
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"
"$PY" tools/check_suite_full.py --device cuda --only 'level1/11[45]_*' | tee "$OUT/eager.txt"
"$PY" -m kernelwright.cli bench src/kernelwright/suite --size full --only '*11[45]_*' \
    --out "$OUT/bench" | tee "$OUT/bench.txt"
"$PY" -m pytest -q tests/test_movement.py tests/test_reductions.py tests/test_pool.py \
    tests/test_recurrent.py | tee "$OUT/tests.txt"

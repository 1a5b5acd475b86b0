#!/bin/sh
# kernelwright optimize with the built-in generator over the bundled suite, full size,
# on the GPU machine; before/after speedups against PyTorch eager go to
# bench/results/optimize_h200/ (summary.json: per problem and the geometric means;
# report.txt: per kernel the winner, its gain and the WGSL diff; optimize.log: progress).
#
#   source .device/env.sh && sh bench/optimize_suite.sh [--level 2] [--only PATTERN] ...
#
# RUN_BUDGET (seconds, default 1200) bounds the whole run; problems not reached are
# not in the figures. Extra arguments go to kernelwright optimize. The state and plans
# stay in $WORK (default /tmp/kw_optimize): run again with --resume to go on.
set -e
RESULTS=${RESULTS:-bench/results/optimize_h200}
WORK=${WORK:-/tmp/kw_optimize}
mkdir -p "$RESULTS" "$WORK"
export KERNELWRIGHT_TUNE_DB="$WORK/tune.sqlite"  # a fresh cache: "before" is plain compile
python -m kernelwright.cli optimize --size full --generators builtin --attempts 8 \
    --max-kernels 3 --budget 60 --run-budget "${RUN_BUDGET:-1200}" --out "$WORK" "$@" \
    2> "$RESULTS/optimize.log"
cp "$WORK/summary.json" "$RESULTS/summary.json"
python -m kernelwright.cli optimize --report "$WORK" > "$RESULTS/report.txt"

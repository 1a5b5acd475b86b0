#!/bin/sh
# kernelwright optimize with the built-in generator over the bundled suite, full size,
# on the GPU machine; before/after speedups against PyTorch eager go to $RESULTS
# (default baselines/optimize_h200/; summary.json: per problem and the geometric
# means; report.txt: per kernel the winner, its gain and the WGSL diff; optimize.log:
# progress; optimize.sqlite and tune.sqlite: the run's state and the winners found).
#
#   source .device/env.sh && sh tools/optimize_suite.sh [--level 2] [--only PATTERN] ...
#
# Problems where no kernel improved keep the compiler's plan and are not measured again
# (--skip-unchanged: the module check costs ~50 s per problem at full size); the
# summary's geomean_gain is after / before over all problems, measured where a winner
# was swapped in and 1 elsewhere; its geomean_before/after cover the measured ones.
# RUN_BUDGET (seconds, default 1200) bounds one call; problems not reached are not in
# the figures. JOBS (default 4) problems run at once (optimize --jobs: verification side
# by side, every timing alone under the harness's GPU lock; 6-10 ran on the H200). Extra
# arguments go to kernelwright optimize (e.g. --redo 'level1/01*' to search problems of
# the state again, --only to run only some). The run is resumable across
# calls and sessions: the state is kept in $WORK (default out/kw_optimize) and copied
# to $RESULTS after the run; when $WORK has no state but $RESULTS (or $FROM) does, the
# run goes on from that one, so finished problems are skipped.
set -e
RESULTS=${RESULTS:-baselines/optimize_h200}
FROM=${FROM:-$RESULTS}
WORK=${WORK:-out/kw_optimize}
mkdir -p "$RESULTS" "$WORK"
if [ ! -f "$WORK/optimize.sqlite" ] && [ -f "$FROM/optimize.sqlite" ]; then
  cp "$FROM/optimize.sqlite" "$WORK/"
  [ -f "$FROM/tune.sqlite" ] && cp "$FROM/tune.sqlite" "$WORK/"
fi
# the run's own cache: "before" is plain compile plus what this run found for kernels
# of the same key in earlier problems
export KERNELWRIGHT_TUNE_DB="$WORK/tune.sqlite"
status=0
trap 'status=130' INT  # the limit's SIGINT: python writes its state, then we copy it
python -m kernelwright.cli optimize --size full --generators builtin --attempts 8 \
    --max-kernels 3 --budget 60 --run-budget "${RUN_BUDGET:-1200}" --out "$WORK" --resume \
    --jobs "${JOBS:-4}" --skip-unchanged "$@" 2>> "$RESULTS/optimize.log" || status=$?
cp "$WORK/summary.json" "$WORK/optimize.sqlite" "$RESULTS/"
[ -f "$WORK/tune.sqlite" ] && cp "$WORK/tune.sqlite" "$RESULTS/"
python -m kernelwright.cli optimize --report "$WORK" > "$RESULTS/report.txt"
exit $status

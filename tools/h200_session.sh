#!/usr/bin/env bash
# Everything kernelwright measures on the H200, in as few device calls as possible.
#
#   source .device/env.sh && bash tools/h200_session.sh TASK[=SECONDS] ...
#
# Tasks run in the order given, each under its own time limit (SIGINT at the limit, so
# benchmarks write what they measured); afterwards everything under $OUT/r is packed
# into $OUT/results.tar.gz (the device returns at most 8 files) and session.log says
# what ran and how long it took. Unpack it here and commit the parts worth keeping
# under baselines/.
#
#   suite     kernelwright bench (more arguments in BENCH_ARGS), bundled suite, full size, --compile-ref,
#             --jobs 8, resumed from baselines/suite_h200_full/results.sqlite when
#             that file is in the tree (issues 3 and 4): a problem whose result there
#             still matches is not run again; BENCH_FRESH=1 measures every problem asked
#   level2    the same for level 2 only (issue 5: level-2 geometric mean)
#   kernels   tools/kernels.py, every single-kernel figure of issue 5 (more arguments in
#             KERNELS_ARGS, e.g. "--only maxpool"; KERNELS_ARGS=--suite adds the level-2
#             suite: every figure of issue 5 in one call, 362 s on an H100 in 2026-12-06c)
#   checks    tools/kernels.py --shader-checks on CHECK_CASES (default: GEMMs, convs,
#             attention and memory-bound cases), every kernel with wgpu's runtime checks
#   matmul    tools/kernels.py --matmul-variants (which matmul knobs win; more arguments in
#             MATMUL_ARGS, e.g. "--only conv")
#   memory    tools/kernels.py --variants --reps 10 (elementwise/row-kernel knobs; more
#             arguments in MEMORY_ARGS, e.g. "--only cumsum")
#   wgsl      tools/wgsl_variants.py (kernels rewritten by hand: a convolution's window
#             loader, the GEMM's loop; more arguments in WGSL_ARGS, e.g. "--only conv3x3")
#   conv      tools/kernels.py --only conv, with each lowering (auto, gemm, direct)
#   attention  tools/kernels.py --only sdpa, with each path (fused, decomposed), and
#             --attention-variants (every setting of the fused kernel)
#   direct    tools/kernels.py --only conv --conv-lowering direct, OPT 1, 2 and 4
#   coop      tools/coop_matmul.py --quick (the accelerated mode's matrix units: Dawn's
#             subgroup matrices with KERNELWRIGHT_RUNTIME=dawn)
#   profile   tools/kernel_profile.py with PROFILE_ARGS (e.g. "--only level3/023 --variants
#             JSON", the JSON without spaces): each kernel's time in whole suite problems
#   models    the models suite at full size (kernelwright bench src/kernelwright/suite/models
#             --size full --compile-ref --jobs 3 --resume, the diffusers U-Nets included;
#             more arguments in MODELS_ARGS, e.g. "--only unet2d"), output $R/models
#   halfmodels  the same in bfloat16 (kernelwright bench src/kernelwright/suite/models
#             --size full --dtype bfloat16 --compile-ref --jobs 3 --resume: each model and
#             its float inputs cast, PyTorch timed in bf16 too, peak memory of both; more
#             arguments in HALFMODELS_ARGS, e.g. "--dtype float16" or "--set
#             batch_size=1"), output $R/halfmodels
#   smallmodels  tools/models.py --size full (the level-3 MLP, CNN and encoder block)
#   train     kernelwright bench --train --size full --steps 50 --resume (TRAIN_STEPS
#             overrides 50; more arguments in TRAIN_ARGS, e.g. "--only resnet50"): each
#             workload in its own worker with an equal share of the limit less 40 s as its
#             --timeout (TRAIN_TIMEOUT overrides), so that every workload finishes or is
#             reported TIMEOUT/CRASH with its stage in one call; 50 steps: the loss at each
#             step, the parameters after them and the timed steps fit 8 x 65 s of train=560
#             (the share is of the workloads TRAIN_ARGS names with --only, where it does)
#             where the 200-step parity may not; output $R/train
#   train200  the same at --steps 200 (the 200-step parity), output $R/train200; with
#             TRAIN_ARGS="--only ..." to split the workloads over calls
#   trainprofile  tools/train_profile.py --size full (issue 43: where a training step's GPU
#             time goes): per workload each kernel's time of one step grouped by kernel
#             name and template family, the top kernels' knobs, grid, bytes and FLOPs, the
#             step's wall and one-pass GPU time against the sum of its kernels, and PyTorch
#             eager's step under torch.profiler beside it; more arguments in
#             TRAINPROFILE_ARGS, e.g. "--only resnet18,unet --top 25": $R/train_profile.json
#   generate  tools/generate_bench.py (SmolLM2-135M's config, batch 1) in fp32 then bf16,
#             half the limit each (more arguments in GENERATE_ARGS, e.g. "--contexts 2048
#             --torch-compile-mode none"): $R/generate_fp32.json, $R/generate_bf16.json
#   genmodels  tools/generate_bench.py on the workloads beyond SmolLM2's greedy decoding
#             (batch 1), those GENMODELS names (default "olmoe whisper beams"): olmoe,
#             OLMoE-1B-7B's config (64 experts, 8 a token; 6.9B parameters) at context
#             512, and whisper, Whisper tiny's (30 s of audio, 4 task tokens continued),
#             each in fp32 then bf16; beams, SmolLM2's config with 4 beams at context 512
#             in fp32; not by default (each two runs more): mamba, Mamba-130M's config at
#             context 64 (its prompt plan unrolls the scan: 3805 kernels), and llava, CLIP ViT-B/16 at 224 px with SmolLM2-135M's Llama
#             (one image, 196 of its 256 prompt tokens), each in fp32 then bf16
#             (GENMODELS="mamba llava" ... genmodels=560; torch.compile of Mamba's
#             PyTorch scan may take its run's whole share: its row is then missing, the
#             others saved); an equal share of the limit per run (more arguments in
#             GENMODELS_ARGS, e.g. "--torch-compile-mode none"; each run sets its
#             contexts): $R/genmodels_olmoe_float32.json, ..._bfloat16.json,
#             $R/genmodels_{whisper,mamba,llava}_*.json, $R/genmodels_beams_float32.json
#   accelerated  the accelerated f16 GEMMs and SDPA on Dawn's subgroup matrices against
#             cuBLAS f16 and PyTorch's f16 SDPA (KERNELWRIGHT_RUNTIME=dawn tools/kernels.py
#             --only gemm_4096_accelerated_f16,sdpa_16x16_1024_e64_accelerated_f16,
#             sdpa_causal_16x16_1024_e64_accelerated_f16,conv3x3_64ch_128x128_b32_accelerated_f16,conv3x3_256ch_56x56_b32_accelerated_f16,gemm_8192_accelerated_f16, a
#             third of the limit: $R/kernels_accelerated.json),
#             then kernelwright bench --accelerated --size full --level 2 --jobs 4 on Dawn
#             ($R/accelerated)
#   compiletime  tools/compile_time.py --pipelines on the GPU machine (where compile time
#             goes with NVIDIA's shader compiler): generate's two plans in fp32, then the
#             training steps of COMPILETIME_TRAIN (default resnet18,unet,whisper): each
#             stage's wall (CPU) seconds, $R/compile_time.txt
#   half      tools/kernels.py --half: f32 against f16 and bf16 storage (a decode linear,
#             an elementwise chain, a layernorm, a GEMM), PyTorch in the same dtype:
#             $R/kernels_half.json
#   runtimes  tools/kernels.py --exclude accelerated (every strict case) on Dawn, then on
#             wgpu-native, half the limit each (more arguments in RUNTIMES_ARGS, e.g.
#             "--only gemm"): $R/kernels_dawn.json, $R/kernels_wgpu.json
#   optimize  tools/optimize_suite.sh (issue 6, built-in generator; more arguments in
#             OPT_ARGS, e.g. "--level 2" or "--redo level1/02*": split on spaces, no
#             quotes, globs passed as they are), resumed from the state in out/kw_optimize
#             or baselines/optimize_h200/
#   tests     the op tests through Vulkan on the H200 (torch of the host)
#   ab        the compiler of another commit against the working tree's, in one call: its
#             src/ from .ab_base.tar.gz (tools/ab_base.sh REV; carry it), then for each of
#             base and head tools/kernels.py with KERNELS_ARGS (when set) and kernelwright
#             bench with AB_BENCH_ARGS (when set, e.g. "--size full --jobs 2 --only
#             level3/007_mingpt_mlp_block"), output under $R/ab_base and $R/ab_head, and
#             a table of both kernels.py runs in the session log
#   shadercache  the kernels task with NVIDIA's shader disk cache kept under
#             $R/shadercache: read it here with tools/nv_shader_stats.py (registers and
#             instruction mix of each pipeline the driver compiled; --sass disassembles)
#   gemmvar   tools/wgsl_variants.py once per run in GEMMVAR, runs separated by ";", each
#             "CASE VARIANT [KNOBS-JSON]" (e.g. GEMMVAR='gemm_4096 generated;gemm_4096
#             store_half {"BN":128,"TN":8};gemm_4096 generated {"ROWS":1}'; the store_*
#             and warp* variants need 128 x 128 tiles), each in its own process with
#             its own shader cache under $R/gemmvar/cacheN (read them here with
#             tools/nv_shader_stats.py --sass); results $R/gemmvar/runN.json
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT}
R="$OUT/r"
mkdir -p "$R"
LOG="$OUT/session.log"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}

limit() { timeout -s INT -k 30 "$@"; }

# The optional model libraries (the models suite, generate, the training references):
# wheels put under .device/tf (transformers and its dependencies: tools/device_wheels.sh)
# and .device/tv (torchvision and timm built for the device's torch) by whoever prepared
# .device;
# installed once per call into /tmp/extra (the device has no network).
mapfile -t extra < <(ls .device/tf/*.whl .device/tv/*.whl 2>/dev/null)
if [ ${#extra[@]} -gt 0 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/extra \
    "${extra[@]}" >> "$LOG" 2>&1
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/extra
fi

run_task() {
  local task=${1%%=*} secs=${1#*=}
  [ "$secs" = "$1" ] && secs=300
  local start=$SECONDS
  echo "== $task (limit ${secs}s) $(date -u +%H:%M:%S)" >> "$LOG"
  case "$task" in
    suite|level2)
      local dir="$R/$task" args=()
      mkdir -p "$dir"
      [ "$task" = level2 ] && args+=(--level 2)
      read -r -a extra <<< "${BENCH_ARGS:-}"  # e.g. BENCH_ARGS="--only level1/0*"
      args+=("${extra[@]}")
      [ -f "baselines/suite_h200_full/results.sqlite" ] && [ "$task" = suite ] &&
        [ -z "${BENCH_FRESH:-}" ] && cp baselines/suite_h200_full/results.sqlite "$dir/"
      # 8 workers: ran the whole suite on the H200 (128 GB host) with inputs drawn on the GPU
      limit "$secs" python3 -m kernelwright.cli bench --size full --compile-ref --jobs 8 \
        --resume --out "$dir" "${args[@]}" > "$dir/bench.log" 2>&1
      rm -rf "$dir/work"
      tail -12 "$dir/bench.log" >> "$LOG" ;;
    kernels) read -r -a kargs <<< "${KERNELS_ARGS:-}"  # e.g. KERNELS_ARGS="--only maxpool"
             limit "$secs" python3 tools/kernels.py "${kargs[@]}" --out "$R/kernels.json" \
               >> "$LOG" 2>&1 ;;
    checks) limit "$secs" python3 tools/kernels.py --shader-checks --out "$R/kernels_checks.json" \
              --only "${CHECK_CASES:-gemm_4096,gemm_irr,linear,conv3x3_64ch_128,conv1d,conv3d,sdpa_16,softmax_16384,layernorm,cumsum,maxpool,elementwise}" \
              --exclude accelerated >> "$LOG" 2>&1 ;;
    matmul) read -r -a margs <<< "${MATMUL_ARGS:-}"  # e.g. MATMUL_ARGS="--only conv"
            limit "$secs" python3 tools/kernels.py --matmul-variants "${margs[@]}" \
              --out "$R/matmul_variants.json" >> "$LOG" 2>&1 ;;
    memory) read -r -a vargs <<< "${MEMORY_ARGS:-}"  # e.g. MEMORY_ARGS="--only cumsum"
            limit "$secs" python3 tools/kernels.py --variants --reps 10 "${vargs[@]}" \
              --out "$R/memory_variants.json" >> "$LOG" 2>&1 ;;
    wgsl) read -r -a wargs <<< "${WGSL_ARGS:-}"
          limit "$secs" python3 tools/wgsl_variants.py "${wargs[@]}" \
            --out "$R/wgsl_variants.json" >> "$LOG" 2>&1 ;;
    conv)
      for lowering in auto gemm direct; do
        limit $((secs / 3)) python3 tools/kernels.py --only conv --exclude accelerated \
          --conv-lowering "$lowering" \
          --out "$R/conv_$lowering.json" >> "$LOG" 2>&1
      done ;;
    direct)
      for opt in 1 2 4; do
        limit $((secs / 3)) python3 tools/kernels.py --only conv --exclude accelerated \
          --conv-lowering direct \
          --conv-opt "$opt" --out "$R/conv_direct_opt$opt.json" >> "$LOG" 2>&1
      done ;;
    attention)
      for path in fused decomposed; do
        limit $((secs / 3)) python3 tools/kernels.py --only sdpa --exclude accelerated \
          --attention "$path" --out "$R/attention_$path.json" >> "$LOG" 2>&1
      done
      limit $((secs / 3)) python3 tools/kernels.py --attention-variants \
        --out "$R/attention_variants.json" >> "$LOG" 2>&1 ;;
    coop) KERNELWRIGHT_RUNTIME=dawn limit "$secs" python3 tools/coop_matmul.py --quick \
            --out "$R/coop_matmul.json" >> "$LOG" 2>&1 ;;
    profile) read -r -a pargs <<< "${PROFILE_ARGS:-}"
             limit "$secs" python3 tools/kernel_profile.py "${pargs[@]}" \
               --out "$R/profile.json" >> "$LOG" 2>&1 ;;
    models)
      mkdir -p "$R/models"
      read -r -a margs <<< "${MODELS_ARGS:-}"  # e.g. MODELS_ARGS="--only unet2d"
      limit "$secs" python3 -m kernelwright.cli bench src/kernelwright/suite/models \
        --size full --compile-ref --jobs 3 --resume --out "$R/models" "${margs[@]}" \
        > "$R/models/bench.log" 2>&1
      rm -rf "$R/models/work"
      tail -14 "$R/models/bench.log" >> "$LOG" ;;
    halfmodels)
      mkdir -p "$R/halfmodels"
      read -r -a hargs <<< "${HALFMODELS_ARGS:-}"  # e.g. HALFMODELS_ARGS="--only llama"
      limit "$secs" python3 -m kernelwright.cli bench src/kernelwright/suite/models \
        --size full --dtype bfloat16 --compile-ref --jobs 3 --resume --out "$R/halfmodels" \
        "${hargs[@]}" > "$R/halfmodels/bench.log" 2>&1
      rm -rf "$R/halfmodels/work"
      tail -14 "$R/halfmodels/bench.log" >> "$LOG" ;;
    smallmodels) limit "$secs" python3 tools/models.py --size full --out "$R/models.json" \
                   >> "$LOG" 2>&1 ;;
    train|train200)
      local dir="$R/$task" steps=${TRAIN_STEPS:-50} count
      [ "$task" = train200 ] && steps=200
      mkdir -p "$dir"
      read -r -a targs <<< "${TRAIN_ARGS:-}"  # e.g. TRAIN_ARGS="--only resnet50"
      count=$(grep -o -- "--only" <<< "${TRAIN_ARGS:-}" | wc -l)  # the workloads asked,
      [ "$count" -gt 0 ] || count=$(ls src/kernelwright/suite/training/[a-z]*.py | wc -l)
      limit "$secs" python3 -m kernelwright.cli bench --train --size full --steps "$steps" \
        --timeout "${TRAIN_TIMEOUT:-$(( (secs - 40) / count ))}" --resume --out "$dir" \
        "${targs[@]}" > "$dir/bench.log" 2>&1
      tail -14 "$dir/bench.log" >> "$LOG" ;;
    trainprofile) read -r -a targs <<< "${TRAINPROFILE_ARGS:-}"  # e.g. "--only mlp,cnn"
      limit "$secs" python3 tools/train_profile.py --size full --out "$R/train_profile.json" \
        "${targs[@]}" >> "$LOG" 2>&1 ;;
    generate)
      limit $((secs / 2)) python3 tools/generate_bench.py $GENERATE_ARGS \
        --out "$R/generate_fp32.json" >> "$LOG" 2>&1
      limit $((secs / 2)) python3 tools/generate_bench.py --dtype bfloat16 $GENERATE_ARGS \
        --out "$R/generate_bf16.json" >> "$LOG" 2>&1 ;;
    genmodels)
      read -r -a gargs <<< "${GENMODELS_ARGS:-}"  # e.g. GENMODELS_ARGS="--reps 2"
      local runs=${GENMODELS:-olmoe whisper beams} n=0 w model ctx dtype
      local -A model_of=([olmoe]=olmoe [whisper]=whisper-tiny [mamba]=mamba [llava]=llava) \
        ctx_of=([olmoe]=512 [whisper]=3000 [mamba]=64 [llava]=256)  # Whisper: its 30 s
      for w in $runs; do  # the runs: two a model, one of beams
        [ -n "${model_of[$w]:-}" ] && n=$((n + 2))
        [ "$w" = beams ] && n=$((n + 1))
      done
      for w in $runs; do
        if [ -n "${model_of[$w]:-}" ]; then
          model=${model_of[$w]} ctx=${ctx_of[$w]}
          for dtype in float32 bfloat16; do
            limit $((secs / n)) python3 tools/generate_bench.py --model "$model" \
              --dtype "$dtype" --contexts "$ctx" "${gargs[@]}" \
              --out "$R/genmodels_${w}_$dtype.json" >> "$LOG" 2>&1
          done
        elif [ "$w" = beams ]; then
          limit $((secs / n)) python3 tools/generate_bench.py --model smollm2 --num-beams 4 \
            --contexts 512 "${gargs[@]}" --out "$R/genmodels_beams_float32.json" >> "$LOG" 2>&1
        else
          echo "genmodels: no workload $w (olmoe, whisper, mamba, llava, beams)" >> "$LOG"
        fi
      done ;;
    accelerated)
      KERNELWRIGHT_RUNTIME=dawn limit $((secs / 3)) python3 tools/kernels.py \
        --only gemm_4096_accelerated_f16,sdpa_16x16_1024_e64_accelerated_f16,sdpa_causal_16x16_1024_e64_accelerated_f16,conv3x3_64ch_128x128_b32_accelerated_f16,conv3x3_256ch_56x56_b32_accelerated_f16,gemm_8192_accelerated_f16 \
        --out "$R/kernels_accelerated.json" >> "$LOG" 2>&1
      mkdir -p "$R/accelerated"
      KERNELWRIGHT_RUNTIME=dawn limit $((secs - secs / 3)) python3 -m kernelwright.cli bench \
        --accelerated --size full --level 2 --jobs 4 --resume --out "$R/accelerated" \
        > "$R/accelerated/bench.log" 2>&1
      rm -rf "$R/accelerated/work"
      tail -12 "$R/accelerated/bench.log" >> "$LOG" ;;
    half) limit "$secs" python3 tools/kernels.py --half --out "$R/kernels_half.json" \
            >> "$LOG" 2>&1 ;;
    compiletime)
      limit $((secs / 2)) python3 tools/compile_time.py --generate float32 --pipelines \
        > "$R/compile_time.txt" 2>> "$LOG"
      limit $((secs / 2)) python3 tools/compile_time.py --train "${COMPILETIME_TRAIN:-resnet18,unet,whisper}" \
        --pipelines >> "$R/compile_time.txt" 2>> "$LOG" ;;
    runtimes)
      read -r -a rargs <<< "${RUNTIMES_ARGS:-}"  # e.g. RUNTIMES_ARGS="--only gemm"
      for rt in dawn wgpu; do
        KERNELWRIGHT_RUNTIME=$rt limit $((secs / 2)) python3 tools/kernels.py \
          --exclude accelerated "${rargs[@]}" --out "$R/kernels_$rt.json" >> "$LOG" 2>&1
      done ;;
    optimize)
      read -r -a opt <<< "${OPT_ARGS:-}"
      RESULTS="$R/optimize" FROM=baselines/optimize_h200 RUN_BUDGET=$((secs - 45)) \
        limit "$secs" sh tools/optimize_suite.sh "${opt[@]}" >> "$LOG" 2>&1
      tail -3 "$R/optimize/optimize.log" >> "$LOG" ;;
    tests) limit "$secs" python3 -m pytest -q -p no:cacheprovider -p no:timeout tests \
             --ignore=tests/harness --ignore=tests/optimize > "$R/tests.log" 2>&1
           tail -5 "$R/tests.log" >> "$LOG" ;;
    ab) if [ ! -f .ab_base.tar.gz ]; then
          echo "ab: no .ab_base.tar.gz (run tools/ab_base.sh REV here, carry it)" >> "$LOG"
        else
          rm -rf /tmp/kw_base && mkdir -p /tmp/kw_base && tar xzf .ab_base.tar.gz -C /tmp/kw_base
          echo "ab: base $(cat /tmp/kw_base/AB_BASE_REV 2>/dev/null || echo '?')" >> "$LOG"
          read -r -a kargs <<< "${KERNELS_ARGS:-}"
          read -r -a bargs <<< "${AB_BENCH_ARGS:-}"
          [ ${#kargs[@]} -eq 0 ] && [ ${#bargs[@]} -eq 0 ] &&
            echo "ab: nothing to run (set KERNELS_ARGS and/or AB_BENCH_ARGS)" >> "$LOG"
          local parts=$(( ${#kargs[@]} > 0 )) ; parts=$(( (parts + (${#bargs[@]} > 0)) * 2 ))
          for side in base head; do
            local pp=${PYTHONPATH:-}
            [ "$side" = base ] && pp=/tmp/kw_base/src${PYTHONPATH:+:$PYTHONPATH}
            mkdir -p "$R/ab_$side"
            [ ${#kargs[@]} -gt 0 ] && PYTHONPATH=$pp limit $((secs / parts)) python3 tools/kernels.py \
              "${kargs[@]}" --out "$R/ab_$side/kernels.json" >> "$LOG" 2>&1
            [ ${#bargs[@]} -gt 0 ] && PYTHONPATH=$pp limit $((secs / parts)) python3 -m kernelwright.cli \
              bench "${bargs[@]}" --out "$R/ab_$side/bench" >> "$LOG" 2>&1
          done
          python3 - "$R" >> "$LOG" 2>&1 <<'PY'
import json, sys
from pathlib import Path
r = Path(sys.argv[1])
runs = {s: {c["case"]: c for c in json.loads((r / f"ab_{s}/kernels.json").read_text())["cases"]}
        for s in ("base", "head") if (r / f"ab_{s}/kernels.json").exists()}
if len(runs) == 2:
    print(f"{'case':44s} {'base ms':>9s} {'head ms':>9s} {'head/base speed':>15s}")
    for name, h in runs["head"].items():
        b = runs["base"].get(name)
        if b and b.get("kernelwright_ms") and h.get("kernelwright_ms"):
            print(f"{name:44s} {b['kernelwright_ms']:9.4f} {h['kernelwright_ms']:9.4f} "
                  f"{b['kernelwright_ms'] / h['kernelwright_ms']:15.3f}")
for s in ("base", "head"):
    f = r / f"ab_{s}/baselines.json"
    if f.exists():
        for p in json.loads(f.read_text())["problems"]:
            print(s, p["name"], p.get("time_ms"), p.get("ref_eager_ms"), p.get("correct"))
PY
        fi ;;
    shadercache) rm -rf /tmp/kw_glcache && mkdir -p /tmp/kw_glcache
           ( export __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \
               __GL_SHADER_DISK_CACHE_PATH=/tmp/kw_glcache; run_task "kernels=$secs" )
           cp -r /tmp/kw_glcache "$R/shadercache" ;;
    gemmvar) local n=0 spec
           mkdir -p "$R/gemmvar"
           IFS=';' read -r -a specs <<< "${GEMMVAR:-}"
           [ ${#specs[@]} -eq 0 ] && echo "gemmvar: set GEMMVAR" >> "$LOG"
           for spec in "${specs[@]}"; do
             n=$((n + 1))
             read -r case variant knobs <<< "$spec"
             local cache="$R/gemmvar/cache$n"
             mkdir -p "$cache"
             echo "gemmvar $n: $spec" >> "$LOG"
             __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \
               __GL_SHADER_DISK_CACHE_PATH="$cache" limit "$secs" python3 \
               tools/wgsl_variants.py --only "$case" --variants "$variant" \
               ${knobs:+--knobs "$knobs"} --out "$R/gemmvar/run$n.json" >> "$LOG" 2>&1
           done ;;
    *) echo "unknown task $task" >> "$LOG" ;;
  esac
  echo "== $task done: exit $?, $((SECONDS - start)) s" >> "$LOG"
}

for task in "$@"; do
  run_task "$task"
done
tar -czf "$OUT/results.tar.gz" -C "$R" . && rm -rf "$R"
cat "$LOG"

#!/usr/bin/env bash
# Recipe choices for the SmolLM2 drafters, decided from learning curves at equal wall time: every run
# trains for the same budget of minutes (`--max-minutes`, the LR schedule spread over it) on the same
# regenerated data and cached features, and validates on the same held-out rows and blocks.
#   scripts/curves_smollm2.sh [RUN ...]      (default: all runs below; a finished run is skipped)
# Then: lilicorr report --curves runs/curves/A runs/curves/B ... --out docs/results/smollm2-<topic>.png
# Knobs: MINUTES (budget per run, 8), ROWS (training rows of the data, 1024), THREADS (each run's threads, in
# place of the run's own: two runs side by side at 1 thread each), RUNS_DIR (default runs/curves: another keeps
# a second budget of the same run names apart), VAL_DATA and VAL_FEATS (validation
# file, default the first rows of DATA), DATA and FEATS (the first-turn
# data and its feature cache; e.g. a file merged from the finished shards of a running data job:
# `lilicorr data merge data/regen-smollm2/sharegpt.safetensors.shards --out data/regen-smollm2/sharegpt-first-head.safetensors`).
# Needs the first-turn data and its feature cache (STAGES=scale scripts/ship_smollm2.sh, then
# `lilicorr data features ... --out data/cache/features-smollm2-first`; its first ROWS rows suffice).
source "$(dirname "$0")/env.sh"
# the committed answer packs (data/packs/): their data files, rebuilt byte for byte where a fresh disk lacks them
[ -f data/prompts/sharegpt.jsonl ] || $L data prompts sharegpt --out data/prompts/sharegpt.jsonl
for p in data/packs/*.answers.safetensors; do
  [ ! -e "$p" ] || $L data unpack "$p" --target models/smollm2-135m-instruct > /dev/null
done
MINUTES=${MINUTES:-8}
ROWS=${ROWS:-1024}
DATA=${DATA:-data/regen-smollm2/sharegpt-first.safetensors}
FEATS=${FEATS:-data/cache/features-smollm2-first}
# VAL_DATA / VAL_FEATS: validate on another file's first rows (the v3 drafters: the mixed file's, both kinds of row)
VAL=${VAL_DATA:+--val-data $VAL_DATA --val-features ${VAL_FEATS:?VAL_FEATS with VAL_DATA}}
FIXED=data/regen-smollm2/sharegpt-fixed.safetensors
FIXED_FEATS=data/cache/features-smollm2-fixed
BASE="--target models/smollm2-135m-instruct --mode dflash --block-size 8 --gamma 4 --lr 1e-3 --seed 0
  --batch-size 8 --steps 1000000 --max-minutes $MINUTES --max-sequences $ROWS --checkpoint-minutes 2"
# today's shipped recipe (1 thread, 16 anchors per row, full-vocabulary logits) and the throughput recipe
TODAY="--threads 1 --anchors 16 --val-every 25"
FAST="--threads 2 --anchors 64 --train-vocab 8192 --val-every 100"
SPARSE="--threads 2 --anchors 16 --train-vocab 8192 --val-every 100 --lr 3e-3 --gamma 1"  # the best 8-minute recipe
# the head recipe of scripts/ship_smollm2.sh, on the frozen shipped backbone (the v3 data: DATA, FEATS and VAL below)
HEAD="$SPARSE --num-layers 1 --mode head --init models/smollm2-dflash --candidate-topk 8 --head-hidden-size 128
  --head-layers 2 --head-heads 4 --factor-dim 64 --logit-scale 8 --w-distill 0.25"
declare -A RUNS=(
  [today-d1]="$TODAY --num-layers 1"
  [fast-d1]="$FAST --num-layers 1"
  [fast-d2]="$FAST --num-layers 2"
  [fast-d3]="$FAST --num-layers 3"
  [dense-fullvocab-d1]="--threads 2 --anchors 64 --val-every 50 --num-layers 1"
  [fast-d1-fixed]="$FAST --num-layers 1 --data-override"
  [fast-d1-tinit]="$FAST --num-layers 1 --init-from-target"
  [fast-d1-lr3e-3]="$FAST --num-layers 1 --lr 3e-3"
  [fast-d1-lr3e-3-g1]="$FAST --num-layers 1 --lr 3e-3 --gamma 1"
  [sparse-g1]="$SPARSE --num-layers 1"
  [long-g1]="$FAST --num-layers 1 --lr 3e-3 --gamma 1"  # the budget question: MINUTES=24 ROWS=1344
  # distillation from the target's distribution, the T=0 / T=1 mix, regularisation, depth (on sparse-g1)
  [sparse-g1-kd05]="$SPARSE --num-layers 1 --kd-weight 0.5"
  [sparse-g1-kd1]="$SPARSE --num-layers 1 --kd-weight 1"
  [sparse-g1-greedy]="$SPARSE --num-layers 1 --train-rows greedy"
  [sparse-g1-sampled]="$SPARSE --num-layers 1 --train-rows sampled"
  [sparse-g1-greedy-kd05]="$SPARSE --num-layers 1 --train-rows greedy --kd-weight 0.5"
  [sparse-g1-wd01]="$SPARSE --num-layers 1 --weight-decay 0.1"
  [sparse-g1-d2]="$SPARSE --num-layers 2"
  [sparse-g1-d3]="$SPARSE --num-layers 3"
  [sparse-g1-d5]="$SPARSE --num-layers 5"
  # the LiLiCorr head on the frozen shipped DFlash backbone (its lattice holds twice the accepted prefix the walk
  # finds, docs/archive/curves-smollm2-v3.md): budget, width, depth, lr, the distillation term
  [head-ship]="$HEAD"
  [head-w256]="$HEAD --head-hidden-size 256"
  [head-l4]="$HEAD --head-layers 4"
  [head-lr1e-3]="$HEAD --lr 1e-3"
  [head-nodistill]="$HEAD --w-distill 0"
  # the head's log-prob features and lattice at the full vocabulary, as the engine computes them (with the 8 k
  # training vocabulary 28 % of the drafter's mass lies outside it and 27 % of the top-8 lattices differ)
  [head-fullvocab]="${HEAD/--train-vocab 8192 /}"
  # the same two ways at the 8 k training vocabulary's price: 4 096 sampled negatives a step (sampled softmax)
  [head-neg4k]="$HEAD --train-vocab-negatives 4096"
  [sparse-g1-neg4k]="$SPARSE --num-layers 1 --train-vocab-negatives 4096"
  # γ and lr together at a longer budget on the whole greedy set (the 8-minute choice γ = 1, lr 3e-3 was made on
  # 1 024 rows; a flatter slot weighting or a lower lr may pay only later)
  [sparse-g1-lr1e-3]="$SPARSE --num-layers 1 --lr 1e-3"
  [sparse-g4]="$SPARSE --num-layers 1 --gamma 4"
  [sparse-g4-lr1e-3]="$SPARSE --num-layers 1 --gamma 4 --lr 1e-3"
  # the data question (v6): the v5 recipe on the greedy first turns alone against the same rows and ShareGPT's own
  # answers, from one file (DATA=data/regen-smollm2/sharegpt-first-greedy-fixed.safetensors, FEATS its cache, VAL_DATA
  # the mixed file, as `TRAIN_ROWS=greedy-fixed scripts/ship_smollm2.sh` makes them); its first GREEDY_ROWS rows are
  # the greedy first turns (4 244 of this regeneration's 4 299 greedy rows: `merge --held-out` dropped 55 of them and
  # 167 fixed answers whose prompt is, or repeats, a validation prompt)
  [v5-greedy]="$SPARSE --num-layers 1 --lr 1e-3 --max-sequences ${GREEDY_ROWS:-4244}"
  [v5-greedy-fixed]="$SPARSE --num-layers 1 --lr 1e-3 --max-sequences 1000000"
  # the next data question: the greedy first turns plus the greedily answered later turns (TRAIN_ROWS=greedy-turns;
  # DATA=data/regen-smollm2/sharegpt-first-greedy-turns.safetensors, FEATS its cache). Its first 4 244 rows are the
  # same greedy first turns (and `--reuse` links their feature shards), so `v5-greedy` on it is the same baseline; run
  # the two side by side in a new RUNS_DIR, as the greedy-fixed pair ran (equal minutes need equal sharing of the cores).
  [v5-greedy-turns]="$SPARSE --num-layers 1 --lr 1e-3 --max-sequences 1000000"
  # depth again at a longer budget (docs/archive/curves-smollm2-v6-turns-80.md: the one-layer v5 recipe plateaus near
  # 1.68 held-out greedy τ by ≈ 4 000 steps, whichever data): 2 and 3 layers on the same greedy first turns, two
  # side by side at 1 thread, MINUTES=80 as the one-layer run there (validation every 200 steps: it is not training time,
  # but at every 100 it took a third of the wall time)
  # (v5-greedy-d1: the one-layer baseline validated as often, for a pair run on other data than the 80-minute page's)
  [v5-greedy-d1]="$SPARSE --num-layers 1 --lr 1e-3 --val-every 200 --max-sequences ${GREEDY_ROWS:-4244}"
  [v5-greedy-d2]="$SPARSE --num-layers 2 --lr 1e-3 --val-every 200 --max-sequences ${GREEDY_ROWS:-4244}"
  [v5-greedy-d3]="$SPARSE --num-layers 3 --lr 1e-3 --val-every 200 --max-sequences ${GREEDY_ROWS:-4244}"
)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(today-d1 fast-d1 dense-fullvocab-d1 fast-d2 fast-d3 fast-d1-fixed fast-d1-tinit fast-d1-lr3e-3
  fast-d1-lr3e-3-g1 sparse-g1)
RUNS_DIR=${RUNS_DIR:-runs/curves}
mkdir -p $RUNS_DIR
for name in "${names[@]}"; do
  args=${RUNS[$name]:?unknown run $name}
  [ -z "${THREADS:-}" ] || args=$(sed -E "s/--threads [0-9]+/--threads $THREADS/" <<< "$args")
  data="--data $DATA --features $FEATS $VAL"
  if [[ $args == *--data-override* ]]; then  # ShareGPT's own answers; validated on the regenerated rows
    args=${args/--data-override/}
    data="--data $FIXED --features $FIXED_FEATS --val-data $DATA --val-features $FEATS"
  fi
  out=$RUNS_DIR/$name
  [ -f $out/draft/config.json ] && { echo "$name: done"; continue; }
  echo "$name: $args"
  # shellcheck disable=SC2086
  $L train draft $BASE $data $args --out $out/draft --run-dir $out --resume > $out.log 2>&1
done

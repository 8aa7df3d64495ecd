#!/usr/bin/env bash
# Reproduce the shipped tiny-s drafters end to end (the commands recorded in their model cards):
# regenerate training data with the target, train the vanilla DFlash and the co-trained LiLiCorr
# drafter with identical data, steps, seed and backbone geometry (in parallel, one thread each),
# then measure both with `lilicorr bench` and write the model cards.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1
L=.venv/bin/lilicorr
TARGET=models/tiny-s
DATA=data/regen-tiny-s.safetensors
STEPS=${STEPS:-1500}
COMMON="--target $TARGET --data $DATA --steps $STEPS --batch-size 8 --anchors 16 --block-size 8 --num-layers 2 --lr 1.5e-3 --gamma 4 --seed 0 --threads 1 --val-every 250"
HEAD="--candidate-topk 8 --head-hidden-size 64 --head-layers 2 --head-heads 4 --factor-dim 64 --logit-scale 8"

$L data regenerate --target $TARGET --out $DATA --num-sequences ${NUM_SEQ:-2560} --batch-size 32 --seed 0 --threads 2
$L train draft $COMMON --mode dflash --out models/tiny-s-dflash --resume > runs/train-tiny-s-dflash.log 2>&1 &
P1=$!
$L train draft $COMMON $HEAD --mode lilicorr --out models/tiny-s-lilicorr --resume > runs/train-tiny-s-lilicorr.log 2>&1 &
P2=$!
wait $P1 $P2
BENCH="$L bench --target $TARGET --draft models/tiny-s-dflash --draft models/tiny-s-lilicorr --num-prompts ${NUM_PROMPTS:-32} --max-new-tokens 128 --temperatures 0 1 --threads 2 --no-sweep --out runs/bench-tiny-s"
$BENCH
for arm in dflash lilicorr; do
  extra=""; [ $arm = lilicorr ] && extra=" $HEAD"
  $L card draft models/tiny-s-$arm --data-meta $DATA.json --bench runs/bench-tiny-s/results.json \
    --bench-command "$BENCH" \
    --command "lilicorr train draft $COMMON$extra --mode $arm --out models/tiny-s-$arm"
done

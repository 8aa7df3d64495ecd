#!/usr/bin/env bash
# Drafters for a tiny self-trained target, end to end (the commands recorded in their model cards):
# regenerate training data with the target, train the vanilla DFlash and the co-trained LiLiCorr drafter
# with identical data, steps, seed and backbone geometry (in parallel, one thread each), bench both and
# write the model cards.   Usage: scripts/ship_tiny_drafters.sh tiny-s|tiny-m
#   tiny-s: 2560 sequences, 1500 steps, the reference head recipe;
#   tiny-m: 2560 sequences, 1200 steps (to fit a session), the head with the decoupled gradient options,
#   benched on 16 prompts without long ones.
# Knobs: STEPS, NUM_SEQ, NUM_PROMPTS.
source "$(dirname "$0")/env.sh"
S=${1:?usage: scripts/ship_tiny_drafters.sh tiny-s|tiny-m}
TARGET=models/$S
DATA=data/regen-$S.safetensors
HEAD="--candidate-topk 8 --head-hidden-size 64 --head-layers 2 --head-heads 4 --factor-dim 64 --logit-scale 8"
case $S in
  tiny-s) STEPS=${STEPS:-1500}; PROMPTS=${NUM_PROMPTS:-32}; BENCH_EXTRA="" ;;
  tiny-m) STEPS=${STEPS:-1200}; PROMPTS=${NUM_PROMPTS:-16}; HEAD="$HEAD --clip-per-module --head-grad-to-backbone 0.25"
    BENCH_EXTRA="--long-prompts 0 --only tiny-m-dflash tiny-m-lilicorr tiny-m-lilicorr:top1 tiny-m-lilicorr:oracle" ;;
  *) echo "unknown target family $S (tiny-s or tiny-m)" >&2; exit 2 ;;
esac
COMMON="--target $TARGET --data $DATA --steps $STEPS --batch-size 8 --anchors 16 --block-size 8 --num-layers 2 --lr 1.5e-3 --gamma 4 --seed 0 --threads 1 --val-every 250"

[ -f $DATA ] || $L data regenerate --engine native --target $TARGET --out $DATA --num-sequences ${NUM_SEQ:-2560} --shard-size 32 --seed 0 --threads 2
for arm in dflash lilicorr; do
  extra=""; [ $arm = lilicorr ] && extra=" $HEAD"
  [ -f models/$S-$arm/config.json ] || $L train draft $COMMON$extra --mode $arm --out models/$S-$arm --resume \
    > runs/train-$S-$arm.log 2>&1 &
done
wait
BENCH="$L bench --target $TARGET --draft models/$S-dflash --draft models/$S-lilicorr --num-prompts $PROMPTS $BENCH_EXTRA --max-new-tokens 128 --temperatures 0 1 --threads 2 --no-sweep --out runs/bench-$S"
$BENCH
for arm in dflash lilicorr; do
  extra=""; [ $arm = lilicorr ] && extra=" $HEAD"
  $L card draft models/$S-$arm --data-meta $DATA.json --bench runs/bench-$S/results.json --bench-command "$BENCH" \
    --command "lilicorr train draft $COMMON$extra --mode $arm --out models/$S-$arm"
done

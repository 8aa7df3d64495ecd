#!/usr/bin/env bash
# Drafters for the medium target (models/tiny-m) with the short recipe of ship_tiny_s_drafters.sh
# (2560 regenerated sequences, STEPS steps — 1200, to fit a session —, seed 0, 2-layer backbone, block 8;
# LiLiCorr K=8 with the decoupled head-gradient options), DFlash and LiLiCorr in parallel, then a bench.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1
L=.venv/bin/lilicorr
TARGET=models/tiny-m
DATA=data/regen-tiny-m.safetensors
STEPS=${STEPS:-1200}
COMMON="--target $TARGET --data $DATA --steps $STEPS --batch-size 8 --anchors 16 --block-size 8 --num-layers 2 --lr 1.5e-3 --gamma 4 --seed 0 --threads 1 --val-every 250"
HEAD="--candidate-topk 8 --head-hidden-size 64 --head-layers 2 --head-heads 4 --factor-dim 64 --logit-scale 8 --clip-per-module --head-grad-to-backbone 0.25"
[ -f $DATA ] || $L data regenerate --target $TARGET --out $DATA --num-sequences 2560 --batch-size 32 --seed 0 --threads 2
[ -f models/tiny-m-dflash/config.json ] || $L train draft $COMMON --mode dflash --out models/tiny-m-dflash --resume \
  > runs/train-tiny-m-dflash.log 2>&1 &
[ -f models/tiny-m-lilicorr/config.json ] || $L train draft $COMMON $HEAD --mode lilicorr --out models/tiny-m-lilicorr \
  --resume > runs/train-tiny-m-lilicorr.log 2>&1 &
wait
$L bench --target $TARGET --draft models/tiny-m-dflash --draft models/tiny-m-lilicorr --num-prompts 16 --long-prompts 0 \
  --only tiny-m-dflash tiny-m-lilicorr tiny-m-lilicorr:top1 tiny-m-lilicorr:oracle \
  --max-new-tokens 128 --temperatures 0 1 --threads 2 --no-sweep --out runs/bench-tiny-m
for m in models/tiny-m-dflash models/tiny-m-lilicorr; do
  $L card draft $m --data-meta $DATA.json --bench runs/bench-tiny-m/results.json --bench-command "scripts/ship_tiny_m_drafters.sh"
done

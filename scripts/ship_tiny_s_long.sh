#!/usr/bin/env bash
# The "long" tiny-s recipe: 4× the regenerated data (10240 sequences, seed 1) and STEPS (default 4000)
# steps, otherwise exactly the recipe of ship_tiny_drafters.sh tiny-s. Vanilla DFlash and co-trained LiLiCorr
# train in parallel (one thread each). Every step resumes (--resume) if the session is cut. (The head-on-frozen-
# backbone arm trained here until commit e8f7b71 was dropped with its weights; its figures stay on
# docs/results/tiny-s-drafters.md.)
# The co-trained LiLiCorr uses LILICORR_OPTS (default: --clip-per-module --head-grad-to-backbone 0.25,
# chosen from the 1500-step A/B of docs/results/tiny-s-drafters.md (commit 98548e9: scripts/ab_head_gradient.sh); set LILICORR_OPTS="" for the reference).
source "$(dirname "$0")/env.sh"
TARGET=models/tiny-s
DATA=data/regen-tiny-s-10k.safetensors
STEPS=${STEPS:-4000}
COMMON="--target $TARGET --data $DATA --steps $STEPS --batch-size 8 --anchors 16 --block-size 8 --num-layers 2 --lr 1.5e-3 --gamma 4 --seed 0 --threads 1 --val-every 500"
HEAD="--candidate-topk 8 --head-hidden-size 64 --head-layers 2 --head-heads 4 --factor-dim 64 --logit-scale 8"

[ -f $DATA ] || $L data regenerate --engine native --target $TARGET --out $DATA --num-sequences 10240 --shard-size 64 --seed 1 --threads 2
[ -f models/tiny-s-dflash-long/config.json ] || $L train draft $COMMON --mode dflash --out models/tiny-s-dflash-long \
  --resume > runs/train-tiny-s-dflash-long.log 2>&1 &
LILICORR_OPTS=${LILICORR_OPTS---clip-per-module --head-grad-to-backbone 0.25}
[ -f models/tiny-s-lilicorr-long/config.json ] || $L train draft $COMMON $HEAD $LILICORR_OPTS --mode lilicorr \
  --out models/tiny-s-lilicorr-long --resume > runs/train-tiny-s-lilicorr-long.log 2>&1 &
wait

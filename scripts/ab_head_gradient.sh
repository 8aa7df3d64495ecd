#!/usr/bin/env bash
# A/B of the head-gradient options on the 1500-step tiny-s recipe (ship_tiny_drafters.sh tiny-s): the same
# co-trained LiLiCorr run as models/tiny-s-lilicorr (reference: one global clip, full head gradient into
# the backbone) but with --clip-per-module --head-grad-to-backbone 0.25. Output:
# models/tiny-s-lilicorr-decoupled; compared in scripts/bench_tiny_s.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1
.venv/bin/lilicorr train draft --target models/tiny-s --data data/regen-tiny-s.safetensors --steps 1500 \
  --batch-size 8 --anchors 16 --block-size 8 --num-layers 2 --lr 1.5e-3 --gamma 4 --seed 0 --threads 1 \
  --val-every 250 --candidate-topk 8 --head-hidden-size 64 --head-layers 2 --head-heads 4 --factor-dim 64 \
  --logit-scale 8 --mode lilicorr --clip-per-module --head-grad-to-backbone 0.25 \
  --out models/tiny-s-lilicorr-decoupled --resume

#!/usr/bin/env bash
# Train the DFlash2-selector and DSpark-Markov comparison arms on tiny-s with exactly the recipe of the
# shipped drafters (same regenerated data, steps, seed, backbone geometry: see ship_tiny_drafters.sh tiny-s),
# in parallel, one thread each. Domino's GRU arm trains the same way (--mode domino).
source "$(dirname "$0")/env.sh"
STEPS=${STEPS:-1500}
COMMON="--target models/tiny-s --data data/regen-tiny-s.safetensors --steps $STEPS --batch-size 8 --anchors 16 --block-size 8 --num-layers 2 --lr 1.5e-3 --gamma 4 --seed 0 --threads 1 --val-every 250"
for arm in ${ARMS:-dflash2 dspark}; do
  $L train draft $COMMON --mode $arm --candidate-topk 8 --arm-rank 64 --out models/arms/tiny-s-$arm --resume \
    > runs/train-tiny-s-$arm.log 2>&1 &
done
wait

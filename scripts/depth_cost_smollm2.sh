#!/usr/bin/env bash
# Depth judged by engine tokens/s (the drafters issue, item 4): what one draft–verify cycle costs in the
# engine with a DFlash drafter of 1, 2, 3 and 5 layers on SmolLM2-135M-Instruct, and so what τ a deeper
# drafter must reach to match the 1-layer one's tokens/s. The drafters are made by one training step
# (their weights are untrained: a cycle's cost does not depend on them), chain method, block 8, batch 1,
# T = 0; each arm's cycles are timed by the engine's own stage timers, AR decoding of each prompt just
# before it (--paired-ar). Run it alone on the machine.
#   scripts/depth_cost_smollm2.sh        Knobs: PER_CAT (prompts per category, 1), DEPTHS ("1 2 3 5"),
#                                        DATA / FEATS (any regenerated rows with their feature cache), DTYPE
PER_CAT=${PER_CAT:-1}
source "$(dirname "$0")/eval_prompts.sh"
DATA=${DATA:-data/regen-smollm2/sharegpt-first-head.safetensors}
FEATS=${FEATS:-data/cache/features-smollm2-first-head}
OUT=${OUT:-runs/depth}
DEPTHS=${DEPTHS:-1 2 3 5}
drafts=() arms=()
for k in $DEPTHS; do
  d=$OUT/smollm2-d$k
  [ -f $d/config.json ] || $L train draft --target models/smollm2-135m-instruct --data $DATA --features $FEATS \
    --max-sequences 128 --mode dflash --num-layers $k --block-size 8 --steps 1 --seed 0 --threads 2 \
    --out $d --run-dir $OUT/train-d$k > $OUT.train-d$k.log 2>&1
  drafts+=(--draft $d) arms+=(smollm2-d$k)
done
$L bench --target models/smollm2-135m-instruct "${drafts[@]}" --only "${arms[@]}" --paired-ar --no-sweep \
  --prompts data/prompts/eval-mt-bench-humaneval.jsonl --num-prompts $((9 * PER_CAT)) --max-new-tokens $MAX_NEW \
  --temperatures 0 --dtype ${DTYPE:-auto} --threads 2 --out $OUT/bench
.venv/bin/python benchmarks/depth_cost.py $OUT/bench/results.json

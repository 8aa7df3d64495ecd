#!/usr/bin/env bash
# The MODEL_CARD.md of every shipped SmolLM2 drafter: its "Decoding" section from the bench behind
# docs/results/smollm2-drafters.md (scripts/bench_smollm2.sh). A card that exists keeps its training sections (written by
# `lilicorr card draft` when the drafter was shipped, with the learning curve of a run folder that a later disk may
# not have) and gets only its Decoding section replaced (`lilicorr card decoding`); a missing card is written whole
# from the training summary. Knobs: OUT (the bench run folder), MODELS (the drafters to card, default all shipped),
# BENCH_COMMAND (the command that bench run records, e.g. the selectors' subset after a head retrain), EXTRA_MODELS.
source "$(dirname "$0")/env.sh"
OUT=${OUT:-runs/bench-smollm2}
MODELS=${MODELS:-models/smollm2-dflash models/smollm2-lilicorr models/smollm2-lilicorr-conv models/smollm2-dflash-head
  models/arms/smollm2-dflash2 models/arms/smollm2-dspark models/arms/smollm2-domino}
for m in $MODELS ${EXTRA_MODELS:-}; do
  [ -f "$m/training_summary.json" ] || continue
  if [ -f "$m/MODEL_CARD.md" ]; then
    $L card decoding "$m" --bench "$OUT/results.json" --bench-command "${BENCH_COMMAND:-scripts/bench_smollm2.sh}"
  else
    data=$(python3 -c "import json,sys; print(json.load(open('$m/training_summary.json'))['config']['data'])")
    $L card draft "$m" --data-meta "$data.json" --bench "$OUT/results.json" \
      --bench-command "${BENCH_COMMAND:-scripts/bench_smollm2.sh}"
  fi
done

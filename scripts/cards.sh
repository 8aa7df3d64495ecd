#!/usr/bin/env bash
# The MODEL_CARD.md of every shipped drafter of one registry target (TARGET, default smollm2-135m; its drafters
# models/<prefix>-*, models/arms/<prefix>-*, the prefix from its row of src/lilicorr/runtime/targets.py): its
# "Decoding" section from the bench behind docs/results/<prefix>-drafters.md (scripts/bench_drafters.sh). A card that
# exists keeps its training sections (written by `lilicorr card draft` when the drafter was shipped, with the
# learning curve of a run folder that a later disk may not have) and gets only its Decoding section replaced
# (`lilicorr card decoding`); a missing card is written whole from the training summary. Knobs: OUT (the bench run
# folder, default runs/bench-<prefix>), MODELS (the drafters to card, default all shipped), BENCH_COMMAND (the
# command that bench run records, e.g. the selectors' subset after a head retrain), EXTRA_MODELS, DRY_RUN (1: print
# the card commands instead).
source "$(dirname "$0")/bench_target.sh"
P=$TARGET_PREFIX
OUT=${OUT:-runs/bench-$P}
MODELS=${MODELS:-models/$P-dflash models/$P-lilicorr models/$P-lilicorr-conv models/$P-dflash-head
  models/arms/$P-dflash2 models/arms/$P-dspark models/arms/$P-domino}
BENCH_COMMAND=${BENCH_COMMAND:-$(recorded scripts/bench_drafters.sh)}
for m in $MODELS ${EXTRA_MODELS:-}; do
  [ -f "$m/training_summary.json" ] || continue
  if [ -f "$m/MODEL_CARD.md" ]; then
    run $L card decoding "$m" --bench "$OUT/results.json" --bench-command "$BENCH_COMMAND"
  else
    data=$(python3 -c "import json,sys; print(json.load(open('$m/training_summary.json'))['config']['data'])")
    run $L card draft "$m" --data-meta "$data.json" --bench "$OUT/results.json" --bench-command "$BENCH_COMMAND"
  fi
done

#!/usr/bin/env bash
# (Re)write the MODEL_CARD.md of every shipped tiny-s drafter from its training summary and the full
# bench (scripts/bench_tiny_s.sh). The training command in each card is rebuilt from its recorded config.
source "$(dirname "$0")/env.sh"
OUT=${OUT:-runs/bench-tiny-s-full}
for m in models/tiny-s-dflash models/tiny-s-lilicorr models/arms/tiny-s-dflash2 \
  models/arms/tiny-s-dspark models/arms/tiny-s-domino models/tiny-s-dflash-long models/tiny-s-lilicorr-long \
  ${EXTRA_MODELS:-}; do
  data=$(python3 -c "import json,sys; print(json.load(open('$m/training_summary.json'))['config']['data'])")
  $L card draft "$m" --data-meta "$data.json" --bench "$OUT/results.json" \
    --bench-command "scripts/bench_tiny_s.sh"
done

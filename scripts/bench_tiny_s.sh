#!/usr/bin/env bash
# The full tiny-s comparison behind docs/results/tiny-s-drafters.md: every shipped drafter and comparison arm on one
# stack, 24 held-out prompts + 4 long-context prompts (2560 tokens), T = 0 and 1, the long drafters
# also at 3 draft tokens, then the throughput sweep (concurrency 1..32 × input 64 / 2560 × 3 entropy
# tiers; AR, the long drafters, DDTree and the strongest comparison arm, to keep it under half an hour
# on 2 cores). Run it alone on the machine. Resumable: rerun the same command after an interruption.
source "$(dirname "$0")/env.sh"
OUT=${OUT:-runs/bench-tiny-s-full}
S=tiny-s
DRAFTS=(models/$S-dflash models/$S-lilicorr
  models/arms/$S-dflash2 models/arms/$S-dspark
  models/arms/$S-domino models/$S-dflash-long models/$S-lilicorr-long ${EXTRA_DRAFTS:-})
ARMS=(
  $S-dflash@n7 $S-lilicorr@n7 $S-lilicorr:top1@n7 $S-lilicorr:oracle@n7
  $S-dflash2:dflash2@n7 $S-dspark:dspark@n7 $S-domino:domino@n7
  $S-dflash-long@n7 $S-dflash-long:ddtree $S-dflash-long:prob@n7
  $S-lilicorr-long@n7 $S-lilicorr-long:top1@n7 $S-lilicorr-long:oracle@n7 $S-lilicorr-long:prob@n7
  $S-dflash-long@n3 $S-lilicorr-long@n3 ${EXTRA_ARMS:-}
)
SWEEP=(ar $S-dflash-long@n7 $S-dflash-long:ddtree $S-lilicorr-long@n7 $S-dspark:dspark@n7)
$L bench --target models/$S "${DRAFTS[@]/#/--draft=}" --only "${ARMS[@]}" \
  --num-speculative-tokens 3 7 --num-prompts 24 --long-prompts 4 --max-new-tokens 128 --temperatures 0 1 \
  --threads 2 --sweep-arms "${SWEEP[@]}" --out "$OUT"

#!/usr/bin/env bash
# The SmolLM2 comparison behind docs/results/smollm2-drafters.md: every shipped SmolLM2 drafter and head on MT-Bench
# (8 categories) + HumanEval, round-robin PER_CAT prompts per category, T = 0 and 1, batch 1, in one
# process beside AR and transformers' generate(). Run it alone on the machine (timings). Resumable. Knobs:
# PER_CAT (prompts per category; ≥ 4 for the ≥ 32 prompts the drafters issue asks), MAX_NEW, DTYPE, QUANT,
# EXTRA_DRAFTS, EXTRA_ARMS, ARMS_ONLY (a subset of the arms below, e.g. the selectors on the frozen backbone
# after a retrain), OUT, PAGE (the results page, default docs/results/smollm2-drafters.md), TITLE, NOTES.
PER_CAT=${PER_CAT:-4}  # 36 prompts
source "$(dirname "$0")/eval_prompts.sh"
OUT=${OUT:-runs/bench-smollm2}
DTYPE=${DTYPE:-auto}
# Quantized exports of the two main drafters (int8 W8A8 compressed-tensors, NVFP4 ModelOpt layout): their τ
# against bf16 and their drafting cost (QUANT=0 skips them).
QUANTIZED=()
if [ "${QUANT:-1}" = 1 ]; then
  for d in smollm2-dflash smollm2-lilicorr; do for q in int8 nvfp4; do
    [ -f build/quant/$d-$q/config.json ] || $L export models/$d --quantize $q --out build/quant/$d-$q
    QUANTIZED+=(build/quant/$d-$q)
  done; done
fi
DRAFTS=(models/smollm2-dflash models/smollm2-lilicorr)
for d in models/smollm2-lilicorr-conv models/smollm2-dflash-head models/arms/smollm2-dflash2 models/arms/smollm2-dspark \
    models/arms/smollm2-domino "${QUANTIZED[@]}" ${EXTRA_DRAFTS:-}; do
  [ -f $d/config.json ] && DRAFTS+=($d)
done
D=smollm2-dflash; LL=smollm2-lilicorr; C=smollm2-lilicorr-conv; H=smollm2-dflash-head
ARMS=(ar ngram $D $D:ddtree $D:prob $D:adaptive $LL $LL:top1 $LL:oracle $LL:prob $LL:tree $LL:ddtree $LL:adaptive $C $C:top1 $C:oracle $C:prob
  $C:tree $C:ddtree $H $H:oracle $H:prob smollm2-dflash2:dflash2 smollm2-dspark:dspark smollm2-domino:domino
  $D-int8 $D-nvfp4 $LL-int8 $LL-nvfp4 ${EXTRA_ARMS:-})
ONLY=()
for a in "${ARMS[@]}"; do
  base=${a%%:*}
  case $base in ar|ngram) ONLY+=($a);; *) for d in "${DRAFTS[@]}"; do [ "$(basename $d)" = "$base" ] && ONLY+=($a); done;; esac
done
if [ -n "${ARMS_ONLY:-}" ]; then  # keep the listed arms (each must be one this script runs)
  KEEP=()
  for a in $ARMS_ONLY; do
    [[ " ${ONLY[*]} " == *" $a "* ]] || { echo "ARMS_ONLY: $a is not an arm of this script (drafter missing?)"; exit 2; }
    KEEP+=($a)
  done
  ONLY=("${KEEP[@]}")
fi
$L bench --target models/smollm2-135m-instruct "${DRAFTS[@]/#/--draft=}" --only "${ONLY[@]}" \
  --prompts data/prompts/eval-mt-bench-humaneval.jsonl --num-prompts $((9 * PER_CAT)) --max-new-tokens $MAX_NEW \
  --temperatures 0 1 --dtype $DTYPE --threads 2 --no-sweep --out "$OUT"
# the command the page records: the script with the knobs this run was given
KNOBS=""
for k in PER_CAT MAX_NEW DTYPE QUANT EXTRA_DRAFTS EXTRA_ARMS ARMS_ONLY PAGE TITLE NOTES; do [ -z "${!k:-}" ] || KNOBS+="$k='${!k}' "; done
[ "$OUT" = runs/bench-smollm2 ] || KNOBS+="OUT='$OUT' "
$L report "$OUT/results.json" --out ${PAGE:-docs/results/smollm2-drafters.md} --title "${TITLE:-Results: SmolLM2-135M-Instruct drafters}" \
  --baseline smollm2-dflash --command "${KNOBS}scripts/bench_smollm2.sh" --notes ${NOTES:-docs/results/smollm2-drafters-notes.md}

#!/usr/bin/env bash
# The drafters comparison of one registry target behind its page docs/results/<prefix>-drafters.md
# (smollm2-drafters.md, gemma3-270m-drafters.md): every shipped drafter and head of the target (models/<prefix>-*,
# models/arms/<prefix>-*, the prefix from its row of src/lilicorr/runtime/targets.py) on MT-Bench (8 categories) +
# HumanEval — chat rows for a chat model, the same prompts as raw text for a base model —, round-robin PER_CAT
# prompts per category, T = 0 and 1, batch 1, in one process beside AR and transformers' generate(). Run it alone
# on the machine (timings). Resumable. Knobs: TARGET (a registry name, default smollm2-135m), PER_CAT (prompts per
# category; ≥ 4 for the ≥ 32 prompts the drafters issue asks), MAX_NEW, TEMPS (default "0 1"), DTYPE, QUANT,
# EXTRA_DRAFTS, EXTRA_ARMS, ARMS_ONLY (a subset of the arms below, e.g. the selectors on the frozen backbone after a
# retrain), OUT (default runs/bench-<prefix>), PAGE (default docs/results/<prefix>-drafters.md), TITLE, NOTES,
# DRY_RUN (1: print the export, bench and report commands instead of running them).
# The Gemma 3 270M page (docs/guide/benchmark.md): TARGET=gemma3-270m TEMPS=0 MAX_NEW=64 DTYPE=auto
#   EXTRA_ARMS='gemma3-270m-dflash:default gemma3-270m-lilicorr:default' ARMS_ONLY='ar ngram …' OUT=runs/bench-gemma-s37
PER_CAT=${PER_CAT:-4}  # 36 prompts
source "$(dirname "$0")/bench_target.sh"
build_prompts
P=$TARGET_PREFIX
OUT_DEFAULT=runs/bench-$P
OUT=${OUT:-$OUT_DEFAULT}
DTYPE=${DTYPE:-auto}
D=$P-dflash; LL=$P-lilicorr; C=$P-lilicorr-conv; H=$P-dflash-head
ARMS=(ar ngram $D $D:ddtree $D:prob $D:adaptive $LL $LL:top1 $LL:oracle $LL:prob $LL:tree $LL:ddtree $LL:adaptive $C $C:top1 $C:oracle $C:prob
  $C:tree $C:ddtree $H $H:oracle $H:prob $P-dflash2:dflash2 $P-dspark:dspark $P-domino:domino
  $D-int8 $D-nvfp4 $LL-int8 $LL-nvfp4 ${EXTRA_ARMS:-})
# selected NAME: whether this run keeps an arm of drafter NAME (every arm when ARMS_ONLY is unset)
selected() {
  local a
  if [ -z "${ARMS_ONLY:-}" ]; then return 0; fi
  for a in $ARMS_ONLY; do if [ "${a%%:*}" = "$1" ]; then return 0; fi; done
  return 1
}
# Quantized exports of the two main drafters (int8 W8A8 compressed-tensors, NVFP4 ModelOpt layout): their τ
# against bf16 and their drafting cost (QUANT=0 skips them); only those whose arms this run keeps.
QUANTIZED=()
if [ "${QUANT:-1}" = 1 ]; then
  for d in $D $LL; do for q in int8 nvfp4; do
    if [ -f models/$d/config.json ] && selected $d-$q; then
      [ -f build/quant/$d-$q/config.json ] || run $L export models/$d --quantize $q --out build/quant/$d-$q
      QUANTIZED+=(build/quant/$d-$q)
    fi
  done; done
fi
DRAFTS=()
for d in models/$D models/$LL models/$C models/$H models/arms/$P-dflash2 models/arms/$P-dspark models/arms/$P-domino; do
  if [ -f $d/config.json ]; then DRAFTS+=($d); fi
done
DRAFTS+=("${QUANTIZED[@]}")  # made above (DRY_RUN: would be)
for d in ${EXTRA_DRAFTS:-}; do if [ -f $d/config.json ]; then DRAFTS+=($d); fi; done
mapfile -t ONLY < <(keep_arms "${ARMS[@]}")
if [ -n "${ARMS_ONLY:-}" ]; then  # keep the listed arms (each must be one this script runs)
  KEEP=()
  for a in $ARMS_ONLY; do
    [[ " ${ONLY[*]} " == *" $a "* ]] || { echo "ARMS_ONLY: $a is not an arm of this script (drafter missing?)"; exit 2; }
    KEEP+=($a)
  done
  ONLY=("${KEEP[@]}")
fi
run $L bench --target "$TARGET_FOLDER" "${DRAFTS[@]/#/--draft=}" --only "${ONLY[@]}" \
  --prompts "$TARGET_PROMPTS" --num-prompts $((9 * PER_CAT)) --max-new-tokens $MAX_NEW \
  --temperatures ${TEMPS:-0 1} --dtype $DTYPE --threads 2 --no-sweep --out "$OUT"
NOTES_FILE=${NOTES:-docs/results/$P-drafters-notes.md}  # a new target's page may have none yet
NOTE_ARGS=(); if [ -n "${NOTES:-}" ] || [ -f "$NOTES_FILE" ]; then NOTE_ARGS=(--notes "$NOTES_FILE"); fi
run $L report "$OUT/results.json" --out "${PAGE:-docs/results/$P-drafters.md}" --title "${TITLE:-Results: $TARGET_DISPLAY drafters}" \
  --baseline $D --command "$(recorded scripts/bench_drafters.sh PER_CAT MAX_NEW TEMPS DTYPE QUANT EXTRA_DRAFTS EXTRA_ARMS \
  ARMS_ONLY PAGE TITLE NOTES OUT)" "${NOTE_ARGS[@]}"

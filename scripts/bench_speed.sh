#!/usr/bin/env bash
# The speed comparison of one registry target behind docs/results/<prefix>-speed.md (smollm2-speed.md, and with
# knobs smollm2-defaults.md, smollm2-defaults-fp32.md): the target with its shipped drafters (models/<prefix>-dflash,
# -lilicorr, -lilicorr-conv, those that exist; the prefix from its row of src/lilicorr/runtime/targets.py), the arms
# the speed issue names (AR, transformers generate(), DFlash chain, LiLiCorr chain, LiLiCorr tree, DDTree, with
# and without adaptive verification — trees run the auto budget, which is adaptive; fixed 16-node trees for
# the equal-budget pair) plus prompt lookup and the trees with its graft, at batch 1 (T = 0 and 1, MT-Bench +
# HumanEval: chat rows for a chat model, raw text for a base model), then the throughput sweep (concurrency 1…32 ×
# input 128 / 1024, T = 0, one pool of prompts).
# Every arm's speedup is over AR decoding the same prompt (sweep: the same batch) just before it
# (--paired-ar): this machine's speed drifts by tens of percent over minutes. Run it alone on the machine.
# Resumable (OUT/parts). Knobs: TARGET (a registry name, default smollm2-135m), PER_CAT (prompts per category,
# default 4: 36 prompts), TEMPS (default "0 1"), SWEEP (0: no throughput sweep), ONLY_ARMS (a subset of the arms
# below, space-separated), DTYPE (engine dtype, default auto), OUT (default runs/bench-speed for the registry's
# default target, else runs/bench-speed-<prefix>), PAGE, NOTES and TITLE (the page written, the notes it includes,
# its title), VOCABS (draft vocabulary sizes: each drafting arm also as ARM@vN, drafting from the folder's
# draft_vocab.json), GATE (1: each drafting arm without adaptive verification also as ARM+gate, with the measured
# draft gate alone), EXTRA_ARMS, EXTRA_SWEEP, DRY_RUN (1: print the bench and report commands instead).
# NAME:default is exactly what `generate --draft` / `make run` / `serve` run (decoding.config.FASTEST);
# NAME:tree+lookup@b16 / NAME:ddtree+lookup@b16 the same tree without adaptive verification (the previous default).
PER_CAT=${PER_CAT:-4}
GIVEN_MAX_NEW=${MAX_NEW:+MAX_NEW}  # recorded only when given (its default, 32, is in every page's header)
source "$(dirname "$0")/bench_target.sh"
build_prompts
P=$TARGET_PREFIX
OUT_DEFAULT=runs/bench-speed-$P
if [ "$TARGET_DEFAULT" = 1 ]; then OUT_DEFAULT=runs/bench-speed; fi  # the folder the SmolLM2 speed pages name
OUT=${OUT:-$OUT_DEFAULT}
D=$P-dflash; LL=$P-lilicorr; C=$P-lilicorr-conv
DRAFTS=()
for d in models/$D models/$LL models/$C; do if [ -f $d/config.json ]; then DRAFTS+=($d); fi; done
ARMS=(ar ngram $D $D:adaptive $D:ddtree $D:ddtree+lookup@b16 $D:default $LL $LL:adaptive $LL:tree $LL:tree@b16
  $LL:ddtree@b16 $LL:tree+lookup@b16 $LL:default $C $C:tree+lookup@b16 $C:default ${EXTRA_ARMS:-})
mapfile -t ARMS < <(keep_arms "${ARMS[@]}")  # the arms of the drafters the target has
[ -z "${ONLY_ARMS:-}" ] || read -r -a ARMS <<< "$ONLY_ARMS"
mapfile -t SWEEP_ONLY < <(keep_arms ar ngram $D:adaptive $D:default $LL $LL:adaptive $LL:tree+lookup@b16 $LL:default ${EXTRA_SWEEP:-})
SWEEP_ARGS=(--sweep-concurrency 1 2 4 8 16 32 --sweep-input-lens 128 1024 --sweep-max-tokens 32 --sweep-pooled
  --sweep-arms "${SWEEP_ONLY[@]}")
[ "${SWEEP:-1}" = 1 ] || SWEEP_ARGS=(--no-sweep)
DRAFT_ARGS=()
for d in "${DRAFTS[@]}"; do DRAFT_ARGS+=(--draft "$d"); done
run $L bench --target "$TARGET_FOLDER" "${DRAFT_ARGS[@]}" \
  --only "${ARMS[@]}" --tree-budgets 16 --paired-ar ${VOCABS:+--draft-vocab-sizes $VOCABS} ${GATE:+--with-draft-gate} \
  --prompts "$TARGET_PROMPTS" --num-prompts $((9 * PER_CAT)) --max-new-tokens $MAX_NEW \
  --temperatures ${TEMPS:-0 1} --dtype ${DTYPE:-auto} --threads 2 "${SWEEP_ARGS[@]}" --out "$OUT"
NOTES_FILE=${NOTES:-docs/results/$P-speed-notes.md}  # a new target's page may have none yet
NOTE_ARGS=(); if [ -n "${NOTES:-}" ] || [ -f "$NOTES_FILE" ]; then NOTE_ARGS=(--notes "$NOTES_FILE"); fi
run $L report "$OUT/results.json" --out "${PAGE:-docs/results/$P-speed.md}" \
  --title "${TITLE:-Results: speed of every chain and tree arm on $TARGET_DISPLAY}" --baseline $D \
  --command "$(recorded scripts/bench_speed.sh PER_CAT $GIVEN_MAX_NEW TEMPS SWEEP ONLY_ARMS DTYPE PAGE NOTES TITLE VOCABS GATE \
  EXTRA_ARMS EXTRA_SWEEP OUT)" \
  "${NOTE_ARGS[@]}"

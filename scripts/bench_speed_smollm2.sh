#!/usr/bin/env bash
# The speed comparison behind docs/results/smollm2-speed.md: SmolLM2-135M-Instruct with its shipped drafters, the arms
# the speed issue names (AR, transformers generate(), DFlash chain, LiLiCorr chain, LiLiCorr tree, DDTree, with
# and without adaptive verification — trees run the auto budget, which is adaptive; fixed 16-node trees for
# the equal-budget pair) plus prompt lookup and the trees with its graft, at batch 1 (T = 0 and 1, MT-Bench +
# HumanEval), then the throughput sweep (concurrency 1…32 × input 128 / 1024, T = 0, one pool of prompts).
# Every arm's speedup is over AR decoding the same prompt (sweep: the same batch) just before it
# (--paired-ar): this machine's speed drifts by tens of percent over minutes. Run it alone on the machine.
# Resumable (runs/bench-speed/parts). Knobs: PER_CAT (prompts per category, default 4: 36 prompts), TEMPS
# (default "0 1"), SWEEP (0: no throughput sweep), ONLY_ARMS (a subset of the arms below, space-separated),
# DTYPE (engine dtype, default auto), PAGE, NOTES and TITLE (the page written, the notes it includes, its title), VOCABS (draft
# vocabulary sizes: each drafting arm also as ARM@vN, drafting from the folder's draft_vocab.json), GATE (1: each
# drafting arm without adaptive verification also as ARM+gate, with the measured draft gate alone).
# NAME:default is exactly what `generate --draft` / `make run` / `serve` run (decoding.config.FASTEST);
# NAME:tree+lookup@b16 / NAME:ddtree+lookup@b16 the same tree without adaptive verification (the previous default).
PER_CAT=${PER_CAT:-4}
source "$(dirname "$0")/eval_prompts.sh"
OUT=${OUT:-runs/bench-speed}
D=smollm2-dflash; LL=smollm2-lilicorr; C=smollm2-lilicorr-conv
ARMS=(ar ngram $D $D:adaptive $D:ddtree $D:ddtree+lookup@b16 $D:default $LL $LL:adaptive $LL:tree $LL:tree@b16
  $LL:ddtree@b16 $LL:tree+lookup@b16 $LL:default $C $C:tree+lookup@b16 $C:default ${EXTRA_ARMS:-})
[ -z "${ONLY_ARMS:-}" ] || read -r -a ARMS <<< "$ONLY_ARMS"
SWEEP_ARGS=(--sweep-concurrency 1 2 4 8 16 32 --sweep-input-lens 128 1024 --sweep-max-tokens 32 --sweep-pooled
  --sweep-arms ar ngram $D:adaptive $D:default $LL $LL:adaptive $LL:tree+lookup@b16 $LL:default ${EXTRA_SWEEP:-})
[ "${SWEEP:-1}" = 1 ] || SWEEP_ARGS=(--no-sweep)
# the command the page records: the script with the knobs this run was given
KNOBS=""
for k in PER_CAT TEMPS SWEEP ONLY_ARMS DTYPE PAGE NOTES TITLE VOCABS GATE; do [ -z "${!k:-}" ] || KNOBS+="$k='${!k}' "; done
[ "$OUT" = runs/bench-speed ] || KNOBS+="OUT='$OUT' "
$L bench --target models/smollm2-135m-instruct --draft models/$D --draft models/$LL --draft models/$C \
  --only "${ARMS[@]}" --tree-budgets 16 --paired-ar ${VOCABS:+--draft-vocab-sizes $VOCABS} ${GATE:+--with-draft-gate} \
  --prompts data/prompts/eval-mt-bench-humaneval.jsonl --num-prompts $((9 * PER_CAT)) --max-new-tokens $MAX_NEW \
  --temperatures ${TEMPS:-0 1} --dtype ${DTYPE:-auto} --threads 2 "${SWEEP_ARGS[@]}" --out "$OUT"
$L report "$OUT/results.json" --out ${PAGE:-docs/results/smollm2-speed.md} --title "${TITLE:-Results: speed of every chain and tree arm on SmolLM2-135M-Instruct}" \
  --baseline $D --command "${KNOBS}scripts/bench_speed_smollm2.sh" --notes ${NOTES:-docs/results/smollm2-speed-notes.md}

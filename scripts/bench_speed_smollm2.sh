#!/usr/bin/env bash
# The speed comparison behind docs/RESULTS-speed.md: SmolLM2-135M-Instruct with its shipped drafters, every
# arm the speed issue names (AR, transformers generate(), DFlash chain, LiLiCorr chain, LiLiCorr tree, DDTree,
# each with and without adaptive verification; trees with the auto budget and a fixed 16) plus prompt lookup,
# at batch 1 (T = 0 and 1, MT-Bench + HumanEval), then the throughput sweep (concurrency 1…32 × input 128 /
# 1024, T = 0, one pool of prompts). Run it alone on the machine (timings). Resumable (runs/bench-speed/parts).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1
L=.venv/bin/lilicorr
OUT=${OUT:-runs/bench-speed}
PER_CAT=${PER_CAT:-2}
MAX_NEW=${MAX_NEW:-32}
[ -f data/prompts/eval-mt-bench-humaneval.jsonl ] || {
  mkdir -p data/prompts
  [ -f data/prompts/mt-bench.jsonl ] || $L data prompts mt-bench --out data/prompts/mt-bench.jsonl
  [ -f data/prompts/humaneval.jsonl ] || $L data prompts humaneval --out data/prompts/humaneval.jsonl
  cat data/prompts/mt-bench.jsonl data/prompts/humaneval.jsonl > data/prompts/eval-mt-bench-humaneval.jsonl
}
D=smollm2-dflash; LL=smollm2-lilicorr; C=smollm2-lilicorr-conv
ARMS=(ar ngram $D $D:adaptive $D:ddtree $D:ddtree@b16 $LL $LL:adaptive $LL:tree $LL:tree@b16 $LL:ddtree $LL:ddtree@b16
  $LL:tree+lookup $LL:tree+lookup@b16 $D:ddtree+lookup $C:tree+lookup
  $C:tree ${EXTRA_ARMS:-})
SWEEP=(ar ngram $D $D:adaptive $LL $LL:adaptive $LL:tree $LL:tree@b16 $LL:ddtree $LL:tree+lookup ${EXTRA_SWEEP:-})
$L bench --target models/smollm2-135m-instruct --draft models/$D --draft models/$LL --draft models/$C \
  --only "${ARMS[@]}" --tree-budgets 16 \
  --prompts data/prompts/eval-mt-bench-humaneval.jsonl --num-prompts $((9 * PER_CAT)) --max-new-tokens $MAX_NEW \
  --temperatures 0 1 --dtype auto --threads 2 \
  --sweep-concurrency 1 2 4 8 16 32 --sweep-input-lens 128 1024 --sweep-max-tokens 32 --sweep-pooled \
  --sweep-arms "${SWEEP[@]}" --out "$OUT"
$L report "$OUT/results.json" --out docs/RESULTS-speed.md --title "Results: speed on SmolLM2-135M-Instruct" \
  --baseline $D --command "scripts/bench_speed_smollm2.sh" --notes docs/results-speed_notes.md

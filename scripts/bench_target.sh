# Sourced by the per-target scripts (bench_drafters.sh, bench_speed.sh, cards.sh): the shared environment (env.sh),
# the target's facts from its row of the registry (src/lilicorr/runtime/targets.py, printed by `lilicorr target
# show --shell` as TARGET_FOLDER, TARGET_PREFIX, TARGET_DISPLAY, TARGET_CHAT, TARGET_PROMPTS, TARGET_DEFAULT, …:
# one table holds them, no script copies them), and the helpers the scripts share. Knobs: TARGET (a registry name,
# default the registry's default), DRY_RUN (1: print the commands that would export, benchmark, write a page or a
# card instead of running them, and build no prompt file: it needs neither the target's folder nor the prompts).
SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)  # before env.sh moves to the repository root
source "$SCRIPTS/env.sh"
FACTS=$($L target show ${TARGET:+"$TARGET"} --shell)  # an unknown TARGET stops here: the registry's message, exit 2
eval "$FACTS"
MAX_NEW=${MAX_NEW:-32}

# run CMD…: CMD, or under DRY_RUN=1 its shell-quoted line
run() {
  if [ "${DRY_RUN:-0}" = 1 ]; then printf '%q ' "$@"; echo; else "$@"; fi
}

# build_prompts: the target's prompt file — MT-Bench + HumanEval chat rows (eval_prompts.sh, rebuilt each run); for
# a base model (no chat template) the same prompts as raw text, made from them once (as scripts/ship_gemma3.sh does).
# DRY_RUN builds nothing.
build_prompts() {
  if [ "${DRY_RUN:-0}" = 1 ]; then return 0; fi
  if [ "$TARGET_CHAT" = 1 ]; then
    source "$SCRIPTS/eval_prompts.sh"
  elif [ ! -f "$TARGET_PROMPTS" ]; then
    source "$SCRIPTS/eval_prompts.sh"
    .venv/bin/python -c "from lilicorr.datagen.raw_text import write_raw_prompts as w; \
w('data/prompts/eval-mt-bench-humaneval.jsonl', '$TARGET_PROMPTS')"
  fi
}

# keep_arms ARM…: the arms whose drafter (the name before ':') is a folder in DRAFTS, in order; ar and ngram need none
keep_arms() {
  local a d
  for a in "$@"; do
    case ${a%%:*} in
      ar | ngram) echo "$a" ;;
      *) for d in "${DRAFTS[@]}"; do if [ "$(basename "$d")" = "${a%%:*}" ]; then echo "$a"; fi; done ;;
    esac
  done
}

# recorded SCRIPT KNOB…: the command a page records, the script with the knobs this run was given (TARGET first,
# when not the registry's default; OUT when not $OUT_DEFAULT), so the page says how to remake it
recorded() {
  local k s=""
  if [ "$TARGET_DEFAULT" != 1 ]; then s="TARGET='$TARGET_NAME' "; fi
  for k in "${@:2}"; do
    if [ "$k" = OUT ] && [ "$OUT" = "$OUT_DEFAULT" ]; then continue; fi
    if [ -n "${!k:-}" ]; then s+="$k='${!k}' "; fi
  done
  echo "${s}$1"
}

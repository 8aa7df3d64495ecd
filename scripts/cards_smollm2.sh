#!/usr/bin/env bash
# The SmolLM2 drafters' model cards: scripts/cards.sh for TARGET=smollm2-135m, the same knobs. Kept under this
# name beside scripts/bench_smollm2.sh, the command it pairs with.
TARGET=smollm2-135m exec "$(dirname "$0")/cards.sh" "$@"

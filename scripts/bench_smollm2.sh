#!/usr/bin/env bash
# The SmolLM2 drafters page (docs/results/smollm2-drafters.md): scripts/bench_drafters.sh for TARGET=smollm2-135m,
# the same knobs. Kept under this name because earlier pages and the SmolLM2 model cards cite it.
TARGET=smollm2-135m exec "$(dirname "$0")/bench_drafters.sh" "$@"

#!/usr/bin/env bash
# The SmolLM2 speed pages (docs/results/smollm2-speed.md, smollm2-defaults.md, smollm2-defaults-fp32.md):
# scripts/bench_speed.sh for TARGET=smollm2-135m, the same knobs. Kept under this name because those pages cite it.
TARGET=smollm2-135m exec "$(dirname "$0")/bench_speed.sh" "$@"

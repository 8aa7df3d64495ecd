# Sourced by the SmolLM2 bench scripts: the shared environment (env.sh) and the held-out prompt file they read
# (MT-Bench's 8 categories + HumanEval, from the pinned wheels), built once.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
PER_CAT=${PER_CAT:-2}
MAX_NEW=${MAX_NEW:-32}
mkdir -p data/prompts
[ -f data/prompts/mt-bench.jsonl ] || $L data prompts mt-bench --out data/prompts/mt-bench.jsonl
[ -f data/prompts/humaneval.jsonl ] || $L data prompts humaneval --out data/prompts/humaneval.jsonl
cat data/prompts/mt-bench.jsonl data/prompts/humaneval.jsonl > data/prompts/eval-mt-bench-humaneval.jsonl

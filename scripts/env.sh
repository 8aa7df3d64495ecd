# The one environment of the scripts here; each starts with
#   source "$(dirname "$0")/env.sh"
# Strict bash, the repository root as working directory, OpenMP threads that sleep instead of spinning
# without bound (spinning made 2-thread torch many times slower beside another job), no Hub network access
# (every model and prompt set is local), and $L, the project's CLI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1
L=.venv/bin/lilicorr

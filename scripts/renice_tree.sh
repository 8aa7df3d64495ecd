#!/usr/bin/env bash
# Lower (or raise) the CPU priority of a running job and every thread of its process tree, so that a
# background job (data regeneration, feature extraction) yields the cores to foreground work without
# stopping: `scripts/renice_tree.sh 19 PID`. Linux sets niceness per thread, so each task is reniced.
set -euo pipefail
nice=$1; root=$2
pids=$(ps -eo pid= --forest -o ppid= | awk -v r="$root" '{p[$1]=$2} END {for (x in p) {y=x; while (y && y!=r) y=p[y]; if (y==r) print x}}')
for pid in $pids; do
  for task in /proc/"$pid"/task/*; do renice -n "$nice" -p "${task##*/}" >/dev/null 2>&1 || true; done
done
echo "reniced to $nice: $(echo $pids | wc -w) processes under $root"

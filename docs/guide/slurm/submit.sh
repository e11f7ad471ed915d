#!/bin/bash
# Submit the soak: the four shards as a job array, then the merge as a job that starts when
# every task of the array succeeded. Prints the merge's job id.
#   SOAK_DIR   the soak folder every node mounts, with builds/ (default /shared/soak)
#   PINFORGE   the pinforge binary on the nodes (default: pinforge on PATH)
#   SOAK_ROWS  rows per arm (default 1002)
# sbatch passes this environment on to the jobs (its default --export=ALL).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "${SOAK_DIR:-/shared/soak}"
# The tasks write shards/INDEX.json: without the folder each task fails before the script runs
# (the reason only in slurmd's log) and the merge waits forever (DependencyNeverSatisfied).
mkdir -p shards
jid=$(sbatch --parsable "$here/shard.sbatch")
sbatch --parsable --dependency="afterok:${jid%%;*}" "$here/merge.sbatch"

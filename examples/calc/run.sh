#!/usr/bin/env bash
# One command from a fresh clone: build agl, make the calc data, create a
# small model with a vocabulary learned from the demonstrations, warm-start
# it with SFT (the skill, then the habit), then train it with RL.
#   examples/calc/run.sh            (fresh run; removes examples/calc/run)
# The warm start is kept in examples/calc/work/model; delete it to redo it.
set -euo pipefail
cd "$(dirname "$0")"
source ./warmstart.sh
rm -rf run
exec work/agl train agl.yaml "$@"

#!/usr/bin/env bash
# Builds agl and the guess harness, makes tasks and a small model, trains.
#   examples/guess/run.sh [--steps N]
# Compare trained tokens with merging off: set `no_merge: true` under trainer.
set -euo pipefail
cd "$(dirname "$0")"
export GOEXPERIMENT=${GOEXPERIMENT-simd}
mkdir -p work
go build -o work/agl ../../cmd/agl
go build -o work/guess .
work/guess -gen 400 -seed 1 > work/tasks.jsonl
[ -f work/model/model.safetensors ] || work/agl model init --preset ${PRESET:-tiny} --out work/model
rm -rf run
exec work/agl train agl.yaml "$@"

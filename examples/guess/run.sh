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
if [ ! -f work/model/model.safetensors ]; then
	# A tiny model, warm-started on binary-search games so its replies end
	# their turns (a reply cut by max_tokens cannot be continued token-exactly).
	work/agl model init --preset ${PRESET:-tiny} --out work/model
	work/guess -demos 400 -seed 7 > work/sft.jsonl
	work/agl sft --model work/model --data work/sft.jsonl --out work/model --steps 120 --batch-size 16 --lr 0.003 --warmup 10
fi
rm -rf run
exec work/agl train agl.yaml "$@"

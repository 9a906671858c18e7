#!/usr/bin/env bash
# One command from a fresh clone: build agl, make the shop database, the
# tasks and the three agents' demonstrations, create a small model with a
# vocabulary learned from them, warm-start it with SFT, then train the
# writer and the rewriter with RL (the checker frozen).
#   examples/sql/run.sh                 (fresh run; removes examples/sql/run)
#   examples/sql/run.sh --steps 6       (flags go to agl train)
# CREDIT=broadcast runs the same with broadcast credit (default per_call),
# on the same trainer.seed (agl.yaml), so both sample the same first step.
# The warm start is kept in examples/sql/work/model; delete it to redo it.
set -euo pipefail
cd "$(dirname "$0")"
export GOEXPERIMENT=${GOEXPERIMENT-simd}
mkdir -p work
go build -o work/agl ../../cmd/agl
python3 make_data.py work
if [ ! -f work/model/model.safetensors ]; then
	# model.json: a 117k-parameter Qwen3-style model (PRESET=1m for a bigger one).
	if [ -n "${PRESET:-}" ]; then size="--preset $PRESET"; else size="--config model.json"; fi
	work/agl model init $size --bpe-data work/sft.jsonl --out work/init
	work/agl sft --model work/init --data work/sft.jsonl --out work/model \
		--steps ${SFT_STEPS:-300} --batch-size 16 --lr 0.005 --warmup 20
fi
cfg=agl.yaml
if [ -n "${CREDIT:-}" ]; then
	# Beside agl.yaml: its relative paths are relative to the config file.
	sed "s/^  credit: .*/  credit: ${CREDIT}/; s/^data_dir: run/data_dir: run-${CREDIT}/" agl.yaml > agl-${CREDIT}.yaml
	cfg=agl-${CREDIT}.yaml
	rm -rf run-${CREDIT}
else
	rm -rf run
fi
exec work/agl train "$cfg" "$@"

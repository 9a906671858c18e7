#!/usr/bin/env bash
# One command from a fresh clone: build agl, make the shop database, the
# tasks and the three agents' demonstrations, create a small model with a
# vocabulary learned from them, warm-start it with SFT, then train the
# writer and the rewriter with RL (the checker frozen).
#   examples/sql/run.sh                 (fresh run; removes examples/sql/run)
#   examples/sql/run.sh --steps 6       (flags go to agl train)
# CREDIT=broadcast runs the same with broadcast credit (default per_call),
# on the same trainer.seed (agl.yaml), so both sample the same first step.
# The warm start is kept in examples/sql/work/model (redone when the
# demonstrations, PRESET or SFT_STEPS change).
set -euo pipefail
cd "$(dirname "$0")"
export GOEXPERIMENT=${GOEXPERIMENT-simd}
# The harness starts once per rollout: run the real interpreter, not a
# version manager's shim in front of it (pyenv's costs ~0.6 s of CPU a start).
PATH="$(dirname "$(python3 -c 'import sys; print(sys.executable)')"):$PATH"
mkdir -p work
go build -o work/agl ../../cmd/agl
python3 make_data.py work
# The warm start is redone when the demonstrations, the model's size or the
# SFT steps changed since it was made.
sum=$({ cat work/sft.jsonl model.json; echo "${PRESET:-} ${SFT_STEPS:-1000}"; } | sha256sum | cut -d' ' -f1)
if [ ! -f work/model/model.safetensors ] || [ "$(cat work/model/sft.sha256 2>/dev/null)" != "$sum" ]; then
	rm -rf work/init work/model
	# model.json: a 117k-parameter Qwen3-style model (PRESET=1m for a bigger one).
	# 1000 steps: enough for it to copy the question's value into the query.
	if [ -n "${PRESET:-}" ]; then size="--preset $PRESET"; else size="--config model.json"; fi
	work/agl model init $size --bpe-data work/sft.jsonl --out work/init
	work/agl sft --model work/init --data work/sft.jsonl --out work/model \
		--steps ${SFT_STEPS:-1000} --batch-size 16 --lr 0.005 --warmup 20
	echo "$sum" > work/model/sft.sha256
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

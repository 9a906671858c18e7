#!/usr/bin/env bash
# One command from a fresh clone: build agl, generate the repository tasks
# and demonstrations from lib/, create a small model whose vocabulary is
# learned from the demonstrations, warm-start it with SFT, then train it
# with RL on the sandboxed tasks (agl train validates on the held-out
# modules' tasks before the first step and after the last: the baseline
# and final resolve rates).
#   examples/swe/run.sh            (fresh run; removes examples/swe/run)
# The tasks and the warm start are kept in examples/swe/work; delete them to redo them.
set -euo pipefail
cd "$(dirname "$0")"
export GOEXPERIMENT=${GOEXPERIMENT-simd}
# The harness starts once per rollout: run the real interpreter, not a
# version manager's shim in front of it (pyenv's costs ~0.6 s of CPU a start).
PATH="$(dirname "$(python3 -c 'import sys; print(sys.executable)')"):$PATH"
mkdir -p work
go build -o work/agl ../../cmd/agl
[ -f work/train.jsonl ] || python3 gen.py work --seed ${SEED:-1}
if [ ! -f work/model/model.safetensors ]; then
	work/agl model init --preset ${PRESET:-1m} --bpe-data work/sft.jsonl --out work/init
	# Demonstrations: reproduce, show the function, fix the line with sed,
	# reproduce again, submit.
	work/agl sft --model work/init --data work/sft.jsonl --out work/model \
		--steps ${SFT_STEPS:-400} --batch-size 8 --lr 0.003 --warmup 20 --save-every 50
fi
rm -rf run
exec work/agl train agl.yaml "$@"

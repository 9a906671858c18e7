#!/usr/bin/env bash
# One command from a fresh clone: build agl, generate the repository tasks
# (one wrong operator each) and the demonstrations from lib/ (and renamed
# copies of its modules), create a small model whose vocabulary is learned
# from the demonstrations, warm-start it with SFT, then train it with RL on
# the sandboxed tasks (agl train validates on the held-out lines' tasks
# before the first step, every 5 steps and after the last: the baseline and
# final resolve rates), and re-check the held-out resolve rates on copies
# of the final workspaces.
#   examples/swe/run.sh                 (fresh run; removes examples/swe/run)
#   examples/swe/run.sh --steps 2       (flags go to agl train)
# The tasks and the warm start are kept in examples/swe/work, redone when
# gen.py, lib/, SEED or SITES (the tasks) or the demonstrations, PRESET
# or SFT_STEPS (the warm start) change.
set -euo pipefail
cd "$(dirname "$0")"
export GOEXPERIMENT=${GOEXPERIMENT-simd}
# The harness starts once per rollout and gen.py runs python3 thousands of
# times: run the real interpreter, not a version manager's shim in front
# of it (pyenv's costs ~0.6 s of CPU a start).
PATH="$(dirname "$(python3 -c 'import sys; print(sys.executable)')"):$PATH"
mkdir -p work
go build -o work/agl ../../cmd/agl
gen_args="--seed ${SEED:-1} --sites ${SITES:-150}"
sum=$({ cat gen.py harness.py words.txt lib/*.py; echo "$gen_args"; } | sha256sum | cut -d' ' -f1)
if [ ! -f work/train.jsonl ] || [ "$(cat work/gen.sha256 2>/dev/null)" != "$sum" ]; then
	python3 gen.py work $gen_args
	echo "$sum" > work/gen.sha256
fi
sum=$({ cat work/sft.jsonl; echo "${PRESET:-1m} ${SFT_STEPS:-1000}"; } | sha256sum | cut -d' ' -f1)
if [ ! -f work/model/model.safetensors ] || [ "$(cat work/model/sft.sha256 2>/dev/null)" != "$sum" ]; then
	rm -rf work/init work/model
	work/agl model init --preset ${PRESET:-1m} --bpe-data work/sft.jsonl --out work/init
	# Demonstrations: look at the line the statement names, replace its
	# operator with another of its kind, submit.
	# --eval: how many of the held-out tasks' solution replies the warm
	# start writes exactly (by turn).
	work/agl sft --model work/init --data work/sft.jsonl --out work/model \
		--steps ${SFT_STEPS:-1000} --batch-size 8 --lr 0.003 --warmup 20 --save-every 200 \
		--eval work/heldout.jsonl
	echo "$sum" > work/model/sft.sha256
fi
rm -rf run
work/agl train agl.yaml "$@"
# Every held-out "resolved" again, on a copy of its final workspace with
# the pristine hidden tests, in a fresh sandbox outside the agent's reach.
python3 recheck.py run run/workspaces

#!/usr/bin/env bash
# The calc warm start, shared by run.sh (embedded) and tinker.sh (through a
# Tinker service): build agl, make the calc data, create a small model with
# a vocabulary learned from the demonstrations and warm-start it with SFT
# (the skill, then the habit) into work/model, kept there once made.
# Sourced from examples/calc with set -euo pipefail.
export GOEXPERIMENT=${GOEXPERIMENT-simd}
# The harness starts once per rollout: run the real interpreter, not a
# version manager's shim in front of it (pyenv's costs ~0.6 s of CPU a start).
PATH="$(dirname "$(python3 -c 'import sys; print(sys.executable)')"):$PATH"
mkdir -p work
go build -o work/agl ../../cmd/agl
python3 make_data.py work
# warm_start INIT SKILL OUT: the two SFT stages, from the model in INIT
# through SKILL into OUT (also distill.sh's student).
warm_start() {
	# The skill: every demonstration calls the calculator, so the model
	# learns to copy the numbers into the call and the result into its reply.
	work/agl sft --model "$1" --data work/sft_tool.jsonl --out "$2" \
		--steps ${SKILL_STEPS:-800} --batch-size 16 --lr 0.003 --warmup 20
	# The habit: mostly answering from memory, which a tiny model gets wrong.
	work/agl sft --model "$2" --data work/sft_mix.jsonl --out "$3" \
		--steps ${HABIT_STEPS:-60} --batch-size 16 --lr 0.001 --warmup 5
}
if [ ! -f work/model/model.safetensors ]; then
	cat work/sft_tool.jsonl work/sft_mix.jsonl > work/sft_all.jsonl
	work/agl model init --preset ${PRESET:-1m} --bpe-data work/sft_all.jsonl --out work/init
	warm_start work/init work/skill work/model
fi

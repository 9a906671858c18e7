#!/usr/bin/env bash
# On-policy distillation on examples/calc, against RL on the same student.
# The teacher is run.sh's RL-trained model (run/best, the weights of its
# best validation, kept by trainer.keep_best); the student is a model about
# 5x smaller (student.json) with the teacher's tokenizer and chat template,
# warm-started by the teacher's own recipe (warmstart.sh's warm_start)
# into work/student, made once. From that same student:
#   agl train agl-distill.yaml   on-policy distillation (run-distill)
#   agl train agl-student.yaml   RL, no teacher (run-student)
# Both print their held-out validations every 4 steps and their wall time.
#   examples/calc/run.sh && examples/calc/distill.sh
set -euo pipefail
cd "$(dirname "$0")"
source ./warmstart.sh
if [ ! -f run/best/model.safetensors ]; then
	echo "distill.sh: no teacher in examples/calc/run/best: run examples/calc/run.sh first" >&2
	exit 1
fi
if [ ! -f work/student/model.safetensors ]; then
	rm -rf work/student-init work/student-skill
	work/agl model init --config student.json --tokenizer work/model/tokenizer.json --out work/student-init
	cp work/model/agl_chat.json work/student-init/
	warm_start work/student-init work/student-skill work/student
fi
rm -rf run-distill run-student
time work/agl train agl-distill.yaml "$@"
time work/agl train agl-student.yaml "$@"

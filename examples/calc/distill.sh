#!/usr/bin/env bash
# On-policy distillation on examples/calc: the warm start of run.sh (kept
# in work/model) is the teacher; a `tiny` student with the teacher's
# tokenizer and chat template (work/student, made once) learns from it
# with `agl train agl-distill.yaml`. RL from scratch on the same student,
# for comparison: the same config without its `distill:` line.
#   examples/calc/distill.sh        (fresh run; removes examples/calc/run-distill)
set -euo pipefail
cd "$(dirname "$0")"
source ./warmstart.sh
if [ ! -f work/student/model.safetensors ]; then
	work/agl model init --preset ${STUDENT_PRESET:-tiny} --tokenizer work/model/tokenizer.json --out work/student
	cp work/model/agl_chat.json work/student/
fi
rm -rf run-distill
exec work/agl train agl-distill.yaml "$@"

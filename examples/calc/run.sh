#!/usr/bin/env bash
# One command from a fresh clone: build agl, make the calc data, create a
# small model, warm-start it with SFT on demonstrations, then train it with RL.
#   examples/calc/run.sh            (fresh run; removes examples/calc/run)
set -euo pipefail
cd "$(dirname "$0")"
export GOEXPERIMENT=${GOEXPERIMENT-simd}
mkdir -p work
go build -o work/agl ../../cmd/agl
python3 make_data.py work
if [ ! -f work/model/model.safetensors ]; then
	work/agl model init --preset ${PRESET:-1m} --out work/init
	work/agl sft --model work/init --data work/sft.jsonl --out work/model --steps ${SFT_STEPS:-320} --batch-size 16 --lr 0.003 --warmup 20
fi
rm -rf run
exec work/agl train agl.yaml "$@"

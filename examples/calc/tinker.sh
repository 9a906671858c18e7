#!/usr/bin/env bash
# examples/calc through a Tinker service: the warm start of run.sh (the same
# commands and seeds, kept in work/model), then the Tinker stand-in
# (trainer/tinker/tinkertest) on loopback serving that model as its base
# model, and `agl train agl-tinker.yaml`: the run of agl.yaml (tasks, seed,
# steps, optimizer) with the model a policy of kind tinker, trained through
# forward_backward / optim_step and sampled through `sample`.
#   examples/calc/tinker.sh         (fresh run; removes examples/calc/run-tinker)
set -euo pipefail
cd "$(dirname "$0")"
source ./warmstart.sh
go build -o work/tinkerserve ../../trainer/tinker/tinkertest/cmd/tinkerserve
export TINKER_API_KEY=${TINKER_API_KEY:-calc-stand-in-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')}
rm -f work/tinker.url
work/tinkerserve --model work/model --url-file work/tinker.url &
serve=$!
trap 'kill $serve 2>/dev/null; wait $serve' EXIT
for _ in $(seq 300); do
	[ -s work/tinker.url ] && break
	kill -0 $serve
	sleep 0.1
done
TINKER_BASE_URL=$(cat work/tinker.url)
export TINKER_BASE_URL
rm -rf run-tinker
work/agl train agl-tinker.yaml "$@"

#!/bin/sh
# Benchmarks of the embedded model against a PyTorch CPU reference of the
# same architecture and workloads, measured in the same run.
#
#   model/bench/run.sh            (from the repository root)
#
# Installs Debian's python3-torch with apt when missing (never needed by
# tests). Prints Go figures with and without GOEXPERIMENT=simd, then torch's.
set -eu
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
if ! $PY -c 'import torch' 2>/dev/null; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch >/dev/null
fi
THREADS=$(nproc)
echo "== go (GOEXPERIMENT=simd)"
GOEXPERIMENT=simd go test ./model -run '^$' -bench 'Generate|Train' -benchtime 3x | grep Benchmark
echo "== go (no simd)"
go test ./model -run '^$' -bench 'Generate|Train' -benchtime 2x | grep Benchmark
echo "== torch"
$PY model/bench/torch_ref.py "$THREADS"
$PY -c "
import torch, time
torch.set_num_threads($THREADS)
a = torch.randn(1024, 1024); b = torch.randn(1024, 1024); a @ b
t = time.perf_counter()
for _ in range(10): a @ b
import re
print('torch 1024x1024 matmul %.1f GFLOP/s, %s' % (10 * 2 * 1024**3 / (time.perf_counter() - t) / 1e9,
      re.search(r'BLAS_INFO=\\w+', torch.__config__.show()).group(0)))
"

#!/bin/sh
# Benchmarks of the embedded model against a PyTorch CPU reference of the
# same architecture and workloads, measured in the same run.
#
#   model/bench/run.sh            (from the repository root)
#
# Installs Debian's python3-torch and libopenblas0-pthread with apt when
# missing (never needed by tests): without OpenBLAS, Debian's torch runs its
# matmuls on the reference BLAS, several times slower, and the comparison
# means nothing, so the script stops when torch has not loaded OpenBLAS.
# Prints Go figures with and without GOEXPERIMENT=simd, then torch's.
set -eu
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
if ! $PY -c 'import torch' 2>/dev/null || ! dpkg -s libopenblas0-pthread >/dev/null 2>&1; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch libopenblas0-pthread >/dev/null
fi
# Debian builds torch against the generic libblas.so.3 (its BLAS_INFO says
# "generic"); which library that is is decided at run time by the
# alternatives system, so ask the process which BLAS it mapped.
BLAS=$($PY -c "
import torch
a = torch.randn(64, 64); a @ a
libs = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'blas' in l.lower()})
print(' '.join(libs))
")
case "$BLAS" in
*openblas*) echo "torch BLAS: $BLAS" ;;
*)
	echo "run.sh: torch does not use OpenBLAS (loaded: ${BLAS:-no BLAS library}); install libopenblas0-pthread and select it with update-alternatives --config libblas.so.3-x86_64-linux-gnu" >&2
	exit 1
	;;
esac
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
print('torch 1024x1024 matmul %.1f GFLOP/s' % (10 * 2 * 1024**3 / (time.perf_counter() - t) / 1e9))
"

#!/usr/bin/env bash
# Runs every fuzz target (func FuzzXxx in a _test.go file) for a short fixed
# time each, one `go test -fuzz` per target (Go fuzzes one target per
# invocation). A crash fails the run and leaves the input under the
# package's testdata/fuzz/FuzzXxx/: commit it as a regression input once
# fixed. AGL_FUZZTIME sets the time per target (default 5s: the 22 targets
# take under 3 minutes on 2 cores once built, about 3.5 s of each being
# start-up).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${AGL_FUZZTIME:-5s}"
targets=$(grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r f; do
	sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$f" | sed "s|^|$(dirname "$f") |"
done)
n=$(wc -l <<<"$targets")
echo "fuzz: $n targets, $fuzztime each"
while read -r dir target; do
	echo "fuzz: $dir $target"
	go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 2s "$dir"
done <<<"$targets"

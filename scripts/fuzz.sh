#!/usr/bin/env bash
# Runs every fuzz target (func FuzzXxx in a _test.go file) for a short fixed
# time each. Go fuzzes one target per run; each package's fuzz-instrumented
# test binary is built once (`go test -c -fuzz`) and run once per target, in
# the package's folder, with the corpus cache `go test -fuzz` uses
# ($GOCACHE/fuzz/IMPORT_PATH), so a target costs its fuzz time and not a
# link as well. A crash fails the run and leaves the input under the
# package's testdata/fuzz/FuzzXxx/: commit it as a regression input once
# fixed. AGL_FUZZTIME sets the time per target (default 5s).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${AGL_FUZZTIME:-5s}"
targets=$(grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r f; do
	sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$f" | sed "s|^|$(dirname "$f") |"
done | sort -s -k1,1)
n=$(wc -l <<<"$targets")
echo "fuzz: $n targets, $fuzztime each"
bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT
cache="$(go env GOCACHE)/fuzz"
root=$PWD
# Go 1.26's fuzz coordinator can end a duration-bounded run with a bare
# "context deadline exceeded" and no failing input (go.dev/issue/75804,
# fixed in Go 1.27): that run counts as passed; a run that wrote a failing
# input under testdata/fuzz/ fails, whatever its message.
built=""
while read -r dir target; do
	bin="$bins/$(tr / _ <<<"$dir").test"
	if [ "$dir" != "$built" ]; then
		go test -c -fuzz . -o "$bin" "$dir"
		pkg=$(go list "$dir")
		built=$dir
	fi
	echo "fuzz: $dir $target"
	corpus="$dir/testdata/fuzz/$target"
	before=$(ls "$corpus" 2>/dev/null | sort || true)
	log=$(mktemp)
	if (cd "$dir" && "$bin" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$fuzztime" -test.fuzzminimizetime 2s \
		-test.fuzzcachedir "$cache/$pkg" -test.paniconexit0 -test.timeout 10m) 2>&1 | tee "$log"; then
		rm -f "$log"
		continue
	fi
	after=$(ls "$corpus" 2>/dev/null | sort || true)
	if [ "$before" = "$after" ] && grep -q '^    context deadline exceeded$' "$log" && [ "$(grep -c '^--- FAIL' "$log")" = 1 ]; then
		echo "fuzz: $target: Go's fuzz coordinator reported its own deadline (go.dev/issue/75804), no failing input written: counted as passed"
		rm -f "$log"
		continue
	fi
	rm -f "$log"
	echo "fuzz: $target failed (input under $root/$corpus)" >&2
	exit 1
done <<<"$targets"

#!/usr/bin/env bash
# Runs every test: starts a throwaway PostgreSQL 15 cluster for the store
# conformance suite (scripts/with-postgres.sh), then the whole module with
# the race detector. Extra arguments go to `go test` (e.g. -run Store).
#
# checkptr is off because GoMLX's pure-Go matmul trips it under -race.
set -euo pipefail
cd "$(dirname "$0")/.."
# The real-CLI tests run the pinned Claude Code and Codex from npm
# (scripts/install-clis.sh; a no-op once installed). Without npm they skip,
# unless AGL_REQUIRE_CLIS=1 (CI) makes that a failure.
if command -v npm >/dev/null 2>&1; then
	scripts/install-clis.sh || echo "test.sh: could not install the harness CLIs; their tests skip" >&2
fi
# The sandbox tests (sandbox, controller: repository tasks) need Debian's
# bubblewrap; as root with apt, install it when missing. Without it they
# skip, unless AGL_REQUIRE_BWRAP=1 (CI) makes that a failure.
if ! command -v bwrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	export DEBIAN_FRONTEND=noninteractive
	# A fresh machine may have no package lists yet: update once if needed.
	{ apt-get install -y -qq bubblewrap >/dev/null 2>&1 ||
		{ apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; }; } ||
		echo "test.sh: could not install bubblewrap; the sandbox tests skip" >&2
fi
# The non-race lane: the tests that skip under the race detector
# (testutil.SkipRace: model numerics) run first without it, as listed in
# scripts/norace-tests.txt. Extra arguments skip this pass.
if [ $# -eq 0 ]; then
	pkgs=()
	names=()
	while read -r pkg tests; do
		pkgs+=("$pkg")
		names+=($tests)
	done < <(grep -v '^#' scripts/norace-tests.txt | grep .)
	pattern="^($(IFS='|'; echo "${names[*]}"))\$"
	go test -count=1 -timeout 20m -run "$pattern" "${pkgs[@]}"
fi
exec scripts/with-postgres.sh go test -race -gcflags=all=-d=checkptr=0 -timeout 45m "$@" ./...

#!/usr/bin/env bash
# Runs every test: starts a throwaway PostgreSQL 15 cluster for the store
# conformance suite (scripts/with-postgres.sh), then the whole module with
# the race detector. Extra arguments go to `go test` (e.g. -run Store).
#
# checkptr is off because GoMLX's pure-Go matmul trips it under -race.
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/with-postgres.sh go test -race -gcflags=all=-d=checkptr=0 -timeout 20m "$@" ./...

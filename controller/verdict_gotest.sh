#!/bin/sh
# The gotest verdict runner (docs/concepts/verdict.md), bound read-only in
# the test sandbox. The controller runs it as
#
#   sh verdict_gotest.sh run COMMAND GENERATED...
#
# COMMAND is the task's test_command, whose `go test` has this script as
# its -exec: go builds and vets every test binary, and record keeps each
# binary, its arguments and its directory instead of running it. No code of
# the workspace runs until then. The GENERATED verdict tests (which hold
# the evaluation's key) are then removed, and each kept binary runs with
# only the verdict tests selected: they run the package's tests and print
# the authenticated report. The exit status is 0 when every step exited 0.
set -u
case ${1-} in
record)
	# go test -exec: record BINARY ARG...
	shift
	d=$(mktemp -d "$AGL_GOTEST_BIN/t.XXXXXX") || exit 1
	cp -- "$1" "$d/test" || exit 1
	shift
	printf '%s' "$PWD" >"$d/dir" || exit 1
	# Given last, these win over the same flags in the recorded ones.
	printf '%s\0' "$@" '-test.run=^TestAglVerdictX?$' -test.skip= -test.list= -test.count=1 >"$d/args" || exit 1
	;;
run)
	bin=$(mktemp -d "${TMPDIR:-/tmp}/agl-gotest.XXXXXX") || exit 1
	AGL_GOTEST_BIN=$bin
	export AGL_GOTEST_BIN
	sh -c "$2"
	s=$?
	shift 2
	rm -f -- "$@" || exit 1
	# A build or vet failure already decides: nothing runs.
	[ "$s" -eq 0 ] || exit "$s"
	unset AGL_GOTEST_BIN
	for d in "$bin"/t.*; do
		[ -f "$d/test" ] || continue
		(cd "$(cat "$d/dir")" && exec xargs -0 -a "$d/args" "$d/test") || s=1
	done
	exit "$s"
	;;
*)
	echo "usage: verdict_gotest.sh run COMMAND GENERATED... | record BINARY ARG..." >&2
	exit 2
	;;
esac

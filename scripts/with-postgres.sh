#!/usr/bin/env bash
# with-postgres.sh CMD [ARGS...]
#
# Starts a throwaway PostgreSQL 15 cluster in a temporary directory, exports
# AGL_TEST_POSTGRES_URL pointing at it, runs CMD, then stops the cluster and
# deletes its directory, exiting with CMD's exit status.
#
#   scripts/with-postgres.sh go test ./store/postgres/...
#
# The cluster listens on 127.0.0.1 on a free port (trust auth, throwaway
# data only) and on a unix socket inside the temporary directory. As root
# the server runs as the `postgres` user (created if missing); otherwise as
# the current user. If the PostgreSQL 15 server binaries are missing and we
# are root, they are installed with apt-get (postgresql-15).
#
# Environment:
#   PG_BIN        directory holding initdb/pg_ctl (default: found under
#                 /usr/lib/postgresql/15/bin, or on PATH)
#   PG_FSYNC      "off" to run the cluster without fsync (faster, not
#                 crash-safe; default on, so benchmarks are honest)
#   PG_KEEP_LOG   "1" to print the server log on exit
set -euo pipefail

if [[ $# -eq 0 ]]; then
	echo "usage: $0 CMD [ARGS...]" >&2
	exit 2
fi

log() { echo "with-postgres: $*" >&2; }

find_pg_bin() {
	if [[ -n "${PG_BIN:-}" && -x "$PG_BIN/initdb" ]]; then
		echo "$PG_BIN"
		return 0
	fi
	local d
	for d in /usr/lib/postgresql/15/bin /usr/local/pgsql/bin; do
		if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
			echo "$d"
			return 0
		fi
	done
	if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
		dirname "$(command -v initdb)"
		return 0
	fi
	return 1
}

if ! PG_BIN="$(find_pg_bin)"; then
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		log "PostgreSQL 15 not found; installing postgresql-15 with apt-get"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >/dev/null
		apt-get install -y -qq postgresql-15 >/dev/null
		PG_BIN="$(find_pg_bin)" || {
			log "postgresql-15 installed but initdb/pg_ctl still not found; set PG_BIN"
			exit 1
		}
	else
		log "PostgreSQL 15 server binaries (initdb, pg_ctl) not found."
		log "Install them with:  sudo apt-get install -y postgresql-15"
		log "or point PG_BIN at the directory holding initdb and pg_ctl."
		exit 1
	fi
fi

# Who runs the server: postgres refuses to run as root.
as_pg=()
pg_user="$(id -un)"
if [[ $(id -u) -eq 0 ]]; then
	pg_user=postgres
	if ! id postgres >/dev/null 2>&1; then
		useradd --system --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin postgres
	fi
	if command -v runuser >/dev/null 2>&1; then
		as_pg=(runuser -u postgres --)
	else
		as_pg=(su postgres -s /bin/sh -c '"$0" "$@"')
	fi
fi

base="${TMPDIR:-/tmp}"
# The server user must be able to reach the directory (TMPDIR may be private).
if [[ ${#as_pg[@]} -gt 0 ]] && ! "${as_pg[@]}" test -x "$base" 2>/dev/null; then
	base=/tmp
fi
tmp="$(mktemp -d "$base/agl-pg.XXXXXX")"
chmod 0755 "$tmp"
if [[ $(id -u) -eq 0 ]]; then
	chown postgres: "$tmp"
fi
data="$tmp/data"
sock="$tmp"
logfile="$tmp/server.log"
started=0

cleanup() {
	local rc=$?
	if [[ $started -eq 1 ]]; then
		"${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	if [[ "${PG_KEEP_LOG:-}" == 1 && -f "$logfile" ]]; then
		log "server log:"
		cat "$logfile" >&2 || true
	fi
	rm -rf "$tmp"
	exit "$rc"
}
child=""
# On INT/TERM, pass the signal on to the command, wait for it, then clean up.
on_signal() {
	if [[ -n "$child" ]]; then
		kill -s "$1" "$child" 2>/dev/null || true
		wait "$child" 2>/dev/null || true
	fi
	exit "$2"
}
trap cleanup EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM

"${as_pg[@]}" "$PG_BIN/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$tmp/initdb.log" 2>&1 || {
	log "initdb failed:"
	cat "$tmp/initdb.log" >&2
	exit 1
}

port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

fsync="${PG_FSYNC:-on}"
port=""
for try in 1 2 3 4 5 6 7 8; do
	cand=$((20000 + RANDOM % 30000))
	if port_in_use "$cand"; then
		continue
	fi
	if "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$data" -l "$logfile" -w -t 60 \
		-o "-p $cand -k $sock -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=$fsync -c shared_buffers=128MB" \
		start >/dev/null 2>&1; then
		port="$cand"
		started=1
		break
	fi
	log "start on port $cand failed (try $try); retrying"
done
if [[ -z "$port" ]]; then
	log "could not start PostgreSQL; server log:"
	cat "$logfile" >&2 || true
	exit 1
fi

export AGL_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
log "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') running as $pg_user on 127.0.0.1:$port (data in $data)"
log "AGL_TEST_POSTGRES_URL=$AGL_TEST_POSTGRES_URL"

# Run the command in the background so that a signal reaches our trap
# while we wait (bash defers traps until a foreground child exits); keep
# our stdin as its stdin.
set +e
"$@" <&0 &
child=$!
wait "$child"
status=$?
child=""
set -e
exit "$status"

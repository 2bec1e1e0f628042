#!/usr/bin/env bash
# The fleet's rows (docs/benchmarks.md#a-fleet): a throwaway PostgreSQL (Debian's, installed by
# tests/postgres/install.sh when missing; initdb in a temporary directory, loopback only, a free
# port, run as the `postgres` user when this script is root), two mediatord on it, and the
# permission round trip and an event burst, each through the daemon holding the session and
# through the other one. Prints the rows; everything it started is stopped when it exits.
#
#   bench/fleet.sh               # 5 runs of each
#   bench/fleet.sh --runs 3      # extra arguments go to `mediatord-bench fleet`
#   MEDIATORD=other/mediatord bench/fleet.sh    # another build (the load client stays this one)
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)

say() { printf 'bench: %s\n' "$*" >&2; }
die() {
	printf 'bench: ERROR: %s\n' "$*" >&2
	exit 1
}

bash "$REPO/tests/postgres/install.sh"
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
[[ -x "$BIN/initdb" ]] || die "no PostgreSQL server binaries under /usr/lib/postgresql"

say "building release binaries ..."
(cd "$REPO" && cargo build --release -p mediatord -p mediatord-bench)

DIR=$(mktemp -d /tmp/mediatord-bench-pg.XXXXXX)
AS=()
if [[ $(id -u) -eq 0 ]]; then
	USER_=postgres
	id postgres >/dev/null 2>&1 || USER_=nobody
	chown -R "$USER_:" "$DIR"
	AS=(setpriv --reuid "$USER_" --regid "$USER_" --clear-groups --)
fi
PID=
cleanup() {
	[[ -n $PID ]] && kill -INT "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT
"${AS[@]}" "$BIN/initdb" -D "$DIR/data" -U mediatord -A trust --no-sync -E UTF8 >/dev/null
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${AS[@]}" "$BIN/postgres" -D "$DIR/data" -k "$DIR" -h 127.0.0.1 -p "$PORT" >"$DIR/log" 2>&1 &
PID=$!
for _ in $(seq 1 200); do
	"$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" && break
	sleep 0.1
done
"$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" || die "PostgreSQL did not start: $(cat "$DIR/log")"
"$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U mediatord bench

"$REPO/target/release/mediatord-bench" fleet --mediatord "${MEDIATORD:-$REPO/target/release/mediatord}" \
	--store "postgres://mediatord@127.0.0.1:$PORT/bench" --runs 5 "$@"

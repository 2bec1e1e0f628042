#!/usr/bin/env bash
# The daemon's own CPU time per relayed update: user + system time of the mediatord process while one
# stream (read by curl) relays a burst of N `stream` updates from the demo agent. Less sensitive to a
# busy machine than throughput, so it compares two builds of the hot path well.
#
#   bench/cpu-per-update.sh target/release/mediatord [N=300000]
#
# Listens on 127.0.0.1 only (port chosen by the OS); needs curl.
set -Eeuo pipefail
BIN=${1:?usage: cpu-per-update.sh MEDIATORD [N]}
N=${2:-300000}
DIR=$(mktemp -d)
cleanup() {
	[[ -n "${READER:-}" ]] && kill "$READER" 2>/dev/null || true
	[[ -n "${DAEMON:-}" ]] && kill "$DAEMON" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$DIR"
}
trap cleanup EXIT
# A workspace and a state directory of its own: never the user's.
mkdir -p "$DIR/workspace"
HOME="$DIR" XDG_STATE_HOME="$DIR" "$BIN" serve --port 0 --agent demo --workspace "$DIR/workspace" \
	--state-dir "$DIR/state" >"$DIR/out" 2>"$DIR/err" &
DAEMON=$!
for _ in $(seq 100); do grep -q 'listening on' "$DIR/out" && break; sleep 0.05; done
URL=$(sed -n 's/.*listening on //p' "$DIR/out")
SID=$(curl -sf -X POST "$URL/session" -H 'content-type: application/json' -d '{}' | sed -n 's/.*"sessionId":"\([^"]*\)".*/\1/p')
curl -sN "$URL/session/$SID/events" >/dev/null &
READER=$!
sleep 0.3
ticks() { awk '{print $14 + $15}' "/proc/$DAEMON/stat"; }
metric() { curl -sf "$URL/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
before=$(ticks)
curl -sf -X POST "$URL/session/$SID/prompt" -H 'content-type: application/json' \
	-d "{\"prompt\":[{\"type\":\"text\",\"text\":\"stream $N\"}]}" >/dev/null
# Wait (bounded) until the stream has been handed every event.
for _ in $(seq 400); do
	[[ "$(metric mediatord_events_published_total)" == "$(metric mediatord_events_delivered_total)" ]] && break
	sleep 0.05
done
after=$(ticks)
hz=$(getconf CLK_TCK)
echo "daemon CPU per update: $(((after - before) * 1000000000 / hz / N)) ns ($N updates, evicted streams: $(metric mediatord_streams_evicted_total))"

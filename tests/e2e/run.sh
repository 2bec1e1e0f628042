#!/usr/bin/env bash
# Real-world end-to-end run: the real Qwen Code agent (npm @qwen-code/qwen-code, offline against the
# scripted fake model) and the official SDK client (npm @qwen-code/sdk DaemonClient) against the
# daemon under test.
#
#   E2E_DAEMON=/path/to/mediatord tests/e2e/run.sh      # the mediatord binary under test
#   E2E_DAEMON=qwen-serve        tests/e2e/run.sh      # reference: qwen serve itself
#   ... run.sh [extra node --test args or test files]  # e.g. --test-name-pattern=cancel
#
# Optional env: E2E_FAKE_LLM (path to fake_llm.py; default ../shared/tools/fake_llm.py beside the
# repo), E2E_KEEP_TMP=1 (keep the throw-away HOME/workspace/logs), E2E_INSTALL_TIMEOUT (seconds,
# default 600). Needs node (20+), npm, python3. Exit status: non-zero if any test failed, the install
# failed, the daemon did not start, or any agent process outlived the daemon.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)

say() { printf 'e2e: %s\n' "$*" >&2; }
die() {
	printf '\ne2e: ERROR: %s\n\n' "$*" >&2
	exit 1
}

for tool in node npm python3; do
	command -v "$tool" >/dev/null 2>&1 || die "'$tool' is required but not on PATH"
done

DAEMON=${E2E_DAEMON:-}
[[ -n "$DAEMON" ]] || die "set E2E_DAEMON to the mediatord binary (e.g. target/debug/mediatord), or to 'qwen-serve' to run against the reference daemon"
if [[ "$DAEMON" != qwen-serve ]]; then
	[[ "$DAEMON" = /* ]] || DAEMON="$PWD/$DAEMON"
	[[ -x "$DAEMON" ]] || die "E2E_DAEMON=$DAEMON is not an executable file (build it first: cargo build)"
fi

FAKE_LLM=${E2E_FAKE_LLM:-$REPO/../shared/tools/fake_llm.py}
[[ -f "$FAKE_LLM" ]] || die "fake model server not found at $FAKE_LLM (set E2E_FAKE_LLM)"

# ---------------------------------------------------------------- install (npm ci, never skipped)
LOCK_SUM=$(sha256sum "$HERE/package-lock.json" | cut -d' ' -f1)
STAMP="$HERE/node_modules/.e2e-lock-sha256"
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$LOCK_SUM" || ! -x "$HERE/node_modules/.bin/qwen" ]]; then
	say "installing pinned @qwen-code/qwen-code and @qwen-code/sdk with npm ci (about 300 MB) ..."
	t0=$(date +%s)
	if ! (cd "$HERE" && timeout "${E2E_INSTALL_TIMEOUT:-600}" npm ci --no-audit --no-fund --fetch-retries=2 --fetch-timeout=60000 >"$HERE/.npm-ci.log" 2>&1); then
		tail -n 25 "$HERE/.npm-ci.log" >&2 || true
		die "npm ci failed (is the npm registry reachable?). The real-world e2e cannot run without the pinned packages; this is a failure, not a skip. Full log: $HERE/.npm-ci.log"
	fi
	echo "$LOCK_SUM" >"$STAMP"
	rm -f "$HERE/.npm-ci.log"
	say "installed in $(($(date +%s) - t0)) s"
fi
QWEN="$HERE/node_modules/.bin/qwen"
[[ -x "$QWEN" ]] || die "npm ci finished but $QWEN is missing"

# ---------------------------------------------------------------- throw-away world
TMP=$(mktemp -d "${TMPDIR:-/tmp}/mediatord-e2e.XXXXXX")
TMP=$(cd "$TMP" && pwd -P)
AGENT_HOME="$TMP/home" # HOME of the daemon and so of its agents (not of this script or the tests)
WS="$TMP/workspace"
LOGS="$TMP/logs"
mkdir -p "$AGENT_HOME/.qwen" "$WS" "$LOGS"
cat >"$AGENT_HOME/.qwen/settings.json" <<'JSON'
{"security":{"auth":{"selectedType":"openai"}},"model":{"name":"fake-model"},"tools":{"approvalMode":"default"}}
JSON

FAKE_PID=""
DAEMON_PID=""
STATUS=1

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# True if pid $1 is this script or one of its descendants (helpers of this very check).
mine() {
	local p=$1 n=0
	while [[ -n "$p" && "$p" != 0 && "$p" != 1 && $n -lt 64 ]]; do
		[[ "$p" == "$$" ]] && return 0
		p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null || true)
		n=$((n + 1))
	done
	return 1
}

# Every other process whose command line, working directory or environment points into $TMP:
# what is left of the daemon and its agents (run with cwd = the workspace, HOME = $AGENT_HOME).
ours() {
	local p
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		if tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qF "$TMP" ||
			[[ "$(readlink "/proc/$p/cwd" 2>/dev/null)" == "$TMP"* ]] ||
			tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qxF "HOME=$AGENT_HOME"; then
			mine "$p" || echo "$p"
		fi
	done
}

wait_gone() { # pid seconds
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.1
	done
	return 1
}

cleanup() {
	local rc=$STATUS
	trap - EXIT INT TERM
	set +e
	if [[ -n "$DAEMON_PID" ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
		kill -TERM "$DAEMON_PID" 2>/dev/null
		if ! wait_gone "$DAEMON_PID" 20; then
			say "FAIL: the daemon did not exit within 20 s of SIGTERM; killing it"
			kill -KILL "$DAEMON_PID" 2>/dev/null
			rc=1
		fi
	fi
	# The daemon is gone: none of its agents may remain (give exiting ones 3 s).
	local left="" i
	for ((i = 0; i < 30; i++)); do
		left=$(ours | grep -vx "${FAKE_PID:-x}" || true)
		[[ -z "$left" ]] && break
		sleep 0.1
	done
	if [[ -n "$left" ]]; then
		say "FAIL: processes outlived the daemon:"
		for p in $left; do
			printf '  %s %s\n' "$p" "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-200)" >&2
		done
		for p in $left; do kill -KILL "$p" 2>/dev/null; done
		rc=1
	fi
	if [[ -n "$FAKE_PID" ]]; then
		kill -TERM "$FAKE_PID" 2>/dev/null
		wait_gone "$FAKE_PID" 5 || kill -KILL "$FAKE_PID" 2>/dev/null
	fi
	if [[ $rc -ne 0 ]]; then
		say "daemon log tail ($LOGS/daemon.err):"
		tail -n 40 "$LOGS/daemon.err" >&2 2>/dev/null
	fi
	if [[ "${E2E_KEEP_TMP:-}" == 1 ]]; then
		say "kept $TMP"
	else
		rm -rf "$TMP"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'STATUS=130; exit 130' INT TERM

# ---------------------------------------------------------------- fake model
for attempt in 1 2 3; do
	FAKE_PORT=$(free_port)
	FAKE_LLM_PORT=$FAKE_PORT python3 "$FAKE_LLM" >"$LOGS/fake_llm.log" 2>&1 &
	FAKE_PID=$!
	up=""
	for ((i = 0; i < 100; i++)); do
		if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$FAKE_PORT/v1/models', timeout=1)" 2>/dev/null; then
			up=1
			break
		fi
		kill -0 "$FAKE_PID" 2>/dev/null || break
		sleep 0.1
	done
	[[ -n "$up" ]] && break
	kill -KILL "$FAKE_PID" 2>/dev/null || true
	FAKE_PID=""
done
[[ -n "$FAKE_PID" ]] || die "fake_llm did not start: $(tail -n 5 "$LOGS/fake_llm.log")"
say "fake model on 127.0.0.1:$FAKE_PORT"

# Nothing from the caller's environment may point the daemon or the SDK elsewhere.
unset QWEN_SERVER_TOKEN MEDIATORD_TOKEN MEDIATORD_CONFIG MEDIATORD_AGENT MEDIATORD_PORT MEDIATORD_HOSTNAME QWEN_CLI_ENTRY
# The daemon's environment, inherited by the agents it spawns.
DAEMON_ENV=(env HOME="$AGENT_HOME" OPENAI_API_KEY=sk-fake OPENAI_BASE_URL="http://127.0.0.1:$FAKE_PORT/v1" OPENAI_MODEL=fake-model)

# ---------------------------------------------------------------- daemon under test
if [[ "$DAEMON" == qwen-serve ]]; then
	KIND=qwen-serve
	(cd "$WS" && exec "${DAEMON_ENV[@]}" "$QWEN" serve --port 0 --no-web --workspace "$WS") >"$LOGS/daemon.out" 2>"$LOGS/daemon.err" &
else
	KIND=mediatord
	AGENT_CMD="$QWEN --acp"
	[[ "$QWEN" =~ [[:space:]] ]] && AGENT_CMD="'$QWEN' --acp" # --agent is split like a POSIX shell would
	(cd "$WS" && exec "${DAEMON_ENV[@]}" "$DAEMON" serve --port 0 --agent "$AGENT_CMD" --workspace "$WS") >"$LOGS/daemon.out" 2>"$LOGS/daemon.err" &
fi
DAEMON_PID=$!
BASE=""
for ((i = 0; i < 600; i++)); do # 60 s
	BASE=$(grep -m1 -oE 'listening on http://[^ ]+' "$LOGS/daemon.out" 2>/dev/null | sed 's/^listening on //' || true)
	[[ -n "$BASE" ]] && break
	kill -0 "$DAEMON_PID" 2>/dev/null || break
	sleep 0.1
done
if [[ -z "$BASE" ]]; then
	cat "$LOGS/daemon.out" >&2 || true
	tail -n 40 "$LOGS/daemon.err" >&2 || true
	die "$KIND did not print its 'listening on http://ADDR:PORT' line within 60 s"
fi
say "$KIND (pid $DAEMON_PID) at $BASE, workspace $WS"

# ---------------------------------------------------------------- scenarios
export E2E_BASE_URL="$BASE" E2E_WORKSPACE="$WS" E2E_DAEMON_KIND="$KIND"
FILES=()
ARGS=()
for a in "$@"; do
	if [[ "$a" == *.mjs ]]; then FILES+=("$a"); else ARGS+=("$a"); fi
done
((${#FILES[@]})) || FILES=(http.test.mjs sdk.test.mjs)
set +e
(cd "$HERE" && node --test --test-concurrency=1 --test-timeout=240000 "${ARGS[@]}" "${FILES[@]}")
STATUS=$?
set -e
if [[ $STATUS -ne 0 ]]; then say "scenario failures against $KIND (exit $STATUS)"; fi
exit "$STATUS"

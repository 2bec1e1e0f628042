#!/usr/bin/env bash
# Real-world end-to-end run: real ACP agents (npm @qwen-code/qwen-code, Zed's
# @zed-industries/claude-code-acp and @google/gemini-cli, all offline against the project's fake model
# server, fake-model/) and the official SDK client (npm @qwen-code/sdk DaemonClient) against the
# daemon under test.
# `cargo test --test e2e` (tests/e2e.rs) runs it with the fake model started in-process.
#
#   E2E_DAEMON=/path/to/mediatord tests/e2e/run.sh      # the mediatord binary under test
#   E2E_DAEMON=qwen-serve        tests/e2e/run.sh      # reference: qwen serve itself (Qwen Code only)
#   ... run.sh [test files] [extra node --test args]    # e.g. agents.test.mjs --test-name-pattern=cancel
#
# Phases, each with its own daemon, throw-away HOME and workspace, checked afterwards for processes
# that outlived the daemon (one fake model serves them all: it keeps no state between requests):
#   qwen-api       http.test.mjs + sdk.test.mjs + webapp.test.mjs (the daemon's API in depth, Qwen Code
#                                   behind it; the web app in headless Chromium answering Qwen Code's question)
#   agents-qwen    agents.test.mjs E2E_AGENT=qwen   (the agent-generic core scenarios ...)
#   agents-claude  agents.test.mjs E2E_AGENT=claude (... the same file against Claude Code)
#   agents-gemini  agents.test.mjs E2E_AGENT=gemini (... and against Gemini CLI)
#   agents-all     multi.test.mjs  (one daemon running every agent of E2E_AGENTS at once, named,
#                                   each with its own environment from the config file's agents map)
#   resume-AGENT   resume.test.mjs, twice per agent on one HOME (state directory, agent files): a
#                                   session and a turn; the daemon restarted; POST /session/:id/resume
#                                   and a second turn on the same id
#   changes-demo   changes.test.mjs (@qwen-code/sdk's DaemonClient: rewind snapshots, rewind, the
#                                   workspace diff, the file routes; a plain dir, then a git repository)
#   acp-demo       acp.test.mjs    (/acp with the official ACP TypeScript SDK over WebSocket and
#                                   Streamable HTTP, @qwen-code/sdk over acp-ws; the demo agent)
#   reviewers-qwen reviewers.test.mjs (a `command` reviewer, reviewer.py, judging Qwen Code's shell
#                                   commands; the one it escalates approved in the web app in Chromium)
#   reviewers-model reviewers.test.mjs again, the reviewer a `model` one on the fake model
#
# Optional env: E2E_FAKE_MODEL_URL (a running fake model, as tests/e2e.rs passes; without it this
# script starts E2E_FAKE_MODEL, default target/debug/mediatord-fake-model, built by
# `cargo build -p mediatord-fake-model`), E2E_AGENTS (agents for agents.test.mjs and multi.test.mjs,
# default "qwen claude gemini"), E2E_KEEP_TMP=1 (keep the throw-away dirs and logs), E2E_ACP_TAP=1 (log every ACP line
# between daemon and agent to <phase>/logs/acp-<agent>.jsonl, via acp-tap.mjs), E2E_INSTALL_TIMEOUT (seconds,
# default 600). Needs node (20+) and npm, and the npm registry on the first run. Exit status: non-zero
# if any test failed, the install failed, a daemon did not start or did not exit cleanly, or any agent
# process outlived its daemon. Every failure that stops the run prints one `e2e: ERROR: ...` line
# saying what is missing.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)

say() { printf 'e2e: %s\n' "$*" >&2; }
die() {
	printf '\ne2e: ERROR: %s\n\n' "$*" >&2
	STATUS=1 # the EXIT trap exits with $STATUS
	exit 1
}

command -v node >/dev/null 2>&1 || die "the e2e suite needs Node.js 20 or later: 'node' is not on PATH"
command -v npm >/dev/null 2>&1 || die "the e2e suite needs npm (it installs the pinned agents and SDK): 'npm' is not on PATH"
NODE_VERSION=$(node --version)
NODE_MAJOR=${NODE_VERSION#v}
NODE_MAJOR=${NODE_MAJOR%%.*}
[[ "$NODE_MAJOR" =~ ^[0-9]+$ && "$NODE_MAJOR" -ge 20 ]] || die "the e2e suite needs Node.js 20 or later, found $NODE_VERSION"
# The pinned @qwen-code/qwen-code and @qwen-code/sdk declare engines node >=22; the suite passes on
# Node 20.20 (what CI uses), so npm's EBADENGINE warnings for those two are expected (README.md).
NODE_FLAGS=()
if ((NODE_MAJOR < 22)); then
	say "Node $NODE_VERSION: older than the >=22 that @qwen-code/qwen-code and @qwen-code/sdk declare; verified to work on 20.20 (tests/e2e/README.md)"
	# The WebSocket clients (the ACP SDK's, @qwen-code/sdk's acp-ws) use the global WebSocket, which
	# Node 22 has and Node 20 keeps behind this flag.
	NODE_FLAGS=(--experimental-websocket)
fi

DAEMON=${E2E_DAEMON:-}
[[ -n "$DAEMON" ]] || die "set E2E_DAEMON to the mediatord binary (e.g. target/debug/mediatord), or to 'qwen-serve' to run against the reference daemon"
if [[ "$DAEMON" != qwen-serve ]]; then
	[[ "$DAEMON" = /* ]] || DAEMON="$PWD/$DAEMON"
	[[ -x "$DAEMON" ]] || die "E2E_DAEMON=$DAEMON is not an executable file (build it first: cargo build)"
fi

FAKE_URL=${E2E_FAKE_MODEL_URL:-}
FAKE_BIN=""
if [[ -z "$FAKE_URL" ]]; then
	FAKE_BIN=${E2E_FAKE_MODEL:-$REPO/target/debug/mediatord-fake-model}
	[[ -x "$FAKE_BIN" ]] || die "no fake model: set E2E_FAKE_MODEL_URL to a running one, or build $FAKE_BIN with 'cargo build -p mediatord-fake-model' (or run the suite with 'cargo test --test e2e', which starts one itself)"
fi

AGENTS=${E2E_AGENTS:-qwen claude gemini}
for a in $AGENTS; do
	[[ "$a" == qwen || "$a" == claude || "$a" == gemini ]] || die "E2E_AGENTS: unknown agent '$a' (known: qwen claude gemini)"
done

# ---------------------------------------------------------------- install (npm ci, never skipped)
QWEN="$HERE/node_modules/.bin/qwen"
CLAUDE_ACP="$HERE/node_modules/.bin/claude-code-acp"
GEMINI="$HERE/node_modules/.bin/gemini"
LOCK_SUM=$(sha256sum "$HERE/package-lock.json" | cut -d' ' -f1)
STAMP="$HERE/node_modules/.e2e-lock-sha256"
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$LOCK_SUM" || ! -x "$QWEN" || ! -x "$CLAUDE_ACP" || ! -x "$GEMINI" ]]; then
	# .npmrc sets ignore-scripts: no package's install script runs (none is needed).
	say "installing pinned @qwen-code/qwen-code, @qwen-code/sdk, @zed-industries/claude-code-acp and @google/gemini-cli with npm ci (about 500 MB) ..."
	t0=$(date +%s)
	if ! (cd "$HERE" && timeout "${E2E_INSTALL_TIMEOUT:-600}" npm ci --no-audit --no-fund --fetch-retries=2 --fetch-timeout=60000 >"$HERE/.npm-ci.log" 2>&1); then
		tail -n 25 "$HERE/.npm-ci.log" >&2 || true
		die "the e2e suite needs the npm registry: npm ci of the pinned packages failed (registry unreachable, or it refused them). This is a failure, not a skip. Full log: $HERE/.npm-ci.log"
	fi
	echo "$LOCK_SUM" >"$STAMP"
	rm -f "$HERE/.npm-ci.log"
	say "installed in $(($(date +%s) - t0)) s"
fi
[[ -x "$QWEN" ]] || die "npm ci finished but $QWEN is missing"
[[ -x "$CLAUDE_ACP" ]] || die "npm ci finished but $CLAUDE_ACP is missing"
[[ -x "$GEMINI" ]] || die "npm ci finished but $GEMINI is missing"

# ---------------------------------------------------------------- arguments -> phases
FILES=()
ARGS=()
for a in "$@"; do
	if [[ "$a" == *.mjs ]]; then FILES+=("$(basename "$a")"); else ARGS+=("$a"); fi
done
((${#FILES[@]})) || FILES=(http.test.mjs sdk.test.mjs webapp.test.mjs agents.test.mjs multi.test.mjs resume.test.mjs acp.test.mjs changes.test.mjs reviewers.test.mjs)
API_FILES=()
RUN_AGENTS=0
RUN_MULTI=0
RUN_RESUME=0
RUN_ACP=0
RUN_CHANGES=0
RUN_REVIEWERS=0
for f in "${FILES[@]}"; do
	[[ -f "$HERE/$f" ]] || die "no such test file: $f"
	case $f in
	agents.test.mjs) RUN_AGENTS=1 ;;
	multi.test.mjs) RUN_MULTI=1 ;;
	resume.test.mjs) RUN_RESUME=1 ;;
	acp.test.mjs) RUN_ACP=1 ;;
	changes.test.mjs) RUN_CHANGES=1 ;;
	reviewers.test.mjs) RUN_REVIEWERS=1 ;;
	*) API_FILES+=("$f") ;;
	esac
done
# webapp.test.mjs drives Debian's Chromium through chromedriver, as tests/browser.rs does.
# So does reviewers.test.mjs.
if [[ " ${FILES[*]} " =~ " "(webapp|reviewers)".test.mjs " && "$DAEMON" != qwen-serve ]]; then
	"$REPO/tests/browser/install.sh" || die "webapp.test.mjs and reviewers.test.mjs need chromium and chromedriver, and tests/browser/install.sh could not install them"
fi

# Nothing from the caller's environment may point the tests or the SDK (which reads QWEN_SERVER_TOKEN)
# elsewhere; the daemon's own environment is built per phase below.
unset QWEN_SERVER_TOKEN MEDIATORD_TOKEN MEDIATORD_CONFIG MEDIATORD_AGENT MEDIATORD_PORT MEDIATORD_HOSTNAME QWEN_CLI_ENTRY

# ---------------------------------------------------------------- helpers
TMP=$(mktemp -d "${TMPDIR:-/tmp}/mediatord-e2e.XXXXXX")
TMP=$(cd "$TMP" && pwd -P)
STATUS=0    # overall exit status
PHASE=""    # the phase running now (for cleanup on interrupt)
PHASE_DIR=""
AGENT_HOME=""
FAKE_PID="" # the fake model, when this script started it
DAEMON_PID=""
SUMMARY=()

# A loopback port that was free a moment ago (nothing listens on it).
free_port() {
	node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# Quote one word for --agent, which the daemon splits like a POSIX shell.
shq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# A JSON string holding $1.
js() { node -p 'JSON.stringify(process.argv[1])' -- "$1"; }

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

# Every other live process whose command line, working directory or environment points into the
# phase's directory: what is left of its daemon and agents (run with cwd = the workspace, HOME =
# $AGENT_HOME). Zombies (exited, not yet reaped) do not count.
ours() {
	local p
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		[[ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" == Z ]] && continue
		if tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qF "$PHASE_DIR" ||
			[[ "$(readlink "/proc/$p/cwd" 2>/dev/null)" == "$PHASE_DIR"* ]] ||
			tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qxF "HOME=$AGENT_HOME"; then
			mine "$p" || echo "$p"
		fi
	done
}

wait_gone() { # pid seconds (a zombie counts as gone)
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		kill -0 "$1" 2>/dev/null || return 0
		[[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" == Z ]] && return 0
		sleep 0.1
	done
	return 1
}

# Stop what the current phase started; fail (return 1) if the daemon did not exit cleanly or any of
# its processes outlived it.
stop_phase() {
	local rc=0 drc left="" i
	if [[ -n "$DAEMON_PID" ]]; then
		if wait_gone "$DAEMON_PID" 0; then
			: # the shutdown scenario already stopped it
		else
			kill -TERM "$DAEMON_PID" 2>/dev/null || true
			# docs/protocol.md#10-shutdown: up to 10 s per agent after its stdin closes, then its group is killed.
			if ! wait_gone "$DAEMON_PID" 20; then
				say "FAIL [$PHASE]: the daemon did not exit within 20 s of SIGTERM; killing it"
				kill -KILL "$DAEMON_PID" 2>/dev/null || true
				rc=1
			fi
		fi
		drc=0
		wait "$DAEMON_PID" 2>/dev/null || drc=$?
		if [[ $rc -eq 0 && $drc -ne 0 && "$DAEMON" != qwen-serve ]]; then
			say "FAIL [$PHASE]: the daemon exited with status $drc after SIGTERM (expected 0)"
			rc=1
		fi
		DAEMON_PID=""
	fi
	# The daemon is gone: none of its agents may remain (give exiting ones 3 s).
	for ((i = 0; i < 30; i++)); do
		left=$(ours || true)
		[[ -z "$left" ]] && break
		sleep 0.1
	done
	if [[ -n "$left" ]]; then
		say "FAIL [$PHASE]: processes outlived the daemon:"
		for p in $left; do
			printf '  %s %s\n' "$p" "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-200)" >&2
		done
		for p in $left; do kill -KILL "$p" 2>/dev/null || true; done
		rc=1
	fi
	return $rc
}

cleanup() {
	local rc=$STATUS
	trap - EXIT INT TERM
	set +e
	if [[ -n "$PHASE" ]]; then
		stop_phase || rc=1
	fi
	if [[ -n "$FAKE_PID" ]]; then
		kill -TERM "$FAKE_PID" 2>/dev/null || true
		wait_gone "$FAKE_PID" 5 || kill -KILL "$FAKE_PID" 2>/dev/null || true
		wait "$FAKE_PID" 2>/dev/null || true
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

# ---------------------------------------------------------------- the fake model
# Started here only when no E2E_FAKE_MODEL_URL was given; its startup line names its address.
if [[ -n "$FAKE_BIN" ]]; then
	(cd "$TMP" && exec "$FAKE_BIN" --port 0) >"$TMP/fake-model.out" 2>"$TMP/fake-model.log" &
	FAKE_PID=$!
	for ((i = 0; i < 100; i++)); do # 10 s
		FAKE_URL=$(grep -m1 -oE 'listening on http://[^ ]+' "$TMP/fake-model.out" 2>/dev/null | sed 's/^listening on //' || true)
		[[ -n "$FAKE_URL" ]] && break
		kill -0 "$FAKE_PID" 2>/dev/null || break
		sleep 0.1
	done
	[[ -n "$FAKE_URL" ]] || die "the fake model ($FAKE_BIN) did not print its 'listening on' line within 10 s: $(tail -n 5 "$TMP/fake-model.log" 2>/dev/null)"
fi
node -e 'fetch(process.argv[1] + "/v1/models", { signal: AbortSignal.timeout(10000) }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "$FAKE_URL" ||
	die "the fake model at $FAKE_URL does not answer GET /v1/models"
say "fake model at $FAKE_URL"

# ---------------------------------------------------------------- the agents
# agent_setup AGENT LOGS: writes AGENT's settings into $AGENT_HOME and sets AGENT_CMD (its command line
# for the daemon, which splits it like a shell), AGENT_ENV (NAME=VALUE words: the environment it needs
# beyond HOME) and AGENT_NO_READ (1 when it must not be offered fs/read_text_file).
agent_setup() {
	local agent=$1 logs=$2 dead_port
	AGENT_ENV=()
	AGENT_NO_READ=0
	case $agent in
	demo)
		# The daemon's built-in demo agent: no model, nothing to configure.
		AGENT_CMD=demo
		;;
	qwen)
		mkdir -p "$AGENT_HOME/.qwen"
		cat >"$AGENT_HOME/.qwen/settings.json" <<'JSON'
{"security":{"auth":{"selectedType":"openai"}},"model":{"name":"fake-model"},"tools":{"approvalMode":"default"},"privacy":{"usageStatisticsEnabled":false}}
JSON
		# Usage statistics off: Qwen Code otherwise reports to an Alibaba Cloud RUM host (DNS lookups seen).
		AGENT_ENV=(OPENAI_API_KEY=sk-fake OPENAI_BASE_URL="$FAKE_URL/v1" OPENAI_MODEL=fake-model
			QWEN_USAGE_STATISTICS_ENABLED=false)
		AGENT_CMD="$(shq "$QWEN") --acp"
		;;
	claude)
		# Claude Code on the fake model's Anthropic API. It still probes api.anthropic.com now and then
		# (a connectivity check per session): CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC turns off
		# telemetry, error reports and update checks, and an HTTPS proxy on a closed loopback port makes
		# whatever is left fail at once, on 127.0.0.1, without even a DNS query. NO_PROXY keeps the
		# plain-HTTP fake model direct.
		dead_port=$(free_port)
		AGENT_ENV=(ANTHROPIC_BASE_URL="$FAKE_URL" ANTHROPIC_API_KEY=sk-ant-fake
			CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
			HTTPS_PROXY="http://127.0.0.1:$dead_port" https_proxy="http://127.0.0.1:$dead_port"
			NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost)
		# Claude Code refuses to run as root unless told it is in a sandbox.
		[[ "$(id -u)" == 0 ]] && AGENT_ENV+=(IS_SANDBOX=1)
		AGENT_CMD=$(shq "$CLAUDE_ACP")
		;;
	gemini)
		# Gemini CLI on the fake model's Gemini API (docs/agents.md). Usage statistics off: otherwise it
		# looks up a Google telemetry host. A concrete model: `auto` adds a routing call per prompt. A
		# trusted folder: allow-always on an edit needs one. GEMINI_CLI_NO_RELAUNCH: without it the CLI
		# re-spawns itself and the parent ignores SIGTERM. It must not be offered fs/read_text_file: it
		# then cannot create files (it reads the target first and misreads the not-found error).
		mkdir -p "$AGENT_HOME/.gemini"
		cat >"$AGENT_HOME/.gemini/settings.json" <<'JSON'
{"security":{"folderTrust":{"enabled":false}},"privacy":{"usageStatisticsEnabled":false},"model":{"name":"gemini-2.5-flash"}}
JSON
		AGENT_ENV=(GEMINI_API_KEY=fake-key GOOGLE_GEMINI_BASE_URL="$FAKE_URL" GEMINI_CLI_NO_RELAUNCH=true)
		AGENT_NO_READ=1
		AGENT_CMD="$(shq "$GEMINI") --acp"
		;;
	esac
	if [[ "${E2E_ACP_TAP:-}" == 1 ]]; then
		AGENT_CMD="$(shq "$(command -v node)") $(shq "$HERE/acp-tap.mjs") $(shq "$logs/acp-$agent.jsonl") $AGENT_CMD"
	fi
}

# agents_entry AGENT [env]: AGENT's entry of the config file's agents map, from agent_setup; with
# `env`, its environment goes into the entry (else the daemon's environment carries it).
agents_entry() {
	local agent=$1 with_env=${2:-} out kv sep=""
	out="$(js "$agent"): {\"command\": $(js "$AGENT_CMD")"
	if [[ "$with_env" == env ]]; then
		out+=", \"env\": {"
		for kv in "${AGENT_ENV[@]}"; do
			out+="$sep$(js "${kv%%=*}"): $(js "${kv#*=}")"
			sep=", "
		done
		out+="}"
	fi
	((AGENT_NO_READ)) && out+=', "clientCapabilities": {"fs": {"readTextFile": false}}'
	printf '%s}' "$out"
}

# ---------------------------------------------------------------- one phase
# run_phase NAME AGENT FILE... : daemon (fronting AGENT, or with AGENT `all` every agent of
# $AGENTS at once, each named after itself) + node --test FILE..., then stop and check.
# Sets STATUS to 1 on any failure; never exits.
run_phase() {
	local name=$1 agent=$2
	shift 2
	local files=("$@") t0 logs ws agent_desc base="" kind i rc node_rc a entries="" config
	t0=$(date +%s)
	PHASE=$name
	PHASE_DIR="$TMP/$name"
	AGENT_HOME="$PHASE_DIR/home" # HOME of the daemon and so of its agents (not of this script or the tests)
	ws="$PHASE_DIR/workspace"
	logs="$PHASE_DIR/logs"
	mkdir -p "$AGENT_HOME" "$ws" "$logs"
	say "[$name] ---------------- ${files[*]} against $agent"

	# The daemon's environment. Nothing from the caller's environment may point the daemon, the agents
	# or the SDK elsewhere.
	local -a denv=(env
		-u QWEN_SERVER_TOKEN -u MEDIATORD_TOKEN -u MEDIATORD_CONFIG -u MEDIATORD_AGENT -u MEDIATORD_PORT
		-u MEDIATORD_HOSTNAME -u QWEN_CLI_ENTRY -u MEDIATORD_STATE_DIR -u XDG_STATE_HOME
		-u ANTHROPIC_AUTH_TOKEN -u ANTHROPIC_MODEL -u ANTHROPIC_SMALL_FAST_MODEL -u CLAUDE_CONFIG_DIR
		-u CLAUDE_CODE_USE_BEDROCK -u CLAUDE_CODE_USE_VERTEX -u CLAUDE_CODE_USE_FOUNDRY
		-u GEMINI_API_KEY -u GOOGLE_API_KEY -u GOOGLE_GEMINI_BASE_URL -u GEMINI_MODEL -u GEMINI_CLI_HOME
		-u GOOGLE_GENAI_USE_VERTEXAI -u GOOGLE_GENAI_USE_GCA -u GOOGLE_CLOUD_PROJECT -u GOOGLE_APPLICATION_CREDENTIALS
		-u HTTP_PROXY -u http_proxy -u ALL_PROXY -u all_proxy
		HOME="$AGENT_HOME")
	# The agent(s): a single agent gets its environment from the daemon's and its command line from
	# --agent, or from the config file when it needs client capabilities of its own (Gemini CLI).
	# `all`: every agent of $AGENTS in the config file's agents map, each with its own environment
	# there and none in the daemon's, so each reaches the fake model only through its own settings.
	# The agents are large Node programs: on a loaded two-core machine three of them starting at once
	# took more than the default 10 s to answer `initialize`; the e2e measures behaviour, not start-up.
	local -a dargs=(--port 0 --workspace "$ws" --initialize-timeout-ms 60000 "${PHASE_DARGS[@]}")
	config="$PHASE_DIR/mediatord.json"
	if [[ "$agent" == all ]]; then
		for a in $AGENTS; do
			agent_setup "$a" "$logs"
			entries+="${entries:+, }$(agents_entry "$a" env)"
		done
		printf '{"agents": {%s}}\n' "$entries" >"$config"
		dargs+=(--config "$config")
		agent_desc="every agent of '$AGENTS' (config file $config)"
	else
		agent_setup "$agent" "$logs"
		denv+=("${AGENT_ENV[@]}")
		if ((AGENT_NO_READ)); then
			printf '{"agents": {%s}}\n' "$(agents_entry "$agent")" >"$config"
			dargs+=(--config "$config")
			agent_desc="$AGENT_CMD (config file $config)"
		else
			dargs+=(--agent "$AGENT_CMD")
			agent_desc=$AGENT_CMD
		fi
	fi

	# Daemon under test. Its startup line is read from daemon.out, which the background launch below
	# truncates only once it runs: empty it here first, or a second phase on the same logs directory
	# (resume-AGENT) can read the previous daemon's address.
	: >"$logs/daemon.out"
	if [[ "$DAEMON" == qwen-serve ]]; then
		kind=qwen-serve
		(cd "$ws" && exec "${denv[@]}" "$QWEN" serve --port 0 --no-web --workspace "$ws") >"$logs/daemon.out" 2>"$logs/daemon.err" &
	else
		kind=mediatord
		(cd "$ws" && exec "${denv[@]}" "$DAEMON" serve "${dargs[@]}") >"$logs/daemon.out" 2>"$logs/daemon.err" &
	fi
	DAEMON_PID=$!
	for ((i = 0; i < 600; i++)); do # 60 s
		base=$(grep -m1 -oE 'listening on http://[^ ]+' "$logs/daemon.out" 2>/dev/null | sed 's/^listening on //' || true)
		[[ -n "$base" ]] && break
		kill -0 "$DAEMON_PID" 2>/dev/null || break
		sleep 0.1
	done
	node_rc=1
	if [[ -z "$base" ]]; then
		cat "$logs/daemon.out" >&2 || true
		tail -n 40 "$logs/daemon.err" >&2 || true
		say "FAIL [$name]: $kind did not print its 'listening on http://ADDR:PORT' line within 60 s"
	else
		say "[$name] $kind (pid $DAEMON_PID) at $base, agent: $agent_desc, workspace $ws"
		set +e
		(cd "$HERE" && E2E_BASE_URL="$base" E2E_WORKSPACE="$ws" E2E_DAEMON_KIND="$kind" E2E_AGENT="$agent" \
			E2E_RESUME_STEP="$RESUME_STEP" \
			E2E_AGENTS="$AGENTS" E2E_DAEMON_PID="$DAEMON_PID" E2E_AGENT_HOME="$AGENT_HOME" \
			E2E_MEDIATORD="$([[ "$DAEMON" != qwen-serve ]] && echo "$DAEMON")" \
			node "${NODE_FLAGS[@]}" --test --test-concurrency=1 --test-timeout=240000 "${ARGS[@]}" "${files[@]}") | tee "$logs/node-test.out"
		node_rc=${PIPESTATUS[0]}
		set -e
	fi
	rc=$node_rc
	stop_phase || rc=1
	if [[ $rc -ne 0 ]]; then
		say "[$name] daemon log tail ($logs/daemon.err):"
		tail -n 40 "$logs/daemon.err" >&2 2>/dev/null || true
		STATUS=1
	fi
	local counts
	counts=$(grep -E '^# (pass|fail|skipped|todo) ' "$logs/node-test.out" 2>/dev/null | sed 's/^# //' | tr '\n' ' ' || true)
	SUMMARY+=("$(printf '%-14s %-5s %s(%s s)' "$name" "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" "$counts" "$(($(date +%s) - t0))")")
	PHASE=""
}

# ---------------------------------------------------------------- phases
T_ALL=$(date +%s)
RESUME_STEP="" # resume.test.mjs's step (create, resume), for its two phases below
PHASE_DARGS=() # more of the daemon's arguments, for one phase
((${#API_FILES[@]})) && run_phase qwen-api qwen "${API_FILES[@]}"
if ((RUN_REVIEWERS)); then
	if [[ "$DAEMON" == qwen-serve ]]; then
		say "[reviewers-qwen] not applicable: qwen serve has no reviewers"
	else
		# The same scenario twice: a `command` reviewer (reviewer.py), then a `model` reviewer on the
		# fake model (fake-model/src/review.rs), each trusted to decide shell commands.
		export E2E_REVIEWER_KIND=command
		PHASE_DARGS=(--reviewer "guard=command:python3 $HERE/reviewer.py" --reviewer-trust guard=execute:decide)
		run_phase reviewers-qwen qwen reviewers.test.mjs
		E2E_REVIEWER_KIND=model
		PHASE_DARGS=(--reviewer "guard=model:$FAKE_URL/v1 model=fake-model" --reviewer-trust guard=execute:decide)
		run_phase reviewers-model qwen reviewers.test.mjs
		PHASE_DARGS=()
		unset E2E_REVIEWER_KIND
	fi
fi
if ((RUN_AGENTS)); then
	for a in $AGENTS; do
		if [[ "$DAEMON" == qwen-serve && "$a" != qwen ]]; then
			say "[agents-$a] not applicable: qwen serve can only front Qwen Code"
			continue
		fi
		run_phase "agents-$a" "$a" agents.test.mjs
	done
fi
if ((RUN_MULTI)); then
	if [[ "$DAEMON" == qwen-serve ]]; then
		say "[agents-all] not applicable: qwen serve runs only Qwen Code"
	elif [[ $(wc -w <<<"$AGENTS") -lt 2 ]]; then
		say "[agents-all] not run: E2E_AGENTS names fewer than two agents ($AGENTS)"
	else
		run_phase agents-all all multi.test.mjs
	fi
fi
# resume-AGENT: one HOME (state directory and agent files), two daemons: create, restart, resume.
if ((RUN_RESUME)) && [[ "$DAEMON" != qwen-serve ]]; then
	for a in $AGENTS; do
		RESUME_STEP=create
		run_phase "resume-$a" "$a" resume.test.mjs
		RESUME_STEP=resume
		run_phase "resume-$a" "$a" resume.test.mjs
	done
	RESUME_STEP=""
fi
# acp-demo: /acp with the official ACP SDK and @qwen-code/sdk, on the demo agent (qwen serve cannot
# run it).
if ((RUN_ACP)) && [[ "$DAEMON" != qwen-serve ]]; then
	run_phase acp-demo demo acp.test.mjs
fi
# changes-demo: what sessions changed through @qwen-code/sdk's DaemonClient (REST), on the demo
# agent: a plain directory, then the workspace made a git repository (issue #42).
if ((RUN_CHANGES)) && [[ "$DAEMON" != qwen-serve ]]; then
	run_phase changes-demo demo changes.test.mjs
fi
say "summary ($(($(date +%s) - T_ALL)) s):"
for l in "${SUMMARY[@]}"; do say "  $l"; done
[[ $STATUS -eq 0 ]] || say "FAILED"
exit "$STATUS"

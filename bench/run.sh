#!/usr/bin/env bash
# The whole comparison in one command: builds release binaries, runs the synthetic-agent load
# against direct stdio, mediatord and qwen serve, and writes docs/benchmarks.md.
#
#   bench/run.sh                 # full run (about 10-15 minutes on 2 cores; the boot with a
#                                # 1 GiB state database takes about 40 s of it)
#   bench/run.sh --runs 1        # extra arguments go to `mediatord-bench compare`
#
# qwen serve comes from the pinned @qwen-code/qwen-code in tests/e2e (installed there with npm ci
# if missing, the same way tests/e2e/run.sh does), or from $QWEN_BIN. BENCH_SKIP_QWEN=1 measures
# mediatord alone. Everything listens on 127.0.0.1 only.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
OUT=${BENCH_OUT:-$REPO/docs/benchmarks.md}

say() { printf 'bench: %s\n' "$*" >&2; }
die() {
	printf 'bench: ERROR: %s\n' "$*" >&2
	exit 1
}

command -v cargo >/dev/null || die "cargo is required"
say "building release binaries ..."
(cd "$REPO" && cargo build --release -p mediatord -p mediatord-bench)
MEDIATORD="$REPO/target/release/mediatord"
BENCH="$REPO/target/release/mediatord-bench"

QWEN_ARGS=()
if [[ "${BENCH_SKIP_QWEN:-}" != 1 ]]; then
	command -v node >/dev/null || die "node is required to run qwen serve (or set BENCH_SKIP_QWEN=1)"
	QWEN=${QWEN_BIN:-$REPO/tests/e2e/node_modules/.bin/qwen}
	if [[ ! -x "$QWEN" && -z "${QWEN_BIN:-}" ]]; then
		command -v npm >/dev/null || die "npm is required to install qwen serve (or set QWEN_BIN / BENCH_SKIP_QWEN=1)"
		say "installing the pinned @qwen-code/qwen-code into tests/e2e (npm ci, about 300 MB) ..."
		(cd "$REPO/tests/e2e" && timeout 600 npm ci --no-audit --no-fund >/dev/null)
	fi
	[[ -x "$QWEN" ]] || die "qwen not found at $QWEN"
	QWEN_ARGS=(--qwen "$QWEN" --shim "$HERE/qwen-shim.mjs")
fi

# The Node.js readers of scenario (g) use the official SDK installed beside qwen serve.
SDK_ARGS=()
SDK_MODULE="$REPO/tests/e2e/node_modules/@qwen-code/sdk/dist/daemon/index.js"
if command -v node >/dev/null && [[ -f "$SDK_MODULE" ]]; then
	SDK_ARGS=(--sdk "$SDK_MODULE" --sdk-reader "$HERE/sdk-reader.mjs")
else
	say "no node or no @qwen-code/sdk under tests/e2e/node_modules: skipping the Node.js SDK scenario"
fi

mkdir -p "$(dirname "$OUT")"
say "running the comparison (progress below; the summary table is printed at the end) ..."
"$BENCH" compare --mediatord "$MEDIATORD" "${QWEN_ARGS[@]}" "${SDK_ARGS[@]}" --out "$OUT" "$@"

#!/usr/bin/env bash
# The whole test suite: every test binary `cargo test --workspace --no-fail-fast` runs, built once,
# then run in two lanes at the same time, and the doc tests.
#
#   bash tests/all.sh
#
# Why two lanes: most binaries spend their time waiting on other programs (a daemon's answer, a
# real agent, PostgreSQL, Chromium). Run alone, each kept 0.6–0.8 of one CPU busy, so on a 2-CPU
# machine two at once finish the suite in about two thirds of the time. Within a lane the binaries
# run one after another, as `cargo test` runs them; each binary still runs its own tests in
# parallel. Lane 1 prints as it goes; lane 2 writes to a file, printed when the lanes are done.
# The suite fails if either lane does (after both have run), or if the lanes together did not run
# every test binary the build produced.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if (($#)); then
	echo "usage: bash tests/all.sh (no arguments; one binary alone: cargo test --test NAME)" >&2
	exit 2
fi

# Lane 2: the binaries that wait the longest (the real agents, a PostgreSQL cluster, the published
# crate's own build); lane 1 gets every other one, so a new test file needs no entry here.
LANE2=(e2e it_postgres package)

out=${CARGO_TARGET_DIR:-target}/test-lanes
mkdir -p "$out"

# Build every test binary once; cargo names each in an `Executable` line.
if ! cargo test --workspace --no-run 2>&1 | tee "$out/build.log"; then
	echo "tests/all.sh: the test binaries did not build (above)" >&2
	exit 101
fi
built=0
lane1=(--lib --bins)
while read -r source; do
	built=$((built + 1))
	case $source in
	unittests) ;; # the lib's and the bins' own tests: --lib --bins
	tests/*/main.rs) name=${source#tests/} && name=${name%/main.rs} ;;
	tests/*.rs) name=${source#tests/} && name=${name%.rs} ;;
	*)
		echo "tests/all.sh: a test binary built from '$source' fits neither lane; say where it runs" >&2
		exit 101
		;;
	esac
	if [[ $source != unittests && " ${LANE2[*]} " != *" $name "* ]]; then
		lane1+=(--test "$name")
	fi
done < <(sed -nE 's/^ *Executable (unittests|[^ ]+) .*/\1/p' "$out/build.log")

# Lane 2 in the background, in a process group of its own (job control on for its launch only:
# without it bash would start it deaf to Ctrl-C). Ctrl-C reaches lane 1, which shares this script's
# group; the traps pass it on to lane 2's whole group (cargo and the test binary it runs).
set -m
cargo test --workspace --no-fail-fast "${LANE2[@]/#/--test=}" >"$out/lane2.log" 2>&1 &
lane2_pid=$!
set +m
trap 'kill -INT -- "-$lane2_pid" 2>/dev/null; exit 130' INT
trap 'kill -TERM -- "-$lane2_pid" 2>/dev/null; exit 143' TERM

cargo test --workspace --no-fail-fast "${lane1[@]}" 2>&1 | tee "$out/lane1.log"
lane1_rc=${PIPESTATUS[0]}
cargo test --workspace --doc 2>&1 | tee "$out/doc.log"
doc_rc=${PIPESTATUS[0]}
wait "$lane2_pid"
lane2_rc=$?
trap - INT TERM

echo
echo "======== lane 2 (${LANE2[*]}): $out/lane2.log"
cat "$out/lane2.log"

# cargo's own line before each binary's tests: `     Running tests/it/main.rs (target/…/it-…)`.
ran=$(cat "$out/lane1.log" "$out/lane2.log" | grep -cE '^ +Running [^ ]+( [^ ]+)? \(.+\)$')
echo
echo "======== tests/all.sh: $ran of $built test binaries ran; lane 1 exit $lane1_rc, lane 2 exit $lane2_rc, doc tests exit $doc_rc"
if ((ran != built)); then
	echo "tests/all.sh: the lanes ran $ran test binaries where the build made $built" >&2
	exit 101
fi
if ((lane1_rc || lane2_rc || doc_rc)); then
	exit 101
fi

#!/usr/bin/env bash
# Installs what the fleet tests (tests/it/fleet.rs, and the store suites run against PostgreSQL by
# tests/it_postgres.rs) start: Debian's PostgreSQL server binaries (initdb, postgres, createdb). Run
# by the tests themselves when they are missing; fails loudly (exit 1 and one `postgres: ERROR:`
# line) when apt cannot provide them, so the suite never skips.
set -euo pipefail

say() { printf 'postgres: %s\n' "$*" >&2; }
die() {
	printf 'postgres: ERROR: %s\n' "$*" >&2
	exit 1
}

have() { compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }

if have; then
	exit 0
fi
command -v apt-get >/dev/null 2>&1 || die "PostgreSQL is missing and there is no apt-get to install it: install the server (initdb and postgres under /usr/lib/postgresql/<version>/bin)"
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null 2>&1 || die "PostgreSQL is missing; installing it needs root (or sudo): apt-get install postgresql"
	SUDO=(sudo -n)
fi
log=$(mktemp)
say "installing postgresql with apt-get (once) ..."
export DEBIAN_FRONTEND=noninteractive
# The package's own cluster is not wanted: the tests make theirs in a temporary directory.
if ! "${SUDO[@]}" apt-get update -qq >"$log" 2>&1; then
	tail -n 20 "$log" >&2 || true
	die "apt-get update failed (is the Debian mirror reachable?); full log: $log"
fi
if ! "${SUDO[@]}" apt-get install -y -qq --no-install-recommends postgresql >>"$log" 2>&1; then
	tail -n 20 "$log" >&2 || true
	die "apt-get install postgresql failed; full log: $log"
fi
have || die "apt-get installed postgresql but no /usr/lib/postgresql/*/bin/initdb is there"
say "installed"

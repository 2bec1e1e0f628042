#!/usr/bin/env bash
# Installs what the packaging tests (tests/package.rs) use besides cargo: dpkg's tools (dpkg-deb,
# and dpkg-shlibdeps, with which cargo-deb computes the package's dependencies), systemd's offline
# tools (systemd-analyze to verify the units, systemd-sysusers to make the package's user in a
# scratch root) and deb-systemd-helper (the maintainer scripts call it). Run by the test itself when
# any is missing; fails loudly (exit 1 and one `package: ERROR:` line) when apt cannot provide them,
# so the suite never skips. cargo-deb itself is installed by packaging/deb/build.sh.
set -euo pipefail

say() { printf 'package: %s\n' "$*" >&2; }
die() {
	printf 'package: ERROR: %s\n' "$*" >&2
	exit 1
}

TOOLS=(dpkg dpkg-deb dpkg-shlibdeps systemd-analyze systemd-sysusers deb-systemd-helper tar gzip bash)
missing() {
	local tool
	for tool in "${TOOLS[@]}"; do
		command -v "$tool" >/dev/null 2>&1 || printf '%s ' "$tool"
	done
}

[[ -z $(missing) ]] && exit 0
command -v apt-get >/dev/null 2>&1 || die "missing: $(missing)and there is no apt-get to install them (Debian packages: dpkg-dev systemd init-system-helpers)"
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null 2>&1 || die "missing: $(missing); installing them needs root (or sudo): apt-get install dpkg-dev systemd init-system-helpers"
	SUDO=(sudo -n)
fi
log=$(mktemp)
say "missing: $(missing); installing dpkg-dev systemd init-system-helpers with apt-get (once) ..."
export DEBIAN_FRONTEND=noninteractive
if ! "${SUDO[@]}" apt-get update -qq >"$log" 2>&1; then
	tail -n 20 "$log" >&2 || true
	die "apt-get update failed (is the Debian mirror reachable?); full log: $log"
fi
if ! "${SUDO[@]}" apt-get install -y -qq --no-install-recommends dpkg-dev systemd init-system-helpers >>"$log" 2>&1; then
	tail -n 20 "$log" >&2 || true
	die "apt-get install dpkg-dev systemd init-system-helpers failed; full log: $log"
fi
[[ -z $(missing) ]] || die "apt-get installed dpkg-dev systemd init-system-helpers but these are still not on PATH: $(missing)"
rm -f "$log"
say "installed dpkg-dev, systemd and init-system-helpers"

#!/usr/bin/env bash
# Installs what the browser tests (tests/browser.rs) drive: Debian's headless-capable Chromium and its
# WebDriver, chromedriver. Run by the test itself when either is missing; fails loudly (exit 1 and one
# `browser: ERROR:` line) when apt cannot provide them, so the suite never skips.
set -euo pipefail

say() { printf 'browser: %s\n' "$*" >&2; }
die() {
	printf 'browser: ERROR: %s\n' "$*" >&2
	exit 1
}

have() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }

if have; then
	exit 0
fi
command -v apt-get >/dev/null 2>&1 || die "chromium and chromedriver are missing and there is no apt-get to install them: install Chromium and a matching chromedriver, both on PATH"
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null 2>&1 || die "chromium and chromedriver are missing; installing them needs root (or sudo): apt-get install chromium chromium-driver"
	SUDO=(sudo -n)
fi
say "installing chromium and chromium-driver with apt-get (once) ..."
export DEBIAN_FRONTEND=noninteractive
if ! "${SUDO[@]}" apt-get update -qq >/tmp/mediatord-browser-apt.log 2>&1; then
	tail -n 20 /tmp/mediatord-browser-apt.log >&2 || true
	die "apt-get update failed (is the Debian mirror reachable?); full log: /tmp/mediatord-browser-apt.log"
fi
if ! "${SUDO[@]}" apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >>/tmp/mediatord-browser-apt.log 2>&1; then
	tail -n 20 /tmp/mediatord-browser-apt.log >&2 || true
	die "apt-get install chromium chromium-driver failed; full log: /tmp/mediatord-browser-apt.log"
fi
have || die "apt-get installed chromium and chromium-driver but chromium or chromedriver is not on PATH"
say "installed $(chromium --version 2>/dev/null || echo chromium) and $(chromedriver --version 2>/dev/null | cut -d' ' -f1-2)"

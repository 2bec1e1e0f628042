#!/usr/bin/env bash
# Installs the pinned oidc-provider (package-lock.json) into tests/oidc/node_modules with `npm ci`,
# only when it is missing or the lock file changed since the last install (a stamp in node_modules
# holds the lock file's SHA-256). Writes nothing outside tests/oidc. Run by check.mjs, and by a test
# before it starts provider.mjs.
#
# Optional env: OIDC_INSTALL_TIMEOUT (seconds, default 300). Needs node (20+) and npm, and the npm
# registry on the first run. Every failure prints one `oidc: ERROR: ...` line and exits 1; it never
# skips.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)

say() { printf 'oidc: %s\n' "$*" >&2; }
die() {
	printf '\noidc: ERROR: %s\n\n' "$*" >&2
	exit 1
}

command -v node >/dev/null 2>&1 || die "the OIDC provider needs Node.js 20 or later: 'node' is not on PATH"
command -v npm >/dev/null 2>&1 || die "the OIDC provider needs npm (it installs the pinned oidc-provider): 'npm' is not on PATH"
NODE_VERSION=$(node --version)
NODE_MAJOR=${NODE_VERSION#v}
NODE_MAJOR=${NODE_MAJOR%%.*}
[[ "$NODE_MAJOR" =~ ^[0-9]+$ && "$NODE_MAJOR" -ge 20 ]] || die "the OIDC provider needs Node.js 20 or later, found $NODE_VERSION"

PROVIDER="$HERE/node_modules/oidc-provider/package.json"
LOCK_SUM=$(sha256sum "$HERE/package-lock.json" | cut -d' ' -f1)
STAMP="$HERE/node_modules/.oidc-lock-sha256"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$LOCK_SUM" && -f "$PROVIDER" ]]; then
	exit 0
fi

# .npmrc sets ignore-scripts: no package's install script runs (none has one).
say "installing the pinned oidc-provider with npm ci (about 10 MB) ..."
t0=$(date +%s)
if ! (cd "$HERE" && timeout "${OIDC_INSTALL_TIMEOUT:-300}" npm ci --no-audit --no-fund --fetch-retries=2 --fetch-timeout=60000 >"$HERE/.npm-ci.log" 2>&1); then
	tail -n 25 "$HERE/.npm-ci.log" >&2 || true
	die "npm ci of the pinned oidc-provider failed (is the npm registry reachable?). This is a failure, not a skip. Full log: $HERE/.npm-ci.log"
fi
[[ -f "$PROVIDER" ]] || die "npm ci finished but $PROVIDER is missing"
echo "$LOCK_SUM" >"$STAMP"
rm -f "$HERE/.npm-ci.log"
say "installed oidc-provider $(node -p 'require(process.argv[1]).version' "$PROVIDER") in $(($(date +%s) - t0)) s"

#!/usr/bin/env bash
# Builds mediatord's Debian package from this source tree (a clone, or the unpacked crate):
#
#   1. the release binary (`cargo build --release --locked`);
#   2. its man pages (mediatord(1) and the page of every subcommand it names, gzipped) and its bash,
#      zsh and fish completions, printed by the binary itself into <target>/release/packaging/;
#   3. `cargo deb --no-build`, with the layout of Cargo.toml's [package.metadata.deb].
#
# Arguments are passed on to `cargo deb` (e.g. `--fast`, `--deb-revision 2`). The last line on
# stdout is the path of the .deb. Installs cargo-deb (the pinned version) when it is missing, and
# fails loudly (exit 1, one `deb: ERROR:` line) when a tool it needs cannot be had.
#
# It builds for the machine it runs on: the release workflow runs it on an x86_64 and an aarch64
# runner, because step 2 runs the binary it built.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# The cargo-deb this script is written against; `cargo install --locked` builds it with the
# dependency versions it was released with.
CARGO_DEB_VERSION=3.8.0

say() { printf 'deb: %s\n' "$*" >&2; }
die() {
	printf 'deb: ERROR: %s\n' "$*" >&2
	exit 1
}

if ! cargo deb --version >/dev/null 2>&1; then
	say "installing cargo-deb $CARGO_DEB_VERSION with cargo install (once) ..."
	cargo install --locked --quiet "cargo-deb@$CARGO_DEB_VERSION" >&2 ||
		die "cargo install cargo-deb@$CARGO_DEB_VERSION failed (is the crate registry reachable?)"
	cargo deb --version >/dev/null 2>&1 || die "cargo-deb was installed but \`cargo deb\` does not run: is \$CARGO_HOME/bin on PATH?"
fi
# cargo-deb computes the package's Depends from the libraries the binary links, with dpkg-shlibdeps.
command -v dpkg-shlibdeps >/dev/null 2>&1 || die "dpkg-shlibdeps is missing: apt-get install dpkg-dev"

cargo build --release --locked >&2
release="${CARGO_TARGET_DIR:-target}/release"
bin="$release/mediatord"
generated="$release/packaging"
rm -rf "$generated"
mkdir -p "$generated/man" "$generated/completions"

"$bin" man >"$generated/man/mediatord.1"
# mediatord(1) names each subcommand's page as `mediatord\-<name>(1)` (roff escapes `-`), one per line.
subcommands=$(sed -n 's/\\//g; s/^mediatord-\(.*\)(1)$/\1/p' "$generated/man/mediatord.1")
[[ -n $subcommands ]] || die "mediatord(1) names no subcommand pages: has \`mediatord man\` changed?"
for sub in $subcommands; do
	"$bin" man "$sub" >"$generated/man/mediatord-$sub.1"
done
# Debian ships man pages gzipped; cargo-deb compresses only those it did not see built, and -n keeps
# the name and time out of the archive, so a rebuild gives the same bytes.
gzip -9n "$generated"/man/*.1
"$bin" completions bash >"$generated/completions/mediatord.bash"
"$bin" completions zsh >"$generated/completions/_mediatord"
"$bin" completions fish >"$generated/completions/mediatord.fish"

cargo deb --no-build --locked "$@"

#!/usr/bin/env bash
# Prints the section of CHANGELOG.md for one version: the lines between `## [VERSION]` and the next
# `## [` heading, without either heading and without leading or trailing blank lines. The release
# workflow publishes them as the release's notes. Fails (exit 1, one line on stderr) when the
# changelog has no such section or it is empty, so a release cannot go out without its notes.
#
#   packaging/release-notes.sh 0.2.0 [CHANGELOG.md]
set -euo pipefail

version=${1:?usage: release-notes.sh VERSION [CHANGELOG]}
changelog=${2:-"$(dirname "${BASH_SOURCE[0]}")/../CHANGELOG.md"}

notes=$(awk -v heading="## [$version]" '
	/^## \[/ { if (found) exit; if (index($0, heading) == 1) { found = 1; next } }
	found { print }
' "$changelog" | sed -e '/[^[:space:]]/,$!d')
# The command substitution dropped the trailing newlines; what is left must say something.
if [[ -z ${notes//[[:space:]]/} ]]; then
	printf 'release-notes: %s has no section "## [%s]", or it is empty\n' "$changelog" "$version" >&2
	exit 1
fi
printf '%s\n' "$notes"

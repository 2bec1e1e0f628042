#!/usr/bin/env bash
# Where the memory of idle connections goes (issue #46): runs `mediatord-bench idle` with the daemon
# under heaptrack, kills the daemon while every connection is open and idle (so each allocation they
# hold is reported as never freed), and prints heaptrack's summary of those allocations per kind.
#
#   bench/idle-heap.sh [MEDIATORD] [h1,h2,acp]      (default: target/release/mediatord, all three)
#
# Needs heaptrack (Debian: `apt-get install heaptrack`). Output under $OUT (default a temporary
# directory): one heaptrack file and one `*.txt` summary per kind.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mediatord=$(realpath "${1:-$here/target/release/mediatord}")
kinds=${2:-h1,h2,acp}
bench=${MEDIATORD_BENCH:-$(dirname "$mediatord")/mediatord-bench}
out=${OUT:-$(mktemp -d -t mediatord-idle-heap.XXXXXX)}
mkdir -p "$out"
command -v heaptrack >/dev/null || { echo "heaptrack is not installed" >&2; exit 1; }
wrapper="$out/mediatord-under-heaptrack"
IFS=, read -r -a list <<<"$kinds"
for kind in "${list[@]}"; do
    # The daemon, its agent guard and the demo agent are all this binary (`current_exe`), so only
    # the process the benchmark starts is profiled; the file names the kind and the daemon's pid.
    printf '#!/bin/sh\nexec heaptrack -o "%s/%s.%%p" "%s" "$@"\n' "$out" "$kind" "$mediatord" >"$wrapper"
    chmod +x "$wrapper"
    "$bench" idle --mediatord "$wrapper" --runs 1 --only "$kind" --kill-at-idle 1
    for f in "$out/$kind".*.zst "$out/$kind".*.gz; do
        [ -e "$f" ] || continue
        heaptrack_print --print-leaks 1 --print-peaks 0 --print-allocators 0 --print-temporary 0 "$f" \
            >"$out/$kind.txt" 2>/dev/null || true
        echo "== $kind: $out/$kind.txt"
        grep -E '^(total memory leaked|peak heap memory|calls to allocation)' "$out/$kind.txt" || true
    done
done
echo "heaptrack files and summaries: $out"

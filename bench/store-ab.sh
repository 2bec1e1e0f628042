#!/usr/bin/env bash
# The durable store's cost on the relay, measured A/B *interleaved*: rounds of (store on,
# --ephemeral) on the same load, so a machine shared with other work moves both sides alike. Prints
# each round's delivered events/s and the store-on/ephemeral ratio per row, then the medians.
#
#   bench/store-ab.sh [ROUNDS=5]      # after: cargo build --release -p mediatord -p mediatord-bench
#   MEDIATORD=other/mediatord bench/store-ab.sh 3    # another build (the load client stays this one)
#
# Rows: relay to 1 and 10 subscribers at the defaults, and to 10 and 100 with the ring holding the
# burst (issue #17's target: store on >= 80% of --ephemeral). Listens on 127.0.0.1 only.
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
ROUNDS=${1:-5}
BENCH=${BENCH:-$REPO/target/release/mediatord-bench}
MEDIATORD=${MEDIATORD:-$REPO/target/release/mediatord}
[[ -x "$BENCH" && -x "$MEDIATORD" ]] || { echo "build first: cargo build --release -p mediatord -p mediatord-bench" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
ROWS=("relay, 1 subscriber:" "relay, 10 subscribers:" "relay, 10 subscribers, the ring" "relay, 100 subscribers, the ring")
# The mediatord column of a summary row, digits only.
figure() { awk -F'|' -v row="$2" 'index($2, row) == 2 { gsub(/[^0-9]/, "", $4); print $4; exit }' "$1"; }
for round in $(seq "$ROUNDS"); do
	for side in store ephemeral; do
		args=()
		[[ $side == ephemeral ]] && args=(--mediatord-args --ephemeral)
		"$BENCH" compare --mediatord "$MEDIATORD" --only relay --subscribers 1,10 --runs 1 \
			"${args[@]}" --out "$OUT/$round-$side.md" >/dev/null 2>"$OUT/$round-$side.err" ||
			{ echo "round $round ($side) failed:" >&2; tail -5 "$OUT/$round-$side.err" >&2; exit 1; }
	done
	for row in "${ROWS[@]}"; do
		s=$(figure "$OUT/$round-store.md" "$row")
		e=$(figure "$OUT/$round-ephemeral.md" "$row")
		printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$row" "$s" "$e" "$(awk -v s="$s" -v e="$e" 'BEGIN { if (e > 0) printf "%.0f%%", 100 * s / e }')"
	done | tee -a "$OUT/all.tsv"
done
echo "medians of $ROUNDS interleaved rounds (store on, --ephemeral, ratio of the medians; median of the per-round ratios):"
for row in "${ROWS[@]}"; do
	awk -F'\t' -v row="$row" '$2 == row { s[n + 0] = $3; e[n + 0] = $4; r[n + 0] = 100 * $3 / $4; n++ }
		function med(a, n,   i, j, t) { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
			return n % 2 ? a[int(n / 2)] : (a[n / 2 - 1] + a[n / 2]) / 2 }
		END { ms = med(s, n); me = med(e, n); mr = med(r, n); printf "%-34s %10d %10d %5.0f%% %5.0f%%\n", row, ms, me, 100 * ms / me, mr }' "$OUT/all.tsv"
done

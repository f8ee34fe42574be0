#!/usr/bin/env bash
# Measures one of the test commands the way docs/ci.md's budget is stated:
# in a fresh clone of HEAD, with the machine's Go caches (warm) or empty
# ones (--cold), sampling the load average every 15 s. Writes one row per
# (command, cache state) into docs/ci-timings.md, replacing that row's
# previous figure (history is in git).
#
#   hack/measure-ci.sh [--cold] [--keep] -- make test
#   hack/measure-ci.sh --cold -- .ci/run
#
# --keep leaves the clone (and its caches) in place and prints where.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

cold=0 keep=0
while [ $# -gt 0 ]; do
	case $1 in
	--cold) cold=1 ;;
	--keep) keep=1 ;;
	--) shift; break ;;
	*) echo "usage: $0 [--cold] [--keep] -- COMMAND..." >&2; exit 2 ;;
	esac
	shift
done
[ $# -gt 0 ] || { echo "usage: $0 [--cold] [--keep] -- COMMAND..." >&2; exit 2; }

work=$(mktemp -d /tmp/kobe-measure.XXXXXX)
git clone -q "$repo" "$work/kobe"
commit=$(git -C "$work/kobe" rev-parse --short HEAD)
if [ $cold = 1 ]; then
	mkdir -p "$work/gocache" "$work/gomodcache"
	export GOCACHE=$work/gocache GOMODCACHE=$work/gomodcache GOFLAGS=-modcacherw
fi

loads=$work/loadavg
sample() { while :; do cut -d' ' -f1 /proc/loadavg >>"$loads"; sleep 15; done; }
sample &
sampler=$!
trap 'kill $sampler 2>/dev/null || true; [ $keep = 1 ] && echo "kept $work" >&2 || rm -rf "$work"' EXIT

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)
status=passed
(cd "$work/kobe" && CI=true "$@") >"$work/log" 2>&1 </dev/null || status="failed (exit $?, log tail: $(tail -n 3 "$work/log" | tr '\n' ' ' | cut -c1-200))"
secs=$(($(date +%s) - start))
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
kill $sampler 2>/dev/null || true
read -r mean max < <(awk '{s += $1; if ($1 > m) m = $1} END {printf "%.1f %.1f\n", (NR ? s / NR : 0), m}' "$loads")

state=warm
[ $cold = 1 ] && state=cold
what="\`$*\`, $state"
row="| $what | $((secs / 60)) min $((secs % 60)) s | $status | $(date -u +%Y-%m-%dT%H:%MZ) | $commit | $(nproc) | $load_start / $load_end | $mean / $max |"
echo "$row"

out=docs/ci-timings.md
{
	echo "# Measured test times (generated)"
	echo
	echo "Written by \`hack/measure-ci.sh\` (docs/ci.md, \"Measuring\"); one row per command"
	echo "and cache state, the latest measurement. Earlier figures are in git history."
	echo "Cold: empty \`GOCACHE\` and \`GOMODCACHE\`; warm: the machine's caches. Always a"
	echo "fresh clone of the commit named. Load: 1-minute load average at start and end"
	echo "(all three figures), and its mean and maximum sampled every 15 s."
	echo
	echo "| Command | Wall time | Result | Date (UTC) | Commit | Cores | Load start / end | Load mean / max |"
	echo "|---|---|---|---|---|---|---|---|"
	if [ -f "$out" ]; then grep '^| `' "$out" | grep -vF "| $what |" || true; fi
	echo "$row"
} >"$out.tmp"
mv "$out.tmp" "$out"
[ "$status" = passed ]

#!/usr/bin/env bash
# Dry-run compile time and peak memory at scale (a benchmark, not a test).
#   bench/dry-run.sh [build-dir]
# Generates the Kimi-K2-sized inventory, then times `muon-run --dry-run` on it
# and on ../shared/models when present. Prints one line per spec: seconds
# (best of 3, wall) and peak RSS.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$here/kimi_k2_spec.py" > "$tmp/kimi-k2-pp16-ep16-dp8.json"
specs=("$tmp/kimi-k2-pp16-ep16-dp8.json")
for f in "$here"/../../shared/models/*.json; do [ -e "$f" ] && specs+=("$f"); done
printf "%-34s %8s %10s %s\n" spec seconds peak_MiB "matrices, bytes vs bound"
for spec in "${specs[@]}"; do
  best=""
  for _ in 1 2 3; do
    /usr/bin/time -f "%e %M" -o "$tmp/time" "$build/bin/muon-run" "$spec" \
      --dry-run --report "$tmp/report.json" > "$tmp/summary"
    read -r secs kb < "$tmp/time"
    if [ -z "$best" ] || awk "BEGIN{exit !($secs < $best)}"; then best=$secs; mem=$kb; fi
  done
  info=$(head -1 "$tmp/summary" | grep -Eo '[0-9]+ Muon matrices')
  bytes=$(grep -E 'bytes received' "$tmp/summary" | sed 's/^ *//')
  printf "%-34s %8s %10d %s, %s\n" "$(basename "$spec" .json)" "$best" $((mem / 1024)) "$info" "$bytes"
done

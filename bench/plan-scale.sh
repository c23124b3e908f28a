#!/usr/bin/env bash
# Plans for thousands of ranks (a benchmark, not a test).
#   bench/plan-scale.sh [build-dir] [repeats]
# For the Kimi-K2 inventory (kimi_k2_spec.py) on pp 8 x dp 256 (2048 ranks)
# and pp 8 x dp 2048 (16,384 ranks), ep 16 inside dp, prints:
#  - the dry run (compile and report, no plan written): wall seconds (best
#    of `repeats`, default 3), CPU seconds and peak RSS of that run;
#  - compile and write the binary plan (--plan-format binary, which streams
#    the transfers into the file): the same;
#  - the plan's size, and bytes received against the lower bound;
#  - one rank's load of its part (muon-bench plan-load, ranks 0, W/2, W-1):
#    median ms of 5 loads, bytes read from the file, bytes the part holds.
set -euo pipefail
build=${1:-build}
repeats=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# best_of LABEL COMMAND...: runs COMMAND `repeats` times under
# /usr/bin/time; prints the best wall seconds, that run's CPU seconds (user
# + system: less sensitive than wall time to other work on the machine) and
# its peak MiB.
best_of() {
  local label=$1 best="" cpu=0 mem=0 secs user sys kb
  shift
  for _ in $(seq "$repeats"); do
    /usr/bin/time -f "%e %U %S %M" -o "$tmp/time" "$@" > "$tmp/out"
    read -r secs user sys kb < "$tmp/time"
    if [ -z "$best" ] || awk "BEGIN{exit !($secs < $best)}"; then
      best=$secs
      cpu=$(awk "BEGIN{print $user + $sys}")
      mem=$kb
    fi
  done
  printf "  %-28s %8s s wall %8s s cpu %8d MiB\n" "$label" "$best" "$cpu" $((mem / 1024))
}

for mesh in "8 256" "8 2048"; do
  read -r pp dp <<< "$mesh"
  ranks=$((pp * dp))
  spec="$tmp/kimi-k2-pp$pp-dp$dp.json"
  python3 "$here/kimi_k2_spec.py" --pp "$pp" --dp "$dp" --ep 16 > "$spec"
  echo "kimi-k2 pp $pp x dp $dp (ep 16 inside dp): $ranks ranks"
  best_of "dry run" "$build/bin/muon-run" "$spec" --dry-run --quiet
  best_of "compile + write binary plan" "$build/bin/muon-run" "$spec" \
    --dry-run --quiet --plan "$tmp/plan.bin" --plan-format binary
  "$build/bin/muon-run" "$spec" --dry-run > "$tmp/summary"
  printf "  plan size %d bytes; %s\n" "$(stat -c %s "$tmp/plan.bin")" \
    "$(grep -E 'bytes received' "$tmp/summary" | sed 's/^ *//')"
  for rank in 0 $((ranks / 2)) $((ranks - 1)); do
    printf "  %s\n" "$("$build/bin/muon-bench" plan-load "$tmp/plan.bin" --rank "$rank")"
  done
done

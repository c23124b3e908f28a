#!/usr/bin/env bash
# fuzz/run.sh BUILD FUZZ_BUILD SECONDS: runs each fuzz target for SECONDS on
# a corpus seeded from examples/ and test/ (kept in FUZZ_BUILD/corpus, so it
# grows run after run) plus the regression inputs of test/Fuzz/<target>.
# Prints one line per target and "N passed, N failed"; a crash, a leak or a
# timeout leaves its input in FUZZ_BUILD/artifacts/<target>/ and fails.
set -u
build=${1:-build}
fuzz=${2:-build-fuzz}
seconds=${3:-600}
src=$(cd "$(dirname "$0")/.." && pwd)
passed=0
failed=0

seed() { # target, then files to copy into its seed folder
  local target=$1
  shift
  mkdir -p "$fuzz/seeds/$target" "$fuzz/corpus/$target"
  for f in "$@"; do
    [ -f "$f" ] && cp "$f" "$fuzz/seeds/$target/$(echo "$f" | tr / _)"
  done
}

rm -rf "$fuzz/seeds"
seed spec "$src"/examples/*.json "$src"/examples/matrix/*.json \
  "$src"/test/Target/Spec/Inputs/*.json "$src"/test/Fuzz/spec/*
seed ir "$src"/test/Fuzz/ir/* $(find "$src/test" -name '*.mlir' -not -path '*/Fuzz/*')
seed plan "$src"/test/Fuzz/plan/*
seed plan-bin "$src"/test/Fuzz/plan-bin/*
seed checkpoint "$src"/test/Fuzz/checkpoint/*
# Checkpoints as the runtime writes them (the fuzzer's own encoder).
"$fuzz/bin/muon-checkpoint-fuzzer" --write-seeds="$fuzz/seeds/checkpoint"
# Specs as IR and compiled plans, from the tools of the regular build.
for spec in "$src"/examples/*.json "$src"/examples/matrix/*.json; do
  name=$(basename "$spec" .json)
  "$build/bin/muon-translate" --import-spec "$spec" \
    -o "$fuzz/seeds/ir/$name.mlir" 2>/dev/null
  "$build/bin/muon-run" "$spec" --dry-run --quiet \
    --plan "$fuzz/seeds/plan/$name.json" 2>/dev/null
  "$build/bin/muon-run" "$spec" --dry-run --quiet --plan-format binary \
    --plan "$fuzz/seeds/plan-bin/$name.bin" 2>/dev/null
done

# LLVM's headers poison and unpoison allocator memory only when compiled
# with ASan: inlined into our instrumented code but not into Debian's
# libraries, they disagree. Manual poisoning is off; ASan proper is on.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allow_user_poisoning=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

for target in spec ir plan plan-bin checkpoint; do
  bin="$fuzz/bin/muon-$target-fuzzer"
  artifacts="$fuzz/artifacts/$target"
  mkdir -p "$artifacts"
  log="$fuzz/$target.log"
  # Diagnostics of rejected inputs are the fuzz targets' normal output:
  # stdout is closed; crash reports still reach the log.
  "$bin" "$fuzz/corpus/$target" "$fuzz/seeds/$target" \
    -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 \
    -close_fd_mask=1 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" >"$log" 2>&1
  rc=$?
  runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$')
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+')
  found=$(ls "$artifacts" | wc -l)
  if [ "$rc" -eq 0 ] && [ "$found" -eq 0 ]; then
    echo "fuzz $target: ok, ${runs:-0} inputs in ${seconds}s, coverage ${cov:-?}"
    passed=$((passed + 1))
  else
    echo "fuzz $target: FAILED (exit $rc); inputs in $artifacts, log $log"
    grep -E 'ERROR|fuzz check failed|SUMMARY' "$log" | head -5
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

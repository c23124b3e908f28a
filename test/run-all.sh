#!/usr/bin/env bash
# Runs every test suite and ends with one summary line, "N passed, N failed".
# With a fuzz build (second argument), each fuzz target also runs for the
# given seconds (third argument) and counts as one test. With muonc's wheel
# (fourth argument, make wheel), the Python tests run against it, installed
# into a fresh virtualenv (python/scripts/wheel-venv.sh), instead of
# build/venv.
set -u
build=${1:-build}
fuzz=${2:-}
fuzz_seconds=${3:-20}
wheel=${4:-}
passed=0
failed=0

echo "== lit tests (test/)"
lit_out=$(mktemp)
/usr/lib/llvm-22/bin/lit -sv "$build/test" 2>&1 | tee "$lit_out"
lit_rc=${PIPESTATUS[0]}
p=$(grep -Eo '^ *Passed *: *[0-9]+' "$lit_out" | grep -Eo '[0-9]+$' || true)
f=$(grep -Eo '^ *Failed *: *[0-9]+' "$lit_out" | grep -Eo '[0-9]+$' || true)
passed=$((passed + ${p:-0}))
failed=$((failed + ${f:-0}))
[ "$lit_rc" -ne 0 ] && [ -z "$f" ] && failed=$((failed + 1))
rm -f "$lit_out"

echo "== unit tests (unittests/)"
for t in "$build"/bin/*Tests; do
  out=$(mktemp)
  "$t" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  p=$(grep -Eo '\[  PASSED  \] [0-9]+' "$out" | grep -Eo '[0-9]+$' || true)
  f=$(grep -Eo '\[  FAILED  \] [0-9]+ test' "$out" | grep -Eo '[0-9]+' || true)
  passed=$((passed + ${p:-0}))
  failed=$((failed + ${f:-0}))
  [ "$rc" -ne 0 ] && [ -z "$f" ] && failed=$((failed + 1))
  rm -f "$out"
done

# pytest's summary in $1 (the output of a run that exited with $2) into
# the counts. 5: no tests collected (not a failure); any other non-zero
# without a count (a crash, an import error) counts as one failure.
count_pytest() {
  local p f
  p=$(grep -Eo '[0-9]+ passed' "$1" | grep -Eo '[0-9]+' | tail -1 || true)
  f=$(grep -Eo '[0-9]+ (failed|errors?)\b' "$1" | awk '{s += $1} END {if (NR) print s}')
  passed=$((passed + ${p:-0}))
  failed=$((failed + ${f:-0}))
  [ "$2" -ne 0 ] && [ "$2" -ne 5 ] && [ -z "$f" ] && failed=$((failed + 1))
}

# Every code block of README.md and docs/ (test/docs/check-doc-blocks.py),
# its Python with the interpreter $1: each failing block counts as a
# failure, the others as passes.
check_doc_blocks() {
  local out rc checked bad
  echo "== code blocks of README.md and docs/ (test/docs/check-doc-blocks.py)"
  out=$(mktemp)
  python3 "$root/test/docs/check-doc-blocks.py" "$root" "$(cd "$build" && pwd)" --python "$1" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  checked=$(grep -Eo '^[0-9]+ blocks checked' "$out" | grep -Eo '^[0-9]+' || true)
  bad=$(grep -Eo ', [0-9]+ failed$' "$out" | grep -Eo '[0-9]+' || true)
  if [ -n "$checked" ] && [ -n "$bad" ]; then
    passed=$((passed + checked - bad))
    failed=$((failed + bad))
  fi
  [ "$rc" -ne 0 ] && [ -z "$bad" ] && failed=$((failed + 1))
  rm -f "$out"
}

root=$(cd "$(dirname "$0")/.." && pwd)
venv_python=$(cd "$build" && pwd)/venv/bin/python
# A build with the CUDA backend has the extension over the fake GPU too
# (make python): its tests must run, not skip.
fakegpu=0
[ -x "$build/bin/muon-run-fakegpu" ] && fakegpu=1
fakegpu_dir=$(cd "$build" && pwd)/python-fakegpu
if [ -n "$wheel" ]; then
  # The wheel, installed into a fresh virtualenv outside the tree, and the
  # tests run from outside it with nothing of the build on any path: all
  # but the fake GPU's, which need the build's _core_fakegpu.
  echo "== Python tests (python/tests) against $(basename "$wheel")"
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/muonc-wheel.XXXXXX")
  out=$(mktemp)
  if bash "$root/python/scripts/wheel-venv.sh" "$wheel" "$scratch/venv"; then
    (cd "$scratch" &&
     env -u PYTHONPATH -u LD_LIBRARY_PATH -u MUONC_FAKEGPU_DIR \
       "$scratch/venv/bin/python" -m pytest -q -p no:cacheprovider \
       "$root/python/tests" --ignore="$root/python/tests/test_fake_gpu.py") 2>&1 |
      tee "$out"
    count_pytest "$out" "${PIPESTATUS[0]}"
    check_doc_blocks "$scratch/venv/bin/python"
  else
    failed=$((failed + 1))
  fi
  rm -rf "$scratch" "$out"
  python_tests=(tests/test_fake_gpu.py)
  echo "== Python tests on the fake GPU (python/tests/test_fake_gpu.py, pytest in $build/venv)"
else
  python_tests=(tests)
  echo "== Python tests (python/tests, pytest in $build/venv)"
fi
if [ -x "$venv_python" ]; then
  out=$(mktemp)
  (cd "$root/python" &&
   MUONC_FAKEGPU_DIR=$fakegpu_dir \
   MUONC_REQUIRE_FAKEGPU=$fakegpu \
   "$venv_python" -m pytest -q -p no:cacheprovider "${python_tests[@]}") 2>&1 | tee "$out"
  count_pytest "$out" "${PIPESTATUS[0]}"
  rm -f "$out"
  [ -z "$wheel" ] && check_doc_blocks "$venv_python"
else
  echo "no $build/venv (make python): Python tests not run"
  failed=$((failed + 1))
fi

if [ -n "$fuzz" ]; then
  echo "== fuzz targets (fuzz/), ${fuzz_seconds}s each"
  out=$(mktemp)
  bash "$(dirname "$0")/../fuzz/run.sh" "$build" "$fuzz" "$fuzz_seconds" | tee "$out"
  p=$(grep -Eo '^[0-9]+ passed' "$out" | grep -Eo '[0-9]+' || true)
  f=$(grep -Eo '[0-9]+ failed$' "$out" | grep -Eo '[0-9]+' || true)
  passed=$((passed + ${p:-0}))
  failed=$((failed + ${f:-1}))
  rm -f "$out"
fi

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]

#!/usr/bin/env bash
# A fresh virtualenv with torch (the light way, as build/venv has it), the
# tests' requirements (numpy, pytest) and muonc from its wheel, nothing of
# the build: what `make check` runs the Python tests against
# (test/run-all.sh), from outside the tree.
#
#   python/scripts/wheel-venv.sh WHEEL VENV
#
# Says how long `pip install WHEEL` took, and fails when the installed
# extension or MPI plugin needs a library from outside the wheel that the
# wheel should carry or never load (ldd: LLVM, MLIR, OpenBLAS, oneDNN, MPI,
# cuBLAS), or when `import muonc` finds another muonc than the venv's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
wheel=$(cd "$(dirname "${1:?usage: wheel-venv.sh WHEEL VENV}")" && pwd)/$(basename "$1")
venv=${2:?usage: wheel-venv.sh WHEEL VENV}
tag=$(basename "$wheel" | cut -d- -f3) # cp311: python3.11
python=python${tag:2:1}.${tag:3}

rm -rf "$venv"
PYTHON=${PYTHON:-$python} MUONC_REQUIREMENTS=requirements-test.txt \
  bash "$here/venv.sh" "$venv"
venv=$(cd "$venv" && pwd)
start=$(date +%s%N)
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "wheel-venv: pip install $(basename "$wheel"): $((ms / 1000)).$((ms % 1000 / 100)) s"

cd / # nothing of the tree on sys.path
site=$("$venv/bin/python" -c 'import muonc, os; print(os.path.dirname(os.path.dirname(muonc.__file__)))')
case "$site" in
  "$venv"/*) ;;
  *) echo "wheel-venv: import muonc found $site, not $venv's"; exit 1 ;;
esac
status=0
for module in "$site"/muonc/_core*.so "$site"/muonc/libmuonc_mpi.so; do
  # Resolved outside the wheel's own muonc.libs/, or not at all.
  bad=$(ldd "$module" | while read -r name arrow path rest; do
    if [ "$path $rest" = "not found" ]; then
      echo "$name: not found"
    elif [[ $name =~ ^lib(LLVM|MLIR|openblas|dnnl|mpi|cublas) ]]; then
      real=$(readlink -f "$path")
      [ "${real#"$site"/muonc.libs/}" != "$real" ] || echo "$name => $real"
    fi
  done)
  if [ -n "$bad" ]; then
    echo "wheel-venv: $(basename "$module") needs from outside the wheel:"
    echo "$bad"
    status=1
  fi
done
[ $status = 0 ] && echo "wheel-venv: $venv: muonc $("$venv/bin/python" -c 'import muonc; print(muonc.__version__)'), its libraries from the wheel"
exit $status

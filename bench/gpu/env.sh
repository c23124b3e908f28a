# bench/gpu/env.sh: sourced by the scripts of bench/gpu on the lent GPU
# machine: unpacks the carried Debian packages (OpenMPI, OpenBLAS) and sets
# the paths the bundle's programs need. Sets src, bundle, out, root (a
# scratch directory the caller removes), py, torch_ld, muonc_path and
# muonc_ld. With BACKEND=cpu (run.sh's dry run on a development machine)
# there is no bundle: the build's tools (MUON_BIN, default build/bin) and
# PYTHON (with torch and muonc installed), and an empty bundle directory
# for the plans the dry run compiles.
src=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${BUNDLE:-$src/gpu-bundle}
out=${OUT:-$src/gpu-out}
mkdir -p "$out"
root=$(mktemp -d)

# check_bundle DIR [MUON_RUN]: what bundle.sh build leaves in DIR and
# run.sh reads, one line per problem ("bundle DIR: ..."), nothing when
# all is there; status 1 on a problem. With MUON_RUN, each plan is also
# read and validated by it (--dry-run).
check_bundle() {
  local dir=$1 muon_run=${2:-} problems=0 f
  if [ ! -d "$dir" ]; then
    echo "bundle $dir: no such directory (bash bench/gpu/bundle.sh build)"
    return 1
  fi
  for f in bin/muon-run bin/muon-bench bin/muon-cuda-check; do
    [ -x "$dir/$f" ] ||
      { echo "bundle $dir: $f missing or not executable"; problems=1; }
  done
  for f in debs.tar.gz plans/llama3-8b-L8.plan.json plans/demo-4.plan.json; do
    [ -s "$dir/$f" ] ||
      { echo "bundle $dir: $f missing or empty"; problems=1; }
  done
  if [ -s "$dir/debs.tar.gz" ] &&
    ! tar -tzf "$dir/debs.tar.gz" 2>/dev/null | grep 'bin/mpirun.openmpi$' >/dev/null; then
    echo "bundle $dir: debs.tar.gz has no usr/bin/mpirun.openmpi"
    problems=1
  fi
  # muonc is optional (the bridge is then not run); when there, it must
  # hold the package and its extension.
  if [ -f "$dir/muonc.tar.xz" ] && ! "${py:-python3}" - "$dir/muonc.tar.xz" <<'PY'
import re, sys, tarfile
try:
    names = tarfile.open(sys.argv[1]).getnames()
except (OSError, tarfile.TarError) as e:
    sys.exit(f"bundle: muonc.tar.xz: {e}")
need = ["muonc/__init__.py", r"muonc/_core\.cpython-312-.*\.so"]
missing = [n for n in need if not any(re.fullmatch(n, x) for x in names)]
if missing:
    sys.exit("bundle: muonc.tar.xz lacks " + ", ".join(missing))
PY
  then
    problems=1
  fi
  if [ -n "$muon_run" ]; then
    for f in "$dir"/plans/*.plan.json; do
      [ -f "$f" ] || continue
      "$muon_run" "$f" --dry-run --quiet > /dev/null 2>"$root/plan.err" ||
        { echo "bundle $dir: ${f#$dir/} does not load: $(head -1 "$root/plan.err")"
          problems=1; }
    done
  fi
  return $problems
}

if [ "${BACKEND:-cuda}" = cpu ]; then
  export PATH="${MUON_BIN:-$src/build/bin}:$PATH"
  py=${PYTHON:-python3}
  torch_ld=${LD_LIBRARY_PATH:-}
  muonc_path= muonc_ld=
  # The bundle a GPU call would carry, checked where there is one (BUNDLE,
  # default gpu-bundle/); the dry run's own plans go elsewhere.
  bundle_check="not checked: no $bundle (bash bench/gpu/bundle.sh build)"
  if [ -e "$bundle" ]; then
    if problems=$(check_bundle "$bundle" muon-run); then
      bundle_check="complete: $bundle"
    else
      bundle_check="FAIL"$'\n'"$problems"
    fi
  fi
  bundle="$root/bundle"
  mkdir -p "$bundle/plans"
  echo "cpu (dry run of bench/gpu/run.sh)" > "$out/gpu.txt"
  return 0
fi
if ! check_bundle "$bundle" >&2; then
  echo "bench/gpu: the bundle is incomplete: run bash bench/gpu/bundle.sh build and carry gpu-bundle" >&2
  exit 1
fi
# The machine's own library path, for PyTorch (which must not pick up the
# carried Debian libraries or another cuBLAS ahead of its wheels').
torch_ld=${LD_LIBRARY_PATH:-}
# PyTorch's interpreter: the image's venv, else the python3 on PATH.
py=${PYTHON:-/opt/torch/.venv/bin/python3}
[ -x "$py" ] || py=python3
# gzip, not xz: tar needs an xz program for -J, which slim images lack.
tar -C "$root" -xzf "$bundle/debs.tar.gz"
# The unpacked OpenMPI finds its plugins and help files under OPAL_PREFIX;
# plugins whose libraries are not here (InfiniBand, UCX, ...) stay quiet.
export OPAL_PREFIX="$root/usr"
export PATH="$root/usr/bin:$bundle/bin:$PATH"
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-}"
# dpkg -x makes no alternatives links: mpirun is mpirun.openmpi.
ln -sf mpirun.openmpi "$root/usr/bin/mpirun"
# cuBLAS and NCCL as the machine has them (the CUDA toolkit, or the wheels
# PyTorch brought).
for lib in libcublas.so.13 libnccl.so.2; do
  dir=$(dirname "$(find /usr/local/cuda* /usr/lib /opt -name "$lib" 2>/dev/null | head -1)")
  [ "$dir" != . ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir"
done
# muonc for the machine's Python (torch_bridge.py): the package and the
# libraries it needs beyond debs.tar.gz's, unpacked with Python's tarfile
# (xz). muonc_path and muonc_ld: its PYTHONPATH and library path.
muonc_path= muonc_ld=
if [ -f "$bundle/muonc.tar.xz" ]; then
  "$py" - "$bundle/muonc.tar.xz" "$root/muonc" <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1]) as tar:
    tar.extractall(sys.argv[2], filter="fully_trusted")
PY
  muonc_path="$root/muonc"
  muonc_ld="$root/muonc/lib:$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu/openblas-pthread"
fi
export OMPI_MCA_mca_base_component_show_load_errors=0
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1
# PMIx's help files do not follow OPAL_PREFIX; its one warning is noise.
export PMIX_MCA_pcompress_base_silence_warning=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv \
  > "$out/gpu.txt" 2>&1
for b in muon-run muon-bench muon-cuda-check; do
  ldd "$bundle/bin/$b" | grep "not found" && echo "missing libraries for $b"
done > "$out/ldd.txt"


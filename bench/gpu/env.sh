# bench/gpu/env.sh: sourced by the scripts of bench/gpu on the lent GPU
# machine: unpacks the carried Debian packages (OpenMPI, OpenBLAS) and sets
# the paths the bundle's programs need. Sets src, bundle, out, py, torch_ld.
src=$(cd "$(dirname "$0")/../.." && pwd)
bundle="$src/gpu-bundle"
out=${OUT:-$src/gpu-out}
mkdir -p "$out"
root=$(mktemp -d)
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


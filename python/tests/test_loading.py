"""What muonc loads, and when: MPI only for comm="mpi", cuBLAS only for a GPU
device, with an error naming what is missing (docs/pytorch.md, "What the
wheel carries"). Each case runs in a fresh interpreter, without torch, so
that what is mapped is muonc's doing alone."""
import json
import os
import subprocess
import sys
import textwrap

import muonc

STEP = """
import json, numpy as np, muonc
plan = muonc.compile_model(
    [{"name": "w", "shape": [8, 4], "group": "hidden"}],
    [{"name": "hidden", "algorithm": "muon", "lr": 0.02}])
opt = muonc.Optimizer(plan)
w = np.ones((8, 4), np.float32)
opt.bind("w", w, np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))
assert opt.step()["applied"]
"""


def run(code, **env):
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    environment.update(env)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                         env=environment, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_cpu_step_maps_neither_mpi_nor_cublas():
    mapped = json.loads(run(STEP + """
with open("/proc/self/maps") as f:
    files = sorted({line.split()[-1] for line in f if "/" in line})
print(json.dumps(files))
"""))
    names = [os.path.basename(f) for f in mapped]
    assert not [n for n in names if n.startswith(("libmpi", "libcublas",
                                                  "libnccl", "libLLVM",
                                                  "libMLIR"))], names
    assert "torch" not in " ".join(mapped)


def test_comm_mpi_without_libmpi_names_it():
    # A machine without MPI, as far as muonc can tell: the library it
    # loads for comm="mpi" is not there.
    message = run("""
import muonc
plan = muonc.compile_model(
    [{"name": "w", "shape": [8, 4], "group": "hidden"}],
    [{"name": "hidden", "algorithm": "muon", "lr": 0.02}])
try:
    muonc.Optimizer(plan, comm="mpi")
except muonc.UnavailableError as e:
    assert isinstance(e, muonc.MuonError) and isinstance(e, RuntimeError)
    print(e)
else:
    raise AssertionError("no error")
""", MUON_MPI_LIBRARY="/nonexistent/libmpi.so.40")
    assert "cannot load /nonexistent/libmpi.so.40" in message, message
    assert "MUON_MPI_LIBRARY" in message, message


def test_version_is_the_projects():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "VERSION")) as f:
        assert muonc.__version__ == f.read().strip()

"""Checks the OpenBLAS kernels muon-bench and muon-run name
(test/Tools/blas-kernels.test): `preferred FILE...` -- none is a generic
kernel where this CPU has AVX2 and FMA; `kept FILE...` -- each is the
Prescott kernels the test asked for. A build on BLIS names no kernels and
passes trivially (it says so)."""
import re
import sys

GENERIC = {"Unknown", "Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
           "Atom", "Katmai", "Coppermine", "Northwood", "Banias", "Athlon",
           "Opteron", "Opteron_SSE3"}


def cpu_flags():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


mode, files = sys.argv[1], sys.argv[2:]
kernels = []
for f in files:
    found = re.findall(r"OpenBLAS, ([A-Za-z0-9_]+) kernels", open(f).read())
    if not found:
        print(f"{f}: no OpenBLAS kernels named (BLIS, or OpenBLAS without "
              "the kernels' name): nothing to check")
        kernels.append(None)
    else:
        kernels.append(found[0])
if mode == "preferred":
    flags = cpu_flags()
    fast = "avx2" in flags and "fma" in flags
    good = 0
    for f, k in zip(files, kernels):
        if k is not None and fast and k in GENERIC:
            sys.exit(f"{f}: OpenBLAS's generic {k} kernels on a CPU with "
                     "AVX2 and FMA: the restart with OPENBLAS_CORETYPE did "
                     "not happen")
        good += 1
    print(f"kernels as this CPU's features pick: {good} of {len(files)}")
else:
    for f, k in zip(files, kernels):
        if k is not None and k != "Prescott":
            sys.exit(f"{f}: {k} kernels, not the Prescott the user set")
    print(f"the user's kernels kept: {len(files)} of {len(files)}")

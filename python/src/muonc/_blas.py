"""OpenBLAS's kernels on CPUs newer than it.

OpenBLAS picks its kernels when it loads, from the CPU's model; a model it
does not know (OpenBLAS 0.3.21, Debian 12's and the wheel's, predates
Emerald Rapids) gets its generic Prescott (SSE3) kernels, about 5x slower
in the f32 products of Newton-Schulz. It reads OPENBLAS_CORETYPE first, so
muonc sets it, when the user has not, before its extension loads OpenBLAS:
from the CPU's features, by the rule the C++ runtime states
(runtime::cpu::preferredBlasKernels, which muon-run and muon-bench advise):
SkylakeX with AVX-512 (F, BW, DQ, VL), Haswell with AVX2 and FMA.
"""
import os
import platform

VARIABLE = "OPENBLAS_CORETYPE"


def preferred_kernels(flags):
    """The OpenBLAS kernels for a CPU with these /proc/cpuinfo flags, or
    None."""
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


def cpu_flags(path="/proc/cpuinfo"):
    """The first processor's flags (an empty set where unreadable)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def prefer_kernels(environ=os.environ):
    """Sets OPENBLAS_CORETYPE from the CPU's features unless it is set or
    this is not x86-64 Linux; returns what it set (None: nothing)."""
    if VARIABLE in environ or platform.system() != "Linux" or \
            platform.machine() not in ("x86_64", "AMD64"):
        return None
    kernels = preferred_kernels(cpu_flags())
    if kernels is not None:
        environ[VARIABLE] = kernels
    return kernels

"""OpenBLAS's kernels: muonc sets OPENBLAS_CORETYPE from the CPU's features
before OpenBLAS loads (a CPU newer than OpenBLAS would otherwise get its
generic kernels), and leaves a value the user set alone."""
import os
import subprocess
import sys

import pytest

import muonc
from muonc import _blas, _core

GENERIC = ("Prescott", "Core2", "Nehalem", "Atom", "Unknown")


def products_in_fresh_process(env):
    code = "import muonc; print(muonc.cpu_newton_schulz('f32', 'standard'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def clean_env():
    env = dict(os.environ)
    env.pop(_blas.VARIABLE, None)
    return env


def test_the_python_rule_is_the_runtimes():
    assert (_blas.preferred_kernels(_blas.cpu_flags()) or "") == \
        _core.preferred_blas_kernels()


def test_rule_on_constructed_flags():
    assert _blas.preferred_kernels({"avx512f", "avx512bw", "avx512dq",
                                    "avx512vl", "avx2", "fma"}) == "SkylakeX"
    assert _blas.preferred_kernels({"avx512f", "avx2", "fma"}) == "Haswell"
    assert _blas.preferred_kernels({"sse4_2"}) is None


def test_import_sets_the_kernels_from_the_cpu():
    want = _core.preferred_blas_kernels()
    if not want:
        pytest.skip("a CPU without AVX2: OpenBLAS keeps its own choice")
    products = products_in_fresh_process(clean_env())
    if "OpenBLAS" not in products:
        pytest.skip(f"built with another BLAS: {products}")
    assert f"OpenBLAS, {want} kernels" in products, products
    assert not any(f"{g} kernels" in products for g in GENERIC), products


def test_a_users_setting_is_kept():
    if "OpenBLAS" not in muonc.cpu_newton_schulz("f32", "standard"):
        pytest.skip("built with another BLAS")
    if not _core.preferred_blas_kernels():
        pytest.skip("a CPU without AVX2")
    env = dict(clean_env(), OPENBLAS_CORETYPE="Prescott")
    assert "OpenBLAS, Prescott kernels" in products_in_fresh_process(env)
    environ = {"OPENBLAS_CORETYPE": "Haswell"}
    assert _blas.prefer_kernels(environ) is None
    assert environ == {"OPENBLAS_CORETYPE": "Haswell"}

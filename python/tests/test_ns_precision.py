"""What ns_dtype "auto" is on the CPU (docs/runtime.md, "What ns_dtype auto
is on the CPU"): muonc asks the runtime's rule, which decides by the rates
of the products each precision runs on. Rates given through
MUON_CPU_PRODUCT_RATES decide it in a fresh process (the rates of the two
CPUs the rule was measured on), a CPU without bf16 products (oneDNN's
DNNL_MAX_CPU_ISA emulates one) is f32 whatever the rates, muonc.torch's
ns_dtype="auto" runs the choice, and a precision given always runs."""
import json
import os
import subprocess
import sys

import pytest

import muonc

# bf16 products at 0.47x sgemm's (the Emerald Rapids without AMX)
# and at 2.14x (a Zen 4 EPYC).
SLOW_BF16 = "f32=1.15e11,bf16=5.44e10"
FAST_BF16 = "f32=1.047e11,bf16=2.241e11"


def choice_in_fresh_process(rates, isa=None):
    env = dict(os.environ, MUON_CPU_PRODUCT_RATES=rates)
    if isa:
        env["DNNL_MAX_CPU_ISA"] = isa
    code = "import json, muonc; print(json.dumps(muonc.cpu_auto_ns_dtype()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True)
    return tuple(json.loads(out.stdout))


def has_bf16_products():
    return muonc.cpu_newton_schulz("bf16").startswith("bf16 products")


def test_this_process_says_what_and_why():
    dtype, reason = muonc.cpu_auto_ns_dtype()
    assert dtype in ("f32", "bf16")
    assert reason.startswith(dtype + ": "), reason
    assert muonc.cpu_newton_schulz("auto") == muonc.cpu_newton_schulz(dtype)


def test_the_rates_decide_where_there_are_bf16_products():
    slow = choice_in_fresh_process(SLOW_BF16)
    fast = choice_in_fresh_process(FAST_BF16)
    assert slow[0] == "f32", slow
    if has_bf16_products():
        assert "bf16 products run at 0.47x f32's here" in slow[1], slow
        assert fast == ("bf16", fast[1]), fast
        assert "its products run at 2.14x f32's here" in fast[1], fast
    else:
        assert fast[0] == "f32", fast
        assert "no bf16 products here" in fast[1], fast


@pytest.mark.parametrize("isa", ["AVX2", "AVX512_CORE"])
def test_f32_without_bf16_products_whatever_the_rates(isa):
    dtype, reason = choice_in_fresh_process(FAST_BF16, isa)
    assert dtype == "f32"
    assert reason.startswith("f32: no bf16 products here (oneDNN "), reason


def test_torch_runs_auto_as_chosen_and_a_given_precision_always():
    torch = pytest.importorskip("torch")
    from muonc.torch import Muon

    def engine_of(ns_dtype):
        model = torch.nn.Linear(16, 24, bias=False)
        opt = Muon(model.parameters(), lr=0.02, ns_dtype=ns_dtype)
        model.weight.grad = torch.ones_like(model.weight)
        opt.step()
        return opt.engine

    chosen, why = muonc.cpu_auto_ns_dtype()
    auto = engine_of("auto")
    assert (auto.ns_dtype, auto.ns_dtype_reason) == (chosen, why)
    for given in ("f32", "bf16", "f16"):
        engine = engine_of(given)
        assert engine.ns_dtype == given
        assert engine.ns_dtype_reason == f"{given}: the plan's ns_dtype"
    # The default on the CPU stays f32 (docs/pytorch.md: accuracy first).
    assert engine_of(None).ns_dtype == "f32"


def test_f16_is_closer_to_f32_than_bf16():
    # One step of muonc.torch.Muon from the same gradient in each precision:
    # f16 (normalized in f32, f32 BLAS products rounded to f16 on the CPU)
    # within 1e-2 of f32's update and below 0.35 of bf16's distance, on a
    # wide matrix (the Gram form) and a square one (the standard form).
    torch = pytest.importorskip("torch")
    from muonc.torch import Muon

    def update(shape, ns_dtype):
        torch.manual_seed(3)
        w = torch.nn.Parameter(torch.randn(shape))
        before = w.detach().clone()
        opt = Muon([w], lr=0.02, weight_decay=0.0, ns_dtype=ns_dtype)
        w.grad = torch.randn(shape, generator=torch.Generator().manual_seed(4))
        opt.step()
        assert opt.engine.ns_dtype == ns_dtype
        return w.detach() - before

    for shape in ((64, 192), (96, 96)):
        f32, f16, bf16 = (update(shape, d) for d in ("f32", "f16", "bf16"))
        near = ((f16 - f32).norm() / f32.norm()).item()
        far = ((bf16 - f32).norm() / f32.norm()).item()
        assert near < 1e-2, (shape, near, far)
        assert near < 0.35 * far, (shape, near, far)

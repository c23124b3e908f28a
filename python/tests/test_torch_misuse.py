"""muonc.torch.Muon under the mistakes users make: a rank that skips
constructing or stepping the optimizer, ranks with another plan or other
settings, hostile state dicts and arguments. Each is refused with torch's
builtin exception class, naming what differs and where, within the
optimizer's timeout, with nothing changed; no input makes a step write
non-finite parameters."""
import copy
import json
import os
import re
import time

import pytest

torch = pytest.importorskip("torch")
import muonc  # noqa: E402
from muonc.torch import Muon, MuonError  # noqa: E402
from conftest import TinyTransformer, batch, loss_of, run_ranks, split_params  # noqa: E402

TIMEOUT = 6.0


def groups(model):
    muon, adamw = split_params(model)
    return [{"params": muon, "name": "hidden"},
            {"params": adamw, "use_muon": False, "lr": 3e-3,
             "name": "rest"}]


def trained(steps=2, **kw):
    torch.manual_seed(0)
    model = TinyTransformer()
    opt = Muon(groups(model), lr=0.02, **kw)
    for s in range(steps):
        x, y = batch(s)
        opt.zero_grad()
        loss_of(model, x, y).backward()
        opt.step()
    return model, opt


def message(fn):
    try:
        fn()
    except MuonError as e:
        return type(e).__mro__, str(e)
    return None, "no error"


# --- ranks that do not do alike -------------------------------------------------

def _skips_construction(rank, world, out):
    # Rank 1 never constructs the optimizer (a bug in the user's script):
    # rank 0's first step waits TIMEOUT for it, not the process group's 30
    # minutes, and says which rank did not come.
    import torch.distributed as dist
    result = {}
    if rank == 0:
        w = torch.nn.Parameter(torch.randn(8, 4))
        opt = Muon([w], timeout=TIMEOUT)
        w.grad = torch.randn(8, 4)
        start = time.monotonic()
        try:
            opt.step()
            result["error"] = "no error"
        except MuonError as e:
            result["error"] = str(e)
            result["class"] = type(e).__name__
            result["runtime_error"] = isinstance(e, RuntimeError)
        result["seconds"] = time.monotonic() - start
    dist.barrier()
    torch.save(result, f"{out}.{rank}")


def test_a_rank_that_never_constructs_is_named_within_the_timeout(tmp_path):
    out = str(tmp_path / "skip")
    run_ranks(_skips_construction, 2, out)
    got = torch.load(f"{out}.0")
    assert got["class"] == "DeadlineExceededError" and got["runtime_error"]
    assert "rank 0 waited 6 s for rank 1 to build the optimizer's plan" in \
        got["error"], got["error"]
    assert TIMEOUT - 0.5 < got["seconds"] < TIMEOUT + 20, got["seconds"]


def _skips_a_step(rank, world, out):
    # Both construct and step once; rank 1 skips the second step.
    import torch.distributed as dist
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(8, 4))
    opt = Muon([w], timeout=TIMEOUT)
    w.grad = torch.ones(8, 4)
    opt.step()
    result = {}
    if rank == 0:
        start = time.monotonic()
        result["error"] = message(opt.step)[1]
        result["seconds"] = time.monotonic() - start
    else:
        time.sleep(TIMEOUT + 4)
    dist.barrier()
    torch.save(result, f"{out}.{rank}")


def test_a_rank_that_skips_a_step_is_named_with_where_it_is(tmp_path):
    out = str(tmp_path / "step")
    run_ranks(_skips_a_step, 2, out)
    got = torch.load(f"{out}.0")
    assert "step 2 on rank 0 waited 6 s for the other ranks: rank 1 at " \
        "step 1" in got["error"], got["error"]
    assert got["seconds"] < TIMEOUT + 20, got["seconds"]


def _another_plan(rank, world, out):
    # Rank 1's matrix has another shape: both ranks refuse at the build,
    # naming the parameter and both shapes.
    w = torch.nn.Parameter(torch.randn(8, 4 if rank == 0 else 6))
    opt = Muon([("block.w", w)], timeout=TIMEOUT)
    w.grad = torch.ones_like(w)
    save_refused_step(opt, [w], f"{out}.{rank}")


def save_refused_step(opt, params, path):
    """Steps `opt`, saving the error's text, whether it is a ValueError,
    and whether `params` stayed as they were."""
    before = [p.detach().clone() for p in params]
    cls, text = message(opt.step)
    torch.save({"error": text, "value_error": ValueError in (cls or ()),
                "unchanged": all(torch.equal(a, b) for a, b in
                                 zip(before, params))}, path)


def assert_every_rank_refused(worker, tmp_path, says):
    """Runs `worker` on 2 ranks: each refused its step with a ValueError
    that `says` what differs, its parameters unchanged."""
    out = str(tmp_path / "refused")
    run_ranks(worker, 2, out)
    for rank in (0, 1):
        got = torch.load(f"{out}.{rank}")
        assert says in got["error"], got["error"]
        assert got["value_error"] and got["unchanged"]


def test_a_rank_with_another_plan_names_the_parameter(tmp_path):
    assert_every_rank_refused(
        _another_plan, tmp_path,
        "ranks [1] hold a plan different from rank 0's (parameter 'block.w' "
        "shape: [8, 6] on rank 1, [8, 4] on rank 0)")


def _another_lr(rank, world, out):
    torch.manual_seed(0)
    model = TinyTransformer()
    opt = Muon(groups(model), lr=0.02, timeout=TIMEOUT)
    x, y = batch(0)
    loss_of(model, x, y).backward()
    opt.step()
    if rank == 1:
        opt.param_groups[1]["lr"] = 1e-3
    save_refused_step(opt, list(model.parameters()), f"{out}.{rank}")


def test_a_rank_with_another_lr_names_the_group_key_and_values(tmp_path):
    assert_every_rank_refused(
        _another_lr, tmp_path,
        "ranks [1] set group hyper-parameters different from rank 0's (group "
        "'rest' lr: 0.001 on rank 1, 0.003 on rank 0)")


# --- one process: arguments ----------------------------------------------------

def test_a_string_lr_is_torchs_type_error():
    w = torch.nn.Parameter(torch.randn(4, 4))
    with pytest.raises(TypeError, match="lr must be a number"):
        Muon([w], lr="0.02")
    with pytest.raises(TypeError, match="lr must be a number"):
        Muon([{"params": [w], "lr": "0.02"}])
    with pytest.raises(ValueError, match="lr is nan; it must be finite"):
        Muon([w], lr=float("nan"))
    with pytest.raises(ValueError, match="momentum 1.5 is above 1"):
        Muon([w], momentum=1.5)


@pytest.mark.parametrize("kw,says", [
    ({"lr": 1e38}, "1e+38 is beyond 1e+10"),
    ({"lr": 1.0, "weight_decay": 3.0}, "lr x weight_decay is 3, above 2"),
    ({"extra_scale_factor": 1e30}, "1e+30 is beyond 1e+10")])
def test_steps_that_would_overflow_are_refused(kw, says):
    # Finite but absurd: a step would write non-finite parameters (torch
    # would), at once or after the parameters grow geometrically.
    w = torch.nn.Parameter(torch.randn(8, 4))
    with pytest.raises(ValueError, match=re.escape(says)):
        Muon([w], **kw)
    opt = Muon([w])
    w.grad = torch.randn(8, 4)
    before = w.detach().clone()
    opt.param_groups[0].update(kw)
    with pytest.raises(ValueError, match=re.escape(says)):
        opt.step()
    assert torch.equal(before, w)


@pytest.mark.parametrize("coefficients", [
    (3.4445, -1e308, 2.0315), (64.0, 64.0, 64.0), (3.4445, -4.775, 1e20),
    (float("inf"), -4.775, 2.0315)])
def test_newton_schulz_coefficients_that_could_overflow_are_refused(
        coefficients):
    w = torch.nn.Parameter(torch.randn(8, 4))
    with pytest.raises(ValueError, match="ns_coefficients|must be finite"):
        Muon([w], ns_coefficients=coefficients)
    # Given later, in the groups: refused at the step, nothing written.
    opt = Muon([w])
    w.grad = torch.randn(8, 4)
    before = w.detach().clone()
    opt.param_groups[0]["ns_coefficients"] = coefficients
    with pytest.raises(ValueError, match="ns_coefficients|must be finite"):
        opt.step()
    assert torch.equal(before, w) and torch.isfinite(w).all()


def test_coefficients_past_f16s_range_are_refused_for_f16():
    # One step of (3000, -6000, 3000) keeps singular values below 858 but
    # its products reach 9e3, past a sixteenth of f16's 65504: refused for
    # ns_dtype="f16" (at construction, and at the step when set later),
    # run in f32.
    w = torch.nn.Parameter(torch.randn(8, 4))
    wide = (3000.0, -6000.0, 3000.0)
    with pytest.raises(ValueError, match="a sixteenth of what f16 holds"):
        Muon([w], ns_coefficients=wide, ns_steps=1, ns_dtype="f16")
    Muon([w], ns_coefficients=wide, ns_steps=1, ns_dtype="f32")
    opt = Muon([w], ns_steps=1, ns_dtype="f16")
    opt.param_groups[0]["ns_coefficients"] = wide
    w.grad = torch.randn(8, 4)
    before = w.detach().clone()
    with pytest.raises(ValueError, match="a sixteenth of what f16 holds"):
        opt.step()
    assert torch.equal(before, w)


def test_bounded_published_coefficients_pass():
    # Jordan's, Polar Express's first step, and a table that grows then
    # shrinks stay within the bound.
    from muonc import _core
    _core.check_ns_coefficients([[3.4445, -4.775, 2.0315]], 5)
    _core.check_ns_coefficients(
        [[8.28721201814563, -23.595886519098837, 17.300387312530933]], 1)
    _core.check_ns_coefficients([[2.0, -1.5, 0.5]], 99)


def test_a_plan_file_with_edited_coefficients_is_refused(tmp_path):
    model, opt = trained(1)
    plan = json.loads(opt.engine.plan_json())
    for edit in ([[3.4445, -4.775, 1e308]], [[64.0, 64.0, 64.0]]):
        bad = copy.deepcopy(plan)
        ns = bad["newton_schulz"]
        ns["ns_coefficients"] = edit * ns["ns_steps"]
        path = tmp_path / "plan.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(MuonError, match="ns_coefficients: step [0-9]+"):
            muonc.Optimizer(str(path), plan_is_file=True)


# --- one process: state dicts ---------------------------------------------------

def first_adamw_entry(d):
    return next(e for e in d["state"].values() if "exp_avg" in e)


def steps_alike(model, opt, twin_model, twin, s):
    """One step of both on the same batch: equal parameters bit for bit."""
    x, y = batch(100 + s)
    for m, o in ((model, opt), (twin_model, twin)):
        o.zero_grad()
        loss_of(m, x, y).backward()
        o.step()
    return all(torch.equal(a, b) for a, b in zip(model.parameters(),
                                                 twin_model.parameters()))


@pytest.mark.parametrize("mutate,error,match", [
    (lambda d: d["state"].__setitem__(0, None), TypeError,
     r"the state of parameter '[^']+' is NoneType None, not a dict"),
    (lambda d: d["state"][4].__setitem__("step", 1e30), ValueError,
     r"parameter '[^']+': step 1e\+30 is not a whole number in \[0, 2\*\*53\]"),
    (lambda d: d["param_groups"][1].__setitem__("use_muon", True), ValueError,
     r"param_groups\[1\] \('rest'\): use_muon is True in the state but the "
     r"group is adamw here"),
    (lambda d: d["param_groups"][0].__setitem__("lr", "0.02"), TypeError,
     r"param_groups\[0\] \('hidden'\): invalid argument: lr must be a number"),
    (lambda d: d["param_groups"][0].__setitem__(
        "ns_coefficients", (3.4445, -1e308, 2.0315)), ValueError,
     r"ns_coefficients step 0 can take a singular value to 1e\+308"),
    # Finite, but no run makes it, and AdamW's next update would overflow.
    (lambda d: first_adamw_entry(d)["exp_avg"].view(-1).__setitem__(0, 3e38),
     ValueError, r"the exp_avg state of '[^']+' at \[0(, 0)?\] is 3e\+38, "
     r"beyond what its exp_avg_sq \([^)]*\) allows"),
])
def test_a_bad_state_dict_is_refused_and_changes_nothing(mutate, error,
                                                          match):
    model, opt = trained()
    twin_model, twin = trained()
    saved = copy.deepcopy(opt.state_dict())
    bad = copy.deepcopy(saved)
    mutate(bad)
    with pytest.raises(error, match=match):
        opt.load_state_dict(bad)
    # Nothing changed: the state dict, and the next steps, bit for bit.
    after = opt.state_dict()
    for i, entry in saved["state"].items():
        for k, v in entry.items():
            assert torch.equal(after["state"][i][k], torch.as_tensor(v))
    assert after["param_groups"] == saved["param_groups"]
    for s in range(2):
        assert steps_alike(model, opt, twin_model, twin, s)


def test_documented_defaults_and_skips():
    # An AdamW group without lr runs at AdamW's default (1e-3), not the
    # Muon lr (docs/pytorch.md, "Parameter groups").
    w, b = torch.nn.Parameter(torch.randn(4, 4)), torch.nn.Parameter(
        torch.randn(4))
    opt = Muon([{"params": [w]}, {"params": [b], "use_muon": False}],
               lr=0.02)
    assert opt.param_groups[1]["lr"] == 1e-3
    assert opt.param_groups[1]["weight_decay"] == 0.01
    # A parameter without a gradient is skipped, as torch skips it.
    w.grad = torch.randn(4, 4)
    before = b.detach().clone()
    opt.step()
    assert torch.equal(before, b)
    # The momentum is torch's lerp: m = mu m + (1 - mu) g from zero.
    torch.testing.assert_close(opt.state[w]["momentum_buffer"],
                               (1 - 0.95) * w.grad, rtol=1e-6, atol=0)

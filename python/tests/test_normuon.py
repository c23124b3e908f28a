"""NorMuon (arXiv 2510.05491) through muonc.torch: the normuon and
normuon_beta2 group keys against a numpy reference written from the
paper's formulas, and its per-row state through state dicts."""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from muonc.torch import Muon, MuonError  # noqa: E402

LR = 0.02


def reference_normuon(o, v, beta2, eps=1e-8):
    """Algorithm 1 of the paper with dion's rescale, in float64: the row
    (neuron) second moment's EMA normalizes O, then the result is scaled
    back to O's Frobenius norm. Returns (update, new v)."""
    o = o.astype(np.float64)
    v = beta2 * v + (1 - beta2) * np.mean(o * o, axis=-1)
    n = o / (np.sqrt(v)[..., None] + eps)
    n *= np.linalg.norm(o) / max(np.linalg.norm(n), eps)
    return n, v


def run(shape, grads, **kw):
    """The parameter after each step of ours from fixed values and the
    given gradients; the optimizer too."""
    w = torch.nn.Parameter(torch.linspace(-1, 1, int(np.prod(shape))).reshape(shape))
    opt = Muon([w], lr=LR, weight_decay=0.0, **kw)
    values = [w.detach().clone()]
    for g in grads:
        w.grad = g.clone()
        opt.step()
        values.append(w.detach().clone())
    return values, opt


@pytest.mark.parametrize("shape", [(12, 20), (24, 8)])
def test_matches_a_numpy_reference_from_the_paper(shape):
    # Muon's step on the same gradients says what Newton-Schulz made
    # (O = -delta / lr, adjust_lr "original" = lr * sqrt(max(1, rows/cols)));
    # NorMuon's must be the reference's normalization of it, step after
    # step, with the EMA carried.
    torch.manual_seed(0)
    grads = [torch.randn(shape) for _ in range(3)]
    alr = LR * max(1.0, shape[0] / shape[1]) ** 0.5
    muon, _ = run(shape, grads)
    nor, opt = run(shape, grads, normuon=True, normuon_beta2=0.9)
    v = np.zeros(shape[0])
    for s in range(3):
        o = -(muon[s + 1] - muon[s]).double().numpy() / alr
        expected, v = reference_normuon(o, v, 0.9)
        got = -(nor[s + 1] - nor[s]).double().numpy() / alr
        scale = np.abs(expected).max()
        assert np.abs(got - expected).max() < 1e-4 * scale, s
        # Not Muon's update: the rows were renormalized.
        assert np.abs(o - expected).max() > 1e-2 * scale, s
        # Muon's RMS kept.
        assert abs(np.linalg.norm(got) / np.linalg.norm(o) - 1) < 1e-4
    # The state is the reference's EMA, one value per row.
    rows = opt.local_state_dict()["muonc"]["row_states"]
    assert [(r["param"], r["slice"], r["state"]) for r in rows] == [
        (opt.param_names[0], 0, "normuon_v")]
    assert np.allclose(rows[0]["values"].numpy(), v, rtol=1e-3)


def test_state_survives_state_dicts():
    # Two steps, a state dict, a new optimizer, two more steps: equal to
    # four steps bit for bit, through local_state_dict() and the torch-format
    # state_dict() (one process); without the row states it differs.
    torch.manual_seed(1)
    grads = [torch.randn(16, 10) for _ in range(4)]
    straight, _ = run((16, 10), grads, normuon=True)
    half, opt = run((16, 10), grads[:2], normuon=True)
    for saved in (opt.local_state_dict(), opt.state_dict(),
                  [opt.local_state_dict()]):
        w = torch.nn.Parameter(half[-1].clone())
        resumed = Muon([w], lr=LR, weight_decay=0.0, normuon=True)
        resumed.load_state_dict(copy.deepcopy(saved))
        for g in grads[2:]:
            w.grad = g.clone()
            resumed.step()
        assert torch.equal(w.detach(), straight[-1])
    # Without the row states, the saved group (NorMuon) makes it an error.
    bad = opt.local_state_dict()
    bad["muonc"]["row_states"] = []
    w = torch.nn.Parameter(half[-1].clone())
    resumed = Muon([w], lr=LR, weight_decay=0.0, normuon=True)
    with pytest.raises(MuonError, match="no normuon_v state for matrix"):
        resumed.load_state_dict(bad)


def test_normuon_v_in_state_dict():
    # state_dict() carries the per-row state as each parameter's normuon_v
    # (matrices x rows, here one matrix), not under "muonc"; a normuon_v
    # of the wrong shape, or on an AdamW parameter, is refused naming the
    # parameter, and nothing changes.
    torch.manual_seed(3)
    w = torch.nn.Parameter(torch.randn(12, 20))
    b = torch.nn.Parameter(torch.randn(20))
    opt = Muon([{"params": [("w", w)]},
                {"params": [("b", b)], "use_muon": False}], lr=LR,
               normuon=True)
    for _ in range(2):
        w.grad, b.grad = torch.randn_like(w), torch.randn_like(b)
        opt.step()
    saved = opt.state_dict()
    assert set(saved["muonc"]) == {"steps"}
    assert set(saved["state"][0]) == {"momentum_buffer", "normuon_v"}
    assert set(saved["state"][1]) == {"exp_avg", "exp_avg_sq", "step"}
    v = saved["state"][0]["normuon_v"]
    assert v.dtype == torch.float32 and tuple(v.shape) == (1, 12)
    rows = opt.local_state_dict()["muonc"]["row_states"]
    assert torch.equal(v[0], rows[0]["values"]) and v.abs().max() > 0
    bad = copy.deepcopy(saved)
    bad["state"][0]["normuon_v"] = torch.ones(12)
    before = copy.deepcopy(saved)
    with pytest.raises(MuonError, match=r"parameter 'w': state 'normuon_v' "
                       r"has shape \(12,\), expected \(1, 12\)"):
        opt.load_state_dict(bad)
    bad = copy.deepcopy(saved)
    bad["state"][1]["normuon_v"] = torch.ones(1, 20)
    with pytest.raises(MuonError, match="parameter 'b': the state has "
                       "'normuon_v'.*AdamW"):
        opt.load_state_dict(bad)
    after = opt.state_dict()
    assert opt.engine.steps_taken == 2
    for i, entry in before["state"].items():
        for k, t in entry.items():
            assert torch.equal(after["state"][i][k], t), (i, k)
    # A state_dict() without normuon_v (a NorMuon group's) is refused too.
    del bad["state"][1]["normuon_v"]
    del bad["state"][0]["normuon_v"]
    with pytest.raises(MuonError, match="no normuon_v state for matrix"):
        opt.load_state_dict(bad)


def test_beta2_is_a_step_input_and_normuon_is_not():
    torch.manual_seed(2)
    grads = [torch.randn(8, 12) for _ in range(2)]
    a, _ = run((8, 12), grads, normuon=True, normuon_beta2=0.95)
    b, _ = run((8, 12), grads, normuon=True, normuon_beta2=0.5)
    assert not torch.equal(a[-1], b[-1])
    # Changed between steps: the second step is b's.
    w = torch.nn.Parameter(a[0].clone())
    opt = Muon([w], lr=LR, weight_decay=0.0, normuon=True, normuon_beta2=0.5)
    w.grad = grads[0].clone()
    opt.step()
    assert torch.equal(w.detach(), b[1])
    opt.param_groups[0]["normuon_beta2"] = 0.95
    w.grad = grads[1].clone()
    opt.step()
    assert not torch.equal(w.detach(), b[2])
    # normuon decides which matrices keep per-row state: turned off between
    # steps, the plan is compiled again, the momentum carries over and the
    # next step is plain Muon's from it.
    plain = Muon([torch.nn.Parameter(w.detach().clone())], lr=LR,
                 weight_decay=0.0)
    state = copy.deepcopy(opt.state_dict())
    del state["state"][0]["normuon_v"]
    for g in state["param_groups"]:
        g["normuon"] = False
    plain.load_state_dict(state)
    opt.param_groups[0]["normuon"] = False
    w.grad = grads[1].clone()
    plain.param_groups[0]["params"][0].grad = grads[1].clone()
    opt.step()
    plain.step()
    assert torch.equal(w.detach(), plain.param_groups[0]["params"][0].detach())
    assert "normuon_v" not in opt.state_dict()["state"][0]


def test_bad_settings():
    w = torch.nn.Parameter(torch.randn(4, 4))
    with pytest.raises(MuonError, match=r"normuon_beta2 1\.0 is not a number in \[0, 1\)"):
        Muon([w], normuon=True, normuon_beta2=1.0)
    with pytest.raises(MuonError, match="normuon 'yes' is not True or False"):
        Muon([w], normuon="yes")
    with pytest.raises(MuonError, match="normuon_beta2 -0.1"):
        Muon([{"params": [w], "normuon": True, "normuon_beta2": -0.1}])

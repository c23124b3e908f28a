"""Per-head Newton-Schulz (issue 20) through muonc.torch: the group keys
num_heads and head_split_dim (an int for the group, or a dict by parameter
name) against a numpy reference written from the method (each head's block
orthogonalized on its own, as torchtitan and dion do for attention
projections), against torch.optim.Muon run on each block as a parameter of
its own, and the errors for bad values."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from muonc.torch import Muon, MuonError  # noqa: E402

LR = 0.02
MOMENTUM = 0.95
COEFFS = (3.4445, -4.775, 2.0315)


def newton_schulz(g, steps=5, eps=1e-7):
    """Muon's quintic Newton-Schulz iteration in float64 (Keller Jordan's
    zeropower_via_newtonschulz5): normalize by the Frobenius norm, iterate
    on the wide orientation, transpose back."""
    x = g.astype(np.float64)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / max(np.linalg.norm(x), eps)
    a, b, c = COEFFS
    for _ in range(steps):
        s = x @ x.T
        x = a * x + (b * s + c * s @ s) @ x
    return x.T if tall else x


def blocks(shape, heads, dim):
    """The slices of each head's block of a rows x cols matrix."""
    rows, cols = shape
    if dim == 0:
        h = rows // heads
        return [(slice(i * h, (i + 1) * h), slice(None)) for i in range(heads)]
    h = cols // heads
    return [(slice(None), slice(i * h, (i + 1) * h)) for i in range(heads)]


def reference(w0, grads, heads, dim, weight_decay):
    """Muon (torch.optim.Muon's momentum with Nesterov, adjust_lr
    "original" on each block's shape) with per-head Newton-Schulz, in
    float64."""
    w = w0.astype(np.float64).copy()
    buf = np.zeros_like(w)
    out = []
    for g in grads:
        g = g.astype(np.float64)
        buf = buf + (1 - MOMENTUM) * (g - buf)
        update = g + MOMENTUM * (buf - g)
        w *= 1 - LR * weight_decay
        for box in blocks(w.shape, heads, dim):
            o = newton_schulz(update[box])
            rows, cols = o.shape
            w[box] -= LR * max(1.0, rows / cols) ** 0.5 * o
        out.append(w.copy())
    return out


def run(w0, grads, **kw):
    w = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = Muon([("attn.wqkv", w)], lr=LR, momentum=MOMENTUM, **kw)
    out = []
    for g in grads:
        w.grad = torch.from_numpy(g.copy())
        opt.step()
        out.append(w.detach().numpy().astype(np.float64).copy())
    return out, opt


@pytest.mark.parametrize("shape,heads,dim", [((48, 16), 3, 0), ((48, 16), 6, 0),
                                             ((16, 40), 4, 1), ((20, 24), 2, 1)])
def test_matches_a_numpy_reference(shape, heads, dim):
    rng = np.random.default_rng(heads + 10 * dim)
    w0 = rng.standard_normal(shape).astype(np.float32)
    grads = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    got, _ = run(w0, grads, weight_decay=0.1, num_heads=heads,
                 head_split_dim=dim)
    expected = reference(w0, grads, heads, dim, 0.1)
    whole = reference(w0, grads, 1, 0, 0.1)
    for s in range(3):
        moved = np.abs(expected[s] - w0).max()
        assert np.abs(got[s] - expected[s]).max() < 1e-4 * moved, s
        # Not Muon on the whole matrix: the heads were orthogonalized apart.
        assert np.abs(whole[s] - expected[s]).max() > 1e-2 * moved, s


def test_dict_by_name_and_several_groups():
    # A dict by parameter name picks the heads of one parameter; another
    # parameter of the group stays whole; a second group has its own value.
    rng = np.random.default_rng(7)
    shapes = {"wq": (32, 16), "wo": (16, 32), "mlp": (24, 16)}
    values = {n: rng.standard_normal(s).astype(np.float32)
              for n, s in shapes.items()}
    params = {n: torch.nn.Parameter(torch.from_numpy(v.copy()))
              for n, v in values.items()}
    opt = Muon([{"params": [("wq", params["wq"]), ("mlp", params["mlp"])],
                 "num_heads": {"wq": 4}},
                {"params": [("wo", params["wo"])], "num_heads": 2,
                 "head_split_dim": 1}],
               lr=LR, momentum=MOMENTUM, weight_decay=0.0)
    grads = {n: rng.standard_normal(s).astype(np.float32)
             for n, s in shapes.items()}
    for n, p in params.items():
        p.grad = torch.from_numpy(grads[n].copy())
    opt.step()
    for n, heads, dim in (("wq", 4, 0), ("mlp", 1, 0), ("wo", 2, 1)):
        expected = reference(values[n], [grads[n]], heads, dim, 0.0)[0]
        got = params[n].detach().numpy().astype(np.float64)
        moved = np.abs(expected - values[n]).max()
        assert np.abs(got - expected).max() < 1e-4 * moved, n
    # The heads are matrices of their own for owners too.
    owned = sorted(m for ms in opt.assignments.values() for m in ms)
    assert owned == ["mlp", "wo[0]", "wo[1]", "wq[0]", "wq[1]", "wq[2]",
                     "wq[3]"]


def test_equals_torch_muon_on_each_block(fp32_torch_muon):
    # torch.optim.Muon on each head's block as a parameter of its own, its
    # Newton-Schulz in f32 as ours (conftest): the same update.
    rng = np.random.default_rng(3)
    shape, heads = (40, 16), 5
    w0 = rng.standard_normal(shape).astype(np.float32)
    grads = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    got, _ = run(w0, grads, weight_decay=0.1, num_heads=heads)
    parts = [torch.nn.Parameter(torch.from_numpy(w0[box].copy()))
             for box in blocks(shape, heads, 0)]
    theirs = torch.optim.Muon(parts, lr=LR, momentum=MOMENTUM,
                              weight_decay=0.1, adjust_lr_fn="original")
    for s, g in enumerate(grads):
        for p, box in zip(parts, blocks(shape, heads, 0)):
            p.grad = torch.from_numpy(g[box].copy())
        theirs.step()
        full = np.concatenate([p.detach().numpy() for p in parts], axis=0)
        moved = np.abs(full - w0).max()
        assert np.abs(got[s] - full).max() < 1e-4 * moved, s


def test_normuon_per_head():
    # NorMuon on each head's block: dion's normalization of each block's
    # Newton-Schulz output, with one EMA value per row of each block (the
    # state dict's row states by head).
    rng = np.random.default_rng(5)
    shape, heads, beta2 = (24, 12), 3, 0.9
    w0 = rng.standard_normal(shape).astype(np.float32)
    grads = [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]
    got, opt = run(w0, grads, weight_decay=0.0, num_heads=heads,
                   normuon=True, normuon_beta2=beta2)
    w = w0.astype(np.float64).copy()
    buf = np.zeros_like(w)
    v = [np.zeros(shape[0] // heads) for _ in range(heads)]
    for s, g in enumerate(grads):
        buf = buf + (1 - MOMENTUM) * (g - buf)
        update = g + MOMENTUM * (buf - g)
        for h, box in enumerate(blocks(shape, heads, 0)):
            o = newton_schulz(update[box])
            v[h] = beta2 * v[h] + (1 - beta2) * np.mean(o * o, axis=-1)
            n = o / (np.sqrt(v[h])[:, None] + 1e-8)
            n *= np.linalg.norm(o) / max(np.linalg.norm(n), 1e-8)
            rows, cols = o.shape
            w[box] -= LR * max(1.0, rows / cols) ** 0.5 * n
        moved = np.abs(w - w0).max()
        assert np.abs(got[s] - w).max() < 1e-4 * moved, s
    rows = opt.local_state_dict()["muonc"]["row_states"]
    assert [(r["param"], r["slice"]) for r in rows] == [
        ("attn.wqkv", h) for h in range(heads)]
    for r in rows:
        assert np.allclose(r["values"].numpy(), v[r["slice"]], rtol=1e-3)
    # state_dict(): the heads' rows as one (heads, rows per head) tensor.
    normuon_v = opt.state_dict()["state"][0]["normuon_v"]
    assert tuple(normuon_v.shape) == (heads, shape[0] // heads)
    for r in rows:
        assert torch.equal(normuon_v[r["slice"]], r["values"])


def test_plan_keys_changed_between_steps_recompile_the_plan():
    # num_heads decides the matrices: a change between steps compiles the
    # plan again, keeping the momentum; the next step cuts 4 heads. Against
    # the reference run with 2 heads, then 4, from the same momentum.
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((16, 8)).astype(np.float32)
    grads = [rng.standard_normal((16, 8)).astype(np.float32) for _ in range(2)]
    w = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = Muon([("attn.wqkv", w)], lr=LR, momentum=MOMENTUM, num_heads=2)
    w.grad = torch.from_numpy(grads[0].copy())
    opt.step()
    engine = opt.engine
    opt.param_groups[0]["num_heads"] = 4
    w.grad = torch.from_numpy(grads[1].copy())
    opt.step()
    assert opt.engine is not engine  # compiled again
    got = w.detach().numpy().astype(np.float64)
    first = reference(w0, grads[:1], 2, 0, 0.1)[0]
    buf = (1 - MOMENTUM) * grads[0].astype(np.float64)
    g = grads[1].astype(np.float64)
    buf = buf + (1 - MOMENTUM) * (g - buf)
    update = g + MOMENTUM * (buf - g)
    expected = first * (1 - LR * 0.1)
    for box in blocks(expected.shape, 4, 0):
        o = newton_schulz(update[box])
        expected[box] -= LR * o
    moved = np.abs(expected - first).max()
    assert np.abs(got - expected).max() < 1e-4 * moved


@pytest.mark.parametrize("kw,message", [
    ({"num_heads": 3}, r"parameter 'attn.wqkv' \(num_heads\): num_heads 3 does "
                       r"not divide the rows \(16\) of the 16 x 8 matrix"),
    ({"num_heads": 0}, "num_heads 0 is not an integer >= 1"),
    ({"num_heads": 2.0}, "num_heads 2.0 is not an integer >= 1"),
    ({"num_heads": True}, "num_heads True is not an integer >= 1"),
    ({"num_heads": 2, "head_split_dim": 2}, "head_split_dim 2 is not 0"),
    ({"num_heads": {"attn.wk": 2}}, "num_heads names 'attn.wk', which is not "
                                    "a parameter of the optimizer"),
])
def test_errors(kw, message):
    w = torch.nn.Parameter(torch.zeros(16, 8))
    with pytest.raises(MuonError, match=message):
        Muon([("attn.wqkv", w)], **kw)


def test_numpy_integers_are_integers():
    w = torch.nn.Parameter(torch.zeros(16, 8))
    opt = Muon([("attn.wqkv", w)], num_heads=np.int64(4))
    assert sorted(m for ms in opt.assignments.values() for m in ms) == [
        f"attn.wqkv[{h}]" for h in range(4)]


def test_adamw_group_refuses_heads():
    b = torch.nn.Parameter(torch.zeros(8))
    with pytest.raises(MuonError, match="num_heads is a Muon setting"):
        Muon([{"params": [b], "use_muon": False, "num_heads": 2}])

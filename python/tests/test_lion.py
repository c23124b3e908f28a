"""Lion (Chen et al. 2023, arXiv 2302.06675) as a muonc.torch group's
algorithm: {"algorithm": "lion"} beside Muon, against a reference written
from the paper's Algorithm 2, its defaults, and its state through a state
dict."""
import pytest

torch = pytest.importorskip("torch")
from muonc.torch import Muon  # noqa: E402


def paper_lion(p, grad, m, lr, beta1, beta2, weight_decay):
    """One step of the paper's Algorithm 2 (decoupled weight decay), in
    float32 as the runtime computes it: the interpolation's sign is the
    update; the momentum follows with beta2."""
    c = m * beta1 + grad * (1 - beta1)
    p.mul_(1 - lr * weight_decay).add_(torch.sign(c), alpha=-lr)
    m.mul_(beta2).add_(grad * (1 - beta2))


def params(seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.nn.Parameter(torch.randn(8, 6, generator=g))
    norm = torch.nn.Parameter(torch.randn(6, generator=g))
    emb = torch.nn.Parameter(torch.randn(10, 6, generator=g))
    return w, norm, emb


def grads_of(step, tensors):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(t.shape, generator=g) for t in tensors]


def lion_optimizer(w, norm, emb, **lion):
    return Muon([{"params": [w]},
                 {"params": [norm, emb], "algorithm": "lion", **lion}],
                lr=0.02)


def test_defaults_are_the_papers():
    w, norm, emb = params(0)
    group = lion_optimizer(w, norm, emb).param_groups[1]
    assert group["algorithm"] == "lion"
    assert group["lr"] == 1e-4
    assert tuple(group["betas"]) == (0.9, 0.99)
    assert group["weight_decay"] == 0.0
    assert not group["use_muon"]


@pytest.mark.parametrize("lion", [{}, {"lr": 3e-3, "betas": (0.8, 0.95),
                                       "weight_decay": 0.5}])
def test_steps_follow_the_paper(lion):
    w, norm, emb = params(1)
    opt = lion_optimizer(w, norm, emb, **lion)
    settings = {"lr": 1e-4, "betas": (0.9, 0.99), "weight_decay": 0.0}
    settings.update(lion)
    ref = [norm.detach().clone(), emb.detach().clone()]
    moments = [torch.zeros_like(t) for t in ref]
    for step in range(5):
        gw, gn, ge = grads_of(step, (w, norm, emb))
        w.grad, norm.grad, emb.grad = gw, gn, ge
        opt.step()
        for p, g, m in zip(ref, (gn, ge), moments):
            paper_lion(p, g, m, settings["lr"], *settings["betas"],
                       settings["weight_decay"])
        for got, want in zip((norm, emb), ref):
            torch.testing.assert_close(got.detach(), want, rtol=0, atol=1e-6)
    # The momentum is torch's state "exp_avg", the paper's m.
    state = opt.state_dict()["state"]
    torch.testing.assert_close(state[2]["exp_avg"], moments[1], rtol=0,
                               atol=1e-6)
    assert "exp_avg_sq" not in state[2] and "step" not in state[2]


def test_state_dict_round_trip_continues_identically():
    a, b = params(2), params(2)
    opt_a = lion_optimizer(*a, lr=1e-3, weight_decay=0.1)
    opt_b = lion_optimizer(*b, lr=1e-3, weight_decay=0.1)

    def run(tensors, opt, steps):
        for step in steps:
            for t, g in zip(tensors, grads_of(step, tensors)):
                t.grad = g
            opt.step()

    run(a, opt_a, range(6))
    run(b, opt_b, range(3))
    saved = opt_b.state_dict()
    opt_c = lion_optimizer(*b, lr=1e-3, weight_decay=0.1)
    opt_c.load_state_dict(saved)
    run(b, opt_c, range(3, 6))
    assert all(torch.equal(p, q) for p, q in zip(a, b))

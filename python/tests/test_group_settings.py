"""A group setting that only the runtime's settings table describes
(extra_scale_factor, muon/Plan/GroupSettings.h) reaches muonc.torch as a
keyword and a param_groups key with no code of its own: the constructor
takes it with the table's default, a step reads it from the group (so a
schedule may change it), and a bad value or an unknown keyword is refused."""
import pytest

torch = pytest.importorskip("torch")
from muonc.torch import Muon, MuonError  # noqa: E402


def steps(n=3, weight_decay=0.0, change=None, **kw):
    """The parameters after n steps of ours on fixed gradients."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(16, 24))
    grads = [torch.randn(16, 24) for _ in range(n)]
    opt = Muon([w], weight_decay=weight_decay, **kw)
    for i, g in enumerate(grads):
        if change:
            change(opt, i)
        w.grad = g.clone()
        opt.step()
    return w.detach().clone(), opt


def test_the_keyword_and_group_key_come_from_the_table():
    _, opt = steps(n=1, lr=0.02)
    assert opt.param_groups[0]["extra_scale_factor"] == 1.0
    _, opt = steps(n=1, lr=0.02, extra_scale_factor=0.5)
    assert opt.param_groups[0]["extra_scale_factor"] == 0.5
    assert opt.engine.groups()[0]["extra_scale_factor"] == 0.5


def test_it_scales_the_update_and_not_the_decay():
    # Without weight decay, lr * 2 and extra_scale_factor 2 give the same
    # update (doubling is exact); with decay they differ, since the decay
    # takes lr alone (Megatron-LM's --muon-extra-scale-factor).
    doubled, _ = steps(lr=0.04)
    scaled, _ = steps(lr=0.02, extra_scale_factor=2.0)
    assert torch.equal(doubled, scaled)
    plain, _ = steps(lr=0.02)
    assert not torch.equal(plain, scaled)
    doubled, _ = steps(lr=0.04, weight_decay=0.1)
    scaled, _ = steps(lr=0.02, weight_decay=0.1, extra_scale_factor=2.0)
    assert not torch.equal(doubled, scaled)


def test_a_step_reads_it_from_the_group():
    # Changed before the second step, as a scheduler would: the first step
    # at 1, the rest at 2, equal to a run that does the same with lr.
    def factor(opt, i):
        opt.param_groups[0]["extra_scale_factor"] = 1.0 if i == 0 else 2.0

    def lr(opt, i):
        opt.param_groups[0]["lr"] = 0.02 if i == 0 else 0.04

    by_factor, _ = steps(lr=0.02, change=factor)
    by_lr, _ = steps(lr=0.02, change=lr)
    assert torch.equal(by_factor, by_lr)


def test_bad_values_and_unknown_keywords_are_refused():
    with pytest.raises(MuonError, match="extra_scale_factor"):
        steps(n=1, extra_scale_factor=-1.0)

    def negative(opt, i):
        opt.param_groups[0]["extra_scale_factor"] = -1.0

    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(16, 24))
    opt = Muon([w])
    w.grad = torch.randn(16, 24)
    opt.step()
    before = w.detach().clone()
    negative(opt, 0)
    with pytest.raises(MuonError, match="extra_scale_factor"):
        opt.step()
    assert torch.equal(w.detach(), before)
    with pytest.raises(TypeError, match="extra_scale_facto"):
        Muon([w], extra_scale_facto=2.0)

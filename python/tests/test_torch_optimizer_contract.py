"""What torch's generic optimizer tests (test/test_optim.py, TestOptimRenewed,
with the OptimizerInfo of torch.optim.Muon) check of an optimizer, checked
of muonc.torch.Muon: errors, the direction of the loss with every one of
torch's Muon inputs (contiguous or not, tensor lr, schedulers), parameter
groups, None and zero gradients, state dicts (deterministic, named both
ways, older ones, weights_only files, hooks in torch's order), step hooks,
copies and a non-empty state. Written here from what those tests check; one
process, CPU."""
import copy
import functools
import io
import pickle
import warnings

import pytest

torch = pytest.importorskip("torch")
import muonc  # noqa: E402
from muonc.torch import (FailedPreconditionError, InvalidArgumentError,  # noqa: E402
                         Muon, MuonError)
from torch.nn import Parameter  # noqa: E402
from torch.optim.optimizer import (register_optimizer_step_post_hook,  # noqa: E402
                                   register_optimizer_step_pre_hook)

from conftest import fp32_torch_muon  # noqa: E402,F401


def muon_inputs():
    """torch's optim_inputs_func_muon, as keyword sets (fresh each call: a
    tensor lr must not carry between runs)."""
    return [{}, {"lr": 0.01}, {"lr": torch.tensor(0.001)},
            {"weight_decay": 0.2}, {"momentum": 0.8}, {"ns_steps": 6},
            {"ns_coefficients": (3.4, -4.7, 2.0)},
            {"adjust_lr_fn": "match_rms_adamw"},
            {"adjust_lr_fn": "spectral_unclamped"}]


def linear_problem(contiguous=True, seed=0):
    """A 10 x 5 weight (strided when not contiguous) and an input."""
    torch.manual_seed(seed)
    if contiguous:
        weight = Parameter(torch.randn(10, 5))
    else:
        weight = Parameter(torch.randn(10, 5, 2)[..., 0])
    return weight, torch.randn(5)


# --- errors ------------------------------------------------------------------

def test_errors_are_torchs():
    p = Parameter(torch.randn(1, 1))
    q = Parameter(torch.randn(1, 1))
    with pytest.raises(TypeError, match="params argument given to the "
                       "optimizer should be an iterable"):
        Muon(p)
    with pytest.warns(UserWarning, match="a parameter group with duplicate "
                      "parameters"):
        Muon([p, p])
    with pytest.raises(ValueError, match="some parameters appear in more than "
                       "one parameter group"):
        Muon([{"params": p}, {"params": p}])
    with pytest.raises(ValueError, match="Tensor lr must be 1-element"):
        Muon([p], lr=torch.tensor([0.001, 0.001]))
    with pytest.raises(ValueError, match="all optimizer params should be "
                       "with/without names. Some param names are missing"):
        Muon([("weight", p), q])
    with pytest.raises(ValueError, match="all optimizer param groups should be "
                       "with/without names. cannot add param group with names"):
        Muon([{"params": [p], "lr": 1e-2}, {"params": [("weight", q)]}])
    with pytest.raises(ValueError, match="Muon only supports 2D parameters"):
        Muon([torch.rand(2, 3, 4)])
    with pytest.raises(ValueError, match="Adjust learning rate function "
                       "arbitrary is not supported"):
        Muon([torch.rand(2, 3)], adjust_lr_fn="arbitrary")
    with pytest.raises(ValueError, match="Learning rate should be >= 0"):
        Muon([p], lr=-1e-3)
    # muonc's own: a MuonError too, and the builtin class torch raises.
    with pytest.raises(InvalidArgumentError) as e:
        Muon([torch.rand(2, 3, 4)])
    assert isinstance(e.value, (MuonError, ValueError))
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        Muon([p], foo=1)


def test_complex_parameters_fail_at_the_step_as_in_torch():
    c = torch.rand(2, 3, dtype=torch.complex64)
    c.grad = torch.rand_like(c)
    opt = Muon([c])  # as torch: accepted at construction
    with pytest.raises(RuntimeError, match="Muon does not support complex "
                       "parameters") as e:
        opt.step()
    assert isinstance(e.value, FailedPreconditionError)
    c.grad = None
    opt.step()  # no gradient: nothing to refuse


def test_sparse_gradients_are_refused():
    w = Parameter(torch.randn(4, 4))
    opt = Muon([w])
    w.grad = torch.randn(4, 4).to_sparse()
    with pytest.raises(RuntimeError, match="does not support sparse "
                       "gradients"):
        opt.step()


# --- the loss goes the right way ----------------------------------------------

@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("with_lrsched", [True, False])
def test_forloop_goes_right_direction(contiguous, with_lrsched):
    for kwargs in muon_inputs():
        weight, x = linear_problem(contiguous)
        opt = Muon([weight], **kwargs)
        sched = ([torch.optim.lr_scheduler.StepLR(opt, gamma=0.9, step_size=10),
                  torch.optim.lr_scheduler.ConstantLR(opt, factor=0.4,
                                                      total_iters=4)]
                 if with_lrsched else [])

        def closure():
            opt.zero_grad()
            loss = weight.mv(x).pow(2).sum()
            loss.backward()
            return loss

        initial = closure().item()
        for _ in range(20):
            loss = closure()
            opt.step()
            for s in sched:
                s.step()
        assert closure().item() < initial, kwargs
        assert weight.is_contiguous() == contiguous


def test_param_groups_lr():
    # A group with its own lr moves; one with the outer lr 1e-28 does not.
    for kwargs in muon_inputs():
        kwargs.setdefault("lr", 1e-3)
        weight, x = linear_problem()
        irrelevant = Parameter(torch.randn(2, 2))
        before = irrelevant.detach().clone()
        opt = Muon([dict(params=[weight], **kwargs),
                    dict(params=[irrelevant])], lr=1e-28)
        initial = weight.mv(x).pow(2).sum().item()
        for _ in range(20):
            opt.zero_grad()
            weight.mv(x).pow(2).sum().backward()
            irrelevant.grad = torch.rand_like(irrelevant)
            opt.step()
        assert weight.mv(x).pow(2).sum().item() < initial, kwargs
        assert torch.equal(before, irrelevant)


def test_param_groups_weight_decay():
    for kwargs in muon_inputs():
        w1, x = linear_problem()
        w2 = Parameter(torch.randn(10, 1))
        opt = Muon([dict(params=[w1], **kwargs),
                    dict(params=[w2], **dict(kwargs, weight_decay=0.0))])
        initial = (w1.mv(x) + w2[:, 0]).pow(2).sum().item()
        for _ in range(20):
            opt.zero_grad()
            (w1.mv(x) + w2[:, 0]).pow(2).sum().backward()
            opt.step()
        assert (w1.mv(x) + w2[:, 0]).pow(2).sum().item() < initial, kwargs


def test_tensor_lr_steps_as_the_float_lr():
    # A float32 tensor holds 1e-3 rounded to float32, so its steps equal the
    # float's to rounding (torch's test compares with assertEqual's float
    # tolerances); a float64 tensor holds the float itself: the same bits.
    for kwargs in muon_inputs():
        kwargs.pop("lr", None)
        weight, x = linear_problem()
        weight_c = Parameter(weight.detach().clone())
        weight_d = Parameter(weight.detach().clone())
        opt = Muon([weight], lr=1e-3, **kwargs)
        opt_t = Muon([weight_c], lr=torch.tensor(1e-3), **kwargs)
        opt_d = Muon([weight_d], lr=torch.tensor(1e-3, dtype=torch.float64),
                     **kwargs)
        for _ in range(5):
            for o, w in ((opt, weight), (opt_t, weight_c), (opt_d, weight_d)):
                o.zero_grad()
                w.mv(x).pow(2).sum().backward()
                o.step()
            torch.testing.assert_close(weight, weight_c, msg=str(kwargs))
            assert torch.equal(weight, weight_d), kwargs


# --- no gradient, zero gradient ----------------------------------------------

def test_step_is_noop_when_params_have_no_grad():
    params = [torch.randn(2, 3, requires_grad=False) for _ in range(2)]
    old = [p.clone() for p in params]
    for kwargs in muon_inputs():
        opt = Muon(params, **kwargs)
        opt.step(lambda: torch.tensor([1.0]))
        assert all(torch.equal(a, b) for a, b in zip(old, params))


def test_step_is_noop_for_zero_grads():
    param = torch.randn(5, 1, requires_grad=True)
    old = param.detach().clone()
    opt = Muon([param], weight_decay=0.0)
    param.grad = torch.zeros_like(param)
    opt.step(lambda: torch.tensor([1.0]))
    assert torch.equal(old, param)


def test_optimizer_can_be_printed():
    params = [Parameter(torch.randn(2, 3)) for _ in range(2)]
    for kwargs in muon_inputs():
        text = repr(Muon(params, **kwargs))
        assert text.startswith("Muon (") and "ns_steps" in text


def test_non_empty_state():
    model = torch.nn.Linear(5, 5, bias=False)
    for kwargs in muon_inputs():
        opt = Muon(model.parameters(), **kwargs)
        opt.zero_grad()
        model(torch.rand(2, 5)).sum().backward()
        opt.step()
        assert opt.state and all(len(s) > 0 for s in opt.state.values())


# --- state dicts -------------------------------------------------------------

def named(params, is_named):
    return [(f"name{i}", p) for i, p in enumerate(params)] if is_named \
        else params


def without_param_names(state_dict):
    out = copy.deepcopy(state_dict)
    for g in out["param_groups"]:
        g.pop("param_names", None)
    return out


@pytest.mark.parametrize("named0", [True, False])
@pytest.mark.parametrize("named1", [True, False])
def test_state_dict_deterministic(named0, named1):
    for kwargs in muon_inputs():
        weight, x = linear_problem(seed=1)
        bias = Parameter(torch.randn(10, 1))

        def fwd_bwd(o, w, b):
            o.zero_grad()
            loss = (w.mv(x) + b[:, 0]).pow(2).sum()
            loss.backward()
            return loss

        opt = Muon(named([weight, bias], named0), **kwargs)
        for _ in range(10):
            fwd_bwd(opt, weight, bias)
            opt.step()
        with torch.no_grad():
            weight_c, bias_c = Parameter(weight.clone()), Parameter(bias.clone())
        opt_c = Muon(named([weight_c, bias_c], named1), **kwargs)
        opt_c.load_state_dict(copy.deepcopy(opt.state_dict()))
        for _ in range(10):
            fwd_bwd(opt, weight, bias)
            fwd_bwd(opt_c, weight_c, bias_c)
            opt.step()
            opt_c.step()
            assert torch.equal(weight, weight_c) and torch.equal(bias, bias_c)
        assert_state_dicts_equal(without_param_names(opt.state_dict()),
                                 without_param_names(opt_c.state_dict()))
        # A repeated group packs as its first appearance.
        opt_c.param_groups.extend(opt_c.param_groups)
        assert without_param_names(opt.state_dict())["param_groups"][-1] == \
            without_param_names(opt_c.state_dict())["param_groups"][-1]


def assert_state_dicts_equal(a, b):
    assert a["param_groups"] == b["param_groups"]
    assert a["state"].keys() == b["state"].keys()
    for k in a["state"]:
        assert a["state"][k].keys() == b["state"][k].keys()
        for key, v in a["state"][k].items():
            assert torch.equal(v, b["state"][k][key]), (k, key)


def test_state_dict_is_not_changed_by_loading_it():
    weight, x = linear_problem()
    opt = Muon([weight], lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        weight.mv(x).pow(2).sum().backward()
        opt.step()
    saved = opt.state_dict()
    reference = copy.deepcopy(saved)
    other = Muon([Parameter(weight.detach().clone())], lr=0.01)
    other.load_state_dict(saved)
    assert_state_dicts_equal(saved, reference)
    # The loaded optimizer's state is its own: stepping it leaves the
    # dict alone.
    other.param_groups[0]["params"][0].grad = torch.randn(10, 5)
    other.step()
    assert_state_dicts_equal(saved, reference)


def test_can_load_older_state_dict():
    torch.manual_seed(1)
    model = torch.nn.Linear(10, 4, bias=False)
    x = torch.rand(10)
    for kwargs in muon_inputs():
        opt = Muon(model.parameters(), **kwargs)
        for _ in range(3):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        old = copy.deepcopy(opt.state_dict())
        for g in old["param_groups"]:  # what an older muonc wrote
            for key in ("muonc_steps", "stacked_matrices", "extra_scale_factor"):
                g.pop(key, None)
        opt.load_state_dict(old)
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()


@pytest.mark.parametrize("named0", [True, False])
@pytest.mark.parametrize("named1", [True, False])
def test_can_load_from_to_named_state_dict(named0, named1):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(10, 4, bias=False),
                                torch.nn.Linear(4, 3, bias=False))
    x = torch.rand(10)
    for kwargs in muon_inputs():
        opt = Muon(model.named_parameters() if named0 else model.parameters(),
                   **kwargs)
        for _ in range(3):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        old = copy.deepcopy(opt.state_dict())
        opt2 = Muon(model.named_parameters() if named1 else model.parameters(),
                    **kwargs)
        opt2.load_state_dict(old)
        opt2.zero_grad()
        model(x).sum().backward()
        opt2.step()
        if named0 or named1:
            assert opt2.state_dict()["param_groups"][0]["param_names"] == \
                ["0.weight", "1.weight"]


@pytest.mark.parametrize("is_named", [True, False])
def test_save_load_equality_with_weights_only(is_named):
    for kwargs in muon_inputs():
        weight, x = linear_problem()
        opt = Muon(named([weight], is_named), **kwargs)
        for _ in range(3):
            opt.zero_grad()
            weight.mv(x).pow(2).sum().backward()
            opt.step()
        sd = opt.state_dict()
        for weights_only in (False, True):
            f = io.BytesIO()
            torch.save(sd, f)
            f.seek(0)
            loaded = torch.load(f, weights_only=weights_only)
            assert_state_dicts_equal(loaded, sd)


def test_load_nontensor_step():
    # AdamW's step count saved as a number (older torch) loads too.
    params = [Parameter(torch.randn(2, 3)), Parameter(torch.randn(3))]
    for p in params:
        p.grad = torch.rand_like(p)
    opt = Muon([{"params": params[:1]},
                {"params": params[1:], "use_muon": False}])
    for _ in range(3):
        opt.step()
    sd = copy.deepcopy(opt.state_dict())
    assert sd["state"][1]["step"].item() == 3
    for entry in sd["state"].values():
        if "step" in entry:
            entry["step"] = entry["step"].item()
    opt.load_state_dict(sd)
    assert opt.state[params[1]]["step"].item() == 3
    opt.step()
    assert opt.state[params[1]]["step"].item() == 4


# --- hooks -------------------------------------------------------------------

def state_dict_pre_hook(optimizer):
    optimizer.state["test"] = 1


def state_dict_post_hook(optimizer, state_dict):
    if "test" in state_dict["state"]:
        state_dict["state"].pop("test")
        state_dict["ran_state_dict_pre_hook"] = True
    else:
        state_dict["ran_state_dict_pre_hook"] = False
    return state_dict


def load_pre_hook1(optimizer, state_dict):
    state_dict["param_groups"][0]["lr"] = 0.002


def load_pre_hook2(optimizer, state_dict):
    mine = copy.deepcopy(state_dict)
    mine["param_groups"][0]["lr"] = 0.003
    return mine


def load_post_hook(optimizer):
    optimizer.state["ran_load_state_dict_pre_hook2"] = \
        optimizer.param_groups[0]["lr"] == 0.003
    optimizer.state["ran_load_state_dict_post_hook"] = True


def fresh():
    return Muon([torch.rand(2, 3, requires_grad=True)])


def test_state_dict_hooks_run_in_torchs_order():
    opt = fresh()
    opt.register_state_dict_pre_hook(state_dict_pre_hook)
    assert opt.state_dict()["state"]["test"] == 1
    opt = fresh()
    opt.register_state_dict_post_hook(state_dict_post_hook)
    assert opt.state_dict()["ran_state_dict_pre_hook"] is False
    opt = fresh()
    opt.register_state_dict_pre_hook(state_dict_pre_hook)
    opt.register_state_dict_post_hook(state_dict_post_hook)
    sd = opt.state_dict()
    assert "test" not in sd["state"] and sd["ran_state_dict_pre_hook"]


def test_load_state_dict_hooks_run_in_torchs_order():
    opt = fresh()
    sd = opt.state_dict()
    opt.register_load_state_dict_pre_hook(load_pre_hook1)
    opt.load_state_dict(sd)
    assert opt.param_groups[0]["lr"] == 0.002
    # Prepended, hook2 runs first and hook1 overrides its lr.
    opt.register_load_state_dict_pre_hook(load_pre_hook2, prepend=True)
    opt.load_state_dict(sd)
    assert opt.param_groups[0]["lr"] == 0.002
    opt = fresh()
    opt.register_load_state_dict_post_hook(load_post_hook)
    opt.load_state_dict(opt.state_dict())
    assert not opt.state["ran_load_state_dict_pre_hook2"]
    assert opt.state["ran_load_state_dict_post_hook"]
    opt = fresh()
    opt.register_load_state_dict_pre_hook(load_pre_hook2)
    opt.register_load_state_dict_post_hook(load_post_hook)
    opt.load_state_dict(opt.state_dict())
    assert opt.state["ran_load_state_dict_pre_hook2"]
    assert opt.state["ran_load_state_dict_post_hook"]
    # The hooks' lr is the one the next step takes.
    assert opt.param_groups[0]["lr"] == 0.003


def test_step_hooks_run_in_torchs_order():
    data = []
    w = Parameter(torch.randn(2, 2))
    opt = Muon([w])
    sgd = torch.optim.SGD([Parameter(torch.randn(2))])
    handles = [register_optimizer_step_pre_hook(lambda *a: data.append(0)),
               register_optimizer_step_post_hook(lambda *a: data.append(5)),
               opt.register_step_pre_hook(lambda *a: data.append(1)),
               opt.register_step_post_hook(lambda *a: data.append(2)),
               sgd.register_step_pre_hook(lambda *a: data.append(1)),
               sgd.register_step_post_hook(lambda *a: data.append(2))]
    w.grad = torch.randn(2, 2)
    opt.step()
    assert data == [0, 1, 2, 5]
    sgd.step()
    opt.step()
    assert data == [0, 1, 2, 5] * 3
    for h in handles:
        h.remove()
    opt.step()
    sgd.step()
    assert data == [0, 1, 2, 5] * 3


# --- copies ------------------------------------------------------------------

def trained(steps=3, seed=2):
    torch.manual_seed(seed)
    w = Parameter(torch.randn(8, 6))
    b = Parameter(torch.randn(6))
    opt = Muon([{"params": [w]}, {"params": [b], "use_muon": False}], lr=0.05)
    for s in range(steps):
        g = torch.Generator().manual_seed(s)
        w.grad = torch.randn(8, 6, generator=g)
        b.grad = torch.randn(6, generator=g)
        opt.step()
    return opt


def continue_steps(opt, start, stop):
    params = [p for g in opt.param_groups for p in g["params"]]
    for s in range(start, stop):
        g = torch.Generator().manual_seed(s)
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    return [p.detach().clone() for p in params]


def reload(opt, how):
    if how == "deepcopy":
        return copy.deepcopy(opt)
    if how == "pickle":
        return pickle.loads(pickle.dumps(opt))
    f = io.BytesIO()
    torch.save(opt, f)
    f.seek(0)
    return torch.load(f, weights_only=False)


@pytest.mark.parametrize("how", ["deepcopy", "pickle", "torch.save"])
def test_a_copy_continues_identically_and_independently(how):
    opt = trained()
    copied = reload(opt, how)
    assert copied.engine is not opt.engine
    assert copied.engine.steps_taken == opt.engine.steps_taken == 3
    params = [p for g in opt.param_groups for p in g["params"]]
    theirs = [p for g in copied.param_groups for p in g["params"]]
    assert all(p is not q and torch.equal(p, q) for p, q in zip(params, theirs))
    for p, q in zip(params, theirs):
        for k, v in opt.state[p].items():
            assert torch.equal(v, copied.state[q][k]), k
    a = continue_steps(opt, 3, 6)
    b = continue_steps(copied, 3, 6)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    # Independent: stepping one more leaves the other where it was.
    continue_steps(opt, 6, 7)
    assert all(torch.equal(x, y) for x, y in
               zip(b, [p.detach() for g in copied.param_groups
                       for p in g["params"]]))


def test_deepcopy_copies_all_public_attrs():
    opt = trained()
    public = {k for k in opt.__dict__ if not k.startswith("_")}
    assert public == {k for k in copy.deepcopy(opt).__dict__
                      if not k.startswith("_")}


# --- opt.state ---------------------------------------------------------------

def test_state_is_the_engine_state_in_place(fp32_torch_muon):
    # opt.state holds torch's keys, with the values torch.optim.Muon and
    # AdamW hold, as views of the runtime's state: the same memory from
    # step to step, and a write into it is what the next step uses (as a
    # write into torch's own buffer is).
    torch.manual_seed(4)
    w = Parameter(torch.randn(8, 6))
    b = Parameter(torch.randn(6))
    w_t, b_t = Parameter(w.detach().clone()), Parameter(b.detach().clone())
    opt = Muon([{"params": [w]}, {"params": [b], "use_muon": False,
                                  "lr": 3e-3}], lr=0.02)
    ref = [torch.optim.Muon([w_t], lr=0.02),
           torch.optim.AdamW([b_t], lr=3e-3)]
    # As in torch, the state is there from the first step on.
    assert not opt.state
    ptr = None
    for s in range(3):
        g = torch.Generator().manual_seed(s)
        w.grad = torch.randn(8, 6, generator=g)
        b.grad = torch.randn(6, generator=g)
        w_t.grad, b_t.grad = w.grad.clone(), b.grad.clone()
        opt.step()
        for o in ref:
            o.step()
        ptr = ptr or opt.state[w]["momentum_buffer"].data_ptr()
    assert opt.state[w]["momentum_buffer"].data_ptr() == ptr
    torch.testing.assert_close(opt.state[w]["momentum_buffer"],
                               ref[0].state[w_t]["momentum_buffer"])
    for k in ("exp_avg", "exp_avg_sq"):
        torch.testing.assert_close(opt.state[b][k], ref[1].state[b_t][k])
    assert opt.state[b]["step"].item() == ref[1].state[b_t]["step"].item() == 3
    # A write into the state is the next step's state.
    opt.state[w]["momentum_buffer"].zero_()
    ref[0].state[w_t]["momentum_buffer"].zero_()
    w.grad = torch.randn(8, 6)
    w_t.grad = w.grad.clone()
    b.grad = b_t.grad = None
    opt.step()
    ref[0].step()
    torch.testing.assert_close(w, w_t, rtol=1e-6, atol=1e-6)


def test_strided_parameters_and_gradients_step_as_contiguous_ones():
    torch.manual_seed(5)
    base = torch.randn(10, 5, 2)
    strided = Parameter(base.clone()[..., 0])
    plain = Parameter(base[..., 0].contiguous())
    assert not strided.is_contiguous()
    opts = [Muon([strided], lr=0.1), Muon([plain], lr=0.1)]
    for s in range(3):
        g = torch.randn(10, 5, 2)
        strided.grad = g[..., 1]  # strided too
        plain.grad = g[..., 1].contiguous()
        for o in opts:
            o.step()
    assert torch.equal(strided.detach(), plain.detach())
    assert not strided.is_contiguous()

"""Experts under muonc.torch.Muon on 4 processes (gloo, CPU) against one
process:

* a mixture of experts under FSDP2 whose router leaves some experts without
  tokens on some steps: their parameters have no gradient (grad None) on
  every rank, and the step leaves them untouched, as torch does;
* a stack of experts' matrices [E, out, in] laid out by expert parallelism
  times FSDP (Shard(0) over "ep", Shard(1) over "fsdp"): each expert's
  matrix is orthogonalized as a matrix of its own, as one process does with
  stacked_matrices=True;
* a copy of a distributed optimizer is refused with a pointer to
  state_dict().
"""
import copy
import os

import pytest

torch = pytest.importorskip("torch")
from muonc.torch import (FailedPreconditionError, Muon,  # noqa: E402
                         create_dtensor_config)
from conftest import run_ranks  # noqa: E402

D, HIDDEN, EXPERTS, STEPS, BATCH = 8, 12, 4, 5, 16
# Per step, the experts the router gives no tokens (on every rank).
IDLE = {1: {2}, 2: {0, 3}, 4: {1}}


class MoE(torch.nn.Module):
    """A projection, then experts (each an MLP), each token to one expert:
    token i to expert i % EXPERTS, or when that one is idle this step to
    busy expert i % (number busy); then a norm."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(D, D, bias=False)
        self.experts = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(D, HIDDEN, bias=False),
                                torch.nn.Tanh(),
                                torch.nn.Linear(HIDDEN, D, bias=False))
            for _ in range(EXPERTS))
        self.norm = torch.nn.LayerNorm(D)

    def forward(self, x, idle):
        h = self.proj(x)
        busy = [e for e in range(EXPERTS) if e not in idle]
        route = torch.tensor([i % EXPERTS if i % EXPERTS in busy
                              else busy[i % len(busy)]
                              for i in range(x.shape[0])])
        out = torch.zeros_like(h)
        for e in busy:
            rows = (route == e).nonzero().flatten()
            out[rows] = self.experts[e](h[rows])
        return self.norm(out)


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(BATCH, D, generator=g), torch.randn(BATCH, D, generator=g)


def groups(model):
    muon = [(n, p) for n, p in model.named_parameters() if p.ndim == 2]
    adamw = [(n, p) for n, p in model.named_parameters() if p.ndim < 2]
    return [{"params": muon}, {"params": adamw, "use_muon": False, "lr": 3e-3}]


def whole(t):
    from torch.distributed.tensor import DTensor
    if t is None:
        return None
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()


def _moe_under_fsdp(rank, world):
    """The MoE under FSDP2 (each expert its own unit): per step, every
    parameter's whole gradient (None where none), and the end."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = MoE()
    init = {n: whole(p) for n, p in model.named_parameters()}
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    for expert in model.experts:
        fully_shard(expert, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = Muon(groups(model), lr=0.05,
               distributed_config=create_dtensor_config(model))
    grads = []
    for s in range(STEPS):
        x, y = batch(s)
        opt.zero_grad()
        loss = (model(x[rank::world], IDLE.get(s, ())) - y[rank::world]) \
            .pow(2).mean()
        loss.backward()
        grads.append({n: whole(p.grad) for n, p in model.named_parameters()})
        opt.step()
    return {"init": init, "grads": grads,
            "final": {n: whole(p) for n, p in model.named_parameters()},
            "state": {n: {k: whole(v) for k, v in opt.state[p].items()}
                      for n, p in model.named_parameters()}}


def expert_stack(seed, shape=(EXPERTS, HIDDEN, D)):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g)


def _stack_under_ep_fsdp(rank, world):
    """Stacked experts' matrices [E, out, in] on a 2 x 2 (ep, fsdp) mesh,
    Shard(0) over ep and Shard(1) over fsdp, stepped with whole gradients
    laid out the same way; no group key: the layout shows the experts."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (2, world // 2),
                            mesh_dim_names=("ep", "fsdp"))
    layout = [Shard(0), Shard(1)]
    w1 = torch.nn.Parameter(distribute_tensor(expert_stack(1), mesh, layout))
    w2 = torch.nn.Parameter(distribute_tensor(
        expert_stack(2, (EXPERTS, D, HIDDEN)), mesh, layout))
    opt = Muon([("w1", w1), ("w2", w2)], lr=0.05)
    for s in range(3):
        w1.grad = distribute_tensor(expert_stack(10 + s), mesh, layout)
        w2.grad = distribute_tensor(
            expert_stack(20 + s, (EXPERTS, D, HIDDEN)), mesh, layout)
        opt.step()
    return {"w1": whole(w1), "w2": whole(w2),
            "owners": opt.assignments}


def _copy_refused(rank, world):
    w = torch.nn.Parameter(torch.randn(4, 4))
    opt = Muon([w])
    w.grad = torch.randn(4, 4)
    opt.step()  # its plan spans the ranks from its first step on
    try:
        copy.deepcopy(opt)
    except FailedPreconditionError as e:
        return str(e)
    return "no error"


def _four_ranks(rank, world, out):
    results = {"moe": _moe_under_fsdp(rank, world),
               "stack": _stack_under_ep_fsdp(rank, world),
               "copy": _copy_refused(rank, world)}
    torch.save(results, os.path.join(out, f"four.{rank}"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("experts"))
    run_ranks(_four_ranks, 4, out)
    return [torch.load(os.path.join(out, f"four.{r}"), weights_only=False)
            for r in range(4)]


def test_idle_experts_have_no_gradient_and_stay_put(runs):
    moe = runs[0]["moe"]
    for s, idle in IDLE.items():
        for e in range(EXPERTS):
            has = moe["grads"][s][f"experts.{e}.0.weight"] is not None
            assert has == (e not in idle), (s, e)


def test_moe_under_fsdp_equals_one_process(runs):
    moe = runs[0]["moe"]
    # One process fed the distributed run's whole gradients (None where
    # none): bit for bit.
    torch.manual_seed(0)
    model = MoE()
    model.load_state_dict(moe["init"])
    opt = Muon(groups(model), lr=0.05)
    params = dict(model.named_parameters())
    for s, grads in enumerate(moe["grads"]):
        before = {n: p.detach().clone() for n, p in params.items()}
        for n, p in params.items():
            p.grad = grads[n]
        opt.step()
        for n, p in params.items():
            if grads[n] is None:
                assert torch.equal(before[n], p), (s, n)
    for n, p in params.items():
        assert torch.equal(p.detach(), moe["final"][n]), n
        for k, v in opt.state[p].items():
            assert torch.equal(v, moe["state"][n][k]), (n, k)
    # And within rounding of one process with its own gradients.
    torch.manual_seed(0)
    own = MoE()
    own.load_state_dict(moe["init"])
    opt = Muon(groups(own), lr=0.05)
    for s in range(STEPS):
        x, y = batch(s)
        opt.zero_grad()
        # The mean over 4 ranks' slices of the batch, as FSDP2 averages.
        sum((own(x[r::4], IDLE.get(s, ())) - y[r::4]).pow(2).mean()
            for r in range(4)).div(4).backward()
        opt.step()
    for n, p in own.named_parameters():
        torch.testing.assert_close(p.detach(), moe["final"][n], rtol=1e-5,
                                   atol=1e-6, msg=n)


def test_expert_stack_under_ep_fsdp_equals_one_process(runs):
    w1 = torch.nn.Parameter(expert_stack(1))
    w2 = torch.nn.Parameter(expert_stack(2, (EXPERTS, D, HIDDEN)))
    opt = Muon([{"params": [("w1", w1), ("w2", w2)],
                 "stacked_matrices": True}], lr=0.05)
    for s in range(3):
        w1.grad = expert_stack(10 + s)
        w2.grad = expert_stack(20 + s, (EXPERTS, D, HIDDEN))
        opt.step()
    for r in range(4):
        assert torch.equal(runs[r]["stack"]["w1"], w1.detach()), r
        assert torch.equal(runs[r]["stack"]["w2"], w2.detach()), r
    # Each expert's matrix once, on one rank.
    owned = sorted(m for ms in runs[0]["stack"]["owners"].values() for m in ms)
    assert owned == sorted([f"w1[{e}]" for e in range(EXPERTS)] +
                           [f"w2[{e}]" for e in range(EXPERTS)])
    # Not one matrix of 4 x 12 rows: the experts apart.
    flat = torch.nn.Parameter(expert_stack(1).reshape(-1, D))
    as_one = Muon([flat], lr=0.05)
    for s in range(3):
        flat.grad = expert_stack(10 + s).reshape(-1, D)
        as_one.step()
    assert not torch.allclose(flat.detach(), w1.detach().reshape(-1, D))


def test_a_distributed_copy_is_refused(runs):
    for r in range(4):
        assert "cannot be copied or pickled" in runs[r]["copy"] and \
            "state_dict()" in runs[r]["copy"], runs[r]["copy"]

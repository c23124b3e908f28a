"""Per-head Newton-Schulz under FSDP2 (4 processes, gloo, CPU): the
attention's fused QKV projection (48 x 16: 6 heads of 8 rows, sharded 12
rows per rank, so heads straddle shards) and its output projection (16 x
16: 2 heads of 8 columns, sharded on rows) orthogonalized head by head, the
heads owned across the ranks, and the result equal to one process fed the
same gradients bit for bit."""
import os

import pytest

torch = pytest.importorskip("torch")
from muonc.torch import Muon, create_dtensor_config  # noqa: E402
from conftest import run_ranks  # noqa: E402
from test_torch_fsdp import (Net, build, named_groups,  # noqa: E402
                             train_steps, whole)

STEPS = 3
QKV, OUT = "block.self_attn.in_proj_weight", "block.self_attn.out_proj.weight"
HEADS = {QKV: 6, OUT: 2}
SPLIT = {OUT: 1}


def groups(model):
    g = named_groups(model)
    g[0].update(num_heads=HEADS, head_split_dim=SPLIT)
    return g


def _four_ranks(rank, world, out):
    model, dp_rank, dp = build("fsdp", rank, world)
    opt = Muon(groups(model), lr=0.02,
               distributed_config=create_dtensor_config(model))
    record = {"init": {n: whole(p) for n, p in model.named_parameters()},
              "grads": [], "assignments": opt.assignments}
    train_steps(model, opt, dp_rank, dp, range(STEPS), record["grads"])
    record["final"] = {n: whole(p) for n, p in model.named_parameters()}
    if rank == 0:
        torch.save(record, os.path.join(out, "four.pt"))


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("per_head"))
    run_ranks(_four_ranks, 4, out)
    return torch.load(os.path.join(out, "four.pt"), weights_only=False)


def one_process(init, grads, heads=True):
    torch.manual_seed(0)
    model = Net()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(init[n])
    opt = Muon(groups(model) if heads else named_groups(model), lr=0.02)
    for g in grads:
        for n, p in model.named_parameters():
            p.grad = g[n].clone()
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_heads_are_owned_across_the_ranks(four):
    owners = {}
    for rank, names in four["assignments"].items():
        for name in names:
            owners[name] = rank
    # Every head has one owner; the QKV's six are balanced with the rest of
    # the model's matrices over more than one rank (the two output heads
    # may share one: the balance is over the whole model).
    for param, heads in HEADS.items():
        mine = {i: owners.get(f"{param}[{i}]") for i in range(heads)}
        assert None not in mine.values(), (param, mine)
        if param == QKV:
            assert len(set(mine.values())) > 1, (param, mine)
    assert QKV not in owners and OUT not in owners


def test_four_ranks_equal_one_process_bit_for_bit(four):
    got = one_process(four["init"], four["grads"])
    for n, p in got.items():
        assert torch.equal(p, four["final"][n]), n
    # Per-head ran: whole-matrix Muon fed the same gradients ends elsewhere
    # on the attention's projections only.
    plain = one_process(four["init"], four["grads"], heads=False)
    for n in HEADS:
        assert not torch.equal(plain[n], got[n]), n
    assert torch.equal(plain["head.weight"], got["head.weight"])

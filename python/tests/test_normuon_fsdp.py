"""NorMuon under FSDP2 (4 processes, gloo, CPU): equal to one process bit
for bit given the same gradients, and its per-row state (on each matrix's
owner only) carried by every rank's local_state_dict() from 4 ranks to 2,
the resumed run equal to one process resumed from that state."""
import os

import pytest

torch = pytest.importorskip("torch")
from muonc.torch import Muon, MuonError, create_dtensor_config  # noqa: E402
from conftest import run_ranks  # noqa: E402
from test_torch_fsdp import (Net, build, named_groups,  # noqa: E402
                             train_steps, whole)

STEPS, SAVE_AT, BETA2 = 4, 2, 0.9


def make_opt(model):
    return Muon(named_groups(model), lr=0.02, normuon=True,
                normuon_beta2=BETA2,
                distributed_config=create_dtensor_config(model))


def _four_ranks(rank, world, out):
    model, dp_rank, dp = build("fsdp", rank, world)
    opt = make_opt(model)
    record = {"init": {n: whole(p) for n, p in model.named_parameters()},
              "grads": []}
    train_steps(model, opt, dp_rank, dp, range(SAVE_AT), record["grads"])
    local = opt.local_state_dict()
    torch.save(local, os.path.join(out, f"local.{rank}"))
    record["rows"] = [(r["param"], r["slice"]) for r in
                      local["muonc"]["row_states"]]
    record["owned"] = opt.assignments.get(rank, [])
    record["saved_params"] = {n: whole(p) for n, p in model.named_parameters()}
    try:
        opt.state_dict()
        record["state_dict_error"] = "no error"
    except MuonError as e:
        record["state_dict_error"] = str(e)
    train_steps(model, opt, dp_rank, dp, range(SAVE_AT, STEPS),
                record["grads"])
    record["final"] = {n: whole(p) for n, p in model.named_parameters()}
    torch.save(record, os.path.join(out, f"four.{rank}"))


def _two_ranks(rank, world, out):
    model, dp_rank, dp = build("fsdp", rank, world)
    saved = torch.load(os.path.join(out, "four.0"), weights_only=False)
    from torch.distributed.tensor import DTensor, distribute_tensor
    with torch.no_grad():
        # The saved parameters, each rank its shard.
        for n, p in model.named_parameters():
            full = saved["saved_params"][n]
            if isinstance(p, DTensor):
                p._local_tensor.copy_(distribute_tensor(
                    full, p.device_mesh, p.placements)._local_tensor)
            else:
                p.copy_(full)
    opt = make_opt(model)
    opt.load_state_dict([torch.load(os.path.join(out, f"local.{r}"),
                                    weights_only=False) for r in range(4)])
    result = {"steps_taken": opt.engine.steps_taken, "grads": []}
    train_steps(model, opt, dp_rank, dp, range(SAVE_AT, STEPS),
                result["grads"])
    result["final"] = {n: whole(p) for n, p in model.named_parameters()}
    if rank == 0:
        torch.save(result, os.path.join(out, "two.pt"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("normuon"))
    run_ranks(_four_ranks, 4, out)
    run_ranks(_two_ranks, 2, out)
    four = [torch.load(os.path.join(out, f"four.{r}"), weights_only=False)
            for r in range(4)]
    locals_ = [torch.load(os.path.join(out, f"local.{r}"), weights_only=False)
               for r in range(4)]
    return four, locals_, torch.load(os.path.join(out, "two.pt"),
                                     weights_only=False)


def one_process(init, grads, steps, state=None):
    """One process from `init`, fed `grads` (per step, by name), after
    loading `state` (a list of local_state_dict()) when given."""
    torch.manual_seed(0)
    model = Net()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(init[n])
    opt = Muon(named_groups(model), lr=0.02, normuon=True, normuon_beta2=BETA2)
    if state is not None:
        opt.load_state_dict(state)
    for g in grads:
        for n, p in model.named_parameters():
            p.grad = g[n].clone()
        opt.step()
    assert opt.engine.steps_taken == steps
    return {n: p.detach().clone() for n, p in model.named_parameters()}, opt


def test_four_ranks_equal_one_process_bit_for_bit(runs):
    four, _, _ = runs
    got, _ = one_process(four[0]["init"], four[0]["grads"], STEPS)
    for n, p in got.items():
        assert torch.equal(p, four[0]["final"][n]), n
    # NorMuon ran: plain Muon fed the same gradients ends elsewhere.
    torch.manual_seed(0)
    model = Net()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(four[0]["init"][n])
    muon = Muon(named_groups(model), lr=0.02)
    for g in four[0]["grads"]:
        for n, p in model.named_parameters():
            p.grad = g[n].clone()
        muon.step()
    assert not torch.equal(model.head.weight.detach(), got["head.weight"])


def test_row_states_live_on_the_owners_only(runs):
    four, locals_, _ = runs
    rows = [key for record in four for key in record["rows"]]
    assert len(rows) == len(set(rows))  # each matrix's rows kept once
    for rank, record in enumerate(four):
        owned = set(record["owned"])
        for name, piece in record["rows"]:
            assert name in owned or f"{name}[{piece}]" in owned, (rank, name)
    assert sum(len(r["owned"]) for r in four) == len(rows)
    for local in locals_:
        for r in local["muonc"]["row_states"]:
            assert r["state"] == "normuon_v"
            assert r["values"].abs().max() > 0
    assert four[0]["state_dict_error"].startswith(
        "unimplemented: NorMuon's per-row state lives on each matrix's owner")


def test_resharded_from_four_ranks_to_two(runs):
    four, locals_, two = runs
    assert two["steps_taken"] == SAVE_AT
    # Exactly where one process resumed from the 4 ranks' state and fed
    # the 2 ranks' gradients ends.
    got, _ = one_process(four[0]["saved_params"], two["grads"], STEPS,
                         state=locals_)
    for n, p in got.items():
        assert torch.equal(p, two["final"][n]), n
    # And within rounding of the uninterrupted 4-rank run (2 ranks sum the
    # gradients in another order).
    for n, p in two["final"].items():
        torch.testing.assert_close(p, four[0]["final"][n], rtol=1e-5,
                                   atol=1e-6, msg=n)
    # The saved groups are NorMuon: a state without its rows is refused.
    stripped = [dict(d, muonc=dict(d["muonc"], row_states=[])) for d in locals_]
    with pytest.raises(MuonError, match="no normuon_v state for matrix"):
        one_process(four[0]["saved_params"], two["grads"], STEPS,
                    state=stripped)

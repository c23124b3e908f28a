"""NorMuon under FSDP2 (4 processes, gloo, CPU): equal to one process bit
for bit given the same gradients, and its per-row state (on each matrix's
owner only) carried from 4 ranks to 2 both by every rank's
local_state_dict() and by state_dict() (each parameter's normuon_v,
gathered on every rank) through torch.distributed.checkpoint; the resumed
runs equal one process resumed from that state, and the DCP checkpoint
loads in one process too."""
import os

import pytest

torch = pytest.importorskip("torch")
from muonc.torch import Muon, MuonError, create_dtensor_config  # noqa: E402
from conftest import dcp_load, run_ranks  # noqa: E402
from test_torch_fsdp import (Net, build, named_groups,  # noqa: E402
                             train_steps, whole, whole_state)

STEPS, SAVE_AT, BETA2 = 4, 2, 0.9


def make_opt(model):
    return Muon(named_groups(model), lr=0.02, normuon=True,
                normuon_beta2=BETA2,
                distributed_config=create_dtensor_config(model))


def _rows(opt):
    """This rank's row states by (param, slice)."""
    return {(r["param"], r["slice"]): r["values"].clone()
            for r in opt.local_state_dict()["muonc"]["row_states"]}


def _four_ranks(rank, world, out):
    from torch.distributed.checkpoint.state_dict import (
        get_state_dict, set_optimizer_state_dict)
    import torch.distributed.checkpoint as dcp
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
    # torch's format on every rank: each NorMuon parameter's normuon_v.
    sd = opt.state_dict()
    names = opt.param_names
    record["state_dict_keys"] = {names[i]: sorted(e)
                                 for i, e in sd["state"].items()}
    record["normuon_v"] = {names[i]: e["normuon_v"].clone()
                           for i, e in sd["state"].items() if "normuon_v" in e}
    record["normuon_v_plain"] = all(
        type(e["normuon_v"]) is torch.Tensor
        for e in sd["state"].values() if "normuon_v" in e)
    record["muonc_keys"] = sorted(sd["muonc"])
    # The checkpoint the 2-rank run and one process resume from.
    msd, osd = get_state_dict(model, opt)
    record["dcp_keys"] = {n: sorted(e) for n, e in osd["state"].items()}
    dcp.save({"model": msd, "optim": osd},
             checkpoint_id=os.path.join(out, "dcp"))
    record["saved_state"] = whole_state(opt)
    # DCP's state dict API in this layout: a fresh optimizer over the same
    # model takes the state, the same whole tensors and row states.
    _, osd = get_state_dict(model, opt)
    fresh = make_opt(model)
    set_optimizer_state_dict(model, fresh, osd)
    record["dcp_state"] = whole_state(fresh)
    record["dcp_steps_taken"] = fresh.engine.steps_taken
    mine, theirs = _rows(opt), _rows(fresh)
    record["dcp_rows_equal"] = (mine.keys() == theirs.keys() and all(
        torch.equal(mine[k], theirs[k]) for k in mine))
    del fresh
    train_steps(model, opt, dp_rank, dp, range(SAVE_AT, STEPS),
                record["grads"])
    record["final"] = {n: whole(p) for n, p in model.named_parameters()}
    torch.save(record, os.path.join(out, f"four.{rank}"))


def _two_ranks(rank, world, out):
    from torch.distributed.tensor import DTensor, distribute_tensor
    result = {}
    # From the 4 ranks' local_state_dict() files.
    model, dp_rank, dp = build("fsdp", rank, world)
    saved = torch.load(os.path.join(out, "four.0"), weights_only=False)
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
    result["steps_taken"] = opt.engine.steps_taken
    result["list_state"] = whole_state(opt)
    result["grads"] = []
    train_steps(model, opt, dp_rank, dp, range(SAVE_AT, STEPS),
                result["grads"])
    result["final"] = {n: whole(p) for n, p in model.named_parameters()}
    # From the DCP checkpoint of state_dict() (model and optimizer).
    model, dp_rank, dp = build("fsdp", rank, world)
    opt = make_opt(model)
    dcp_load(model, opt, os.path.join(out, "dcp"))
    result["dcp_steps_taken"] = opt.engine.steps_taken
    result["dcp_state"] = whole_state(opt)
    result["dcp_params"] = {n: whole(p) for n, p in model.named_parameters()}
    result["dcp_grads"] = []
    train_steps(model, opt, dp_rank, dp, range(SAVE_AT, STEPS),
                result["dcp_grads"])
    result["dcp_final"] = {n: whole(p) for n, p in model.named_parameters()}
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
                                     weights_only=False), out


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


def muon_names(record):
    return sorted(n for n, p in record["init"].items()
                  if p.ndim == 2 and "embed" not in n)


def test_four_ranks_equal_one_process_bit_for_bit(runs):
    four, _, _, _ = runs
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
    four, locals_, _, _ = runs
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


def test_state_dict_gathers_the_row_states_on_every_rank(runs):
    four, locals_, _, _ = runs
    names = muon_names(four[0])
    for record in four:
        # Each NorMuon parameter has normuon_v, a plain tensor, the same on
        # every rank; the AdamW ones do not; no second copy under muonc.
        assert sorted(record["normuon_v"]) == names
        assert record["normuon_v_plain"]
        assert record["muonc_keys"] == ["steps"]
        for n, keys in record["state_dict_keys"].items():
            assert keys == (["momentum_buffer", "normuon_v"] if n in names
                            else ["exp_avg", "exp_avg_sq", "step"]), n
        assert record["dcp_keys"] == record["state_dict_keys"]
        for n in names:
            v = record["normuon_v"][n]
            assert v.dtype == torch.float32
            # Whole 2-D matrices: one slice, one value per row.
            assert tuple(v.shape) == (1, four[0]["init"][n].shape[0]), n
            assert torch.equal(v, four[0]["normuon_v"][n]), n
    # Equal to the owners' row states, every matrix from its owner.
    covered = set()
    for local in locals_:
        for r in local["muonc"]["row_states"]:
            v = four[0]["normuon_v"][r["param"]]
            assert torch.equal(v[r["slice"]], r["values"]), r["param"]
            covered.add(r["param"])
    assert sorted(covered) == names


def test_distributed_checkpoint_state_dict_round_trip(runs):
    four, _, _, _ = runs
    for record in four:
        assert record["dcp_steps_taken"] == SAVE_AT
        assert record["dcp_rows_equal"]  # the owners took their rows
        assert record["dcp_state"].keys() == record["saved_state"].keys()
        for n, entry in record["saved_state"].items():
            assert set(record["dcp_state"][n]) == set(entry), n
            for k, v in entry.items():
                assert torch.equal(record["dcp_state"][n][k], v), (n, k)


def test_resharded_from_four_ranks_to_two(runs):
    four, locals_, two, _ = runs
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


def test_dcp_checkpoint_resharded_from_four_ranks_to_two(runs):
    four, locals_, two, _ = runs
    assert two["dcp_steps_taken"] == SAVE_AT
    saved = four[0]["saved_state"]
    # The loaded state (normuon_v included) is the saved one, bit for bit,
    # and the same as the list of local_state_dict() gives.
    for loaded in (two["dcp_state"], two["list_state"]):
        assert loaded.keys() == saved.keys()
        for n in saved:
            assert set(loaded[n]) == set(saved[n]), n
            for k, v in saved[n].items():
                assert torch.equal(loaded[n][k], v), (n, k)
    for n, p in four[0]["saved_params"].items():
        assert torch.equal(two["dcp_params"][n], p), n
    # The 2 ranks then continue exactly as from the local_state_dict()
    # files, and as one process resumed from them with those gradients.
    for step, (a, b) in enumerate(zip(two["dcp_grads"], two["grads"])):
        for n in a:
            assert torch.equal(a[n], b[n]), (step, n)
    got, _ = one_process(four[0]["saved_params"], two["dcp_grads"], STEPS,
                         state=locals_)
    for n, p in got.items():
        assert torch.equal(p, two["dcp_final"][n]), n
        assert torch.equal(two["dcp_final"][n], two["final"][n]), n


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_dcp_checkpoint_loads_in_one_process(runs):
    # The 4 ranks' checkpoint in one process (no process group): DCP
    # assembles the momentum, normuon_v comes whole; the run continues as
    # the 2 ranks' did, fed their gradients.
    four, _, two, out = runs
    torch.manual_seed(0)
    model = Net()
    opt = Muon(named_groups(model), lr=0.02, normuon=True, normuon_beta2=BETA2)
    dcp_load(model, opt, os.path.join(out, "dcp"))
    assert opt.engine.steps_taken == SAVE_AT
    loaded = whole_state(opt)
    for n, entry in four[0]["saved_state"].items():
        for k, v in entry.items():
            assert torch.equal(loaded[n][k], v), (n, k)
    for g in two["grads"]:
        for n, p in model.named_parameters():
            p.grad = g[n].clone()
        opt.step()
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), two["final"][n]), n

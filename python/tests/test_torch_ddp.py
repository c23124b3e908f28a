"""muonc.torch.Muon under DDP: 2 processes (gloo, CPU) against one."""
import copy
import json

import pytest

torch = pytest.importorskip("torch")
from muonc.torch import Muon, MuonError, create_dtensor_config  # noqa: E402
from conftest import (TinyTransformer, batch, loss_of, run_ranks,  # noqa: E402
                      split_params)

STEPS = 5




def make_opt(model):
    muon, adamw = split_params(model)
    return Muon([{"params": muon}, {"params": adamw, "use_muon": False,
                                    "lr": 3e-3}], lr=0.02)






def _ddp_train(rank, world, out):
    torch.manual_seed(0)
    model = TinyTransformer()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    # The config read from the module: plain tensors over every rank, with
    # the module's parameter names.
    config = create_dtensor_config(model)
    assert (config["shape"], config["names"], config["dtensor"]) == \
        ([world], ["dp"], False)
    muon, adamw = split_params(model)
    opt = Muon([{"params": muon}, {"params": adamw, "use_muon": False,
                                   "lr": 3e-3}], lr=0.02,
               distributed_config=config)
    assert opt.engine.world_size == world
    # Each Muon matrix is orthogonalized by exactly one rank.
    owned = sorted(m for ms in opt.assignments.values() for m in ms)
    assert len(owned) == len(set(owned)) == len(split_params(model)[0])
    assert "block.linear1.weight" in owned
    for s in range(STEPS):
        x, y = batch(s, n=4 * world)
        opt.zero_grad()
        loss_of(ddp, x[rank::world], y[rank::world]).backward()
        opt.step()
    if rank == 0:
        torch.save({"params": [p.detach() for p in model.parameters()],
                    "assignments": opt.assignments}, out)


def test_ddp_two_ranks_equal_one_process(tmp_path):
    out = str(tmp_path / "ddp.pt")
    run_ranks(_ddp_train, 2, out)
    got = torch.load(out)
    assert sorted(got["assignments"]) == [0, 1]
    assert all(got["assignments"][r] for r in (0, 1)), got["assignments"]
    torch.manual_seed(0)
    model = TinyTransformer()
    opt = make_opt(model)
    for s in range(STEPS):
        x, y = batch(s, n=8)
        # DDP averages the ranks' mean losses: the same as this mean of
        # the two halves' means.
        opt.zero_grad()
        loss = (loss_of(model, x[0::2], y[0::2]) +
                loss_of(model, x[1::2], y[1::2])) / 2
        loss.backward()
        opt.step()
    for a, b in zip(got["params"], model.parameters()):
        # gloo's allreduce sums in another order than autograd: rounding.
        torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-6)
    assert not torch.equal(got["params"][1], TinyTransformer().block.self_attn.in_proj_weight)


def _grad_on_one_rank(rank, world, out):
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(4, 4))
    v = torch.nn.Parameter(torch.randn(4, 4))
    opt = Muon([w, v])
    w.grad = torch.ones(4, 4)
    if rank == 0:
        v.grad = torch.ones(4, 4)
    before = w.detach().clone()
    try:
        opt.step()
        message = "no error"
    except MuonError as e:
        message = str(e)
    assert torch.equal(before, w)
    with open(f"{out}.{rank}", "w") as f:
        f.write(message)


def test_grad_none_on_some_ranks_fails_on_every_rank(tmp_path):
    out = str(tmp_path / "err")
    run_ranks(_grad_on_one_rank, 2, out)
    for rank in (0, 1):
        text = open(f"{out}.{rank}").read()
        assert "gradient on ranks [0] only" in text, text


def _world_mismatch(rank, world, out):
    w = torch.nn.Parameter(torch.randn(4, 4))
    try:
        # The world is read where the plan is made: at the first step.
        opt = Muon([w], distributed_config={"shape": [4], "names": ["dp"],
                                            "async": True})
        w.grad = torch.randn(4, 4)
        opt.step()
        message = "no error"
    except MuonError as e:
        message = str(e)
    with open(f"{out}.{rank}", "w") as f:
        f.write(message)


def test_plan_for_another_world_is_refused(tmp_path):
    out = str(tmp_path / "err")
    run_ranks(_world_mismatch, 2, out)
    for rank in (0, 1):
        text = open(f"{out}.{rank}").read()
        assert "plan is for 4 ranks" in text, text


def _save_on_two(rank, world, out):
    torch.manual_seed(0)
    model = TinyTransformer()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = make_opt(model)
    for s in range(3):
        x, y = batch(s, n=8)
        opt.zero_grad()
        loss_of(ddp, x[rank::2], y[rank::2]).backward()
        opt.step()
    torch.save({"state": opt.state_dict(),
                "params": [p.detach() for p in model.parameters()]},
               f"{out}.{rank}")


def test_state_saved_on_two_ranks_loads_in_one_process(tmp_path):
    out = str(tmp_path / "sd")
    run_ranks(_save_on_two, 2, out)
    saved = [torch.load(f"{out}.{r}", weights_only=False) for r in (0, 1)]
    torch.manual_seed(0)
    model = TinyTransformer()
    with torch.no_grad():
        for p, q in zip(model.parameters(), saved[0]["params"]):
            p.copy_(q)
    opt = make_opt(model)
    opt.load_state_dict([s["state"] for s in saved])
    assert opt.engine.steps_taken == 3
    # The loaded momentum is the 2-rank run's: compare with a 1-process run
    # of all 3 + 2 steps.
    torch.manual_seed(0)
    ref = TinyTransformer()
    ref_opt = make_opt(ref)
    for s in range(5):
        for m, o in ((ref, ref_opt),) + (((model, opt),) if s >= 3 else ()):
            x, y = batch(s, n=8)
            o.zero_grad()
            ((loss_of(m, x[0::2], y[0::2]) + loss_of(m, x[1::2], y[1::2])) / 2).backward()
            o.step()
    for a, b in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def _placements(rank, world, out):
    torch.set_num_threads(1)
    results = {}
    for placement in ({}, {"placement": "redundant_below",
                           "redundant_below": 1 << 20}):
        torch.manual_seed(0)
        model = TinyTransformer()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        config = dict(create_dtensor_config(model), **placement)
        muon, adamw = split_params(model)
        opt = Muon([{"params": muon}, {"params": adamw, "use_muon": False,
                                       "lr": 3e-3}], lr=0.02,
                   distributed_config=config)
        sent = 0
        for s in range(3):
            x, y = batch(s, n=4 * world)
            opt.zero_grad()
            loss_of(ddp, x[rank::world], y[rank::world]).backward()
            opt.step()
            sent += opt.last_step_counters["bytes_sent"]
        plan = json.loads(opt.engine.plan_json())
        results[placement.get("placement", "auto")] = (
            [p.detach().clone() for p in model.parameters()], sent,
            opt.last_step_counters["exchanges"],
            [e["phase"] for e in plan["exchanges"] if e["transfers"]],
            len(plan["exchanges"]))
    try:
        muon = split_params(model)[0]
        Muon(muon, distributed_config=dict(create_dtensor_config(muon),
                                           placement="sometimes"))
        message = "no error"
    except ValueError as e:
        message = str(e)
    if rank == 0:
        torch.save({"results": results, "message": message}, out)


def test_placement_redundant_below_orthogonalizes_on_every_rank(tmp_path):
    # DDP leaves the whole gradient on every rank: below the threshold each
    # rank orthogonalizes its own copy (nothing crosses), with the same
    # bits as one owner sending its result.
    out = str(tmp_path / "placement.pt")
    run_ranks(_placements, 2, out)
    got = torch.load(out)
    (once, once_sent, once_run, once_moving, once_planned), (
        redundant, redundant_sent, redundant_run, _, _) = (
        got["results"]["auto"], got["results"]["redundant_below"])
    assert once_sent > 0 and redundant_sent == 0, (once_sent, redundant_sent)
    # Only the exchanges that move something run: the scatters of the
    # updates. The gathers are empty (each rank has the whole gradient).
    assert once_moving and set(once_moving) == {"scatter"}, once_moving
    assert once_run == len(once_moving) < once_planned, (
        once_run, once_moving, once_planned)
    assert redundant_run == 0, redundant_run
    for a, b in zip(once, redundant):
        assert torch.equal(a, b)
    assert "sometimes" in got["message"], got["message"]


def _auto_placement(rank, world, out):
    # placement "auto" on a given machine: over a link of 1 MB/s every
    # matrix of this model costs less orthogonalized where its whole
    # gradient is (each rank, nothing sent); at 1 kflop/s and 100 GB/s
    # each has one owner. Bad machines are refused naming the key.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TinyTransformer()
    muon, adamw = split_params(model)
    got = {}
    for name, machine in (("slow link", {"ns_flops_per_second": 1e12,
                                         "bytes_per_second": 1e6,
                                         "latency_seconds": 1e-3}),
                          ("slow flops", {"ns_flops_per_second": 1e3,
                                          "bytes_per_second": 1e11})):
        config = dict(create_dtensor_config(model), placement="auto",
                      placement_machine=machine)
        opt = Muon([{"params": muon}, {"params": adamw, "use_muon": False}],
                   distributed_config=config)
        got[name] = opt.assignments
    errors = []
    for machine in ({"bytes_per_second": 1e9},
                    {"ns_flops_per_second": 1e12, "bytes_per_second": 1e9,
                     "latency": 1e-6},
                    {"ns_flops_per_second": "fast", "bytes_per_second": 1e9}):
        try:
            Muon(muon, distributed_config=dict(
                create_dtensor_config(muon), placement_machine=machine))
            errors.append("no error")
        except ValueError as e:
            errors.append(str(e))
    if rank == 0:
        torch.save({"assignments": got, "errors": errors,
                    "matrices": len(muon)}, out)


def test_placement_auto_decides_on_the_given_machine(tmp_path):
    out = str(tmp_path / "auto.pt")
    run_ranks(_auto_placement, 2, out)
    got = torch.load(out)
    slow_link, slow_flops = (got["assignments"]["slow link"],
                             got["assignments"]["slow flops"])
    n = got["matrices"]
    # Redundant: every rank orthogonalizes every matrix.
    assert all(len(slow_link[r]) == n for r in (0, 1)), slow_link
    # Once: each matrix on one rank.
    assert len(slow_flops[0]) + len(slow_flops[1]) == n, slow_flops
    assert not set(slow_flops[0]) & set(slow_flops[1]), slow_flops
    assert got["errors"][0].endswith("ns_flops_per_second and "
                                     "bytes_per_second must be given and "
                                     "> 0"), got["errors"][0]
    assert "unknown key 'latency'" in got["errors"][1], got["errors"][1]
    assert "placement_machine['ns_flops_per_second']: expected a finite " \
        "number >= 0" in got["errors"][2], got["errors"][2]

"""muonc.torch.Muon under FSDP2, TP x FSDP and HSDP (4 processes, gloo, CPU)
against one process, and its state resharded from 4 ranks to 2. HSDP runs
twice: each matrix orthogonalized once, and once per replica (the
placement "redundant_below": each replica's own owner, so the step's
exchanges stay inside a replica).

One spawn of 4 ranks trains the four layouts in turn (each from the same
initial model, the global batch split over the data-parallel ranks),
records every step's whole gradients and the final parameters, saves a
checkpoint of the FSDP2 run half-way (torch.distributed.checkpoint, and
every rank's local_state_dict()), and checks the errors that need ranks.
One spawn of 2 ranks loads that checkpoint under FSDP2 and finishes the
run. The tests then compare, in this process:

* bit for bit: a one-process muonc run fed the distributed run's whole
  gradients ends with the distributed run's parameters (the optimizer
  itself is exact under every layout);
* within rounding: a one-process run with its own gradients (torch sums
  the data-parallel gradients in another order than one process does).
"""
import os

import pytest

torch = pytest.importorskip("torch")
from muonc.torch import Muon, MuonError, create_dtensor_config  # noqa: E402
from muonc.torch import _state as muonc_state  # noqa: E402
from conftest import batch, dcp_load, loss_of, run_ranks  # noqa: E402

# FF = 30 is split unevenly under TP x FSDP: TP's 15 rows a rank, FSDP's 8
# and 7 of those (a strided split that does not divide the dim).
VOCAB, D, FF = 30, 16, 30
STEPS, SAVE_AT = 4, 2
LAYOUTS = ("fsdp", "tp_fsdp", "hsdp", "hsdp_per_replica")
# Every matrix of Net below this size: orthogonalized once per replica.
PER_REPLICA = {"placement": "redundant_below", "redundant_below": 1 << 20}


class Net(torch.nn.Module):
    """conftest's TinyTransformer with uneven shapes: 30 rows (8, 8, 8, 6 on
    4 ranks) and a 3-row matrix (1, 1, 1 and an empty shard)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, D)
        self.block = torch.nn.TransformerEncoderLayer(
            D, 2, FF, dropout=0.0, batch_first=True, bias=False)
        self.head = torch.nn.Linear(D, VOCAB, bias=False)
        self.gate = torch.nn.Linear(D, 3, bias=False)

    def forward(self, tokens):
        h = self.block(self.embed(tokens))
        logits = self.head(h)
        return torch.cat([logits[..., :3] + self.gate(h), logits[..., 3:]], -1)


def named_groups(model, skip=()):
    muon, adamw = [], []
    for n, p in model.named_parameters():
        if n in skip:
            continue
        (muon if p.ndim == 2 and "embed" not in n else adamw).append((n, p))
    return [{"params": muon}, {"params": adamw, "use_muon": False,
                               "lr": 3e-3}]


def make_opt(model, placement=None, **kw):
    return Muon(named_groups(model, **kw), lr=0.02,
                distributed_config=dict(create_dtensor_config(model),
                                        **(placement or {})))


def whole(t):
    from torch.distributed.tensor import DTensor
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()


def build(layout, rank, world):
    """The model under `layout`: (model, data-parallel rank, dp size)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard
    torch.manual_seed(0)
    model = Net()
    if layout == "fsdp":
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        # linear1.weight (FF x 16) sharded on its columns.
        fully_shard(model.block, mesh=mesh, shard_placement_fn=lambda p:
                    Shard(1) if p.shape == (FF, D) else Shard(0))
        fully_shard(model, mesh=mesh)
        return model, rank, world
    if layout == "tp_fsdp":
        from torch.distributed.tensor.parallel import (
            ColwiseParallel, RowwiseParallel, parallelize_module)
        mesh = init_device_mesh("cpu", (2, world // 2),
                                mesh_dim_names=("dp", "tp"))
        parallelize_module(model.block, mesh["tp"],
                           {"linear1": ColwiseParallel(),
                            "linear2": RowwiseParallel()})
        fully_shard(model.block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
        return model, mesh.get_coordinate()[0], 2
    assert layout in ("hsdp", "hsdp_per_replica")
    mesh = init_device_mesh("cpu", (2, world // 2),
                            mesh_dim_names=("replicate", "shard"))
    fully_shard(model.block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, rank, world


def train_steps(model, opt, dp_rank, dp, steps, record=None):
    for s in steps:
        x, y = batch(s, n=8, vocab=VOCAB)
        opt.zero_grad()
        loss_of(model, x[dp_rank::dp], y[dp_rank::dp]).backward()
        if record is not None:
            record.append({n: whole(p.grad) for n, p in
                           model.named_parameters()})
        opt.step()


def whole_state(opt):
    """The optimizer's state_dict() as whole tensors (collective)."""
    sd = opt.state_dict()
    names = opt.param_names
    return {names[i]: {k: whole(v) for k, v in entry.items()}
            for i, entry in sd["state"].items()}


def check_layout(model, opt):
    """Each rank binds exactly the piece torch holds: the plan's box of the
    whole parameter (torch.chunk splits, uneven and empty shards) is the
    DTensor's local tensor."""
    for p, name, _ in opt._params:
        box = muonc_state.box(opt, name, p)
        piece = whole(p)[tuple(slice(b, e) for b, e in box)]
        local = p._local_tensor if hasattr(p, "_local_tensor") else p
        assert torch.equal(piece, local.detach()), (name, box)


def _four_ranks(rank, world, out):
    from torch.distributed.checkpoint.state_dict import (
        get_state_dict, set_optimizer_state_dict)
    import torch.distributed.checkpoint as dcp
    results = {}
    for layout in LAYOUTS:
        model, dp_rank, dp = build(layout, rank, world)
        config = create_dtensor_config(model)
        placement = PER_REPLICA if layout == "hsdp_per_replica" else None
        opt = make_opt(model, placement)
        check_layout(model, opt)
        rows = [None] * world
        torch.distributed.all_gather_object(
            rows, model.block.linear1.weight.to_local().shape[0])
        record = {"linear1_rows": rows,
                  "config": {k: config[k] for k in ("shape", "names")},
                  "placements": {n: [repr(x) for x in p.placements]
                                 for n, p in model.named_parameters()},
                  "assignments": opt.assignments,
                  "init": {n: whole(p) for n, p in model.named_parameters()},
                  "grads": []}
        train_steps(model, opt, dp_rank, dp, range(SAVE_AT), record["grads"])
        if layout == "fsdp":
            # The checkpoint a 2-rank run resumes from.
            msd, osd = get_state_dict(model, opt)
            dcp.save({"model": msd, "optim": osd},
                     checkpoint_id=os.path.join(out, "dcp"))
            torch.save(opt.local_state_dict(),
                       os.path.join(out, f"local.{rank}"))
            record["saved_state"] = whole_state(opt)
            record["saved_params"] = {n: whole(p) for n, p in
                                      model.named_parameters()}
        train_steps(model, opt, dp_rank, dp, range(SAVE_AT, STEPS),
                    record["grads"])
        record["final"] = {n: whole(p) for n, p in model.named_parameters()}
        # DCP's state dict API in this layout: a fresh optimizer over the
        # same model takes the state, the same whole tensors.
        _, osd = get_state_dict(model, opt)
        fresh = make_opt(model, placement)
        set_optimizer_state_dict(model, fresh, osd)
        record["state"] = whole_state(opt)
        record["dcp_state"] = whole_state(fresh)
        record["dcp_steps_taken"] = fresh.engine.steps_taken
        results[layout] = record
        if layout == "fsdp":
            results["errors"] = _errors(rank, model, opt)
    if rank == 0:
        torch.save(results, os.path.join(out, "four.pt"))


def _message(fn):
    try:
        fn()
    except MuonError as e:
        return str(e)
    return "no error"


def _errors(rank, model, opt):
    """The errors that need ranks; each leaves the parameters unchanged."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial
    from torch.distributed.tensor.placement_types import _StridedShard
    errors = {}
    before = {n: whole(p) for n, p in model.named_parameters()}
    # A gradient on some ranks only (FSDP2's gradients are DTensors).
    x, y = batch(50, n=8, vocab=VOCAB)
    opt.zero_grad()
    loss_of(model, x[rank::4], y[rank::4]).backward()
    if rank == 1:
        model.block.linear2.weight.grad = None
    errors["grad_on_some_ranks"] = _message(opt.step)
    opt.zero_grad()
    # A trainable parameter of the model in no group.
    errors["not_in_a_group"] = _message(
        lambda: make_opt(model, skip=("block.norm2.weight",)))
    mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("dp",))
    # A parameter whose values are partial sums.
    partial = torch.nn.Parameter(DTensor.from_local(
        torch.ones(4, 4), mesh, [Partial()], run_check=False))
    errors["partial"] = _message(lambda: Muon([partial]))
    # A _StridedShard that is not FSDP2's over a TP split.
    strided = torch.nn.Parameter(DTensor.from_local(
        torch.ones(2, 4), mesh, [_StridedShard(0, split_factor=2)],
        run_check=False))
    errors["strided"] = _message(lambda: Muon([strided]))
    # A plan for another world: refused where the plan is made, at the
    # first step (or a property that shows the plan).
    errors["world"] = _message(lambda: Muon(
        named_groups(model), distributed_config=dict(
            create_dtensor_config(model), shape=[2, 4],
            names=["a", "dp"])).engine)
    after = {n: whole(p) for n, p in model.named_parameters()}
    errors["unchanged"] = all(torch.equal(before[n], after[n]) for n in before)
    return errors


def _two_ranks(rank, world, out):
    model, dp_rank, dp = build("fsdp", rank, world)
    opt = make_opt(model)
    dcp_load(model, opt, os.path.join(out, "dcp"))
    result = {"steps_taken": opt.engine.steps_taken,
              "loaded_state": whole_state(opt),
              "loaded_params": {n: whole(p) for n, p in
                                model.named_parameters()}}
    # The same state from the 4 ranks' local_state_dict() files.
    model2, _, _ = build("fsdp", rank, world)
    opt2 = make_opt(model2)
    opt2.load_state_dict(state_dict=[
        torch.load(os.path.join(out, f"local.{r}"), weights_only=False)
        for r in range(4)])
    result["list_state"] = whole_state(opt2)
    result["list_steps_taken"] = opt2.engine.steps_taken
    result["grads"] = []
    train_steps(model, opt, dp_rank, dp, range(SAVE_AT, STEPS),
                result["grads"])
    result["final"] = {n: whole(p) for n, p in model.named_parameters()}
    if rank == 0:
        torch.save(result, os.path.join(out, "two.pt"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("fsdp"))
    run_ranks(_four_ranks, 4, out)
    run_ranks(_two_ranks, 2, out)
    return (torch.load(os.path.join(out, "four.pt"), weights_only=False),
            torch.load(os.path.join(out, "two.pt"), weights_only=False))


def one_process(init, grads=None, dp=1, steps=range(STEPS), state=None):
    """One process from `init`: fed `grads` (per step, by name) when given,
    else its own gradients of the global batch's `dp` slices' mean loss."""
    torch.manual_seed(0)
    model = Net()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(init[n])
    opt = Muon(named_groups(model), lr=0.02)
    if state is not None:
        # Whole tensors by name (whole_state) in torch's format.
        sd = opt.state_dict()
        sd["state"] = {i: state[n] for i, n in enumerate(opt.param_names)}
        for g in sd["param_groups"]:
            g["muonc_steps"] = steps[0]
        opt.load_state_dict(sd)
    for i, s in enumerate(steps):
        opt.zero_grad()
        if grads is not None:
            for n, p in model.named_parameters():
                p.grad = grads[i][n].clone()
        else:
            x, y = batch(s, n=8, vocab=VOCAB)
            sum(loss_of(model, x[r::dp], y[r::dp]) for r in range(dp)).div(
                dp).backward()
        opt.step()
    return {n: p.detach() for n, p in model.named_parameters()}, opt


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_is_what_torch_made(runs, layout):
    record = runs[0][layout]
    placements = record["placements"]
    if layout == "fsdp":
        assert record["config"] == {"shape": [4], "names": ["dp"]}
        assert placements["block.linear1.weight"] == ["Shard(dim=1)"]
        assert placements["head.weight"] == ["Shard(dim=0)"]
    elif layout == "tp_fsdp":
        assert record["config"] == {"shape": [2, 2], "names": ["dp", "tp"]}
        assert placements["block.linear1.weight"] == [
            "_StridedShard(dim=0, sf=2)", "Shard(dim=0)"]
        assert placements["block.linear2.weight"] == [
            "Shard(dim=0)", "Shard(dim=1)"]
        # Nested torch.chunk: TP's 15 rows, FSDP's 8 and 7 of them (a flat
        # split of 30 in 4 would be 8, 8, 8, 6).
        assert record["linear1_rows"] == [8, 8, 7, 7]
        assert placements["head.weight"] == ["Shard(dim=0)"]  # dp sub-mesh
    else:
        assert record["config"] == {"shape": [2, 2],
                                    "names": ["replicate", "shard"]}
        assert placements["head.weight"] == ["Replicate()", "Shard(dim=0)"]
    # Module names in the plan; each Muon matrix orthogonalized once, or
    # once per replica: by one rank of ranks {0, 1} and one of {2, 3}.
    matrices = sorted(n for n, p in record["init"].items()
                      if p.ndim == 2 and "embed" not in n)
    owners = {}
    for rank, ms in record["assignments"].items():
        for m in ms:
            owners.setdefault(m, []).append(int(rank))
    assert sorted(owners) == matrices
    for m, ranks in owners.items():
        if layout == "hsdp_per_replica":
            assert sorted(r // 2 for r in ranks) == [0, 1], (m, ranks)
        else:
            assert len(ranks) == 1, (m, ranks)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_same_gradients_give_bit_identical_parameters(runs, layout):
    record = runs[0][layout]
    got, _ = one_process(record["init"], grads=record["grads"])
    for n, p in got.items():
        assert torch.equal(p, record["final"][n]), n
    assert not torch.equal(got["gate.weight"], record["init"]["gate.weight"])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_training_equals_one_process(runs, layout):
    record = runs[0][layout]
    got, _ = one_process(record["init"], dp=2 if layout == "tp_fsdp" else 4)
    for n, p in got.items():
        # torch reduces the ranks' gradients in another order than autograd
        # sums one process's: rounding, amplified a little by 4 steps.
        torch.testing.assert_close(record["final"][n], p, rtol=1e-5,
                                   atol=1e-6, msg=n)


def test_checkpoint_resharded_from_four_ranks_to_two(runs):
    four, two = runs
    fsdp = four["fsdp"]
    assert two["steps_taken"] == SAVE_AT == two["list_steps_taken"]
    saved = fsdp["saved_state"]
    assert set(saved["block.linear1.weight"]) == {"momentum_buffer"}
    assert set(saved["embed.weight"]) == {"exp_avg", "exp_avg_sq", "step"}
    for loaded in (two["loaded_state"], two["list_state"]):
        assert loaded.keys() == saved.keys()
        for n in saved:
            for k, v in saved[n].items():
                assert torch.equal(loaded[n][k], v), (n, k)
    for n, p in fsdp["saved_params"].items():
        assert torch.equal(two["loaded_params"][n], p), n
    # The momentum is not trivially zero.
    assert saved["block.linear1.weight"]["momentum_buffer"].abs().max() > 0
    # Resumed on 2 ranks, training ends where the uninterrupted 4-rank run
    # does (within rounding: 2 ranks sum the gradients in another order).
    for n, p in two["final"].items():
        torch.testing.assert_close(p, fsdp["final"][n], rtol=1e-5, atol=1e-6,
                                   msg=n)
    # Exactly where one process resumed from the saved state and fed the 2
    # ranks' gradients ends.
    got, opt = one_process(fsdp["saved_params"], grads=two["grads"],
                           steps=range(SAVE_AT, STEPS), state=saved)
    assert opt.engine.steps_taken == STEPS
    for n, p in got.items():
        assert torch.equal(p, two["final"][n]), n


@pytest.mark.parametrize("layout", LAYOUTS)
def test_distributed_checkpoint_state_dict_in_each_layout(runs, layout):
    record = runs[0][layout]
    assert record["dcp_steps_taken"] == STEPS
    for n, entry in record["state"].items():
        for k, v in entry.items():
            assert torch.equal(record["dcp_state"][n][k], v), (n, k)


def test_errors_on_four_ranks(runs):
    errors = runs[0]["errors"]
    assert errors["unchanged"]
    assert ("parameter 'block.linear2.weight' has a gradient on ranks "
            "[0, 2, 3] only") in errors["grad_on_some_ranks"]
    assert "'block.norm2.weight'" in errors["not_in_a_group"]
    assert "in no parameter group" in errors["not_in_a_group"]
    assert "Partial" in errors["partial"] and "group0.0" in errors["partial"]
    assert "_StridedShard" in errors["strided"]
    assert "not supported" in errors["strided"]
    assert "plan is for 8 ranks, the process group has 4" in errors["world"]

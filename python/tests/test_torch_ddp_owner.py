"""Muon.reduce_gradients_to_owners(ddp): DDP's hook reduces each matrix's
gradient to its owner only, 2 and 4 gloo ranks against one process."""
import copy

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from muonc.torch import (FailedPreconditionError, Muon,  # noqa: E402
                         MuonTypeError)
from conftest import (TinyTransformer, batch, loss_of, run_ranks,  # noqa: E402
                      split_params)

STEPS = 4
ONE = {"shape": [1], "names": ["dp"], "async": True}


def make_opt(model, **kw):
    muon, adamw = split_params(model)
    return Muon([{"params": muon}, {"params": adamw, "use_muon": False,
                                    "lr": 3e-3}], lr=0.02, **kw)


def one_process_reference(model, steps, world, micro=1, clip=None):
    """The same training in this process: each rank's gradient (of its
    slice of each micro-batch, accumulated) divided by the world size, as
    DDP's mean, summed in rank order; clipped by torch's clip_grad_norm_
    over the optimizer's parameters in its order (the order of the norms
    in the total is what opt.clip_grad_norm_ sums them in)."""
    opt = make_opt(model, distributed_config=ONE)
    for s in range(steps):
        per_rank = []
        for r in range(world):
            opt.zero_grad()
            for m in range(micro):
                x, y = batch(s * micro + m, n=4 * world)
                loss_of(model, x[r::world], y[r::world]).backward()
            per_rank.append([p.grad / world for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            total = per_rank[0][i].clone()
            for r in range(1, world):
                total += per_rank[r][i]
            p.grad = total
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(
                [p for g in opt.param_groups for p in g["params"]], clip)
        opt.step()
    return opt


def worst_difference(got, want):
    """The largest of max|a - b| / max|b| over pairs of tensors."""
    return max(((a - b).abs().max() / b.abs().max()).item()
               for a, b in zip(got, want))


def _train(rank, world, out, micro, below=0, clip=None):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TinyTransformer()
    start = copy.deepcopy(model)
    ddp = DDP(model)
    config = None
    if below:
        from muonc.torch import create_dtensor_config
        config = dict(create_dtensor_config(model),
                      placement="redundant_below", redundant_below=below)
    opt = make_opt(model, distributed_config=config)
    opt.reduce_gradients_to_owners(ddp)
    sent, norms = [], []
    for s in range(STEPS):
        opt.zero_grad()
        for m in range(micro):
            x, y = batch(s * micro + m, n=4 * world)
            if m < micro - 1:
                with ddp.no_sync():  # accumulate, as DDP users do
                    loss_of(ddp, x[rank::world], y[rank::world]).backward()
            else:
                loss_of(ddp, x[rank::world], y[rank::world]).backward()
        if clip is not None:
            norms.append(opt.clip_grad_norm_(clip))
        opt.step()
        sent.append(opt.last_step_counters["bytes_sent"])
    saved = opt.state_dict()  # collective: every rank
    # Loaded back, each rank keeps its own matrices' momentum: the sums
    # over the ranks are the saved ones again (not N times them).
    opt.load_state_dict(saved)
    again = opt.state_dict()
    reloaded = all(torch.equal(a[k], b[k]) for a, b in
                   zip(saved["state"].values(), again["state"].values())
                   for k in a if torch.is_tensor(a[k]))
    every = [None] * world
    dist.all_gather_object(every, sent)
    if rank:
        return
    ref_model = start
    ref = one_process_reference(ref_model, STEPS, world, micro, clip)
    worst = worst_difference(model.parameters(), ref_model.parameters())
    exact = all(torch.equal(p, q) for p, q in zip(model.parameters(),
                                                  ref_model.parameters()))
    # The momentum, summed over the ranks by state_dict().
    ref_saved = ref.state_dict()
    moments = max(
        ((a["momentum_buffer"] - b["momentum_buffer"]).abs().max() /
         b["momentum_buffer"].abs().max()).item()
        for a, b in zip(saved["state"].values(), ref_saved["state"].values())
        if "momentum_buffer" in b)
    exact = exact and all(
        torch.equal(a["momentum_buffer"], b["momentum_buffer"])
        for a, b in zip(saved["state"].values(), ref_saved["state"].values())
        if "momentum_buffer" in b)
    grad_bytes = sum(p.numel() * 4 for p in model.parameters())
    torch.save({"worst": worst, "moments": moments, "sent": every,
                "grad_bytes": grad_bytes, "exact": exact,
                "reloaded": reloaded,
                "norms": norms}, out)


@pytest.mark.parametrize("world", [2, 4])
def test_owner_reduced_ddp_equals_one_process(tmp_path, world):
    out = str(tmp_path / "owner.pt")
    run_ranks(_train, world, out, 1)
    got = torch.load(out)
    # Every gradient is summed in rank order (the owner's matrices, each
    # rank's share of AdamW's), as one process adds them: the same weights
    # and momentum bit for bit on 2 and 4 ranks.
    assert got["exact"], (got["worst"], got["moments"])
    assert got["reloaded"]
    # Every step the ranks together send what DDP's ring all-reduce would:
    # 2(N-1) times the gradients' bytes. For a matrix: N-1 summands to its
    # owner, N-1 copies of its update back; for AdamW's: N-1 summands of
    # each share to its rank, N-1 copies of the sum back.
    for step in range(STEPS):
        total = sum(got["sent"][r][step] for r in range(world))
        assert total == 2 * (world - 1) * got["grad_bytes"], (step, total)


@pytest.mark.parametrize("world", [2, 4])
def test_matrices_kept_on_every_rank_are_summed_as_adamw_s(tmp_path, world):
    # redundant_below=300: out_proj (16 x 16) is orthogonalized by every
    # rank, so DDP's hook sums its gradient as AdamW's (on 2 ranks each
    # rank both summands; on 4 in shares that the step gathers); the others
    # go to their owners. Nothing crosses for out_proj in the step's
    # exchanges.
    out = str(tmp_path / "owner.pt")
    run_ranks(_train, world, out, 1, 300)
    got = torch.load(out)
    assert got["exact"], (got["worst"], got["moments"])
    for step in range(STEPS):
        total = sum(got["sent"][r][step] for r in range(world))
        assert total == 2 * (world - 1) * got["grad_bytes"], (step, total)


@pytest.mark.parametrize("world", [2, 4])
def test_no_sync_accumulation_equals_one_process(tmp_path, world):
    out = str(tmp_path / "owner.pt")
    run_ranks(_train, world, out, 3)
    got = torch.load(out)
    assert got["exact"], (got["worst"], got["moments"])


@pytest.mark.parametrize("world", [2, 4])
def test_clip_grad_norm_takes_the_norm_over_the_owners(tmp_path, world):
    # max_norm 0.05 is below every step's norm, so every step is clipped;
    # with each rank's own part of the norm the ranks would clip by
    # different factors and the weights would differ from one process's.
    # On 4 ranks AdamW's gradients are whole only after clip_grad_norm_
    # gathers their shares.
    out = str(tmp_path / "owner.pt")
    run_ranks(_train, world, out, 1, 0, 0.05)
    got = torch.load(out)
    assert all(n > 0.05 for n in got["norms"]), got["norms"]
    assert got["exact"], (got["worst"], got["moments"])


def _others_and_switch(rank, world, out):
    # A parameter of another optimizer in the same DDP module keeps DDP's
    # all-reduce; switching after steps keeps the momentum (rank 0's whole,
    # the others' from zero); the result equals plain DDP to rounding.
    torch.set_num_threads(1)
    results = {}
    for mode in ("ddp", "owner"):
        torch.manual_seed(0)
        model = TinyTransformer()
        ddp = DDP(model)
        muon, adamw = split_params(model)
        head = model.head.weight  # SGD's, not muonc's
        muon = [p for p in muon if p is not head]
        opt = Muon([{"params": muon}, {"params": adamw, "use_muon": False,
                                       "lr": 3e-3}], lr=0.02)
        other = torch.optim.SGD([head], lr=0.1)
        for s in range(STEPS):
            if mode == "owner" and s == 2:
                opt.reduce_gradients_to_owners(ddp)
            x, y = batch(s, n=4 * world)
            opt.zero_grad()
            other.zero_grad()
            loss_of(ddp, x[rank::world], y[rank::world]).backward()
            if s >= 2 and mode == "owner":
                # The head's gradient was all-reduced: the same on every
                # rank.
                every = [torch.empty_like(head.grad) for _ in range(world)]
                dist.all_gather(every, head.grad)
                assert all(torch.equal(every[0], g) for g in every)
            opt.step()
            other.step()
        results[mode] = [p.detach().clone() for p in model.parameters()]
    if rank == 0:
        torch.save(worst_difference(results["owner"], results["ddp"]), out)


def test_other_parameters_and_switching_after_steps(tmp_path):
    out = str(tmp_path / "worst.pt")
    run_ranks(_others_and_switch, 2, out)
    worst = torch.load(out)
    assert worst < 1e-5, worst


def _errors(rank, world, out):
    torch.manual_seed(0)
    model = TinyTransformer()
    ddp = DDP(model)
    opt = make_opt(model)
    messages = []
    for call in (lambda: opt.reduce_gradients_to_owners(model),
                 lambda: opt.reduce_gradients_to_owners(ddp),
                 lambda: opt.reduce_gradients_to_owners(ddp),
                 opt.local_state_dict):
        try:
            call()
            messages.append("no error")
        except (MuonTypeError, FailedPreconditionError) as e:
            messages.append(f"{type(e).__name__}: {e}")
    if rank == 0:
        torch.save(messages, out)


def test_errors(tmp_path):
    out = str(tmp_path / "errors.pt")
    run_ranks(_errors, 2, out)
    messages = torch.load(out)
    assert messages[0].startswith("MuonTypeError: reduce_gradients_to_owners "
                                  "expects a torch.nn.parallel."
                                  "DistributedDataParallel module, got "
                                  "TinyTransformer"), messages[0]
    assert messages[1] == "no error"
    assert messages[2] == ("FailedPreconditionError: failed precondition: "
                           "the gradients are already reduced to their "
                           "owners"), messages[2]
    assert messages[3].startswith("FailedPreconditionError: failed "
                                  "precondition: local_state_dict() is not "
                                  "available once the gradients are reduced "
                                  "to their owners"), messages[3]
    assert issubclass(MuonTypeError, TypeError)


def test_one_process_is_refused():
    model = TinyTransformer()
    opt = make_opt(model)
    with pytest.raises(FailedPreconditionError, match="one data-parallel "
                       "axis of several ranks"):
        opt.reduce_gradients_to_owners(model)


def _add_group_after_switch(rank, world, out):
    # A Muon group added after the switch joins the matrices reduced to
    # their owners (the hook reads the optimizer's latest plan): the run
    # equals plain DDP with the same group added at the same step.
    torch.set_num_threads(1)
    results = {}
    for mode in ("ddp", "owner"):
        torch.manual_seed(0)
        model = TinyTransformer()
        ddp = DDP(model)
        muon, adamw = split_params(model)
        head = model.head.weight
        opt = Muon([{"params": [p for p in muon if p is not head]},
                    {"params": adamw, "use_muon": False, "lr": 3e-3}],
                   lr=0.02)
        if mode == "owner":
            opt.reduce_gradients_to_owners(ddp)
        for s in range(STEPS):
            if s == 2:
                opt.add_param_group({"params": [head]})
            x, y = batch(s, n=4 * world)
            model.zero_grad()
            loss_of(ddp, x[rank::world], y[rank::world]).backward()
            opt.step()
        # The momentum (summed over the ranks in owner mode): a head
        # gradient reduced twice would double it, which Newton-Schulz's
        # normalization hides from the weights.
        saved = opt.state_dict()["state"]
        results[mode] = [p.detach().clone() for p in model.parameters()] + [
            saved[i]["momentum_buffer"] for i in sorted(saved)
            if "momentum_buffer" in saved[i]]
    if rank == 0:
        torch.save(worst_difference(results["owner"], results["ddp"]), out)


def test_a_group_added_after_the_switch_is_reduced_to_owners(tmp_path):
    out = str(tmp_path / "worst.pt")
    run_ranks(_add_group_after_switch, 2, out)
    worst = torch.load(out)
    assert worst < 1e-5, worst


def _nan_summand(rank, world, out):
    # Rank 1's summand is NaN at step 1: every owner's sum is NaN, so the
    # step is skipped on every rank and nothing changes; the next step goes
    # on.
    import warnings
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TinyTransformer()
    ddp = DDP(model)
    opt = make_opt(model)
    opt.reduce_gradients_to_owners(ddp)
    seen = {}
    for s in range(3):
        opt.zero_grad()
        x, y = batch(s, n=4 * world)
        loss = loss_of(ddp, x[rank::world], y[rank::world])
        if s == 1 and rank == 1:
            loss = loss * float("nan")
        loss.backward()
        weights = [p.detach().clone() for p in model.parameters()]
        state = [t.clone() for p in model.parameters()
                 for t in opt.state[p].values() if torch.is_tensor(t)]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            opt.step()
        after = [t for p in model.parameters()
                 for t in opt.state[p].values() if torch.is_tensor(t)]
        seen[s] = {
            "skipped": any("step skipped" in str(w.message) for w in caught),
            "weights_kept": all(torch.equal(a, p) for a, p in
                                zip(weights, model.parameters())),
            "state_kept": all(torch.equal(a, b) for a, b in zip(state, after))}
    every = [None] * world
    dist.all_gather_object(every, seen)
    if rank == 0:
        torch.save(every, out)


def test_a_nan_summand_skips_the_step_on_every_rank(tmp_path):
    out = str(tmp_path / "nan.pt")
    run_ranks(_nan_summand, 2, out)
    for rank, seen in enumerate(torch.load(out)):
        assert seen[1] == {"skipped": True, "weights_kept": True,
                           "state_kept": True}, (rank, seen[1])
        for s in (0, 2):
            assert not seen[s]["skipped"] and not seen[s]["weights_kept"], (
                rank, s, seen[s])


class _Batched(torch.nn.Module):
    """A batched parameter (4 matrices of 8 x 8, which the plan spreads
    over the owners) beside a plain matrix and a vector."""

    def __init__(self):
        super().__init__()
        self.experts = torch.nn.Parameter(torch.randn(4, 8, 8) / 3)
        self.proj = torch.nn.Parameter(torch.randn(8, 8) / 3)
        self.scale = torch.nn.Parameter(torch.ones(8))

    def forward(self, x):
        h = torch.einsum("bi,eij->bej", x, self.experts).tanh().sum(1)
        return (h @ self.proj) * self.scale


def _batched_clip(rank, world, out):
    # The batched parameter's matrices have several owners: its norm is
    # taken over its whole gradient, summed from the owners' parts, so the
    # clipped training equals one process bit for bit.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = _Batched()
    start = copy.deepcopy(model)

    def make(m, **kw):
        return Muon([{"params": [m.experts], "stacked_matrices": True},
                     {"params": [m.proj]},
                     {"params": [m.scale], "use_muon": False, "lr": 3e-3}],
                    lr=0.02, **kw)

    def loss(m, s, r):
        g = torch.Generator().manual_seed(s)
        x = torch.randn(4 * world, 8, generator=g)
        return m(x[r::world]).square().mean()

    ddp = DDP(model)
    opt = make(model)
    opt.reduce_gradients_to_owners(ddp)
    owners = {o for _, _, o in opt._owner_segments[id(model.experts)]}
    norms = []
    for s in range(STEPS):
        opt.zero_grad()
        loss(ddp, s, rank).backward()
        norms.append(opt.clip_grad_norm_(0.01).item())
        opt.step()
    if rank:
        return
    ref_opt = make(start, distributed_config=ONE)
    ref_norms = []
    for s in range(STEPS):
        grads = []
        for r in range(world):
            ref_opt.zero_grad()
            loss(start, s, r).backward()
            grads.append([p.grad / world for p in start.parameters()])
        for i, p in enumerate(start.parameters()):
            p.grad = grads[0][i].clone()
            for r in range(1, world):
                p.grad += grads[r][i]
        ref_norms.append(torch.nn.utils.clip_grad_norm_(
            [p for g in ref_opt.param_groups for p in g["params"]],
            0.01).item())
        ref_opt.step()
    torch.save({"owners": sorted(owners), "norms": norms,
                "ref_norms": ref_norms,
                "exact": all(torch.equal(p, q) for p, q in
                             zip(model.parameters(), start.parameters()))},
               out)


def test_clip_grad_norm_of_a_parameter_with_several_owners(tmp_path):
    out = str(tmp_path / "batched.pt")
    run_ranks(_batched_clip, 2, out)
    got = torch.load(out)
    assert got["owners"] == [0, 1], got["owners"]
    assert got["norms"] == got["ref_norms"], (got["norms"], got["ref_norms"])
    assert got["exact"]


def _others_gradients_unread(rank, world, out):
    # What a rank holds in .grad for a matrix another rank owns is not read
    # by the step (its momentum there is zero and stays so, the owner's
    # NaN check sees the sum): garbage written there changes nothing.
    import warnings
    torch.set_num_threads(1)
    runs = []
    for garbage in (None, 7.0, float("nan")):
        torch.manual_seed(0)
        model = TinyTransformer()
        ddp = DDP(model)
        opt = make_opt(model)
        opt.reduce_gradients_to_owners(ddp)
        others = [p for p in model.parameters()
                  if id(p) in opt._owner_segments and
                  all(o != rank for _, _, o in opt._owner_segments[id(p)])]
        skipped = False
        for s in range(3):
            opt.zero_grad()
            x, y = batch(s, n=4 * world)
            loss_of(ddp, x[rank::world], y[rank::world]).backward()
            if garbage is not None:
                for p in others:
                    p.grad.fill_(garbage)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                opt.step()
            skipped |= any("step skipped" in str(w.message) for w in caught)
        momentum = [opt.state[p]["momentum_buffer"] for p in others]
        runs.append({"weights": [p.detach().clone()
                                 for p in model.parameters()],
                     "others": len(others), "skipped": skipped,
                     "zero": all(not m.any() for m in momentum)})
    every = [None] * world
    dist.all_gather_object(every, runs)
    if rank == 0:
        torch.save(every, out)


@pytest.mark.parametrize("world", [2, 4])
def test_the_other_ranks_matrix_gradients_are_not_read(tmp_path, world):
    out = str(tmp_path / "others.pt")
    run_ranks(_others_gradients_unread, world, out)
    for rank, (clean, sevens, nans) in enumerate(torch.load(out)):
        assert clean["others"] > 0, rank
        for run in (clean, sevens, nans):
            assert not run["skipped"] and run["zero"], (rank, run)
            assert all(torch.equal(a, b) for a, b in
                       zip(run["weights"], clean["weights"])), rank

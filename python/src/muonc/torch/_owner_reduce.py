"""Gradients reduced straight to their owners under DDP.

DDP all-reduces every gradient (2(N-1)/N of the bytes per rank); muonc then
sends each orthogonalized update from its owner to the other ranks
((N-1)/N more). With ``Muon.reduce_gradients_to_owners(ddp_model)``, DDP's
communication hook reduces each matrix's gradient to the one rank that
orthogonalizes it instead: one ``reduce`` per owner and bucket, started as
DDP hands the bucket over during the backward pass, so it overlaps the
rest of backward as DDP's all-reduce does. Each non-owner sends its
summand once ((N-1)/N of the bytes) and the owner's update comes back
((N-1)/N): DDP's all-reduce volume and no more.

After the hook a matrix's ``.grad`` is the mean over ranks on its owner and
zero elsewhere. The step is the plain data-parallel plan's (the gradient
counted whole where it is): the owner's momentum is the momentum of the
mean, the others' stays zero, so Muon's momentum, linear in the gradient,
is kept as summands whose sum over the ranks is the true one
(``state_dict()`` sums them).

A communication hook rather than a wrapper of our own: DDP keeps doing what
users rely on (buckets, ``no_sync`` accumulation, unused-parameter
detection, broadcasting buffers), and the hook is torch's documented way to
change how a bucket is reduced. Gradients of parameters the optimizer does
not orthogonalize alone (AdamW's, another optimizer's, matrices the
placement keeps on every rank) are all-reduced as DDP would.
"""
import torch
import torch.distributed as dist

from .._core import InvalidArgumentError, MuonTypeError
from ._settings import ELEMENT_SLOTS, ELEMENTWISE
from ._state import torch_name

__all__ = ["HookState", "check_ddp", "owner_reduce_hook", "owner_segments",
           "summed_state"]


def check_ddp(ddp_model, optimizer_params, group_ranks):
    """Refuses what the owner reduction cannot serve: not a DDP module, a
    process group other than the optimizer's, a parameter of the optimizer
    that DDP does not reduce."""
    from torch.nn.parallel import DistributedDataParallel
    if not isinstance(ddp_model, DistributedDataParallel):
        raise MuonTypeError(
            "reduce_gradients_to_owners expects a torch.nn.parallel."
            f"DistributedDataParallel module, got "
            f"{type(ddp_model).__name__}")
    have = dist.get_process_group_ranks(ddp_model.process_group)
    if list(have) != list(group_ranks):
        raise InvalidArgumentError(
            f"invalid argument: the DDP module's process group has ranks "
            f"{list(have)}, the optimizer's {list(group_ranks)}")
    ignored = getattr(ddp_model, "parameters_to_ignore", set()) or set()
    reduced = {id(p) for n, p in ddp_model.module.named_parameters()
               if p.requires_grad and n not in ignored}
    outside = [name for p, name in optimizer_params
               if p.requires_grad and id(p) not in reduced]
    if outside:
        raise InvalidArgumentError(
            f"invalid argument: parameters {outside} of the optimizer are "
            "not reduced by this DDP module; the owner reduction needs DDP "
            "to hand every gradient over")


def owner_segments(opt):
    """{id(parameter): [(start, length, owner rank)]}: the elements of each
    parameter (flattened) that one rank alone orthogonalizes, by the plan's
    assignments (a batched parameter's matrices may have different owners).
    Matrices several ranks orthogonalize (the placement's redundant ones)
    are not listed: their gradients are all-reduced."""
    holders = {}
    for rank, names in opt._engine.assignments().items():
        for name in names:
            holders.setdefault(name, []).append(rank)
    segments = {}
    for p, name, g in opt._params:
        if g["algorithm"] in ELEMENTWISE:
            continue
        size = p.shape[-2:].numel()
        matrices = ([(0, name)] if name in holders else
                    [(i * size, f"{name}[{i}]")
                     for i in range(p.numel() // size)])
        mine = [(start, size, holders[m][0]) for start, m in matrices
                if len(holders.get(m, ())) == 1]
        if mine:
            segments[id(p)] = mine
    return segments


class HookState:
    """What the hook needs: the optimizer (its _owner_segments, as of its
    latest plan, so a group added later joins), the process group, and the
    bytes this rank's reductions moved since the last step (what a reduce
    carries whatever the backend's algorithm: each non-owner's summand once
    to the owner)."""

    def __init__(self, optimizer, group):
        self.optimizer = optimizer
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.bytes_sent = 0
        self.bytes_received = 0

    def take_counters(self):
        sent, received = self.bytes_sent, self.bytes_received
        self.bytes_sent = self.bytes_received = 0
        return sent, received


def _spans_by_owner(segments, bucket):
    """{owner rank, or None for all-reduce: [(start, length)]} over the
    bucket's buffer, which holds its parameters' gradients one after the
    other in the order of bucket.parameters(); adjacent spans merged."""
    spans = {}

    def add(owner, start, length):
        if not length:
            return
        runs = spans.setdefault(owner, [])
        if runs and runs[-1][0] + runs[-1][1] == start:
            runs[-1] = (runs[-1][0], runs[-1][1] + length)
        else:
            runs.append((start, length))

    at = 0
    for p in bucket.parameters():
        done = 0
        for start, length, owner in segments.get(id(p), ()):
            add(None, at + done, start - done)
            add(owner, at + start, length)
            done = start + length
        add(None, at + done, p.numel() - done)
        at += p.numel()
    return spans


def owner_reduce_hook(state, bucket):
    """DDP communication hook: the bucket's gradients scaled by 1/N (DDP's
    mean); each owner's matrices reduced to it, the rest all-reduced; on
    return a matrix's gradient is the mean on its owner and zero
    elsewhere."""
    buffer = bucket.buffer()
    buffer.div_(state.size)
    spans = _spans_by_owner(state.optimizer._owner_segments, bucket)
    started = []
    for owner, runs in spans.items():
        flat = (buffer[runs[0][0]:runs[0][0] + runs[0][1]] if len(runs) == 1
                else torch.cat([buffer[a:a + n] for a, n in runs]))
        if owner is None:
            work = dist.all_reduce(flat, group=state.group, async_op=True)
        else:
            work = dist.reduce(flat, group=state.group, group_dst=owner,
                               async_op=True)
            size = flat.numel() * flat.element_size()
            if owner == state.rank:
                state.bytes_received += (state.size - 1) * size
            else:
                state.bytes_sent += size
        started.append((owner, runs, flat, work))

    def put_back(_):
        for owner, runs, flat, _ in started:
            if owner is not None and owner != state.rank:
                for a, n in runs:
                    buffer[a:a + n].zero_()
            elif len(runs) > 1:
                taken = 0
                for a, n in runs:
                    buffer[a:a + n].copy_(flat[taken:taken + n])
                    taken += n
        return buffer

    if not started:
        done = torch.futures.Future()
        done.set_result(buffer)
        return done
    if buffer.is_cuda:
        # One stream runs the group's collectives in order: the last one's
        # future (whose value carries its stream's event) covers them all.
        return started[-1][3].get_future().then(put_back)
    # A CPU backend may run them on several threads: wait for every one
    # (a wait() inside the callback can deadlock gloo's workers).
    return torch.futures.collect_all(
        [work.get_future() for _, _, _, work in started]).then(put_back)


def _per_summand_keys():
    keys = {}
    for s in ELEMENT_SLOTS:
        if s["per_summand"]:
            keys.setdefault(s["algorithm"], []).append(torch_name(s["name"]))
    return keys


def summed_state_views(opt):
    """{(parameter, torch state key): this rank's view (opt.state)} of the
    state kept as summands for the matrices reduced to their owners: Muon's
    momentum, linear in the gradient (the owner's is the momentum of its
    matrices' mean gradient, the other ranks' zero)."""
    keys = _per_summand_keys()
    reduced = opt._owner_segments
    return {(p, key): opt.state[p][key] for p, _, g in opt._params
            if id(p) in reduced for key in keys.get(g["algorithm"], ())
            if opt.state.get(p, {}).get(key) is not None}


def summed_state(opt):
    """{(parameter, torch state key): the state kept as summands, summed
    over the ranks into a new tensor}. Collective."""
    views = summed_state_views(opt)
    sums = {k: v.detach().clone() for k, v in views.items()}
    if sums:
        flat = torch.cat([t.reshape(-1) for t in sums.values()])
        dist.all_reduce(flat, group=opt._hook.group)
        at = 0
        for t in sums.values():
            t.copy_(flat[at:at + t.numel()].view_as(t))
            at += t.numel()
    return sums


def keep_owned_state(opt):
    """Zeroes this rank's summand state outside the matrices it owns: the
    whole state (loaded, or carried over from plain DDP) stays on the
    owners only."""
    segments = opt._owner_segments
    rank = opt._hook.rank
    for (p, _), view in summed_state_views(opt).items():
        flat = view.view(-1)
        for start, length, owner in segments[id(p)]:
            if owner != rank:
                flat[start:start + length].zero_()


def gather_to_new_owners(opt):
    """After the plan was compiled again (owners may have moved): every
    rank's summands added up, then kept on the owners. Collective."""
    for (p, key), total in summed_state(opt).items():
        opt.state[p][key].copy_(total)
    keep_owned_state(opt)


def total_grad_norm(opt, params, norm_type, error_if_nonfinite, foreach):
    """The norm of the whole gradient of `params` (those with a .grad) as
    torch.nn.utils.get_total_norm computes it in one process, with each
    owner-reduced parameter's norm taken over its owners (collective). A
    matrix with one owner contributes the owner's norm as is, so the total
    is the one-process total bit for bit; a batched parameter whose
    matrices have several owners adds their norms' powers."""
    norm_type = float(norm_type)
    segments = opt._owner_segments
    norms = [torch.linalg.vector_norm(p.grad, norm_type) for p in params]
    shared = [i for i, p in enumerate(params) if id(p) in segments]
    if shared:
        infinite = norm_type == float("inf")
        split = {i for i in shared
                 if len({o for _, _, o in segments[id(params[i])]}) > 1 or
                 sum(n for _, n, _ in segments[id(params[i])]) <
                 params[i].numel()}
        parts = torch.stack([
            norms[i].float() ** norm_type if i in split and not infinite
            else norms[i].float() for i in shared])
        dist.all_reduce(parts, op=dist.ReduceOp.MAX if infinite
                        else dist.ReduceOp.SUM, group=opt._hook.group)
        for k, i in enumerate(shared):
            value = (parts[k] ** (1.0 / norm_type)
                     if i in split and not infinite else parts[k])
            norms[i] = value.to(norms[i].dtype)
    return torch.nn.utils.get_total_norm(norms, norm_type,
                                         error_if_nonfinite, foreach)

"""Gradients reduced straight to their owners under DDP.

DDP all-reduces every gradient (2(N-1)/N of the bytes per rank); muonc then
sends each orthogonalized update from its owner to the other ranks
((N-1)/N more). With ``Muon.reduce_gradients_to_owners(ddp_model)``, DDP's
communication hook does not reduce the optimizer's gradients: it scales
each rank's summand by 1/N (what DDP's own hook does before summing) and
leaves it in place. The plan declares those gradients Partial over the
data-parallel axis, so the step sends each matrix's summands to its owner,
which sums them, runs Newton-Schulz and sends the update back: (N-1)/N +
(N-1)/N of the bytes, DDP's all-reduce volume and no more. The gradients
of element-wise parameters (AdamW's: every rank steps them) are
all-reduced by the hook as DDP would, which is the least traffic for them.

A communication hook rather than a wrapper of our own: DDP keeps doing what
users rely on (buckets, ``no_sync`` accumulation, unused-parameter
detection, broadcasting buffers), and the hook is torch's documented way to
change how a bucket is reduced. Gradients of parameters the optimizer does
not orthogonalize (AdamW's, another optimizer's) are all-reduced as DDP
would.
"""
import torch
import torch.distributed as dist

from .._core import (FailedPreconditionError, InvalidArgumentError,
                     MuonTypeError)

__all__ = ["HookState", "check_ddp", "owner_reduce_hook", "summed_state"]


def check_ddp(ddp_model, optimizer_params, world_size):
    """Refuses what the owner reduction cannot serve: not a DDP module, a
    process group other than the optimizer's size, a parameter of the
    optimizer that DDP does not reduce."""
    from torch.nn.parallel import DistributedDataParallel
    if not isinstance(ddp_model, DistributedDataParallel):
        raise MuonTypeError(
            "reduce_gradients_to_owners expects a torch.nn.parallel."
            f"DistributedDataParallel module, got "
            f"{type(ddp_model).__name__}")
    group = ddp_model.process_group
    size = dist.get_world_size(group)
    if size != world_size:
        raise InvalidArgumentError(
            f"invalid argument: the DDP module's process group has {size} "
            f"ranks, the optimizer's plan {world_size}")
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


class HookState:
    """What the hook needs: the optimizer (its _owner_ids: the parameters
    whose gradients the matrices' owners sum, as of its latest plan) and
    the DDP process group."""

    def __init__(self, optimizer, group):
        self.optimizer = optimizer
        self.group = group
        self.size = dist.get_world_size(group)


def owner_reduce_hook(state, bucket):
    """DDP communication hook: the gradients of the matrices the optimizer
    orthogonalizes stay this rank's summand, scaled by 1/N (the sum over
    ranks is DDP's mean); the others (element-wise parameters, other
    optimizers') are all-reduced as DDP's default hook does."""
    buffer = bucket.buffer()
    buffer.div_(state.size)
    # The bucket's buffer holds its parameters' gradients one after the
    # other, in the order of bucket.parameters().
    owned = state.optimizer._owner_ids
    rest, at = [], 0
    for p in bucket.parameters():
        if id(p) not in owned:
            rest.append((at, p.numel()))
        at += p.numel()
    if not rest:
        done = torch.futures.Future()
        done.set_result(buffer)
        return done
    flat = torch.cat([buffer[a:a + n] for a, n in rest])
    work = dist.all_reduce(flat, group=state.group, async_op=True)

    def put_back(fut):
        summed = fut.value()[0]
        taken = 0
        for a, n in rest:
            buffer[a:a + n].copy_(summed[taken:taken + n])
            taken += n
        return buffer

    return work.get_future().then(put_back)


def summed_state_views(opt):
    """This rank's views (opt.state) of the state kept per summand of the
    matrices reduced to their owners: Muon's momentum, linear in the
    gradient, so each rank keeps the momentum of its own summand and the
    owner gets their sum."""
    from ._settings import ELEMENT_SLOTS
    from ._state import torch_name
    keys = {}
    for s in ELEMENT_SLOTS:
        if s["per_summand"]:
            keys.setdefault(s["algorithm"], []).append(torch_name(s["name"]))
    return {(p, key): opt.state[p][key] for p, _, g in opt._owner_reduced()
            for key in keys.get(g["algorithm"], ())
            if opt.state.get(p, {}).get(key) is not None}


def summed_state(opt, group):
    """{(parameter, torch state key): the state kept per summand, summed
    over the ranks into a new tensor}. Collective. A state_dict() holds the
    sums, which load anywhere (onto summand 0 of a layout with summands,
    the others from zero)."""
    views = summed_state_views(opt)
    sums = {k: v.detach().clone() for k, v in views.items()}
    if sums:
        flat = torch.cat([t.reshape(-1) for t in sums.values()])
        dist.all_reduce(flat, group=group)
        at = 0
        for t in sums.values():
            t.copy_(flat[at:at + t.numel()].view_as(t))
            at += t.numel()
    return sums

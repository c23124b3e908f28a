"""The optimizer's state and the gradient norm under the owner reduction
(_owner_reduce.py): after DDP's hook a matrix's gradient is on its owner
only, so Muon's momentum is kept as summands, the owner's the momentum of
the mean and the other ranks' zero, which state_dict() sums and a new plan
moves to the new owners; and the norm of the whole gradient is taken over
the parts the ranks hold, as one process takes it."""
import torch
import torch.distributed as dist

from ._settings import ELEMENT_SLOTS
from ._state import torch_name

__all__ = ["gather_to_new_owners", "grad_norms", "keep_owned_state",
           "summed_state", "total_grad_norm"]


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
        opt._comm.all_reduce(flat)
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
    torch.nn.utils.get_total_norm computes it in one process, collective
    over the ranks, bit for bit."""
    return torch.nn.utils.get_total_norm(
        grad_norms(opt, params, norm_type), norm_type, error_if_nonfinite,
        foreach)


def grad_norms(opt, params, norm_type):
    """Each parameter's gradient norm (a 0-d tensor, in the order of
    `params`, those with a .grad) over the whole gradient, collective. A
    matrix with one owner contributes the owner's norm as is (the other
    ranks add zeros); a parameter whose matrices have several owners is
    summed whole first (each element comes from one rank, the others add
    zeros) and its norm taken as one process takes it. The infinity norm
    takes the largest of the ranks' norms, which is exact as it is."""
    norm_type = float(norm_type)
    segments = opt._owner_segments
    norms = [torch.linalg.vector_norm(p.grad, norm_type) for p in params]
    shared = [i for i, p in enumerate(params) if id(p) in segments]
    if not shared:
        return norms
    if norm_type == float("inf"):
        parts = torch.stack([norms[i].float() for i in shared])
        opt._comm.all_reduce(parts, op=dist.ReduceOp.MAX)
        for k, i in enumerate(shared):
            norms[i] = parts[k].to(norms[i].dtype)
        return norms
    whole = [i for i in shared if _several_holders(
        segments[id(params[i])], params[i].numel())]
    single = [i for i in shared if i not in whole]
    rank = opt._hook.rank
    flat = torch.cat(
        [torch.stack([norms[i].float() for i in single]).reshape(-1)
         if single else params[0].grad.new_zeros(0).float()] +
        [_this_ranks_part(params[i], segments[id(params[i])], rank)
         .float() for i in whole])
    opt._comm.all_reduce(flat)
    for k, i in enumerate(single):
        norms[i] = flat[k].to(norms[i].dtype)
    at = len(single)
    for i in whole:
        n = params[i].numel()
        norms[i] = torch.linalg.vector_norm(
            flat[at:at + n].to(params[i].grad.dtype), norm_type)
        at += n
    return norms


def _several_holders(spans, numel):
    """Whether a parameter's gradient is in parts on several ranks: its
    matrices have different owners, or some of it is on every rank."""
    return len({o for _, _, o in spans}) > 1 or \
        sum(n for _, n, _ in spans) < numel


def _this_ranks_part(p, spans, rank):
    """p's gradient (flat) where this rank holds it alone, the part every
    rank holds on rank 0 only, zeros elsewhere: summed over the ranks, the
    whole gradient, each element exact."""
    flat = p.grad.reshape(-1)
    part = torch.zeros_like(flat)
    done = 0
    for start, length, owner in spans:
        if rank == 0:
            part[done:start] = flat[done:start]
        if owner == rank:
            part[start:start + length] = flat[start:start + length]
        done = start + length
    if rank == 0:
        part[done:] = flat[done:]
    return part

"""Stock gradient clipping, right under the owner reduction.

After reduce_gradients_to_owners a matrix's gradient is whole on its owner
only (zero elsewhere). Every framework clips through
``torch.nn.utils.clip_grad_norm_`` on each rank (accelerate's and so the HF
Trainer's ``max_grad_norm``, Lightning's ``gradient_clip_val``, a user's
loop), which would take each rank's own part's norm: the ranks would clip
by different factors, or not clip at all where the whole gradient's norm
is past the limit, and their replicas would part. So while an optimizer
reduces gradients to owners, muonc wraps ``torch.nn.utils.clip_grad_norm_``
(and ``torch.nn.utils.clip_grad.clip_grad_norm_``): where the parameters
given include such an optimizer's, the norm is the whole gradient's,
collective over the ranks as FSDP's clipping is, each parameter's norm
taken as one process takes it; any other call is torch's own function,
unchanged. The wrapper goes when the last such optimizer does.
"""
from __future__ import annotations

import functools
import weakref

import torch

from . import _owner_reduce, _owner_state

__all__ = ["install"]

_OPTIMIZERS = weakref.WeakSet()
_ORIGINAL = None


def install(opt):
    """Routes stock clipping of `opt`'s parameters through the global norm
    from now on (reduce_gradients_to_owners calls it)."""
    global _ORIGINAL
    _OPTIMIZERS.add(opt)
    weakref.finalize(opt, _uninstall_when_unused)
    if _ORIGINAL is None:
        _ORIGINAL = torch.nn.utils.clip_grad_norm_
        torch.nn.utils.clip_grad_norm_ = _clip_grad_norm_
        torch.nn.utils.clip_grad.clip_grad_norm_ = _clip_grad_norm_


def _uninstall_when_unused():
    global _ORIGINAL
    if _ORIGINAL is not None and not any(True for _ in _OPTIMIZERS):
        torch.nn.utils.clip_grad_norm_ = _ORIGINAL
        torch.nn.utils.clip_grad.clip_grad_norm_ = _ORIGINAL
        _ORIGINAL = None


def _owner_reduced(parameters):
    """The owner-reducing optimizers some of `parameters` belong to, with
    the ids of theirs."""
    given = {id(p) for p in parameters}
    out = []
    for opt in list(_OPTIMIZERS):
        if opt._hook is None:
            continue
        mine = {id(p) for p, _, _ in opt._params}
        if mine & given:
            out.append((opt, mine))
    return out


def _clip_grad_norm_(parameters, max_norm, norm_type=2.0,
                     error_if_nonfinite=False, foreach=None):
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    else:
        parameters = list(parameters)
    owners = _owner_reduced(parameters)
    if not owners:
        return _ORIGINAL(parameters, max_norm, norm_type, error_if_nonfinite,
                         foreach)
    with torch.no_grad():
        params = [p for p in parameters if p.grad is not None]
        norms = {}
        for opt, mine in owners:
            _owner_reduce.finish_gradients(opt._hook)
            theirs = [p for p in params if id(p) in mine]
            for p, n in zip(theirs, _owner_state.grad_norms(opt, theirs,
                                                            norm_type)):
                norms[id(p)] = n
        ordered = [norms[id(p)] if id(p) in norms else
                   torch.linalg.vector_norm(p.grad, float(norm_type))
                   for p in params]
        total = torch.nn.utils.get_total_norm(ordered, norm_type,
                                              error_if_nonfinite, foreach)
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total,
                                             foreach)
    return total


functools.update_wrapper(_clip_grad_norm_, torch.nn.utils.clip_grad_norm_)

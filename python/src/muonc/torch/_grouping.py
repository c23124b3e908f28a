"""The usual split of a model's parameters between Muon and AdamW.

Muon is for the hidden layers' matrices; embeddings, the output head,
norms and biases train with AdamW (Keller Jordan's Muon, Moonlight,
torchtitan and dion all split so). ``param_groups(model)`` makes the two
groups from a module by what each parameter is: the weights of
``nn.Embedding`` / ``nn.EmbeddingBag`` modules, of the output head (the
module ``model.get_output_embeddings()`` returns, as Hugging Face models
have it, else a module named ``lm_head``, ``output``, ``head``,
``classifier`` or ``score``), and every parameter of fewer than 2 dims go
to AdamW; the other matrices to Muon; stacks of experts' matrices (3-D
parameters of a module whose class or name says expert) to a Muon group
of their own with ``stacked_matrices=True``; anything else of more than 2
dims (convolution kernels) to AdamW. Regular expressions over the
parameters' names override the choice either way.

``Muon.for_model(model, ...)`` and ``MuonFactory`` (the Hugging Face
Trainer's optimizer factory, ``optimizer_cls_and_kwargs=(MuonFactory,
{...})``) build the optimizer on these groups.
"""
from __future__ import annotations

import re

import torch

from .._core import InvalidArgumentError, MuonTypeError

__all__ = ["MuonFactory", "param_groups", "split_kwargs"]

# Output heads by the last part of their module's name, where the model
# does not say (get_output_embeddings).
HEAD_NAMES = ("lm_head", "output", "head", "classifier", "score")

# The keyword arguments of param_groups, which Muon.for_model and
# MuonFactory take beside Muon's own.
SPLIT_KEYS = ("adamw_lr", "adamw_betas", "adamw_eps", "adamw_weight_decay",
              "adamw_names", "muon_names")


def param_groups(model, *, adamw_lr=1e-3, adamw_betas=(0.9, 0.999),
                 adamw_eps=1e-8, adamw_weight_decay=0.01, adamw_names=(),
                 muon_names=()):
    """[Muon group, AdamW group] (and a stacked-experts Muon group where
    the model has one) of `model`'s trainable parameters, each group with
    its ``param_names``. AdamW's settings default to torch.optim.AdamW's;
    the Muon groups take the optimizer's. `adamw_names` / `muon_names`:
    regular expressions (re.search) over the parameters' names that send a
    parameter to AdamW / to Muon whatever it is (a Muon parameter must be
    a matrix, or a stack of them)."""
    if not isinstance(model, torch.nn.Module):
        raise MuonTypeError("param_groups takes a torch.nn.Module, not "
                            f"{type(model).__name__}")
    to_adamw = _patterns(adamw_names, "adamw_names")
    to_muon = _patterns(muon_names, "muon_names")
    owner = _owning_modules(model)
    heads = _output_heads(model)
    groups = {"muon": ([], []), "muon_stacked": ([], []), "adamw": ([], [])}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        kind = _kind(name, p, owner[id(p)], heads)
        if any(r.search(name) for r in to_adamw):
            kind = "adamw"
        elif any(r.search(name) for r in to_muon):
            if p.ndim < 2:
                raise InvalidArgumentError(
                    f"invalid argument: muon_names matches '{name}', of shape "
                    f"{tuple(p.shape)}: Muon takes matrices (or stacks of "
                    "them)")
            kind = "muon" if p.ndim == 2 else "muon_stacked"
        groups[kind][0].append(p)
        groups[kind][1].append(name)
    out = []
    for kind, (params, names) in groups.items():
        if not params:
            continue
        group = {"name": kind, "params": params, "param_names": names,
                 "use_muon": kind != "adamw"}
        if kind == "muon_stacked":
            group["stacked_matrices"] = True
        if kind == "adamw":
            group.update(lr=adamw_lr, betas=tuple(adamw_betas),
                         eps=adamw_eps, weight_decay=adamw_weight_decay)
        out.append(group)
    if not out:
        raise InvalidArgumentError("invalid argument: the model has no "
                                   "trainable parameters")
    return out


def split_kwargs(kwargs):
    """(param_groups' keyword arguments, the optimizer's) of a call to
    Muon.for_model or MuonFactory."""
    split = {k: kwargs[k] for k in SPLIT_KEYS if k in kwargs}
    rest = {k: v for k, v in kwargs.items() if k not in SPLIT_KEYS}
    return split, rest


class MuonFactory:
    """An optimizer factory: ``MuonFactory()(model, **kwargs)`` is
    ``Muon.for_model(model, **kwargs)``. The Hugging Face Trainer takes it
    as ``optimizer_cls_and_kwargs=(MuonFactory, {"lr": 0.02,
    "adamw_lr": 3e-4})``: it makes the factory and calls it with the model
    and the dict."""

    def __call__(self, model, **kwargs):
        from ._muon import Muon
        return Muon.for_model(model, **kwargs)


def _patterns(given, what):
    if isinstance(given, str):
        given = (given,)
    try:
        return [re.compile(p) for p in given]
    except (TypeError, re.error) as e:
        raise InvalidArgumentError(f"invalid argument: {what}: {e}") from None


def _owning_modules(model):
    """{id(parameter): the module that holds it} (the first in
    named_modules' order where a parameter is shared, as
    named_parameters names it)."""
    owner = {}
    for _, module in model.named_modules():
        for p in module.parameters(recurse=False):
            owner.setdefault(id(p), module)
    return owner


def _output_heads(model):
    """The output head's modules: what get_output_embeddings() returns,
    else those named as heads are."""
    get = getattr(model, "get_output_embeddings", None)
    if callable(get):
        try:
            head = get()
        except (NotImplementedError, AttributeError):
            head = None
        if isinstance(head, torch.nn.Module):
            return {id(head)}
    return {id(m) for n, m in model.named_modules()
            if n.rsplit(".", 1)[-1] in HEAD_NAMES}


def _kind(name, p, module, heads):
    if p.ndim < 2 or id(module) in heads or isinstance(
            module, (torch.nn.Embedding, torch.nn.EmbeddingBag)):
        return "adamw"
    if p.ndim == 2:
        return "muon"
    expert = "expert" in type(module).__name__.lower() or \
        "expert" in name.lower()
    return "muon_stacked" if p.ndim == 3 and expert else "adamw"

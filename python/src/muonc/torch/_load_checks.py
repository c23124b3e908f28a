"""A saved state checked whole before anything of the optimizer changes.

torch's ``load_state_dict`` checks the group count and sizes, maps the
saved state onto the parameters and hands it over; everything else is the
optimizer's to check. muonc checks all of it first: every group's
hyper-parameters as the constructor checks them, the keys that fix a
group's structure (``algorithm``, ``use_muon``), the step counts, and every
parameter's entry (a dict of tensors of the parameter's shape). The values
themselves (finite, non-negative second moments) the runtime checks as it
loads, all or nothing. Errors are torch's builtin classes (muonc's
InvalidArgumentError is a ValueError, MuonTypeError a TypeError) and name
the group or the parameter and the key.
"""
from __future__ import annotations

import torch

from .._core import InvalidArgumentError, MuonTypeError
from ._settings import (ELEMENTWISE, MATRIX_STEPS, check_element_group,
                        check_muon_group, element_slots)
from ._state import ENGINE_KEYS, checked_count, torch_name

__all__ = ["check_groups", "check_piece_dicts", "check_pieces",
           "check_torch_state"]


def check_groups(saved, mine, ns_dtype=None):
    """The saved groups (`saved`, each already merged over this
    optimizer's values) against this optimizer's (`mine`), in order; a
    Muon group's coefficients for the optimizer's `ns_dtype`."""
    for index, (g, m) in enumerate(zip(saved, mine)):
        where = f"param_groups[{index}] ('{m['name']}')"
        algorithm = g.get("algorithm", m["algorithm"])
        if algorithm != m["algorithm"]:
            raise InvalidArgumentError(
                f"invalid argument: {where} is {m['algorithm']} in this "
                f"optimizer but {algorithm!r} in the state (nothing was "
                "changed)")
        if "use_muon" in g:
            use_muon = g["use_muon"]
            if not isinstance(use_muon, bool):
                raise MuonTypeError(f"invalid argument: {where}: use_muon is "
                                    f"{use_muon!r}, not True or False")
            if use_muon != (m["algorithm"] == "muon"):
                raise InvalidArgumentError(
                    f"invalid argument: {where}: use_muon is {use_muon} in "
                    f"the state but the group is {m['algorithm']} here (a "
                    "group's optimizer is fixed at construction; nothing was "
                    "changed)")
        if "muonc_steps" in g:
            checked_count(f"{where}: muonc_steps", g["muonc_steps"])
        merged = dict(m, **{k: v for k, v in g.items()
                            if k not in ("params", "param_names")})
        try:
            if m["algorithm"] in ELEMENTWISE:
                check_element_group(merged)
            else:
                check_muon_group(merged, ns_dtype)
        except (ValueError, TypeError) as error:
            raise type(error)(f"{where}: {error}") from None


def check_torch_state(opt, state, groups):
    """Every parameter's entry of torch's mapped state (`state`, keyed by
    parameter) before any of it is loaded: a dict; its engine keys tensors
    (numbers for a step) of the parameter's shape."""
    for gi, group in enumerate(opt.param_groups):
        given = group.get("param_names")
        algorithm = group["algorithm"]
        slots = {torch_name(s) for s in element_slots(algorithm)}
        for pi, p in enumerate(group["params"]):
            if p not in state:
                continue
            name = (opt._names.get(id(p)) or (given[pi] if given else None)
                    or f"{group['name']}.{pi}")
            _check_entry(name, p, state[p], slots)


def _check_entry(name, p, entry, slots):
    where = f"the state of parameter '{name}'"
    if not isinstance(entry, dict):
        raise MuonTypeError(f"invalid argument: {where} is "
                            f"{type(entry).__name__} {_short(entry)}, not a "
                            "dict of its state tensors")
    for key, value in entry.items():
        if key not in ENGINE_KEYS:
            continue  # a hook's or the user's, kept as torch keeps it
        if key == "step":
            checked_count(f"{where}: step", value)
            continue
        if key in {st["state"] for st in MATRIX_STEPS}:
            if not isinstance(value, torch.Tensor):
                raise MuonTypeError(f"invalid argument: {where}: '{key}' is "
                                    f"{type(value).__name__}, not a tensor")
            continue
        if key not in slots:
            continue  # another algorithm's slot: refused by the runtime
        if not isinstance(value, torch.Tensor):
            raise MuonTypeError(f"invalid argument: {where}: '{key}' is "
                                f"{type(value).__name__} {_short(value)}, "
                                "not a tensor")
        if value.is_complex() or not (value.is_floating_point()):
            raise MuonTypeError(f"invalid argument: {where}: '{key}' is a "
                                f"{value.dtype} tensor, not a real floating "
                                "one")
        if tuple(value.shape) != tuple(p.shape):
            raise InvalidArgumentError(
                f"invalid argument: {where}: '{key}' has shape "
                f"{tuple(value.shape)}, the parameter {tuple(p.shape)}")


def _short(value):
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_piece_dicts(dicts):
    """The outline of local_state_dict()s (or a list of every rank's):
    dicts with a 'state' dict and a 'param_groups' list of dicts with
    'params'."""
    for i, d in enumerate(dicts):
        where = "the state dict" if len(dicts) == 1 else f"state dict [{i}]"
        if not isinstance(d, dict):
            raise MuonTypeError(f"invalid argument: {where} is "
                                f"{type(d).__name__}, not a dict")
        if not isinstance(d.get("state"), dict):
            raise MuonTypeError(f"invalid argument: {where}: 'state' is "
                                f"{type(d.get('state')).__name__}, not a dict")
        groups = d.get("param_groups")
        if not isinstance(groups, list) or not all(
                isinstance(g, dict) and isinstance(g.get("params"), list)
                for g in groups):
            raise MuonTypeError(f"invalid argument: {where}: 'param_groups' "
                                "is not a list of dicts with 'params' lists")


def check_pieces(name, entry):
    """A parameter's entry of local_state_dict(): 'pieces', a list of dicts
    with a box of (begin, end) pairs, summand and summands, a step count
    and 'states', tensors by slot."""
    where = f"the state of parameter '{name}'"
    pieces = entry["pieces"]
    if not isinstance(pieces, list):
        raise MuonTypeError(f"invalid argument: {where}: 'pieces' is "
                            f"{type(pieces).__name__}, not a list")
    for i, pc in enumerate(pieces):
        at = f"{where}: pieces[{i}]"
        if not isinstance(pc, dict) or not {"box", "summand", "summands",
                                            "step", "states"} <= set(pc):
            raise MuonTypeError(f"invalid argument: {at} is not a dict with "
                                "box, summand, summands, step and states")
        box = pc["box"]
        if not isinstance(box, (list, tuple)) or not all(
                isinstance(r, (list, tuple)) and len(r) == 2 and
                all(_whole(x) for x in r) for r in box):
            raise MuonTypeError(f"invalid argument: {at}: box {_short(box)} "
                                "is not a list of (begin, end) integers")
        for key in ("summand", "summands"):
            if not _whole(pc[key]):
                raise MuonTypeError(f"invalid argument: {at}: {key} "
                                    f"{_short(pc[key])} is not an integer")
        checked_count(f"{at}: step", pc["step"])
        states = pc["states"]
        if not isinstance(states, dict) or not all(
                isinstance(v, torch.Tensor) and v.is_floating_point()
                for v in states.values()):
            raise MuonTypeError(f"invalid argument: {at}: states is not a "
                                "dict of floating-point tensors")


def _whole(x):
    return isinstance(x, int) and not isinstance(x, bool) and \
        -2 ** 63 <= x < 2 ** 63

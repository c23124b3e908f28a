"""The optimizer state between the runtime and torch's formats.

The runtime owns the state (Muon's momentum, AdamW's moments and step
counts), one f32 buffer per slot of each parameter's local piece.
``opt.state[p]`` holds views of those buffers under torch's names, with the
parameter's layout (a DTensor for a DTensor parameter), so that torch's own
``state_dict()`` and every tool that reads ``opt.state`` see the live state
with no copy. Loading goes the other way: torch's ``load_state_dict`` (or a
copy of the optimizer) hands the state tensors over, and they are cut into
the runtime's pieces by global box, which it loads all or nothing.

A second format moves between layouts without DCP: ``local_state_dict()``,
this rank's pieces by global box, whose list over every rank loads under
any other layout or world size.
"""
from __future__ import annotations

import math
import numbers
import pickle

import numpy as np
import torch

from .._core import InternalError, InvalidArgumentError, MuonTypeError
from ._layouts import is_dtensor, like, local
from ._settings import (ALGORITHMS, ELEMENT_SLOTS, MATRIX_STEPS,
                        TORCH_STATE_NAMES, counts_steps, element_slots,
                        table_settings)


def _title(algorithm):
    """An algorithm's name in messages ("AdamW")."""
    return next(a["title"] for a in ALGORITHMS if a["name"] == algorithm)


def torch_name(slot):
    """A runtime state slot's key in torch's state."""
    return TORCH_STATE_NAMES.get(slot, slot)


# The keys of opt.state[p] that are the engine's (views of its buffers, the
# per-row states gathered from it): every other key is a hook's or the
# user's, which torch's state_dict() keeps as it is.
ENGINE_KEYS = frozenset(
    [torch_name(s["name"]) for s in ELEMENT_SLOTS] + ["step"] +
    [st["state"] for st in MATRIX_STEPS])


def box(opt, name, p):
    """This rank's piece of a parameter as a global box."""
    slot = opt._slots.get(name)
    if slot is None:
        return [(0, n) for n in p.shape]
    if not slot["box"] and p.ndim:
        # An empty shard (torch.chunk's trailing chunks): the plan gives no
        # box; the local tensor's shape, 0 on the split dim.
        return [(0, n) for n in local(p).shape]
    return [tuple(r) for r in slot["box"]]


def matrix_steps(group):
    """The per-matrix steps a group turns on (NorMuon)."""
    return [st for st in MATRIX_STEPS
            if group["algorithm"] == "muon" and group.get(st["setting"])]


# --- opt.state as views of the runtime's state ---------------------------

def attach_views(opt):
    """Sets every parameter's state in opt.state to views of the runtime's
    buffers (its momentum_buffer; exp_avg, exp_avg_sq and step), keeping
    other keys (a per-row state gathered by state_dict(), while its group
    keeps it)."""
    engine = opt._engine
    for p, name, group in opt._params:
        shape = tuple(local(p).shape)
        entry = opt.state[p]
        for slot in element_slots(group["algorithm"]):
            view = engine.state_view(name, slot)
            t = (torch.from_dlpack(view).view(shape) if view is not None
                 else torch.zeros(shape, dtype=torch.float32))
            entry[torch_name(slot)] = like(p, t)
        if counts_steps(group["algorithm"]):
            count = engine.step_count_view(name)
            entry["step"] = (torch.from_dlpack(count) if count is not None
                             else torch.tensor(0, dtype=torch.int64))
        kept = {st["state"] for st in matrix_steps(group)}
        for st in MATRIX_STEPS:
            if st["state"] not in kept:
                entry.pop(st["state"], None)  # a per-row state turned off


def every_row_state(opt, raw):
    """Every rank's per-row states, {(param, slice, state): values}
    (float32 numpy), from this rank's raw state dict; collective when there
    are several ranks (each matrix's rows are on its owner)."""
    mine = [(r["param"], int(r["slice"]), r["state"],
             np.ascontiguousarray(r["values"], dtype=np.float32))
            for r in raw.get("row_states", [])]
    every = [mine]
    if opt._comm is not None:
        every = [pickle.loads(b) for b in
                 opt._engine.all_gather_bytes(pickle.dumps(mine))]
    rows = {}
    for rank_rows in every:
        for param, piece, state, values in rank_rows:
            rows.setdefault((param, piece, state), values)
    return rows


def row_shape(opt, name, p):
    """The shape of a Muon parameter's per-row state (normuon_v):
    (matrices, rows), its matrices the batch slices times the heads (slice
    index order), each with one value per row of the matrix (per head when
    the heads split the rows)."""
    heads, dim = opt._heads.get(name, (1, 0))
    shape = tuple(p.shape)
    rows = shape[-2] // heads if dim == 0 else shape[-2]
    return (math.prod(shape[:-2]) * heads, rows)


def _matrix_state(opt, name, p, rows, step):
    """A parameter's per-row state of per-matrix step `step` (NorMuon's
    normuon_v): a plain float32 tensor of row_shape, row i the state of its
    matrix (slice) i."""
    slices, length = row_shape(opt, name, p)
    out = torch.zeros((slices, length), dtype=torch.float32)
    for s in range(slices):
        values = rows.get((name, s, step["state"]))
        if values is None or values.size != length:
            raise InternalError(
                f"internal: parameter '{name}': no rank holds "
                f"{step['title']}'s per-row state of its matrix {s} with "
                f"{length} rows"
                + ("" if values is None else f" (one holds {values.size})"))
        out[s] = torch.from_numpy(values)
    return out


def refresh_row_states(opt):
    """Puts each NorMuon parameter's per-row state (normuon_v, whole, as
    every rank holds it) into opt.state, gathered from the matrices' owners.
    Collective where some group is NorMuon; a no-op elsewhere."""
    with_steps = [(p, name, st) for p, name, g in opt._params
                  for st in matrix_steps(g)]
    if not with_steps:
        return
    rows = every_row_state(opt, opt._engine.state_dict(False))
    for p, name, st in with_steps:
        opt.state[p][st["state"]] = _matrix_state(opt, name, p, rows, st)


# --- loading torch's format ----------------------------------------------

def _flat(t):
    t = t._local_tensor if is_dtensor(t) else t
    return np.ascontiguousarray(t.detach().cpu().float().numpy().reshape(-1))


def rows_of(opt, p, name, group, step, v):
    """The runtime's row states of a saved per-row state of per-matrix step
    `step` (normuon_v), checked."""
    key = step["state"]
    if group["algorithm"] != "muon":
        raise InvalidArgumentError(
            f"invalid argument: parameter '{name}': the state has '{key}' "
            f"({step['title']}'s per-row state), but the parameter is in "
            f"{_title(group['algorithm'])} group '{group['name']}'")
    if is_dtensor(v):
        from torch.distributed.tensor import Replicate
        if not all(isinstance(pl, Replicate) for pl in v.placements):
            raise InvalidArgumentError(
                f"invalid argument: parameter '{name}': state '{key}' is a "
                f"DTensor laid out as {list(v.placements)}; it must be whole "
                "(a plain or replicated tensor)")
        v = v._local_tensor
    v = torch.as_tensor(v)
    want = row_shape(opt, name, p)
    if tuple(v.shape) != want:
        raise InvalidArgumentError(
            f"invalid argument: parameter '{name}': state '{key}' has shape "
            f"{tuple(v.shape)}, expected {want} ({want[0]} matrices of "
            f"{want[1]} rows)")
    v = v.detach().cpu().float()
    return [{"param": name, "slice": s, "state": key,
             "values": np.ascontiguousarray(v[s].numpy())}
            for s in range(want[0])]


def pieces_of(opt, p, name, group, entry, foreign):
    """The runtime's pieces of one parameter's saved state: a
    local_state_dict()'s pieces, or torch's entry (whole tensors, or
    DTensors laid out as the parameter). `foreign`: the entry comes from
    a list of several ranks' dicts."""
    if "pieces" in entry:
        from ._load_checks import check_pieces
        check_pieces(name, entry)
        return [{"param": name, "box": [tuple(r) for r in pc["box"]],
                 "summand": pc["summand"], "summands": pc["summands"],
                 "step": pc["step"],
                 "states": {k: _flat(v) for k, v in pc["states"].items()}}
                for pc in entry["pieces"]]
    states, here = {}, None
    for slot in element_slots(group["algorithm"]):
        key = torch_name(slot)
        if key not in entry:
            raise InvalidArgumentError(f"invalid argument: parameter "
                                       f"'{name}': the state has no '{key}'")
        v = entry[key]
        if not isinstance(v, torch.Tensor):
            raise InvalidArgumentError(
                f"invalid argument: parameter '{name}': state '{key}' is a "
                f"{type(v).__name__}, not a tensor")
        if tuple(v.shape) != tuple(p.shape):
            raise InvalidArgumentError(
                f"invalid argument: parameter '{name}': state '{key}' has "
                f"shape {tuple(v.shape)}, the parameter {tuple(p.shape)}")
        if is_dtensor(v):
            if foreign:
                raise InvalidArgumentError(
                    "invalid argument: a list of state dicts with DTensors: "
                    "load the list of local_state_dict(), or load "
                    "state_dict() through torch.distributed.checkpoint, "
                    "which reshards it")
            here = box(opt, name, p)
            if tuple(v._local_tensor.shape) != tuple(e - b for b, e in here):
                raise InvalidArgumentError(
                    f"invalid argument: parameter '{name}': state '{key}' is "
                    f"laid out as {list(v.placements)}, not as the parameter "
                    f"{list(p.placements)}")
        else:
            here = [(0, n) for n in p.shape]
        states[slot] = _flat(v)
    step = 0
    if counts_steps(group["algorithm"]):
        step = _step_count(name, entry.get("step", 0))
    if any(b == e for b, e in here):
        return []  # an empty shard: nothing of it here
    return [{"param": name, "box": here, "summand": 0, "summands": 1,
             "step": step, "states": states}]


# The largest step count a state may carry: every count below it is exact
# in float64 (torch's AdamW keeps "step" as a float tensor) and in int64.
MAX_STEPS = 2 ** 53


def _step_count(name, value):
    """A saved step count (a tensor or a number, as torch's AdamW keeps
    it), as an integer."""
    return checked_count(f"parameter '{name}': step", value)


def checked_count(what, value):
    """A step count (a 1-element tensor or a real number, not a bool), as
    an integer in [0, MAX_STEPS]; else torch's TypeError or ValueError
    naming `what`."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_complex():
            raise InvalidArgumentError(
                f"invalid argument: {what} is a tensor of shape "
                f"{tuple(value.shape)} and dtype {value.dtype}; expected one "
                "real number")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise MuonTypeError(f"invalid argument: {what} is a "
                            f"{type(value).__name__}, not a number")
    count = float(value)
    if not math.isfinite(count) or count < 0 or count != int(count) or \
            count > MAX_STEPS:
        raise InvalidArgumentError(f"invalid argument: {what} {value!r} is "
                                   f"not a whole number in [0, 2**53]")
    return int(count)


def zero_pieces(opt, p, name, group):
    """This rank's piece of a parameter with zero state: what a parameter
    the saved state does not mention starts from (torch's fresh state)."""
    here = box(opt, name, p)
    if not here or any(b == e for b, e in here):
        return []
    n = math.prod(e - b for b, e in here)
    return [{"param": name, "box": here, "summand": 0, "summands": 1,
             "step": 0,
             "states": {slot: np.zeros(n, dtype=np.float32)
                        for slot in element_slots(group["algorithm"])}}]


def _steps_of(groups, pieces):
    """The optimizer's step count of a saved state: muonc's own (its groups'
    muonc_steps), else the largest AdamW piece's."""
    for g in groups:
        if "muonc_steps" in g:
            return int(g["muonc_steps"])
    return max([pc["step"] for pc in pieces], default=0)


def load_torch_state(opt, state, groups, steps=None):
    """Loads torch's state (by parameter, as torch's load_state_dict has
    mapped and cast it) into the runtime, all or nothing: every parameter
    the state does not mention starts from zeros, as in torch. `groups`:
    the saved param_groups (their muonc_steps, else `steps`, else the
    largest AdamW step count, is the optimizer's step count). Raises, with
    nothing changed, when the state does not fit."""
    pieces, rows = [], []
    for p, name, group in opt._params:
        entry = state.get(p)
        if not entry:
            pieces.extend(zero_pieces(opt, p, name, group))
            continue
        for st in MATRIX_STEPS:
            if st["state"] in entry:
                rows.extend(rows_of(opt, p, name, group, st,
                                    entry[st["state"]]))
        pieces.extend(pieces_of(opt, p, name, group, entry, False))
    if opt._comm is not None:
        # Every rank's rows: each matrix's owner takes its own.
        every = opt._engine.all_gather_bytes(pickle.dumps(rows))
        rows = [r for b in every for r in pickle.loads(b)]
    if steps is None:
        steps = _steps_of(groups, pieces)
    opt._engine.load_state_dict(
        {"steps": int(steps), "pieces": pieces,
         "groups": engine_groups(groups),
         "row_states": _unique_rows(rows)}, False)


def engine_groups(groups):
    """Groups (with every key, this optimizer's names and algorithms) as the
    runtime's load takes them: it applies their settings and, where a group
    is NorMuon, refuses a state without its matrices' per-row states."""
    return [{"name": g["name"], "algorithm": g["algorithm"],
             **table_settings(g)} for g in groups]


def _unique_rows(saved):
    """The per-row states, each matrix once (all of them, every rank's
    owned matrices: the new owners take theirs)."""
    rows, seen = [], set()
    for r in saved:
        key = (r["param"], int(r["slice"]), r["state"])
        if key not in seen:
            seen.add(key)
            rows.append({"param": r["param"], "slice": int(r["slice"]),
                         "state": r["state"],
                         "values": np.ascontiguousarray(
                             torch.as_tensor(r["values"]).float()
                             .numpy().reshape(-1))})
    return rows


# --- local_state_dict(): pieces by global box -----------------------------

def local_state_dict(opt, param_groups):
    """This rank's state as pieces by global box (plain tensors, no
    DTensor); `param_groups`: torch's packed groups (state_dict()'s)."""
    raw = opt._engine.state_dict(False)
    index = {name: i for i, (_, name, _) in enumerate(opt._params)}
    state = {}
    for piece in raw["pieces"]:
        i = index[piece["param"]]
        entry = state.setdefault(i, {"pieces": []})
        entry["pieces"].append({
            "box": [tuple(r) for r in piece["box"]],
            "summand": piece["summand"], "summands": piece["summands"],
            "step": piece["step"],
            "states": {k: torch.from_numpy(v)
                       for k, v in piece["states"].items()}})
    for g in param_groups:
        g["muonc_steps"] = raw["steps"]
    rows = [{"param": r["param"], "slice": r["slice"], "state": r["state"],
             "values": torch.from_numpy(r["values"])}
            for r in raw.get("row_states", [])]
    return {"state": state, "param_groups": param_groups,
            "muonc": {"steps": raw["steps"], "names": opt.param_names,
                      "row_states": rows}}


def is_piece_format(state_dict):
    """Whether a state dict is local_state_dict()'s (pieces by box) or a
    list of several ranks' dicts, which load_dicts reads."""
    if isinstance(state_dict, (list, tuple)):
        return True
    if not isinstance(state_dict, dict):
        return False
    if "row_states" in state_dict.get("muonc", {}):
        return True
    return any(isinstance(e, dict) and "pieces" in e
               for e in state_dict.get("state", {}).values())


def load_dicts(opt, dicts, groups):
    """Loads local_state_dict() of this layout, or the list of every rank's
    local_state_dict() (or state_dict() of plain parameters) of another
    layout or world size; `groups`: the groups the optimizer will have
    (the saved hyper-parameters)."""
    saved = dicts[0]["param_groups"]
    if len(saved) != len(opt.param_groups):
        raise InvalidArgumentError(
            f"invalid argument: the state has {len(saved)} parameter groups, "
            f"this optimizer {len(opt.param_groups)}")
    for g, mine in zip(saved, opt.param_groups):
        if len(g["params"]) != len(mine["params"]):
            raise InvalidArgumentError(
                f"invalid argument: group '{mine['name']}': the state has "
                f"{len(g['params'])} parameters, the optimizer "
                f"{len(mine['params'])}")
    pieces, seen, saved_rows = [], set(), []
    for d in dicts:
        saved_rows.extend(d.get("muonc", {}).get("row_states", []))
        keys = [k for g in d["param_groups"] for k in g["params"]]
        where = {k: i for i, k in enumerate(keys)}
        for k, entry in d["state"].items():
            if k not in where:
                raise InvalidArgumentError(
                    f"invalid argument: the state names parameter {k!r}, "
                    "which its param_groups do not list")
            p, name, group = opt._params[where[k]]
            for st in MATRIX_STEPS:
                if st["state"] in entry:
                    saved_rows.extend(rows_of(opt, p, name, group, st,
                                              entry[st["state"]]))
            for piece in pieces_of(opt, p, name, group, entry,
                                   len(dicts) > 1):
                key = (name, tuple(piece["box"]), piece["summand"])
                if key in seen:
                    continue  # a replicated state, once is enough
                seen.add(key)
                pieces.append(piece)
    steps = _steps_of(saved, pieces)
    if "muonc_steps" not in saved[0] and "muonc" in dicts[0]:
        steps = dicts[0]["muonc"]["steps"]
    opt._engine.load_state_dict(
        {"steps": int(steps), "pieces": pieces,
         "groups": engine_groups(groups),
         "row_states": _unique_rows(saved_rows)}, False)

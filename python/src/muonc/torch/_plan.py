"""The plan of an optimizer's step, compiled in process from its parameters'
shapes, dtypes and layouts and its groups' plan settings."""
from __future__ import annotations

import torch

from .. import _core
from .._core import InvalidArgumentError, UnavailableError
from ._layouts import layout_of
from ._settings import scalar, table_settings

_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def dtype_name(p, name):
    """The runtime's name of a parameter's element type."""
    try:
        return _DTYPES[p.dtype]
    except KeyError:
        raise InvalidArgumentError(
            f"invalid argument: parameter '{name}' is {p.dtype}; muonc steps "
            "float32, bfloat16 and float16 parameters") from None


def engine_device(params):
    """The one device of the parameters ((parameter, name, group)
    triples): the CPU, or a GPU where muonc has the CUDA backend."""
    devices = {}
    for p, name, _ in params:
        devices.setdefault(str(p.device), name)
    where = ", ".join(f"'{n}' on {d}" for d, n in devices.items())
    if len(devices) > 1:
        raise InvalidArgumentError(
            "invalid argument: muonc.torch steps parameters on one device; "
            f"they are on {len(devices)} devices ({where})")
    device = torch.device(next(iter(devices), "cpu"))
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type == "cuda" and not _core.cuda_built():
        raise UnavailableError(
            f"unavailable: parameters on {device} ({where}), but muonc was "
            "built without the CUDA backend (build it where CMake finds nvcc "
            "and cuBLAS)")
    if device.type not in ("cpu", "cuda"):
        raise InvalidArgumentError(f"invalid argument: parameters on {device} "
                                   f"({where}): muonc runs on CPU and CUDA "
                                   "tensors")
    return device


def _plan_group(group, ns_dtype):
    """A param group as the compiler takes it: its name, algorithm, the
    table's settings and, for Muon, Newton-Schulz's."""
    g = {"name": group["name"], "algorithm": group["algorithm"]}
    g.update(table_settings(group))
    if group["algorithm"] == "muon":
        g.update(eps=scalar(group["eps"]), ns_steps=int(group["ns_steps"]),
                 ns_coefficients=[float(c) for c in group["ns_coefficients"]],
                 ns_dtype=ns_dtype)
    return g


def compile_plan(params, groups, config, heads, qk_clip, ns_dtype,
                 wire_dtype, cache=None):
    """The plan (JSON text) of `params` ((parameter, name, group) triples)
    in `groups` (torch's param_groups), laid out by `config` (None: one
    process) with per-head splits `heads` ({name: (heads, dim)}) and the
    QK-clip layers `qk_clip`. `cache`: a dict that keeps the last plan by
    what it was compiled from (an optimizer checks its arguments on the
    plan at construction and builds with the same plan at its first step
    when nothing changed)."""
    plan_params = []
    for p, name, group in params:
        entry = {"name": name, "shape": list(p.shape),
                 "dtype": dtype_name(p, name), "group": group["name"]}
        if name in heads:
            entry["num_heads"], entry["head_split_dim"] = heads[name]
        if config is not None:
            entry["placements"], split = layout_of(p, name, config)
            if split:
                entry["split"] = split
        plan_params.append(entry)
    plan_groups = [_plan_group(g, ns_dtype) for g in groups]
    mesh = None
    if config is not None:
        mesh = {k: config[k] for k in ("shape", "names", "async")}
        mesh["wire_dtype"] = wire_dtype
        for key in ("assignments", "placement", "redundant_below",
                    "placement_machine"):
            if key in config:
                mesh[key] = config[key]
    if cache is None:
        return _core.compile_model(plan_params, plan_groups, mesh,
                                   qk_clip or None)
    key = repr((plan_params, plan_groups, mesh, qk_clip))
    if cache.get("key") != key:
        plan = _core.compile_model(plan_params, plan_groups, mesh,
                                   qk_clip or None)
        cache.update(key=key, plan=plan)
    return cache["plan"]

"""muonc.torch: distributed Muon as a torch.optim.Optimizer.

    from muonc.torch import Muon
    opt = Muon([{"params": matrices},                     # Muon
                {"params": others, "use_muon": False}],   # AdamW
               lr=0.02)
    for batch in data:
        loss(model(batch)).backward()
        opt.step(); opt.zero_grad()

Takes torch.optim.Muon's arguments and defaults. Hyper-parameters are read
from ``param_groups`` at every step, so torch.optim.lr_scheduler works
unchanged. With torch.distributed initialized, the parameters' layout
decides the plan: plain tensors (DDP) are replicated over the process
group; DTensors (FSDP2 fully_shard, TP) bring their placements and mesh.
Exchanges go through torch.distributed (gloo on the CPU). See
docs/pytorch.md for what works and what does not yet.
"""
from __future__ import annotations

import atexit
import gc
import math
import numbers
import os
import pickle
import weakref
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from . import _core
from ._core import MuonError

__all__ = ["Muon", "MuonError", "TorchCommunicator", "create_dtensor_config"]

DEFAULT_NS_COEFFICIENTS = (3.4445, -4.775, 2.0315)

# The group settings, described once in the runtime's table
# (muon/Plan/GroupSettings.h; _core.group_settings()); torch.optim.Muon's
# names where they differ from ours.
_SETTINGS = _core.group_settings()
_TORCH_NAMES = {"adjust_lr": "adjust_lr_fn"}

# The optimizer state, described once in the runtime too: the per-element
# slots of each algorithm (muon/Plan/ElementState.h), under torch's
# names where they differ, and the per-matrix steps with their per-row
# state (muon/Runtime/MatrixStep.h: NorMuon's normuon_v).
_ELEMENT_SLOTS = _core.element_slots()
_TORCH_STATE_NAMES = {"momentum": "momentum_buffer"}
_MATRIX_STEPS = _core.matrix_steps()


def _setting_names(name):
    """The values a Muon setting of closed names takes."""
    return tuple(next(s["names"] for s in _SETTINGS
                      if s["algorithm"] == "muon" and s["name"] == name))


# What a step reads from a group, per algorithm: the settings the plan does
# not fix, under torch's keys. The rest is compiled into the plan (Newton-
# Schulz's settings, and the fixed settings: NorMuon decides which
# matrices carry state) and may not change after construction.
_MUON_KEYS = tuple(_TORCH_NAMES.get(s["json_key"], s["json_key"])
                   for s in _SETTINGS
                   if s["algorithm"] == "muon" and not s["fixed"])
_ADAMW_KEYS = tuple(dict.fromkeys(s["json_key"] for s in _SETTINGS
                                  if s["algorithm"] == "adamw"))
_NS_KEYS = ("ns_coefficients", "eps", "ns_steps")
_PLAN_KEYS = _NS_KEYS + tuple(
    s["name"] for s in _SETTINGS if s["algorithm"] == "muon" and s["fixed"])


def _torch_key(setting):
    """A setting's key in torch's param_groups."""
    return _TORCH_NAMES.get(setting["json_key"], setting["json_key"])


def _table_value(setting, group):
    """group's value of a table setting, as the runtime takes it (torch's
    adjust_lr_fn None is "original"; a shared key's values as a list)."""
    value = group[_torch_key(setting)]
    if value is None:
        return setting["default"]
    cast = {"number": float, "flag": bool, "name": str}[setting["kind"]]
    if isinstance(value, (tuple, list)):
        return [cast(v) for v in value]
    return cast(value)


def _table_settings(group, algorithm, *, fixed=True):
    """The table's settings of `algorithm` from a param group, by the
    runtime's names: what compile_model and Optimizer.set_group take. A
    setting of a flag that is off is left out (the plan refuses it)."""
    out = {}
    for x in (x for x in _SETTINGS if x["algorithm"] == algorithm):
        if not fixed and x["fixed"]:
            continue
        if x["only_with"] and not group.get(x["only_with"]):
            continue
        out[x["json_key"]] = _table_value(x, group)
    return out
# Per-head Newton-Schulz: compiled into the plan too (it decides the
# matrices), but free to differ between groups.
_HEAD_KEYS = ("num_heads", "head_split_dim")


class TorchCommunicator:
    """The runtime's communicator over a torch.distributed process group:
    the plan's packed exchanges as all_to_all_single with split sizes, the
    control collectives as all_gather. The runtime hands it host memory (a
    GPU optimizer stages its device buffers through the host): a gloo group
    takes it as it is; an NCCL group gets it copied to and from the current
    GPU."""

    def __init__(self, group=None):
        self.group = group
        self._rank = dist.get_rank(group)
        self._size = dist.get_world_size(group)
        self._device = None  # where the group's collectives need tensors
        if dist.get_backend(group) == "nccl":
            self._device = torch.device("cuda", torch.cuda.current_device())

    @classmethod
    def owned(cls, ranks=None):
        """A communicator over a gloo group of its own on `ranks` (default:
        every rank), made collectively. Its own because the exchanges move
        CPU tensors (the default group may be NCCL), and because the group
        must be gone before the interpreter finalizes: gloo's worker threads
        release a collective's tensors after it returns, and one doing so
        while Python shuts down aborts the process ("terminate called
        without an active exception"). A model's own group outlives
        destroy_process_group() whenever FSDP2 holds it, so muonc cannot
        rely on it; its own group it destroys at exit (atexit), which joins
        those threads."""
        group = dist.new_group(ranks=ranks, backend="gloo")
        comm = cls(group)
        _OWNED.add(comm)
        return comm

    def release(self):
        """Destroys an owned group (joins its threads); the communicator is
        unusable afterwards."""
        group, self.group = self.group, None
        if group is None:
            return
        try:
            if dist.is_initialized():
                dist.destroy_process_group(group)
        except (AssertionError, RuntimeError, ValueError):
            pass  # already destroyed by destroy_process_group()
        del group

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def all_to_all_v(self, send, send_counts, send_offsets, recv, recv_counts,
                     recv_offsets):
        send_t = torch.from_numpy(send)
        recv_t = torch.from_numpy(recv)
        packed_send = _packed(send_counts, send_offsets)
        packed_recv = _packed(recv_counts, recv_offsets)
        if packed_send:
            inp = send_t[: sum(send_counts)]
        else:
            inp = torch.cat([send_t[o:o + c] for o, c in
                             zip(send_offsets, send_counts)])
        out = (recv_t[: sum(recv_counts)] if packed_recv
               else torch.empty(sum(recv_counts), dtype=torch.uint8))
        if self._device is None:
            dist.all_to_all_single(out, inp,
                                   output_split_sizes=list(recv_counts),
                                   input_split_sizes=list(send_counts),
                                   group=self.group)
        else:
            out_d = torch.empty(out.numel(), dtype=torch.uint8,
                                device=self._device)
            dist.all_to_all_single(out_d, inp.to(self._device),
                                   output_split_sizes=list(recv_counts),
                                   input_split_sizes=list(send_counts),
                                   group=self.group)
            out.copy_(out_d)  # waits for the collective
        if not packed_recv:
            at = 0
            for o, c in zip(recv_offsets, recv_counts):
                recv_t[o:o + c] = out[at:at + c]
                at += c

    def all_gather_int(self, value):
        signed = value - (1 << 64) if value >= (1 << 63) else value
        mine = torch.tensor([signed], dtype=torch.int64, device=self._device)
        every = [torch.empty_like(mine) for _ in range(self._size)]
        dist.all_gather(every, mine, group=self.group)
        return [int(t.item()) & ((1 << 64) - 1) for t in every]

    def all_gather_bytes(self, data):
        every = [None] * self._size
        dist.all_gather_object(every, bytes(data), group=self.group)
        return every

    def abort(self, code):
        os._exit(code)


_OWNED = weakref.WeakSet()


def launched_by_mpirun():
    """True in a process that mpirun (OpenMPI, MPICH, PMIx) started."""
    return any(v in os.environ for v in
               ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"))


@atexit.register
def _release_owned_groups():
    for comm in list(_OWNED):
        comm.release()
    gc.collect()


def _packed(counts, offsets):
    at = 0
    for c, o in zip(counts, offsets):
        if c and o != at:
            return False
        at += c
    return True


def _is_dtensor(t):
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover
        return False
    return isinstance(t, DTensor)


def _mesh_key(mesh):
    return (tuple(mesh.mesh.shape), tuple(mesh.mesh.flatten().tolist()),
            tuple(mesh.mesh_dim_names or ()))


def _axis_names(mesh):
    return list(mesh.mesh_dim_names or [f"d{i}" for i in range(mesh.ndim)])


def _model_mesh(params):
    """The one mesh covering every rank that the DTensor parameters' meshes
    are (named) sub-meshes of: FSDP2 over TP puts the TP layers on the
    concatenated (dp, tp) mesh and the other parameters on the dp
    sub-mesh."""
    meshes = {}
    for p in params:
        if _is_dtensor(p):
            meshes.setdefault(_mesh_key(p.device_mesh), p.device_mesh)
    if not meshes:
        return None
    world = dist.get_world_size()
    full = {k: m for k, m in meshes.items() if m.mesh.numel() == world}
    if not full:
        any_mesh = next(iter(meshes.values()))
        root = getattr(any_mesh, "_get_root_mesh", lambda: None)()
        if root is not None and root.mesh.numel() == world:
            full = {_mesh_key(root): root}
    if len(full) != 1:
        raise MuonError(
            "invalid argument: the parameters' DTensors are on "
            f"{len(meshes)} device meshes, and "
            + ("none" if not full else f"{len(full)} different ones")
            + f" of them cover all {world} ranks; muonc needs one mesh for "
            "the model (the others its named sub-meshes)")
    return next(iter(full.values()))


def create_dtensor_config(model_or_params, async_=True):
    """The seeds' create_dtensor_config: the mesh and each parameter's
    placements, read from the parameters' DTensor placements and
    device_mesh. Plain tensors are replicated over the default process
    group (DDP). Returns a dict for Muon(distributed_config=...); made from
    a module, it also carries the module's parameter names (used in the
    plan, assignments and errors) and its parameters (each must be in one
    of the optimizer's groups)."""
    if isinstance(model_or_params, torch.nn.Module):
        named = list(model_or_params.named_parameters())
    else:
        named = None
    params = ([p for _, p in named] if named is not None
              else list(model_or_params))
    mesh = _model_mesh(params) if dist.is_initialized() else None
    if mesh is not None:
        ranks = mesh.mesh.flatten().tolist()
        if ranks != list(range(dist.get_world_size())):
            raise MuonError("invalid argument: the device mesh must cover "
                            "the default process group's ranks in order "
                            f"(it holds {ranks})")
        config = {"shape": list(mesh.mesh.shape), "names": _axis_names(mesh),
                  "async": async_, "group": None, "dtensor": True,
                  "mesh": mesh}
    else:
        world = dist.get_world_size() if dist.is_initialized() else 1
        config = {"shape": [world], "names": ["dp"], "async": async_,
                  "group": None, "dtensor": False}
    if named is not None:
        config["named_parameters"] = named
    return config


def _layout_of(p, name, config):
    """(placements, split) of a parameter on the config's mesh, in the
    compiler's terms ("R", "S(d)"; split {dim: [axis names, major
    first]})."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard
    names = list(config["names"])
    if not _is_dtensor(p):
        return ["R"] * len(names), {}
    mesh = config.get("mesh")
    pm = p.device_mesh
    if mesh is None:
        raise MuonError(f"invalid argument: parameter '{name}' is a DTensor "
                        "but the distributed config has no device mesh "
                        "(make it with create_dtensor_config)")
    if _mesh_key(pm) == _mesh_key(mesh):
        axes = list(range(pm.ndim))
    else:
        sub = list(pm.mesh_dim_names or [])
        if not sub or any(n not in names for n in sub):
            raise MuonError(
                f"invalid argument: parameter '{name}': its device mesh "
                f"(dims {sub or 'unnamed'}) is neither the model's mesh "
                f"{names} nor a named sub-mesh of it")
        axes = [names.index(n) for n in sub]
        coord = mesh.get_coordinate()
        if coord is None:
            raise MuonError(f"invalid argument: parameter '{name}': this "
                            "rank is not in the model's device mesh")
        index = [slice(None) if a in axes else coord[a]
                 for a in range(len(names))]
        expect = mesh.mesh[tuple(index)]
        order = sorted(axes)
        expect = expect.permute([order.index(a) for a in axes])
        if expect.tolist() != pm.mesh.tolist():
            raise MuonError(
                f"invalid argument: parameter '{name}': its device mesh "
                f"{pm.mesh.tolist()} is not the slice of the model's mesh "
                "through this rank")
    placements = ["R"] * len(names)
    plain, strided = {}, {}
    for i, pl in enumerate(p.placements):
        a = axes[i]
        where = f"parameter '{name}': placement {pl!r} on mesh axis '{names[a]}'"
        if isinstance(pl, _StridedShard):
            strided.setdefault(pl.dim, []).append((a, pl.split_factor))
            dim = pl.dim
        elif isinstance(pl, Shard):
            plain.setdefault(pl.dim, []).append(a)
            dim = pl.dim
        elif isinstance(pl, Replicate):
            continue
        elif isinstance(pl, Partial):
            raise MuonError(
                f"invalid argument: {where}: a parameter's values must be "
                "replicated or sharded (only gradients may be partial sums)")
        else:
            raise MuonError(f"invalid argument: {where} is not supported "
                            "(Shard, Replicate and FSDP2's _StridedShard are)")
        if not 0 <= dim < p.ndim:
            raise MuonError(f"invalid argument: {where}: the parameter has "
                            f"{p.ndim} dims")
        placements[a] = f"S({dim})"
    split = {}
    for dim, pairs in strided.items():
        # FSDP2 over TP: the dp axis's _StridedShard(dim, sf) splits what
        # the sf-way TP split of the same dim left, i.e. it is the minor
        # split although its mesh axis comes first.
        later = plain.get(dim, [])
        if len(pairs) != 1 or pairs[0][1] != math.prod(
                mesh.mesh.shape[b] for b in later if b > pairs[0][0]) \
                or any(b < pairs[0][0] for b in later):
            raise MuonError(
                f"invalid argument: parameter '{name}': placements "
                f"{list(p.placements)} are not supported (a _StridedShard is "
                "supported as FSDP2 makes it over a TP split of the same dim)")
        split[dim] = [names[b] for b in later] + [names[pairs[0][0]]]
    return placements, split


class Muon(torch.optim.Optimizer):
    """torch.optim.Muon's arguments and defaults, distributed.

    A group's ``use_muon`` (bool) or ``algorithm`` ("muon"/"adamw") says
    which optimizer updates it; without either, a group of 2-D parameters
    is Muon and one of parameters with fewer dims AdamW. AdamW groups take
    ``lr``, ``betas`` (0.9, 0.999), ``eps`` (1e-8) and ``weight_decay``
    (0.01). ``distributed_config``: None to read the layout from the
    parameters (plain tensors over the default process group when
    torch.distributed is initialized, else one process), or the dict of
    ``create_dtensor_config``. ``process_group``: the group exchanges go
    through (default: a gloo group of its own over every rank, made at
    construction; see TorchCommunicator.owned). ``communicator``: "torch"
    (that process group), "mpi" (MPI_COMM_WORLD: processes started by
    mpirun, torch.distributed initialized or not), or None: "mpi" when this
    process was started by mpirun, else "torch". ``wire_dtype``: the
    element type of the exchanges, "f32" (default) or "bf16" (half the
    bytes; with ``ns_dtype="bf16"`` it loses nothing, since Newton-Schulz
    rounds its input and output to bf16 anyway). ``ns_form``: the form
    Newton-Schulz's steps run in on the CPU: "auto" (default: bf16 on wide
    and tall matrices in the Gram form below, 0.7-0.9x the time from 2:3
    to 1:4 with a relative error of 1.1-1.2e-2 from f32 against the
    standard form's 1.0-1.1e-2; f32 in the standard form), "standard"
    (torch's iteration: in f32 within 1e-6 of torch.optim.Muon's after 10
    steps, in bf16 torch's bits on square and wide matrices) or "gram" (f32
    too: on wide and tall matrices the same polynomials applied through
    the Gram matrix X X^T, restarted from X after steps 2 and 5: 0.62-0.68x
    the time at 1:3-1:4, about twice the standard form's rounding error;
    docs/performance.md). Every rank should use the same form.

    Per-head Newton-Schulz (attention projections, as torchtitan and dion
    do): ``num_heads`` cuts each matrix of a Muon group into that many
    blocks along ``head_split_dim`` (0: rows, the output features of a
    torch ``[out, in]`` weight, e.g. a fused QKV; 1: columns, e.g. an
    output projection), and each block is orthogonalized (and its lr scaled
    by ``adjust_lr_fn``) as a matrix of its own. Either is an int for every
    parameter of the group or a dict from parameter name to value (names as
    in ``param_names``); None or a name not in the dict: 1 head (dim 0).
    Both are compiled into the plan and cannot change afterwards.

    QK-clip (MuonClip, Kimi K2): ``qk_clip_layers``, a list of dicts, one
    per attention layer: ``name``, ``query`` and ``key`` (the W_q and W_k
    parameters, or their names), ``num_heads``, optionally ``num_kv_heads``
    (grouped-query attention) and ``threshold`` (else
    ``qk_clip_threshold``). Each step then takes the layers' per-head max
    logits of that step's forward pass, ``step(qk_max_logits={name:
    tensor of num_heads})`` or ``set_qk_max_logits`` before ``step()``;
    after the update, heads above the threshold have their rows of W_q and
    W_k scaled by sqrt(threshold / max logit). Each rank may pass what it
    measured on its part of the batch: the step takes the largest per head
    over the ranks.
    """

    def __init__(self, params, lr: float = 1e-3, weight_decay: float = 0.1,
                 momentum: float = 0.95, nesterov: bool = True,
                 ns_coefficients=DEFAULT_NS_COEFFICIENTS, eps: float = 1e-7,
                 ns_steps: int = 5, adjust_lr_fn: str | None = None, *,
                 distributed_config: dict | None = None, process_group=None,
                 ns_dtype: str = "f32", timeout: float = 120.0,
                 weight_decay_mode: str = "decoupled", normuon: bool = False,
                 normuon_beta2: float = 0.95,
                 num_heads: int | dict | None = None,
                 head_split_dim: int | dict = 0,
                 communicator: str | None = None,
                 wire_dtype: str = "f32",
                 qk_clip_threshold: float | None = None,
                 qk_clip_layers: list | None = None,
                 ns_form: str = "auto", **settings):
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"momentum should be >= 0 but is: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight decay should be >= 0 but is: {weight_decay}")
        _check_adjust(adjust_lr_fn)
        _check_decay_mode(weight_decay_mode)
        _check_normuon(normuon, normuon_beta2)
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                        nesterov=nesterov,
                        ns_coefficients=tuple(ns_coefficients), eps=eps,
                        ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn,
                        weight_decay_mode=weight_decay_mode, normuon=normuon,
                        normuon_beta2=normuon_beta2, num_heads=num_heads,
                        head_split_dim=head_split_dim)
        # The table's other Muon settings (muon/Plan/GroupSettings.h) by
        # keyword, with the table's defaults: a setting added there is a
        # keyword here without a change to this class.
        for x in _SETTINGS:
            if x["algorithm"] == "muon" and _torch_key(x) not in defaults:
                defaults[_torch_key(x)] = settings.pop(_torch_key(x),
                                                       x["default"])
        if settings:
            raise TypeError("Muon.__init__() got an unexpected keyword "
                            f"argument {next(iter(settings))!r}")
        super().__init__(params, defaults)
        self._ns_dtype = ns_dtype
        if wire_dtype not in ("f32", "bf16"):
            raise MuonError(f"invalid argument: wire_dtype {wire_dtype!r}: "
                            "expected 'f32' or 'bf16'")
        self._wire_dtype = wire_dtype
        if ns_form not in ("auto", "standard", "gram"):
            raise MuonError(f"invalid argument: ns_form {ns_form!r}: "
                            "expected 'auto', 'standard' or 'gram'")
        self._ns_form = ns_form
        if communicator is None:
            communicator = "mpi" if launched_by_mpirun() else "torch"
        if communicator not in ("torch", "mpi"):
            raise MuonError(f"invalid argument: communicator "
                            f"{communicator!r}: expected 'torch' or 'mpi'")
        if communicator == "mpi" and process_group is not None:
            raise MuonError("invalid argument: a process_group is for the "
                            "'torch' communicator; 'mpi' runs over "
                            "MPI_COMM_WORLD")
        self._communicator = communicator
        if qk_clip_threshold is not None and not qk_clip_layers:
            raise MuonError("invalid argument: qk_clip_threshold without "
                            "qk_clip_layers: name the attention layers to "
                            "clip")
        self._qk_clip_args = (qk_clip_threshold, list(qk_clip_layers or []))
        self._qk_pending = {}
        self._qk_clipped = 0
        self._build(distributed_config, process_group, timeout)

    # --- construction ----------------------------------------------------

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if getattr(self, "_engine", None) is not None:
            raise MuonError("failed precondition: muonc compiles its plan at "
                            "construction; add_param_group afterwards is not "
                            "supported (make a new optimizer)")
        group = dict(param_group)
        params = group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        named = [isinstance(x, tuple) for x in params]
        if any(named):
            # torch >= 2.6: (name, parameter) pairs, as named_parameters().
            if not all(named):
                raise ValueError("all optimizer params should be with/without "
                                 "names. Some param names are missing")
            group["param_names"] = [n for n, _ in params]
            params = [x for _, x in params]
        group["params"] = params
        if "use_muon" in group and "algorithm" not in group:
            group["algorithm"] = "muon" if group["use_muon"] else "adamw"
        if "algorithm" not in group:
            dims = {p.ndim >= 2 for p in params}
            if len(dims) > 1:
                raise MuonError(
                    "invalid argument: a parameter group mixes matrices and "
                    "parameters with fewer than 2 dims; give it "
                    "use_muon=True or False (or split it)")
            group["algorithm"] = "muon" if dims == {True} else "adamw"
        if group["algorithm"] not in ("muon", "adamw"):
            raise MuonError("invalid argument: a group's algorithm is 'muon' "
                            f"or 'adamw', not {group['algorithm']!r}")
        group["use_muon"] = group["algorithm"] == "muon"
        if group["algorithm"] == "adamw":
            for key in _HEAD_KEYS:
                if key in group:
                    raise MuonError(
                        f"invalid argument: {key} is a Muon setting "
                        "(per-head Newton-Schulz); this group is AdamW")
            adamw = [x for x in _SETTINGS if x["algorithm"] == "adamw"]
            for key in dict.fromkeys(x["json_key"] for x in adamw):
                values = [x["default"] for x in adamw if x["json_key"] == key]
                group.setdefault(key, tuple(values) if len(values) > 1
                                 else values[0])
        else:
            for p in params:
                if p.ndim < 2:
                    raise MuonError(
                        "invalid argument: Muon updates matrices (2 or more "
                        f"dims); a parameter of shape {tuple(p.shape)} is in "
                        "a Muon group (put it in a group with use_muon=False)")
            _check_adjust(group.get("adjust_lr_fn"))
            _check_decay_mode(group.get("weight_decay_mode", "decoupled"))
            _check_normuon(group.get("normuon", False),
                           group.get("normuon_beta2", 0.95))
        super().add_param_group(group)

    def _build(self, config, process_group, timeout):
        distributed = dist.is_available() and dist.is_initialized()
        mpi = self._communicator == "mpi"
        if mpi:
            mpi_rank, mpi_size = _core.mpi_world()
            if distributed and (dist.get_rank(), dist.get_world_size()) != \
                    (mpi_rank, mpi_size):
                raise MuonError(
                    f"invalid argument: torch.distributed's rank "
                    f"{dist.get_rank()} of {dist.get_world_size()} is MPI's "
                    f"{mpi_rank} of {mpi_size}: start torch.distributed with "
                    "MPI's ranks (OMPI_COMM_WORLD_RANK/SIZE) to exchange "
                    "through MPI")
        if config is None and distributed:
            config = create_dtensor_config(
                [p for g in self.param_groups for p in g["params"]])
        elif config is None and mpi and mpi_size > 1:
            # Plain tensors on every MPI rank: replicated (DDP-like).
            config = {"shape": [mpi_size], "names": ["dp"], "async": True,
                      "group": None, "dtensor": False}
        known = {}
        if config is not None and config.get("named_parameters"):
            known = {id(p): n for n, p in config["named_parameters"]}
        self._params = []
        devices = {}
        taken = {}
        for gi, group in enumerate(self.param_groups):
            group.setdefault("name", f"group{gi}")
            given = group.get("param_names")
            for pi, p in enumerate(group["params"]):
                name = (given[pi] if given else
                        known.get(id(p), f"{group['name']}.{pi}"))
                if name in taken:
                    raise MuonError(f"invalid argument: two parameters are "
                                    f"named '{name}'")
                taken[name] = p
                self._params.append((p, name, group))
                devices.setdefault(str(p.device), name)
        self._device = self._engine_device(devices)
        if config is not None and config.get("named_parameters"):
            mine = {id(p) for p, _, _ in self._params}
            missing = [n for n, p in config["named_parameters"]
                       if p.requires_grad and id(p) not in mine]
            if missing:
                raise MuonError(
                    "invalid argument: parameter" +
                    ("s " if len(missing) > 1 else " ") +
                    ", ".join(f"'{n}'" for n in missing[:5]) +
                    (f" (and {len(missing) - 5} more)" if len(missing) > 5
                     else "") +
                    " of the model the distributed config describes " +
                    ("are" if len(missing) > 1 else "is") +
                    " in no parameter group: give every trainable "
                    "parameter to the optimizer, or make the config from "
                    "the parameters it steps")
            described = {id(p) for _, p in config["named_parameters"]}
            strangers = [n for p, n, _ in self._params if id(p) not in described]
            if strangers:
                raise MuonError(
                    f"invalid argument: parameter '{strangers[0]}' is not a "
                    "parameter of the model the distributed config was made "
                    "from")
        muon_groups = [g for g in self.param_groups if g["use_muon"]]
        for key in _NS_KEYS:
            values = {repr(g[key]) for g in muon_groups}
            if len(values) > 1:
                raise MuonError(f"invalid argument: every Muon group must "
                                f"have the same {key} (they have {values})")
        if config is not None and config["shape"] == [1] and not config.get("dtensor"):
            config = None
        if config is not None and not config.get("dtensor") and any(
                _is_dtensor(p) for p, _, _ in self._params):
            # A hand-written config for DTensor parameters: find the mesh.
            config = dict(config, mesh=_model_mesh(
                [p for p, _, _ in self._params]))
        self._config = config
        plan_params, plan_groups = [], []
        heads = _heads_by_name(self._params)
        self._heads = heads
        for p, name, group in self._params:
            entry = {"name": name, "shape": list(p.shape),
                     "dtype": _dtype_name(p), "group": group["name"]}
            if name in heads:
                entry["num_heads"], entry["head_split_dim"] = heads[name]
            if config is not None:
                entry["placements"], split = _layout_of(p, name, config)
                if split:
                    entry["split"] = split
            plan_params.append(entry)
        for group in self.param_groups:
            g = {"name": group["name"], "algorithm": group["algorithm"],
                 "lr": float(group["lr"]),
                 "weight_decay": float(group["weight_decay"])}
            g.update(_table_settings(group, group["algorithm"]))
            if group["use_muon"]:
                g.update(eps=group["eps"], ns_steps=group["ns_steps"],
                         ns_coefficients=list(group["ns_coefficients"]),
                         ns_dtype=self._ns_dtype)
            plan_groups.append(g)
        mesh = None
        if config is not None:
            mesh = {k: config[k] for k in ("shape", "names", "async")}
            mesh["wire_dtype"] = self._wire_dtype
            if "assignments" in config:
                mesh["assignments"] = config["assignments"]
        qk_clip = self._qk_clip_layers()
        plan = _core.compile_model(plan_params, plan_groups, mesh,
                                   qk_clip or None)
        self._qk_heads = {l["name"]: l["num_heads"] for l in qk_clip}
        comm = None
        if config is not None and mpi:
            if mpi_size != math.prod(config["shape"]):
                raise MuonError(
                    f"invalid argument: the plan is for "
                    f"{math.prod(config['shape'])} ranks, MPI_COMM_WORLD "
                    f"has {mpi_size}")
            comm = "mpi"
        elif config is not None:
            if not distributed:
                raise MuonError(
                    f"invalid argument: the distributed config is for "
                    f"{math.prod(config['shape'])} ranks, but "
                    "torch.distributed is not initialized")
            group = process_group if process_group is not None else config.get("group")
            size = (dist.get_world_size(group) if group is not None
                    else dist.get_world_size())
            if size != math.prod(config["shape"]):
                raise MuonError(
                    f"invalid argument: the plan is for "
                    f"{math.prod(config['shape'])} ranks, the process group "
                    f"has {size}")
            comm = (TorchCommunicator(group) if group is not None
                    else TorchCommunicator.owned())
        self._comm = comm
        self._engine = _core.Optimizer(plan, comm, timeout, False,
                                       self._ns_form,
                                       _engine_device_name(self._device))
        self._slots = {s["name"]: s for s in self._engine.params()}
        for p, name, _ in self._params:
            have = tuple(self._local(p).shape)
            want = tuple(e - b for b, e in self._box(name, p))
            if have != want:
                slot = self._slots.get(name)
                raise MuonError(
                    f"internal: parameter '{name}': this rank holds a piece "
                    f"of shape {have}, the plan expects {want} (box "
                    f"{slot and slot['box']}); muonc splits as torch.chunk")
        self._pushed = {}
        self._plan_settings = {g["name"]: tuple(repr(g.get(k)) for k in
                                                _PLAN_KEYS + _HEAD_KEYS)
                               for g in muon_groups}
        # torch's state stays empty (the state lives in the engine); a
        # marker per parameter keeps torch.distributed.checkpoint from
        # "initializing" it with a step of zero gradients.
        for p, _, _ in self._params:
            self.state[p] = {}

    @staticmethod
    def _engine_device(devices):
        """The one device of the parameters ({str(device): a parameter's
        name}): the CPU, or a GPU where muonc has the CUDA backend."""
        where = ", ".join(f"'{n}' on {d}" for d, n in devices.items())
        if len(devices) > 1:
            raise MuonError("invalid argument: muonc.torch steps parameters "
                            "on one device; they are on "
                            f"{len(devices)} devices ({where})")
        device = torch.device(next(iter(devices), "cpu"))
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device.type == "cuda" and not _core.cuda_built():
            raise MuonError(f"unavailable: parameters on {device} ({where}), "
                            "but muonc was built without the CUDA backend "
                            "(build it where CMake finds nvcc and cuBLAS)")
        if device.type not in ("cpu", "cuda"):
            raise MuonError(f"invalid argument: parameters on {device} "
                            f"({where}): muonc runs on CPU and CUDA tensors")
        return device

    def _qk_clip_layers(self):
        """qk_clip_layers as the compiler takes them: parameters by name,
        the threshold in every layer."""
        threshold, layers = self._qk_clip_args
        names = {id(p): name for p, name, _ in self._params}
        out = []
        for i, layer in enumerate(layers):
            where = f"qk_clip_layers[{i}]"
            if not isinstance(layer, dict):
                raise MuonError(f"invalid argument: {where}: expected a dict "
                                f"with name, query, key and num_heads")
            unknown = set(layer) - {"name", "query", "key", "num_heads",
                                    "num_kv_heads", "threshold"}
            if unknown:
                raise MuonError(f"invalid argument: {where}: unknown keys "
                                f"{sorted(unknown)}")
            for k in ("name", "query", "key", "num_heads"):
                if k not in layer:
                    raise MuonError(f"invalid argument: {where}: missing "
                                    f"'{k}'")
            entry = {"name": layer["name"]}
            for k in ("query", "key"):
                v = layer[k]
                if isinstance(v, str):
                    entry[k] = v
                elif id(v) in names:
                    entry[k] = names[id(v)]
                else:
                    raise MuonError(f"invalid argument: {where}.{k}: not a "
                                    "parameter of this optimizer (give the "
                                    "parameter or its name)")
            entry["num_heads"] = layer["num_heads"]
            if "num_kv_heads" in layer:
                entry["num_kv_heads"] = layer["num_kv_heads"]
            t = layer.get("threshold", threshold)
            if t is None:
                raise MuonError(f"invalid argument: {where}: no threshold "
                                "(give qk_clip_threshold or the layer's "
                                "'threshold')")
            entry["threshold"] = float(t)
            out.append(entry)
        return out

    def set_qk_max_logits(self, layer, logits=None):
        """QK-clip's input for the next step: ``layer``'s max attention
        logit per query head in this step's forward pass (a tensor, array or
        list of num_heads numbers), or a dict {layer: logits}. Checked here
        (known layers, one finite value per head); the next step() passes
        them and forgets them."""
        given = layer if isinstance(layer, dict) else {layer: logits}
        checked = {name: self._qk_logits(name, v) for name, v in given.items()}
        self._qk_pending.update(checked)

    def _qk_logits(self, name, value):
        if name not in self._qk_heads:
            known = ", ".join(f"'{n}'" for n in self._qk_heads) or "none"
            raise MuonError(f"invalid argument: QK-clip: no layer named "
                            f"{name!r} (the layers: {known})")
        heads = self._qk_heads[name]
        if isinstance(value, torch.Tensor):
            t = value.detach().to(device="cpu", dtype=torch.float64)
        else:
            t = torch.as_tensor(np.asarray(value, dtype=np.float64))
        if tuple(t.shape) != (heads,):
            raise MuonError(f"invalid argument: QK-clip: layer '{name}' has "
                            f"{heads} query heads: expected logits of shape "
                            f"[{heads}], got {list(t.shape)}")
        if not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).nonzero()[0])
            raise MuonError(f"invalid argument: QK-clip: layer '{name}': the "
                            f"logit of head {bad} is not finite")
        return [float(x) for x in t.tolist()]

    @property
    def qk_clipped_heads(self):
        """How many query heads the last step's QK-clip rescaled (the same
        on every rank)."""
        return self._qk_clipped

    @property
    def param_names(self):
        """The parameters' names in the plan, in the optimizer's order."""
        return [name for _, name, _ in self._params]

    @property
    def assignments(self):
        """Per rank, the matrices it orthogonalizes (the seeds'
        optimizer.assignments), by parameter name: the module's (from
        named_parameters() pairs or a config made by
        create_dtensor_config(model)), else "<group name>.<index>"."""
        return self._engine.assignments()

    @property
    def engine(self):
        """The underlying muonc.Optimizer."""
        return self._engine

    # --- the step --------------------------------------------------------

    def _push_settings(self):
        for group in self.param_groups:
            name = group["name"]
            if group["use_muon"]:
                now = tuple(repr(group.get(k)) for k in _PLAN_KEYS + _HEAD_KEYS)
                was = self._plan_settings[name]
                if now[:len(_PLAN_KEYS)] != was[:len(_PLAN_KEYS)]:
                    raise MuonError(
                        f"invalid argument: group '{name}': ns_coefficients, "
                        "eps, ns_steps and normuon are compiled into the "
                        "plan and cannot change after construction")
                if now != was:
                    raise MuonError(
                        f"invalid argument: group '{name}': num_heads and "
                        "head_split_dim are compiled into the plan (they "
                        "decide the matrices) and cannot change after "
                        "construction")
                _check_adjust(group["adjust_lr_fn"])
                _check_decay_mode(group["weight_decay_mode"])
                _check_normuon(group["normuon"], group["normuon_beta2"])
            values = _table_settings(group, group["algorithm"], fixed=False)
            if self._pushed.get(name) != values:
                self._engine.set_group(name, values)
            self._pushed[name] = values

    def _local(self, t):
        t = t._local_tensor if _is_dtensor(t) else t
        return t.detach()

    @torch.no_grad()
    def step(self, closure=None, qk_max_logits=None):
        """One step; ``qk_max_logits``: {layer: per-head max logits} for
        QK-clip (as set_qk_max_logits), for this step only."""
        if qk_max_logits is not None:
            checked = {n: self._qk_logits(n, v)
                       for n, v in qk_max_logits.items()}
            self._qk_pending.update(checked)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        has = [p.grad is not None for p, _, _ in self._params]
        if self._comm is not None:
            every = self._engine.all_gather_bytes(pickle.dumps(has))
            every = [pickle.loads(b) for b in every]
            if any(e != has for e in every):
                for (p, name, _), i in zip(self._params, range(len(has))):
                    holders = [r for r, e in enumerate(every) if e[i]]
                    if 0 < len(holders) < len(every):
                        raise MuonError(
                            f"failed precondition: parameter '{name}' has a "
                            f"gradient on ranks {holders} only (None on the "
                            "others); every rank must have the same gradients")
        if not any(has):
            self._qk_pending = {}  # no step: its logits go with it
            return loss
        if not all(has):
            missing = [n for (p, n, _), h in zip(self._params, has) if not h][:5]
            raise MuonError(
                "failed precondition: muonc steps every parameter together; "
                f"parameters {missing} have no gradient (grad is None) while "
                "others have one (give them zero gradients, or leave them out "
                "of the optimizer)")
        self._push_settings()
        for p, name, _ in self._params:
            values = self._local(p)
            grad = self._local(p.grad)
            if not values.is_contiguous() or not grad.is_contiguous():
                raise MuonError(f"invalid argument: parameter '{name}': values "
                                "and gradient must be contiguous")
            self._engine.bind(name, values, grad)
        for name, logits in self._qk_pending.items():
            self._engine.set_qk_max_logits(name, logits)
        self._qk_pending = {}
        result = self._engine.step(stream=_current_stream(self._device))
        self._qk_clipped = result["qk_clipped_heads"]
        if not result["applied"]:
            import warnings
            warnings.warn(f"muonc: step skipped: gradient of "
                          f"{result['non_finite_param']} has NaN or Inf "
                          f"(rank {result['non_finite_rank']})")
        return loss

    # --- state -----------------------------------------------------------

    def _state_keys(self, group):
        """The runtime's per-element state slots of a group's algorithm."""
        algorithm = "muon" if group["use_muon"] else "adamw"
        return tuple(s["name"] for s in _ELEMENT_SLOTS
                     if s["algorithm"] == algorithm)

    def _matrix_steps(self, group):
        """The per-matrix steps a group turns on (NorMuon)."""
        return [st for st in _MATRIX_STEPS
                if group["use_muon"] and group.get(st["setting"])]

    def _box(self, name, p):
        """This rank's piece of a parameter as a global box."""
        slot = self._slots.get(name)
        if slot is None:
            return [(0, n) for n in p.shape]
        if not slot["box"] and p.ndim:
            # An empty shard (torch.chunk's trailing chunks): the plan
            # gives no box; the local tensor's shape, 0 on the split dim.
            return [(0, n) for n in self._local(p).shape]
        return [tuple(r) for r in slot["box"]]

    def state_dict(self):
        """torch's format, as torch.optim.Muon / AdamW write it: 'state' by
        parameter index (momentum_buffer; exp_avg, exp_avg_sq, step),
        'param_groups' with the hyper-parameters. Each state tensor has its
        parameter's layout: a DTensor with the parameter's mesh and
        placements for a DTensor parameter (FSDP2, TP), the whole tensor
        for a plain one. So torch.distributed.checkpoint saves and reshards
        it (get_state_dict / set_optimizer_state_dict, dcp.save / load).
        A parameter of a NorMuon group also has 'normuon_v', its per-row
        second moment: a plain float32 tensor of shape (matrices, rows),
        row s the state of its matrix s (batch slices times heads, in slice
        order; (1, rows) for a whole 2-D matrix), gathered from the
        matrices' owners so that every rank holds all of it. Collective
        where the parameters are. For state dicts to move as files between
        layouts without DCP, see local_state_dict()."""
        raw = self._engine.state_dict(False)
        by_name = {}
        for piece in raw["pieces"]:
            by_name.setdefault(piece["param"], []).append(piece)
        state = {}
        for i, (p, name, group) in enumerate(self._params):
            pieces = by_name.get(name, [])
            box = self._box(name, p)
            entry = {}
            for key in self._state_keys(group):
                local = _assemble(name, pieces, box, key)
                entry[_TORCH_STATE_NAMES.get(key, key)] = _like(p, local)
            if not group["use_muon"]:
                step = max([pc["step"] for pc in pieces], default=raw["steps"])
                entry["step"] = torch.tensor(float(step))
            state[i] = entry
        groups = super().state_dict()["param_groups"]
        for g in groups:
            g["muonc_steps"] = raw["steps"]
        muonc = {"steps": raw["steps"]}
        with_steps = [(i, st) for i, (_, _, g) in enumerate(self._params)
                      for st in self._matrix_steps(g)]
        if with_steps:
            rows = self._every_row_state(raw)
            for i, st in with_steps:
                p, name, _ = self._params[i]
                state[i][st["state"]] = self._matrix_state(name, p, rows, st)
        return {"state": state, "param_groups": groups, "muonc": muonc}

    def _every_row_state(self, raw):
        """Every rank's per-row states, {(param, slice, state): values}
        (float32 numpy), from this rank's raw state dict; collective when
        there are several ranks (each matrix's rows are on its owner)."""
        mine = [(r["param"], int(r["slice"]), r["state"],
                 np.ascontiguousarray(r["values"], dtype=np.float32))
                for r in raw.get("row_states", [])]
        every = [mine]
        if self._comm is not None:
            every = [pickle.loads(b) for b in
                     self._engine.all_gather_bytes(pickle.dumps(mine))]
        rows = {}
        for rank_rows in every:
            for param, piece, state, values in rank_rows:
                rows.setdefault((param, piece, state), values)
        return rows

    def _row_shape(self, name, p):
        """The shape of a Muon parameter's per-row state (normuon_v):
        (matrices, rows), its matrices the batch slices times the heads
        (slice index order), each with one value per row of the matrix (per
        head when the heads split the rows)."""
        heads, dim = self._heads.get(name, (1, 0))
        shape = tuple(p.shape)
        rows = shape[-2] // heads if dim == 0 else shape[-2]
        return (math.prod(shape[:-2]) * heads, rows)

    def _matrix_state(self, name, p, rows, step):
        """A parameter's per-row state of per-matrix step `step` (NorMuon's
        normuon_v): a plain float32 tensor of _row_shape, row i the state of
        its matrix (slice) i."""
        slices, length = self._row_shape(name, p)
        out = torch.zeros((slices, length), dtype=torch.float32)
        for s in range(slices):
            values = rows.get((name, s, step["state"]))
            if values is None or values.size != length:
                raise MuonError(
                    f"internal: parameter '{name}': no rank holds "
                    f"{step['title']}'s per-row state of its matrix {s} with "
                    f"{length} rows"
                    + ("" if values is None else f" (one holds {values.size})"))
            out[s] = torch.from_numpy(values)
        return out

    def _rows_of(self, p, name, group, step, v):
        """The runtime's row states of a saved per-row state of per-matrix
        step `step` (normuon_v), checked."""
        key = step["state"]
        if not group["use_muon"]:
            raise MuonError(
                f"invalid argument: parameter '{name}': the state has "
                f"'{key}' ({step['title']}'s per-row state), but the "
                f"parameter is in AdamW group '{group['name']}'")
        if _is_dtensor(v):
            from torch.distributed.tensor import Replicate
            if not all(isinstance(pl, Replicate) for pl in v.placements):
                raise MuonError(
                    f"invalid argument: parameter '{name}': state "
                    f"'{key}' is a DTensor laid out as "
                    f"{list(v.placements)}; it must be whole (a plain or "
                    "replicated tensor)")
            v = v._local_tensor
        v = torch.as_tensor(v)
        want = self._row_shape(name, p)
        if tuple(v.shape) != want:
            raise MuonError(
                f"invalid argument: parameter '{name}': state '{key}' "
                f"has shape {tuple(v.shape)}, expected {want} ({want[0]} "
                f"matrices of {want[1]} rows)")
        v = v.detach().cpu().float()
        return [{"param": name, "slice": s, "state": key,
                 "values": np.ascontiguousarray(v[s].numpy())}
                for s in range(want[0])]

    def local_state_dict(self):
        """This rank's state as pieces by global box (plain tensors, no
        DTensor): the list of every rank's local_state_dict() loads under
        any other layout or world size (load_state_dict takes the list),
        e.g. saved with torch.save on 4 ranks, loaded on 2."""
        raw = self._engine.state_dict(False)
        index = {name: i for i, (_, name, _) in enumerate(self._params)}
        state = {}
        for piece in raw["pieces"]:
            i = index[piece["param"]]
            entry = state.setdefault(i, {"pieces": []})
            entry["pieces"].append({
                "box": [tuple(r) for r in piece["box"]],
                "summand": piece["summand"],
                "summands": piece["summands"], "step": piece["step"],
                "states": {k: torch.from_numpy(v) for k, v in
                           piece["states"].items()}})
        groups = super().state_dict()["param_groups"]
        for g in groups:
            g["muonc_steps"] = raw["steps"]
        return {"state": state, "param_groups": groups,
                "muonc": {"steps": raw["steps"],
                          "names": self.param_names,
                          "row_states": _row_states(raw)}}

    def load_state_dict(self, state_dict):
        """Loads state_dict() of this layout (state by index, or by
        parameter FQN as torch.distributed.checkpoint's
        set_optimizer_state_dict passes it, with DTensors resharded to this
        layout or whole tensors), or local_state_dict(), or the list of
        every rank's local_state_dict() (or state_dict() of plain
        parameters) of another layout or world size."""
        dicts = state_dict if isinstance(state_dict, (list, tuple)) else [state_dict]
        if not dicts:
            raise MuonError("invalid argument: an empty list of state dicts")
        saved = dicts[0]["param_groups"]
        if len(saved) != len(self.param_groups):
            raise MuonError(f"invalid argument: the state has {len(saved)} "
                            f"parameter groups, this optimizer "
                            f"{len(self.param_groups)}")
        for g, mine in zip(saved, self.param_groups):
            if len(g["params"]) != len(mine["params"]):
                raise MuonError(
                    f"invalid argument: group '{mine['name']}': the state has "
                    f"{len(g['params'])} parameters, the optimizer "
                    f"{len(mine['params'])}")
        pieces, seen = [], set()
        # The per-row states (NorMuon's): muonc.row_states
        # (local_state_dict()), and each parameter's normuon_v
        # (state_dict()).
        saved_rows = []
        for d in dicts:
            saved_rows.extend(d.get("muonc", {}).get("row_states", []))
            keys = [k for g in d["param_groups"] for k in g["params"]]
            where = {k: i for i, k in enumerate(keys)}
            for k, entry in d["state"].items():
                if k not in where:
                    raise MuonError(f"invalid argument: the state names "
                                    f"parameter {k!r}, which its param_groups "
                                    "do not list")
                p, name, group = self._params[where[k]]
                for st in _MATRIX_STEPS:
                    if st["state"] in entry:
                        saved_rows.extend(self._rows_of(
                            p, name, group, st, entry[st["state"]]))
                for piece in self._pieces_of(p, name, group, entry,
                                             len(dicts) > 1):
                    key = (name, tuple(piece["box"]), piece["summand"])
                    if key in seen:
                        continue  # a replicated state, once is enough
                    seen.add(key)
                    pieces.append(piece)
        if "muonc_steps" in saved[0]:
            steps = saved[0]["muonc_steps"]
        elif "muonc" in dicts[0]:
            steps = dicts[0]["muonc"]["steps"]
        else:
            steps = max([pc["step"] for pc in pieces], default=0)
        groups = []
        for g, mine in zip(saved, self.param_groups):
            algorithm = g.get("algorithm", mine["algorithm"])
            # The table's settings as the group will hold them: the saved
            # ones, and this group's where the state has none.
            out = {"name": mine["name"], "algorithm": algorithm}
            out.update(_table_settings({**mine, **g}, algorithm))
            groups.append(out)
        # The per-row states, each matrix once (all of them, every
        # rank's owned matrices: the new owners take theirs).
        rows, seen_rows = [], set()
        for r in saved_rows:
            key = (r["param"], int(r["slice"]), r["state"])
            if key not in seen_rows:
                seen_rows.add(key)
                rows.append({"param": r["param"], "slice": int(r["slice"]),
                             "state": r["state"],
                             "values": np.ascontiguousarray(
                                 torch.as_tensor(r["values"]).float()
                                 .numpy().reshape(-1))})
        self._engine.load_state_dict(
            {"steps": int(steps), "pieces": pieces, "groups": groups,
             "row_states": rows}, False)
        for group, g in zip(self.param_groups, saved):
            for k, v in g.items():
                if k not in ("params", "param_names", "name", "muonc_steps"):
                    group[k] = v
        self._pushed = {}

    def _pieces_of(self, p, name, group, entry, foreign):
        """The runtime's pieces of one parameter's saved state."""
        def flat(t):
            t = t._local_tensor if _is_dtensor(t) else t
            return np.ascontiguousarray(
                t.detach().cpu().float().numpy().reshape(-1))
        if "pieces" in entry:
            return [{"param": name, "box": [tuple(r) for r in pc["box"]],
                     "summand": pc["summand"], "summands": pc["summands"],
                     "step": pc["step"],
                     "states": {k: flat(v) for k, v in pc["states"].items()}}
                    for pc in entry["pieces"]]
        states, box = {}, None
        for key in self._state_keys(group):
            torch_key = _TORCH_STATE_NAMES.get(key, key)
            if torch_key not in entry:
                raise MuonError(f"invalid argument: parameter '{name}': the "
                                f"state has no '{torch_key}'")
            v = entry[torch_key]
            if tuple(v.shape) != tuple(p.shape):
                raise MuonError(
                    f"invalid argument: parameter '{name}': state "
                    f"'{torch_key}' has shape {tuple(v.shape)}, the "
                    f"parameter {tuple(p.shape)}")
            if _is_dtensor(v):
                if foreign:
                    raise MuonError(
                        "invalid argument: a list of state dicts with "
                        "DTensors: load the list of local_state_dict(), or "
                        "load state_dict() through torch.distributed."
                        "checkpoint, which reshards it")
                here = self._box(name, p)
                if tuple(v._local_tensor.shape) != tuple(e - b for b, e in here):
                    raise MuonError(
                        f"invalid argument: parameter '{name}': state "
                        f"'{torch_key}' is laid out as {list(v.placements)}, "
                        f"not as the parameter {list(p.placements)}")
            else:
                here = [(0, n) for n in p.shape]
            box = here
            states[key] = flat(v)
        step = 0
        if not group["use_muon"]:
            step = int(float(entry.get("step", 0)))
        if any(b == e for b, e in box):
            return []  # an empty shard: nothing of it here
        return [{"param": name, "box": box, "summand": 0, "summands": 1,
                 "step": step, "states": states}]


def _assemble(name, pieces, box, key):
    """The state `key` of this rank's box from its pieces (one whole piece:
    no copy)."""
    shape = tuple(e - b for b, e in box)
    for pc in pieces:
        if [tuple(r) for r in pc["box"]] == box and pc["summands"] == 1:
            return torch.from_numpy(pc["states"][key]).view(shape)
    out = torch.zeros(shape, dtype=torch.float32)
    for pc in pieces:
        sub = tuple(slice(b - ob, e - ob) for (b, e), (ob, _) in
                    zip(pc["box"], box))
        out[sub] += torch.from_numpy(pc["states"][key]).view(
            tuple(e - b for b, e in pc["box"]))
    return out


def _engine_device_name(device):
    """The runtime's name of a torch device: "cpu", "cuda:N"."""
    return "cpu" if device.type == "cpu" else f"cuda:{device.index}"


def _current_stream(device):
    """torch's current stream on a GPU (its cudaStream_t as an integer),
    which a step is ordered with; None on the CPU."""
    if device.type != "cuda":
        return None
    return torch.cuda.current_stream(device).cuda_stream


def _like(p, local):
    """`local` (this rank's piece) with the parameter's layout, on its
    device."""
    local = local.to(p.device)
    if not _is_dtensor(p):
        return local
    from torch.distributed.tensor import DTensor
    return DTensor.from_local(local, p.device_mesh, p.placements,
                              run_check=False, shape=p.shape,
                              stride=p.stride())


def _dtype_name(p):
    if p.dtype == torch.float32:
        return "f32"
    if p.dtype == torch.bfloat16:
        return "bf16"
    if p.dtype == torch.float16:
        return "f16"
    raise MuonError(f"invalid argument: parameters of {p.dtype} are not "
                    "supported (float32, bfloat16, float16 are)")


# adjust_lr's and weight_decay_mode's values (the settings table;
# docs/spec-format.md 1.3).
_ADJUST_LR = _setting_names("adjust_lr")
_DECAY_MODES = _setting_names("weight_decay_mode")


def _row_states(raw):
    """NorMuon's per-row states of a raw state dict, as plain tensors."""
    return [{"param": r["param"], "slice": r["slice"], "state": r["state"],
             "values": torch.from_numpy(r["values"])}
            for r in raw.get("row_states", [])]


def _heads_by_name(params):
    """{name: (num_heads, head_split_dim)} of every parameter that asks for
    per-head Newton-Schulz through its group's num_heads / head_split_dim
    (an int for the whole group, or a dict by parameter name). Whether the
    heads divide the dim the compiler checks, naming the parameter."""
    out = {}
    by_group = {}
    for _, name, group in params:
        by_group.setdefault(id(group), (group, []))[1].append(name)
    every = {name for _, name, _ in params}
    for group, names in by_group.values():
        if not group["use_muon"]:
            continue  # add_param_group refused the keys on AdamW groups
        given = {k: group.get(k) for k in _HEAD_KEYS}
        for key, value in given.items():
            # A dict may be the constructor's, shared by every group: its
            # names must be the optimizer's (a typo must not pass).
            if isinstance(value, dict):
                strangers = sorted(set(value) - every)
                if strangers:
                    raise MuonError(
                        f"invalid argument: {key} names '{strangers[0]}', "
                        "which is not a parameter of the optimizer (names "
                        "as in param_names, e.g. " +
                        ", ".join(f"'{n}'" for n in sorted(every)[:3]) + ")")
        for name in names:
            heads, dim = (v.get(name) if isinstance(v, dict) else v
                          for v in given.values())
            heads = 1 if heads is None else heads
            dim = 0 if dim is None else dim
            # Integers of any kind (numpy's too), not bools.
            integral = [isinstance(v, numbers.Integral) and
                        not isinstance(v, bool) for v in (heads, dim)]
            if not integral[0] or heads < 1:
                raise MuonError(f"invalid argument: parameter '{name}': "
                                f"num_heads {heads!r} is not an integer >= 1")
            if not integral[1] or dim not in (0, 1):
                raise MuonError(f"invalid argument: parameter '{name}': "
                                f"head_split_dim {dim!r} is not 0 (rows) or "
                                "1 (columns)")
            if heads != 1 or dim != 0:
                out[name] = (int(heads), int(dim))
    return out


def _check_normuon(normuon, beta2):
    if not isinstance(normuon, bool):
        raise MuonError(f"invalid argument: normuon {normuon!r} is not True "
                        "or False")
    if not (isinstance(beta2, (int, float)) and 0.0 <= beta2 < 1.0):
        raise MuonError(f"invalid argument: normuon_beta2 {beta2!r} is not a "
                        "number in [0, 1)")


def _check_decay_mode(mode):
    if mode not in _DECAY_MODES:
        raise MuonError(f"invalid argument: weight_decay_mode {mode!r} is not "
                        "supported ('decoupled', 'cautious', 'none')")


def _check_adjust(fn):
    if fn is not None and fn not in _ADJUST_LR:
        raise MuonError(f"invalid argument: adjust_lr_fn {fn!r} is not "
                        "supported (None, "
                        + ", ".join(repr(n) for n in _ADJUST_LR) + ")")

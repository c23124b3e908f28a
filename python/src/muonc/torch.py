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

# What a step reads from a group, per algorithm (the rest is compiled into
# the plan and may not change after construction).
_MUON_KEYS = ("lr", "weight_decay", "momentum", "nesterov", "adjust_lr_fn",
              "weight_decay_mode")
_ADAMW_KEYS = ("lr", "betas", "eps", "weight_decay")
_PLAN_KEYS = ("ns_coefficients", "eps", "ns_steps")


class TorchCommunicator:
    """The runtime's communicator over a torch.distributed process group:
    the plan's packed exchanges as all_to_all_single with split sizes, the
    control collectives as all_gather. Works with gloo (CPU tensors)."""

    def __init__(self, group=None):
        self.group = group
        self._rank = dist.get_rank(group)
        self._size = dist.get_world_size(group)

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
        dist.all_to_all_single(out, inp, output_split_sizes=list(recv_counts),
                               input_split_sizes=list(send_counts),
                               group=self.group)
        if not packed_recv:
            at = 0
            for o, c in zip(recv_offsets, recv_counts):
                recv_t[o:o + c] = out[at:at + c]
                at += c

    def all_gather_int(self, value):
        signed = value - (1 << 64) if value >= (1 << 63) else value
        mine = torch.tensor([signed], dtype=torch.int64)
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


def _placement_text(p):
    from torch.distributed.tensor import Partial, Replicate, Shard
    if isinstance(p, Shard):
        return f"S({p.dim})"
    if isinstance(p, Replicate):
        return "R"
    if isinstance(p, Partial):
        return "P"
    raise MuonError(f"invalid argument: unsupported DTensor placement {p!r} "
                    "(Shard, Replicate and Partial are)")


def create_dtensor_config(model_or_params, async_=True):
    """The seeds' create_dtensor_config: the mesh and each parameter's
    placements, read from the parameters' DTensor placements and
    device_mesh. Plain tensors are replicated over the default process
    group (DDP). Returns a dict for Muon(distributed_config=...)."""
    params = (list(model_or_params.parameters())
              if isinstance(model_or_params, torch.nn.Module)
              else list(model_or_params))
    meshes = {id(p.device_mesh): p.device_mesh for p in params
              if _is_dtensor(p)}
    if len(meshes) > 1:
        raise MuonError("invalid argument: the parameters' DTensors are on "
                        f"{len(meshes)} different device meshes; muonc needs "
                        "one mesh for the model")
    if meshes:
        mesh = next(iter(meshes.values()))
        ranks = mesh.mesh.flatten().tolist()
        if ranks != list(range(dist.get_world_size())):
            raise MuonError("invalid argument: the device mesh must cover "
                            "the default process group's ranks in order "
                            f"(it holds {ranks})")
        return {"shape": list(mesh.mesh.shape),
                "names": list(mesh.mesh_dim_names or
                              [f"d{i}" for i in range(mesh.ndim)]),
                "async": async_, "group": None, "dtensor": True}
    world = dist.get_world_size() if dist.is_initialized() else 1
    return {"shape": [world], "names": ["dp"], "async": async_,
            "group": None, "dtensor": False}


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
    construction; see TorchCommunicator.owned).
    """

    def __init__(self, params, lr: float = 1e-3, weight_decay: float = 0.1,
                 momentum: float = 0.95, nesterov: bool = True,
                 ns_coefficients=DEFAULT_NS_COEFFICIENTS, eps: float = 1e-7,
                 ns_steps: int = 5, adjust_lr_fn: str | None = None, *,
                 distributed_config: dict | None = None, process_group=None,
                 ns_dtype: str = "f32", timeout: float = 120.0,
                 weight_decay_mode: str = "decoupled"):
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"momentum should be >= 0 but is: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight decay should be >= 0 but is: {weight_decay}")
        _check_adjust(adjust_lr_fn)
        _check_decay_mode(weight_decay_mode)
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                        nesterov=nesterov,
                        ns_coefficients=tuple(ns_coefficients), eps=eps,
                        ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn,
                        weight_decay_mode=weight_decay_mode)
        super().__init__(params, defaults)
        self._ns_dtype = ns_dtype
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
            group.setdefault("betas", (0.9, 0.999))
            group.setdefault("eps", 1e-8)
            group.setdefault("weight_decay", 0.01)
        else:
            for p in params:
                if p.ndim < 2:
                    raise MuonError(
                        "invalid argument: Muon updates matrices (2 or more "
                        f"dims); a parameter of shape {tuple(p.shape)} is in "
                        "a Muon group (put it in a group with use_muon=False)")
            _check_adjust(group.get("adjust_lr_fn"))
            _check_decay_mode(group.get("weight_decay_mode", "decoupled"))
        super().add_param_group(group)

    def _build(self, config, process_group, timeout):
        self._params = []
        names = {}
        devices = set()
        for gi, group in enumerate(self.param_groups):
            group.setdefault("name", f"group{gi}")
            for pi, p in enumerate(group["params"]):
                name = f"{group['name']}.{pi}"
                names[id(p)] = name
                self._params.append((p, name, group))
                devices.add(p.device.type)
        if devices - {"cpu"}:
            raise MuonError("invalid argument: muonc.torch runs on CPU "
                            f"tensors for now; the parameters are on "
                            f"{sorted(devices)}")
        muon_groups = [g for g in self.param_groups if g["use_muon"]]
        for key in _PLAN_KEYS:
            values = {repr(g[key]) for g in muon_groups}
            if len(values) > 1:
                raise MuonError(f"invalid argument: every Muon group must "
                                f"have the same {key} (they have {values})")
        distributed = dist.is_available() and dist.is_initialized()
        if config is None and distributed:
            config = create_dtensor_config(
                [p for p, _, _ in self._params])
        if config is not None and config["shape"] == [1] and not config.get("dtensor"):
            config = None
        self._config = config
        plan_params, plan_groups = [], []
        for p, name, group in self._params:
            entry = {"name": name, "shape": list(p.shape),
                     "dtype": _dtype_name(p), "group": group["name"]}
            if config is not None:
                if _is_dtensor(p):
                    entry["placements"] = [_placement_text(x)
                                           for x in p.placements]
                else:
                    entry["placements"] = ["R"] * len(config["shape"])
            plan_params.append(entry)
        for group in self.param_groups:
            g = {"name": group["name"], "algorithm": group["algorithm"],
                 "lr": float(group["lr"]),
                 "weight_decay": float(group["weight_decay"])}
            if group["use_muon"]:
                g.update(momentum=group["momentum"], nesterov=group["nesterov"],
                         eps=group["eps"], ns_steps=group["ns_steps"],
                         ns_coefficients=list(group["ns_coefficients"]),
                         adjust_lr=group["adjust_lr_fn"] or "original",
                         weight_decay_mode=group["weight_decay_mode"],
                         ns_dtype=self._ns_dtype)
            else:
                g.update(betas=list(group["betas"]), eps=group["eps"])
            plan_groups.append(g)
        mesh = None
        if config is not None:
            mesh = {k: config[k] for k in ("shape", "names", "async")}
            if "assignments" in config:
                mesh["assignments"] = config["assignments"]
        plan = _core.compile_model(plan_params, plan_groups, mesh)
        comm = None
        if config is not None:
            group = process_group if process_group is not None else config.get("group")
            comm = (TorchCommunicator(group) if group is not None
                    else TorchCommunicator.owned())
            if comm.size() != math.prod(config["shape"]):
                raise MuonError(
                    f"invalid argument: the plan is for "
                    f"{math.prod(config['shape'])} ranks, the process group "
                    f"has {comm.size()}")
        self._comm = comm
        self._engine = _core.Optimizer(plan, comm, timeout)
        self._slots = {s["name"]: s for s in self._engine.params()}
        self._pushed = {}
        self._plan_settings = {g["name"]: tuple(repr(g[k]) for k in _PLAN_KEYS)
                               for g in muon_groups}

    @property
    def assignments(self):
        """Per rank, the matrices it orthogonalizes (the seeds'
        optimizer.assignments), by muonc's parameter names
        ("<group name>.<index>")."""
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
                now = tuple(repr(group[k]) for k in _PLAN_KEYS)
                if now != self._plan_settings[name]:
                    raise MuonError(
                        f"invalid argument: group '{name}': ns_coefficients, "
                        "eps and ns_steps are compiled into the plan and "
                        "cannot change after construction")
                _check_adjust(group["adjust_lr_fn"])
                _check_decay_mode(group["weight_decay_mode"])
                values = (float(group["lr"]), float(group["weight_decay"]),
                          float(group["momentum"]), bool(group["nesterov"]),
                          group["adjust_lr_fn"] or "original",
                          group["weight_decay_mode"])
                if self._pushed.get(name) != values:
                    self._engine.set_muon_group(name, *values)
            else:
                b1, b2 = group["betas"]
                values = (float(group["lr"]), float(b1), float(b2),
                          float(group["eps"]), float(group["weight_decay"]))
                if self._pushed.get(name) != values:
                    self._engine.set_adamw_group(name, *values)
            self._pushed[name] = values

    def _local(self, t):
        t = t._local_tensor if _is_dtensor(t) else t
        return t.detach()

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        has = [p.grad is not None for p, _, _ in self._params]
        if self._comm is not None:
            every = self._comm.all_gather_bytes(pickle.dumps(has))
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
        result = self._engine.step()
        if not result["applied"]:
            import warnings
            warnings.warn(f"muonc: step skipped: gradient of "
                          f"{result['non_finite_param']} has NaN or Inf "
                          f"(rank {result['non_finite_rank']})")
        return loss

    # --- state -----------------------------------------------------------

    def state_dict(self):
        """torch's format: 'state' by parameter index, 'param_groups' with
        the hyper-parameters. Each parameter's state holds this rank's
        pieces of it by global box ('pieces'), so the states of every rank
        of one layout load under another (load_state_dict takes a list of
        them); with one piece covering the whole tensor, also torch.optim's
        own keys (momentum_buffer; exp_avg, exp_avg_sq, step)."""
        raw = self._engine.state_dict(False)
        index = {name: i for i, (_, name, _) in enumerate(self._params)}
        state = {}
        for piece in raw["pieces"]:
            i = index[piece["param"]]
            entry = state.setdefault(i, {"pieces": []})
            entry["pieces"].append({
                "box": piece["box"], "summand": piece["summand"],
                "summands": piece["summands"], "step": piece["step"],
                "states": {k: torch.from_numpy(v) for k, v in
                           piece["states"].items()}})
        for i, entry in state.items():
            p = self._params[i][0]
            if len(entry["pieces"]) == 1 and entry["pieces"][0]["summands"] == 1 \
                    and entry["pieces"][0]["box"] == [(0, s) for s in p.shape]:
                piece = entry["pieces"][0]
                for k, v in piece["states"].items():
                    key = "momentum_buffer" if k == "momentum" else k
                    entry[key] = v.view(tuple(p.shape))
                if not self._params[i][2]["use_muon"]:
                    entry["step"] = torch.tensor(float(piece["step"]))
        groups = super().state_dict()["param_groups"]
        return {"state": state, "param_groups": groups,
                "muonc": {"steps": raw["steps"]}}

    def load_state_dict(self, state_dict):
        """Loads a state_dict of this model, or a list of the state_dicts
        of every rank of another layout or world size."""
        dicts = state_dict if isinstance(state_dict, list) else [state_dict]
        pieces = []
        for d in dicts:
            for i, entry in d["state"].items():
                name = self._params[int(i)][1] if int(i) < len(self._params) else None
                if name is None:
                    raise MuonError(f"invalid argument: the state names "
                                    f"parameter {i}; this optimizer has "
                                    f"{len(self._params)}")
                for piece in entry["pieces"]:
                    pieces.append({
                        "param": name, "box": [tuple(r) for r in piece["box"]],
                        "summand": piece["summand"],
                        "summands": piece["summands"], "step": piece["step"],
                        "states": {k: np.ascontiguousarray(
                            v.detach().cpu().float().numpy().reshape(-1))
                            for k, v in piece["states"].items()}})
        saved = dicts[0]["param_groups"]
        if len(saved) != len(self.param_groups):
            raise MuonError(f"invalid argument: the state has {len(saved)} "
                            f"parameter groups, this optimizer "
                            f"{len(self.param_groups)}")
        groups = []
        for g in saved:
            out = {"name": g["name"], "algorithm": g["algorithm"],
                   "lr": float(g["lr"]), "weight_decay": float(g["weight_decay"])}
            if g["algorithm"] == "muon":
                out.update(momentum=g["momentum"], nesterov=g["nesterov"],
                           adjust_lr=g["adjust_lr_fn"] or "original",
                           weight_decay_mode=g.get("weight_decay_mode",
                                                   "decoupled"))
            else:
                out.update(betas=list(g["betas"]), eps=g["eps"])
            groups.append(out)
        self._engine.load_state_dict(
            {"steps": dicts[0]["muonc"]["steps"], "pieces": pieces,
             "groups": groups}, False)
        for group, g in zip(self.param_groups, saved):
            for k, v in g.items():
                if k != "params":
                    group[k] = v
        self._pushed = {}


def _dtype_name(p):
    if p.dtype == torch.float32:
        return "f32"
    if p.dtype == torch.bfloat16:
        return "bf16"
    if p.dtype == torch.float16:
        return "f16"
    raise MuonError(f"invalid argument: parameters of {p.dtype} are not "
                    "supported (float32, bfloat16, float16 are)")


# adjust_lr's values (muon::kAdjustLrNames; docs/spec-format.md 1.3).
_ADJUST_LR = ("original", "match_rms_adamw", "spectral", "unit_rms_norm",
              "spectral_unclamped")


_DECAY_MODES = ("decoupled", "cautious", "none")


def _check_decay_mode(mode):
    if mode not in _DECAY_MODES:
        raise MuonError(f"invalid argument: weight_decay_mode {mode!r} is not "
                        "supported ('decoupled', 'cautious', 'none')")


def _check_adjust(fn):
    if fn is not None and fn not in _ADJUST_LR:
        raise MuonError(f"invalid argument: adjust_lr_fn {fn!r} is not "
                        "supported (None, "
                        + ", ".join(repr(n) for n in _ADJUST_LR) + ")")

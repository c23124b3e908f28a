"""Binding the optimizer to its parameters, their layouts and the world.

A torch optimizer may be constructed before the process group exists,
before DDP or ``fully_shard`` wraps the model, and before a framework
(accelerate's ``prepare()``) swaps ``param_groups[i]["params"]`` for the
sharded parameters. So muonc reads the parameters, their layouts and the
world when it first needs them (the first step, a load of saved state, a
property that shows the plan) and compiles the plan then; at each step it
checks that ``param_groups`` still hold the tensors of the plan and that
the world is the one the plan was made for, and compiles again when not,
carrying every parameter's state over by its place in the groups, as
``add_param_group`` carries it. Building is collective where the plan spans
ranks; every rank waits at most the optimizer's timeout for the others
(_deadline.py).
"""
from __future__ import annotations

import contextlib
import math
import pickle

import torch
import torch.distributed as dist

from .. import _core
from .._core import FailedPreconditionError, InvalidArgumentError
from . import _owner_reduce, _owner_state, _state
from ._communicator import TorchCommunicator
from ._layouts import (create_dtensor_config, engine_device_name, is_dtensor,
                       local, model_mesh)
from ._plan import compile_plan, dtype_name, engine_device
from ._qk_clip import compile_layers
from ._settings import heads_by_name, plan_settings

__all__ = ["BUILT", "build", "ensure_bound", "is_bound", "rebuild",
           "world_key"]

# What build sets, restored by a build that fails.
BUILT = ("_engine", "_params", "_unsupported", "_device", "_config",
         "_heads", "_qk_heads", "_slots", "_pushed", "_plan_settings",
         "_names", "_owner_segments", "_binding", "_comm", "_places")


_CPU = torch.device("cpu")


@contextlib.contextmanager
def all_or_nothing(opt):
    """Restores what a build sets (the engine, the plan's attributes, the
    names) and opt.state's entries as they were when the body raises: a
    failed build, rebuild or load leaves the optimizer as it was."""
    kept = {k: getattr(opt, k) for k in BUILT}
    names = dict(opt._names)
    entries = {p: dict(e) for p, e in opt.state.items() if isinstance(e, dict)}
    groups = opt.param_groups
    try:
        yield
    except BaseException:
        for k, v in kept.items():
            setattr(opt, k, v)
        opt._names = names
        opt.param_groups = groups
        for p in [p for p in opt.state if p not in entries]:
            del opt.state[p]
        for p, contents in entries.items():
            opt.state[p].clear()
            opt.state[p].update(contents)
        raise


def torch_distributed():
    return dist.is_available() and dist.is_initialized()


def world_key(opt):
    """The world a plan is for: MPI's (fixed for the process), or the
    torch process group's size (1 before init_process_group)."""
    if opt._options["communicator"] == "mpi":
        return ("mpi",)
    if not torch_distributed():
        return ("torch", 1)
    group = opt._options["process_group"]
    return ("torch", dist.get_world_size(group) if group is not None
            else dist.get_world_size())


def binding_key(opt):
    """What a plan is bound to: the tensors of param_groups, in order, and
    the world."""
    return (tuple(id(p) for g in opt.param_groups for p in g["params"]),
            world_key(opt))


def is_bound(opt):
    return opt._engine is not None


def ensure_bound(opt):
    """Builds the plan on first need; builds it again, carrying the state
    over, when param_groups hold other tensors than the plan's or the world
    changed. Collective where the plan spans ranks."""
    if opt._engine is None:
        build(opt)
        return
    key = binding_key(opt)
    if key == opt._binding:
        return
    old_params, old_world = opt._binding
    if old_world != key[1] and opt._comm is not None:
        raise FailedPreconditionError(
            "failed precondition: the process group changed after the "
            f"optimizer's plan was made for it ({old_world[1]} ranks, now "
            f"{key[1][1] if len(key[1]) > 1 else 'MPI'}); save state_dict() "
            "and load it into a new optimizer")
    if opt._options.get("owner_reduced") and old_params != key[0]:
        raise FailedPreconditionError(
            "failed precondition: param_groups hold other tensors than when "
            "reduce_gradients_to_owners was called; call it again on a new "
            "optimizer over the new parameters")
    rebuild(opt, moved=_moved_names(opt))


def _moved_names(opt):
    """{id(new tensor): name} for each place in param_groups whose tensor
    was replaced (accelerate's swap for the sharded parameters, a user's):
    the new tensor takes the old one's name, and so its state, where their
    global shapes agree; else it starts from zeros under a name of its
    own."""
    old = {}
    for p, name, group in opt._params:
        old[id(p)] = (p, name)
    places = {}
    for gi, g in enumerate(opt.param_groups):
        for pi, p in enumerate(g["params"]):
            places.setdefault((gi, pi), p)
    moved, dropped = {}, set()
    for (gi, pi), (p, name) in opt._places.items():
        new = places.get((gi, pi))
        if new is None or new is p or id(new) in old:
            continue
        if tuple(new.shape) == tuple(p.shape) and new.dtype == p.dtype:
            moved[id(new)] = name
        else:
            dropped.add(name)
    return moved, dropped


def check_arguments(opt):
    """What the groups' tensors and the arguments say of themselves,
    checked when they are given (construction, add_param_group) rather
    than at the first step: element types, a distributed config made from
    a module naming exactly them, layouts, and everything the compiler
    checks (heads that divide a dim, QK-clip layers that fit their
    matrices, placement settings), on the plan as the parameters and the
    world are now. Devices and the process group's size wait for the
    build: a framework may still move or swap the tensors, or start the
    process group."""
    _plan_inputs(opt, at_construction=True)


def _plan_inputs(opt, at_construction=False):
    """Resolves what the plan is compiled from as things are now (the
    config, the parameters' names, their device, heads, QK-clip, the
    precisions) onto opt, and compiles it (cached: a build right after
    construction reuses the plan). Returns (plan, config, distributed,
    mpi_size)."""
    opts = opt._options
    distributed = torch_distributed()
    mpi = opts["communicator"] == "mpi"
    mpi_size = _mpi_size(distributed) if mpi else 1
    config = opts["config"]
    all_params = [p for g in opt.param_groups for p in g["params"]]
    if config is None and distributed:
        config = create_dtensor_config(all_params)
    elif config is None and mpi and mpi_size > 1:
        # Plain tensors on every MPI rank: replicated (DDP-like).
        config = {"shape": [mpi_size], "names": ["dp"], "async": True,
                  "group": None, "dtensor": False}
    params, unsupported = _named_params(opt, config)
    for p, name, _ in params:
        dtype_name(p, name)
    _check_config_params(config, params)
    if at_construction:
        try:
            device = engine_device(params)
        except (ValueError, RuntimeError):
            device = _CPU  # where they are is the build's to check
    else:
        device = engine_device(params)
    config = _with_mesh(_single_as_none(config), params)
    heads = heads_by_name(params)
    threshold, layers = opts["qk_clip"]
    qk_clip = compile_layers(threshold, layers, params)
    ns_dtype, wire_dtype = precisions(opts, device)
    plan = compile_plan(params, opt.param_groups, config, heads, qk_clip,
                        ns_dtype, wire_dtype, cache=opt._compiled)
    if not at_construction:
        opt._params, opt._unsupported = params, unsupported
        opt._device, opt._config, opt._heads = device, config, heads
        opt._qk_heads = {l["name"]: l["num_heads"] for l in qk_clip}
    return plan, config, distributed, mpi_size


def _single_as_none(config):
    """A plain one-rank config is one process's plan."""
    if config is not None and config["shape"] == [1] and \
            not config.get("dtensor"):
        return None
    return config


def _with_mesh(config, params):
    """A hand-written config for DTensor parameters gets their mesh."""
    if config is not None and not config.get("dtensor") and any(
            is_dtensor(p) for p, _, _ in params):
        return dict(config, mesh=model_mesh([p for p, _, _ in params]))
    return config


def build(opt):
    """Compiles the plan of the current groups and makes the engine
    (collective where distributed); opt.state gets views of its state,
    which starts at zero."""
    opts = opt._options
    plan, config, distributed, mpi_size = _plan_inputs(opt)
    opt._places = _places(opt)
    if config is not None and opts["communicator"] != "mpi":
        _arrive(opt, config)
    if opt._comm is None and config is not None:
        opt._comm = _communicator(opt, config, distributed, mpi_size)
    device = engine_device_name(opt._device)
    gpu_transport = ""
    if device != "cpu" and isinstance(opt._comm, TorchCommunicator):
        gpu_transport = opt._comm.gpu_transport(device)
    opt._engine = _core.Optimizer(plan, opt._comm, opts["timeout"], False,
                                  opts["ns_form"], device, gpu_transport)
    opt._slots = {s["name"]: s for s in opt._engine.params()}
    for p, name, _ in opt._params:
        have = tuple(local(p).shape)
        want = tuple(e - b for b, e in _state.box(opt, name, p))
        if have != want:
            raise FailedPreconditionError(
                f"internal: parameter '{name}': this rank holds a piece "
                f"of shape {have}, the plan expects {want}; muonc splits "
                "as torch.chunk")
    opt._pushed = {}
    opt._plan_settings = {g["name"]: plan_settings(g)
                          for g in opt.param_groups
                          if g["algorithm"] == "muon"}
    _state.attach_views(opt)
    # reduce_gradients_to_owners: DDP's hook reads the owners of this
    # plan at every bucket, so a group added later joins them.
    opt._owner_segments = (_owner_reduce.owner_segments(opt)
                           if opts.get("owner_reduced") else {})
    # Zero gradients outside the owners: the engine leaves their
    # momentum (zero) alone there.
    opt._engine.set_gradients_reduced_to_owners(
        bool(opts.get("owner_reduced")))
    opt._binding = binding_key(opt)


def _arrive(opt, config):
    """Every rank of the plan's world reaches this build within the
    deadline, or those that did are told which did not."""
    group = opt._options["process_group"] or config.get("group")
    if not torch_distributed():
        return
    ranks = (dist.get_process_group_ranks(group) if group is not None
             else list(range(dist.get_world_size())))
    opt._deadline.arrive("build the optimizer's plan (at its first step, "
                         "load_state_dict() or add_param_group())", ranks)


def _places(opt):
    """{(group index, index in the group): (tensor, name)} of the plan's
    parameters: where each was, for carrying state over to a tensor that
    takes its place."""
    names = {id(p): name for p, name, _ in opt._params}
    out = {}
    for gi, g in enumerate(opt.param_groups):
        for pi, p in enumerate(g["params"]):
            if id(p) in names:
                out[(gi, pi)] = (p, names[id(p)])
    return out


def _named_params(opt, config):
    """(parameter, name, group) of every parameter the plan steps, each
    once, and (parameter, name) of those it cannot (complex ones, which
    a step with their gradient refuses as torch does). Names: kept from
    an earlier build, else given (param_names, a config made from a
    module), else "<group name>.<index>"."""
    known = {}
    if config is not None and config.get("named_parameters"):
        known = {id(p): n for n, p in config["named_parameters"]}
    params, unsupported, taken = [], [], {}
    for gi, group in enumerate(opt.param_groups):
        group.setdefault("name", f"group{gi}")
        given = group.get("param_names")
        for pi, p in enumerate(group["params"]):
            if id(p) in taken:
                continue  # a duplicate, which torch warned about
            name = opt._names.get(id(p)) or (
                given[pi] if given else
                known.get(id(p), f"{group['name']}.{pi}"))
            if name in taken.values():
                raise InvalidArgumentError(
                    f"invalid argument: two parameters are named "
                    f"'{name}'")
            taken[id(p)] = name
            if p.is_complex():
                unsupported.append((p, name))
            else:
                params.append((p, name, group))
    opt._names = dict(taken)
    return params, unsupported


def _communicator(opt, config, distributed, mpi_size):
    """The runtime's communicator for a distributed plan: MPI's world,
    or a torch process group (the given one, else one of its own)."""
    size = math.prod(config["shape"])
    if opt._options["communicator"] == "mpi":
        if mpi_size != size:
            raise InvalidArgumentError(
                f"invalid argument: the plan is for {size} ranks, "
                f"MPI_COMM_WORLD has {mpi_size}")
        return "mpi"
    if not distributed:
        raise InvalidArgumentError(
            f"invalid argument: the distributed config is for {size} "
            "ranks, but torch.distributed is not initialized")
    group = opt._options["process_group"]
    if group is None:
        group = config.get("group")
    have = (dist.get_world_size(group) if group is not None
            else dist.get_world_size())
    if have != size:
        raise InvalidArgumentError(
            f"invalid argument: the plan is for {size} ranks, the "
            f"process group has {have}")
    return (TorchCommunicator(group, opt._deadline) if group is not None
            else TorchCommunicator.owned(deadline=opt._deadline))


def rebuild(opt, moved=None):
    """Compiles the plan again for the groups as they are now (a new group,
    a changed plan setting, tensors that took others' places, a world of
    more ranks), carrying every parameter's state over bit for bit; new
    parameters start from zeros. `moved`: ({id(new tensor): old name},
    old names whose tensor left with its state). Collective where
    distributed. On failure the optimizer is as it was."""
    renames, dropped = moved or ({}, set())
    raw = opt._engine.state_dict(False)
    rows = _state.every_row_state(opt, raw)
    pieces = [pc for pc in raw["pieces"] if pc["param"] not in dropped]
    if renames and opt._comm is not None and (raw["steps"] or
                                              opt._loaded_state):
        # The layout may change with the tensors (replicated ones for
        # sharded ones): every rank's pieces, each rank taking its own.
        pieces = _every_rank_pieces(opt, pieces)
    before = {name for _, name, _ in opt._params} - dropped
    old_places = dict(opt._places)
    with all_or_nothing(opt):
        opt._names.update(renames)
        for name in dropped:
            for key, n in list(opt._names.items()):
                if n == name:
                    del opt._names[key]
        build(opt)
        for p, name, group in opt._params:
            if name not in before:
                pieces.extend(_state.zero_pieces(opt, p, name, group))
        # Per-row states of the matrices that keep them now.
        keeping = {name for _, name, g in opt._params
                   if _state.matrix_steps(g)}
        row_states = [{"param": param, "slice": piece, "state": state,
                       "values": values}
                      for (param, piece, state), values in rows.items()
                      if param in keeping and param not in dropped]
        opt._engine.load_state_dict(
            {"steps": raw["steps"], "pieces": pieces, "groups": [],
             "row_states": row_states}, False)
        if opt._options.get("owner_reduced"):
            # The owners may have moved: the momentum follows them.
            _owner_state.gather_to_new_owners(opt)
    _forget_left(opt, old_places)


def _every_rank_pieces(opt, pieces):
    """Every rank's state pieces (replicated ones once)."""
    every = opt._engine.all_gather_bytes(pickle.dumps(pieces))
    out, seen = [], set()
    for blob in every:
        for pc in pickle.loads(blob):
            key = (pc["param"], tuple(tuple(r) for r in pc["box"]),
                   pc["summand"])
            if key not in seen:
                seen.add(key)
                out.append(pc)
    return out


def _forget_left(opt, old_places):
    """Drops opt.state's entries of tensors that left the groups, moving
    what else a hook or the user kept there (keys that are not the engine's
    views) to the tensor that took each one's place."""
    now = {id(p) for p, _, _ in opt._params}
    for place, (p, _) in old_places.items():
        if id(p) in now or p not in opt.state:
            continue
        entry = opt.state.pop(p)
        extra = {k: v for k, v in entry.items()
                 if k not in _state.ENGINE_KEYS}
        successor = opt._places.get(place)
        if extra and successor is not None:
            opt.state[successor[0]].update(extra)


def precisions(options, device):
    """(ns_dtype, wire_dtype) of a step on `device`: as given, else the
    device's defaults: f32 on the CPU (in the Gram form where it pays: the
    fastest accurate choice there), bf16 on a GPU (torch.optim.Muon's
    precision, on tensor cores); bf16 exchanges with bf16 Newton-Schulz,
    which rounds its input and output to bf16 anyway, f32 with f16
    Newton-Schulz, which normalizes its f32 input before rounding it
    (docs/decisions.md). "auto" is left to
    the engine's device ("" in the plan: on the CPU the faster precision
    by its products' rates, rank 0's on every rank), after the wire is
    compiled: f32 unless given."""
    ns_dtype = options["ns_dtype"]
    if ns_dtype is None:
        ns_dtype = "bf16" if device.type == "cuda" else "f32"
    wire_dtype = options["wire_dtype"]
    if wire_dtype is None:
        wire_dtype = "bf16" if ns_dtype == "bf16" else "f32"
    return ("" if ns_dtype == "auto" else ns_dtype), wire_dtype


def _mpi_size(distributed):
    """MPI_COMM_WORLD's size, checked against torch.distributed's ranks."""
    mpi_rank, mpi_size = _core.mpi_world()
    if distributed and (dist.get_rank(), dist.get_world_size()) != \
            (mpi_rank, mpi_size):
        raise InvalidArgumentError(
            f"invalid argument: torch.distributed's rank {dist.get_rank()} "
            f"of {dist.get_world_size()} is MPI's {mpi_rank} of {mpi_size}: "
            "start torch.distributed with MPI's ranks "
            "(OMPI_COMM_WORLD_RANK/SIZE) to exchange through MPI")
    return mpi_size


def _check_config_params(config, params):
    """A config made from a module describes exactly the parameters the
    optimizer steps (its trainable ones)."""
    if config is None or not config.get("named_parameters"):
        return
    mine = {id(p) for p, _, _ in params}
    missing = [n for n, p in config["named_parameters"]
               if p.requires_grad and id(p) not in mine]
    if missing:
        raise InvalidArgumentError(
            "invalid argument: parameter" +
            ("s " if len(missing) > 1 else " ") +
            ", ".join(f"'{n}'" for n in missing[:5]) +
            (f" (and {len(missing) - 5} more)" if len(missing) > 5 else "") +
            " of the model the distributed config describes " +
            ("are" if len(missing) > 1 else "is") +
            " in no parameter group: give every trainable parameter to the "
            "optimizer, or make the config from the parameters it steps")
    described = {id(p) for _, p in config["named_parameters"]}
    strangers = [n for p, n, _ in params if id(p) not in described]
    if strangers:
        raise InvalidArgumentError(
            f"invalid argument: parameter '{strangers[0]}' is not a "
            "parameter of the model the distributed config was made from")

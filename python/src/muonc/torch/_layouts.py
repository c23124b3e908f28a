"""Parameter layouts: DTensor placements and meshes in the compiler's terms.

Plain tensors are whole on every rank (one process, DDP); DTensors (FSDP2's
fully_shard, TP's parallelize_module, EP) bring their mesh and placements,
which become each parameter's placements ("R", "S(d)") and split order on
the model's mesh.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from .._core import InvalidArgumentError


def is_dtensor(t):
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover
        return False
    return isinstance(t, DTensor)


def local(t):
    """This rank's piece of a tensor (a DTensor's local tensor), detached."""
    t = t._local_tensor if is_dtensor(t) else t
    return t.detach()


def _expert_axis(name):
    """Whether a mesh axis name says expert parallelism ("ep",
    torchtitan's "dp_shard_in_ep", "experts")."""
    return any(token in ("ep", "expert", "experts")
               for token in str(name).lower().split("_"))


def shows_expert_dim(p):
    """Whether a parameter of 3 or more dims is laid out as a stack of
    experts' matrices: a DTensor sharded on dim 0 over an expert-parallel
    mesh axis (EP's Shard(0))."""
    if p.ndim < 3 or not is_dtensor(p):
        return False
    from torch.distributed.tensor import Shard
    names = p.device_mesh.mesh_dim_names or ()
    return any(isinstance(pl, Shard) and pl.dim == 0 and i < len(names)
               and _expert_axis(names[i])
               for i, pl in enumerate(p.placements))


def _mesh_key(mesh):
    return (tuple(mesh.mesh.shape), tuple(mesh.mesh.flatten().tolist()),
            tuple(mesh.mesh_dim_names or ()))


def _axis_names(mesh):
    return list(mesh.mesh_dim_names or [f"d{i}" for i in range(mesh.ndim)])


def model_mesh(params):
    """The one mesh covering every rank that the DTensor parameters' meshes
    are (named) sub-meshes of: FSDP2 over TP puts the TP layers on the
    concatenated (dp, tp) mesh and the other parameters on the dp
    sub-mesh."""
    meshes = {}
    for p in params:
        if is_dtensor(p):
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
        raise InvalidArgumentError(
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
    mesh = model_mesh(params) if dist.is_initialized() else None
    if mesh is not None:
        ranks = mesh.mesh.flatten().tolist()
        if ranks != list(range(dist.get_world_size())):
            raise InvalidArgumentError("invalid argument: the device mesh must cover "
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


def layout_of(p, name, config):
    """(placements, split) of a parameter on the config's mesh, in the
    compiler's terms ("R", "S(d)"; split {dim: [axis names, major
    first]})."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard
    names = list(config["names"])
    if not is_dtensor(p):
        # Whole on every rank, and so is its gradient.
        return ["R"] * len(names), {}
    mesh = config.get("mesh")
    pm = p.device_mesh
    if mesh is None:
        raise InvalidArgumentError(f"invalid argument: parameter '{name}' is a DTensor "
                        "but the distributed config has no device mesh "
                        "(make it with create_dtensor_config)")
    if _mesh_key(pm) == _mesh_key(mesh):
        axes = list(range(pm.ndim))
    else:
        sub = list(pm.mesh_dim_names or [])
        if not sub or any(n not in names for n in sub):
            raise InvalidArgumentError(
                f"invalid argument: parameter '{name}': its device mesh "
                f"(dims {sub or 'unnamed'}) is neither the model's mesh "
                f"{names} nor a named sub-mesh of it")
        axes = [names.index(n) for n in sub]
        coord = mesh.get_coordinate()
        if coord is None:
            raise InvalidArgumentError(f"invalid argument: parameter '{name}': this "
                            "rank is not in the model's device mesh")
        index = [slice(None) if a in axes else coord[a]
                 for a in range(len(names))]
        expect = mesh.mesh[tuple(index)]
        order = sorted(axes)
        expect = expect.permute([order.index(a) for a in axes])
        if expect.tolist() != pm.mesh.tolist():
            raise InvalidArgumentError(
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
            raise InvalidArgumentError(
                f"invalid argument: {where}: a parameter's values must be "
                "replicated or sharded (only gradients may be partial sums)")
        else:
            raise InvalidArgumentError(f"invalid argument: {where} is not supported "
                            "(Shard, Replicate and FSDP2's _StridedShard are)")
        if not 0 <= dim < p.ndim:
            raise InvalidArgumentError(f"invalid argument: {where}: the parameter has "
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
            raise InvalidArgumentError(
                f"invalid argument: parameter '{name}': placements "
                f"{list(p.placements)} are not supported (a _StridedShard is "
                "supported as FSDP2 makes it over a TP split of the same dim)")
        split[dim] = [names[b] for b in later] + [names[pairs[0][0]]]
    return placements, split


def engine_device_name(device):
    """The runtime's name of a torch device: "cpu", "cuda:N"."""
    return "cpu" if device.type == "cpu" else f"cuda:{device.index}"


def current_stream(device):
    """torch's current stream on a GPU (its cudaStream_t as an integer),
    which a step is ordered with; None on the CPU."""
    if device.type != "cuda":
        return None
    return torch.cuda.current_stream(device).cuda_stream


def like(p, local):
    """`local` (this rank's piece) with the parameter's layout, on its
    device."""
    local = local.to(p.device)
    if not is_dtensor(p):
        return local
    from torch.distributed.tensor import DTensor
    return DTensor.from_local(local, p.device_mesh, p.placements,
                              run_check=False, shape=p.shape,
                              stride=p.stride())

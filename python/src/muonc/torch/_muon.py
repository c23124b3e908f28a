"""muonc.torch.Muon: torch.optim.Muon's optimizer, distributed and compiled.

The structure follows torch's optimizers: arguments are checked as torch
checks them, param groups are torch's, ``opt.state`` holds each parameter's
state (views of the runtime's buffers), ``state_dict()`` and
``load_state_dict()`` are torch's own with their hooks, and a step binds
every parameter's local tensor and gradient (None: the parameter is left
out, as torch leaves it) and runs the compiled plan.
"""
from __future__ import annotations

import copy
import math
import warnings
from collections import defaultdict
from typing import Any

import torch
import torch.distributed as dist

from .._core import (FailedPreconditionError, InvalidArgumentError,
                     MuonTypeError)
from . import (_binding, _clipping, _grouping, _load_checks, _owner_reduce,
               _owner_state, _state)
from ._communicator import launched_by_mpirun
from ._deadline import Deadline
from ._layouts import current_stream, local, shows_expert_dim
from ._qk_clip import checked_logits
from ._settings import (ALGORITHMS, DEFAULT_NS_COEFFICIENTS, ELEMENTWISE,
                        HEAD_KEYS, SETTINGS, STACKED_KEY, check_adjust,
                        check_decay_mode, check_lr, check_muon_group,
                        check_muon_numbers, check_normuon, element_defaults,
                        plan_settings, table_settings, torch_key)

_NS_DTYPES = ("f32", "bf16", "f16", "auto")
_NS_FORMS = ("auto", "standard", "gram")
_WIRE_DTYPES = ("f32", "bf16")


# consolidate_state_dict() gathered the whole state to another rank.
_ELSEWHERE = object()

_COUNTERS = ("bytes_sent", "bytes_received", "ns_flops",
             "control_collectives", "exchanges", "host_copies",
             "host_copy_bytes")


class Muon(torch.optim.Optimizer):
    """torch.optim.Muon's arguments and defaults, distributed.

    A group's ``use_muon`` (bool) or ``algorithm`` ("muon", "adamw" or
    another registered element-wise algorithm: ``_core.algorithms()``) says
    which optimizer updates it; without either, a group of 2-D parameters
    is Muon and one of parameters with fewer dims AdamW. AdamW groups take
    ``lr``, ``betas`` (0.9, 0.999), ``eps`` (1e-8) and ``weight_decay``
    (0.01); other algorithms' groups their settings of the runtime's table
    (``_core.group_settings()``), with its defaults. Muon groups may differ in every setting, Newton-Schulz's
    (``ns_steps``, ``ns_coefficients``, ``eps``) included; changing one
    that the plan fixes (those, ``normuon``, the heads) recompiles the plan
    at the next step, keeping the state.

    A Muon group takes 2-D parameters; a parameter of more dims is a stack
    of matrices (its last two dims each matrix, e.g. torchtitan's
    GroupedExperts ``[E, out, in]``) where the group says
    ``stacked_matrices=True`` or its DTensor layout shards dim 0 over an
    expert-parallel mesh axis; otherwise torch's ValueError.

    ``distributed_config``: None to read the layout from the parameters
    (plain tensors over the default process group when torch.distributed
    is initialized, else one process), or the dict of
    ``create_dtensor_config``. ``process_group``: the group exchanges go
    through (default: a gloo group of its own over every rank, made at
    construction; see TorchCommunicator.owned). ``communicator``: "torch"
    (that process group), "mpi" (MPI_COMM_WORLD: processes started by
    mpirun), or None: "mpi" under mpirun, else "torch". ``wire_dtype``:
    the exchanges' element type, "f32" (default) or "bf16" (half the
    bytes; with ``ns_dtype="bf16"`` it loses nothing); by default bf16
    with bf16 Newton-Schulz, else f32 (f16 Newton-Schulz too: it
    normalizes the f32 input before rounding it). ``ns_dtype``: the
    precision of Newton-Schulz's products, "f32", "bf16" (as
    torch.optim.Muon), "f16" (normalized in f32, then f16 products with f32
    accumulation: 3 more bits than bf16, coefficients checked against f16's
    range) or "auto" (the device's choice); by default f32 on the CPU and
    bf16 on a GPU.
    ``ns_form``: the form its steps run in on the CPU: "auto" (default: the
    Gram form on wide and tall matrices where it pays and the coefficients
    keep it accurate, in f32 about twice f32's rounding error, far below
    bf16's), "standard" (torch's iteration) or "gram" (the Gram form
    whatever the coefficients; docs/performance.md). Every rank should use
    the same settings.

    Per-head Newton-Schulz: ``num_heads`` cuts each matrix of a Muon group
    into that many blocks along ``head_split_dim`` (0: rows, 1: columns),
    each orthogonalized (and its lr adjusted) as a matrix of its own; an
    int for the group or a dict by parameter name.

    QK-clip (MuonClip, Kimi K2): ``qk_clip_layers``, one dict per attention
    layer (``name``, ``query``, ``key``, ``num_heads``, optionally
    ``num_kv_heads`` and ``threshold``, else ``qk_clip_threshold``); each
    step takes that step's per-head max logits (``step(qk_max_logits=
    {name: tensor})`` or ``set_qk_max_logits``), the largest over ranks.

    Differences from torch.optim.Muon: ``opt.state[p]`` exists from
    construction (zeros until the parameter's first step) and its tensors
    are float32 whatever the parameter's dtype; copies (deepcopy, pickle,
    torch.save of the optimizer) work in one process and raise in a
    distributed run (use state_dict() or DCP).
    """

    def __init__(self, params, lr: float = 1e-3, weight_decay: float = 0.1,
                 momentum: float = 0.95, nesterov: bool = True,
                 ns_coefficients=DEFAULT_NS_COEFFICIENTS, eps: float = 1e-7,
                 ns_steps: int = 5, adjust_lr_fn: str | None = None, *,
                 distributed_config: dict | None = None, process_group=None,
                 ns_dtype: str | None = None, timeout: float = 120.0,
                 weight_decay_mode: str = "decoupled", normuon: bool = False,
                 normuon_beta2: float = 0.95,
                 num_heads: int | dict | None = None,
                 head_split_dim: int | dict = 0,
                 communicator: str | None = None,
                 wire_dtype: str | None = None,
                 qk_clip_threshold: float | None = None,
                 qk_clip_layers: list | None = None,
                 ns_form: str = "auto", stacked_matrices: bool = False,
                 **settings):
        check_lr(lr)
        check_muon_numbers(momentum, weight_decay)
        check_adjust(adjust_lr_fn)
        check_decay_mode(weight_decay_mode)
        check_normuon(normuon, normuon_beta2)
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                        nesterov=nesterov,
                        ns_coefficients=tuple(ns_coefficients), eps=eps,
                        ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn,
                        weight_decay_mode=weight_decay_mode, normuon=normuon,
                        normuon_beta2=normuon_beta2, num_heads=num_heads,
                        head_split_dim=head_split_dim,
                        stacked_matrices=stacked_matrices)
        # The table's other Muon settings (muon/Plan/GroupSettings.h) by
        # keyword, with the table's defaults: a setting added there is a
        # keyword here without a change to this class.
        for x in SETTINGS:
            if x["algorithm"] == "muon" and torch_key(x) not in defaults:
                defaults[torch_key(x)] = settings.pop(torch_key(x),
                                                      x["default"])
        if settings:
            raise MuonTypeError("Muon.__init__() got an unexpected keyword "
                                f"argument {next(iter(settings))!r}")
        self._options = _checked_options(
            ns_dtype=ns_dtype, wire_dtype=wire_dtype, ns_form=ns_form,
            communicator=communicator, process_group=process_group,
            timeout=timeout, config=distributed_config,
            qk_clip=(qk_clip_threshold, list(qk_clip_layers or [])))
        self._init_unbound()
        self._constructed = False
        super().__init__(params, defaults)
        _binding.check_arguments(self)
        self._constructed = True

    def _init_unbound(self):
        """The optimizer before its plan is built (_binding.py): built at
        the first step, load_state_dict() of saved state, or a property
        that shows the plan."""
        self._engine = None
        self._comm = None
        self._binding = None
        self._params, self._unsupported = [], []
        self._device = self._config = None
        self._heads, self._qk_heads, self._slots = {}, {}, {}
        self._pushed, self._plan_settings, self._owner_segments = {}, {}, {}
        self._places = {}
        self._compiled = {}  # the last plan compiled, by its inputs
        self._names = {}  # id(parameter) -> its name in the plan
        self._qk_pending = {}
        self._qk_clipped = 0
        self._last_step = {}
        self._loaded_state = False
        self._step_calls = 0
        self._consolidated = None  # consolidate_state_dict()'s, until a step
        self._deadline = Deadline(self._options["timeout"])
        self._hook = None  # reduce_gradients_to_owners' DDP hook state

    @classmethod
    def for_model(cls, model, **kwargs):
        """The optimizer on the usual split of `model`
        (muonc.torch.param_groups): Muon for the hidden layers' matrices,
        AdamW for embeddings, the output head, norms and biases. Takes
        param_groups' keyword arguments (adamw_lr, adamw_betas, adamw_eps,
        adamw_weight_decay, adamw_names, muon_names) and this class's;
        Lightning's configure_optimizers can return it as it is."""
        split, rest = _grouping.split_kwargs(kwargs)
        return cls(_grouping.param_groups(model, **split), **rest)

    # --- parameter groups --------------------------------------------------

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """torch's add_param_group. After construction it is collective
        where the optimizer is distributed (every rank adds the same group):
        the plan is compiled again with every group, and the state of the
        parameters already there carries over bit for bit."""
        if not isinstance(param_group, dict):
            raise MuonTypeError("param_group must be a dict, but got "
                                f"{type(param_group).__name__}")
        params = param_group["params"]
        if not isinstance(params, (torch.Tensor, set, list, tuple)):
            param_group["params"] = params = list(params)  # a generator
        items = [params] if isinstance(params, torch.Tensor) else params
        tensors = [x[1] if isinstance(x, tuple) and len(x) == 2 else x
                   for x in items]
        tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
        _resolve_algorithm(param_group, tensors)
        _check_group({**self.defaults, **param_group}, tensors,
                     self._options["ns_dtype"])
        param_group.setdefault("name", f"group{len(self.param_groups)}")
        super().add_param_group(param_group)
        if self._constructed and self._engine is None:
            try:
                _binding.check_arguments(self)
            except BaseException:
                self.param_groups.pop()
                raise
        if self._engine is not None:
            try:
                _binding.rebuild(self)
            except BaseException:
                self.param_groups.pop()  # all or nothing
                raise

    def _state_dict_of_sums(self):
        """torch's state_dict() with each state kept as summands (owner
        reduction) summed over the ranks (collective)."""
        sums = _owner_state.summed_state(self)
        # torch packs the per-parameter dicts themselves: new ones for the
        # sums, the views' own put back after.
        kept = {}
        try:
            for (p, key), total in sums.items():
                kept.setdefault(p, self.state[p])
                self.state[p] = dict(self.state[p], **{key: total})
            return super().state_dict()
        finally:
            for p, entry in kept.items():
                self.state[p] = entry

    def reduce_gradients_to_owners(self, ddp_model):
        """Under DDP, moves no more bytes than DDP's all-reduce alone: the
        module's communication hook reduces the gradient of each matrix
        this optimizer orthogonalizes to its owner only (one all_to_all per
        bucket, started during the backward pass as DDP's all-reduce is),
        and the owner steps it and sends the update back. This optimizer's
        other gradients (AdamW's, matrices the placement keeps on every
        rank) ride in the same all_to_all: on 2 ranks both summands to
        both ranks; on more, summed in shares, one per rank, gathered
        whole at the start of step() (or clip_grad_norm_).
        Every sum adds the ranks' gradients in rank order, as one process
        would, so training equals one process bit for bit. Gradients of
        parameters of other optimizers are all-reduced as DDP would.

        Call it once, on every rank, before the backward pass whose
        gradients the next step uses (the HF Trainer wraps the model in
        DDP inside train(): muonc.torch.hf.reduce_gradients_to_owners does
        it there). Between backward and step a matrix's ``.grad`` is the
        mean gradient on its owner and zero on the other ranks, and on
        more than 2 ranks the other gradients are whole only in this
        rank's share; so from this call on, ``torch.nn.utils.
        clip_grad_norm_`` (which every framework's clipping calls) takes
        the norm of the whole gradient when given this optimizer's
        parameters, collectively, as ``opt.clip_grad_norm_`` does
        (_clipping.py). Muon's momentum lives on the owners (opt.state
        shows zeros elsewhere); ``state_dict()`` sums it over the ranks,
        so it is collective then: call it on every rank, as under FSDP, or
        ``consolidate_state_dict()`` on every rank and then
        ``state_dict()`` on one. The step reads a matrix's gradient on its
        owner only: the other ranks skip its momentum (zero) and its NaN
        check (the owner checks the sum)."""
        self._bound()
        if self._comm is None or self._config is None or \
                self._options["communicator"] == "mpi" or \
                self._config.get("dtensor") or \
                len(self._config["shape"]) != 1:
            raise FailedPreconditionError(
                "failed precondition: reduce_gradients_to_owners is for "
                "plain (DDP) parameters over one data-parallel axis of "
                "several ranks, through a torch process group")
        if self._options.get("owner_reduced"):
            raise FailedPreconditionError(
                "failed precondition: the gradients are already reduced to "
                "their owners")
        group = self._options["process_group"] or self._config.get("group")
        ranks = (dist.get_process_group_ranks(group) if group is not None
                 else list(range(dist.get_world_size())))
        _owner_reduce.check_ddp(ddp_model,
                                [(p, n) for p, n, _ in self._params], ranks)
        segments = _owner_reduce.owner_segments(self)
        hook = _owner_reduce.HookState(self, ddp_model.process_group)
        ddp_model.register_comm_hook(hook, _owner_reduce.owner_reduce_hook)
        self._hook = hook
        self._options["owner_reduced"] = True
        self._owner_segments = segments
        # Every rank carried the whole momentum over: it stays on the owners.
        _owner_state.keep_owned_state(self)
        self._engine.set_gradients_reduced_to_owners(True)
        _clipping.install(self)

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0,
                        error_if_nonfinite: bool = False,
                        foreach: bool | None = None) -> torch.Tensor:
        """torch.nn.utils.clip_grad_norm_ over this optimizer's parameters,
        with the norm of the whole gradient where the ranks hold parts of
        it: after reduce_gradients_to_owners (each matrix's gradient on its
        owner only) the norm is taken over the owners, collectively, as
        FSDP's clip_grad_norm_ does; otherwise it is torch's function as is
        (which handles DTensor gradients). Returns the total norm."""
        params = [p for g in self.param_groups for p in g["params"]
                  if p.grad is not None]
        if not self._options.get("owner_reduced"):
            return torch.nn.utils.clip_grad_norm_(
                params, max_norm, norm_type, error_if_nonfinite, foreach)
        _owner_reduce.finish_gradients(self._hook)
        total = _owner_state.total_grad_norm(
            self, params, norm_type, error_if_nonfinite, foreach)
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total,
                                             foreach)
        return total

    # --- binding to the parameters and the world ---------------------------

    def _alone(self):
        """Whether a plan built now would be one process's (no collective
        to join)."""
        config = self._options["config"]
        return _binding.world_key(self) == ("torch", 1) and (
            config is None or math.prod(config["shape"]) == 1)

    def _bound(self):
        """Builds the plan on first need, or again where the parameters or
        the world changed (_binding.py); collective where distributed."""
        _binding.ensure_bound(self)
        return self

    # --- properties ------------------------------------------------------

    @property
    def param_names(self):
        """The parameters' names in the plan, in the optimizer's order
        (builds the plan where it is not yet: collective where
        distributed)."""
        return [name for _, name, _ in self._bound()._params]

    @property
    def assignments(self):
        """Per rank, the matrices it orthogonalizes (the seeds'
        optimizer.assignments), by parameter name: the module's (from
        named_parameters() pairs or a config made by
        create_dtensor_config(model)), else "<group name>.<index>". Builds
        the plan where it is not yet (collective where distributed)."""
        return self._bound()._engine.assignments()

    @property
    def communicator(self):
        """What the exchanges go through: "torch" (a process group) or
        "mpi" (MPI_COMM_WORLD)."""
        return self._options["communicator"]

    @property
    def transport(self):
        """What the plan's exchanges go through: on the CPU the
        communicator ("torch", "mpi"); on a GPU "nccl" (the runtime's NCCL
        communicator: the exchanges stay on the device) or "host" (staged
        through host memory, where ranks share a GPU). Builds the plan
        where it is not yet."""
        engine = self._bound()._engine
        return engine.transport or self._options["communicator"]

    @property
    def engine(self):
        """The underlying muonc.Optimizer (builds the plan where it is not
        yet: collective where distributed)."""
        return self._bound()._engine

    @property
    def qk_clipped_heads(self):
        """How many query heads the last step's QK-clip rescaled (the same
        on every rank)."""
        return self._qk_clipped

    @property
    def last_step_counters(self):
        """What the last step did on this rank: ``bytes_sent`` and
        ``bytes_received`` (the plan's exchanges: gradient pieces to owners,
        updates back), ``exchanges`` (how many of the plan's exchanges ran
        over the process group: those that move something), ``ns_flops``
        (its Newton-Schulz), ``control_collectives`` (its small
        agreements: gradient checks, settings, parameters without a
        gradient, device errors), and ``host_copies`` and
        ``host_copy_bytes`` (copies of exchange buffers between a GPU and
        host memory: 0 where the exchanges stay on the device,
        opt.transport "nccl"). Empty before the first step."""
        return dict(self._last_step)

    # --- the step --------------------------------------------------------

    def set_qk_max_logits(self, layer, logits=None):
        """QK-clip's input for the next step: ``layer``'s max attention
        logit per query head in this step's forward pass (a tensor, array or
        list of num_heads numbers), or a dict {layer: logits}. Checked here;
        the next step() passes them and forgets them."""
        given = layer if isinstance(layer, dict) else {layer: logits}
        self._bound()
        self._qk_pending.update(
            {name: checked_logits(self._qk_heads, name, v)
             for name, v in given.items()})

    def _push_settings(self):
        """Checks every group's settings as torch would, recompiles the plan
        if a setting it fixes changed, and hands the engine the step's
        settings that changed since the last step."""
        for group in self.param_groups:
            if group["algorithm"] == "muon":
                check_muon_group(group, self._options["ns_dtype"])
            else:
                check_lr(group["lr"])
        if any(plan_settings(g) != self._plan_settings.get(g["name"])
               for g in self.param_groups if g["algorithm"] == "muon"):
            _binding.rebuild(self)
        for group in self.param_groups:
            values = table_settings(group, fixed=False)
            if self._pushed.get(group["name"]) != values:
                self._engine.set_group(group["name"], values)
            self._pushed[group["name"]] = values

    def _bind(self):
        """Binds every parameter's local tensor and gradient (None: no
        gradient, which the step leaves out). A strided tensor is bound as a
        contiguous copy; returns the (parameter, copy) pairs to write
        back after the step."""
        write_back = []
        for p, name, _ in self._params:
            values = local(p)
            grad = p.grad
            if grad is not None:
                if grad.is_sparse:
                    raise FailedPreconditionError(
                        "Muon does not support sparse gradients (parameter "
                        f"'{name}')")
                grad = local(grad)
                if not grad.is_contiguous():
                    grad = grad.contiguous()
            if not values.is_contiguous():
                copy = values.contiguous()
                write_back.append((values, copy))
                values = copy
            self._engine.bind(name, values, grad)
        return write_back

    @torch.no_grad()
    def step(self, closure=None, qk_max_logits=None):
        """One step on every parameter that has a gradient; ``qk_max_logits``:
        {layer: per-head max logits} for QK-clip (as set_qk_max_logits), for
        this step only. Collective where the optimizer is distributed."""
        if qk_max_logits is not None:
            self.set_qk_max_logits(dict(qk_max_logits))
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._engine is None and self._alone() and all(
                p.grad is None for g in self.param_groups
                for p in g["params"]):
            return loss  # nothing to step, as in torch: nothing to build
        self._bound()
        for p, name in self._unsupported:
            if p.grad is not None:
                raise FailedPreconditionError(
                    "Muon does not support complex parameters (parameter "
                    f"'{name}')")
        if self._comm is None and all(p.grad is None
                                      for p, _, _ in self._params):
            self._qk_pending = {}  # no step: its logits go with it
            return loss
        self._consolidated = None
        self._step_calls += 1
        if self._comm is not None:
            self._deadline.announce(f"step {self._step_calls}")
        if self._hook is not None:
            # The shared gradients the hook summed in shares, whole again.
            _owner_reduce.finish_gradients(self._hook)
        self._push_settings()
        write_back = self._bind()
        for name, logits in self._qk_pending.items():
            self._engine.set_qk_max_logits(name, logits)
        self._qk_pending = {}
        result = self._engine.step(stream=current_stream(self._device))
        for values, contiguous in write_back:
            values.copy_(contiguous)
        self._qk_clipped = result["qk_clipped_heads"]
        self._last_step = {k: result[k] for k in _COUNTERS}
        if self._hook is not None:
            # The reductions DDP's hook started during backward.
            sent, received = self._hook.take_counters()
            self._last_step["bytes_sent"] += sent
            self._last_step["bytes_received"] += received
        if not result["applied"]:
            warnings.warn(f"muonc: step skipped: gradient of "
                          f"{result['non_finite_param']} has NaN or Inf "
                          f"(rank {result['non_finite_rank']})")
        return loss

    # --- state dicts -----------------------------------------------------

    def state_dict(self):
        """torch's state_dict(), with its hooks: 'state' by parameter index
        (momentum_buffer; exp_avg, exp_avg_sq, step), 'param_groups' with
        the hyper-parameters. Each state tensor has its parameter's layout
        (a DTensor for a DTensor parameter), so torch.distributed.checkpoint
        saves and reshards it. A NorMuon parameter also has 'normuon_v', its
        per-row second moment, (matrices, rows) float32, gathered from the
        matrices' owners (collective then). The groups carry
        ``muonc_steps``, the optimizer's step count. Before the plan is
        built (no step, no load yet) the state is empty, as torch's is.

        Under reduce_gradients_to_owners the momentum lives on the owners,
        so it is collective: call it on every rank, or call
        consolidate_state_dict() on every rank first and then state_dict()
        on the rank it consolidated to (the HF Trainer saves on rank 0
        alone: muonc.torch.hf.reduce_gradients_to_owners does that)."""
        if self._engine is None:
            return self._with_steps(super().state_dict(), 0)
        if self._options.get("owner_reduced"):
            if self._consolidated is _ELSEWHERE:
                raise FailedPreconditionError(
                    "failed precondition: consolidate_state_dict() gathered "
                    "the state to another rank: call state_dict() there, "
                    "or on every rank (collective) without consolidating "
                    "first")
            if self._consolidated is not None:
                return copy.deepcopy(self._consolidated)
            self._deadline.arrive(
                "call state_dict() (under reduce_gradients_to_owners it "
                "gathers the momentum from the owners: call it on every "
                "rank, or consolidate_state_dict() on every rank before "
                "state_dict() on one)", self._comm.ranks)
            _state.refresh_row_states(self)
            return self._with_steps(self._state_dict_of_sums(),
                                    self._engine.steps_taken)
        _state.refresh_row_states(self)
        return self._with_steps(super().state_dict(),
                                self._engine.steps_taken)

    @staticmethod
    def _with_steps(saved, steps):
        if isinstance(saved, dict) and isinstance(saved.get("param_groups"),
                                                  list):
            for g in saved["param_groups"]:
                g["muonc_steps"] = steps
            saved["muonc"] = {"steps": steps}
        return saved

    def consolidate_state_dict(self, to: int = 0) -> None:
        """torch's ZeroRedundancyOptimizer protocol, for state spread over
        the ranks (reduce_gradients_to_owners keeps the momentum on the
        owners): collective; afterwards, until the next step or load,
        state_dict() on rank `to` returns the whole state without a
        collective, so that rank alone may save it, and on the other ranks
        it raises (as torch's does). Where nothing is spread it does
        nothing."""
        if self._engine is None or not self._options.get("owner_reduced"):
            return
        self._consolidate(dist.get_rank(self._comm.group) == to)

    def _consolidate(self, keep):
        """Gathers the whole state (collective); this rank keeps it for
        state_dict() until the next step or load where `keep`."""
        if self._engine is None or not self._options.get("owner_reduced"):
            return
        self._consolidated = None
        whole = self.state_dict()
        self._consolidated = whole if keep else _ELSEWHERE

    def local_state_dict(self):
        """This rank's state as pieces by global box (plain tensors, no
        DTensor): the list of every rank's local_state_dict() loads under
        any other layout or world size (load_state_dict takes the list),
        e.g. saved with torch.save on 4 ranks, loaded on 2. Not under
        reduce_gradients_to_owners, whose momentum is in parts on the
        ranks: state_dict() sums them."""
        if self._options.get("owner_reduced"):
            raise FailedPreconditionError(
                "failed precondition: local_state_dict() is not available "
                "once the gradients are reduced to their owners (the "
                "momentum lives on the owners); use state_dict(), on every "
                "rank, or torch.distributed.checkpoint")
        self._bound()
        groups = super().state_dict()["param_groups"]
        return _state.local_state_dict(self, groups)

    def load_state_dict(self, state_dict):
        """torch's load_state_dict() (with its hooks) of state_dict() of this
        layout, by index or by parameter FQN as
        torch.distributed.checkpoint's set_optimizer_state_dict passes it;
        or local_state_dict(), or the list of every rank's
        local_state_dict() (or state_dict() of plain parameters) of another
        layout or world size. All or nothing."""
        if not _state.is_piece_format(state_dict):
            super().load_state_dict(state_dict)
            return
        single = not isinstance(state_dict, (list, tuple))
        if single:
            state_dict = state_dict.copy()
            for hook in self._optimizer_load_state_dict_pre_hooks.values():
                result = hook(self, state_dict)
                if result is not None:
                    state_dict = result
        dicts = [state_dict] if single else list(state_dict)
        if not dicts:
            raise InvalidArgumentError("invalid argument: an empty list of "
                                       "state dicts")
        _load_checks.check_piece_dicts(dicts)
        # The hyper-parameters are the first dict's, on this optimizer's
        # groups (their parameters and names stay).
        groups = []
        for mine, g in zip(self.param_groups, dicts[0]["param_groups"]):
            group = dict(mine)
            group.update({k: v for k, v in g.items() if k not in
                          ("params", "param_names", "name", "muonc_steps")})
            groups.append(group)
        _load_checks.check_groups(groups, self.param_groups,
                                   self._options["ns_dtype"])
        self._load_all_or_nothing(
            groups, lambda: _state.load_dicts(self, dicts, groups))
        self.param_groups[:] = groups
        self._pushed = {}
        if single:
            for hook in self._optimizer_load_state_dict_post_hooks.values():
                hook(self)

    def _load_all_or_nothing(self, groups, load):
        """Runs `load` (which puts saved state into the engine) on an engine
        whose plan fits `groups`, the groups the optimizer will have: the
        current one, or one compiled (again) for them where there is none
        yet or a setting the plan fixes differs. On failure the optimizer
        is as it was, opt.state's entries included."""
        index = {id(g): gi for gi, g in enumerate(self.param_groups)}
        current = self.param_groups
        with _binding.all_or_nothing(self):
            try:
                replan = self._engine is None or any(
                    plan_settings(g) != self._plan_settings.get(g["name"])
                    for g in groups if g["algorithm"] == "muon")
                if replan:
                    self.param_groups = groups
                    _binding.build(self)
                else:
                    self._params = [(p, name, groups[index[id(g)]])
                                    for p, name, g in self._params]
                load()
                if self._options.get("owner_reduced"):
                    # Loaded whole on every rank: it stays on the owners.
                    _owner_state.keep_owned_state(self)
            finally:
                self.param_groups = current
        self._loaded_state = True
        self._consolidated = None

    def _install(self, state, groups):
        """torch's load_state_dict, after its hooks, mapping and casts: the
        whole dict checked (_load_checks.py), then the state into the
        engine (all or nothing), then the groups. Before the plan is built,
        a state without entries (state_dict() of an optimizer that has not
        stepped, as accelerate's prepare() round-trips it) only sets the
        groups."""
        for g, mine in zip(groups, self.param_groups):
            # Keys the saved groups lack (a torch.optim.Muon state, an older
            # muonc's) keep this optimizer's values, as torch's optimizers
            # fill in a flag an older state lacks.
            for k, v in mine.items():
                g.setdefault(k, v)
        _load_checks.check_groups(groups, self.param_groups,
                                   self._options["ns_dtype"])
        _load_checks.check_torch_state(self, state, groups)
        steps = next((g["muonc_steps"] for g in groups if "muonc_steps" in g),
                     None)
        for g, mine in zip(groups, self.param_groups):
            g.pop("muonc_steps", None)
            g["name"], g["algorithm"] = mine["name"], mine["algorithm"]
            g["use_muon"] = mine["algorithm"] == "muon"
        params = {p for g in self.param_groups for p in g["params"]}
        if self._engine is None and not steps and not any(
                state.get(p) for p in params):
            super().__setstate__({"state": state, "param_groups": groups})
            return
        self._load_all_or_nothing(groups, lambda: _state.load_torch_state(
            self, state, groups, steps))
        super().__setstate__({"state": state, "param_groups": groups})
        _state.attach_views(self)
        self._pushed = {}

    # --- copies ----------------------------------------------------------

    def __getstate__(self):
        if self._comm is not None:
            raise FailedPreconditionError(
                "failed precondition: a distributed muonc optimizer cannot be "
                "copied or pickled (its plan and state span the ranks); save "
                "and load its state with state_dict() / load_state_dict() or "
                "torch.distributed.checkpoint")
        bound = self._engine is not None
        if bound:
            _state.refresh_row_states(self)
        state = dict(super().__getstate__())
        state["_muonc"] = {
            "options": self._options,
            "names": [self._names.get(id(p)) for g in self.param_groups
                      for p in g["params"]],
            "bound": bound,
            "steps": self._engine.steps_taken if bound else 0,
            "qk": (self._qk_pending, self._qk_clipped)}
        return state

    def __setstate__(self, state):
        if "defaults" not in state:
            # torch's load_state_dict hands over the mapped state and groups.
            self._install(state["state"], state["param_groups"])
            return
        extras = state.pop("_muonc", None)
        if extras is None:
            raise FailedPreconditionError(
                "failed precondition: not a muonc optimizer's pickled state")
        saved = state["state"]
        super().__setstate__(dict(state, state=defaultdict(dict)))
        self._options = extras["options"]
        self._init_unbound()  # a copy is in one process: no DDP hook
        self._qk_pending, self._qk_clipped = extras["qk"]
        params = [p for g in self.param_groups for p in g["params"]]
        self._names = {id(p): n for p, n in zip(params, extras["names"])
                       if n is not None}
        if extras.get("bound", True):
            _binding.build(self)
            _state.load_torch_state(self, saved, self.param_groups,
                                    steps=extras["steps"])
        for k, v in saved.items():
            if not isinstance(k, torch.Tensor) or not extras.get("bound",
                                                                 True):
                self.state[k] = v  # what hooks put there, kept as torch does
        if extras.get("bound", True):
            _state.attach_views(self)


def _checked_options(*, ns_dtype, wire_dtype, ns_form, communicator,
                     process_group, timeout, config, qk_clip):
    """The constructor's options that are not group settings, checked."""
    if ns_dtype is not None and ns_dtype not in _NS_DTYPES:
        raise InvalidArgumentError(f"invalid argument: ns_dtype {ns_dtype!r}: "
                                   "expected 'f32', 'bf16', 'f16' or "
                                   "'auto'")
    if wire_dtype is not None and wire_dtype not in _WIRE_DTYPES:
        raise InvalidArgumentError(f"invalid argument: wire_dtype "
                                   f"{wire_dtype!r}: expected 'f32' or "
                                   "'bf16'")
    if ns_form not in _NS_FORMS:
        raise InvalidArgumentError(f"invalid argument: ns_form {ns_form!r}: "
                                   "expected 'auto', 'standard' or 'gram'")
    if communicator is None:
        communicator = "mpi" if launched_by_mpirun() else "torch"
    if communicator not in ("torch", "mpi"):
        raise InvalidArgumentError(f"invalid argument: communicator "
                                   f"{communicator!r}: expected 'torch' or "
                                   "'mpi'")
    if communicator == "mpi" and process_group is not None:
        raise InvalidArgumentError(
            "invalid argument: a process_group is for the 'torch' "
            "communicator; 'mpi' runs over MPI_COMM_WORLD")
    threshold, layers = qk_clip
    if threshold is not None and not layers:
        raise InvalidArgumentError(
            "invalid argument: qk_clip_threshold without qk_clip_layers: "
            "name the attention layers to clip")
    return {"ns_dtype": ns_dtype, "wire_dtype": wire_dtype,
            "ns_form": ns_form, "communicator": communicator,
            "process_group": process_group, "timeout": float(timeout),
            "config": config, "qk_clip": qk_clip}


def _resolve_algorithm(group, tensors):
    """Sets a new group's algorithm ("muon", "adamw", ...) and use_muon
    from either key or, without them, from its parameters' dims; a group of
    an element-wise algorithm (AdamW, ...) gets that algorithm's
    defaults."""
    if "use_muon" in group and "algorithm" not in group:
        group["algorithm"] = "muon" if group["use_muon"] else "adamw"
    if "algorithm" not in group:
        dims = {p.ndim >= 2 for p in tensors}
        if len(dims) > 1:
            raise InvalidArgumentError(
                "invalid argument: a parameter group mixes matrices and "
                "parameters with fewer than 2 dims; give it use_muon=True or "
                "False (or split it)")
        group["algorithm"] = "adamw" if dims == {False} else "muon"
    if group["algorithm"] not in ("muon",) + ELEMENTWISE:
        names = ", ".join(repr(a) for a in ("muon",) + ELEMENTWISE)
        raise InvalidArgumentError(
            f"invalid argument: a group's algorithm is one of {names}, not "
            f"{group['algorithm']!r}")
    group["use_muon"] = group["algorithm"] == "muon"
    if group["algorithm"] in ELEMENTWISE:
        title = next(a["title"] for a in ALGORITHMS
                     if a["name"] == group["algorithm"])
        for key in HEAD_KEYS + (STACKED_KEY,):
            if group.get(key):
                raise InvalidArgumentError(
                    f"invalid argument: {key} is a Muon setting; this group "
                    f"is {title}")
        for key, value in element_defaults(group["algorithm"]).items():
            group.setdefault(key, value)


def _check_group(group, tensors, ns_dtype):
    """torch's checks of a group (`group` with the defaults filled in)
    before it is added: its settings (a Muon group's coefficients for the
    optimizer's `ns_dtype`), and a Muon group's parameters' dims."""
    if group["algorithm"] in ELEMENTWISE:
        check_lr(group["lr"])
        return
    check_muon_group(group, ns_dtype)
    for p in tensors:
        if p.ndim == 2:
            continue
        if p.ndim > 2 and (group.get(STACKED_KEY) or shows_expert_dim(p)):
            continue
        raise InvalidArgumentError(
            "Muon only supports 2D parameters whereas we found a parameter "
            f"with size: {p.size()}" +
            (" (a stack of matrices, such as experts' [E, out, in] weights: "
             f"give its group {STACKED_KEY}=True)" if p.ndim > 2 else
             " (put it in a group with use_muon=False: AdamW)"))

"""muonc.torch: distributed Muon as a torch.optim.Optimizer.

    from muonc.torch import Muon
    opt = Muon([{"params": matrices},                     # Muon
                {"params": others, "use_muon": False}],   # AdamW
               lr=0.02)
    for batch in data:
        loss(model(batch)).backward()
        opt.step(); opt.zero_grad()

Takes torch.optim.Muon's arguments and defaults and behaves as a torch
optimizer (param groups, opt.state, state dicts and their hooks, None
gradients, copies, errors). With torch.distributed initialized, the
parameters' layout decides the plan: plain tensors (DDP) are replicated over
the process group; DTensors (FSDP2 fully_shard, TP, EP) bring their
placements and mesh. See docs/pytorch.md.

The package's modules, one job each: _settings (the group settings and
torch's checks), _layouts (DTensor layouts), _communicator (the runtime's
exchanges over a process group), _deadline (the timeout over them, late
ranks named), _plan (compiling the plan), _binding (the plan made when
first needed and again when the parameters or the world change), _state
(the state between the runtime and torch's formats), _load_checks (a
saved state checked whole before it is loaded), _owner_reduce and
_owner_state (gradients reduced to their owners under DDP), _clipping
(stock clipping under it), _grouping (the usual Muon / AdamW split),
_qk_clip, and _muon (the optimizer). muonc.torch.hf: the Hugging Face
Trainer's owner reduction.
"""
from .._core import (CancelledError, DataLossError, DeadlineExceededError,
                     FailedPreconditionError, InternalError,
                     InvalidArgumentError, MuonError, MuonTypeError,
                     NotFoundError, ResourceExhaustedError, UnavailableError,
                     UnimplementedError)
from ._communicator import TorchCommunicator, launched_by_mpirun  # noqa: F401
from ._grouping import MuonFactory, param_groups
from ._layouts import create_dtensor_config
from ._muon import Muon

__all__ = ["Muon", "MuonFactory", "param_groups", "MuonError", "InvalidArgumentError",
           "FailedPreconditionError", "NotFoundError", "DataLossError",
           "ResourceExhaustedError", "UnavailableError",
           "DeadlineExceededError", "CancelledError", "UnimplementedError",
           "InternalError", "MuonTypeError", "TorchCommunicator",
           "create_dtensor_config"]

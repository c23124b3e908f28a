"""muonc: distributed Muon (an MLIR compiler and a C++ runtime) from Python.

Importing needs numpy only; ``muonc.torch`` (the torch.optim optimizer)
needs torch. See docs/pytorch.md.

    plan = muonc.compile_model(params, groups, mesh)   # a muonc.Plan
    plan = muonc.compile_spec("model.json")             # or from a spec
    opt = muonc.Optimizer(plan)                         # one process
    opt.bind("w", values, grad)                         # zero-copy
    opt.step()
"""
import atexit as _atexit
import gc as _gc
import json as _json
import os as _os
import sys as _sys

from . import _blas

# Before the extension loads OpenBLAS, which reads it once (see _blas).
_blas.prefer_kernels()

from ._core import (  # noqa: E402
    CancelledError, DataLossError, DeadlineExceededError,
    FailedPreconditionError, InternalError, InvalidArgumentError, MuonError,
    MuonTypeError, NotFoundError, Optimizer, Plan, ResourceExhaustedError,
    UnavailableError, UnimplementedError, compile_model, cpu_auto_ns_dtype,
    cpu_newton_schulz)
from . import _core  # noqa: E402
from ._core import compile_spec as _compile_spec  # noqa: E402

# Errors: MuonError, and per kind a class that is also the builtin
# exception torch raises for it (InvalidArgumentError is a ValueError,
# FailedPreconditionError a RuntimeError, ...), one per status code.
__all__ = ["MuonError", "InvalidArgumentError", "FailedPreconditionError",
           "NotFoundError", "DataLossError", "ResourceExhaustedError",
           "UnavailableError", "DeadlineExceededError", "CancelledError",
           "UnimplementedError", "InternalError", "MuonTypeError", "Optimizer",
           "Plan", "compile_model", "compile_spec", "cpu_auto_ns_dtype",
           "cpu_newton_schulz", "load_plan"]
__version__ = _core.__version__  # the project's VERSION file


def load_plan(path, comm=None, timeout=120.0, ns_form=""):
    """An Optimizer over a plan file compiled ahead of time (JSON or
    binary, `muon-run --plan`); ns_form as Optimizer's."""
    return Optimizer(str(path), comm, timeout, True, ns_form)


def compile_spec(spec, wire_dtype=None):
    """A Plan compiled in process from a model spec
    (docs/spec-format.md), as `muon-run SPEC` compiles it: `spec` is a
    spec file's path, its JSON text, or the parsed dict. `wire_dtype`
    ("f32", "bf16") sets the exchanges' element type (f32 by default).
    Errors raise MuonError naming the JSON path ("params[3].shape: ...")."""
    if isinstance(spec, dict):
        text = _json.dumps(spec)
    elif isinstance(spec, (str, _os.PathLike)) and \
            not str(spec).lstrip().startswith("{"):
        try:
            with open(spec, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise InvalidArgumentError(f"invalid argument: {spec}: cannot "
                                       f"read the spec ({e.strerror})") from None
    elif isinstance(spec, str):
        text = spec
    else:
        raise MuonTypeError("invalid argument: compile_spec takes a path, "
                            f"JSON text or a dict, not {type(spec).__name__}")
    if wire_dtype not in (None, "f32", "bf16"):
        raise InvalidArgumentError(f"invalid argument: wire_dtype "
                                   f"{wire_dtype!r}: expected 'f32' or 'bf16'")
    return _compile_spec(text, wire_dtype or "")


def _nvidia_library_dirs():
    """The lib/ folders of NVIDIA's CUDA wheels on sys.path, where a GPU
    optimizer looks for cuBLAS when no copy is loaded yet: nvidia-cublas,
    which torch depends on (nvidia/cu13/lib from CUDA 13 on,
    nvidia/cublas/lib before)."""
    import glob
    dirs = []
    for path in _sys.path:
        for pattern in ("cu[0-9]*", "cublas"):
            dirs += sorted(glob.glob(_os.path.join(path or _os.curdir,
                                                   "nvidia", pattern, "lib")))
    return dirs


@_atexit.register
def _finalize_mpi():
    # Optimizers still alive at exit keep their MPI communicator; it skips
    # its MPI calls once MPI is finalized.
    _gc.collect()
    _core.mpi_finalize()

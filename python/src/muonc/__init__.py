"""muonc: distributed Muon (an MLIR compiler and a C++ runtime) from Python.

Importing needs numpy only; ``muonc.torch`` (the torch.optim optimizer)
needs torch. See docs/pytorch.md.

    plan = muonc.compile_model(params, groups, mesh)   # a plan (JSON text)
    opt = muonc.Optimizer(plan)                         # one process
    opt.bind("w", values, grad)                         # zero-copy
    opt.step()
"""
from ._core import MuonError, Optimizer, compile_model

__all__ = ["MuonError", "Optimizer", "compile_model", "load_plan"]
__version__ = "0.1.0"


def load_plan(path, comm=None, timeout=120.0):
    """An Optimizer over a plan file compiled ahead of time (JSON or
    binary, `muon-run --plan`)."""
    return Optimizer(str(path), comm, timeout, True)

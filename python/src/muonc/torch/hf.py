"""muonc in the Hugging Face Trainer.

The usual split needs nothing from this module: the Trainer takes
``optimizer_cls_and_kwargs=(muonc.torch.MuonFactory, {"lr": 0.02,
"adamw_lr": 3e-4})``. The owner reduction (Muon.reduce_gradients_to_owners)
needs two things the Trainer does not give an optimizer: the DDP module,
which it makes inside ``train()``, and every rank's part in a checkpoint,
which it saves on rank 0 alone. ``reduce_gradients_to_owners(trainer)``
adds a callback that attaches the reduction when training begins and,
before each checkpoint the Trainer is about to save, gathers the state to
the ranks that save it. The Trainer's clipping (``max_grad_norm``) then
takes the whole gradient's norm (muonc's clip_grad_norm_ wrapper,
_clipping.py).
"""
from __future__ import annotations

from .._core import FailedPreconditionError

__all__ = ["reduce_gradients_to_owners"]


def reduce_gradients_to_owners(trainer):
    """Runs a ``transformers.Trainer`` whose optimizer is muonc's with the
    owner reduction under DDP. Call it once, on every rank, after making
    the Trainer and before ``trainer.train()``. Without DDP (one process)
    it changes nothing."""
    trainer.add_callback(_callback_class()(trainer))


def muon_of(optimizer):
    """muonc's optimizer inside the wrappers frameworks put around it
    (accelerate's AcceleratedOptimizer, Lightning's LightningOptimizer)."""
    from ._muon import Muon
    seen = 0
    while not isinstance(optimizer, Muon) and seen < 8:
        optimizer = getattr(optimizer, "optimizer", None)
        seen += 1
    if not isinstance(optimizer, Muon):
        raise FailedPreconditionError(
            "failed precondition: the Trainer's optimizer is not "
            "muonc.torch.Muon (give it optimizer_cls_and_kwargs=(muonc.torch."
            "MuonFactory, {...}) or optimizers=(Muon(...), None))")
    return optimizer


_CLASS = None


def _callback_class():
    """The callback class, made on first use (transformers is imported
    only where it is used)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    from torch.nn.parallel import DistributedDataParallel
    from transformers import TrainerCallback

    class OwnerReduction(TrainerCallback):
        """Attaches muonc's owner reduction to the Trainer's DDP module at
        the start of training, and consolidates the optimizer's state on
        the ranks that save before each checkpoint."""

        def __init__(self, trainer):
            self.trainer = trainer
            self.active = False

        def on_train_begin(self, args, state, control, **kwargs):
            model = self.trainer.model_wrapped
            if not isinstance(model, DistributedDataParallel):
                return
            opt = muon_of(self.trainer.optimizer)
            if not opt._options.get("owner_reduced"):
                opt.reduce_gradients_to_owners(model)
            self.active = True

        def _before_save(self, args, control):
            if self.active and control.should_save:
                # Every rank is here (should_save is decided alike on every
                # rank); the ranks that write the checkpoint keep it.
                muon_of(self.trainer.optimizer)._consolidate(
                    keep=args.should_save)

        def on_step_end(self, args, state, control, **kwargs):
            self._before_save(args, control)

        def on_epoch_end(self, args, state, control, **kwargs):
            self._before_save(args, control)

    _CLASS = OwnerReduction
    return _CLASS

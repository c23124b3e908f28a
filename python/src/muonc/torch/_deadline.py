"""One deadline over the bridge's collectives, with the late ranks named.

muonc's collectives (a plan's build and agreement, a step's exchanges and
agreements, the gathers of state dicts) run over torch process groups,
whose own timeout is 30 minutes by default: a rank that never arrives, one
that skipped constructing or stepping the optimizer, would hang the others
that long and say nothing of why. So the optimizer's ``timeout`` bounds
them all: its own process group is made with that timeout, a wait on any
other is bounded by it, and before a collective build every rank announces
itself in the default process group's store and waits for the others
there. A rank whose wait runs out reads the store and names the ranks
that did not arrive (or, in a step, where each of them last was).

The store is torch's default one (``init_process_group``'s); without it
(processes started by mpirun with the MPI communicator) the runtime's own
deadlines apply.
"""
from __future__ import annotations

import datetime
import itertools

import torch.distributed as dist

from .._core import DeadlineExceededError

__all__ = ["Deadline", "is_timeout"]

# Optimizers number their collective points in the order their first
# collective build happens; every rank builds its optimizers in the same
# order (a rank that does not has a bug the deadline reports).
_SEQUENCE = itertools.count()


def is_timeout(error):
    """Whether a torch.distributed error is a timeout (gloo's "Timed out
    waiting ...", a Work's "Operation timed out!", the store's "wait
    timeout")."""
    text = str(error).lower()
    return "timed out" in text or "timeout" in text


def _default_store():
    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):  # pragma: no cover
        return None


class Deadline:
    """The optimizer's deadline (seconds) and its announcements in the
    default store: ``arrive`` at a collective build, ``announce`` at each
    step, ``late_ranks`` when a wait ran out."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self._uid = None  # given at the first collective build
        self._points = 0
        self._where = None

    @property
    def delta(self):
        return datetime.timedelta(seconds=self.seconds)

    def _key(self, *parts):
        if self._uid is None:
            self._uid = next(_SEQUENCE)
        return "/".join(["muonc", str(self._uid)] + [str(p) for p in parts])

    def arrive(self, what: str, ranks) -> None:
        """Waits until every rank of `ranks` (global ranks) reaches this
        collective point, `what` (e.g. "build the optimizer's plan"), within
        the deadline; else raises DeadlineExceededError naming the ranks
        that did not. A no-op without torch's default store."""
        store = _default_store()
        if store is None:
            return
        self._points += 1
        keys = {r: self._key("arrive", self._points, r) for r in ranks}
        store.set(keys[dist.get_rank()], what)
        try:
            store.wait(list(keys.values()), self.delta)
        except RuntimeError as error:  # DistStoreError
            late = [r for r, k in keys.items() if not store.check([k])]
            if not late or not is_timeout(error):
                raise
            raise DeadlineExceededError(
                f"deadline exceeded: rank {dist.get_rank()} waited "
                f"{self.seconds:g} s for {_ranks(late)} to {what}; every rank "
                "must construct the optimizer and call it alike (the "
                "optimizer's timeout= sets the wait)") from None

    def announce(self, where: str) -> None:
        """Records in the store where this rank is (e.g. "step 12"), one
        key per rank overwritten each time, for late_ranks."""
        store = _default_store()
        if store is None or self._uid is None:
            return
        self._where = where
        store.set(self._key("at", dist.get_rank()), where)

    def late_ranks(self, ranks) -> str:
        """What a rank whose wait ran out says of the others: those not
        where it is, and where each of them last announced itself."""
        store = _default_store()
        mine = self._where
        if store is None or self._uid is None or mine is None:
            return (f"a peer did not answer within {self.seconds:g} s "
                    "(the optimizer's timeout=)")
        behind = []
        for r in ranks:
            key = self._key("at", r)
            at = store.get(key).decode() if store.check([key]) else None
            if at != mine:
                behind.append(f"rank {r} at {at or 'no step yet'}")
        if not behind:
            return (f"a peer did not answer within {self.seconds:g} s at "
                    f"{mine} (every rank reached it: one died or stalled "
                    "in it)")
        return (f"{mine} on rank {dist.get_rank()} waited {self.seconds:g} s "
                f"for the other ranks: " + ", ".join(behind) + "; every rank "
                "must step the optimizer alike (the optimizer's timeout= "
                "sets the wait)")


def _ranks(ranks):
    return (f"rank {ranks[0]}" if len(ranks) == 1 else
            "ranks " + ", ".join(str(r) for r in ranks))

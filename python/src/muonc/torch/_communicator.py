"""The runtime's communicator over a torch.distributed process group.

The runtime hands it host memory (a GPU optimizer stages its device buffers
through the host) and calls back for the plan's packed exchanges and the
step's small control collectives. Every wait is bounded by the optimizer's
deadline (_deadline.py): a wait that runs out raises TimeoutError naming
the late ranks, which the runtime reports as DeadlineExceededError.
"""
from __future__ import annotations

import atexit
import gc
import os
import socket
import warnings
import weakref

import torch
import torch.distributed as dist

from ._deadline import Deadline, is_timeout


class TorchCommunicator:
    """The runtime's communicator over a torch.distributed process group:
    the plan's packed exchanges as all_to_all_single with split sizes, the
    control collectives as all_gather. The runtime hands it host memory (a
    GPU optimizer stages its device buffers through the host): a gloo group
    takes it as it is; an NCCL group gets it copied to and from the current
    GPU."""

    def __init__(self, group=None, deadline: Deadline | None = None):
        self.group = group
        self.deadline = deadline or Deadline(1800.0)
        self._rank = dist.get_rank(group)
        self._size = dist.get_world_size(group)
        # Global ranks, for naming them.
        self.ranks = (list(range(dist.get_world_size())) if group is None
                      else dist.get_process_group_ranks(group))
        self._device = None  # where the group's collectives need tensors
        if dist.get_backend(group) == "nccl":
            self._device = torch.device("cuda", torch.cuda.current_device())

    @classmethod
    def owned(cls, ranks=None, deadline: Deadline | None = None):
        """A communicator over a gloo group of its own on `ranks` (default:
        every rank), made collectively. Its own because the exchanges move
        CPU tensors (the default group may be NCCL), and because the group
        must be gone before the interpreter finalizes: gloo's worker threads
        release a collective's tensors after it returns, and one doing so
        while Python shuts down aborts the process ("terminate called
        without an active exception"). A model's own group outlives
        destroy_process_group() whenever FSDP2 holds it, so muonc cannot
        rely on it; its own group it destroys at exit (atexit), which joins
        those threads. Its collectives time out at the deadline."""
        deadline = deadline or Deadline(1800.0)
        group = dist.new_group(ranks=ranks, backend="gloo",
                               timeout=deadline.delta)
        comm = cls(group, deadline)
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
        self.start_all_to_all_v(send, send_counts, send_offsets, recv,
                                recv_counts, recv_offsets).wait()

    def start_all_to_all_v(self, send, send_counts, send_offsets, recv,
                           recv_counts, recv_offsets):
        """Starts the exchange (counts and offsets in bytes) on the group's
        own threads and returns what finishes it: its wait() leaves the
        received bytes in `recv`. The runtime starts an exchange before the
        Newton-Schulz it overlaps and waits for it after."""
        send_t = torch.from_numpy(send)
        recv_t = torch.from_numpy(recv)
        if _packed(send_counts, send_offsets):
            inp = send_t[: sum(send_counts)]
        else:
            inp = torch.cat([send_t[o:o + c] for o, c in
                             zip(send_offsets, send_counts)])
        packed_recv = _packed(recv_counts, recv_offsets)
        out = (recv_t[: sum(recv_counts)] if packed_recv
               else torch.empty(sum(recv_counts), dtype=torch.uint8))
        staged = None
        if self._device is not None:
            staged = torch.empty(out.numel(), dtype=torch.uint8,
                                 device=self._device)
            inp = inp.to(self._device)
        work = dist.all_to_all_single(
            out if staged is None else staged, inp,
            output_split_sizes=list(recv_counts),
            input_split_sizes=list(send_counts), group=self.group,
            async_op=True)
        return _PendingExchange(self, work, inp, out, staged,
                                None if packed_recv
                                else (recv_t, recv_counts, recv_offsets))

    def wait(self, work):
        """Waits for a collective within the deadline; one that runs out
        raises TimeoutError naming the late ranks."""
        try:
            work.wait(timeout=self.deadline.delta)
        except RuntimeError as error:
            if not is_timeout(error):
                raise
            raise TimeoutError(self.deadline.late_ranks(self.ranks)) from None

    def all_gather_int(self, value):
        return self.all_gather_words([value])

    def all_gather_words(self, words):
        """Every rank's words (unsigned 64-bit, the same count on each), in
        one all_gather, rank after rank."""
        signed = [w - (1 << 64) if w >= (1 << 63) else w for w in words]
        mine = torch.tensor(signed, dtype=torch.int64, device=self._device)
        every = [torch.empty_like(mine) for _ in range(self._size)]
        self.wait(dist.all_gather(every, mine, group=self.group,
                                  async_op=True))
        return [int(v) & ((1 << 64) - 1)
                for t in every for v in t.tolist()]

    def all_gather_bytes(self, data):
        """Every rank's bytes, in rank order: their lengths, then the bytes
        padded to the longest, in two all_gathers."""
        data = bytes(data)
        lengths = self.all_gather_words([len(data)])
        longest = max(lengths)
        mine = torch.zeros(longest, dtype=torch.uint8, device=self._device)
        if data:
            mine[:len(data)] = torch.frombuffer(bytearray(data),
                                                dtype=torch.uint8)
        every = [torch.empty_like(mine) for _ in range(self._size)]
        self.wait(dist.all_gather(every, mine, group=self.group,
                                  async_op=True))
        return [t[:n].cpu().numpy().tobytes() for t, n in zip(every, lengths)]

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM):
        """Reduces a tensor over the ranks in place (the state kept as
        summands and the gradient norm under the owner reduction,
        _owner_state.py)."""
        on = tensor if self._device is None else tensor.to(self._device)
        self.wait(dist.all_reduce(on, op=op, group=self.group,
                                  async_op=True))
        if on is not tensor:
            tensor.copy_(on)
        return tensor

    def gpu_transport(self, device):
        """How an optimizer on GPU `device` exchanges (collective): "nccl",
        the runtime's own NCCL communicator bootstrapped over this group
        (the exchanges stay on the device, ordered with the step's stream),
        where every rank has a GPU of its own; "host" (staged through host
        memory over this group) where some ranks share one, which NCCL
        refuses (a warning says so)."""
        mine = f"{socket.gethostname()}/{_gpu_identity(device)}"
        every = [b.decode() for b in self.all_gather_bytes(mine.encode())]
        if len(set(every)) == len(every):
            return "nccl"
        shared = sorted({d for d in every if every.count(d) > 1})
        warnings.warn(f"muonc: ranks share a GPU ({', '.join(shared)}): "
                      "the exchanges are staged through host memory "
                      "(opt.transport == 'host')")
        return "host"

    def abort(self, code):
        os._exit(code)


class _PendingExchange:
    """An all_to_all_v on its way: the work, and the tensors it reads and
    writes (kept alive until it is done)."""

    def __init__(self, comm, work, inp, out, staged, scatter):
        self._comm = comm
        self._work, self._inp, self._out = work, inp, out
        self._staged, self._scatter = staged, scatter

    def wait(self):
        self._comm.wait(self._work)
        if self._staged is not None:
            self._out.copy_(self._staged)  # waits for the collective
        if self._scatter is not None:
            recv_t, counts, offsets = self._scatter
            at = 0
            for o, c in zip(offsets, counts):
                recv_t[o:o + c] = self._out[at:at + c]
                at += c
        self._work = self._inp = self._out = self._staged = None


_OWNED = weakref.WeakSet()


def _gpu_identity(device):
    """Which GPU `device` is: its UUID where torch sees it, else (the fake
    GPU of the tests, one per process) this process's."""
    try:
        return str(torch.cuda.get_device_properties(device).uuid)
    except (AssertionError, RuntimeError, AttributeError):
        return f"process {os.getpid()} {device}"


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

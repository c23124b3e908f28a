"""Gradients reduced straight to their owners under DDP.

DDP all-reduces every gradient (2(N-1)/N of the bytes per rank); muonc then
sends each orthogonalized update from its owner to the other ranks
((N-1)/N more). With ``Muon.reduce_gradients_to_owners(ddp_model)``, DDP's
communication hook reduces each matrix's gradient to the one rank that
orthogonalizes it instead, as DDP hands the bucket over during the backward
pass, so it overlaps the rest of backward as DDP's all-reduce does. Each
non-owner sends its summand once ((N-1)/N of the bytes) and the owner's
update comes back ((N-1)/N): DDP's all-reduce volume and no more.

One all_to_all per bucket does it: a reduce-scatter whose pieces are whole
matrices, each rank summing the summands it receives in rank order. The
optimizer's other gradients (AdamW's, matrices the placement keeps on
every rank), which every rank needs whole, ride in the same all_to_all:
on 2 ranks each sends the other its summand (an all-reduce's bytes); on
more, as one share per rank, summed there and gathered by one all_to_all
at the step (a reduce-scatter and an all-gather, an all-reduce's bytes). So
every gradient is the rank-order sum one process computes, bit for bit on
any number of ranks (a backend's all-reduce or reduce adds in its own
order), and on gloo an all_to_all costs less than the per-owner reduces
it replaces (docs/performance.md).

After the hook a matrix's ``.grad`` is the mean over ranks on its owner and
zero elsewhere. The step is the plain data-parallel plan's (the gradient
counted whole where it is): the owner's momentum is the momentum of the
mean, the others' stays zero, so Muon's momentum, linear in the gradient,
is kept as summands whose sum over the ranks is the true one
(``state_dict()`` sums them). The engine is told
(``set_gradients_reduced_to_owners``): it skips the momentum and the NaN
check of the matrices a rank does not own, (N-1)/N of that work.

A communication hook rather than a wrapper of our own: DDP keeps doing what
users rely on (buckets, ``no_sync`` accumulation, unused-parameter
detection, broadcasting buffers), and the hook is torch's documented way to
change how a bucket is reduced. Gradients of parameters of other
optimizers are all-reduced as DDP would: they are whole after backward.

What this means for the state and the gradient norm: _owner_state.py.
"""
import torch
import torch.distributed as dist

from .._core import InvalidArgumentError, MuonTypeError
from ._settings import ELEMENTWISE

__all__ = ["HookState", "check_ddp", "finish_gradients", "owner_reduce_hook",
           "owner_segments"]


def check_ddp(ddp_model, optimizer_params, group_ranks):
    """Refuses what the owner reduction cannot serve: not a DDP module, a
    process group other than the optimizer's, a parameter of the optimizer
    that DDP does not reduce."""
    from torch.nn.parallel import DistributedDataParallel
    if not isinstance(ddp_model, DistributedDataParallel):
        raise MuonTypeError(
            "reduce_gradients_to_owners expects a torch.nn.parallel."
            f"DistributedDataParallel module, got "
            f"{type(ddp_model).__name__}")
    have = dist.get_process_group_ranks(ddp_model.process_group)
    if list(have) != list(group_ranks):
        raise InvalidArgumentError(
            f"invalid argument: the DDP module's process group has ranks "
            f"{list(have)}, the optimizer's {list(group_ranks)}")
    ignored = getattr(ddp_model, "parameters_to_ignore", set()) or set()
    reduced = {id(p) for n, p in ddp_model.module.named_parameters()
               if p.requires_grad and n not in ignored}
    outside = [name for p, name in optimizer_params
               if p.requires_grad and id(p) not in reduced]
    if outside:
        raise InvalidArgumentError(
            f"invalid argument: parameters {outside} of the optimizer are "
            "not reduced by this DDP module; the owner reduction needs DDP "
            "to hand every gradient over")


def owner_segments(opt):
    """{id(parameter): [(start, length, owner rank)]}: the elements of each
    parameter (flattened) that one rank alone orthogonalizes, by the plan's
    assignments (a batched parameter's matrices may have different owners).
    Matrices several ranks orthogonalize (the placement's redundant ones)
    are not listed: their gradients are all-reduced."""
    holders = {}
    for rank, names in opt._engine.assignments().items():
        for name in names:
            holders.setdefault(name, []).append(rank)
    segments = {}
    for p, name, g in opt._params:
        if g["algorithm"] in ELEMENTWISE:
            continue
        size = p.shape[-2:].numel()
        matrices = ([(0, name)] if name in holders else
                    [(i * size, f"{name}[{i}]")
                     for i in range(p.numel() // size)])
        mine = [(start, size, holders[m][0]) for start, m in matrices
                if len(holders.get(m, ())) == 1]
        if mine:
            segments[id(p)] = mine
    return segments


class HookState:
    """What the hook needs: the optimizer (its _owner_segments, as of its
    latest plan, so a group added later joins), the process group, the
    shared gradients whose gathering waits for the step (`pending`: bucket
    index -> [(parameter, start, length, holder rank)]), and the bytes this
    rank moved since the last step."""

    def __init__(self, optimizer, group):
        self.optimizer = optimizer
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.pending = {}
        # Bucket index -> (send, receive) buffers, kept from step to step:
        # a fresh bucket-sized tensor costs its pages' faults every step.
        self.buffers = {}
        # Bucket index -> its _BucketLayout, until DDP rebuilds its buckets
        # or the optimizer compiles a new plan.
        self.layouts = {}
        self.bytes_sent = 0
        self.bytes_received = 0

    def buffers_for(self, bucket, sending, receiving):
        """The bucket's send and receive buffers of these sizes (in its
        gradients' dtype and device)."""
        buffer = bucket.buffer()
        held = self.buffers.get(bucket.index())
        if held is None or held[0].dtype != buffer.dtype or \
                held[0].device != buffer.device or \
                held[0].numel() < sending or held[1].numel() < receiving:
            held = (buffer.new_empty(sending), buffer.new_empty(receiving))
            self.buffers[bucket.index()] = held
        return held[0][:sending], held[1][:receiving]

    def layout_of(self, bucket):
        """The bucket's _BucketLayout, computed again only when its
        parameters or the plan's owners changed."""
        params = bucket.parameters()
        segments = self.optimizer._owner_segments
        held = self.layouts.get(bucket.index())
        if held is None or held.segments is not segments or \
                len(held.params) != len(params) or \
                any(a is not b for a, b in zip(held.params, params)):
            held = _BucketLayout(self, params, segments)
            self.layouts[bucket.index()] = held
        return held

    def take_counters(self):
        sent, received = self.bytes_sent, self.bytes_received
        self.bytes_sent = self.bytes_received = 0
        return sent, received


class _Spans:
    """Runs (start, length, kind) of a flat buffer in order, adjacent ones
    of the same kind merged."""

    def __init__(self):
        self.runs = []
        self.total = 0

    def add(self, start, length, kind=None):
        if not length:
            return
        if self.runs and self.runs[-1][0] + self.runs[-1][1] == start and \
                self.runs[-1][2] == kind:
            self.runs[-1] = (self.runs[-1][0], self.runs[-1][1] + length,
                             kind)
        else:
            self.runs.append((start, length, kind))
        self.total += length

    def take(self, buffer):
        if len(self.runs) == 1:
            a, n, _ = self.runs[0]
            return buffer[a:a + n]
        return torch.cat([buffer[a:a + n] for a, n, _ in self.runs])

    def put(self, buffer, values):
        at = 0
        for a, n, _ in self.runs:
            buffer[a:a + n].copy_(values[at:at + n])
            at += n

    def views(self, buffer):
        """The runs as views of `buffer`."""
        return [buffer[a:a + n] for a, n, _ in self.runs]

    def packed_views(self, packed):
        """The runs' places in `packed`, which holds them one after the
        other."""
        views, at = [], 0
        for _, n, _ in self.runs:
            views.append(packed[at:at + n])
            at += n
        return views

    def complement(self, numel):
        """The runs of [0, numel) outside these."""
        rest, done = _Spans(), 0
        for a, n, _ in self.runs:
            rest.add(done, a - done)
            done = a + n
        rest.add(done, numel - done)
        return rest


# Kinds of the runs sent to a rank: the matrices it alone orthogonalizes
# (divided by N into the send buffer, then zeroed here), and the rest (kept
# here too, so divided in place first and copied).
_THEIRS, _KEPT = "theirs", "kept"


class _BucketLayout:
    """Where each element of a bucket's buffer goes (the buffer holds its
    parameters' gradients one after the other, in the order of
    bucket.parameters()), computed once per bucket and plan:

    * `to`: [_Spans] by rank: what that rank sums. The matrices it alone
      orthogonalizes, and of the optimizer's other gradients (AdamW's,
      matrices the placement keeps on every rank): on 2 ranks all of them
      (each rank sends the other its summand, an all-reduce's bytes, and
      nothing is left for the step); on more, one contiguous share per
      rank, gathered at the step (sending every summand to every rank
      would cost N-1 times the bytes where an all-reduce costs 2(N-1)/N);
    * `theirs`: _Spans of the matrices other ranks orthogonalize (zeroed
      here after the exchange); `kept`: the rest of the buffer;
    * `shares`: [(parameter, start, length, rank)] of the shares;
    * `foreign`: _Spans of parameters of other optimizers, all-reduced as
      DDP would (their gradients are whole after backward);
    * `sending`, `receiving`: the all_to_all's split sizes by rank, and
      `exchanged`: whether there is one."""

    def __init__(self, state, params, segments):
        self.params = params
        self.segments = segments
        me, size = state.rank, state.size
        self.me, self.size = me, size
        mine = {id(p) for p, _, _ in state.optimizer._params}
        to = [_Spans() for _ in range(size)]
        theirs, foreign = _Spans(), _Spans()
        shared = []  # (parameter, start in it, length, start in the buffer)
        at = 0
        for p in params:
            if id(p) not in mine:
                foreign.add(at, p.numel())
                at += p.numel()
                continue
            done = 0
            for start, length, owner in segments.get(id(p), ()):
                if start > done:
                    shared.append((p, done, start - done, at + done))
                to[owner].add(at + start, length,
                              _KEPT if owner == me else _THEIRS)
                if owner != me:
                    theirs.add(at + start, length)
                done = start + length
            if p.numel() > done:
                shared.append((p, done, p.numel() - done, at + done))
            at += p.numel()
        self.shares = _share_out(shared, to, size)
        self.to, self.theirs, self.foreign = to, theirs, foreign
        self.kept = theirs.complement(at)
        self.sending = [0 if r == me else to[r].total for r in range(size)]
        self.receiving = [0 if r == me else to[me].total
                          for r in range(size)]
        # Every rank decides alike: some rank sums something.
        self.exchanged = any(spans.total for spans in to)
        self._views = None

    def views(self, buffer, send, received):
        """The _BucketViews of these buffers, made again only when one of
        them moved (the cached views keep the old ones alive, so an address
        seen again is the same buffer)."""
        key = (buffer.data_ptr(), send.data_ptr(), received.data_ptr())
        if self._views is None or self._views.key != key:
            self._views = _BucketViews(self, key, buffer, send, received)
        return self._views


class _BucketViews:
    """A layout's runs as views of one bucket buffer and its send and
    receive buffers, so that the hook's element work is a few foreach
    calls (one dispatch each for all the runs) rather than an operation
    per run, which at small widths cost more than the arithmetic:

    * `kept`: the buffer's runs that stay here (divided in place);
    * `sent_from`, `sent_to`: every run sent to another rank, in the
      buffer and in the send buffer, in send order; `sent_theirs`: those
      of the send buffer that are other owners' matrices (divided there);
    * `mine`: the runs this rank sums; `rows`: for each other rank in rank
      order, its summand of them in the receive buffer;
    * `theirs`: the buffer's runs of other owners' matrices (zeroed)."""

    def __init__(self, layout, key, buffer, send, received):
        self.key = key
        me, size = layout.me, layout.size
        self.kept = layout.kept.views(buffer)
        self.sent_from, self.sent_to, self.sent_theirs = [], [], []
        at = 0
        for r in range(size):
            if r == me:
                continue
            for a, n, kind in layout.to[r].runs:
                self.sent_from.append(buffer[a:a + n])
                self.sent_to.append(send[at:at + n])
                if kind == _THEIRS:
                    self.sent_theirs.append(send[at:at + n])
                at += n
        own = layout.to[me]
        self.mine = own.views(buffer)
        rows = received.view(size - 1, own.total)
        self.rows = [own.packed_views(row) for row in rows]
        self.theirs = layout.theirs.views(buffer)


def _share_out(shared, to, size):
    """Adds the shared gradients' pieces to the ranks that sum them (every
    rank on 2 ranks; one contiguous share per rank on more) and returns the
    shares to gather at the step: [(parameter, start, length, rank)]."""
    if size <= 2:
        for _, _, length, where in shared:
            for spans in to:
                spans.add(where, length, _KEPT)
        return []
    total = sum(n for _, _, n, _ in shared)
    bounds = [total * r // size for r in range(size + 1)]
    shares = []
    rank, used = 0, 0  # `used`: the shared elements before this piece
    for p, start, length, where in shared:
        while length:
            while used >= bounds[rank + 1]:
                rank += 1
            n = min(length, bounds[rank + 1] - used)
            to[rank].add(where, n, _KEPT)
            shares.append((p, start, n, rank))
            start, where, length, used = start + n, where + n, length - n, \
                used + n
    return shares


def _scale_and_pack(views, size):
    """Divides the bucket by N (DDP's mean) and fills the send buffer, each
    element divided once: what stays here is divided in place (then copied
    where it is sent too), the other owners' matrices are copied as they
    are and divided in the send buffer (and zeroed here after the
    exchange). The same division, so the same bits as dividing the whole
    buffer first."""
    if views.kept:
        torch._foreach_div_(views.kept, size)
    if views.sent_to:
        torch._foreach_copy_(views.sent_to, views.sent_from)
    if views.sent_theirs:
        torch._foreach_div_(views.sent_theirs, size)


def owner_reduce_hook(state, bucket):
    """DDP communication hook: the bucket's gradients scaled by 1/N (DDP's
    mean), then one all_to_all: each rank sends every other rank its
    summand of what that rank sums (its matrices; the optimizer's other
    gradients, or on more than 2 ranks its share of them) and adds the
    summands it receives in rank order, as one process adding the ranks'
    gradients does, bit for bit on any number of ranks. On return a
    matrix's gradient is the mean on its owner and zero elsewhere; shares
    are gathered by the step (finish_gradients); other optimizers'
    gradients are all-reduced."""
    buffer = bucket.buffer()
    layout = state.layout_of(bucket)
    if bucket.index() == 0:
        state.pending = {}  # a new backward pass: the last one's are stale
    if layout.shares:
        state.pending[bucket.index()] = layout.shares
    me, size = state.rank, state.size
    started = []
    send, received = state.buffers_for(bucket, sum(layout.sending),
                                       sum(layout.receiving))
    views = layout.views(buffer, send, received)
    _scale_and_pack(views, size)
    if layout.exchanged:
        started.append(dist.all_to_all_single(
            received, send, output_split_sizes=layout.receiving,
            input_split_sizes=layout.sending, group=state.group,
            async_op=True))
        width = buffer.element_size()
        state.bytes_sent += send.numel() * width
        state.bytes_received += received.numel() * width
    foreign = layout.foreign
    if foreign.total:
        flat = foreign.take(buffer)
        started.append(dist.all_reduce(flat, group=state.group,
                                       async_op=True))

    def put_back(_):
        if layout.exchanged:
            if views.mine:
                _add_in_rank_order(views.mine, views.rows, me)
            if views.theirs:
                torch._foreach_zero_(views.theirs)
        if foreign.total and len(foreign.runs) > 1:
            foreign.put(buffer, flat)
        return buffer

    if not started:
        done = torch.futures.Future()
        done.set_result(buffer)
        return done
    if buffer.is_cuda:
        # One stream runs the group's collectives in order: the last one's
        # future (whose value carries its stream's event) covers them all.
        return started[-1].get_future().then(put_back)
    # A CPU backend may run them on several threads: wait for every one
    # (a wait() inside the callback can deadlock gloo's workers).
    return torch.futures.collect_all(
        [work.get_future() for work in started]).then(put_back)


def _add_in_rank_order(mine, rows, me):
    """Leaves in `mine` (this rank's summands, a list of runs) the sum of
    every rank's summands added in rank order, as one process adds them;
    `rows` holds the other ranks' summands of the same runs, one list per
    rank in rank order, and is used as scratch. In place: the ranks before
    this one are added up in their rows, that sum is added to this rank's
    summand (a + b is b + a, bit for bit), then the rest."""
    if me:
        total = rows[0]
        for row in rows[1:me]:
            torch._foreach_add_(total, row)
        torch._foreach_add_(mine, total)
    for row in rows[me:]:
        torch._foreach_add_(mine, row)


def finish_gradients(state):
    """Gathers the shared gradients' shares that the hook summed on each
    rank (one all_to_all over every bucket of the last backward pass), so
    that every rank holds them whole before the step or the norm. A no-op
    when nothing waits."""
    pending, state.pending = state.pending, {}
    shares = [s for index in sorted(pending) for s in pending[index]]
    if not shares:
        return
    me, size = state.rank, state.size
    held = [[] for _ in range(size)]
    for p, start, length, rank in shares:
        held[rank].append((p, start, length))
    counts = [sum(n for _, _, n in held[r]) for r in range(size)]
    sample = shares[0][0]
    mine = [p.grad.view(-1)[a:a + n] if p.grad is not None else
            sample.new_zeros(n) for p, a, n in held[me]]
    mine = torch.cat(mine) if mine else sample.new_empty(0)
    send = mine.repeat(size - 1)
    received = sample.new_empty(sum(counts) - counts[me])
    dist.all_to_all_single(
        received, send,
        output_split_sizes=[0 if r == me else counts[r] for r in range(size)],
        input_split_sizes=[0 if r == me else counts[me] for r in range(size)],
        group=state.group)
    width = received.element_size()
    state.bytes_sent += send.numel() * width
    state.bytes_received += received.numel() * width
    at = 0
    for r in range(size):
        if r == me:
            continue
        for p, a, n in held[r]:
            if p.grad is not None:
                p.grad.view(-1)[a:a + n].copy_(received[at:at + n])
            at += n

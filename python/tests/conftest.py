import os
import socket

import pytest

torch = pytest.importorskip("torch")


def ns_fp32(grad, ns_coefficients, ns_steps, eps):
    """torch.optim.Muon's Newton-Schulz (torch/optim/_muon.py) in float32
    instead of bfloat16: the reference the runtime's f32 NS matches."""
    a, b, c = ns_coefficients
    x = grad.to(torch.float32, copy=True)
    if grad.size(0) > grad.size(1):
        x = x.T
    x = x.div(x.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram = x @ x.T
        update = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, update, x, beta=a)
    if grad.size(0) > grad.size(1):
        x = x.T
    return x


@pytest.fixture
def fp32_torch_muon(monkeypatch):
    import torch.optim._muon as tm
    monkeypatch.setattr(tm, "_zeropower_via_newtonschulz", ns_fp32)


class TinyTransformer(torch.nn.Module):
    """A small transformer block (embedding, attention, MLP, norms, head):
    2-D matrices for Muon, the norms' weights and the embedding for AdamW."""

    def __init__(self, vocab=32, d=16, heads=2, ff=32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.block = torch.nn.TransformerEncoderLayer(
            d, heads, ff, dropout=0.0, batch_first=True, bias=False)
        # No biases: the attention's key bias has no effect on the output,
        # so its gradient is rounding noise, which AdamW's normalized step
        # turns into full-size updates that differ between any two
        # implementations.
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        return self.head(self.block(self.embed(tokens)))


def split_params(model):
    """(Muon matrices, AdamW rest) as a trainer splits them."""
    muon, adamw = [], []
    for name, p in model.named_parameters():
        (muon if p.ndim == 2 and "embed" not in name else adamw).append(p)
    return muon, adamw


def batch(seed, n=4, t=8, vocab=32):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (n, t + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def loss_of(model, x, y):
    logits = model(x)
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def rel(a, b):
    return ((a.detach() - b.detach()).norm() / b.detach().norm().clamp(min=1e-30)).item()


def free_port():
    """A TCP port free on 127.0.0.1 now (for MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(fn, world, *args):
    """Runs fn(rank, world, *args) on `world` spawned processes, each in a
    gloo process group over them."""
    import torch.multiprocessing as mp
    mp.start_processes(_entry, args=(fn, world, free_port()) + args,
                       nprocs=world, join=True, start_method="spawn")


def _entry(rank, fn, world, port, *args):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()


def dcp_load(model, opt, checkpoint_id):
    """Loads a torch.distributed.checkpoint of {"model": ..., "optim": ...}
    (get_state_dict's dicts, as the tests save them) into `model` and
    `opt`, resharded to their layout."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_state_dict, set_state_dict)
    msd, osd = get_state_dict(model, opt)
    dcp.load({"model": msd, "optim": osd}, checkpoint_id=checkpoint_id)
    set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)

"""QK-clip (MuonClip, Kimi K2, arXiv 2507.20534) through muonc.torch: the
qk_clip_layers keyword and the per-step max logits against a numpy
reference written from the paper's rule, the refusals (nothing changed),
and FSDP2 on 4 gloo processes (each rank passing the logits of its part of
the batch) equal to one process bit for bit."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from muonc.torch import Muon, MuonError, create_dtensor_config  # noqa: E402

LR, TAU = 0.02, 4.0
D, HEADS, KV_HEADS, HEAD_DIM, T = 16, 4, 2, 4, 6


class Attn(torch.nn.Module):
    """One grouped-query attention layer (4 query heads, 2 key heads) and
    an MLP matrix beside it."""

    def __init__(self):
        super().__init__()
        self.wq = torch.nn.Linear(D, HEADS * HEAD_DIM, bias=False)
        self.wk = torch.nn.Linear(D, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = torch.nn.Linear(D, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = torch.nn.Linear(HEADS * HEAD_DIM, D, bias=False)

    def max_logits(self, x):
        """Per query head, the largest q.k / sqrt(d) over the batch `x`
        ([B, T, D]): what a trainer records in its forward pass."""
        wq = self.wq.weight.detach()
        wk = self.wk.weight.detach()
        if hasattr(wq, "full_tensor"):
            wq, wk = wq.full_tensor(), wk.full_tensor()
        q = (x @ wq.T).view(*x.shape[:2], HEADS, HEAD_DIM)
        k = (x @ wk.T).view(*x.shape[:2], KV_HEADS, HEAD_DIM)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=2)
        s = torch.einsum("bihd,bjhd->bhij", q, k) / HEAD_DIM ** 0.5
        return s.amax(dim=(0, 2, 3))

    def forward(self, x):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.wk(x).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.wv(x).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        a = torch.softmax(q @ k.transpose(-1, -2) / HEAD_DIM ** 0.5, -1)
        return self.wo((a @ v).transpose(1, 2).reshape(b, t, -1))


def layers(model):
    return [{"name": "attn", "query": model.wq.weight,
             "key": model.wk.weight, "num_heads": HEADS,
             "num_kv_heads": KV_HEADS}]


def inputs(step, n=4):
    g = torch.Generator().manual_seed(100 + step)
    # Large enough that some heads' logits pass the threshold.
    return 2.0 * torch.randn(n, T, D, generator=g)


def reference_clip(wq, wk, s, tau):
    """The paper's rule in float64: query head h's rows times
    sqrt(tau / S_h) where S_h > tau; a key head's rows by the largest S of
    the query heads that share it."""
    wq, wk = wq.astype(np.float64).copy(), wk.astype(np.float64).copy()
    s = np.asarray(s, dtype=np.float64)
    group = HEADS // KV_HEADS
    for h in range(HEADS):
        if s[h] > tau:
            wq[h * HEAD_DIM:(h + 1) * HEAD_DIM] *= np.sqrt(tau / s[h])
    for j in range(KV_HEADS):
        top = s[j * group:(j + 1) * group].max()
        if top > tau:
            wk[j * HEAD_DIM:(j + 1) * HEAD_DIM] *= np.sqrt(tau / top)
    return wq, wk


def train(model, opt, steps, clip=True, record=None):
    for s in range(steps):
        x = inputs(s)
        opt.zero_grad()
        model(x).square().mean().backward()
        logits = model.max_logits(x)
        if record is not None:
            record.append(logits.clone())
        opt.step(qk_max_logits={"attn": logits} if clip else None)


def test_matches_a_numpy_reference_of_the_paper():
    # weight decay 0: Muon's update O does not depend on the values, so a
    # run without the clip fed the same gradients says what each update
    # was; the clipped run must be the reference's clip of (previous
    # clipped values + that update), step after step.
    torch.manual_seed(0)
    model = Attn()
    init = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = Muon(model.parameters(), lr=LR, weight_decay=0.0,
               qk_clip_threshold=TAU, qk_clip_layers=layers(model))
    plain = Attn()
    with torch.no_grad():
        for n, p in plain.named_parameters():
            p.copy_(init[n])
    plain_opt = Muon(plain.parameters(), lr=LR, weight_decay=0.0)
    ref = {n: init[n].double().numpy() for n in ("wq.weight", "wk.weight")}
    clipped_any = kept_any = 0
    for s in range(4):
        x = inputs(s)
        logits = model.max_logits(x)
        # The reference's logits from its own weights: the same heads over
        # the threshold (what the trainer measured is what is clipped).
        ref_logits = [
            float(v) for v in Attn.max_logits(_weights(ref), x.double())]
        np.testing.assert_allclose(logits.double().numpy(), ref_logits,
                                   rtol=1e-4)
        # Both optimizers take the clipped run's gradients.
        opt.zero_grad()
        model(x).square().mean().backward()
        with torch.no_grad():
            for (n, p), (_, q) in zip(plain.named_parameters(),
                                      model.named_parameters()):
                p.copy_(q)
                p.grad = q.grad.clone()
        plain_opt.step()
        opt.step(qk_max_logits={"attn": logits})
        assert opt.qk_clipped_heads == int((logits > TAU).sum())
        clipped_any += opt.qk_clipped_heads
        kept_any += HEADS - opt.qk_clipped_heads
        moved = {n: plain.get_parameter(n).detach().double().numpy()
                 for n in ref}
        ref["wq.weight"], ref["wk.weight"] = reference_clip(
            moved["wq.weight"], moved["wk.weight"], logits.numpy(), TAU)
        for n in ref:
            got = model.get_parameter(n).detach().double().numpy()
            np.testing.assert_allclose(got, ref[n], rtol=1e-6, atol=1e-7,
                                       err_msg=f"{n} step {s}")
            ref[n] = got  # the next step from the optimizer's own values
        # Weights QK-clip does not touch move as plain Muon moves them.
        for n in ("wv.weight", "wo.weight"):
            assert torch.equal(model.get_parameter(n),
                               plain.get_parameter(n)), n
    assert clipped_any > 0 and kept_any > 0


def _weights(ref):
    """An object with the reference's weights, for Attn.max_logits."""
    class W:
        pass
    w = W()
    w.wq, w.wk = W(), W()
    w.wq.weight = torch.from_numpy(ref["wq.weight"])
    w.wk.weight = torch.from_numpy(ref["wk.weight"])
    return w


def test_no_layers_no_change_and_the_plan_without_qk_clip():
    torch.manual_seed(0)
    a, b = Attn(), Attn()
    b.load_state_dict(a.state_dict())
    opt_a = Muon(a.parameters(), lr=LR)
    opt_b = Muon(b.parameters(), lr=LR, qk_clip_threshold=1e9,
                 qk_clip_layers=layers(b))
    assert "qk_clip" not in opt_a.engine.plan_json()
    assert opt_b.engine.qk_clip_layers() == [
        {"name": "attn", "query": opt_b.param_names[0],
         "key": opt_b.param_names[1], "num_heads": HEADS,
         "num_kv_heads": KV_HEADS, "threshold": 1e9}]
    train(a, opt_a, 2, clip=False)
    train(b, opt_b, 2)  # no head reaches 1e9: nothing clipped
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), n


def test_a_state_saved_without_qk_clip_resumes_with_it():
    # QK-clip has no state: switching it on at a resume loads the state a
    # run without it saved, and continues as that run would until a head
    # passes the threshold.
    torch.manual_seed(0)
    a = Attn()
    opt_a = Muon(a.parameters(), lr=LR)
    train(a, opt_a, 2, clip=False)
    saved = opt_a.state_dict()
    b = Attn()
    b.load_state_dict(a.state_dict())
    opt_b = Muon(b.parameters(), lr=LR, qk_clip_threshold=1e9,
                 qk_clip_layers=layers(b))
    opt_b.load_state_dict(saved)
    for s in range(2, 4):
        x = inputs(s)
        for model, opt, clip in ((a, opt_a, False), (b, opt_b, True)):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step(qk_max_logits={"attn": model.max_logits(x)}
                     if clip else None)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), n
    assert opt_b.engine.steps_taken == 4


def test_bad_logits_and_layers_are_refused_with_nothing_changed():
    torch.manual_seed(0)
    model = Attn()
    opt = Muon(model.parameters(), lr=LR, qk_clip_threshold=TAU,
               qk_clip_layers=layers(model))
    x = inputs(0)
    model(x).square().mean().backward()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    good = model.max_logits(x)
    cases = [
        ({"attn9": good}, "no layer named 'attn9' (the layers: 'attn')"),
        ({"attn": good[:3]}, "has 4 query heads: expected logits of shape "
                             "[4], got [3]"),
        ({"attn": good.view(2, 2)}, "got [2, 2]"),
        ({"attn": torch.tensor([1.0, float("nan"), 2.0, 3.0])},
         "the logit of head 1 is not finite"),
        ({"attn": good, "other": good}, "no layer named 'other'"),
    ]
    for logits, says in cases:
        with pytest.raises(MuonError, match=_escape(says)):
            opt.step(qk_max_logits=logits)
        for n, p in model.named_parameters():
            assert torch.equal(p, before[n]), n
        assert opt.engine.steps_taken == 0
    # The refused dict set nothing: the next step clips only with what it
    # is given now (no logits: nothing).
    opt.step()
    assert opt.qk_clipped_heads == 0
    # Layers the compiler refuses, naming the spec's path.
    with pytest.raises(MuonError, match=r"qk_clip.layers\[0\].query: .*16 "
                                        r"rows, not a multiple of its 3 "
                                        r"heads"):
        Muon(model.parameters(), qk_clip_threshold=TAU,
             qk_clip_layers=[dict(layers(model)[0], num_heads=3,
                                  num_kv_heads=1)])
    with pytest.raises(MuonError, match=r"qk_clip.layers\[0\].threshold: "
                                        r"expected a finite number > 0, "
                                        r"got -1"):
        Muon(model.parameters(), qk_clip_threshold=-1.0,
             qk_clip_layers=layers(model))
    with pytest.raises(MuonError, match=r"qk_clip_layers\[0\].key: not a "
                                        r"parameter of this optimizer"):
        Muon(model.parameters(), qk_clip_threshold=TAU,
             qk_clip_layers=[dict(layers(model)[0],
                                  key=torch.nn.Parameter(torch.ones(2, 2)))])
    with pytest.raises(MuonError, match="no threshold"):
        Muon(model.parameters(), qk_clip_layers=layers(model))
    with pytest.raises(MuonError, match="qk_clip_threshold without"):
        Muon(model.parameters(), qk_clip_threshold=TAU)


def _escape(text):
    import re
    return re.escape(text)


# --- FSDP2 on 4 processes --------------------------------------------------

STEPS = 3


def _four_ranks(rank, world, out):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = Attn()
    init = {n: p.detach().clone() for n, p in model.named_parameters()}
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    fully_shard(model, mesh=mesh)  # rows split: heads straddle ranks
    opt = Muon(model.named_parameters(), lr=LR, qk_clip_threshold=TAU,
               qk_clip_layers=layers(model),
               distributed_config=create_dtensor_config(model))
    record = {"init": init, "grads": [], "logits": [], "clipped": []}
    for s in range(STEPS):
        x = inputs(s, n=world)[rank:rank + 1]  # this rank's part
        opt.zero_grad()
        model(x).square().mean().backward()
        record["grads"].append({n: p.grad.full_tensor().clone()
                                for n, p in model.named_parameters()})
        mine = model.max_logits(x)
        everyone = [torch.zeros_like(mine) for _ in range(world)]
        torch.distributed.all_gather(everyone, mine)
        record["logits"].append(torch.stack(everyone).amax(0))
        # Each rank passes only what it measured; the step takes the max.
        opt.step(qk_max_logits={"attn": mine})
        record["clipped"].append(opt.qk_clipped_heads)
    record["final"] = {n: p.full_tensor().detach().clone()
                       for n, p in model.named_parameters()}
    torch.save(record, os.path.join(out, f"four.{rank}"))


def test_fsdp2_four_ranks_equal_one_process_bit_for_bit(tmp_path):
    from conftest import run_ranks
    run_ranks(_four_ranks, 4, str(tmp_path))
    four = [torch.load(tmp_path / f"four.{r}", weights_only=False)
            for r in range(4)]
    assert all(r["clipped"] == four[0]["clipped"] for r in four)
    rec = four[0]
    model = Attn()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(rec["init"][n])
    opt = Muon(model.named_parameters(), lr=LR, qk_clip_threshold=TAU,
               qk_clip_layers=layers(model))
    for s in range(STEPS):
        for n, p in model.named_parameters():
            p.grad = rec["grads"][s][n].clone()
        opt.step(qk_max_logits={"attn": rec["logits"][s]})
        assert opt.qk_clipped_heads == rec["clipped"][s], s
    equal = all(torch.equal(p.detach(), rec["final"][n])
                for n, p in model.named_parameters())
    print(f"QK-clip under FSDP2, 4 ranks equal one process bit for bit: "
          f"{equal} (heads clipped per step: {rec['clipped']})")
    assert equal
    assert sum(rec["clipped"]) > 0

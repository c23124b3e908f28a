"""One rank of test_fake_gpu.py: muonc.torch with its optimizer on the CUDA
backend over the fake GPU (_core_fakegpu, unittests/FakeGpu: host memory
stands in for device memory), against the same training on the CPU
backend. Run as a script: argv = fake module dir, rank, world, port,
output JSON; or under torchrun with rank "env" (the rank, world and
address from torchrun's environment; each rank writes <output>.<rank>).
The fake module is imported before torch, so that its CUDA symbols bind to
the fake, not to the CUDA libraries torch loads."""
import json
import os
import sys

sys.path.insert(0, sys.argv[1])
import _core_fakegpu as fake  # noqa: E402  (before torch: see above)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import muonc._core as cpu_core  # noqa: E402
import muonc.torch as mt  # noqa: E402
import muonc.torch._binding as binding_module  # noqa: E402
import muonc.torch._muon as optimizer_module  # noqa: E402
import muonc.torch._plan as plan_module  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import TinyTransformer, batch, loss_of, split_params  # noqa: E402

STEPS = 4


def on_fake_gpu(t):
    """A copy of `t` in the fake GPU's memory (a CPU tensor over it)."""
    raw = fake.fake_device_bytes(t.numel() * t.element_size())
    out = torch.from_numpy(raw).view(t.dtype).view(t.shape)
    out.copy_(t)
    return out


def use_backend(gpu):
    """muonc.torch's engine on the fake GPU (device 'cuda:0', ordered with
    the legacy default stream) or on the CPU."""
    # The plan is a Plan object of the module that compiles it: the same
    # module's Optimizer takes it.
    binding_module._core = plan_module._core = fake if gpu else cpu_core
    binding_module.engine_device_name = (lambda d: "cuda:0") if gpu else \
        (lambda d: "cpu")
    optimizer_module.current_stream = (lambda d: 0) if gpu else \
        (lambda d: None)


def train(gpu, rank, world, dtype, ns_dtype="f32"):
    use_backend(gpu)
    torch.manual_seed(0)
    model = TinyTransformer().to(dtype)
    for p in model.parameters():
        if gpu:  # parameters and gradients in device memory
            p.data = on_fake_gpu(p.data)
        p.grad = (on_fake_gpu if gpu else torch.clone)(torch.zeros_like(p))
    muon, adamw = split_params(model)
    config = mt.create_dtensor_config(model) if world > 1 else None
    opt = mt.Muon([{"params": muon}, {"params": adamw, "use_muon": False,
                                      "lr": 3e-3}], lr=0.02,
                  distributed_config=config, ns_dtype=ns_dtype)
    assert opt.engine.device == ("cuda:0" if gpu else "cpu"), opt.engine.device
    assert opt.engine.ns_dtype == ns_dtype, opt.engine.ns_dtype
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    counters = []
    for s in range(STEPS):
        x, y = batch(s, n=4 * world)
        opt.zero_grad(set_to_none=False)  # the gradients stay where they are
        if dtype == torch.bfloat16 or ns_dtype != "f32":
            # Gradients that do not depend on the parameters (the same on
            # every rank): in bf16 a last-bit difference of a weight (f32
            # Newton-Schulz summed in another order, then rounded) would
            # change the next gradients by far more than the backends
            # differ; so would an f16 rounding flipped by the order of a
            # product's sum.
            g = torch.Generator().manual_seed(100 + s)
            for p in model.parameters():
                p.grad.copy_(0.01 * torch.randn(p.shape, generator=g))
        else:
            loss_of(model, x[rank::world], y[rank::world]).backward()
            for p in model.parameters() if world > 1 else ():
                dist.all_reduce(p.grad)
                p.grad.div_(world)
        opt.step()
        sched.step()
        counters.append(opt.last_step_counters)
    state = opt.state_dict()["state"]
    return ([p.detach().float().clone() for p in model.parameters()],
            [{k: v.float().clone() for k, v in e.items() if k != "step"}
             for _, e in sorted(state.items())],
            opt.assignments, {"transport": opt.transport,
                              "counters": counters})


def rel(a, b):
    return ((a - b).norm() / b.norm().clamp(min=1e-30)).item()


def main():
    fake_dir, rank, world, port, out = sys.argv[1:6]
    torchrun = rank == "env"
    if torchrun:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group("gloo")
    else:
        rank, world = int(rank), int(world)
        if world > 1:
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            dist.init_process_group("gloo", rank=rank, world_size=world)
    report = {}
    try:
        for name, dtype, ns_dtype in (("f32", torch.float32, "f32"),
                                      ("bf16", torch.bfloat16, "f32"),
                                      ("f16_ns", torch.float32, "f16")):
            want, want_state, owners, _ = train(False, rank, world, dtype,
                                                ns_dtype)
            got, got_state, gpu_owners, run = train(True, rank, world, dtype,
                                                    ns_dtype)
            report[name] = {
                "params": max(rel(a, b) for a, b in zip(got, want)),
                "state": max(rel(a[k], b[k]) for a, b in
                             zip(got_state, want_state) for k in b),
                "moved": min(rel(a, b) for a, b in
                             zip(want, train_initial(dtype))),
                "same_owners": gpu_owners == owners,
                "transport": run["transport"],
                "host_copies": [c["host_copies"] for c in run["counters"]],
                "bytes_sent": sum(c["bytes_sent"] for c in run["counters"])}
        if rank == 0:
            report["errors"] = refusals()
        report["misuses"] = list(fake.fake_misuses())
    finally:
        if world > 1:
            dist.destroy_process_group()
    if torchrun:
        out = f"{out}.{rank}"
    if rank == 0 or torchrun:
        with open(out, "w") as f:
            json.dump(report, f)


def refusals():
    """What the GPU optimizer refuses, by case: the error's text."""
    plan = fake.compile_model(
        [{"name": "w", "shape": [8, 4], "dtype": "f32", "group": "g"}],
        [{"name": "g", "algorithm": "muon", "lr": 0.01,
          "weight_decay": 0.0}])
    cases = {
        "no_such_gpu": lambda: fake.Optimizer(plan, device="cuda:7"),
        "unknown_device": lambda: fake.Optimizer(plan, device="tpu"),
        "gram_on_gpu": lambda: fake.Optimizer(plan, ns_form="gram",
                                              device="cuda:0"),
        "unknown_form_on_gpu": lambda: fake.Optimizer(plan, ns_form="fast",
                                                      device="cuda:0"),
        "auto_on_gpu": lambda: fake.Optimizer(plan, ns_form="auto",
                                              device="cuda:0"),
        "stream_on_cpu": lambda: fake.Optimizer(plan).step(stream=0),
        # Another module's Plan goes as its text.
        "cpu_core_no_stream": lambda: cpu_core.Optimizer(
            plan.json()).step(stream=0),
    }
    out = {}
    for name, call in cases.items():
        try:
            call()
            out[name] = None
        except Exception as e:  # noqa: BLE001 -- the text is the result
            out[name] = f"{type(e).__name__}: {e}"
    return out


def train_initial(dtype):
    torch.manual_seed(0)
    return [p.detach().float() for p in TinyTransformer().to(dtype).parameters()]


if __name__ == "__main__":
    main()

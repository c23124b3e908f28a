"""One rank of test_torch_mpi.py, started by mpirun: muonc.torch.Muon with
its exchanges over MPI_COMM_WORLD. MODE "plain": no torch.distributed, the
same model on every rank (replicated, as DDP leaves it), each rank the whole
batch's gradient; MODE "bf16": the same with Newton-Schulz and the
exchanges in bf16; MODE "fsdp": torch.distributed (gloo) started from MPI's
ranks, the model under FSDP2. Rank 0 writes OUT (torch.save)."""
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import TinyTransformer, batch, loss_of, split_params  # noqa: E402
from muonc.torch import Muon, MuonError, launched_by_mpirun  # noqa: E402

STEPS = 4


def groups(model):
    muon, adamw = split_params(model)
    return [{"params": muon}, {"params": adamw, "use_muon": False,
                               "lr": 3e-3}]


def main(mode, out):
    assert launched_by_mpirun()
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    torch.manual_seed(0)
    model = TinyTransformer()
    result = {}
    if mode == "fsdp":
        dist.init_process_group("gloo", rank=rank, world_size=world)
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    # communicator: MPI (mpirun). "bf16": Newton-Schulz and the wire in bf16.
    extra = (dict(ns_dtype="bf16", wire_dtype="bf16") if mode == "bf16"
             else {})
    opt = Muon(groups(model), lr=0.02, **extra)
    result["wire_dtype"] = json.loads(opt.engine.plan_json())["wire_dtype"]
    result["communicator"] = opt.communicator
    result["world_size"] = opt.engine.world_size
    result["assignments"] = opt.assignments
    if mode == "plain":
        try:
            Muon(groups(model), lr=0.02,
                 distributed_config={"shape": [world + 1], "names": ["dp"],
                                     "async": True}).engine
        except MuonError as e:
            result["world_error"] = str(e)
        try:
            Muon(groups(model), communicator="nccl")
        except MuonError as e:
            result["name_error"] = str(e)
    for s in range(STEPS):
        x, y = batch(s, n=8)
        opt.zero_grad()
        if mode == "fsdp":
            per = 8 // world
            loss = loss_of(model, x[rank * per:(rank + 1) * per],
                           y[rank * per:(rank + 1) * per])
        else:
            loss = loss_of(model, x, y)
        loss.backward()
        opt.step()
    whole = {}
    for n, p in model.named_parameters():
        t = p.full_tensor() if hasattr(p, "full_tensor") else p
        whole[n] = t.detach().clone()
    result["params"] = whole
    if rank == 0:
        torch.save(result, out)
    if mode == "fsdp":
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

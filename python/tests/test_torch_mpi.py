"""muonc.torch.Muon launched by mpirun: its exchanges over MPI_COMM_WORLD
(mpi_worker.py), against one process."""
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
from muonc.torch import Muon  # noqa: E402
from conftest import (TinyTransformer, batch, free_port, loss_of,  # noqa: E402
                      split_params)

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="no mpirun")
HERE = os.path.dirname(os.path.abspath(__file__))


def mpirun(mode, world, tmp_path):
    out = str(tmp_path / f"{mode}{world}.pt")
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()))
    session = tmp_path / f"mpi-{mode}{world}"
    session.mkdir()
    cmd = [MPIRUN, "-q", "--allow-run-as-root", "--oversubscribe",
           "--bind-to", "none", "--mca", "btl_vader_single_copy_mechanism",
           "none", "--mca", "orte_tmpdir_base", str(session),
           "-x", "OMP_NUM_THREADS", "-x", "MASTER_ADDR", "-x", "MASTER_PORT",
           "-x", "PYTHONPATH", "-np", str(world), sys.executable,
           os.path.join(HERE, "mpi_worker.py"), mode, out]
    env.setdefault("PYTHONPATH", "")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return torch.load(out)




def one_process(steps=4):
    torch.manual_seed(0)
    model = TinyTransformer()
    muon, adamw = split_params(model)
    opt = Muon([{"params": muon}, {"params": adamw, "use_muon": False,
                                   "lr": 3e-3}], lr=0.02, communicator="torch")
    for s in range(steps):
        x, y = batch(s, n=8)
        opt.zero_grad()
        loss_of(model, x, y).backward()
        opt.step()
    return dict(model.named_parameters())


def test_mpirun_plain_tensors_equal_one_process(tmp_path):
    got = mpirun("plain", 2, tmp_path)
    assert got["communicator"] == "mpi" and got["world_size"] == 2
    # Each Muon matrix orthogonalized by exactly one of the two ranks.
    owned = sorted(m for ms in got["assignments"].values() for m in ms)
    assert len(owned) == len(set(owned)) == 5 and all(
        got["assignments"][r] for r in (0, 1)), got["assignments"]
    assert "the plan is for 3 ranks, MPI_COMM_WORLD has 2" in got["world_error"]
    assert "communicator 'nccl'" in got["name_error"]
    # The reference is one rank under mpirun too: torch's backward sums an
    # embedding's gradient in an order that depends on its thread count.
    want = mpirun("plain", 1, tmp_path)
    assert want["world_size"] == 1
    for n, p in got["params"].items():
        assert torch.equal(p, want["params"][n]), n  # same gradients: bit for bit


def test_mpirun_bf16_wire_equals_one_rank(tmp_path):
    # A bf16 wire under a bf16 Newton-Schulz loses nothing: the matrices
    # are rounded to bf16 on the way in and come out in bf16, so 2 ranks
    # exchanging bf16 equal 1 rank exchanging nothing, bit for bit.
    got = mpirun("bf16", 2, tmp_path)
    assert got["wire_dtype"] == "bf16" and got["world_size"] == 2
    want = mpirun("bf16", 1, tmp_path)
    plain = mpirun("plain", 1, tmp_path)
    differs = 0
    for n, p in got["params"].items():
        assert torch.equal(p, want["params"][n]), n
        differs += not torch.equal(p, plain["params"][n])
    assert differs > 0  # bf16 Newton-Schulz is not the f32 one


def test_mpirun_fsdp2_equals_one_process(tmp_path):
    got = mpirun("fsdp", 2, tmp_path)
    assert got["communicator"] == "mpi" and got["world_size"] == 2
    want = one_process()
    for n, p in got["params"].items():
        # FSDP2 averages the two halves' gradients in another order than one
        # backward over the whole batch.
        torch.testing.assert_close(p, want[n].detach(), rtol=1e-5, atol=1e-6,
                                   msg=n)


def test_communicator_argument_errors():
    from muonc import MuonError
    w = torch.nn.Parameter(torch.randn(4, 4))
    with pytest.raises(MuonError, match="communicator 'gloo'"):
        Muon([w], communicator="gloo")
    with pytest.raises(MuonError, match="process_group is for the 'torch'"):
        Muon([w], communicator="mpi", process_group=object())
    with pytest.raises(MuonError, match="wire_dtype 'f16'"):
        Muon([w], wire_dtype="f16")

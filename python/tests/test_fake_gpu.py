"""muonc.torch with the optimizer on a GPU, without one: the extension built
over the fake GPU (_core_fakegpu in <build>/python-fakegpu; `make python`
builds it where the CUDA backend is) runs the CUDA backend's own code
(CudaDevice, its kernels' bodies, Newton-Schulz on the fake cuBLAS, the
host-staged exchanges through torch.distributed) on host memory standing in
for device memory. Each run is checked against the CPU backend on the same
training, and the fake must have seen no misuse (what a GPU would refuse,
fault on or leave undefined).

What this cannot check: torch's CUDA tensors themselves (DLPack from the
GPU, torch's streams), which need a GPU (docs/pytorch.md)."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
from conftest import free_port  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_DIR = os.environ.get(
    "MUONC_FAKEGPU_DIR",
    os.path.join(HERE, "..", "..", "build", "python-fakegpu"))


def fake_module_dir():
    if any(f.startswith("_core_fakegpu") for f in
           (os.listdir(FAKE_DIR) if os.path.isdir(FAKE_DIR) else [])):
        return FAKE_DIR
    if os.environ.get("MUONC_REQUIRE_FAKEGPU") == "1":
        pytest.fail(f"_core_fakegpu is not in {FAKE_DIR} (make python builds "
                    "it where the CUDA backend is)")
    pytest.skip(f"no _core_fakegpu in {FAKE_DIR} (a build without CUDA)")


def run_worker(world, tmp_path):
    fake_dir = fake_module_dir()
    out = str(tmp_path / "report.json")
    port = str(free_port())
    env = dict(os.environ, MUON_FAKE_GPU_COUNT="1", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen(
        [sys.executable, os.path.join(HERE, "fake_gpu_worker.py"), fake_dir,
         str(rank), str(world), port, out], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank in range(world)]
    logs = [p.communicate(timeout=600)[0] for p in procs]
    for rank, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"rank {rank} exited {p.returncode}:\n{log}"
    with open(out) as f:
        return json.load(f)


# The largest relative difference from the CPU backend's training, by
# case: Newton-Schulz in f32 on the fake cuBLAS against OpenBLAS, products
# summed in another order: 1e-5. bf16 storage rounds the differences to its
# own ulp: within one bf16 rounding (2^-8 relative). f16 Newton-Schulz
# (f32 storage): an f16 rounding of a product (2^-11 relative) flipped by
# the order of its sum, carried through the steps' updates.
LIMITS = {"f32": 1e-5, "bf16": 4e-3, "f16_ns": 1e-3}


def check(report):
    assert report["misuses"][0] == 0, report["misuses"]
    for case, limit in LIMITS.items():
        r = report[case]
        assert r["same_owners"], r
        assert r["moved"] > 1e-3, r  # training changed every parameter
        assert r["params"] < limit, r
        assert r["state"] < limit, r


def test_one_process_on_the_fake_gpu_matches_cpu(tmp_path):
    report = run_worker(1, tmp_path)
    check(report)
    errors = report["errors"]
    assert "'cuda:7': this machine has 1 GPU(s)" in errors["no_such_gpu"], errors
    assert "device 'tpu': expected 'cpu', 'cuda' or 'cuda:N'" in \
        errors["unknown_device"], errors
    # The GPU runs the CPU's forms (the Gram form too); an unknown form is
    # refused there as on the CPU.
    assert errors["gram_on_gpu"] is None, errors
    assert "ns_form 'fast': expected 'auto', 'standard' or 'gram'" in \
        errors["unknown_form_on_gpu"], errors
    assert errors["auto_on_gpu"] is None, errors
    for case in ("stream_on_cpu", "cpu_core_no_stream"):
        assert "a stream is for an optimizer on a GPU; this one runs on the " \
            "cpu" in errors[case], errors


def test_two_ranks_on_the_fake_gpu_match_cpu(tmp_path):
    # Replicated parameters over 2 gloo ranks: each rank owns some matrices;
    # each rank a GPU of its own, so the exchanges stay on the device
    # (the runtime's NCCL communicator, bootstrapped over the group).
    report = run_worker(2, tmp_path)
    check(report)
    assert report["f32"]["transport"] == "nccl", report["f32"]


def run_torchrun(world, tmp_path, env=()):
    """fake_gpu_worker.py under torchrun on `world` processes; every
    rank's report."""
    fake_dir = fake_module_dir()
    out = str(tmp_path / "report.json")
    command = [sys.executable, "-m", "torch.distributed.run",
               f"--nproc_per_node={world}", f"--master_port={free_port()}",
               "--master_addr=127.0.0.1",
               os.path.join(HERE, "fake_gpu_worker.py"), fake_dir, "env",
               str(world), "0", out]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=900,
        env=dict(os.environ, MUON_FAKE_GPU_COUNT="1", OMP_NUM_THREADS="1",
                 **dict(env)))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    reports = []
    for rank in range(world):
        with open(f"{out}.{rank}") as f:
            reports.append(json.load(f))
    return reports


@pytest.mark.parametrize("world", [2, 4])
def test_torchrun_exchanges_stay_on_the_device(world, tmp_path):
    # Under torchrun with "CUDA" tensors each rank on its own GPU: the
    # plan's exchanges run on the runtime's NCCL communicator (the fake
    # NCCL), ordered with the step's stream, and no exchange buffer is
    # copied to or from host memory on any rank at any step; the training
    # equals the CPU backend's.
    for rank, report in enumerate(run_torchrun(world, tmp_path)):
        check(report)
        for case in LIMITS:
            r = report[case]
            assert r["transport"] == "nccl", (rank, r)
            assert r["bytes_sent"] > 0, (rank, r)
            assert r["host_copies"] == [0] * len(r["host_copies"]), (rank, r)


def test_host_staging_is_counted(tmp_path):
    # Staged through host memory (as for ranks sharing a GPU; forced here):
    # every exchange that moves something copies its buffers both ways, and
    # the counter says so (the count the test above finds 0).
    for rank, report in enumerate(run_torchrun(
            2, tmp_path, env={"MUONC_GPU_TRANSPORT": "host"})):
        check(report)
        r = report["f32"]
        assert r["transport"] == "host", (rank, r)
        assert all(c > 0 for c in r["host_copies"]), (rank, r)

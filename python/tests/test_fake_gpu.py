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


def check(report):
    assert report["misuses"][0] == 0, report["misuses"]
    for dtype in ("f32", "bf16"):
        r = report[dtype]
        assert r["same_owners"], r
        assert r["moved"] > 1e-3, r  # training changed every parameter
        # Newton-Schulz in f32 on the fake cuBLAS against OpenBLAS:
        # products summed in another order; bf16 storage rounds the
        # differences to its own ulp (2^-8 relative).
        # bf16: within one bf16 rounding (2^-8 relative).
        limit = 1e-5 if dtype == "f32" else 4e-3
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
    # the exchanges move device buffers through the host and the group.
    check(run_worker(2, tmp_path))

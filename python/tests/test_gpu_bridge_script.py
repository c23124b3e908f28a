"""bench/gpu/torch_bridge.py, the torch bridge's measurement for a lent GPU,
run here on CPU tensors (--device cpu): its configurations start, train the
example GPT and compare their losses with torch.optim.Muon's, so that the
script a GPU session runs once works the first time."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                      "bench", "gpu", "torch_bridge.py")


def test_the_bridge_script_runs_on_cpu(tmp_path):
    out = tmp_path / "bridge.json"
    run = subprocess.run(
        [sys.executable, SCRIPT, "--device", "cpu", "--size", "tiny",
         "--steps", "6", "--warmup", "2",
         "--configs", "torch,muonc,muonc-gloo2,muonc-nccl2",
         "--json", str(out)],
        capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    results = {r["config"]: r for r in map(json.loads, open(out))}
    assert results["muonc-nccl2"]["skipped"] == "NCCL needs GPUs"
    for name in ("muonc", "muonc-gloo2"):
        r = results[name]
        assert len(r["losses"]) == 6, r
        assert r["within_tolerance"], r
        assert r["loss_rel_max"] < 1e-3, r
    assert "agrees" in run.stdout


def test_the_bridge_script_refuses_bad_arguments():
    run = subprocess.run([sys.executable, SCRIPT, "--configs", "nope"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "unknown configuration 'nope'" in run.stderr

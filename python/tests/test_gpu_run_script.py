"""bench/gpu/run.sh, the GPU proof a lent GPU runs in one device call, and
its summary (bench/gpu/summary.py): run here as its dry run (BACKEND=cpu:
the build's tools on the CPU backend, muon-cuda-check on the fake GPU, the
bridge on CPU tensors), so that every command it issues works and every
key its summary reads is one the tools print; and the summary's verdicts
on outputs written here, one target met and one missed at a time."""
import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
RUN = os.path.join(ROOT, "bench", "gpu", "run.sh")
SUMMARY = os.path.join(ROOT, "bench", "gpu", "summary.py")
BIN = os.environ.get("MUON_BIN", os.path.join(ROOT, "build", "bin"))

# One line per target, in the summary's order (run.sh's dry run).
TARGETS = [
    "muon-cuda-check",
    "NS bf16, 1:4 shapes", "NS bf16, square shapes",
    "NS bf16, 1:4 shapes, batches", "NS bf16, square shapes, batches",
    "NS f16, 1:4 shapes", "NS f16, square shapes",
    "NS f16, 1:4 shapes, batches", "NS f16, square shapes, batches",
    "Llama-3-8B x8 step / torch.optim.Muon's",
    "bridge, 1 process: losses as torch's",
    "bridge, 1 process: opt.step() / torch's",
    "bridge, 2 processes: losses as torch's",
    "bridge, 2 processes: opt.step() / torch's",
]


def target_lines(text):
    """{target: its summary line, without the verdict} and {target: its
    verdict}, for the lines that start with a verdict."""
    lines = [l.strip().split("  ", 1) for l in text.splitlines()
             if l.strip().startswith(("PASS  ", "FAIL  ", "not run  "))]
    found, verdicts = {}, {}
    for target in TARGETS:
        match = [(v, l) for v, l in lines if l.startswith(target)]
        if match:
            verdicts[target], found[target] = match[0]
    return found, verdicts


def summarize(out, *args):
    run = subprocess.run([sys.executable, SUMMARY, str(out), *args],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_the_dry_run_issues_every_step_and_summarizes_each_target(tmp_path):
    if not os.path.exists(os.path.join(BIN, "muon-bench")):
        pytest.skip(f"no muon-bench in {BIN} (MUON_BIN: the build's tools)")
    out = tmp_path / "out"
    run = subprocess.run(
        ["bash", RUN], capture_output=True, text=True, timeout=900,
        env=dict(os.environ, BACKEND="cpu", OUT=str(out), MUON_BIN=BIN,
                 PYTHON=sys.executable, OMP_NUM_THREADS="1"))
    text = run.stdout
    assert run.returncode == 0, text + run.stderr
    # Every step ran to its end (the extras too: the dry run is quick).
    for name in ("check", "ns-bf16", "ns-bf16-batch16", "ns-bf16-standard",
                 "ns-f16", "ns-f16-batch16", "ns-f16-standard", "step-ours",
                 "step-torch", "bridge", "demo-4-host-f16", "step-ours-f16",
                 "step-ours-graphs", "step-ours-standard"):
        assert f"== {name} (at most" in text, name
    exits = [l for l in text.splitlines() if l.strip().startswith("exit ")]
    fake_gpu = os.path.exists(os.path.join(BIN, "muon-cuda-check-fakegpu"))
    # Without the CUDA toolkit there is no fake GPU: only its check fails.
    assert sum(not l.strip().startswith("exit 0 ") for l in exits) == \
        (0 if fake_gpu else 1), exits
    found, verdict = target_lines(text)
    assert sorted(found) == sorted(TARGETS), text
    for target, line in found.items():
        assert "no result" not in line, line
    assert verdict["muon-cuda-check"] == ("PASS" if fake_gpu else "FAIL")
    # The f16 rows are set against the bf16 floor, in the default form
    # (Gram on the 1:4 shapes).
    assert "gram form, bf16 floor" in found["NS f16, 1:4 shapes"], found
    # The bridge on CPU tensors agrees with torch.optim.Muon over its steps.
    for world in ("1 process", "2 processes"):
        assert verdict[f"bridge, {world}: losses as torch's"] == "PASS"
    assert "demo model, 4 ranks sharing the device, f16 Newton-Schulz: " \
        "verified True, max_abs_diff 0.0" in text, text
    assert (out / "summary.txt").exists()


def dry_run(tmp_path, **env):
    return subprocess.run(
        ["bash", RUN], capture_output=True, text=True, timeout=300,
        env=dict(os.environ, BACKEND="cpu", OUT=str(tmp_path / "out"),
                 MUON_BIN=BIN, PYTHON=sys.executable, **env))


def test_the_dry_run_checks_the_bundle(tmp_path):
    if not os.path.exists(os.path.join(BIN, "muon-run")):
        pytest.skip(f"no muon-run in {BIN} (MUON_BIN: the build's tools)")
    # A bundle as bundle.sh lays it out: the tools (here the build's
    # muon-run under each name), the packages' archive, the plans.
    bundle = tmp_path / "bundle"
    (bundle / "bin").mkdir(parents=True)
    (bundle / "plans").mkdir()
    for name in ("muon-run", "muon-bench", "muon-cuda-check"):
        shutil.copy(os.path.join(BIN, "muon-run"), bundle / "bin" / name)
    debs = tmp_path / "debs" / "usr" / "bin"
    debs.mkdir(parents=True)
    (debs / "mpirun.openmpi").write_text("")
    subprocess.run(["tar", "-C", str(tmp_path / "debs"), "-czf",
                    str(bundle / "debs.tar.gz"), "."], check=True)
    for name in ("llama3-8b-L8", "demo-4"):
        compiled = subprocess.run(
            [os.path.join(BIN, "muon-run"),
             os.path.join(ROOT, "examples", "gpt-fsdp-tp.json"), "--dry-run",
             "--quiet", "--plan", str(bundle / "plans" / f"{name}.plan.json")],
            capture_output=True, text=True, timeout=120)
        assert compiled.returncode == 0, compiled.stderr
    # No steps (ONLY names none): the bundle check and the summary alone.
    run = dry_run(tmp_path, BUNDLE=str(bundle), ONLY="none")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"== bundle: complete: {bundle}" in run.stdout, run.stdout
    assert f"0 of {len(TARGETS)} targets met, {len(TARGETS)} not run" in \
        run.stdout, run.stdout
    # Each part missing or broken is named, and the dry run fails.
    (bundle / "bin" / "muon-bench").unlink()
    (bundle / "plans" / "demo-4.plan.json").write_text("{\"version\": ")
    (bundle / "muonc.tar.xz").write_bytes(b"not an archive")
    run = dry_run(tmp_path, BUNDLE=str(bundle), ONLY="none")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "== bundle: FAIL" in run.stdout, run.stdout
    assert f"bundle {bundle}: bin/muon-bench missing or not executable" in \
        run.stdout, run.stdout
    assert f"bundle {bundle}: plans/demo-4.plan.json does not load: " in \
        run.stdout, run.stdout
    assert "bundle: muonc.tar.xz: " in run.stdout + run.stderr
    # No bundle at all: the dry run says it did not check one.
    run = dry_run(tmp_path, BUNDLE=str(tmp_path / "none"), ONLY="none")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "== bundle: not checked: no " in run.stdout, run.stdout


def write_lines(path, objects):
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))


def ns_row(shape, batch, dtype, form, ratio, floor="bf16"):
    return {"shape": shape, "batch": batch, "ns_dtype": dtype,
            "ns_form": form, "floor_dtype": floor, "ratio": ratio,
            "ratio_best": ratio, "ns_seconds": 1e-3}


def met_outputs(out):
    """Outputs in which every target is met."""
    out.mkdir()
    (out / "gpu.txt").write_text("name, driver\nNVIDIA H200, 580.0, 1 MiB\n")
    (out / "check.log").write_text("ok   something\n212 passed, 0 failed\n")
    for dtype in ("bf16", "f16"):
        write_lines(out / f"ns-{dtype}.log",
                    [ns_row("1024x1024", 1, dtype, "standard", 0.6),
                     ns_row("1024x4096", 1, dtype, "gram", 0.45),
                     ns_row("4096x1024", 1, dtype, "gram", 0.48)])
        write_lines(out / f"ns-{dtype}-batch16.log",
                    [ns_row("1024x4096", 16, dtype, "gram", 0.4),
                     ns_row("4096x4096", 16, dtype, "standard", 0.66)])
        write_lines(out / f"ns-{dtype}-standard.log",
                    [ns_row("1024x4096", 1, dtype, "standard", 1.4)])
    write_lines(out / "step-ours.log", [{"step_seconds": 0.15,
                                         "ns_dtype": "bf16"}])
    write_lines(out / "step-torch.log", [{"step_seconds": 0.3}])
    bridge = [{"config": "torch", "world": 1, "losses": [1.0] * 100,
               "step_ms_median": 2.0}]
    for name, world in (("muonc", 1), ("muonc-gloo2", 2)):
        bridge.append({"config": name, "world": world,
                       "losses": [1.0] * 100, "step_ms_median": 1.5,
                       "loss_rel_max": 1e-3, "within_tolerance": True,
                       "step_vs_torch": 0.75, "transport": "local",
                       "host_copies": 0})
    write_lines(out / "bridge.json", bridge)


def verdicts(text):
    return target_lines(text)[1]


def test_the_summary_passes_targets_met(tmp_path):
    met_outputs(tmp_path / "out")
    text = summarize(tmp_path / "out")
    assert "== issue 53 on NVIDIA H200, 580.0, 1 MiB" in text
    assert verdicts(text) == {t: "PASS" for t in TARGETS}, text
    assert f"{len(TARGETS)} of {len(TARGETS)} targets met" in text
    # The standard form is shown for comparison, not counted.
    assert "standard 1.400; 1.400" in text and "(for comparison)" in text


@pytest.mark.parametrize("spoil,target", [
    (lambda o: (o / "check.log").write_text("211 passed, 1 failed\n"),
     "muon-cuda-check"),
    (lambda o: write_lines(o / "ns-bf16.log", [
        ns_row("1024x1024", 1, "bf16", "standard", 0.6),
        ns_row("1024x4096", 1, "bf16", "gram", 0.51)]), "NS bf16, 1:4 shapes"),
    (lambda o: write_lines(o / "ns-f16.log", [
        ns_row("1024x1024", 1, "f16", "standard", 0.6, floor="f16"),
        ns_row("1024x4096", 1, "f16", "gram", 0.4)]), "NS f16, square shapes"),
    (lambda o: write_lines(o / "ns-f16-batch16.log", [
        ns_row("1024x4096", 16, "f16", "gram", 0.4),
        ns_row("4096x4096", 16, "f16", "standard", 0.7)]),
     "NS f16, square shapes, batches"),
    (lambda o: write_lines(o / "step-torch.log", [{"step_seconds": 0.2}]),
     "Llama-3-8B x8 step / torch.optim.Muon's"),
    (lambda o: (o / "step-ours.log").write_text("muon-bench: error\n"),
     "Llama-3-8B x8 step / torch.optim.Muon's"),
    (lambda o: (o / "ns-f16.log").write_text("Killed\n"),
     ["NS f16, 1:4 shapes", "NS f16, square shapes"]),
    (lambda o: edit_bridge(o, "muonc", within_tolerance=False),
     "bridge, 1 process: losses as torch's"),
    (lambda o: edit_bridge(o, "muonc-gloo2", losses=[1.0] * 99),
     "bridge, 2 processes: losses as torch's"),
    (lambda o: edit_bridge(o, "muonc-gloo2", step_vs_torch=1.25),
     "bridge, 2 processes: opt.step() / torch's"),
])
def test_the_summary_fails_each_target_missed(tmp_path, spoil, target):
    out = tmp_path / "out"
    met_outputs(out)
    spoil(out)
    got = verdicts(summarize(out))
    targets = target if isinstance(target, list) else [target]
    assert [t for t, v in got.items() if v == "FAIL"] == targets, got


def test_a_configuration_that_failed_fails_both_its_targets(tmp_path):
    out = tmp_path / "out"
    met_outputs(out)
    edit_bridge(out, "muonc-gloo2", failed="rank 1 exited 1")
    text = summarize(out)
    got = verdicts(text)
    assert [t for t, v in got.items() if v == "FAIL"] == [
        "bridge, 2 processes: losses as torch's",
        "bridge, 2 processes: opt.step() / torch's"], got
    assert "failed: rank 1 exited 1" in text


def edit_bridge(out, config, **changes):
    """bridge.json with `config`'s result changed (failed=...: what
    torch_bridge.py writes for a configuration that failed)."""
    rows = [json.loads(l) for l in
            (out / "bridge.json").read_text().splitlines() if l]
    for r in rows:
        if r["config"] == config:
            if "failed" in changes:
                r.clear()
                r["config"] = config
            r.update(changes)
    write_lines(out / "bridge.json", rows)


def test_targets_whose_steps_did_not_run_are_not_run(tmp_path):
    # Nothing ran: every target "not run", none PASS, none FAIL.
    out = tmp_path / "empty"
    out.mkdir()
    text = summarize(out)
    assert verdicts(text) == {t: "not run" for t in TARGETS}, text
    assert f"0 of {len(TARGETS)} targets met, {len(TARGETS)} not run" in text
    # A subset ran (ONLY="check step-ours"): the others are not run, even
    # where a step that did run gave half a measurement.
    out = tmp_path / "some"
    met_outputs(out)
    for name in ("ns-bf16.log", "ns-f16.log", "ns-bf16-batch16.log",
                 "ns-f16-batch16.log", "step-torch.log", "bridge.json"):
        (out / name).unlink()
    got = verdicts(summarize(out))
    assert [t for t, v in got.items() if v != "not run"] == [
        "muon-cuda-check"], got
    assert got["muon-cuda-check"] == "PASS"
    # A bridge configuration skipped for want of muonc is not run.
    out = tmp_path / "skipped"
    met_outputs(out)
    write_lines(out / "bridge.json", [
        {"config": "muonc", "skipped": "the bundle has no muonc"},
        {"config": "muonc-gloo2", "skipped": "the bundle has no muonc"}])
    text = summarize(out)
    got = verdicts(text)
    assert {t: v for t, v in got.items() if t.startswith("bridge")} == {
        t: "not run" for t in TARGETS if t.startswith("bridge")}, text
    assert "not run (muonc skipped: the bundle has no muonc)" in text


def test_a_bridge_of_fewer_steps_fails(tmp_path):
    out = tmp_path / "out"
    met_outputs(out)
    got = verdicts(summarize(out, "--bridge-steps", "200"))
    assert got["bridge, 1 process: losses as torch's"] == "FAIL"
    assert got["bridge, 2 processes: losses as torch's"] == "FAIL"


def test_the_summary_refuses_a_missing_directory(tmp_path):
    run = subprocess.run([sys.executable, SUMMARY, str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "is not a directory" in run.stderr
    assert shutil.which("bash")  # run.sh's shell, on every test machine

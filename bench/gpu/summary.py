#!/usr/bin/env python3
"""summary.py OUT [--bridge-steps N]: issue 53's targets, each PASS or FAIL,
from what bench/gpu/run.sh left in OUT (the tools' own output: muon-cuda-check's
last line, muon-bench's JSON lines, torch_muon_step.py's and
torch_bridge.py's JSON). A target whose step left no output (skipped, not
in ONLY, out of time) is "not run", never PASS; one whose step ran but left
no measurement is FAIL, with what is missing. Prints the table, then every
Newton-Schulz measurement.

Targets (issue 53):
  - muon-cuda-check: every check passes
  - Newton-Schulz (the default form, batch 1 and batches of 16; bf16, and
    f16 against the same bf16 floor) at most 0.5x the dense bf16 GEMM floor
    on the 1:4 shapes, at most 0.67x on squares (the median pair's ratio,
    `ratio`)
  - the Llama-3-8B 8-layer step at most 0.6x torch.optim.Muon's (medians)
  - the torch bridge on CUDA tensors (1 process, 2 processes): losses
    equal to torch.optim.Muon's within the bridge's tolerance at every one
    of N steps (100), and opt.step() faster than torch.optim.Muon's
Exit status 0 when the outputs could be read (whatever the verdicts), 2 on
a bad argument."""
import argparse
import json
import os
import re
import sys

# The limits on NS / dense bf16 GEMM floor, by shape class.
NS_LIMITS = {"1:4": 0.5, "square": 0.67}
STEP_LIMIT = 0.6
# The Newton-Schulz logs run.sh writes: (file, precision, form, what).
NS_LOGS = [
    ("ns-bf16.log", "bf16", "auto", "target"),
    ("ns-f16.log", "f16", "auto", "target"),
    ("ns-bf16-batch16.log", "bf16", "auto", "target"),
    ("ns-f16-batch16.log", "f16", "auto", "target"),
    ("ns-bf16-standard.log", "bf16", "standard", "comparison"),
    ("ns-f16-standard.log", "f16", "standard", "comparison"),
]


def json_lines(out, name):
    """The JSON objects of OUT/name, one per line (other lines skipped)."""
    try:
        with open(os.path.join(out, name)) as f:
            lines = [line for line in f if line.startswith("{")]
    except OSError:
        return []
    objects = []
    for line in lines:
        try:
            objects.append(json.loads(line))
        except ValueError:
            pass
    return objects


def world_of(result):
    """The processes of a bridge configuration (a failed one's result holds
    only its name: the 2-process ones end in 2)."""
    return result.get("world") or (2 if result["config"].endswith("2")
                                   else 1)


def shape_class(shape):
    rows, cols = map(int, shape.split("x"))
    if rows == cols:
        return "square"
    if max(rows, cols) == 4 * min(rows, cols):
        return "1:4"
    return None


class Table:
    def __init__(self):
        self.rows = []

    def add(self, what, measured, limit, ok):
        """ok: True, False, or None for a target whose step did not run."""
        verdict = "not run" if ok is None else "PASS" if ok else "FAIL"
        self.rows.append((what, measured, limit, verdict))

    def print(self):
        """One line per target: the verdict, what, the measurement and the
        target's limit."""
        for what, measured, limit, verdict in self.rows:
            print(f"  {verdict}  {what}: {measured} (target {limit})")
        met = sum(r[3] == "PASS" for r in self.rows)
        not_run = sum(r[3] == "not run" for r in self.rows)
        print(f"  {met} of {len(self.rows)} targets met" +
              (f", {not_run} not run" if not_run else ""))


def ran(out, name):
    """Whether run.sh's step left its output `name` in OUT."""
    return os.path.exists(os.path.join(out, name))


def check_target(table, out):
    if not ran(out, "check.log"):
        table.add("muon-cuda-check", "not run (no check.log)", "0 failed",
                  None)
        return
    with open(os.path.join(out, "check.log"), errors="replace") as f:
        text = f.read()
    found = re.findall(r"^(\d+) passed, (\d+) failed$", text, re.M)
    if not found:
        table.add("muon-cuda-check", "no result (check.log)", "0 failed",
                  False)
        return
    passed, failed = map(int, found[-1])
    table.add("muon-cuda-check", f"{passed} passed, {failed} failed",
              "0 failed", failed == 0 and passed > 0)


def ns_targets(table, out):
    """One target per (precision, batch, shape class) of the default form:
    its worst shape. Returns every measurement for the details."""
    measured = []
    for name, precision, form, what in NS_LOGS:
        for r in json_lines(out, name):
            measured.append(dict(r, log=name, what=what))
    for precision in ("bf16", "f16"):
        for batched in (False, True):
            for cls, limit in NS_LIMITS.items():
                rows = [r for r in measured if r["what"] == "target" and
                        r["ns_dtype"] == precision and
                        (r["batch"] > 1) == batched and
                        shape_class(r["shape"]) == cls]
                label = (f"NS {precision}, {cls} shapes" +
                         (", batches" if batched else ""))
                if not rows:
                    logs = [n for n, p, _, w in NS_LOGS if p == precision
                            and w == "target" and ("batch" in n) == batched]
                    if not any(ran(out, n) for n in logs):
                        table.add(label, f"not run (no {logs[0]})",
                                  f"<= {limit}", None)
                    else:
                        table.add(label, f"no result in {logs[0]}",
                                  f"<= {limit}", False)
                    continue
                worst = max(rows, key=lambda r: r["ratio"])
                floors = sorted({r.get("floor_dtype", "?") for r in rows})
                measured_text = (f"{worst['ratio']:.3f} ({worst['shape']} x "
                                 f"{worst['batch']}, {worst['ns_form']} "
                                 f"form, {'/'.join(floors)} floor)")
                ok = all(r["ratio"] <= limit and
                         r.get("floor_dtype") == "bf16" for r in rows)
                table.add(label, measured_text, f"<= {limit}", ok)
    return measured


def step_target(table, out):
    ours = json_lines(out, "step-ours.log")
    torch_step = json_lines(out, "step-torch.log")
    label = "Llama-3-8B x8 step / torch.optim.Muon's"
    if not ours or not torch_step:
        logs = ("step-ours.log", "step-torch.log")
        missing = [n for n, r in zip(logs, (ours, torch_step)) if not r]
        not_run = [n for n in missing if not ran(out, n)]
        if not_run:
            table.add(label, "not run (no " + ", ".join(not_run) + ")",
                      f"<= {STEP_LIMIT}", None)
        else:
            table.add(label, "no result in " + ", ".join(missing),
                      f"<= {STEP_LIMIT}", False)
        return
    mine = ours[-1]["step_seconds"]
    theirs = torch_step[-1]["step_seconds"]
    ratio = mine / theirs
    table.add(label, f"{ratio:.3f} ({mine * 1e3:.1f} / {theirs * 1e3:.1f} ms,"
              f" {ours[-1]['ns_dtype']} NS)", f"<= {STEP_LIMIT}",
              ratio <= STEP_LIMIT)


def bridge_targets(table, out, steps):
    """Two targets per world size (1 process, 2 processes): the losses and
    the step time of the muonc configuration that ran with it."""
    results = json_lines(out, "bridge.json")
    for world in (1, 2):
        done = [r for r in results if r.get("config", "").startswith("muonc")
               and "skipped" not in r and world_of(r) == world]
        label = f"bridge, {world} process{'es' if world > 1 else ''}"
        if not done:
            # Skipped (no muonc in the bundle) or no bridge.json: not run.
            why = next((f"{r['config']} skipped: {r['skipped']}"
                        for r in results if "skipped" in r and
                        world_of(r) == world), "no bridge.json")
            table.add(f"{label}: losses as torch's", f"not run ({why})",
                      f"{steps} steps within tolerance", None)
            table.add(f"{label}: opt.step() / torch's", "not run", "< 1.0",
                      None)
            continue
        for r in done:
            name = r["config"]
            if "losses" not in r:
                table.add(f"{label}: losses as torch's ({name})",
                          f"failed: {r.get('failed')}",
                          f"{steps} steps within tolerance", False)
                table.add(f"{label}: opt.step() / torch's ({name})",
                          "failed", "< 1.0", False)
                continue
            where = f"{name}, {r.get('transport')}, " \
                    f"{r.get('host_copies')} host copies"
            agrees = r.get("within_tolerance") is True and \
                len(r["losses"]) == steps
            table.add(f"{label}: losses as torch's ({where})",
                      f"max rel diff {r.get('loss_rel_max', float('nan')):.2e}"
                      f" over {len(r['losses'])} steps",
                      f"{steps} steps within tolerance", agrees)
            vs = r.get("step_vs_torch")
            table.add(f"{label}: opt.step() / torch's ({name})",
                      "no torch reference" if vs is None else
                      f"{vs:.3f} ({r['step_ms_median']:.3f} ms)", "< 1.0",
                      vs is not None and vs < 1.0)


def print_details(measured):
    if not measured:
        return
    print("  Newton-Schulz / dense bf16 GEMM floor (median pair; best):")
    for r in measured:
        cls = shape_class(r["shape"])
        limit = NS_LIMITS.get(cls)
        verdict = "" if limit is None else (
            "within" if r["ratio"] <= limit else "above") + f" {limit}"
        print(f"    {r['ns_dtype']:<4} {r['shape']:>11} x {r['batch']:<2} "
              f"{r['ns_form']:<8} {r['ratio']:.3f}; {r['ratio_best']:.3f}  "
              f"{r['ns_seconds'] * 1e3:9.3f} ms  floor in "
              f"{r.get('floor_dtype', '?')}  {verdict}"
              f"{'' if r['what'] == 'target' else '  (for comparison)'}")


def print_extras(out):
    """What run.sh measured beyond the targets, where it had the time."""
    torch_step = json_lines(out, "step-torch.log")
    for name, what in (("step-ours-f16", "f16 Newton-Schulz"),
                       ("step-ours-graphs", "step graphs"),
                       ("step-ours-standard", "standard form")):
        r = json_lines(out, name + ".log")
        if r and torch_step:
            print(f"  Llama-3-8B x8 step, {what}: "
                  f"{r[-1]['step_seconds'] * 1e3:.1f} ms = "
                  f"{r[-1]['step_seconds'] / torch_step[-1]['step_seconds']:.3f}"
                  " of torch.optim.Muon's")
    try:
        with open(os.path.join(out, "demo-4-host-f16.json")) as f:
            report = json.load(f)
        print(f"  demo model, 4 ranks sharing the device, f16 Newton-Schulz: "
              f"verified {report.get('verified')}, max_abs_diff "
              f"{report.get('max_abs_diff')}")
    except (OSError, ValueError):
        pass


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", help="the directory run.sh wrote")
    p.add_argument("--bridge-steps", type=int, default=100,
                   help="steps every bridge configuration must have run")
    args = p.parse_args(argv)
    if not os.path.isdir(args.out):
        p.error(f"{args.out} is not a directory")
    gpu = "?"
    try:
        with open(os.path.join(args.out, "gpu.txt")) as f:
            gpu = f.read().strip().splitlines()[-1]
    except (OSError, IndexError):
        pass
    print(f"== issue 53 on {gpu}")
    if "dry run" in gpu:
        # run.sh's BACKEND=cpu: measured on the CPU with small shapes.
        print("  (dry run: the CPU's verdicts, which check the script and "
              "the summary's keys, not issue 53's targets)")
    table = Table()
    check_target(table, args.out)
    measured = ns_targets(table, args.out)
    step_target(table, args.out)
    bridge_targets(table, args.out, args.bridge_steps)
    table.print()
    print_details(measured)
    print_extras(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

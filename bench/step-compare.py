#!/usr/bin/env python3
"""step-compare.py: the project's optimizer step against other Muon
implementations on the same model and ranks, interleaved in rounds.

    python3 bench/step-compare.py [SPEC] [--ranks 2] [--steps 4] [--rounds 5]
        [--muon-run build/bin/muon-run] [--python /work/venv-bench/bin/python]
        [--muonc-python build/venv/bin/python] [--baseline NAME]
        [--extra NAME=COMMAND ...] [--json]

SPEC defaults to bench/specs/gpt2-small-4layer-fsdp2.json (issue 11's 4
GPT-2-small layers, FSDP over 2 ranks). Each round runs, one after another:
  - `ours`:     muon-run SPEC as it runs by default (ns_dtype auto: bf16
                Newton-Schulz where the CPU has bf16 products, the wire
                following it; ns_form auto: bf16 on wide and tall matrices
                in its Gram form);
  - `ours standard`: the same with --ns-form standard (every bf16 step as
                torch.optim.Muon runs it);
  - `ours f32`: the same with --ns-dtype f32 (f32 Newton-Schulz, f32 wire;
                ns_form auto: its Gram form on wide and tall matrices);
  - `ours f32 standard`: and with --ns-form standard (torch's f32
                iteration);
  - `torch DDP`: torch.optim.Muon as it runs under DDP (every rank
                orthogonalizes every matrix, bf16; bench/torch_muon_ddp.py),
                when --python has torch;
  - with --muonc-python (an interpreter with torch and muonc, `make
                python`'s build/venv/bin/python): muonc.torch.Muon in a
                torch FSDP2 process group (bench/muonc_torch_fsdp2.py):
                `muonc.torch`, its default on the CPU (f32, ns_form auto),
                the same plan as `ours f32`; `muonc.torch f32 standard`,
                its earlier default; `muonc.torch bf16` (torch's
                precision, a bf16 wire), the same plan as `ours`; and
                `muonc.torch mpi`: the default with its exchanges through
                MPI under mpirun, as muon-run's (against `ours f32`, the
                Python layer's overhead);
  - every --extra NAME=COMMAND: any command that prints, last, a JSON line
                with `step_seconds` (its median step) and `bytes_received`
                (bytes all ranks receive in a step), such as another
                library's step on the same shapes.
Each run reports its median step after a warm-up step; the table gives the
median over the rounds of those medians (and the best; in --json also the
fastest single step of any round, `fastest_step`), the MB received per
step, and ours / each (--baseline NAME: that row instead of `ours`). Not part of `make check`.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("spec", nargs="?",
                    default=os.path.join(here, "specs", "gpt2-small-4layer-fsdp2.json"))
parser.add_argument("--ranks", type=int, default=2)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--muon-run", default=os.path.join(here, "..", "build", "bin", "muon-run"))
parser.add_argument("--python", default=sys.executable,
                    help="the interpreter with torch for the torch DDP run ('' to skip it)")
parser.add_argument("--muonc-python", default="",
                    help="an interpreter with torch and muonc: adds the muonc.torch runs")
parser.add_argument("--baseline", default="ours",
                    help="the row the ratios are taken against")
parser.add_argument("--extra", action="append", default=[], metavar="NAME=COMMAND")
parser.add_argument("--json", action="store_true")
args = parser.parse_args()


def muon_run(flags):
    def run():
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "report.json")
            subprocess.run([args.muon_run, args.spec, "--ranks", str(args.ranks),
                            "--steps", str(args.steps), "--quiet", "--report",
                            report] + flags, check=True)
            r = json.load(open(report))
            return {"step_seconds": r["step_seconds"]["median"],
                    "step_seconds_min": r["step_seconds"]["min"],
                    "bytes_received": r["total"]["bytes_received"],
                    "note": f"ns {r['ns_dtype']}, wire {r['wire_dtype']}, form "
                            + (flags[flags.index("--ns-form") + 1]
                               if "--ns-form" in flags else "auto")}
    return run


def command(argv):
    def run():
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        return {"step_seconds": r["step_seconds"],
                "step_seconds_min": r.get("step_seconds_min", r["step_seconds"]),
                "bytes_received": r.get("bytes_received", 0),
                "note": r.get("note", "")}
    return run


configs = [("ours", muon_run([])),
           ("ours standard", muon_run(["--ns-form", "standard"])),
           ("ours f32", muon_run(["--ns-dtype", "f32"])),
           ("ours f32 standard", muon_run(["--ns-dtype", "f32", "--ns-form",
                                           "standard"]))]
if args.python:
    configs.append(("torch DDP", command(
        [args.python, os.path.join(here, "torch_muon_ddp.py"), args.spec,
         "--ranks", str(args.ranks), "--steps", str(args.steps)])))
if args.muonc_python:
    # muonc.torch's default on the CPU (f32, ns_form auto: the Gram form on
    # wide and tall matrices), its earlier default (f32, standard form),
    # torch's precision (bf16, with a bf16 wire as muon-run's "ours"), and
    # the default with MPI's exchanges (against "ours f32": the Python
    # layer's overhead).
    for name, dtype, comm, form in (
            ("muonc.torch", "f32", "torch", "auto"),
            ("muonc.torch f32 standard", "f32", "torch", "standard"),
            ("muonc.torch bf16", "bf16", "torch", "auto"),
            ("muonc.torch mpi", "f32", "mpi", "auto")):
        configs.append((name, command(
            [args.muonc_python, os.path.join(here, "muonc_torch_fsdp2.py"),
             args.spec, "--ranks", str(args.ranks), "--steps", str(args.steps),
             "--ns-dtype", dtype, "--communicator", comm, "--ns-form", form])))
for extra in args.extra:
    name, _, cmd = extra.partition("=")
    configs.append((name, command(shlex.split(cmd))))

results = {name: [] for name, _ in configs}
notes = {}
for round_ in range(args.rounds):
    for name, run in configs:
        r = run()
        results[name].append(r)
        notes[name] = r["note"]
        print(f"round {round_ + 1}: {name:<16} {r['step_seconds'] * 1e3:9.1f} ms "
              f"{r['bytes_received'] / 1e6:8.1f} MB  {r['note']}",
              file=sys.stderr, flush=True)

summary = {}
for name, _ in configs:
    steps = [r["step_seconds"] for r in results[name]]
    fastest = [r["step_seconds_min"] for r in results[name]]
    summary[name] = {"median": statistics.median(steps), "best": min(steps),
                     "runs": steps, "fastest_step": min(fastest),
                     "mb_received": results[name][-1]["bytes_received"] / 1e6,
                     "note": notes[name]}
ours = summary[args.baseline]
for name in summary:
    summary[name]["ours_over_this_median"] = ours["median"] / summary[name]["median"]
    summary[name]["ours_over_this_best"] = ours["best"] / summary[name]["best"]
if args.json:
    print(json.dumps({"spec": args.spec, "ranks": args.ranks, "steps": args.steps,
                      "baseline": args.baseline,
                      "rounds": args.rounds, "results": summary}))
else:
    print(f"{os.path.basename(args.spec)}, {args.ranks} ranks, {args.rounds} "
          f"interleaved rounds of {args.steps} steps (median step of each run "
          "after a warm-up step)")
    print(f"{'':<16} {'median s':>9} {'best s':>8} {'MB/step':>8} "
          f"{args.baseline + '/this (median, best)':>25}  what")
    for name, s in summary.items():
        print(f"{name:<16} {s['median']:9.3f} {s['best']:8.3f} {s['mb_received']:8.1f} "
              f"{s['ours_over_this_median']:12.3f} {s['ours_over_this_best']:12.3f}  {s['note']}")

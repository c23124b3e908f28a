#!/usr/bin/env python3
"""step-compare.py: the project's optimizer step against other Muon
implementations on the same model and ranks, interleaved in rounds.

    python3 bench/step-compare.py [SPEC] [--ranks 2] [--steps 4] [--rounds 5]
        [--muon-run build/bin/muon-run] [--python /work/venv-bench/bin/python]
        [--extra NAME=COMMAND ...] [--json]

SPEC defaults to bench/specs/gpt2-small-4layer-fsdp2.json (issue 11's 4
GPT-2-small layers, FSDP over 2 ranks). Each round runs, one after another:
  - `ours`:     muon-run SPEC as it runs by default (ns_dtype auto: bf16
                Newton-Schulz where the CPU has bf16 products, the wire
                following it);
  - `ours f32`: the same with --ns-dtype f32 (f32 Newton-Schulz, f32 wire);
  - `torch DDP`: torch.optim.Muon as it runs under DDP (every rank
                orthogonalizes every matrix, bf16; bench/torch_muon_ddp.py),
                when --python has torch;
  - every --extra NAME=COMMAND: any command that prints, last, a JSON line
                with `step_seconds` (its median step) and `bytes_received`
                (bytes all ranks receive in a step), such as another
                library's step on the same shapes.
Each run reports its median step after a warm-up step; the table gives the
median over the rounds of those medians (and the best), the MB received per
step, and ours / each. Not part of `make check`.
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
                    "bytes_received": r["total"]["bytes_received"],
                    "note": f"ns {r['ns_dtype']}, wire {r['wire_dtype']}"}
    return run


def command(argv):
    def run():
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        return {"step_seconds": r["step_seconds"],
                "bytes_received": r.get("bytes_received", 0),
                "note": r.get("note", "")}
    return run


configs = [("ours", muon_run([])), ("ours f32", muon_run(["--ns-dtype", "f32"]))]
if args.python:
    configs.append(("torch DDP", command(
        [args.python, os.path.join(here, "torch_muon_ddp.py"), args.spec,
         "--ranks", str(args.ranks), "--steps", str(args.steps)])))
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
        print(f"round {round_ + 1}: {name:<12} {r['step_seconds'] * 1e3:9.1f} ms "
              f"{r['bytes_received'] / 1e6:8.1f} MB  {r['note']}",
              file=sys.stderr, flush=True)

summary = {}
for name, _ in configs:
    steps = [r["step_seconds"] for r in results[name]]
    summary[name] = {"median": statistics.median(steps), "best": min(steps),
                     "runs": steps,
                     "mb_received": results[name][-1]["bytes_received"] / 1e6,
                     "note": notes[name]}
ours = summary["ours"]
for name in summary:
    summary[name]["ours_over_this_median"] = ours["median"] / summary[name]["median"]
    summary[name]["ours_over_this_best"] = ours["best"] / summary[name]["best"]
if args.json:
    print(json.dumps({"spec": args.spec, "ranks": args.ranks, "steps": args.steps,
                      "rounds": args.rounds, "results": summary}))
else:
    print(f"{os.path.basename(args.spec)}, {args.ranks} ranks, {args.rounds} "
          f"interleaved rounds of {args.steps} steps (median step of each run "
          "after a warm-up step)")
    print(f"{'':<12} {'median s':>9} {'best s':>8} {'MB/step':>8} "
          f"{'ours/this (median, best)':>25}  what")
    for name, s in summary.items():
        print(f"{name:<12} {s['median']:9.3f} {s['best']:8.3f} {s['mb_received']:8.1f} "
              f"{s['ours_over_this_median']:12.3f} {s['ours_over_this_best']:12.3f}  {s['note']}")

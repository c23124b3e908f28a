#!/usr/bin/env python3
"""check-report.py REPORT [--makespan-tolerance T] [--adamw-reduce]
                          [--verified] [--exact] [--steps K]

Checks a muon-report/1 file against its own lower bounds: total bytes
received equal lower_bound.bytes_received exactly, every rank's bytes add up
to the total, and (with a tolerance) the busiest rank's ns_flops is within
(1 + T) of lower_bound.makespan_flops. Prints one line per check; exits 1 if
any fails.

The bound counts Muon matrices only, while the report's bytes also count the
AdamW reduce: with --adamw-reduce (models with partial AdamW gradients) the
bytes must exceed the bound instead of equalling it.

For real runs: --verified requires "verified": true, measured step times
and every rank's peak optimizer working memory within the plan's bound
(peak_working_bytes <= working_bytes_bound); --exact also requires
max_abs_diff == 0 (bit-exact); --steps K the number of steps.
"""
import json
import sys


def main():
    args = sys.argv[1:]
    tolerance = None
    if "--makespan-tolerance" in args:
        i = args.index("--makespan-tolerance")
        tolerance = float(args[i + 1])
        del args[i:i + 2]
    flags = {}
    for flag in ("--adamw-reduce", "--verified", "--exact"):
        flags[flag] = flag in args
        if flag in args:
            args.remove(flag)
    steps = None
    if "--steps" in args:
        i = args.index("--steps")
        steps = int(args[i + 1])
        del args[i:i + 2]
    report = json.load(open(args[0]))
    received = sum(r["bytes_received"] for r in report["per_rank"])
    sent = sum(r["bytes_sent"] for r in report["per_rank"])
    bound = report["lower_bound"]["bytes_received"]
    ok = True
    print(f"bytes_received {received} lower_bound {bound}")
    ok &= received == report["total"]["bytes_received"] == sent
    if flags["--adamw-reduce"]:
        ok &= received > bound
    else:
        ok &= received == bound
    if flags["--verified"] or flags["--exact"]:
        print(f"verified {report['verified']} max_abs_diff {report['max_abs_diff']}")
        ok &= report["verified"] is True
        ok &= report["step_seconds"] is not None
        ok &= all(r["seconds"]["median"] is not None for r in report["per_rank"])
        ranks = report["per_rank"]
        within = [0 < r["peak_working_bytes"] <= r["working_bytes_bound"]
                  for r in ranks]
        worst = max(r["peak_working_bytes"] / r["working_bytes_bound"]
                    for r in ranks)
        print(f"working memory within its bound on {sum(within)} of "
              f"{len(ranks)} ranks (largest peak/bound {worst:.3f})")
        ok &= all(within)
    if flags["--exact"]:
        ok &= report["max_abs_diff"] == 0
    if steps is not None:
        print(f"steps {report['steps']}")
        ok &= report["steps"] == steps
    if tolerance is not None:
        busiest = max(r["ns_flops"] for r in report["per_rank"])
        makespan = report["lower_bound"]["makespan_flops"]
        ratio = busiest / makespan if makespan else 1.0
        print(f"busiest/makespan {ratio:.4f} (tolerance {1 + tolerance:.2f})")
        ok &= ratio <= 1 + tolerance
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""check-report.py REPORT [--makespan-tolerance T]

Checks a muon-report/1 file against its own lower bounds: total bytes
received equal lower_bound.bytes_received exactly, every rank's bytes add up
to the total, and (with a tolerance) the busiest rank's ns_flops is within
(1 + T) of lower_bound.makespan_flops. Prints one line per check; exits 1 on
the first failure.

The bound counts Muon matrices only, while the report's bytes also count the
AdamW reduce, so this check is for models without AdamW parameters that have
partial gradients (all of ../shared/models).
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
    report = json.load(open(args[0]))
    received = sum(r["bytes_received"] for r in report["per_rank"])
    sent = sum(r["bytes_sent"] for r in report["per_rank"])
    bound = report["lower_bound"]["bytes_received"]
    ok = True
    print(f"bytes_received {received} lower_bound {bound}")
    ok &= received == bound == report["total"]["bytes_received"] == sent
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

#!/usr/bin/env python3
"""check-heads.py HEADS_REPORT WHOLE_REPORT PARAM...

Owners and balance of per-head Newton-Schulz, from two muon-report/1 dry
runs of one model: HEADS_REPORT with `num_heads` on PARAMs, WHOLE_REPORT
without. Prints, for each PARAM, how many heads it has and on how many ranks
they are owned; then the busiest rank's NS flops against the per-head
model's makespan bound and against the whole-block model's. Exits 1 unless
every PARAM's heads are owned by more than one rank (when it has more heads
than one and there is more than one rank), the busiest rank is within
--tolerance T (default 0.05) of the per-head bound, and at most the
whole-block bound (cutting matrices into heads never makes the step's
slowest rank slower than the bound of the uncut model).
"""
import json
import re
import sys


def main():
    args = sys.argv[1:]
    tolerance = 0.05
    if "--tolerance" in args:
        i = args.index("--tolerance")
        tolerance = float(args[i + 1])
        del args[i:i + 2]
    heads, whole = (json.load(open(a)) for a in args[:2])
    ok = True
    ranks = heads["per_rank"]
    for param in args[2:]:
        owners = {}
        for r in ranks:
            for name in r["owned"]:
                m = re.fullmatch(re.escape(param) + r"\[(\d+)\]", name)
                if m:
                    owners[int(m.group(1))] = r["rank"]
        spread = len(set(owners.values()))
        print(f"{param}: {len(owners)} heads owned by {spread} ranks")
        ok &= len(owners) > 0 and sorted(owners) == list(range(len(owners)))
        if len(owners) > 1 and len(ranks) > 1:
            ok &= spread > 1
    busiest = max(r["ns_flops"] for r in ranks)
    bound = heads["lower_bound"]["makespan_flops"]
    whole_bound = whole["lower_bound"]["makespan_flops"]
    print(f"busiest {busiest} per-head makespan bound {bound} "
          f"ratio {busiest / bound:.4f} (tolerance {1 + tolerance:.2f})")
    print(f"whole-block makespan bound {whole_bound} "
          f"busiest/whole {busiest / whole_bound:.4f}")
    ok &= busiest <= (1 + tolerance) * bound and busiest <= whole_bound
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""compare-losses FILE... [--tolerance T] [--falls-by F]: the "step N/M  loss
X" lines of trainer logs must list the same steps with losses within a
relative T (default 1e-5) of the first file's, and the first file's loss
must fall to at most F (default 0.6) times its first value. Prints one line
per file."""
import re
import sys

args = sys.argv[1:]
tolerance, falls_by = 1e-5, 0.6
if "--tolerance" in args:
    i = args.index("--tolerance")
    tolerance = float(args[i + 1])
    del args[i:i + 2]
if "--falls-by" in args:
    i = args.index("--falls-by")
    falls_by = float(args[i + 1])
    del args[i:i + 2]


def losses(path):
    out = {}
    for line in open(path):
        m = re.match(r"step (\d+)/\d+\s+loss (\S+)", line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


base = losses(args[0])
if not base:
    sys.exit(f"compare-losses: no losses in {args[0]}")
steps = sorted(base)
first, last = base[steps[0]], base[steps[-1]]
ok = last <= falls_by * first
print(f"{args[0].split('/')[-1]}: {len(steps)} losses, {first:.6f} -> "
      f"{last:.6f} ({'falls' if ok else 'DOES NOT FALL'})")
for path in args[1:]:
    other = losses(path)
    if sorted(other) != steps:
        print(f"{path.split('/')[-1]}: other steps {sorted(other)}")
        ok = False
        continue
    worst = max(abs(other[s] - base[s]) / abs(base[s]) for s in steps)
    good = worst <= tolerance
    ok &= good
    print(f"{path.split('/')[-1]}: largest relative difference {worst:.3e} "
          f"({'within' if good else 'ABOVE'} {tolerance:g})")
sys.exit(0 if ok else 1)

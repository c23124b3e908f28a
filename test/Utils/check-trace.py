#!/usr/bin/env python3
"""Checks a muon-run --trace file against the plan it ran.

  check-trace.py TRACE PLAN [--source measured|simulated] [--min-step S]

The trace must be Chrome trace JSON ("traceEvents") with, for every rank of
the plan, exactly one "X" event per exchange (on a lane >= 1), one per NS
batch of the rank (shape and round as in ranks[r].ns_batches), momentum,
AdamW and one update per round (on lane 0); events of one lane must not
overlap (each lane is sequential), and each rank's events must follow the
schedule: momentum first, NS r after gather r is done and before scatter r
starts, update r after scatter r is done, AdamW last. Prints one line per
problem and exits 1 if there is any.
"""
import argparse
import collections
import json
import sys

EPS = 0.01  # microseconds: the writer rounds nothing, JSON doubles do


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("plan")
    ap.add_argument("--source", choices=["measured", "simulated"])
    args = ap.parse_args()
    problems = []

    def bad(msg):
        problems.append(msg)

    with open(args.trace) as f:
        trace = json.load(f)
    with open(args.plan) as f:
        plan = json.load(f)
    world = plan["world_size"]
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        print("trace: no traceEvents array")
        return 1
    other = trace.get("otherData", {})
    if other.get("format") != "muon-trace/1":
        bad("otherData.format is not muon-trace/1")
    if args.source and not str(other.get("source", "")).startswith(args.source):
        bad(f"otherData.source is {other.get('source')!r}, expected {args.source}")

    events = collections.defaultdict(list)  # rank -> X events
    for i, e in enumerate(trace["traceEvents"]):
        if e.get("ph") == "M":
            continue
        if e.get("ph") != "X":
            bad(f"traceEvents[{i}]: ph {e.get('ph')!r}, expected X or M")
            continue
        for k, t in (("name", str), ("pid", int), ("tid", int)):
            if not isinstance(e.get(k), t):
                bad(f"traceEvents[{i}]: {k} missing or not {t.__name__}")
        for k in ("ts", "dur"):
            if not isinstance(e.get(k), (int, float)) or e[k] < 0:
                bad(f"traceEvents[{i}]: {k} missing or negative")
        if not 0 <= e.get("pid", -1) < world:
            bad(f"traceEvents[{i}]: pid {e.get('pid')} is not a rank")
            continue
        events[e["pid"]].append(e)

    exchanges = plan["exchanges"]
    rounds = len(plan["rounds"])
    reduce = [i for i, x in enumerate(exchanges) if x["phase"] == "reduce"]
    for r in range(world):
        evs = events.get(r, [])
        if not evs:
            bad(f"rank {r}: no events")
            continue
        end = lambda e: e["ts"] + e["dur"]
        # Each lane is sequential.
        lanes = collections.defaultdict(list)
        for e in evs:
            lanes[e["tid"]].append(e)
        for tid, lane in lanes.items():
            lane.sort(key=lambda e: e["ts"])
            for a, b in zip(lane, lane[1:]):
                if b["ts"] < end(a) - EPS:
                    bad(f"rank {r} lane {tid}: '{b['name']}' starts before "
                        f"'{a['name']}' ends")
        # Exactly the plan's exchanges, once each, off the compute lane.
        ex = {}
        for e in evs:
            if e.get("cat") == "exchange":
                idx = e["args"]["exchange"]
                if idx in ex:
                    bad(f"rank {r}: exchange {idx} twice")
                ex[idx] = e
                if e["tid"] < 1:
                    bad(f"rank {r}: exchange {idx} on the compute lane")
        if sorted(ex) != list(range(len(exchanges))):
            bad(f"rank {r}: exchanges {sorted(ex)}, expected 0..{len(exchanges) - 1}")
        # Exactly the rank's NS batches.
        ns = [e for e in evs if e.get("cat") == "ns"]
        got = sorted((e["args"]["round"], e["args"]["rows"], e["args"]["cols"],
                      e["args"]["matrices"]) for e in ns)
        want = sorted((b["round"], b["rows"], b["cols"], len(b["matrices"]))
                      for b in plan["ranks"][r]["ns_batches"])
        if got != want:
            bad(f"rank {r}: NS batches {got}, expected {want}")
        elem = collections.Counter(e["name"] for e in evs
                                   if e.get("cat") == "elementwise")
        want_elem = collections.Counter(["momentum", "adamw"] +
                                        [f"apply round {k}" for k in range(rounds)])
        if elem != want_elem:
            bad(f"rank {r}: elementwise steps {dict(elem)}, expected {dict(want_elem)}")
        if any(e["tid"] != 0 for e in evs if e.get("cat") != "exchange"):
            bad(f"rank {r}: compute off lane 0")
        if problems:
            continue
        # The schedule's order.
        by = {e["name"]: e for e in evs if e.get("cat") == "elementwise"}
        first = min(e["ts"] for e in evs)
        if by["momentum"]["ts"] > first + EPS:
            bad(f"rank {r}: something starts before momentum")
        for e in ex.values():
            if e["ts"] < end(by["momentum"]) - EPS:
                bad(f"rank {r}: {e['name']} starts before momentum ends")
        for e in ns:
            k = e["args"]["round"]
            if not exchanges:  # no distributed config: nothing moves
                continue
            if e["ts"] < end(ex[2 * k]) - EPS:
                bad(f"rank {r}: '{e['name']}' before gather {k} is done")
            if ex[2 * k + 1]["ts"] < end(e) - EPS:
                bad(f"rank {r}: scatter {k} starts before '{e['name']}' ends")
        for k in range(rounds if exchanges else 0):
            if by[f"apply round {k}"]["ts"] < end(ex[2 * k + 1]) - EPS:
                bad(f"rank {r}: update {k} before scatter {k} is done")
        for i in reduce:
            if by["adamw"]["ts"] < end(ex[i]) - EPS:
                bad(f"rank {r}: adamw before the reduce is done")
    for p in problems:
        print(p)
    if not problems:
        n = sum(len(v) for v in events.values())
        print(f"trace ok: {world} ranks, {n} events, {len(exchanges)} exchanges per rank")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

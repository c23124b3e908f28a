#!/usr/bin/env python3
"""edit-json IN OUT STATEMENT: loads IN as `d`, runs the Python STATEMENT on
it and writes OUT compactly: how the tests damage a plan file one number at a
time."""
import json
import sys

src, dst, statement = sys.argv[1:4]
with open(src) as f:
    d = json.load(f)
exec(statement, {"d": d})
with open(dst, "w") as f:
    json.dump(d, f, separators=(",", ":"))
    f.write("\n")

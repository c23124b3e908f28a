#!/usr/bin/env python3
"""f16-distances.py F16 F32 BF16: three raw f32 files holding the same
Newton-Schulz run in f16, f32 and bf16. Says whether every value of the
first is an f16 value, and whether it is closer to the f32 result than the
bf16 one is (relative Frobenius distances, printed)."""
import math
import struct
import sys


def values(path):
    data = open(path, "rb").read()
    return struct.unpack(f"<{len(data) // 4}f", data)


def distance(x, reference):
    diff = sum((a - b) ** 2 for a, b in zip(x, reference))
    return math.sqrt(diff / sum(b * b for b in reference))


f16, f32, bf16 = (values(p) for p in sys.argv[1:4])
# struct's "e" format is IEEE half: an f16 value survives the round trip.
exact = all(struct.unpack("<e", struct.pack("<e", v))[0] == v for v in f16)
print("every value is an f16 value" if exact else "NOT all f16 values")
near, far = distance(f16, f32), distance(bf16, f32)
print(f"f16 against f32 {near:.2e}, bf16 against f32 {far:.2e}")
print("f16 closer to f32 than bf16" if near < far else "f16 NOT closer")

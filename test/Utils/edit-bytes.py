#!/usr/bin/env python3
"""edit-bytes IN OUT OP...: copies IN to OUT with byte-level damage, how the
tests make hostile binary plans. OPs, applied in order:
  truncate:N        keep the first N bytes (negative: drop -N from the end)
  set:OFFSET:HEX    overwrite bytes at OFFSET (negative: from the end)
  flip:OFFSET:BIT   flip bit BIT (0-7) of the byte at OFFSET (negative: from
                    the end)
  section:R:HEX     overwrite the first bytes of rank R's section (from the
                    index: its offset is at byte 64 + 24 R of the index,
                    whose own offset is the u64 at byte 64)
  u64:OFFSET:VALUE  overwrite a little-endian u64
  reseal            recompute every checksum whose section lies inside the
                    file (as muon::resealPlanBinary does): damage then
                    reaches the decoders instead of stopping at a checksum
"""
import struct
import sys


def fnv1a(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return h


def reseal(data):
    size = len(data)
    if size < 96 or data[:8] != b"MUONPLAN":
        return
    u64 = lambda at: struct.unpack_from("<Q", data, at)[0]

    def put_sum(at, offset, n):
        if offset <= size and n <= size - offset:
            struct.pack_into("<Q", data, at, fnv1a(data[offset:offset + n]))
    put_sum(72, u64(32), u64(40))
    put_sum(80, u64(48), u64(56))
    index, world = u64(64), u64(16)
    r = 0
    while r < world and index <= size and (size - index) // 24 > r:
        at = index + 24 * r
        put_sum(at + 16, u64(at), u64(at + 8))
        r += 1
    struct.pack_into("<Q", data, 88, fnv1a(data[:88]))

src, dst, ops = sys.argv[1], sys.argv[2], sys.argv[3:]
data = bytearray(open(src, "rb").read())
for op in ops:
    kind, *args = op.split(":")
    if kind == "truncate":
        n = int(args[0])
        data = data[:n] if n >= 0 else data[:len(data) + n]
    elif kind == "set":
        at = int(args[0]) % len(data)
        patch = bytes.fromhex(args[1])
        data[at:at + len(patch)] = patch
    elif kind == "flip":
        at = int(args[0]) % len(data)
        data[at] ^= 1 << int(args[1])
    elif kind == "section":
        index = struct.unpack_from("<Q", data, 64)[0]
        at = struct.unpack_from("<Q", data, index + 24 * int(args[0]))[0]
        patch = bytes.fromhex(args[1])
        data[at:at + len(patch)] = patch
    elif kind == "reseal":
        reseal(data)
    elif kind == "u64":
        struct.pack_into("<Q", data, int(args[0]), int(args[1]))
    else:
        sys.exit("edit-bytes: unknown op " + op)
open(dst, "wb").write(bytes(data))

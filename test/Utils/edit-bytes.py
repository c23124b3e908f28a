#!/usr/bin/env python3
"""edit-bytes IN OUT OP...: copies IN to OUT with byte-level damage, how the
tests make hostile binary plans. OPs, applied in order:
  truncate:N        keep the first N bytes (negative: drop -N from the end)
  set:OFFSET:HEX    overwrite bytes at OFFSET (negative: from the end)
  section:R:HEX     overwrite the first bytes of rank R's section (from the
                    index: its offset is at byte 64 + 24 R of the index,
                    whose own offset is the u64 at byte 64)
  u64:OFFSET:VALUE  overwrite a little-endian u64
"""
import struct
import sys

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
    elif kind == "section":
        index = struct.unpack_from("<Q", data, 64)[0]
        at = struct.unpack_from("<Q", data, index + 24 * int(args[0]))[0]
        patch = bytes.fromhex(args[1])
        data[at:at + len(patch)] = patch
    elif kind == "u64":
        struct.pack_into("<Q", data, int(args[0]), int(args[1]))
    else:
        sys.exit("edit-bytes: unknown op " + op)
open(dst, "wb").write(bytes(data))

#!/usr/bin/env bash
# One rank's checkpoint round trip against the disk's own rates (a
# benchmark, not a test).
#   bench/checkpoint-io.sh [build-dir] [scratch-dir] [MiB] [repeats]
# In SCRATCH-DIR (default $TMPDIR or /tmp, then muon-checkpoint-io/; it must
# be on the disk to measure), REPEATS times each (default 3), best and
# median:
#  - dd writes MiB of random bytes (from a copy in /dev/shm, so that the
#    source costs no disk time) with conv=fsync (into the page cache, then
#    flushed: what a checkpoint save does) and with oflag=direct;
#  - dd reads them back after dropping the file from the page cache
#    (iflag=nocache count=0, posix_fadvise DONTNEED; fincore checks that
#    nothing stayed resident), and with iflag=direct;
#  - muon-bench checkpoint saves and loads MiB of optimizer state (save,
#    cold load after dropping the files from the cache, warm load).
# No root needed; nothing drops the whole system's cache, and a virtual
# disk's host may still cache what the guest no longer does.
set -euo pipefail
build=${1:-build}
base=${2:-${TMPDIR:-/tmp}}
mib=${3:-1024}
repeats=${4:-3}
dir="$base/muon-checkpoint-io"
mkdir -p "$dir"
shm=/dev/shm
[ -d "$shm" ] && [ -w "$shm" ] || shm="$dir"
src=$(mktemp -p "$shm" muon-checkpoint-io-src.XXXXXX)
out=$(mktemp -d)
cleanup() { rm -rf "$src" "$out" "$dir"; }
trap cleanup EXIT
head -c $((mib << 20)) /dev/urandom >"$src"

# The seconds dd reports for a run ("... copied, 0.22 s, 1.2 GB/s").
dd_seconds() {
  LC_ALL=C dd "$@" 2>&1 >/dev/null |
    awk '/copied/ { for (i = 2; i <= NF; ++i) if ($i == "s,") print $(i - 1) }'
}
resident() { fincore --bytes --noheadings --output RES "$1" 2>/dev/null || echo "?"; }

for r in $(seq "$repeats"); do
  rm -f "$dir/dd.bin"
  echo "write-fsync $(dd_seconds if="$src" of="$dir/dd.bin" bs=16M conv=fsync)" >>"$out/dd"
  dd if="$dir/dd.bin" iflag=nocache count=0 2>/dev/null
  echo "resident $(resident "$dir/dd.bin")" >>"$out/dd"
  echo "read-cold $(dd_seconds if="$dir/dd.bin" of=/dev/null bs=16M)" >>"$out/dd"
  echo "read-direct $(dd_seconds if="$dir/dd.bin" of=/dev/null bs=16M iflag=direct)" >>"$out/dd"
  rm -f "$dir/dd.bin"
  echo "write-direct $(dd_seconds if="$src" of="$dir/dd.bin" bs=16M oflag=direct conv=fsync)" >>"$out/dd"
  rm -f "$dir/dd.bin"
done
rm -f "$src"
"$build/bin/muon-bench" checkpoint --dir "$dir/ckpt" --mib "$mib" \
  --repeats "$repeats" --json >"$out/bench.json"

python3 - "$out" "$mib" "$repeats" <<'PY'
import json, statistics, sys
out, mib, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dd = {}
for line in open(f"{out}/dd"):
    key, value = line.split()
    dd.setdefault(key, []).append(value)
gb = (mib << 20) / 1e9
bench = json.load(open(f"{out}/bench.json"))
state_gb = bench["state_bytes"] / 1e9
print(f"{mib} MiB, best and median of {repeats}; GB/s = 1e9 bytes per second\n")
print("| what | best s | median s | best GB/s | median GB/s |")
print("|---|---|---|---|---|")
def row(what, times, size):
    best, med = min(times), statistics.median(times)
    print(f"| {what} | {best:.3f} | {med:.3f} | {size / best:.2f} | {size / med:.2f} |")
row("dd write, conv=fsync", [float(t) for t in dd["write-fsync"]], gb)
row("dd write, oflag=direct", [float(t) for t in dd["write-direct"]], gb)
row("dd read, dropped from the cache", [float(t) for t in dd["read-cold"]], gb)
row("dd read, iflag=direct", [float(t) for t in dd["read-direct"]], gb)
for what, key in (("checkpoint save", "save_s"),
                  ("checkpoint load, dropped from the cache", "cold_load_s"),
                  ("checkpoint load, from the cache", "warm_load_s")):
    best, med = bench[key]["best"], bench[key]["median"]
    print(f"| {what} | {best:.3f} | {med:.3f} | {state_gb / best:.2f} | {state_gb / med:.2f} |")
print()
print(f"resident before the cold dd reads (fincore): {', '.join(dd['resident'])} bytes; "
      f"before the cold checkpoint loads (mincore): at most "
      f"{100 * bench['resident_before_cold_load']:.1f}%")
print(f"a load read {bench['bytes_read']} bytes of its rank file "
      f"({bench['files_opened']} opened) and {bench['manifest_bytes']} of manifest; "
      f"the checkpoint hashes 4 KiB chunks (FNV-1a) at {state_gb / bench['fnv1a_s']:.2f} GB/s")
PY

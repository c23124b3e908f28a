#!/usr/bin/env python3
"""replay-inputs DIR CMD... : runs CMD once per file of DIR, with '{}' in CMD
replaced by the file. Every run must end with exit code 0 or 2 (accepted or
refused with a message) within 60 s: a crash, a hang or any other code
fails, naming the input. Used for the fuzzers' regression inputs."""
import os
import subprocess
import sys

folder, command = sys.argv[1], sys.argv[2:]
files = sorted(os.listdir(folder))
bad = 0
for name in files:
    path = os.path.join(folder, name)
    argv = [path if a == "{}" else a for a in command]
    try:
        rc = subprocess.run(argv, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=60).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    if rc not in (0, 2):
        print(f"replay-inputs: {name}: {' '.join(argv)} ended with {rc}")
        bad += 1
print(f"replayed {len(files)} input(s), {bad} bad")
sys.exit(1 if bad or not files else 0)

#!/usr/bin/env python3
"""sass_loop.py -- the static size of a kernel's loop around a marker instruction: how x297 counted
the producers' step (docs/perf.md, session 84). Runs cuobjdump on a compiled object, finds the first
backward branch after the last instruction containing MARKER whose target lies at or before the
first one, and prints the loop's instruction count and its opcodes, most frequent first; with
--list also the loop's instructions other than the conversion's arithmetic.

usage: scripts/sass_loop.py OBJECT FUNCTION [MARKER] [--list]
  OBJECT    e.g. an object built as scripts/sass.sh builds one (nvcc ... -c src/cuda/X.cu -o X.o)
  FUNCTION  a substring of the mangled kernel name (_Z11ak_sdt_mainILi3ELi16ELi0ELi0E: 656, 16 heads, one list)
  MARKER    default F2FP.F16.E4M3 (the fp8 conversion)
Environment: CUOBJDUMP as in scripts/sass.sh (NVIDIA's `nvidia-cuda-cuobjdump` wheel carries one
too)."""
import collections
import os
import re
import shutil
import subprocess
import sys

args = [a for a in sys.argv[1:] if a != "--list"]
if len(args) < 2:
    sys.exit(__doc__)
obj, fn = args[0], args[1]
mark = args[2] if len(args) > 2 else "F2FP.F16.E4M3"
tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
text = subprocess.run([tool, "-sass", obj], capture_output=True, text=True, check=True).stdout
ins, on = [], False
for line in text.splitlines():
    if "Function :" in line:
        on = fn in line
        continue
    m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?);", line) if on else None
    if m:
        ins.append((int(m.group(1), 16), m.group(2).strip()))
marks = [a for a, t in ins if mark in t]
if not marks:
    sys.exit("sass_loop.py: no %s in a function matching %s" % (mark, fn))
loop = None
for a, t in ins:
    m = re.search(r"\bBRA(?:\.\S+)?\s+(?:\S+,\s*)?0x([0-9a-f]+)", t)
    if m and a > marks[-1] and int(m.group(1), 16) <= marks[0]:
        loop = (int(m.group(1), 16), a)
        break
if loop is None:
    sys.exit("sass_loop.py: no loop encloses %s" % mark)
body = [t for a, t in ins if loop[0] <= a <= loop[1]]
print("%s: loop 0x%x..0x%x, %d instructions, %d %s" % (fn, loop[0], loop[1], len(body), len(marks), mark))
ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0] for t in body)
print(" ".join("%s %d" % kv for kv in ops.most_common()))
if "--list" in sys.argv:
    for a, t in ins:
        if loop[0] <= a <= loop[1] and not re.search(r"HADD2\.F32|FMUL|F2FP", t):
            print("%x %s" % (a, t))

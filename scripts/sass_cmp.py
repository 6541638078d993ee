#!/usr/bin/env python3
"""sass_cmp.py -- how two compiled objects' kernels differ, without a device: for every kernel of A
or B (or those whose mangled name contains FILTER), the instruction counts and how many of B's
instructions differ from A's in three regions, once register numbers are taken out: the prologue
(before the first wgmma), the loops (first to last wgmma) and the epilogue (after the last).
A change meant for one region that moves another's instructions is a schedule experiment as well
(docs/perf.md, session 90: x317 removed never-run epilogue code and ptxas rewrote the loop). A
kernel identical to the instruction, registers and constants included, is marked "same".

usage: scripts/sass_cmp.py A.o B.o [FILTER]
  A.o, B.o  objects compiled as scripts/sass.sh compiles one (nvcc ... -c src/cuda/X.cu -o X.o)
Environment: CUOBJDUMP as in scripts/sass.sh (it needs nvdisasm beside it or on PATH)."""
import difflib
import os
import re
import shutil
import subprocess
import sys

if len(sys.argv) < 3:
    sys.exit(__doc__)
tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"


def kernels(obj):
    text = subprocess.run([tool, "-sass", obj], capture_output=True, text=True, check=True).stdout
    out, cur = {}, None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*?);", line)
        if m and cur is not None:
            cur.append(m.group(1).strip())
    return out


def plain(ins):  # registers, predicates, barriers and branch targets out
    ins = re.sub(r"\bU?R[0-9]+\b", "R", ins)
    ins = re.sub(r"\bU?P[0-9]\b", "P", ins)
    ins = re.sub(r"\bB[0-9]+\b", "B", ins)
    return re.sub(r"(BRA|BSSY|CALL\.REL|SYNCS[^ ]*)\s+.*", r"\1", ins)


def regions(ins):
    mm = [k for k, t in enumerate(ins) if t.startswith("HGMMA") or " HGMMA" in t]
    if not mm:
        return [ins, [], []]
    return [ins[: mm[0]], ins[mm[0] : mm[-1] + 1], ins[mm[-1] + 1 :]]


def changed(a, b):  # instructions of b not matched in a
    sm = difflib.SequenceMatcher(None, [plain(t) for t in a], [plain(t) for t in b], autojunk=False)
    return len(b) - sum(bl.size for bl in sm.get_matching_blocks())


ka, kb = kernels(sys.argv[1]), kernels(sys.argv[2])
filt = sys.argv[3] if len(sys.argv) > 3 else ""
print("%-52s %6s %6s  %s" % ("kernel", "A", "B", "B's instructions changed: prologue / loops / epilogue"))
for name in sorted(set(ka) | set(kb)):
    if filt not in name:
        continue
    a, b = ka.get(name, []), kb.get(name, [])
    if a == b:
        print("%-52s %6d %6d  same" % (name[:52], len(a), len(b)))
        continue
    if not a or not b:
        print("%-52s %6d %6d  only in %s" % (name[:52], len(a), len(b), "B" if b else "A"))
        continue
    ra, rb = regions(a), regions(b)
    parts = ["%d of %d" % (changed(x, y), len(y)) for x, y in zip(ra, rb)]
    print("%-52s %6d %6d  %s" % (name[:52], len(a), len(b), " / ".join(parts)))

#!/usr/bin/env python3
"""stall_regions.py -- where a kernel's warps stall, by code region, from one Nsight Compute profile.

Reads the per-instruction source page that scripts/profile.sh writes (NAME_sass.csv: one row per
SASS instruction, in program order, with the stall-sample columns stall_*) and sums the samples over
line ranges. Line n is the n-th instruction, the same numbering as the file scripts/sass.sh writes
for the same kernel and build flags, so the regions of each warp role (producer, consumer
warpgroups, epilogue) can be read off that listing: setmaxnreg, named barriers, HGMMA blocks.
docs/perf.md (session 21) splits ak_sdx_main and ak_sdt_main this way.

usage: scripts/stall_regions.py CSV [NAME=FIRST-LAST ...] [--top N] [--ranges]
  NAME=FIRST-LAST  a region of instructions FIRST..LAST (1-based, inclusive); without any, the
                   whole kernel is one region
  --top N          the N instructions with the most samples in each region (default 0)
  --ranges         list the runs of executed instructions with their samples (to find regions)
"""
import csv
import sys


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    # row 0 names the kernel; row 1 is the header
    hdr, data = rows[1], rows[2:]
    col = {h: i for i, h in enumerate(hdr)}
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    return data, col, reasons


def num(cell):
    try:
        return int(cell)
    except ValueError:
        return 0


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 2
    data, col, reasons = load(argv[1])
    regions, top, ranges = [], 0, False
    args = argv[2:]
    k = 0
    while k < len(args):
        a = args[k]
        if a == "--top":
            top = int(args[k + 1])
            k += 2
            continue
        if a == "--ranges":
            ranges = True
        else:
            name, span = a.split("=", 1)
            first, last = (int(x) for x in span.split("-", 1))
            if not 1 <= first <= last <= len(data):
                print("region %s: %d-%d outside 1-%d" % (name, first, last, len(data)))
                return 2
            regions.append((name, first, last))
        k += 1
    if not regions:
        regions = [("kernel", 1, len(data))]

    samples = [sum(num(d[col[r]]) for r in reasons) for d in data]
    executed = [num(d[col["Instructions Executed"]]) for d in data]
    total = sum(samples) or 1
    print("%d instructions, %d stall samples" % (len(data), total))

    if ranges:
        runs = []
        for n in range(len(data)):
            if executed[n] > 0:
                if runs and runs[-1][1] == n - 1:
                    runs[-1][1] = n
                else:
                    runs.append([n, n])
        for a, b in runs:
            print("  run %5d-%5d %5d instr %6d samples  %s" % (a + 1, b + 1, b - a + 1, sum(samples[a:b + 1]),
                                                             data[a][col["Source"]].strip()[:48]))

    for name, first, last in regions:
        tot = {r: sum(num(d[col[r]]) for d in data[first - 1:last]) for r in reasons}
        s = sum(tot.values())
        best = sorted(tot, key=lambda r: -tot[r])[:6]
        print("%-14s %5d-%5d %7d samples (%5.1f%%) | %s" % (
            name, first, last, s, 100.0 * s / total,
            " ".join("%s %.0f%%" % (r[6:], 100.0 * tot[r] / s) for r in best if tot[r]) if s else "-"))
        if top:
            order = sorted(range(first - 1, last), key=lambda n: -samples[n])[:top]
            for n in order:
                if samples[n] == 0:
                    break
                d = data[n]
                why = sorted(reasons, key=lambda r: -num(d[col[r]]))[:2]
                print("    %5d %6d  %-50s %s" % (n + 1, samples[n], d[col["Source"]].strip()[:50],
                                                  " ".join("%s:%d" % (r[6:], num(d[col[r]])) for r in why)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

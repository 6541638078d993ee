#!/usr/bin/env python3
"""ab_table.py DIR NAME[,NAME...] -- the cycles table of an A/B run (scripts/quick_ab.sh).

Reads DIR/r<round>_<name>.json (`attnkit bench --json` output) and prints, per benchmark shape,
each build's cycles per round (us x the SM clock the bench read right after the sample, so a
card that lowers its clock under load does not read as a slower kernel) with its median time
in us, and the median's change against the first name's median.
"""
import glob
import json
import os
import re
import statistics
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    d, names = sys.argv[1], sys.argv[2].split(',')
    res, order = {}, []
    for n in names:
        for f in sorted(glob.glob(os.path.join(d, 'r*_%s.json' % n))):
            try:
                cases = json.load(open(f))['cases']
            except (OSError, ValueError, KeyError) as e:
                print('%s: unreadable (%s)' % (f, e))
                continue
            for c in cases:
                if c.get('status') != 'AK_OK' or 'sm_MHz' not in c:
                    continue
                k = re.sub(r'\s+', ' ', c['shape'])
                if k not in order:
                    order.append(k)
                res.setdefault(k, {}).setdefault(n, []).append((c['us'], c['sm_MHz']))
    for k in order:
        row, cells = res[k], []
        base = row.get(names[0])
        for n in names:
            xs = row.get(n)
            if not xs:
                cells.append('%s -' % n)
                continue
            cyc = [u * m / 1000 for u, m in xs]
            cell = '%s %s (%.2f us)' % (n, '/'.join('%.1fk' % c for c in cyc), statistics.median(u for u, _ in xs))
            if base and n != names[0]:
                b = statistics.median(u * m / 1000 for u, m in base)
                cell += ' %+.1f%%' % (100 * (statistics.median(cyc) / b - 1))
            cells.append(cell)
        print(k[:70].ljust(70), ' | '.join(cells))


if __name__ == '__main__':
    main()

#!/usr/bin/env python3
"""Where two profiles differ, per commit: compares the `.syms.tsv` tables
that bench/profile_cpu.py --perf writes (CPU µs per commit by command,
library and symbol, self time) and prints the symbols whose cost per
commit differs most, with each side's total.

    python3 bench/perf_diff.py DIR/gate-200-1.txt.syms.tsv DIR/bare-200-1.txt.syms.tsv

For the postgres processes it also prints their user-space and kernel
totals and, for each --sum NAME=REGEX (repeatable), the total of the
symbols whose name matches REGEX, e.g. `--sum
snapshot='GetSnapshotData|XidInMVCCSnapshot'`.
"""
import argparse
import csv
import re
from collections import defaultdict


def load(path):
    d = defaultdict(float)
    with open(path) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            d[(r["comm"], r["dso"], r["symbol"])] += float(r["us_per_commit"])
    return d


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", help="first profile's .syms.tsv")
    p.add_argument("b", help="second profile's .syms.tsv")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--sum", action="append", default=[], metavar="NAME=REGEX",
                   help="total of the postgres processes' symbols matching REGEX")
    a = p.parse_args()
    x, y = load(a.a), load(a.b)

    def by(f, d):
        g = defaultdict(float)
        for k, v in d.items():
            g[f(k)] += v
        return g
    print("CPU µs per commit: first / second / difference")
    for name, f in [("by command", lambda k: k[0]), ("by command and library", lambda k: (k[0], k[1]))]:
        gx, gy = by(f, x), by(f, y)
        print("\n# " + name)
        for k in sorted(set(gx) | set(gy), key=lambda k: -(gx[k] + gy[k]))[:12]:
            print("%9.1f %9.1f %+9.1f  %s" % (gx[k], gy[k], gx[k] - gy[k], k if isinstance(k, str) else " ".join(k)))
    pg = [("user space (any library)", lambda k: k[1] != "[kernel.kallsyms]"),
          ("kernel", lambda k: k[1] == "[kernel.kallsyms]")]
    for spec in a.sum:
        name, _, rx = spec.partition("=")
        pg.append((name, lambda k, r=re.compile(rx): bool(r.search(k[2]))))
    print("\n# postgres processes")
    for name, f in pg:
        sx = sum(v for k, v in x.items() if k[0] == "postgres" and f(k))
        sy = sum(v for k, v in y.items() if k[0] == "postgres" and f(k))
        print("%9.1f %9.1f %+9.1f  %s" % (sx, sy, sx - sy, name))
    print("\n# symbols that differ most")
    for k in sorted(set(x) | set(y), key=lambda k: -abs(x[k] - y[k]))[:a.top]:
        print("%9.1f %9.1f %+9.1f  %s %s %s" % (x[k], y[k], x[k] - y[k], k[0], k[1], k[2][:70]))
    print("\n%9.1f %9.1f %+9.1f  total" % (sum(x.values()), sum(y.values()), sum(x.values()) - sum(y.values())))


if __name__ == "__main__":
    main()

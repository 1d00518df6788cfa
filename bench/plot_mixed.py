"""Chart of a mixed-workload run (bench/mixed.sh): OLTP tps per configuration
(median with min-max) and reports completed. Usage: plot_mixed.py DIR"""
import csv
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

out = sys.argv[1]
# The run's CPUs, as its summary names them (the machine drawing the chart
# may have others).
m = re.search(r"(\d+) CPUs", open(os.path.join(out, "summary.md")).read()) if os.path.exists(
    os.path.join(out, "summary.md")) else None
cpus = m.group(1) if m else str(os.cpu_count())
rows = [r for r in csv.DictReader(open(os.path.join(out, "results.csv"))) if r.get("status", "ok") == "ok"]
# One bar per configuration and report form (results before the forms
# existed have no form column: single statements).
keys = list(dict.fromkeys((r["config"], r.get("form", "single")) for r in rows))


def col(key, k):
    return [float(r[k]) for r in rows if (r["config"], r.get("form", "single")) == key]


tps = [col(key, "oltp_tps") for key in keys]
rep = [col(key, "reports") for key in keys]
cfgs = [c if len({f for _, f in keys}) == 1 else f"{c} ({f})" for c, f in keys]
med = [statistics.median(t) for t in tps]
err = [[m - min(t) for m, t in zip(med, tps)], [max(t) - m for m, t in zip(med, tps)]]
fig, ax = plt.subplots(figsize=(9, 4.2))
x = range(len(cfgs))
ax.bar(x, med, yerr=err, capsize=4,
       color=["#888" if c.startswith("bare") else "#4a7" if c.startswith("gate") else "#a74" for c, _ in keys])
# Room above the bars for the legend.
ax.set_ylim(0, max(max(t) for t in tps) * 1.25)
ax.set_xticks(list(x), cfgs, rotation=20, ha="right")
ax.set_ylabel("OLTP tps (median, min-max)")
ax2 = ax.twinx()
ax2.plot(list(x), [statistics.median(r) for r in rep], "ko", label="reports completed (median)")
ax2.set_ylabel("reports completed")
ax2.set_ylim(0, max(max(r) for r in rep) * 1.3)
ax2.legend(loc="upper right")
ax.set_title(f"TPC-B clients beside long reports, {cpus} CPUs")
fig.tight_layout()
fig.savefig(os.path.join(out, "mixed.png"), dpi=110)
print(os.path.join(out, "mixed.png"))

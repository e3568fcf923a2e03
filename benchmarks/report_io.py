#!/usr/bin/python3
"""Aggregates bench_io / h5py peer rows (one per rank and pass) into the I/O table: per (ranks, reader,
order, cache) total samples/s and GB/s over the slowest rank, max RssAnon/RssFile, and mmap's speed-up
over each peer. Writes io.csv and io.png (gnuplot).

  report_io.py RAW.csv OUTDIR
"""
import collections
import csv
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in benchmarks/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_common import gnuplot, write_csv  # noqa: E402

raw, out = sys.argv[1], sys.argv[2]
cols = ["ranks", "rank", "reader", "order", "cache", "samples", "bytes", "seconds", "rss_anon_mib", "rss_file_mib", "check"]
groups = collections.defaultdict(list)
for row in csv.reader(open(raw)):
    r = dict(zip(cols, row))
    groups[(int(r["ranks"]), r["reader"], r["order"], r["cache"])].append(r)
rows = []
for (ranks, reader, order, cache), rs in sorted(groups.items()):
    t = max(float(r["seconds"]) for r in rs)
    n = sum(int(r["samples"]) for r in rs)
    b = sum(int(r["bytes"]) for r in rs)
    rows.append(dict(ranks=ranks, reader=reader, order=order, cache=cache, samples=n, seconds=t,
                     samples_per_s=n / t, GB_per_s=b / t / 1e9,
                     rss_anon_mib_max=max(float(r["rss_anon_mib"]) for r in rs),
                     rss_file_mib_max=max(float(r["rss_file_mib"]) for r in rs)))
by = {(r["ranks"], r["reader"], r["order"], r["cache"]): r for r in rows}
for r in rows:
    m = by.get((r["ranks"], "mmap", r["order"], r["cache"]))
    r["mmap_speedup"] = m["samples_per_s"] / r["samples_per_s"] if m else float("nan")
os.makedirs(out, exist_ok=True)
keys = list(rows[0].keys())
write_csv(f"{out}/io.csv", keys, rows)
hdr = f"{'ranks':>5} {'reader':>8} {'order':>5} {'cache':>5} {'samples':>8} {'samples/s':>12} {'GB/s':>8} {'RssAnon MiB':>12} {'RssFile MiB':>12} {'mmap x':>7}"
print(hdr)
for r in rows:
    print(f"{r['ranks']:>5} {r['reader']:>8} {r['order']:>5} {r['cache']:>5} {r['samples']:>8} {r['samples_per_s']:>12.0f} "
          f"{r['GB_per_s']:>8.3f} {r['rss_anon_mib_max']:>12.1f} {r['rss_file_mib_max']:>12.1f} {r['mmap_speedup']:>7.1f}")
# plot: samples/s per configuration, one bar cluster per reader
dat = f"{out}/io_plot.dat"
confs = sorted({(r["ranks"], r["order"], r["cache"]) for r in rows})
readers = [x for x in ("mmap", "h5dread", "h5py") if any(r["reader"] == x for r in rows)]
with open(dat, "w") as f:
    f.write("conf " + " ".join(readers) + "\n")
    for c in confs:
        vals = [by.get((c[0], rd, c[1], c[2]), {}).get("samples_per_s", 0) for rd in readers]
        f.write(f"np{c[0]}-{c[1]}-{c[2]} " + " ".join(f"{v:.1f}" for v in vals) + "\n")
gnuplot(f"""set terminal pngcairo size 1000,500
set output '{out}/io.png'
set title 'mpiddp bench_io: sample reads (higher is better)' noenhanced
set style data histograms
set style histogram clustered gap 1
set style fill solid border -1
set logscale y
set ylabel 'samples/s (all ranks)'
set xtics rotate by -30
set key autotitle columnhead
plot for [i=2:{len(readers) + 1}] '{dat}' using i:xtic(1)
""")

#!/usr/bin/python3
"""report_train.py RAW.csv OUTDIR | --plots-only OUTDIR — the training table (mpiddp beside PyTorch DDP per
hidden size and rank count, with the speed ratio, weak-scaling efficiency and the share of the measured
sgemm rate) as train.csv + text, and the PNG plots: throughput vs hidden, scaling vs ranks, allreduce
busbw vs size (from OUTDIR/allreduce.csv when present). When RAW holds repeated runs of a configuration,
each row is its median run by samples/s (the range over the runs is kept in samples_min/samples_max), and
the sgemm share is the median of the runs' shares."""
import csv
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in benchmarks/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_common import gnuplot, median_runs, runs_range, samples_md, write_csv  # noqa: E402

COLS = ["impl", "ranks", "hidden", "batch", "steps", "samples_per_s", "rows_per_s", "step_ms", "data_ms", "fwd_ms", "bwd_ms",
        "sync_ms", "opt_ms", "gflops", "sgemm_gflops", "peak_rss_mib", "private_mib", "compute_max_ms", "rows_max_over_mean"]


def plots(out):
    rows = list(csv.DictReader(open(f"{out}/train.csv"))) if os.path.exists(f"{out}/train.csv") else []
    if rows:
        hs = sorted({int(r["hidden"]) for r in rows})
        ranks = sorted({int(r["ranks"]) for r in rows})
        with open(f"{out}/train_hidden.dat", "w") as f:
            f.write("hidden mpiddp torch-ddp\n")
            for h in hs:
                v = {r["impl"]: r["samples_per_s"] for r in rows if int(r["hidden"]) == h and int(r["ranks"]) == 2}
                f.write(f"{h} {v.get('mpiddp', 'NaN')} {v.get('torch-ddp', 'NaN')}\n")
        with open(f"{out}/train_ranks.dat", "w") as f:
            f.write("ranks " + " ".join(f"mpiddp-H{h} torch-H{h}" for h in hs) + "\n")
            for n in ranks:
                vals = []
                for h in hs:
                    for impl in ("mpiddp", "torch-ddp"):
                        m = [r["samples_per_s"] for r in rows if int(r["hidden"]) == h and int(r["ranks"]) == n and r["impl"] == impl]
                        vals.append(m[0] if m else "NaN")
                f.write(f"{n} " + " ".join(vals) + "\n")
        gnuplot(f"""set terminal pngcairo size 900,450
set output '{out}/train_hidden.png'
set title 'samples/s at 2 ranks (higher is better)' noenhanced
set logscale y
set xlabel 'hidden units'
set ylabel 'samples/s'
set key autotitle columnhead
plot '{out}/train_hidden.dat' using 1:2 with linespoints lw 2 pt 7, '' using 1:3 with linespoints lw 2 pt 5
set output '{out}/train_ranks.png'
set title 'samples/s vs ranks (2 cores: 4 ranks oversubscribe)' noenhanced
set xlabel 'ranks'
plot for [i=2:{1 + 2 * len(hs)}] '{out}/train_ranks.dat' using 1:i with linespoints lw 2
""")
    if os.path.exists(f"{out}/allreduce.csv"):
        ar = [r for r in csv.DictReader(open(f"{out}/allreduce.csv")) if r["table"] == "allreduce"]
        with open(f"{out}/allreduce.dat", "w") as f:
            for r in ar:
                f.write(f"{r['size_bytes']} {r['busbw_GBps']}\n")
        gnuplot(f"""set terminal pngcairo size 900,450
set output '{out}/allreduce.png'
set title 'MPI_Allreduce busbw, 2 ranks' noenhanced
set logscale x 2
set xlabel 'bytes'
set ylabel 'busbw (GB/s)'
plot '{out}/allreduce.dat' using 1:2 with linespoints lw 2 pt 7 title 'MPI (Open MPI 4.1, shared memory)'
""")


if sys.argv[1] == "--plots-only":
    plots(sys.argv[2])
    sys.exit(0)
raw, out = sys.argv[1], sys.argv[2]
runs = {}
for r in csv.reader(open(raw)):
    r = dict(zip(COLS, r))
    runs.setdefault((r["impl"], int(r["ranks"]), int(r["hidden"])), []).append(r)
rows = median_runs(runs, lambda x: float(x["gflops"]) / float(x["sgemm_gflops"]) if x["gflops"] else None)
by = {(r["impl"], int(r["ranks"]), int(r["hidden"])): r for r in rows}
for r in rows:
    peer = by.get(("torch-ddp", int(r["ranks"]), int(r["hidden"])))
    r["vs_peer"] = f"{float(r['samples_per_s']) / float(peer['samples_per_s']):.2f}" if peer and r["impl"] == "mpiddp" else ""
    one = by.get((r["impl"], 1, int(r["hidden"])))
    r["weak_eff"] = f"{float(r['samples_per_s']) / int(r['ranks']) / float(one['samples_per_s']):.2f}" if one else ""
keys = COLS + ["runs", "samples_min", "samples_max", "vs_peer", "weak_eff", "of_sgemm"]
rows.sort(key=lambda r: (int(r["hidden"]), int(r["ranks"]), r["impl"]))
write_csv(f"{out}/train.csv", keys, rows)
print(f"{'impl':>10} {'np':>3} {'H':>4} {'samples/s':>10} {'rows/s':>10} {'step ms':>8} {'data':>6} {'fwd':>6} {'bwd':>6} {'sync':>6} "
      f"{'opt':>6} {'maxcmp':>6} {'GF/s':>6} {'sgemm':>6} {'%sgemm':>6} {'RSS MiB':>8} {'priv MiB':>8} {'x peer':>7} {'weak eff':>8} {'runs: samples/s range':>22}")
for r in rows:
    print(f"{r['impl']:>10} {r['ranks']:>3} {r['hidden']:>4} {float(r['samples_per_s']):>10.0f} {float(r['rows_per_s']):>10.0f} "
          f"{float(r['step_ms']):>8.2f} {r['data_ms']:>6.6} {r['fwd_ms']:>6.6} {r['bwd_ms']:>6.6} {r['sync_ms'] or '-':>6.6} "
          f"{r['opt_ms']:>6.6} {r.get('compute_max_ms') or '-':>6.6} {r['gflops'] or '-':>6.6} {r['sgemm_gflops'] or '-':>6.6} {r['of_sgemm'] or '-':>6} "
          f"{float(r['peak_rss_mib']):>8.1f} {float(r.get('private_mib') or 'nan'):>8.1f} {r['vs_peer'] or '-':>7} {r['weak_eff']:>8} "
          f"{runs_range(r):>22}")
with open(f"{out}/train_table.md", "w") as f:  # the same table for benchmarks/RESULTS.md
    f.write("| impl | np | H | samples/s (median; range) | step ms | data | fwd | bwd | sync | opt | slowest fwd+bwd | GFLOP/s | sgemm GFLOP/s "
            "| of sgemm | peak RSS MiB | private MiB | × peer | weak eff. |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
            "---:|---:|---:|---:|---:|---:|\n")
    num = lambda x, n=2: "" if not x else f"{float(x):.{n}f}"
    for r in rows:
        f.write(f"| {r['impl']} | {r['ranks']} | {r['hidden']} | {samples_md(r)} | {num(r['step_ms'])} | {num(r['data_ms'])} | {num(r['fwd_ms'])} "
                f"| {num(r['bwd_ms'])} | {num(r['sync_ms']) or '–'} | {num(r['opt_ms'])} | {num(r.get('compute_max_ms')) or '–'} | {num(r['gflops'], 1)} "
                f"| {num(r['sgemm_gflops'], 1)} | {r['of_sgemm']} | {num(r['peak_rss_mib'], 0)} | {num(r.get('private_mib'), 1)} "
                f"| {('**' + r['vs_peer'] + '**') if r['vs_peer'] else ''} | {r['weak_eff']} |\n")
# issue #15: balance with token budgets (mpiddp-rows) against sample-count batches (mpiddp), at 2 ranks
bal = [r for r in rows if r["impl"] in ("mpiddp", "mpiddp-rows") and int(r["ranks"]) == 2]
if any(r["impl"] == "mpiddp-rows" for r in bal):
    print("\nbalance at 2 ranks (rows max/mean per step, weak-scaling efficiency 1->2):")
    for r in sorted(bal, key=lambda r: (int(r["hidden"]), r["impl"])):
        mm = r.get("rows_max_over_mean") or ""
        line = f"  {r['impl']:>12} H {r['hidden']:>4}: rows max/mean {mm or '-':>6}, weak eff {r['weak_eff'] or '-'}"
        if r["impl"] == "mpiddp-rows":
            ok_w = r["weak_eff"] and float(r["weak_eff"]) >= 0.97
            ok_b = mm and float(mm) <= 1.02
            line += f"   target weak eff >= 0.97: {'PASS' if ok_w else 'MISS'}; max/mean <= 1.02: {'PASS' if ok_b else 'MISS'}"
        print(line)
plots(out)

"""What the benchmark report scripts (report_train.py, report_tx.py, report_gpu.py, report_io.py) share: CSV
cells as numbers, the median run of repeated runs, the samples/s range columns, and gnuplot. Imported by path
(each report puts its own folder first on sys.path)."""
import csv
import subprocess


def fnum(x):
    """float of a CSV cell, None when empty or not a number"""
    try:
        return float(x) if x not in (None, "") else None
    except ValueError:
        return None


def gnuplot(script):
    """runs a gnuplot script; without gnuplot (or when it fails) says so on stdout and goes on"""
    try:
        subprocess.run(["gnuplot"], input=script.encode(), check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"(no plot: {e})")


def median_runs(runs, share):
    """repeated runs of a configuration ({key: [row dicts]}) -> one row each, in the dict's order: the median run
    by samples/s (the lower middle one for an even count) with runs, samples_min and samples_max (the range over
    the runs) and of_sgemm, the median of share(run) (a run's gflops over its sgemm_gflops; None: left out) to
    two decimals, empty when no run has one"""
    rows = []
    for rs in runs.values():
        rs.sort(key=lambda r: float(r["samples_per_s"]))
        r = dict(rs[(len(rs) - 1) // 2])  # the median run (the lower middle one for an even count)
        r["runs"] = str(len(rs))
        r["samples_min"], r["samples_max"] = rs[0]["samples_per_s"], rs[-1]["samples_per_s"]
        shares = sorted(s for s in map(share, rs) if s is not None)
        r["of_sgemm"] = f"{shares[(len(shares) - 1) // 2]:.2f}" if shares else ""
        rows.append(r)
    return rows


def write_csv(path, keys, rows):
    """rows (dicts) as CSV with a header of keys"""
    with open(path, "w") as fh:
        w = csv.DictWriter(fh, keys)
        w.writeheader()
        w.writerows(rows)


def runs_range(r):
    """the text table's last column: "RUNS: MIN-MAX" samples/s"""
    return r['runs'] + ': ' + format(float(r['samples_min']), '.0f') + '-' + format(float(r['samples_max']), '.0f')


def samples_md(r):
    """the markdown table's samples/s cell: "MEDIAN (MIN–MAX)", thousands separated by spaces"""
    return f"{float(r['samples_per_s']):,.0f} ({float(r['samples_min']):,.0f}–{float(r['samples_max']):,.0f})".replace(",", " ")

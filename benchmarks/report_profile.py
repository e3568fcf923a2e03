#!/usr/bin/env python3
"""report_profile.py — one markdown section from an Nsight Compute profile (benchmarks/profile_gpu.sh): ncu's raw
page (every metric collected, one row per launch) as a table per kernel, and the rules of its details page with
the largest estimated speedups. Metrics a section did not collect, or that this GPU or ncu version names otherwise,
show as "–"; the stall reasons are found by pattern, not by a fixed list.

  report_profile.py --title T --raw RAW.csv [--details DETAILS.csv] [--rules N]
"""
import argparse
import csv
import re
import sys

TIME_UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6,
              "s": 1e6}
# (column, the metrics that give it, first present wins)
COLUMNS = [
    ("SM %", ["sm__throughput.avg.pct_of_peak_sustained_elapsed"]),
    ("memory %", ["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"]),
    ("DRAM %", ["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                "dram__throughput.avg.pct_of_peak_sustained_elapsed"]),
    ("occupancy %", ["sm__warps_active.avg.pct_of_peak_sustained_active"]),
    ("regs", ["launch__registers_per_thread"]),
]
SMEM = ["launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic"]
BANK = {"ld": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
        "st": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"}
STALL = re.compile(r"issue_stalled_([a-z0-9_]+?)(_per_[a-z_]+)?\.(ratio|pct)$")


def number(s):
    s = (s or "").strip().replace(",", "")
    try:
        return float(s)
    except ValueError:
        return None


def read_table(path):
    """ncu's CSV: lines before the header ("==PROF==" and the like) skipped; the raw page's units row split off."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if head is None:
        return [], [], {}
    cols = rows[head]
    body = [r for r in rows[head + 1:] if len(r) == len(cols)]
    units = {}
    k = cols.index("Kernel Name")
    if body and not body[0][k] and not body[0][0]:
        units = dict(zip(cols, body[0]))
        body = body[1:]
    return cols, [dict(zip(cols, r)) for r in body], units


def short(name, width=64):
    name = re.sub(r"^void ", "", name.strip())
    depth = 0
    for i, c in enumerate(name):   # drop the parameter list, keep the template arguments
        depth += c == "<"
        depth -= c == ">"
        if c == "(" and depth == 0:
            name = name[:i]
            break
    return name if len(name) <= width else name[:width - 1] + "…"


def fmt(v, digits=1):
    if v is None:
        return "–"
    return f"{v:.0f}" if abs(v) >= 1000 or digits == 0 else f"{v:.{digits}f}"


def stalls(cols):
    """the stall columns of the one suffix family with the most reasons (ncu names each family alike)"""
    fam = {}
    for c in cols:
        m = STALL.search(c)
        if m and "not_issued" not in c:
            fam.setdefault((m.group(2) or "") + m.group(3), []).append((m.group(1), c))
    return max(fam.values(), key=len) if fam else []


def raw_section(path, title):
    cols, rows, units = read_table(path)
    out = [f"\n## {title}\n"]
    if not rows:
        return out + ["no kernel was profiled (ncu's raw page is empty)\n"]
    tcol = "gpu__time_duration.sum"
    scale = TIME_UNITS.get(units.get(tcol, "nsecond"), 1e-3)
    stall_cols = stalls(cols)
    kernels = {}
    for r in rows:
        kernels.setdefault(short(r["Kernel Name"]), []).append(r)

    def mean(rs, names):
        for n in names:
            v = [number(r.get(n)) for r in rs if number(r.get(n)) is not None]
            if v:
                return sum(v) / len(v)
        return None

    lines = []
    for k, rs in kernels.items():
        t = mean(rs, [tcol])
        t = None if t is None else t * scale
        smem = [mean(rs, [n]) for n in SMEM]
        smem = None if all(v is None for v in smem) else sum(v or 0 for v in smem)
        top = sorted(((mean(rs, [c]), reason) for reason, c in stall_cols), key=lambda x: -(x[0] or 0))[:3]
        top = ", ".join(f"{reason} {v:.1f}" for v, reason in top if v) or "–"
        bank = [mean(rs, [BANK[x]]) for x in ("ld", "st")]
        bank = "–" if all(v is None for v in bank) else "/".join(fmt(v, 0) for v in bank)
        tensor = [mean(rs, [c]) for c in cols if "pipe_tensor" in c and "pct_of_peak" in c]
        tensor = max((v for v in tensor if v is not None), default=None)
        total = None if t is None else t * len(rs)
        lines.append((total or 0, [k, str(len(rs)), fmt(t), *(fmt(mean(rs, n)) for _, n in COLUMNS[:4]),
                                   fmt(mean(rs, COLUMNS[4][1]), 0), fmt(smem, 0), top, bank, fmt(tensor)]))
    out.append("| kernel | launches | mean us | SM % | memory % | DRAM % | occupancy % | regs | smem B | "
               "top stalls (cycles/instr) | bank conflicts ld/st | tensor pipe % |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|")
    for _, cells in sorted(lines, key=lambda x: -x[0]):   # the kernels taking the most time first
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return out


def rules_section(path, n):
    cols, rows, _ = read_table(path)
    if not rows:
        return []
    if "Rule Name" not in cols:
        return ["\nncu's details page has no rule columns in this version.\n"]
    best = {}
    for r in rows:
        if not r.get("Rule Name") or r.get("Rule Type", "OPT") not in ("OPT", "WRN"):
            continue
        key = (short(r["Kernel Name"], 48), r["Rule Name"])
        sp = number(r.get("Estimated Speedup")) or 0.0
        if key not in best or sp > best[key][0]:
            best[key] = (sp, " ".join(r.get("Rule Description", "").split()))
    if not best:
        return ["\nncu's rules: no advice.\n"]
    out = ["\nncu's rules, largest estimated speedup first:\n"]
    for (k, rule), (sp, desc) in sorted(best.items(), key=lambda x: -x[1][0])[:n]:
        desc = desc if len(desc) <= 240 else desc[:239] + "…"
        out.append(f"- `{k}` {rule} (est. {sp:.0f}%): {desc}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--title", required=True)
    ap.add_argument("--raw", required=True)
    ap.add_argument("--details")
    ap.add_argument("--rules", type=int, default=8)
    a = ap.parse_args()
    out = raw_section(a.raw, a.title)
    if a.details:
        out += rules_section(a.details, a.rules)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

# profile_gpu_dry.sh — benchmarks/profile_gpu.sh without a GPU: a stand-in ncu records its arguments, runs the
# program it is given (bench_kernels on the host emulator where built, else on the CPU) and, on --import, prints
# a raw and a details page in Nsight Compute's CSV layout. Checks the profiler's command lines (clocks left alone,
# the passes' sections and kernel filter), the table report_profile.py computes from the pages (means over
# launches, the stall family with most reasons, bank conflicts, shared memory, kernels by total time, rules by
# estimated speedup), and the exits: counters unreadable (bench_kernels' timing instead, exit 0), ncu failing
# (exit 1), a spent budget (passes not run, exit 4), an unknown pass (exit 2). The passes run bench_kernels at
# 256 rows, fewer than the encoder's width (512): its buffers once took that for granted and it wrote past one.
# No timing claim.
. "$(dirname "$0")/lib.sh"
BUILD=$(dirname "$BENCH_DIR")
[ -x "$BENCH_DIR/bench_kernels" ] || { echo "SKIP: benchmarks not built (MPIDDP_BENCHMARKS=OFF)"; exit 77; }
mode=cpu
[ -f "$BUILD/libmpiddp_cudaemu.so" ] && mode=emu
cat > fakencu <<'SH'
#!/usr/bin/env bash
echo "$*" >> "$FAKE_NCU_LOG"
[ "$1" = --version ] && { echo "NVIDIA (R) Nsight Compute Command Line Profiler Version 2099.1.0 (stand-in)"; exit 0; }
if [ "$1" = --import ]; then
  [ -f "$2" ] || { echo "==ERROR== no report $2" >&2; exit 1; }
  case "$*" in *"--page raw"*) cat "$FAKE_NCU_RAW" ;; *"--page details"*) cat "$FAKE_NCU_DETAILS" ;; *) exit 9 ;; esac
  exit 0
fi
args=("$@") i=0 out=""
while [ $i -lt ${#args[@]} ]; do
  case ${args[$i]} in
    -o) out=${args[$((i + 1))]}; i=$((i + 2)) ;;
    --clock-control|--target-processes|--section|--kernel-name|--launch-count) i=$((i + 2)) ;;
    -f) i=$((i + 1)) ;;
    -*) echo "stand-in ncu: unknown option ${args[$i]}" >&2; exit 9 ;;
    *) break ;;
  esac
done
echo "==PROF== Connected to process $$"
case ${FAKE_NCU_MODE:-ok} in
  nocounters) echo "==ERROR== Failed to initialize the profiler: LibraryNotLoaded"; exit 1 ;;
  broken) echo "==ERROR== something else went wrong"; exit 7 ;;
esac
"${args[@]:$i}" || exit $?
: > "$out.ncu-rep"; echo "==PROF== Report: $out.ncu-rep"
SH
chmod +x fakencu
# the pages: k_tc_fwd twice (1 and 3 us), k_tc_bwd_kv once (5 us, the most time), k_attn_D once (0.5 us)
$PY - <<'PY'
import csv
meta = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size", "Grid Size",
        "Device", "CC"]
stall = "smsp__average_warp_latency_issue_stalled_%s_per_warp_active.ratio"
pct = "smsp__pcsamp_warps_issue_stalled_%s.pct"
metrics = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
           "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__warps_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread",
           "launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic",
           "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
           "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
           "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
           stall % "barrier", stall % "long_scoreboard", stall % "mio_throttle", stall % "short_scoreboard",
           pct % "wait", pct % "math_pipe_throttle"]
units = ["nsecond", "%", "%", "%", "%", "register/thread", "byte/block", "byte/block", "", "", "%"] + ["cycle"] * 4 + ["%"] * 2
fwd = "void k_tc_fwd<64, float>(const float *, int, float *)"
def row(i, k, vals):
    return [str(i), "4711", "bench_kernels", "h", k, "1", "7", "(128, 1, 1)", "(512, 8, 1)", "0", "9.0"] + vals
with open("raw.csv", "w", newline="") as f:
    f.write("==PROF== Connected to process 4711\n")
    w = csv.writer(f, quoting=csv.QUOTE_ALL)
    w.writerow(meta + metrics)
    w.writerow([""] * len(meta) + units)
    w.writerow(row(0, fwd, ["1,000", "40", "20", "10", "30", "168", "33,792", "0", "1,024", "0", "50",
                            "4.0", "10.0", "3.0", "1.0", "90", "80"]))
    w.writerow(row(1, "void k_attn_D<64>(const float *, float *)", ["500", "5", "70", "65.5", "80", "32", "0", "0",
                            "n/a", "n/a", "0", "0.1", "2.0", "0.2", "0.3", "10", "10"]))
    w.writerow(row(2, fwd, ["3,000", "60", "40", "30", "50", "168", "33,792", "0", "3,072", "2", "70",
                            "7.0", "14.0", "3.4", "1.0", "90", "80"]))
    w.writerow(row(3, "void k_tc_bwd_kv<64, float>(const float *, int)", ["5,000", "70", "30", "20", "25", "255",
                            "16,384", "1,024", "0", "0", "60", "9.0", "1.0", "2.0", "0.5", "50", "50"]))
dh = ["Section Name", "Metric Name", "Metric Unit", "Metric Value", "Rule Name", "Rule Type", "Rule Description",
      "Estimated Speedup Type", "Estimated Speedup"]
with open("details.csv", "w", newline="") as f:
    w = csv.writer(f, quoting=csv.QUOTE_ALL)
    w.writerow(meta + dh)
    w.writerow(row(0, fwd, ["Occupancy", "Achieved Occupancy", "%", "30", "", "", "", "", ""]))
    w.writerow(row(0, fwd, ["MemoryWorkloadAnalysis_Tables", "", "", "", "SharedMemoryConflicts", "OPT",
                            "The memory access pattern for shared loads might not be optimal:  4.0-way bank conflicts.",
                            "local", "40.5"]))
    w.writerow(row(2, fwd, ["MemoryWorkloadAnalysis_Tables", "", "", "", "SharedMemoryConflicts", "OPT",
                            "the same rule on the second launch, a smaller estimate", "local", "12"]))
    w.writerow(row(3, "void k_tc_bwd_kv<64, float>(const float *, int)", ["Occupancy", "", "", "", "AchievedOccupancy",
                            "OPT", "Registers limit the occupancy.", "global", "22"]))
    w.writerow(row(3, "void k_tc_bwd_kv<64, float>(const float *, int)", ["SpeedOfLight", "", "", "", "SOLBottleneck",
                            "INF", "an information row, not advice", "", ""]))
PY
export NCU=$WORK/fakencu FAKE_NCU_LOG=$WORK/ncu.log FAKE_NCU_RAW=$WORK/raw.csv FAKE_NCU_DETAILS=$WORK/details.csv
export PROFILE_GPU_DEVICE=$mode PROFILE_GPU_ROWS=256 PY
prof() { bash "$SRC/benchmarks/profile_gpu.sh" "$@"; }

# 1. all three passes, counters read
expect_rc 0 prof out "$BUILD"
echo "$OUT" | tail -5
md=out/profile.md
for p in attn-tf32 attn-bf16 all-bf16; do
  qgrep "^## $p: bench_kernels --precision" $md || fail "no section for $p"
  [ "$(wc -l < out/profile_$p.csv)" -ge 6 ] || fail "profile_$p.csv is not ncu's raw page"
done
[ "$(find out -type f | wc -l)" = 4 ] || fail "OUT holds $(find out -type f | wc -l) files, expected 4"
# the profiler's command lines: bench_kernels' rows under ncu, clocks left alone, the passes' sections and filter
grep -- '-o ' ncu.log > runs.txt
[ "$(wc -l < runs.txt)" = 3 ] || { cat ncu.log; fail "expected 3 profiled runs"; }
[ "$(grep -vc -- '--clock-control none' runs.txt || true)" = 0 ] || fail "a run without --clock-control none"
sed -n 1p runs.txt | qgrep -- "--kernel-name regex:k_tc_|k_attn .*--launch-count 12 .*--only attention" || fail "attn-tf32's filter"
sed -n 1p runs.txt | qgrep -- "--precision $([ $mode = cpu ] && echo fp32 || echo tf32) --preset issue --rows 256 --reps 1 --inner 1 --config d 512 --only attention" || fail "attn-tf32's bench_kernels arguments"
sed -n 1p runs.txt | qgrep -- "--section WarpStateStats .*--section MemoryWorkloadAnalysis_Tables" || fail "attn-tf32's sections"
sed -n 2p runs.txt | qgrep -- "--precision bf16 .*--only attention" || fail "attn-bf16's bench_kernels arguments"
sed -n 3p runs.txt | qgrep -- "--section SpeedOfLight --section LaunchStats --launch-count 150 " || fail "all-bf16's sections"
sed -n 3p runs.txt | qgrep -- "--only" && fail "all-bf16 filtered bench_kernels' rows"
# the table: k_tc_bwd_kv (5 us) first, then k_tc_fwd (2 launches, 4 us), then k_attn_D; means over launches
sed -n '/^## attn-tf32/,/^## attn-bf16/p' $md > t.md
cat t.md
grep '^| k_' t.md | cut -d'|' -f2 | tr -d ' ' > order.txt
printf 'k_tc_bwd_kv<64,float>\nk_tc_fwd<64,float>\nk_attn_D<64>\n' | diff - order.txt || fail "kernels not ordered by total time"
qgrep -F '| k_tc_fwd<64, float> | 2 | 2.0 | 50.0 | 30.0 | 20.0 | 40.0 | 168 | 33792 | long_scoreboard 12.0, barrier 5.5, mio_throttle 3.2 | 2048/1 | 60.0 |' t.md ||
  fail "k_tc_fwd's row"
qgrep -F '| k_tc_bwd_kv<64, float> | 1 | 5.0 | 70.0 | 30.0 | 20.0 | 25.0 | 255 | 17408 | barrier 9.0, mio_throttle 2.0, long_scoreboard 1.0 | 0/0 |' t.md ||
  fail "k_tc_bwd_kv's row"
qgrep -F '| k_attn_D<64> | 1 | 0.5 | 5.0 | 70.0 | 65.5 | 80.0 | 32 | 0 | long_scoreboard 2.0, short_scoreboard 0.3, mio_throttle 0.2 | – |' t.md ||
  fail "k_attn_D's row (n/a bank conflicts)"
# ncu's advice: the largest estimate per (kernel, rule), OPT only, largest first
grep '^- `' t.md > rules.txt
[ "$(wc -l < rules.txt)" = 2 ] || fail "expected 2 rules"
sed -n 1p rules.txt | qgrep -F '`k_tc_fwd<64, float>` SharedMemoryConflicts (est. 40%): The memory access pattern for shared loads might not be optimal: 4.0-way' ||
  fail "first rule"
sed -n 2p rules.txt | qgrep -F '`k_tc_bwd_kv<64, float>` AchievedOccupancy (est. 22%)' || fail "second rule"
pass "three passes: command lines, per-kernel table and rules as computed from ncu's pages ($mode)"

# 2. counters unreadable (gVisor): bench_kernels' own timing of the same rows, exit 0
FAKE_NCU_MODE=nocounters expect_rc 0 prof out2 "$BUILD"
qgrep '^\*\*No hardware counters on this machine (LibraryNotLoaded)' out2/profile.md || fail "no 'No hardware counters' line"
[ "$(grep -c '^## .*no hardware counters (ncu: LibraryNotLoaded); bench_kernels alone' out2/profile.md)" = 3 ] || fail "not every pass fell back"
qgrep '^| enc .*| attention_fwd ' out2/profile.md || fail "no bench_kernels attention rows in the fallback"
pass "counters unreadable: bench_kernels' table instead, exit 0"

# 3. ncu failing otherwise: FAILED, exit 1; a spent budget: not run, exit 4; an unknown pass: exit 2
FAKE_NCU_MODE=broken expect_rc 1 prof out3 "$BUILD"
qgrep '^## attn-tf32: FAILED (exit 7)' out3/profile.md || fail "no FAILED section"
MPIDDP_DEADLINE=$(( $(date +%s) + 25 )) expect_rc 4 prof out4 "$BUILD"
[ "$(grep -c ': not run (the budget ran out)' out4/profile.md)" = 3 ] || fail "passes not reported as not run"
PROFILE_GPU_PASSES=attn-fp64 expect_rc 2 prof out5 "$BUILD"
echo "$ERR" | qgrep "unknown pass 'attn-fp64'" || fail "unknown pass not named"
pass "ncu failing: exit 1; budget spent: exit 4, passes not run; unknown pass: exit 2"
expect_rc 2 "$BENCH_DIR/bench_kernels" --rows 0
echo "$ERR" | qgrep -- "--rows 0: expected an integer from 1 to" || fail "bench_kernels --rows 0 not refused"
pass "bench_kernels --rows 0: refused"

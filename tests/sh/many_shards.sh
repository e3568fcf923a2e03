# #33: datasets of thousands of shards under a tiny open-shard budget (io/shard_cache.c). 3000 training shards of 1-2
# samples: with MPIDDP_MAX_OPEN_SHARDS, MPIDDP_MAX_SHARD_MAPS or `ulimit -n` far below the shard count, every sampling
# mode (global, shard, --shuffle block, --batch-rows; validation's sequential order on 300 shards) trains to checkpoints
# bitwise equal to the unbounded run, at np 1, 2 and 4; the peak descriptors and maps on shard files, sampled from
# /proc while the ranks run and as run.json's data_cache reports them, stay within the budget. Also: the soft
# RLIMIT_NOFILE is raised to the hard one (run.json says so); a batch needing more shards than the budget is refused
# with one line naming the limit; a shard truncated after the LRU closed and reopened it still ends the job with the
# SIGBUS line naming the file. The committed code before #33 dies under `ulimit -n 256` here (Too many open files).
. "$(dirname "$0")/lib.sh"
synth --out t --samples 4500 --dim 8 --classes 4 --min-rows 1 --max-rows 2 --shards 3000 --seed 5
synth --out v --samples 300 --dim 8 --classes 4 --min-rows 1 --max-rows 2 --shards 300 --seed 5 --first-id 100000
[ "$(ls t/*.h5 | wc -l)" = 3000 ] || fail "expected 3000 training shards"

# watch OUT: samples, until OUT.stop exists, every rank's descriptors on shard files of t/ and v/ and maps of files
# there (per process, the largest seen), writing "fds maps" (the largest over the processes) to OUT
watch() {
  "$PY" - "$WORK" "$MPIDDP" "$1" <<'EOF' &
import os, sys, time
work, exe, out = sys.argv[1], sys.argv[2], sys.argv[3]
dirs = (work + "/t/", work + "/v/")
fmax = mmax = 0
while not os.path.exists(out + ".stop"):
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmd = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
            if not cmd or cmd[0].decode() != exe or os.readlink(f"/proc/{p}/cwd") != work:
                continue
            fds = [os.readlink(f"/proc/{p}/fd/{d}") for d in os.listdir(f"/proc/{p}/fd")]
            f = sum(1 for t in fds if t.startswith(dirs) and t.endswith(".h5"))  # not rank 0's dataset locks
            m = sum(1 for line in open(f"/proc/{p}/maps") if dirs[0] in line or dirs[1] in line)
        except OSError:
            continue
        fmax, mmax = max(fmax, f), max(mmax, m)
    time.sleep(0.02)
open(out, "w").write(f"{fmax} {mmax}\n")
EOF
}
# cache KEY RUN: run.json's data_cache entry KEY (dotted path) of run directory RUN
cache() { "$PY" -c "import json,sys; v=json.load(open(sys.argv[1]+'/run.json'))['data_cache']
for k in sys.argv[2].split('.'): v=v[k]
print(v)" "$2" "$1"; }

COMMON=(--device cpu --train t --val v --epochs 2 --hidden 16 --no-progress)
# pair NAME NP ENV... -- TRAIN_ARGS...: the unbounded run ref_NAME, then run NAME under the budget ENV sets
# (ulimit=N: `ulimit -n N`): bitwise equal, and its descriptors and maps on shard files, as /proc shows them and as
# run.json reports them, within the budget run.json states (the capacity in shards, shard_map_budget)
pair() {
  local name=$1 np=$2 lim="" envs=() xs=()
  shift 2
  while [ "$1" != -- ]; do
    case $1 in ulimit=*) lim=${1#ulimit=} ;; *) envs+=("$1") xs+=(-x "${1%%=*}") ;; esac
    shift
  done
  shift
  mpirun_np "$np" "$MPIDDP" train "${COMMON[@]}" "$@" --out "ref_$name" >/dev/null
  watch "peak_$name"
  set +e
  ( [ -z "$lim" ] || ulimit -n "$lim"
    env "${envs[@]}" mpirun -np "$np" --oversubscribe "${xs[@]}" "$MPIDDP" train "${COMMON[@]}" "$@" --out "$name" ) > "$name.out" 2>&1
  local rc=$?
  set -e
  touch "peak_$name.stop"
  wait
  [ "$rc" = 0 ] || { cat "$name.out" >&2; fail "$name: the bounded run failed"; }
  "$PY" "$SRC/tests/py/compare_ckpt.py" "ref_$name/checkpoints/last.h5" "$name/checkpoints/last.h5" 0 >/dev/null ||
    fail "$name: not bitwise equal to the unbounded run"
  local f m maxf maxm po pf pm ev ob
  read -r f m < "peak_$name"
  maxf=$(cache train.capacity "$name") maxm=$(cache shard_map_budget "$name")
  [ "$f" -gt 0 ] && [ "$f" -le "$maxf" ] || fail "$name: $f descriptors on shard files at once in one rank (budget $maxf)"
  [ "$m" -le "$maxm" ] || fail "$name: $m maps of shard files at once in one rank (budget $maxm)"
  po=$(cache peak_open_shards "$name") pf=$(cache peak_shard_fds "$name") pm=$(cache peak_shard_maps "$name")
  ev=$(cache evictions "$name") ob=$(cache over_budget_opens "$name")
  [ "$po" -le "$maxf" ] && [ "$pf" -le "$maxf" ] && [ "$pm" -le "$maxm" ] ||
    fail "$name: run.json reports peaks of $po shards, $pf descriptors, $pm maps (budget $maxf shards, $maxm maps)"
  [ "$ob" = 0 ] || fail "$name: $ob opens past the budget"
  [ "$ev" -gt 1000 ] || fail "$name: only $ev evictions: the budget did not bind"
  printf '%-8s np %d: bitwise equal; budget %s shards, %s maps (%s); peak per rank %s shards, %s fds, %s maps (/proc: %s fds, %s maps); hit rate train %s, val %s; %s evictions\n' \
    "$name" "$np" "$maxf" "$maxm" "$(cache train.limited_by "$name")" "$po" "$pf" "$pm" "$f" "$m" \
    "$(cache train.hit_rate "$name")" "$(cache val.hit_rate "$name")" "$ev"
}
# synth writes offsets, labels and sample_ids beside the features: 4 maps per shard
pair global2 2 ulimit=256 -- --batch-size 8 # first: the code before #33 dies here (Too many open files)
pair global1 1 MPIDDP_MAX_OPEN_SHARDS=16 -- --batch-size 8
pair global4 4 MPIDDP_MAX_SHARD_MAPS=40 -- --batch-size 4
pair shard2 2 MPIDDP_MAX_OPEN_SHARDS=12 -- --batch-size 8 --sampling shard
pair block4 4 MPIDDP_MAX_OPEN_SHARDS=16 MPIDDP_MAX_SHARD_MAPS=48 -- --batch-size 4 --shuffle block --shuffle-window 8
pair rows2 2 MPIDDP_MAX_OPEN_SHARDS=16 -- --batch-rows 8
[ "$(cache open_files_limit global2)" = 256 ] || fail "global2: open_files_limit $(cache open_files_limit global2), expected 256"
[ "$(cache train.limited_by global2)" = RLIMIT_NOFILE ] || fail "global2: limited by $(cache train.limited_by global2)"

# shards read through HDF5 (gzip features: no worker thread) and shards whose index arrays HDF5 converts (big-endian:
# read once in the main thread, kept when the LRU closes the shard, so the worker reopens by mapping only), 2 open
$PY "$SRC/tests/py/make_shards.py" variants rv >/dev/null
for d in h5py_gzip bigendian; do
  rvc=(--device cpu --train "rv/$d" --val rv/one_shard --epochs 2 --batch-size 1 --hidden 8 --no-progress)
  mpirun_np 2 "$MPIDDP" train "${rvc[@]}" --out "ref_$d" >/dev/null 2>&1
  MPIDDP_MAX_OPEN_SHARDS=2 mpirun -np 2 --oversubscribe -x MPIDDP_MAX_OPEN_SHARDS "$MPIDDP" train "${rvc[@]}" --out "$d" >/dev/null 2>&1 ||
    fail "$d: the bounded run failed"
  "$PY" "$SRC/tests/py/compare_ckpt.py" "ref_$d/checkpoints/last.h5" "$d/checkpoints/last.h5" 0 >/dev/null || fail "$d: not bitwise equal"
  [ "$(cache peak_open_shards "$d")" -le 2 ] && [ "$(cache over_budget_opens "$d")" = 0 ] && [ "$(cache evictions "$d")" -gt 50 ] ||
    fail "$d: peak $(cache peak_open_shards "$d") shards, $(cache over_budget_opens "$d") over the budget, $(cache evictions "$d") evictions"
  echo "$d: bitwise equal with 2 shards open at most ($(cache evictions "$d") evictions)"
done

# a soft RLIMIT_NOFILE below the hard one is raised to it at start, and run.json says so
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -gt 300 ]; then
  ( ulimit -Sn 200; mpirun_np 1 "$MPIDDP" train "${COMMON[@]}" --batch-size 8 --epochs 1 --out soft >/dev/null )
  [ "$(cache open_files_limit_at_start soft)" = 200 ] && [ "$(cache open_files_limit soft)" = "$hard" ] &&
    [ "$(cache open_files_limit_raised soft)" = True ] || fail "soft limit 200 not raised to the hard $hard"
  echo "soft open-file limit 200 raised to the hard $hard"
fi

# a batch that needs more shards at once than the budget allows: refused before the epoch (validation's, which is
# checked first, or training's), one line naming the limit
expect_rc 1 env MPIDDP_MAX_OPEN_SHARDS=8 mpirun -np 2 --oversubscribe -x MPIDDP_MAX_OPEN_SHARDS "$MPIDDP" train "${COMMON[@]}" --batch-size 16 --out refused
line='mpiddp train: error: [tv]: the batch of step 0 (epoch 0) on rank [01] reads [0-9]* shard files at once, more than the 7 the open-shard budget allows (MPIDDP_MAX_OPEN_SHARDS=8); raise MPIDDP_MAX_OPEN_SHARDS, or lower --batch-size/--batch-rows'
[ "$(grep -c "open-shard budget" <<< "$ERR")" = 1 ] && grep -qx -- "$line" <<< "$ERR" || { echo "$ERR" >&2; fail "refusal line: $line"; }
set +e; ( ulimit -n 100; mpirun -np 2 --oversubscribe "$MPIDDP" train "${COMMON[@]}" --batch-size 64 --out refused2 ) > r2.out 2> r2.err; rc=$?; set -e
[ "$rc" = 1 ] && grep -q "open-shard budget allows (RLIMIT_NOFILE 100 (ulimit -n): [0-9]* descriptors left for shards); raise the hard open-file limit" r2.err ||
  { cat r2.err >&2; fail "refusal under ulimit -n 100 (rc $rc)"; }
echo "refused: $(grep -o "error: .*" r2.err | head -1)"

# a shard truncated after the LRU closed and reopened it: the SIGBUS line still names the file. 6 shards of ~0.8 MiB,
# read one after the other (--shuffle block, one block per shard, window 1), 2 open at most: each is closed when
# the order moves on and reopened later. The watcher truncates the first shard once it saw it mapped, unmapped and
# mapped again for a while in the rank (else the reopen itself finds the size changed: another line).
synth --out s --samples 1200 --dim 64 --classes 4 --min-rows 16 --max-rows 16 --shards 6 --seed 3
synth --out sv --samples 16 --dim 64 --classes 4 --min-rows 16 --max-rows 16 --shards 1 --seed 3 --first-id 100000
shard=$(ls s/*.h5 | head -1)
MPIDDP_MAX_OPEN_SHARDS=2 MPIDDP_TEST_STEP_DELAY_MS=20 mpirun -np 1 -x MPIDDP_MAX_OPEN_SHARDS -x MPIDDP_TEST_STEP_DELAY_MS \
  "$MPIDDP" train --device cpu --train s --val sv --out trunc --epochs 1000 --batch-size 2 --hidden 16 --shuffle block \
  --shuffle-window 1 --no-progress > trunc.out 2> trunc.err &
job=$!
"$PY" - "$WORK" "$MPIDDP" "$WORK/$shard" $job <<'EOF' || { kill $job 2>/dev/null || true; cat trunc.err >&2; fail "the shard was not closed and reopened in time"; }
import os, sys, time
work, exe, path, job = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
seen, t0 = [], time.time()
while time.time() - t0 < 90 and os.path.exists(f"/proc/{job}"):
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")[0].decode() != exe or os.readlink(f"/proc/{p}/cwd") != work:
                continue
            mapped = any(path in line for line in open(f"/proc/{p}/maps"))
        except (OSError, IndexError):
            continue
        if not seen or seen[-1] != mapped:
            seen.append(mapped)
            since = time.time()
        # mapped again, and for 0.3 s: the shard being read (not a read-ahead open the next batch closes again)
        if seen[-3:] == [True, False, True] and time.time() - since > 0.3:
            os.truncate(path, 8192)
            print("truncated after a close and a reopen")
            sys.exit(0)
    time.sleep(0.002)
sys.exit(1)
EOF
start=$(date +%s) ended=0
for _ in $(seq 200); do kill -0 $job 2>/dev/null || { ended=1; break; }; sleep 0.1; done
[ "$ended" = 1 ] || { kill $job || true; wait $job 2>/dev/null || true; cat trunc.err >&2; fail "the job still ran 20 s after the truncation"; }
set +e; wait $job; rc=$?; set -e
[ "$rc" != 0 ] || fail "the job exited 0 after its shard was truncated"
tline="mpiddp: rank 0: error: $shard: \\(features\\|offsets\\|labels\\|sample_ids\\): the file changed while mapped (read at byte offset [0-9]*, file is now 8192 bytes; was the dataset regenerated or truncated?)"
grep -qx -- "$tline" trunc.err || { cat trunc.err >&2; fail "the SIGBUS line after a reopen does not match: $tline"; }
echo "after a close and a reopen: $(grep "changed while mapped" trunc.err) ($(( $(date +%s) - start )) s)"
pass "3000 shards under a budget of 10-16 open shards: bitwise equal in every sampling mode, peaks within the budget, limits raised and named"

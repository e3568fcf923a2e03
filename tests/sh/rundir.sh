# One run per run directory (issue #31 items 1, 2, 5): a copied, moved or elsewhere-resumed run never
# deletes the original's checkpoints; a new run into a finished run is refused and touches nothing;
# --overwrite removes exactly the run's files; two live runs exclude each other through the lock; a lock
# of a killed job never blocks the next; decisions.log never records a save that failed; a partial
# metrics.csv row is dropped on resume, not parsed into a bogus row.
. "$(dirname "$0")/lib.sh"
synth --out t --samples 240 --dim 8 --classes 3 --shards 2 --seed 3
synth --out v --samples 60 --dim 8 --classes 3 --shards 1 --seed 3 --first-id 9000
base=(--train t --val v --batch-size 8 --lr 0.01 --hidden 16 --no-progress --device cpu)
sums() { (cd "$1" && find . -type f ! -name run.lock -print0 | sort -z | xargs -0 md5sum); }
topk_files() { find "$1/checkpoints" -name 'epoch=*.h5' | wc -l; }

# 1a. a copied run resumed (np 2): the original's checkpoints stay as they were, the copy keeps top-k 1
mkdir runs
mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 2 --out runs/orig >/dev/null
sums runs/orig > orig.sums
cp -r runs/orig runs/branch
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 5 --out runs/branch --resume auto
sums runs/orig | diff orig.sums - >/dev/null || fail "resuming a copy changed the original run's files"
[ "$(topk_files runs/branch)" = 1 ] || fail "the resumed copy keeps $(topk_files runs/branch) top-k files (--save-top-k 1)"
pass "copied run"

# 1b. a moved run, resumed from another working directory through a relative --out (np 1)
mpirun_np 1 "$MPIDDP" train "${base[@]}" --epochs 2 --out runs/m0 >/dev/null
mv runs/m0 runs/moved
mkdir -p elsewhere/deeper
(cd elsewhere/deeper && expect_rc 0 mpirun_np 1 "$MPIDDP" train --train ../../t --val ../../v --batch-size 8 --lr 0.01 --hidden 16 \
  --no-progress --device cpu --epochs 5 --out ../../runs/moved --resume auto)
[ "$(topk_files runs/moved)" = 1 ] || fail "moved run: $(topk_files runs/moved) top-k files (--save-top-k 1)"
[ -z "$(find elsewhere -type f)" ] || fail "a resume from another directory wrote outside its run: $(find elsewhere -type f)"
pass "moved run, resumed from another working directory"

# 1c. a checkpoint of an older mpiddp (top-k paths as --out was typed, here the original's) in a copy: the
#     entries map to the copy's own files, nothing of the original is deleted (np 4)
mpirun_np 4 "$MPIDDP" train "${base[@]}" --epochs 2 --out runs/old >/dev/null
cp -r runs/old runs/oldcopy
sums runs/old > old.sums
$PY - runs/oldcopy/checkpoints/last.h5 "$WORK/runs/old" <<'PY' || fail "could not write an old-style top-k list"
import h5py, json, numpy, sys
with h5py.File(sys.argv[1], "r+") as f:
    t = json.loads(f.attrs["topk"])
    assert t, "no top-k entry to rewrite"
    for e in t:
        e[3] = sys.argv[2] + "/checkpoints/" + e[3].split("/")[-1]  # absolute, into the original run
    del f.attrs["topk"]
    f.attrs["topk"] = numpy.bytes_(json.dumps(t))  # fixed-length, as mpiddp writes it
PY
expect_rc 0 mpirun_np 4 "$MPIDDP" train "${base[@]}" --epochs 5 --out runs/oldcopy --resume auto
sums runs/old | diff old.sums - >/dev/null || fail "an old-style top-k list made the copy delete the original's checkpoints"
[ "$(topk_files runs/oldcopy)" = 1 ] || fail "old-style copy: $(topk_files runs/oldcopy) top-k files (--save-top-k 1)"
pass "old checkpoints' top-k paths"

# 2a. a new run into a finished run: refused in one line, exit 2, on every rank count, nothing touched
for np in 1 2 4; do
  sums runs/orig > before.sums
  expect_rc 2 mpirun_np $np "$MPIDDP" train "${base[@]}" --epochs 1 --out runs/orig
  printf '%s' "$ERR" | qgrep "runs/orig holds a run (run.json): continue it with --resume auto" || fail "np $np refusal: $ERR"
  [ "$(printf '%s\n' "$ERR" | grep -c 'mpiddp train')" = 1 ] || fail "np $np refusal is not one line: $ERR"
  sums runs/orig | diff before.sums - >/dev/null || fail "np $np: the refused run touched the old run's files"
done
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${base[@]}" --out runs/orig --overwrite --resume auto
printf '%s' "$ERR" | qgrep -- "--resume and --overwrite: give one" || fail "--resume with --overwrite: $ERR"
pass "a finished run is refused"

# 2a'. the same refusals to a C-API program (testtool busy: ddp_train with a ddp_train_config): the line names the
#      fields it sets (cfg.out_dir, cfg.resume, cfg.overwrite), not the CLI's options, whose wording is checked above
#      (and in rundir_resume.sh, messages.sh, faults.sh). Before, a C-API program was told to pass --overwrite.
api() { # api NP LINE OUT [RESUME]: testtool busy (the sets t, v) refused (exit 0) with exactly LINE on stdout, no CLI option in it
  local np=$1 line=$2; shift 2
  expect_rc 0 mpirun_np "$np" "$TESTTOOL" busy t v "$@"
  [ "$OUT" = "$line" ] || fail "C API, busy $*: '$OUT' (stderr: $ERR)"
  ! qgrep -E -- '--(out|resume|overwrite)' <<<"$OUT$ERR" || fail "C API, busy $*: names a CLI option: $OUT $ERR"
}
api 2 "runs/orig holds a run (run.json): continue it with cfg.resume = \"auto\", start afresh with a new cfg.out_dir, or set cfg.overwrite = 1 to remove that run's files first" runs/orig
api 1 "runs/orig holds a run (run.json) and cfg.resume = \"other.h5\" is not one of its checkpoints: continue this run with cfg.resume = \"auto\" (runs/orig/checkpoints/last.h5), resume into a new cfg.out_dir (the run continues there), or from a checkpoint in runs/orig/checkpoints" runs/orig other.h5
mkdir -p apirun && echo '{}' >apirun/run.json
api 1 "apirun holds a run (run.json) but no checkpoints/last.h5 to resume from: start over with cfg.overwrite = 1, resume from one of its checkpoints with cfg.resume = its path, or choose a new cfg.out_dir" apirun auto
$PY -c 'import fcntl, sys, time
f = open(sys.argv[1], "a"); fcntl.lockf(f, fcntl.LOCK_EX); print("locked", flush=True); time.sleep(60)' apirun/run.lock >locker.out &
locker=$!
wait_for locker.out
for _ in $(seq 100); do [ -s locker.out ] && break; sleep 0.1; done
api 1 "apirun: the run directory is in use by another run (a process that has not written its name yet); wait for it to end, or choose another cfg.out_dir" apirun
kill "$locker"
set +e; wait "$locker"; set -e
pass "a C-API program's run-directory refusals name ddp_train_config's fields"

# 2b. --overwrite removes the run's files, and only those
echo mine > runs/branch/notes.txt
cp runs/branch/checkpoints/last.h5 runs/branch/checkpoints/my-copy.h5
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 1 --out runs/branch --overwrite
[ "$(cat runs/branch/notes.txt)" = mine ] && [ -f runs/branch/checkpoints/my-copy.h5 ] || fail "--overwrite removed a file it does not own"
[ "$(grep -c . runs/branch/checkpoints/decisions.log)" = 1 ] || fail "--overwrite kept the old decisions.log"
[ "$(awk -F, 'NR>1{print $1}' runs/branch/metrics.csv | sort -u)" = 0 ] || fail "--overwrite kept old metrics rows"
[ "$(topk_files runs/branch)" = 1 ] || fail "--overwrite kept the old top-k files"
pass "--overwrite"

# 2c. two live runs: the second is refused in one line naming the holder's host and PID (np 2 and 4), with
#     and without --resume; the first finishes untouched
MPIDDP_TEST_STEP_DELAY_MS=40 mpirun -np 2 --oversubscribe "$MPIDDP" train "${base[@]}" --epochs 500 --out live > live.out 2>&1 &
first=$!
wait_for live/metrics.csv
holder=$(rank_pid 0)
for np in 2 4; do
  for extra in "" "--resume auto"; do
    # shellcheck disable=SC2086
    expect_rc 2 mpirun_np $np "$MPIDDP" train "${base[@]}" --epochs 2 --out live $extra
    printf '%s' "$ERR" | qgrep "live: the run directory is in use by another run (host $(hostname), PID $holder, since" \
      || fail "np $np second run ($extra): $ERR"
  done
done
kill -USR1 $first # still alive after the four refusals: stop it cleanly
wait $first || fail "the first run failed beside the refused ones: $(cat live.out)"
grep -q "stopped on request" live.out || fail "the first run was not running any more: $(cat live.out)"
[ "$(sort live/checkpoints/decisions.log | uniq -d | wc -l)" = 0 ] || fail "decisions.log has duplicated lines"
awk -F, 'NR > 1 && $2 < last {bad = 1} NR > 1 {last = $2} END {exit bad}' live/metrics.csv || fail "metrics.csv has interleaved rows"
[ "$(awk -F, 'NR > 1' live/metrics.csv | sort | uniq -d | wc -l)" = 0 ] || fail "metrics.csv has duplicated rows"
pass "the lock refuses a second live run"

# 2d. kill -9 of the whole job leaves a lock file behind that never blocks; kill -9 of mpirun alone leaves
#     ranks running a moment: a resume started at once waits for them, then continues bitwise exactly
mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 3 --out ref >/dev/null
for victim in job mpirun; do
  MPIDDP_TEST_STEP_DELAY_MS=40 mpirun -np 2 --oversubscribe "$MPIDDP" train "${base[@]}" --epochs 3 --ckpt-every-steps 5 --out k_$victim > k.out 2>&1 &
  job=$!
  wait_for k_$victim/checkpoints/last.h5
  r0=$(rank_pid 0) r1=$(rank_pid 1)
  if [ $victim = job ]; then kill -9 $job $r0 $r1; else kill -9 $job; fi
  wait $job 2>/dev/null || true
  [ -f k_$victim/run.lock ] || [ $victim = mpirun ] || fail "expected the killed job's lock file to stay behind"
  expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 3 --ckpt-every-steps 5 --out k_$victim --resume auto
  $PY "$SRC/tests/py/compare_ckpt.py" ref/checkpoints/last.h5 k_$victim/checkpoints/last.h5 0 \
    || fail "resume after kill -9 of the $victim is not bitwise exact"
  [ -z "$(find k_$victim -name '*.tmp*')" ] || fail "temporary files left after the resume: $(find k_$victim -name '*.tmp*')"
done
pass "a killed job's lock does not block; an immediate resume after kill -9 of mpirun is exact"

# 5. a failed save never reaches decisions.log; a partial metrics.csv row is dropped on resume
mnt=$WORK/full
mkdir -p "$mnt"
if mount -t tmpfs -o size=96k tmpfs "$mnt" 2>/dev/null; then
  trap 'umount "$mnt" 2>/dev/null || true' EXIT
  expect_rc 1 mpirun_np 2 "$MPIDDP" train "${base[@]}" --hidden 96 --epochs 1 --out "$mnt/run"
  umount "$mnt"; trap - EXIT
  how="96 KiB tmpfs"
else # no mount permission: the same failure through the file-size limit (SIGXFSZ ignored, writes fail EFBIG)
  expect_rc 1 bash -c "trap '' XFSZ; ulimit -f 96; exec mpirun -np 2 --oversubscribe '$MPIDDP' train ${base[*]} --hidden 96 --epochs 1 --out '$mnt/run'"
  how="96 KiB file-size limit"
fi
printf '%s' "$ERR" | qgrep "mpiddp train: error: .*$mnt/run/checkpoints/" || fail "disk full ($how): $ERR"
if [ -f "$mnt/run/checkpoints/decisions.log" ]; then
  ! grep -q "save" "$mnt/run/checkpoints/decisions.log" || fail "decisions.log records a save that failed ($how)"
fi
pass "a failed save is not logged ($how)"

mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 3 --out csvfull >/dev/null
mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 1 --out csvpart >/dev/null
printf '1,' >> csvpart/metrics.csv                        # a row cut short by a full disk
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 2 --out csvpart --resume auto
sed -i '$ s/,[^,]*$//' csvpart/metrics.csv && truncate -s -1 csvpart/metrics.csv   # a hand-truncated last row
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 3 --out csvpart --resume auto
cols() { awk -F, 'NR==1 {for (i = 1; i <= NF; i++) if ($i != "train/samples_per_s") keep[i] = 1}
  {s = ""; for (i = 1; i <= NF; i++) if (keep[i]) s = s $i ","; print s}' "$1" | sort; }
# every row is one of the uninterrupted run's; the one row cut by hand is the only one missing
[ -z "$(comm -13 <(cols csvfull/metrics.csv) <(cols csvpart/metrics.csv))" ] \
  || fail "rows no uninterrupted run writes: $(comm -13 <(cols csvfull/metrics.csv) <(cols csvpart/metrics.csv))"
[ "$(comm -23 <(cols csvfull/metrics.csv) <(cols csvpart/metrics.csv) | wc -l)" = 1 ] || fail "rows lost beyond the truncated one"
pass "partial metrics.csv rows dropped on resume"
# a metrics file whose header line was lost or edited (a spreadsheet's save, a hand edit): its rows cannot be told
# apart, and the resume once rewrote the file without any of them; it is refused, naming the file, which stays
# (metrics.csv, rank 0's; metrics_rank1.csv, rank 1's own)
mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 2 --log-per-rank --out csvhdr >/dev/null
for f in metrics.csv metrics_rank1.csv; do
  cp "csvhdr/$f" "csvhdr/$f.orig"
  sed -i 1d "csvhdr/$f"
  before=$(md5sum < "csvhdr/$f")
  expect_rc 1 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 3 --log-per-rank --out csvhdr --resume auto
  printf '%s' "$ERR" | qgrep "mpiddp train: error: csvhdr/$f: its first line is not a metrics header" ||
    fail "$f without its header: $ERR"
  [ "$(md5sum < "csvhdr/$f")" = "$before" ] || fail "the refused resume changed $f"
  mv "csvhdr/$f.orig" "csvhdr/$f"
done
# a column a user added by hand holding text: refused, naming line and column (its cells were rewritten as 0)
cp csvhdr/metrics.csv csvhdr/metrics.csv.orig
sed -i -e '1 s/$/,note/' -e '2,$ s/$/,x/' csvhdr/metrics.csv
before=$(md5sum < csvhdr/metrics.csv)
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 3 --log-per-rank --out csvhdr --resume auto
printf '%s' "$ERR" | qgrep "mpiddp train: error: csvhdr/metrics.csv: line 2, column 'note': 'x' is not a number" ||
  fail "a text cell in metrics.csv: $ERR"
[ "$(md5sum < csvhdr/metrics.csv)" = "$before" ] || fail "the refused resume changed metrics.csv"
mv csvhdr/metrics.csv.orig csvhdr/metrics.csv
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 3 --log-per-rank --out csvhdr --resume auto
pass "a metrics file without its header or with a text cell: the resume is refused, the file kept"

# --overwrite removes files of the exact forms a run writes (top-k names with any %g number: negative, exponent,
# nan, inf; save temporaries NAME.tmp.PID), never a user's file that only looks like one
mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 2 --log-per-rank --out globs >/dev/null
best=$(cd globs/checkpoints && ls epoch=*.h5)
mine=("checkpoints/${best%.h5}-BEST-keep.h5" "checkpoints/${best}.bak" "checkpoints/last.h5.tmp.x1" metrics_rank1-from-first-run.csv
  metrics_rank.csv metrics_rank1.csv.old progress/rank1-notes.txt progress/rank run.json.bak "checkpoints/epoch=x-step=1-val_loss=1.h5")
theirs=("checkpoints/epoch=0-step=3-val_loss=-1.5e-05.h5" "checkpoints/epoch=1-step=4-val_acc=nan.h5"
  "checkpoints/epoch=2-step=5-val_loss=-inf.h5" "checkpoints/epoch=0-step=3-val_loss=1e+10.h5.tmp.123"
  checkpoints/last.h5.tmp.99 metrics_rank12.csv.tmp run.json.tmp)
mkdir -p globs/progress
for f in "${mine[@]}" "${theirs[@]}"; do echo x >"globs/$f"; done
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 1 --out globs --overwrite
for f in "${mine[@]}"; do [ -e "globs/$f" ] || fail "--overwrite deleted the user's $f"; done
for f in "${theirs[@]}"; do [ ! -e "globs/$f" ] || fail "--overwrite kept the run file $f"; done
[ ! -e "globs/checkpoints/$best" ] && [ ! -e globs/metrics_rank1.csv ] || fail "--overwrite kept the first run's files"
pass "--overwrite removes the run's files by their exact forms"

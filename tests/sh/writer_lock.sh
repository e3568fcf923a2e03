# One writer per dataset directory (docs/dataset-format.md#one-writer-per-directory): while a synth writes into --out
# (its shard temporaries, then its shards and its manifest), a second synth, a pack (alone or under mpirun) or an
# index of that directory is refused with one line naming the directory and the holder, and touches nothing there;
# the first completes and its dataset validates. Concurrent indexes share the lock; a leftover lock file (a killed
# writer's) refuses nothing, and a holder that is ending is waited for. Before, a second synth into an --out without
# shards removed the first's shard temporaries (and wrote shards of its own among the first's), and an index rewrote
# the manifest of a dataset being written.
. "$(dirname "$0")/lib.sh"
host=$(hostname)
# finish_held PID WHAT LOG: continues a writer held with SIGSTOP, waits for it and drops the trap that would end it;
# it must exit 0
finish_held() {
  kill -CONT "$1"
  set +e; wait "$1"; local rc=$?; set -e
  trap - EXIT
  [ "$rc" = 0 ] || fail "$2 failed ($rc): $(cat "$3")"
}
shtmp() { if [ -d "$1" ]; then find "$1" -maxdepth 1 -name '.shard-*.h5.tmp.*' | wc -l; else echo 0; fi; }
# refused TOOL ARGS...: exit non-zero with one line "d: the dataset directory is in use by another run (mpiddp synth,
# host H, PID $pid, since ...)" on stderr
refused() {
  expect_rc 1 "$@"
  qgrep -E "^mpiddp [a-z]+: error: big: the dataset directory is in use by another run \(mpiddp synth, host $host, PID $pid, since [^)]+\); wait for it to end" <<<"$ERR" ||
    fail "$*: not refused as expected: $ERR"
}

# a slow synth: 8000 samples of up to 64 x 64 floats per shard, then a manifest rename held back 12 s
MPIDDP_TEST_MANIFEST_DELAY_MS=12000 "$MPIDDP" synth --out big --samples 8000 --dim 64 --shards 2 --seed 3 >first.out 2>&1 &
pid=$!
trap 'kill -CONT "$pid" 2>/dev/null; kill "$pid" 2>/dev/null || true' EXIT # a failed check leaves no stopped synth
for _ in $(seq 3000); do [ "$(shtmp big)" = 0 ] || break; sleep 0.005; done
[ "$(shtmp big)" != 0 ] || fail "no shard temporary of the first synth seen: $(ls -a big; cat first.out)"
# stopped while the refusals run, so that a loaded machine cannot let it finish first (a stopped process keeps its lock)
kill -STOP "$pid"
refused "$MPIDDP" synth --out big --samples 20 --dim 4 --shards 2 --no-manifest
[ "$(shtmp big)" != 0 ] || [ -e big/shard-00000.h5 ] || fail "the second synth removed the first's temporaries"
pass "a second synth while the first writes its shard temporaries is refused, and leaves them"
refused mpirun_np 2 "$MPIDDP" synth --out big --samples 20 --dim 4 --shards 2 --no-manifest
[ "$(grep -c 'in use by another run' <<<"$ERR")" = 1 ] || fail "mpirun synth: not one line: $ERR"
refused mpirun_np 2 "$MPIDDP" pack --input nowhere.h5 --out big
pass "synth and pack under mpirun are refused on every rank with one line"
kill -CONT "$pid"
for _ in $(seq 600); do [ -e big/shard-00001.h5 ] && [ -e big/shard-00000.h5 ] && break; sleep 0.05; done
kill -STOP "$pid" # within its 12 s before the manifest
[ ! -e big/mpiddp-manifest.bin ] || fail "the first synth wrote its manifest before the index could be tried"
refused "$MPIDDP" index big
refused mpirun_np 2 "$MPIDDP" index big
[ ! -e big/mpiddp-manifest.bin ] || fail "an index wrote the manifest of a dataset being written"
pass "an index of a directory being written is refused"
finish_held "$pid" "the first synth" first.out
[ ! -e big/mpiddp-dataset.lock ] || fail "the lock file stayed: $(ls -a big)"
[ "$(ls -A big | tr '\n' ' ')" = "mpiddp-manifest.bin shard-00000.h5 shard-00001.h5 " ] || fail "big: $(ls -A big)"
expect_rc 0 "$MPIDDP" inspect big
qgrep "samples 8000 " <<<"$OUT" || fail "the first synth's dataset: $OUT"
pass "the first synth completes, its dataset valid, no lock file left"

# a killed writer's lock file (its holder line, no process holding it) refuses nothing: synth, index, pack's refusal
# of shards come as before; concurrent indexes share the lock
mkdir -p stale && echo "mpiddp synth, host $host, PID 999999, since then" >stale/mpiddp-dataset.lock
expect_rc 0 "$MPIDDP" synth --out stale --samples 40 --dim 4 --shards 2
[ ! -e stale/mpiddp-dataset.lock ] || fail "the stale lock file stayed after synth"
echo "mpiddp synth, host $host, PID 999999, since then" >stale/mpiddp-dataset.lock
expect_rc 0 mpirun_np 2 "$MPIDDP" index stale
[ ! -e stale/mpiddp-dataset.lock ] || fail "index left the stale lock file"
MPIDDP_TEST_MANIFEST_DELAY_MS=3000 "$MPIDDP" index stale >idx.out 2>&1 &
ipid=$!
for _ in $(seq 300); do [ -e stale/mpiddp-dataset.lock ] && break; sleep 0.01; done
expect_rc 0 "$MPIDDP" index stale
expect_rc 1 "$MPIDDP" synth --out stale --samples 40 --dim 4 --shards 2
qgrep -E "^mpiddp synth: error: stale: the dataset directory is in use by another run \(mpiddp index, PID $ipid\)" <<<"$ERR" ||
  fail "synth beside an index: $ERR"
wait "$ipid" || fail "the first index failed: $(cat idx.out)"
[ ! -e stale/mpiddp-dataset.lock ] || fail "the lock file stayed after the indexes: $(ls -a stale)"
pass "a stale lock file refuses nothing; indexes share the lock, a writer beside them is refused"

# a file system without POSIX locks (MPIDDP_TEST_NOLOCK=1: taking the lock fails with ENOLCK): a synth is refused
# with one line and leaves the file system as it found it: no --out it created, no lock file in an --out that was
# there; an index goes on without the lock, leaving no lock file either. Before, the lock file it had created stayed,
# and so did the --out around it.
nolock_line="nl/new/mpiddp-dataset.lock: cannot lock (No locks available): a dataset directory needs a file system with POSIX locks"
expect_rc 1 env MPIDDP_TEST_NOLOCK=1 "$MPIDDP" synth --out nl/new --samples 20 --dim 4 --shards 2
[ "$ERR" = "mpiddp synth: error: $nolock_line" ] || fail "synth without locks: $ERR"
[ ! -e nl ] || fail "a synth refused for want of locks left $(find nl)"
expect_rc 1 env MPIDDP_TEST_NOLOCK=1 mpirun -np 2 --oversubscribe -x MPIDDP_TEST_NOLOCK "$MPIDDP" synth --out nl/new --samples 20 --dim 4 --shards 2
[ "$(grep -c 'cannot lock (No locks available)' <<<"$ERR")" = 1 ] || fail "mpirun synth without locks: not one line: $ERR"
[ ! -e nl ] || fail "an mpirun synth refused for want of locks left $(find nl)"
mkdir -p there
expect_rc 1 env MPIDDP_TEST_NOLOCK=1 "$MPIDDP" synth --out there --samples 20 --dim 4 --shards 2
[ -d there ] && [ -z "$(ls -A there)" ] || fail "a synth refused for want of locks left $(ls -A there) in an --out that was there"
expect_rc 0 env MPIDDP_TEST_NOLOCK=1 "$MPIDDP" index stale
[ ! -e stale/mpiddp-dataset.lock ] || fail "an index without locks left a lock file"
pass "without POSIX locks a synth is refused in one line and leaves no directory or lock file; an index goes on"

# a holder that is finishing is waited for (about 1 s), not named: an index removing the lock file upgrades its lock
# to exclusive first, and a newcomer in that window saw an exclusive lock and named the writer line the file held (a
# killed writer's, or none). Played here by a process that holds an exclusive lock on a file with a stale writer line
# for 0.4 s and then removes it, as an index ends; the index beside it waits and runs. Before, it was refused naming
# the stale writer. A shared lock is named as an index whatever the file holds.
hold() { # hold DIR LOCKTYPE SECONDS: lock DIR/mpiddp-dataset.lock (holding a stale writer line), then remove it
  mkdir -p "$1" && echo "mpiddp synth, host $host, PID 999999, since then" >"$1/mpiddp-dataset.lock"
  rm -f held
  $PY -c 'import fcntl, os, sys, time
fd = os.open(sys.argv[1] + "/mpiddp-dataset.lock", os.O_RDWR)
fcntl.lockf(fd, getattr(fcntl, sys.argv[2]) | fcntl.LOCK_NB)
open("held", "w").close()
time.sleep(float(sys.argv[3]))
os.unlink(sys.argv[1] + "/mpiddp-dataset.lock")' "$@" &
  hpid=$!
  for _ in $(seq 500); do [ -e held ] && return 0; sleep 0.01; done
  fail "the lock holder did not start"
}
hold stale LOCK_EX 0.4
expect_rc 0 "$MPIDDP" index stale
wait "$hpid" || fail "the exclusive holder failed"
hold fin LOCK_EX 0.4
expect_rc 0 "$MPIDDP" synth --out fin --samples 20 --dim 4 --shards 2
wait "$hpid" || fail "the exclusive holder failed"
[ ! -e fin/mpiddp-dataset.lock ] || fail "fin: the lock file stayed"
hold stale LOCK_SH 3
expect_rc 1 "$MPIDDP" synth --out stale --samples 40 --dim 4 --shards 2
qgrep -E "^mpiddp synth: error: stale: the dataset directory is in use by another run \(mpiddp index, PID $hpid\); wait" <<<"$ERR" ||
  fail "synth beside a shared lock over a stale writer line: $ERR"
wait "$hpid" || fail "the shared holder failed"
pass "a finishing holder is waited for; a shared lock is named as an index whatever its file holds"
# two indexes of one directory side by side, again and again: never refused (the window above is too short to hit
# reliably this way; this guards against a regression)
echo "mpiddp synth, host $host, PID 999999, since then" >stale/mpiddp-dataset.lock
loop() { for _ in $(seq 15); do "$MPIDDP" index stale >/dev/null 2>>"idx$1.err" || echo "refused" >>"idx$1.err"; done; }
rm -f idx1.err idx2.err
loop 1 & lpid=$!
loop 2
wait "$lpid"
[ ! -s idx1.err ] && [ ! -s idx2.err ] || fail "concurrent indexes refused: $(cat idx1.err idx2.err)"
pass "concurrent indexes are never refused"

# train and eval read a dataset under the shared lock of each dataset directory they read (--train, --val, --data),
# held for the run (docs/dataset-format.md#one-writer-per-directory): beside a writer they are refused like an index,
# one line on every rank and exit 1, before they read anything or make their --out; a run holding the lock refuses a
# synth or pack into its dataset directories, naming it, while an index runs beside it. Before, train and eval took no
# lock: they read a dataset being written, and a synth --out wrote into a dataset being trained on.
synth --out t --samples 240 --dim 8 --classes 3 --shards 2 --seed 3
synth --out v --samples 60 --dim 8 --classes 3 --shards 1 --seed 3 --first-id 9000
base=(--batch-size 8 --lr 0.01 --hidden 16 --no-progress --device cpu --epochs 1)
expect_rc 0 "$MPIDDP" train --train t --val v "${base[@]}" --out r0
[ ! -e t/mpiddp-dataset.lock ] && [ ! -e v/mpiddp-dataset.lock ] || fail "a train left a lock file: $(ls -A t v)"
MPIDDP_TEST_MANIFEST_DELAY_MS=12000 "$MPIDDP" synth --out wr --samples 60 --dim 8 --classes 3 --shards 1 --seed 3 \
  >wr.out 2>&1 &
pid=$!
for _ in $(seq 600); do [ -e wr/shard-00000.h5 ] && break; sleep 0.02; done
[ -e wr/shard-00000.h5 ] || fail "the slow synth wrote no shard: $(cat wr.out)"
kill -STOP "$pid" # held (with its lock) while the refusals run: a loaded machine cannot let it end first
trap 'kill -CONT "$pid" 2>/dev/null; kill "$pid" 2>/dev/null || true' EXIT
busy() { # busy CMD DIR ARGS...: refused with one line naming DIR and the synth holding it, exit 1, no --out made
  local cmd=$1 dir=$2; shift 2
  expect_rc 1 "$@"
  qgrep -E "^mpiddp $cmd: error: $dir: the dataset directory is in use by another run \(mpiddp synth, host $host, PID $pid, since [^)]+\); wait for it to end$" <<<"$ERR" ||
    fail "$*: not refused as expected: $ERR"
  [ "$(grep -c 'in use by another run' <<<"$ERR")" = 1 ] || fail "$*: not one line: $ERR"
  [ ! -e rx ] || fail "$*: made its --out: $(ls -A rx)"
}
busy train wr "$MPIDDP" train --train wr --val v "${base[@]}" --out rx
busy train wr mpirun_np 2 "$MPIDDP" train --train t --val wr "${base[@]}" --out rx
busy eval wr "$MPIDDP" eval --ckpt r0/checkpoints/last.h5 --data wr
busy eval wr mpirun_np 2 "$MPIDDP" eval --ckpt r0/checkpoints/last.h5 --data wr
finish_held "$pid" "the slow synth" wr.out
pass "train and eval of a directory being written are refused on every rank with one line"
# a training run stopped as training starts (rank 0 stops itself) holds its datasets' locks
mpirun_np 2 env MPIDDP_TEST_STOP_SELF_AT_START=0 "$MPIDDP" train --train t --val v "${base[@]}" --out r1 >r1.out 2>&1 &
job=$!
r0=
trap '[ -z "$r0" ] || kill -CONT "$r0" 2>/dev/null; kill "$job" 2>/dev/null || true' EXIT # no stopped rank left behind
r0=$(stopped_rank 0)
[ -n "$r0" ] && stopped "$r0" || fail "the run's rank 0 did not stop itself: $(cat r1.out)"
for d in t v; do
  expect_rc 1 "$MPIDDP" synth --out $d --samples 20 --dim 4 --shards 2
  qgrep -E "^mpiddp synth: error: $d: the dataset directory is in use by another run \(mpiddp train, PID $r0\); wait for it to end, or choose another --out$" <<<"$ERR" ||
    fail "synth --out $d beside a training run: $ERR"
done
expect_rc 1 mpirun_np 2 "$MPIDDP" pack --input nowhere.h5 --out t
qgrep -E "^mpiddp pack: error: t: the dataset directory is in use by another run \(mpiddp train, PID $r0\)" <<<"$ERR" ||
  fail "pack --out t beside a training run: $ERR"
[ "$(ls -A t | tr '\n' ' ')" = "mpiddp-dataset.lock mpiddp-manifest.bin shard-00000.h5 shard-00001.h5 " ] ||
  fail "t: $(ls -A t)"
expect_rc 0 "$MPIDDP" index v
kill -CONT "$r0"
wait "$job" || fail "the stopped run failed: $(cat r1.out)"
trap - EXIT
[ ! -e t/mpiddp-dataset.lock ] && [ ! -e v/mpiddp-dataset.lock ] || fail "a train left a lock file: $(ls -A t v)"
pass "a training run holds its datasets: a synth or pack into them is refused naming it, an index runs beside it"
# one directory as both --train and --val is locked once, released once; without POSIX locks a run reads as before
expect_rc 0 mpirun_np 2 "$MPIDDP" train --train v --val v "${base[@]}" --out r2
# ... however it is named (a symlink, an absolute path with a slash), and so is a directory whose lock file is a hard
# link of the other's: rank 0 holds one descriptor of the lock file. A process's fcntl locks on one file are one
# lock, which closing any of its descriptors drops: with two, the release of one left the directory unlocked while
# the run still read the other. Before, a directory was de-duplicated by its own identity only (a hard-linked lock
# file was locked twice).
ln -sfn v vl
cp -rp v v2
lockfds() { find "/proc/$1/fd" -lname "*/mpiddp-dataset.lock*" | wc -l; }
for pair in "vl $PWD/v/" "v v2"; do
  read -r a b <<<"$pair"
  echo "mpiddp synth, host $host, PID 999999, since then" >v/mpiddp-dataset.lock # a killed run's, hard-linked in v2
  ln -f v/mpiddp-dataset.lock v2/mpiddp-dataset.lock
  mpirun_np 1 env MPIDDP_TEST_STOP_SELF_AT_START=0 "$MPIDDP" train --train "$a" --val "$b" "${base[@]}" --out r2x \
    >r2x.out 2>&1 &
  job=$!
  r0=
  trap '[ -z "$r0" ] || kill -CONT "$r0" 2>/dev/null; kill "$job" 2>/dev/null || true' EXIT
  r0=$(stopped_rank 0)
  [ -n "$r0" ] && stopped "$r0" || fail "--train $a --val $b: rank 0 did not stop itself: $(cat r2x.out)"
  [ "$(lockfds "$r0")" = 1 ] || fail "--train $a --val $b: $(lockfds "$r0") descriptors of the dataset lock"
  expect_rc 1 "$MPIDDP" synth --out v --samples 20 --dim 4 --shards 2
  qgrep -E "^mpiddp synth: error: v: the dataset directory is in use by another run \(mpiddp train, PID $r0\)" <<<"$ERR" ||
    fail "synth --out v beside --train $a --val $b: $ERR"
  kill -CONT "$r0"
  wait "$job" || fail "--train $a --val $b failed: $(cat r2x.out)"
  trap - EXIT
  rm -rf r2x
done
[ ! -e v/mpiddp-dataset.lock ] || fail "v: the lock file stayed"
rm -rf v2 vl
pass "one directory however named, or a hard-linked lock file, is locked once by a run: one descriptor"
expect_rc 0 env MPIDDP_TEST_NOLOCK=1 "$MPIDDP" train --train t --val v "${base[@]}" --out r3
expect_rc 0 env MPIDDP_TEST_NOLOCK=1 "$MPIDDP" eval --ckpt r0/checkpoints/last.h5 --data v
[ ! -e t/mpiddp-dataset.lock ] && [ ! -e v/mpiddp-dataset.lock ] || fail "a lock file stayed: $(ls -A t v)"
pass "--train and --val one directory, and runs without POSIX locks, train as before"

# a run removes its lock files at its end only while their paths still name them: a dataset directory (or run
# directory) removed or moved while the run held it may hold another run's lock file by then, which stays. Before, a
# train deleted the lock file of a synth writing into a new directory of the old one's name, and an index of it then
# ran beside the writer (and so for the run lock).
cp -rp t t9
mpirun_np 1 env MPIDDP_TEST_STOP_SELF_AT_START=0 "$MPIDDP" train --train t9 --val v "${base[@]}" --out r9 >r9.out 2>&1 &
job=$!
r0=
trap '[ -z "$r0" ] || kill -CONT "$r0" 2>/dev/null; kill "$job" 2>/dev/null || true' EXIT
r0=$(stopped_rank 0)
[ -n "$r0" ] && stopped "$r0" || fail "the run's rank 0 did not stop itself: $(cat r9.out)"
mv t9 t9.old
mv r9 r9.old
mkdir r9 && echo "mpiddp train, host $host, PID 999999, since then" >r9/run.lock
MPIDDP_TEST_MANIFEST_DELAY_MS=9000 "$MPIDDP" synth --out t9 --samples 20 --dim 4 --shards 1 >s9.out 2>&1 &
pid=$!
for _ in $(seq 500); do [ -e t9/mpiddp-dataset.lock ] && qgrep "PID $pid," t9/mpiddp-dataset.lock && break; sleep 0.01; done
qgrep "PID $pid," t9/mpiddp-dataset.lock || fail "the synth did not take its lock: $(cat s9.out)"
kill -STOP "$pid" # held with its lock until the index below has been refused
trap '[ -z "$r0" ] || kill -CONT "$r0" 2>/dev/null; kill "$job" 2>/dev/null; kill -CONT "$pid" 2>/dev/null; kill "$pid" 2>/dev/null || true' EXIT
kill -CONT "$r0"
set +e; wait "$job"; set -e # it reads a dataset that moved: how it ends does not matter here
[ -e t9/mpiddp-dataset.lock ] || fail "the ending train removed the lock file of the synth writing t9: $(cat r9.out)"
[ -e r9/run.lock ] || fail "the ending train removed r9/run.lock, which was not its own: $(cat r9.out)"
expect_rc 1 "$MPIDDP" index t9
qgrep -E "^mpiddp index: error: t9: the dataset directory is in use by another run \(mpiddp synth, host $host, PID $pid," <<<"$ERR" ||
  fail "an index beside the synth: $ERR"
finish_held "$pid" "the synth" s9.out
[ ! -e t9/mpiddp-dataset.lock ] || fail "t9: the synth left its lock file"
pass "a run leaves a lock file that is no longer its own: a directory moved while it ran stays locked by its new writer"

# a lock file left by another user's run (mode 0644 or 0444, held by nobody) does not stop a writer that cannot open
# it for writing: the writer removes it (the directory is writable) and takes the lock; one that another process
# holds names its holder as usual. Before, the writer failed "cannot create the dataset lock: Permission denied".
# Played by root's file and a writer run as user nobody.
asnobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME="$WORK/ow" "$@"; }
if [ "$(id -u)" = 0 ] && asnobody true 2>/dev/null; then
  mkdir -p ow/d && chmod 0777 ow ow/d # no sticky bit: nobody may remove root's file
  for mode in 0644 0444; do
    echo "mpiddp train, host $host, PID 999999, since then" >ow/d/mpiddp-dataset.lock
    chmod "$mode" ow/d/mpiddp-dataset.lock
    rm -f ow/d/*.h5 ow/d/mpiddp-manifest.bin
    expect_rc 0 asnobody "$MPIDDP" synth --out ow/d --samples 20 --dim 4 --shards 2
    [ ! -e ow/d/mpiddp-dataset.lock ] || fail "mode $mode: the lock file stayed: $(ls -la ow/d)"
  done
  hold ow/e LOCK_SH 3
  chmod 0777 ow/e
  expect_rc 1 asnobody "$MPIDDP" synth --out ow/e --samples 20 --dim 4 --shards 2
  qgrep -E "^mpiddp synth: error: ow/e: the dataset directory is in use by another run \(mpiddp index, PID $hpid\); wait" <<<"$ERR" ||
    fail "another user's held lock file: $ERR"
  [ -e ow/e/mpiddp-dataset.lock ] || fail "a held lock file was removed"
  wait "$hpid" || fail "the shared holder failed"
  pass "another user's lock file held by nobody is removed by a writer that cannot open it for writing"
else
  [ "$(id -u)" != 0 ] || fail "cannot run a process as user nobody (setpriv)"
  echo "SKIP: another user's lock file: not root, cannot run as another user"
fi

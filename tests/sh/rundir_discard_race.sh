# A run refused before it writes anything removes only what it created, also while another run waits for, or has
# just ended in, the same --out (docs/run-directory.md, "A refused run leaves nothing it created"): the waiting run
# still starts there, and a run that ended there keeps its progress board. Its own board goes only once every rank
# has closed its board file (NFS: .nfs* files).
. "$(dirname "$0")/lib.sh"
synth --out t --samples 240 --dim 8 --classes 3 --shards 2 --seed 3
synth --out v --samples 60 --dim 8 --classes 3 --shards 1 --seed 3 --first-id 9000
synth --out t3 --samples 48 --dim 8 --classes 3 --shards 1 --seed 5 # a smaller training set: a resume refused in run()
base=(--train t --val v --batch-size 8 --lr 0.01 --hidden 16 --no-progress --device cpu --epochs 2)
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=10 "$MPIDDP" train "${base[@]}" --out mid

# 1. run A creates race/sub, takes its lock and is refused (its resume position cannot be continued) while run B,
#    started into the same race/sub, waits for the lock: B starts there once A has ended. Before, A's rmdir of the
#    directory it had made left B's next attempt at the lock without a directory: "race/sub/run.lock: cannot create
#    the run lock: No such file or directory", exit 1.
mpirun_np 2 env MPIDDP_TEST_STOP_SELF_AT_START=1 "$MPIDDP" train --train t3 "${base[@]:2}" \
  --resume mid/checkpoints/last.h5 --out race/sub >a.out 2>a.err &
a=$!
victim=$(stopped_rank 1)
[ -n "$victim" ] && stopped "$victim" || fail "run A's rank 1 did not stop itself: $(cat a.err)"
[ -e race/sub/run.lock ] || fail "run A holds no lock in race/sub"
mpirun_np 1 "$MPIDDP" train "${base[@]}" --out race/sub >b.out 2>b.err &
b=$!
sleep 1.5 # B waits for the lock (up to 5 s)
kill -CONT "$victim"
set +e; wait $a; rca=$?; wait $b; rcb=$?; set -e
[ "$rca" = 1 ] && qgrep "resume position: .* cannot be continued exactly" a.err || fail "run A: exit $rca: $(cat a.err)"
[ "$rcb" = 0 ] || fail "run B, waiting for A's lock, exited $rcb: $(cat b.err)"
[ -f race/sub/run.json ] && [ -f race/sub/checkpoints/last.h5 ] || fail "run B's files: $(find race)"
pass "a run waiting for the lock of a refused run that made the directory starts there"

# 2. run A checks --out while run B holds its lock and has not yet started its progress board; A waits, B ends, A is
#    refused (the directory holds B's run): B's board (progress/rank0, progress/rank1) stays. Before, A took the
#    board for its own (progress/ was not there when it looked) and removed it. strace delays B's mkdir of progress/.
command -v strace >/dev/null || fail "strace is missing (scripts/deps.sh installs it)"
if strace -qq -o /dev/null true 2>/dev/null; then
  mpirun_np 2 strace -f -qq -o /dev/null -P board/progress -e trace=mkdir,mkdirat -e inject=all:delay_enter=1500ms \
    "$MPIDDP" train "${base[@]}" --collective-timeout 60 --out board >b.out 2>b.err &
  b=$!
  wait_for board/run.lock
  [ ! -e board/progress ] || fail "run B's board was there before A started"
  expect_rc 2 mpirun_np 1 "$MPIDDP" train "${base[@]}" --out board
  qgrep "board holds a run (run.json)" <<<"$ERR" || fail "run A: $ERR"
  set +e; wait $b; rcb=$?; set -e
  [ "$rcb" = 0 ] || fail "run B exited $rcb: $(cat b.err)"
  [ -f board/progress/rank0 ] && [ -f board/progress/rank1 ] || fail "a refused run removed the board of the run before it: $(find board)"
  pass "a refused run leaves the progress board of the run that ended in its --out"
else
  echo "SKIP: strace cannot trace here (ptrace denied: $(strace -qq -o /dev/null true 2>&1 | head -1)), section 2"
fi

# 3. a run refused after its progress board is open (its resume position cannot be continued) removes the board's
#    files only once every rank has closed its own: on NFS a file removed while a process of that client still holds
#    it open becomes a .nfs* file, and progress/ (and the --out the run made) stayed. strace holds rank 1's close of
#    its board file back 3 s; meanwhile no board file may be removed (here: no open descriptor of a deleted one).
#    Before, rank 0 removed progress/rank1 as soon as its own teardown was done.
if strace -qq -o /dev/null true 2>/dev/null; then
  brd="$WORK/disc/sub/progress/rank1"
  mpirun_np 2 strace -f -qq -o /dev/null -P "$brd" -e trace=close -e inject=close:delay_enter=3000ms \
    "$MPIDDP" train --train t3 "${base[@]:2}" --resume mid/checkpoints/last.h5 --collective-timeout 60 \
    --out disc/sub >a.out 2>a.err &
  a=$!
  open_deleted=
  while kill -0 "$a" 2>/dev/null; do
    for l in /proc/[0-9]*/fd/*; do
      case "$(readlink "$l" 2>/dev/null)" in "$WORK/disc/sub/progress/rank"*" (deleted)") open_deleted=$l ;; esac
    done
    sleep 0.05
  done
  set +e; wait $a; rca=$?; set -e
  [ "$rca" = 1 ] && qgrep "resume position: .* cannot be continued exactly" a.err || fail "refused run: exit $rca: $(cat a.err)"
  [ -z "$open_deleted" ] || fail "a board file was removed while a rank held it open ($open_deleted)"
  [ ! -e disc ] || fail "the refused run left what it created: $(find disc)"
  pass "a refused run removes its progress board only once every rank has closed its board file"
else
  echo "SKIP: strace cannot trace here, section 3"
fi

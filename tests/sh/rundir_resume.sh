# A resume into a run directory changes nothing until every check has passed, and touches only the run's own files:
# --resume auto without a last.h5 is refused (a SLURM restart of the same job starts again); a refused resume keeps
# the top-k files, run.json and the metric files as they were; a fork starts with an empty top-k list; a resume on
# fewer ranks trims every metrics_rank<R>.csv; ranks that see different SLURM_RESTART_COUNT values follow rank 0's; a
# refused resume leaves no directory it created (docs/run-directory.md, "One run per directory").
. "$(dirname "$0")/lib.sh"
synth --out t --samples 240 --dim 8 --classes 3 --shards 2 --seed 3
synth --out v --samples 60 --dim 8 --classes 3 --shards 1 --seed 3 --first-id 9000
synth --out t3 --samples 48 --dim 8 --classes 3 --shards 1 --seed 5 # a smaller training set, given by mistake
base=(--train t --val v --batch-size 8 --lr 0.01 --hidden 16 --no-progress --device cpu)
sums() { (cd "$1" && find . -type f ! -name run.lock ! -path './progress/*' -print0 | sort -z | xargs -0 md5sum); } # the live progress board aside
dups() { sort "$1" | uniq -d; }

# 1a. --resume auto into a run that never saved last.h5 (--fast-dev-run saves none): refused, nothing changed
mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 1 --fast-dev-run 3 --out fdr >/dev/null
sums fdr >fdr.sums
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 1 --out fdr --resume auto
grep -q "error: fdr holds a run (run.json) but no checkpoints/last.h5 to resume from: start over with --overwrite, resume from one of its checkpoints with --resume FILE, or choose a new --out" <<<"$ERR" ||
  fail "--resume auto without last.h5: $ERR"
sums fdr | diff fdr.sums - >/dev/null || fail "a refused --resume auto changed the run's files"
pass "--resume auto without last.h5 refused"

# 1b. rank 0 killed inside its first last.h5 save (after the epoch-0 top-k file): --resume auto is refused and names
#     the top-k file; resuming from it removes the stale temporary and keeps one line per decision
expect_rc 137 env MPIDDP_TEST_DIE_IN_SAVE=2 bash -c "mpirun -np 2 --oversubscribe '$MPIDDP' train ${base[*]} --epochs 2 --out killed >/dev/null 2>&1; exit 137"
[ ! -e killed/checkpoints/last.h5 ] && ls killed/checkpoints/last.h5.tmp.* >/dev/null 2>&1 || fail "killed save: $(ls killed/checkpoints)"
sums killed >killed.sums
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 2 --out killed --resume auto
topk=$(cd killed && ls checkpoints/epoch=0-*.h5)
grep -q "killed holds a run (run.json) but no checkpoints/last.h5 to resume from: .* --resume FILE (the newest: killed/$topk)" <<<"$ERR" ||
  fail "killed before the first last.h5: $ERR"
sums killed | diff killed.sums - >/dev/null || fail "a refused --resume auto changed the killed run's files"
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 2 --out killed --resume "killed/$topk"
! ls killed/checkpoints/*.tmp.* >/dev/null 2>&1 || fail "stale temporary kept: $(ls killed/checkpoints)"
[ -z "$(dups killed/checkpoints/decisions.log)" ] || fail "decisions.log repeats: $(cat killed/checkpoints/decisions.log)"
pass "killed before the first last.h5: refused, then resumed from its top-k file"
# the newest top-k file is the one of the highest step, not the one modified last (a copy, cp -r or rsync, resets
# the times): the epoch-0 file, touched last, was named
mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 3 --save-top-k 3 --out topk3 >/dev/null
rm topk3/checkpoints/last.h5
first=$(cd topk3 && ls checkpoints/epoch=0-*.h5)
newest=$(cd topk3 && ls checkpoints/epoch=2-*.h5)
touch "topk3/$first"
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 3 --save-top-k 3 --out topk3 --resume auto
qgrep -F "(the newest: topk3/$newest)" <<<"$ERR" || fail "the newest top-k file is the highest step's: $ERR"
pass "the newest top-k file named by its step"

# 1c. a requeued SLURM job (SLURM_RESTART_COUNT > 0, the job id run.json records) whose first attempt never saved
#     last.h5 starts again as that attempt did; another job's restart is refused
expect_rc 137 env MPIDDP_TEST_DIE_IN_SAVE=2 bash -c "mpirun -np 2 --oversubscribe -x SLURM_JOB_ID=4343 '$MPIDDP' train ${base[*]} --epochs 2 --out rq >/dev/null 2>&1; exit 137"
sums rq >rq.sums
expect_rc 2 mpirun_np 2 env SLURM_JOB_ID=4344 SLURM_RESTART_COUNT=1 "$MPIDDP" train "${base[@]}" --epochs 2 --out rq
grep -q "rq holds a run (run.json) but no checkpoints/last.h5 to resume from" <<<"$ERR" || fail "another job's restart: $ERR"
sums rq | diff rq.sums - >/dev/null || fail "a refused restart changed the run's files"
expect_rc 0 mpirun_np 2 env SLURM_JOB_ID=4343 SLURM_RESTART_COUNT=1 "$MPIDDP" train "${base[@]}" --epochs 2 --out rq
[ -e rq/checkpoints/last.h5 ] && ! ls rq/checkpoints/*.tmp.* >/dev/null 2>&1 || fail "restart: $(ls rq/checkpoints)"
[ "$(wc -l <rq/checkpoints/decisions.log)" = 2 ] && [ -z "$(dups rq/checkpoints/decisions.log)" ] ||
  fail "restart: decisions.log $(cat rq/checkpoints/decisions.log)"
pass "a requeued job's restart before its first save starts again"

# 1d. the ranks see different SLURM_RESTART_COUNT values (an MPMD launch, a user's environment on one rank): rank 0's
#     value applies on every rank, with one notice; before, each rank took its own path (rank 0 = 1: an MPI error on
#     rank 1; rank 0 = 0: a hang)
mpmd() { local r0=$1 r1=$2; shift 2
  expect_rc 0 timeout 60 mpirun --oversubscribe -np 1 env SLURM_RESTART_COUNT="$r0" "$MPIDDP" train "$@" : \
    -np 1 env SLURM_RESTART_COUNT="$r1" "$MPIDDP" train "$@"
  [ "$(grep -c "notice: the ranks see different SLURM_RESTART_COUNT values (0 to 1); rank 0's, $r0, applies on every rank" <<<"$ERR")" = 1 ] ||
    fail "MPMD restart counts $r0/$r1: $ERR"
}
expect_rc 0 mpirun_np 2 env SLURM_JOB_ID=4345 MPIDDP_TEST_STOP_AT_STEP=10 "$MPIDDP" train "${base[@]}" --epochs 2 --out mp
SLURM_JOB_ID=4345 mpmd 1 0 "${base[@]}" --epochs 2 --out mp --overwrite
grep -q "notice: a requeued job (SLURM_RESTART_COUNT=1) continues from mp/checkpoints/last.h5: --overwrite is not applied" <<<"$ERR" &&
  grep -q "resuming from mp/checkpoints/last.h5" <<<"$ERR" || fail "rank 0 restarted: $ERR"
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=10 "$MPIDDP" train "${base[@]}" --epochs 2 --out mp0
mpmd 0 1 "${base[@]}" --epochs 2 --out mp0 --overwrite
! grep -q "resuming from" <<<"$ERR" && grep -q "finished at epoch 1" <<<"$OUT" || fail "rank 0 first attempt: $OUT $ERR"
pass "SLURM_RESTART_COUNT: rank 0's value applies on every rank"

# 2. a lower --save-top-k on a resume that is then refused (a smaller --train by mistake: its epoch cannot continue
#    the saved position) deletes no top-k file; the resume that goes ahead deletes the dropped ones once last.h5 is
#    saved
b4=(--val v --batch-size 8 --lr 0.01 --hidden 16 --no-progress --device cpu --epochs 4)
topk_count() { find "$1/checkpoints" -name 'epoch=*.h5' | wc -l; }
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=50 "$MPIDDP" train --train t "${b4[@]}" --save-top-k 3 --out k3
[ "$(topk_count k3)" = 3 ] || fail "setup: $(ls k3/checkpoints)"
expect_rc 1 mpirun_np 2 "$MPIDDP" train --train t3 "${b4[@]}" --save-top-k 1 --out k3 --resume auto
grep -q "resume position: .* cannot be continued exactly" <<<"$ERR" || fail "mistaken resume: $ERR"
[ "$(topk_count k3)" = 3 ] || fail "a refused resume deleted top-k files: $(ls k3/checkpoints)"
expect_rc 0 mpirun_np 2 "$MPIDDP" train --train t "${b4[@]}" --save-top-k 1 --out k3 --resume auto
grep -q "notice: --save-top-k 1: kept the best 1 of the checkpoint's 3 top-k files" <<<"$ERR" || fail "lower top-k: $ERR"
[ "$(topk_count k3)" = 1 ] || fail "--save-top-k 1 on resume keeps $(ls k3/checkpoints)"
# the next save after such a resume is a top-k file, and the run dies in the last.h5 save after it: the dropped
# files went with that first save (it records the shorter list), none is left that no list names
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=35 "$MPIDDP" train --train t "${b4[@]}" --save-top-k 3 --out k3b
[ "$(topk_count k3b)" = 2 ] || fail "setup: $(ls k3b/checkpoints)"
expect_rc 137 env MPIDDP_TEST_DIE_IN_SAVE=2 bash -c "mpirun -np 2 --oversubscribe '$MPIDDP' train --train t ${b4[*]} --save-top-k 1 --out k3b --resume auto >/dev/null 2>&1; exit 137"
[ "$(topk_count k3b)" = 1 ] || fail "killed after its first top-k save, a --save-top-k 1 resume left $(ls k3b/checkpoints)"
pass "a refused resume with a lower --save-top-k deletes no top-k file"

# 3. a resume refused at its last check (the position: a smaller --train by mistake) writes nothing: run.json, the
#    metric files (rows past the checkpoint's step included), decisions.log and the save's stale temporary stay
expect_rc 137 env MPIDDP_TEST_DIE_IN_SAVE=3 bash -c "mpirun -np 2 --oversubscribe '$MPIDDP' train ${base[*]} --epochs 2 --log-every 1 --log-per-rank --ckpt-every-steps 5 --out pos >/dev/null 2>&1; exit 137"
sums pos >pos.sums
expect_rc 1 mpirun_np 2 "$MPIDDP" train --train t3 "${base[@]:2}" --epochs 2 --log-every 1 --log-per-rank --ckpt-every-steps 5 --out pos --resume auto
grep -q "resume position: .* cannot be continued exactly" <<<"$ERR" || fail "mistaken resume: $ERR"
sums pos | diff pos.sums - || fail "a refused resume changed the run's files"
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 2 --log-every 1 --log-per-rank --ckpt-every-steps 5 --out pos --resume auto
[ "$(awk -F, 'NR>1 && $3!=""' pos/metrics.csv | cut -d, -f2 | sort -un | wc -l)" = 30 ] &&
  [ "$(awk -F, 'NR>1 && $3!=""' pos/metrics.csv | wc -l)" = 30 ] || fail "resumed metrics.csv: $(cat pos/metrics.csv)"
pass "a refused resume writes nothing"

# 4. a fork (--resume OTHER/checkpoints/last.h5 --out NEW) starts with an empty top-k list: a user's copy of the
#    other run's best file in NEW/checkpoints is not the fork's to delete, and the summary names no file of the
#    other run; the other run stays as it was
mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 2 --out A >/dev/null
sums A >A.sums
best=$(cd A/checkpoints && ls epoch=*.h5)
mkdir -p B/checkpoints && cp "A/checkpoints/$best" "B/checkpoints/$best"
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 4 --out B --resume A/checkpoints/last.h5
cmp -s "A/checkpoints/$best" "B/checkpoints/$best" || fail "the fork deleted or changed the user's copy B/checkpoints/$best"
sums A | diff A.sums - >/dev/null || fail "the fork changed the run it resumed from"
path=$(sed -n 's/^mpiddp train: best checkpoint: \([^,;]*\),.*/\1/p' <<<"$OUT")
[ -z "$path" ] || [ -e "$path" ] || fail "the fork's summary names a file that does not exist: $OUT"
grep -q "best checkpoint: none kept in this run directory; best val/loss=" <<<"$OUT" || [ -n "$path" ] || fail "fork summary: $OUT"
# a fork that diverges (--lr 5) keeps no file worse than the best it carries, under every policy
abest=${best##*val_loss=}
abest=${abest%.h5}
for pol in reduced rank0 all; do
  rm -rf C && expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 4 --lr 5 --out C --resume A/checkpoints/last.h5 --ckpt-policy $pol
  path=$(sed -n 's/^mpiddp train: best checkpoint: \([^,;]*\),.*/\1/p' <<<"$OUT")
  [ -z "$path" ] || [ -e "$path" ] || fail "the fork's summary names a file that does not exist: $OUT"
  for f in C/checkpoints/epoch=*.h5; do
    [ -e "$f" ] || continue
    v=${f##*val_loss=}
    "$PY" -c "import sys; sys.exit(not float(sys.argv[1]) < float(sys.argv[2]))" "${v%.h5}" "$abest" ||
      fail "policy $pol: the fork kept $f, worse than the best it carries ($abest)"
  done
done
pass "a fork starts with an empty top-k list"

# 7. a resume on fewer ranks (--sampling global, the same global batch) trims metrics_rank<R>.csv of the ranks it no
#    longer has to the resumed step too: no row of the killed run past it stays
rb=(--train t --val v --lr 0.01 --hidden 16 --no-progress --device cpu --log-every 1 --log-per-rank --ckpt-every-steps 5 --epochs 1)
expect_rc 137 env MPIDDP_TEST_DIE_IN_SAVE=2 bash -c "mpirun -np 2 --oversubscribe '$MPIDDP' train ${rb[*]} --batch-size 8 --out fewer >/dev/null 2>&1; exit 137"
[ "$(awk -F, 'NR>1 && $2>5' fewer/metrics_rank1.csv | wc -l)" -gt 0 ] || fail "setup: no rows past step 5"
expect_rc 0 mpirun_np 1 "$MPIDDP" train "${rb[@]}" --batch-size 16 --out fewer --resume auto
grep -q "resuming from fewer/checkpoints/last.h5 .* step 5" <<<"$ERR" || fail "resume on 1 rank: $ERR"
[ "$(awk -F, 'NR>1 && $2>5' fewer/metrics_rank1.csv | wc -l)" = 0 ] || fail "metrics_rank1.csv keeps the killed run's rows: $(cat fewer/metrics_rank1.csv)"
[ "$(awk -F, 'NR>1 && $2<=5 && $3!=""' fewer/metrics_rank1.csv | wc -l)" = 5 ] || fail "metrics_rank1.csv lost rows: $(cat fewer/metrics_rank1.csv)"
pass "a resume on fewer ranks trims every metrics_rank<R>.csv"
# the progress board (--collective-timeout) holds records of this run's ranks only: a resume on fewer ranks removes
# the records of the ranks it no longer has (before, rank 2's and 3's stayed at the old step), and a resume without
# --collective-timeout removes the board
rp0=(--train t --val v --lr 0.01 --hidden 16 --no-progress --device cpu --epochs 1)
rp=("${rp0[@]}" --collective-timeout 60)
expect_rc 0 mpirun_np 4 env MPIDDP_TEST_STOP_AT_STEP=3 "$MPIDDP" train "${rp[@]}" --batch-size 4 --out board4
[ "$(ls board4/progress)" = "$(printf 'rank%s\n' 0 1 2 3)" ] || fail "setup: the board at np 4: $(ls board4/progress)"
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=5 "$MPIDDP" train "${rp[@]}" --batch-size 8 --out board4 --resume auto
[ "$(ls board4/progress)" = "$(printf 'rank%s\n' 0 1)" ] || fail "a resume on 2 ranks kept other ranks' records: $(ls board4/progress)"
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${rp0[@]}" --batch-size 8 --out board4 --resume auto
[ ! -e board4/progress ] || fail "a resume without --collective-timeout kept the board: $(ls board4/progress)"
# only the run's own board: a progress/ that is a link is not followed (its files are outside the run directory), and
# a fresh run leaves a progress/ the directory already had (the user's)
mkdir -p elsewhere && echo keep > elsewhere/rank0 && echo keep > elsewhere/rank3 && ln -s ../elsewhere board4/progress
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${rp0[@]}" --batch-size 8 --out board4 --resume auto --epochs 2
[ "$(cat elsewhere/rank0 elsewhere/rank3)" = "$(printf 'keep\nkeep')" ] || fail "a linked progress/ was followed: $(ls elsewhere)"
mkdir -p users/progress && echo mine > users/progress/rank0
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${rp0[@]}" --batch-size 8 --out users
[ "$(cat users/progress/rank0)" = mine ] || fail "a fresh run removed the directory's own progress/rank0"
pass "a resume on fewer ranks, or without --collective-timeout, removes the progress records it does not keep"

# 8. a resume refused before it writes anything (no such file, not a checkpoint, another model, a position the data
#    cannot continue) leaves nothing behind: an --out it created is gone again, with the parents it made and the
#    progress board; an --out that existed (empty) stays, empty. Before, the new directory stayed.
echo junk >notckpt.h5
expect_rc 0 mpirun_np 2 env MPIDDP_TEST_STOP_AT_STEP=10 "$MPIDDP" train "${base[@]}" --epochs 2 --out mid
refused() { local out=$1; shift
  expect_rc 1 mpirun_np 2 "$MPIDDP" train --val v --batch-size 8 --lr 0.01 --no-progress --device cpu --epochs 2 \
    --collective-timeout 30 --out "$out" "$@"
  grep -q "mpiddp train: error: " <<<"$ERR" || fail "$*: $ERR"
}
mkdir -p mine
for case in "--train t --hidden 16 --resume missing.h5" "--train t --hidden 16 --resume notckpt.h5" \
  "--train t --hidden 32 --resume mid/checkpoints/last.h5" "--train t3 --hidden 16 --resume mid/checkpoints/last.h5"; do
  read -r -a args <<<"$case"
  refused new/sub "${args[@]}"
  [ ! -e new ] || fail "$case: a refused resume left $(find new)"
  refused mine "${args[@]}"
  [ -d mine ] && [ -z "$(ls -A mine)" ] || fail "$case: the existing empty --out: $(find mine)"
done
grep -q "resume position: .* cannot be continued exactly" <<<"$ERR" || fail "the position case: $ERR"
pass "a refused resume leaves no directory it created"

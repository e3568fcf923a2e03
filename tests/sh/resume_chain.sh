# Resume across world sizes and accumulation (docs/run-directory.md, "Position"): checkpoints store the
# position as optimizer steps and samples of the epoch, so a job stopped at np 4 x accumulate 1, resumed at np 2
# x accumulate 2, stopped again and finished at np 1 x accumulate 4 (the same global batch throughout) ends
# where the uninterrupted np 4 run ends (1e-5: the float summation order differs), with sample-count batches
# and with token budgets. A position that cannot be continued exactly is refused in one line; so are a
# different seed, monitor or mode.
. "$(dirname "$0")/lib.sh"
# 216 samples: a multiple of 4 ranks, so no world size pads the epoch with duplicates (which are trained)
synth --out train --samples 216 --dim 8 --classes 3 --min-rows 1 --max-rows 12 --shards 3 --seed 5
synth --out val --samples 71 --dim 8 --classes 3 --min-rows 1 --max-rows 12 --shards 2 --seed 5 --first-id 1000
common=(--train train --val val --epochs 3 --hidden 16 --lr 0.01 --log-every 1 --no-progress --grad-clip 1.0 --device "$DEVICE" "${MODEL_ARGS[@]}")
for mode in count rows; do
  if [ $mode = count ]; then per=(--batch-size 4); else per=(--batch-rows 48); fi
  mpirun_np 4 "$MPIDDP" train "${common[@]}" "${per[@]}" --out full_$mode >/dev/null
  # stops land mid-epoch: step 5 of epoch 1 and step 5 of epoch 2 (14 steps per epoch with 16 samples a step)
  steps=$($PY -c "import csv; print(max(int(r['step']) for r in csv.DictReader(open('full_$mode/metrics.csv'))))")
  s1=5; s2=$((steps / 3 + 5))
  MPIDDP_TEST_STOP_AT_STEP=$s1 mpirun_np 4 "$MPIDDP" train "${common[@]}" "${per[@]}" --out chain_$mode >/dev/null
  MPIDDP_TEST_STOP_AT_STEP=$s2 mpirun_np 2 "$MPIDDP" train "${common[@]}" "${per[@]}" --accumulate 2 --out chain_$mode --resume auto >/dev/null
  $PY -c "import h5py; f = h5py.File('chain_$mode/checkpoints/last.h5'); a = f.attrs
assert int(a['global_step']) == $s2 and int(a['epoch']) == 1 and 0 < int(a['optim_step_in_epoch']) < $steps // 3, dict(a)
print('$mode: saved at epoch', int(a['epoch']), 'after', int(a['optim_step_in_epoch']), 'steps,', int(a['samples_in_epoch']), 'samples')" ||
    fail "$mode: the second stop did not land mid-epoch"
  mpirun_np 1 "$MPIDDP" train "${common[@]}" "${per[@]}" --accumulate 4 --out chain_$mode --resume auto >/dev/null
  $PY "$SRC/tests/py/compare_ckpt.py" full_$mode/checkpoints/last.h5 chain_$mode/checkpoints/last.h5 1e-5 ||
    fail "$mode: np 4 x1 -> np 2 x2 -> np 1 x4 differs from the uninterrupted run"
  [ "$(csv_last chain_$mode/metrics.csv step)" = "$steps" ] || fail "$mode: the chain ran another number of steps"
done
# a position this run's order cannot continue exactly (a hand-edited checkpoint) is refused in one line
MPIDDP_TEST_STOP_AT_STEP=5 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --out bad >/dev/null
$PY -c "import h5py; f = h5py.File('bad/checkpoints/last.h5', 'r+'); f.attrs['samples_in_epoch'] = f.attrs['samples_in_epoch'] - 3"
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --out bad --resume auto
printf '%s' "$ERR" | qgrep "cannot be continued exactly" || fail "inexact position: $ERR"
[ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] || fail "inexact position: not one line: $ERR"
printf '%s' "$ERR" | qgrep "MPI_ABORT" && fail "inexact position ended in MPI_Abort: $ERR"
# seed, monitor, mode and sampling must match the checkpoint's
MPIDDP_TEST_STOP_AT_STEP=5 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --out ok >/dev/null
# (and --sampling: shard's order continued at a position of the global order repeated and skipped samples)
for opt in "--seed 9|saved with --seed 0" "--monitor val/acc --mode max|saved with --mode min" "--monitor val/acc|saved with --monitor val/loss" \
  "--sampling shard|saved with --sampling global; this run uses --sampling shard"; do
  read -r -a extra <<< "${opt%%|*}"
  expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --out ok --resume auto "${extra[@]}"
  printf '%s' "$ERR" | qgrep -F "${opt#*|}" || fail "resume with ${opt%%|*}: $ERR"
done
# a --sampling shard checkpoint continues on its own world size only (each rank's own shards): at np 1 with the same
# global batch, either --sampling is refused in one line saying so; the refusal used to advise --sampling global,
# which was then refused as another --sampling
MPIDDP_TEST_STOP_AT_STEP=5 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --sampling shard --out sh >/dev/null
for s in global shard; do
  expect_rc 1 mpirun_np 1 "$MPIDDP" train "${common[@]}" --batch-size 16 --sampling $s --out sh --resume auto
  [ "$(printf '%s\n' "$ERR" | grep -c 'error:.*saved by 2 ranks with --sampling shard, whose order depends on the world size; resume it on 2 ranks with --sampling shard')" = 1 ] ||
    fail "a shard checkpoint resumed on 1 rank with --sampling $s: $ERR"
done
# at an epoch boundary (saved at the start of the next epoch, nothing of it trained) another order continues exactly:
# a --sampling shard checkpoint of 2 ranks resumes on 1 rank with --sampling global (one notice), and epoch 1
# trains each of the 216 samples exactly once; mid-epoch the same resume stays refused (above)
mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --sampling shard --epochs 1 --out shb >/dev/null
MPIDDP_TEST_TRACE_SAMPLES=$WORK/shb mpirun_np 1 "$MPIDDP" train "${common[@]}" --batch-size 16 --sampling global --epochs 2 --out shb --resume auto >/dev/null 2>shb.err ||
  fail "a shard checkpoint at an epoch boundary, on 1 rank with --sampling global: $(cat shb.err)"
[ "$(grep -c "notice: shb/checkpoints/last.h5 was saved at the start of epoch 1 with --shuffle full --sampling shard; this run orders it and the epochs after it with --shuffle full --sampling global$" shb.err)" = 1 ] ||
  fail "sampling change at an epoch boundary: no notice: $(cat shb.err)"
$PY - <<'PY' || fail "sampling change at an epoch boundary: epoch 1 does not train every sample once"
import collections
lines = [l.split() for l in open("shb.r0")]
assert {l[0] for l in lines} == {"1"}, {l[0] for l in lines}
ids = collections.Counter(int(i) for l in lines for i in l[2:])
assert len(ids) == 216 and set(ids.values()) == {1}, (len(ids), collections.Counter(ids.values()))
PY
# the same at the end of an epoch's training, before its validation (stopped during validation): the shard checkpoint
# of 2 ranks resumes on 1 rank with --sampling global, validates epoch 0, and epoch 1 trains each sample once
MPIDDP_TEST_STOP_IN_VAL=0 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --sampling shard --epochs 2 --out shv >/dev/null 2>&1
# stopped during that validation again: the summary and the new last.h5 keep the 18 steps epoch 0 took (not the
# 14 of --sampling global on 1 rank)
expect_rc 0 env MPIDDP_TEST_STOP_IN_VAL=0 mpirun -np 1 "$MPIDDP" train "${common[@]}" --batch-size 16 --sampling global --epochs 2 --out shv --resume auto
printf '%s\n' "$OUT" | qgrep -x "mpiddp train: stopped at epoch 0 (of 2) step 18/18 (global 18)" ||
  fail "a resume at an epoch's end in another order, stopped again: the summary does not give the epoch's steps: $OUT"
[ "$(printf '%s\n' "$ERR" | grep -c "notice: shv/checkpoints/last.h5 was saved at the end of epoch 0's training (its validation next) with --shuffle full --sampling shard; this run orders the epochs after it with --shuffle full --sampling global$")" = 1 ] ||
  fail "sampling change at an epoch's end: no notice: $ERR"
MPIDDP_TEST_TRACE_SAMPLES=$WORK/shv mpirun_np 1 "$MPIDDP" train "${common[@]}" --batch-size 16 --sampling global --epochs 2 --out shv --resume auto >/dev/null 2>shv.err ||
  fail "a shard checkpoint at an epoch's end, on 1 rank with --sampling global: $(cat shv.err)"
$PY - <<'PY' || fail "sampling change at an epoch's end: epoch 1 does not train every sample once"
import collections
lines = [l.split() for l in open("shv.r0")]
assert {l[0] for l in lines} == {"1"}, {l[0] for l in lines}
ids = collections.Counter(int(i) for l in lines for i in l[2:])
assert len(ids) == 216 and set(ids.values()) == {1}, (len(ids), collections.Counter(ids.values()))
PY
# the summary of a finished run resumed in another order names the steps its last epoch took (14, --sampling global
# on 1 rank, recorded in last.h5's prev_epoch_steps), not this order's (18 with --sampling shard on 2 ranks); a
# checkpoint without the attribute (an older mpiddp) in another order: the steps are not known, and not given
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --sampling shard --epochs 2 --out shb --resume auto
printf '%s\n' "$OUT" | qgrep -x "mpiddp train: finished at epoch 1 (of 2) step 14/14 (global 32)" ||
  fail "a finished run resumed in another order: the summary does not give the steps its last epoch took: $OUT"
printf '%s' "$ERR" | qgrep "this run orders" && fail "a finished run resumed in another order: an order notice, nothing trained: $ERR"
$PY -c "import h5py; f = h5py.File('shb/checkpoints/last.h5', 'r+'); assert int(f.attrs['prev_epoch_steps']) == 14; del f.attrs['prev_epoch_steps']"
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --sampling shard --epochs 2 --out shb --resume auto
printf '%s\n' "$OUT" | qgrep -x "mpiddp train: finished at epoch 1 (of 2) (global 32)" ||
  fail "an older checkpoint resumed in another order: the summary gives steps it does not know: $OUT"
# the steps of the epochs to come change with the order (--sampling shard pads rank 0's 72-sample shard to rank 1's
# 144: 18 steps an epoch, --sampling global 14), those done do not: extended to 3 epochs with --lr-horizon restart,
# the decay starts again at step 18 and ends at the run's last, step 18 + 2 x 14 = 46 (it ended at 3 x 14 = 42,
# the last 4 steps at --min-lr)
sched=(--lr-schedule cosine --warmup-steps 2 --min-lr 0.001 --lr-horizon restart)
mpirun_np 2 "$MPIDDP" train "${common[@]}" "${sched[@]}" --batch-size 8 --sampling shard --epochs 1 --out shr >/dev/null
mpirun_np 2 "$MPIDDP" train "${common[@]}" "${sched[@]}" --batch-size 8 --epochs 3 --out shr --resume auto >/dev/null 2>shr.err ||
  fail "a shard checkpoint at an epoch boundary, extended with --sampling global: $(cat shr.err)"
qgrep "horizon 18 -> 46 steps (--epochs 3, 14 per epoch from epoch 1): the schedule starts again at step 18 (warmup 2 steps, then cosine decay to step 46" shr.err ||
  fail "another order at an epoch boundary: the restarted schedule does not end at the run's last step: $(cat shr.err)"
$PY - <<'PY' || fail "another order at an epoch boundary: the restarted decay does not end at the run's last step"
import csv
lr = {int(r["step"]): float(r["lr"]) for r in csv.DictReader(open("shr/metrics.csv")) if r["lr"]}
assert max(lr) == 46, max(lr)
assert lr[46] == 0.001 and all(lr[s] > 0.001 for s in range(19, 46)), {s: lr[s] for s in range(40, 47)}
PY
pass "resume chains np 4x1 -> 2x2 -> 1x4 (sample counts and token budgets); inexact positions, seed, monitor, mode, sampling refused; a shard checkpoint on its world size only mid-epoch; another order at an epoch boundary or an epoch's end (the lr horizon counts the steps done, then the new epochs; the summary the steps the last epoch took)"

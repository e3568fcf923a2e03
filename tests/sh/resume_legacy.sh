# Checkpoints in the older position format (an mpiddp that stored the position as the micro-batch index
# `step_in_epoch`, written here by rewriting a current checkpoint's attributes with h5py): one saved at the end of
# an epoch's training (stopped during its validation) is an epoch boundary, so a resume with another --shuffle is
# accepted with the end-of-epoch notice and trains the next epoch; one saved mid-epoch is still refused in one line
# naming its optimizer steps into the epoch.
. "$(dirname "$0")/lib.sh"
synth --out train --samples 300 --dim 8 --classes 3 --min-rows 1 --max-rows 12 --shards 3 --seed 7
synth --out val --samples 40 --dim 8 --classes 3 --min-rows 1 --max-rows 12 --shards 1 --seed 7 --first-id 5000
base=(--train train --val val --epochs 2 --hidden 16 --lr 0.01 --log-every 1 --no-progress --device "$DEVICE" "${MODEL_ARGS[@]}")
common=("${base[@]}" --shuffle block --shuffle-block-mb 0.002 --shuffle-window 3)
# the older format: step_in_epoch = micro-batches done (--accumulate 1: the optimizer steps), no sample position
to_legacy() {
  $PY - "$1" <<'PY'
import sys, h5py
a = h5py.File(sys.argv[1], 'r+').attrs
mb = int(a['optim_step_in_epoch'])
for k in ('optim_step_in_epoch', 'samples_in_epoch', 'sampling'):
    if k in a:
        del a[k]
a['step_in_epoch'] = mb
print(sys.argv[1], 'epoch', int(a['epoch']), 'micro-batch', mb)
PY
}
# at the end of epoch 0's training: 150 samples a rank, 4 a micro-batch: micro-batch 38 of 38
MPIDDP_TEST_STOP_IN_VAL=0 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 4 --out end >/dev/null 2>&1
to_legacy end/checkpoints/last.h5 | qgrep "epoch 0 micro-batch 38$" || fail "the stop during validation did not save at epoch 0's end"
mpirun_np 2 "$MPIDDP" train "${base[@]}" --shuffle full --batch-size 4 --out end --resume auto >/dev/null 2>end.err ||
  fail "an older checkpoint at an epoch's end, resumed with another --shuffle: $(cat end.err)"
[ "$(grep -c "notice: end/checkpoints/last.h5 was saved at the end of epoch 0's training (its validation next) with --shuffle block:0.002:3 --sampling global; this run orders the epochs after it with --shuffle full --sampling global$" end.err)" = 1 ] ||
  fail "an older checkpoint at an epoch's end: no notice: $(cat end.err)"
$PY -c "import h5py; a = h5py.File('end/checkpoints/last.h5', 'r').attrs
assert int(a['epoch']) == 2 and int(a['global_step']) == 76, dict(a)" || fail "the resumed run did not train epoch 1 (38 steps)"
# mid-epoch (7 micro-batches into epoch 0): another --shuffle is refused, in one line
MPIDDP_TEST_STOP_AT_STEP=7 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 4 --out mid >/dev/null
to_legacy mid/checkpoints/last.h5 | qgrep "epoch 0 micro-batch 7$" || fail "the stop did not land at micro-batch 7"
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${base[@]}" --shuffle full --batch-size 4 --out mid --resume auto
printf '%s' "$ERR" | qgrep "saved with --shuffle block:0.002:3; this run uses --shuffle full (another order continues only a checkpoint saved at an epoch boundary; this one is 7 optimizer steps into epoch 0)" ||
  fail "an older checkpoint mid-epoch, another --shuffle: $ERR"
[ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] || fail "an older checkpoint mid-epoch: not one line: $ERR"
# the micro-batches' size is not recorded: another split of the same global batch (--batch-size 2 --accumulate 2
# instead of 4 x 1) is refused, and so is a checkpoint whose optimizer steps are not its micro-batches (written with
# --accumulate 2: 14 micro-batches in 7 steps), even resumed with --accumulate 1
legacy_refusal="written by an older mpiddp that stored the position in micro-batches (7 into epoch 0) without their size; it resumes only where its global step shows one optimizer step per micro-batch (after epoch 0: under global sampling), with --accumulate 1"
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 2 --accumulate 2 --out mid --resume auto
printf '%s' "$ERR" | qgrep -F "mid/checkpoints/last.h5: $legacy_refusal" || fail "an older checkpoint resumed with another split: $ERR"
rm -rf mid14 && cp -r mid mid14
$PY -c "import h5py; h5py.File('mid14/checkpoints/last.h5', 'r+').attrs['step_in_epoch'] = 14"
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 4 --out mid14 --resume auto
printf '%s' "$ERR" | qgrep -F "mid14/checkpoints/last.h5: ${legacy_refusal/7 into/14 into}" ||
  fail "an older checkpoint with 2 micro-batches a step: $ERR"
# with its own --shuffle the same checkpoint resumes and finishes the run
mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 4 --out mid --resume auto >/dev/null 2>mid.err ||
  fail "an older checkpoint mid-epoch, same options: $(cat mid.err)"
# in a later epoch the global step shows the split too: 7 micro-batches into epoch 1 at global step 38 + 7 resumes
# with its own options and finishes the run (before: refused as outside epoch 0); global step 38 + 4 (micro-batches
# of half the size, 2 a step) is refused
MPIDDP_TEST_STOP_AT_STEP=45 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 4 --out mid1 >/dev/null
rm -rf mid1h && cp -r mid1 mid1h
to_legacy mid1/checkpoints/last.h5 | qgrep "epoch 1 micro-batch 7$" || fail "the stop did not land at micro-batch 7 of epoch 1"
mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 4 --out mid1 --resume auto >/dev/null 2>mid1.err ||
  fail "an older checkpoint in epoch 1, same options: $(cat mid1.err)"
$PY -c "import h5py; a = h5py.File('mid1/checkpoints/last.h5', 'r').attrs
assert int(a['epoch']) == 2 and int(a['global_step']) == 76, dict(a)" || fail "the resumed run did not finish epoch 1"
to_legacy mid1h/checkpoints/last.h5 >/dev/null
$PY -c "import h5py; h5py.File('mid1h/checkpoints/last.h5', 'r+').attrs['global_step'] = 42"
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 4 --out mid1h --resume auto
printf '%s' "$ERR" | qgrep -F "mid1h/checkpoints/last.h5: ${legacy_refusal/7 into epoch 0/7 into epoch 1}" ||
  fail "an older checkpoint in epoch 1 whose steps are not its micro-batches: $ERR"
pass "older-format checkpoints: at an epoch's end another --shuffle resumes (notice); mid-epoch it is refused"

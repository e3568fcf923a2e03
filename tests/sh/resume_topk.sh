# Resuming from a top-k file (docs/run-directory.md: it "repeats that epoch's validation and checkpoint decision")
# continues as the uninterrupted run: the same decisions.log, metrics.csv rows, top-k files and last.h5 bit for
# bit, where the file once held the decision it came from (the list named it twice and later deleted a listed
# file, the patience counted it, and the summary said epoch -1). A resume with a lower --save-top-k trims the list
# and its files at its next save. A resume position past the epoch of a smaller training set is refused, not taken
# for the epoch's end. --resume FILE into a directory holding another run is refused and leaves it as it was. A
# fresh run keeps files of checkpoints/ that are not its own, and a checkpoints/ that is a file stops it before
# training. The votes' early-stopping best (min_delta) survives a resume.
. "$(dirname "$0")/lib.sh"
synth --out t --samples 240 --dim 8 --classes 3 --shards 2 --seed 3
synth --out small --samples 96 --dim 8 --classes 3 --shards 1 --seed 3
synth --out v --samples 60 --dim 8 --classes 3 --shards 1 --seed 3 --first-id 9000
common=(--val v --batch-size 4 --lr 0.01 --hidden 16 --device "$DEVICE" --save-top-k 2 --early-stop-patience 2 --log-every 5)
base=(--train t "${common[@]}")
same_ckpt() { "$PY" "$SRC/tests/py/compare_ckpt.py" "$1" "$2" 0 >/dev/null || fail "$2: not bitwise equal to $1"; }
topk() { "$PY" -c "import h5py, json; print(' '.join(e[3] for e in json.loads(h5py.File('$1')['/'].attrs['topk'])))"; }
# the metrics without the timing column (samples/s)
rows() { "$PY" -c "
import csv
for r in csv.DictReader(open('$1')):
    r.pop('train/samples_per_s', None); print(sorted(r.items()))"; }

for np in 1 2; do
  mpirun_np $np "$MPIDDP" train "${base[@]}" --epochs 3 --out full$np --no-progress >/dev/null
  mpirun_np $np "$MPIDDP" train "${base[@]}" --epochs 1 --out part$np --no-progress >/dev/null
  f=$(cd part$np/checkpoints && ls epoch=0-*.h5)
  [ "$(topk "part$np/checkpoints/$f")" = "" ] || fail "np $np: the top-k file lists $(topk "part$np/checkpoints/$f"): the state after its own decision"
  expect_rc 0 mpirun_np $np "$MPIDDP" train "${base[@]}" --epochs 3 --out part$np --resume "part$np/checkpoints/$f"
  grep -q "finished at epoch 2 (of 3)" <<<"$OUT$ERR" || fail "np $np: the summary after a top-k resume: $OUT $ERR"
  cmp -s full$np/checkpoints/decisions.log part$np/checkpoints/decisions.log ||
    fail "np $np: decisions.log differs from the uninterrupted run's: $(cat part$np/checkpoints/decisions.log)"
  [ "$(rows full$np/metrics.csv)" = "$(rows part$np/metrics.csv)" ] || fail "np $np: metrics.csv rows differ: $(cat part$np/metrics.csv)"
  [ "$(cd full$np/checkpoints && ls)" = "$(cd part$np/checkpoints && ls)" ] || fail "np $np: files: $(ls part$np/checkpoints)"
  listed=$(topk part$np/checkpoints/last.h5)
  [ "$(wc -w <<<"$listed")" = 2 ] && [ "$listed" = "$(topk full$np/checkpoints/last.h5)" ] || fail "np $np: top-k $listed"
  for k in $listed; do [ -f "part$np/$k" ] || fail "np $np: $k is listed and missing"; done
  same_ckpt full$np/checkpoints/last.h5 part$np/checkpoints/last.h5
done
# a top-k file of an older mpiddp lists itself: the repeated decision replaces that entry, never lists it twice
mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 1 --out old --no-progress >/dev/null
f=$(cd old/checkpoints && ls epoch=0-*.h5)
"$PY" -c "
import h5py, json, numpy as np
with h5py.File('old/checkpoints/$f', 'a') as h:
    h.attrs['topk'] = np.bytes_(json.dumps([[float('$f'.split('=')[-1][:-3]), 0, int(h.attrs['global_step']), 'checkpoints/$f']]))"
mpirun_np 2 "$MPIDDP" train "${base[@]}" --save-top-k 3 --epochs 3 --out old --resume "old/checkpoints/$f" --no-progress >/dev/null
listed=$(topk old/checkpoints/last.h5)
[ "$(tr ' ' '\n' <<<"$listed" | sort | uniq -d)" = "" ] || fail "an older top-k file: listed twice: $listed"
for k in $listed; do [ -f "old/$k" ] || fail "an older top-k file: $k is listed and missing"; done
pass "a resume from a top-k file ends as the uninterrupted run: decisions, metrics, top-k files, last.h5 bitwise"

# the votes' early-stopping best is checkpointed beside the save vote's: local values 100, 97, 94, 91 (offsets
# over a loss that moves by < 1) at min_delta 5 improve at epochs 0 and 2 only; patience 2 never stops, also
# across a resume at the end of epoch 1 (a resume that took the save vote's best, 97, stopped at epoch 2)
off="0:0:100,1:0:100,0:1:97,1:1:97,0:2:94,1:2:94,0:3:91,1:3:91"
votes=(--ckpt-policy all --early-stop-min-delta 5 --no-progress)
MPIDDP_TEST_MONITOR_OFFSET=$off mpirun_np 2 "$MPIDDP" train "${base[@]}" "${votes[@]}" --epochs 4 --out esfull >/dev/null
MPIDDP_TEST_MONITOR_OFFSET=$off mpirun_np 2 "$MPIDDP" train "${base[@]}" "${votes[@]}" --epochs 2 --out espart >/dev/null
MPIDDP_TEST_MONITOR_OFFSET=$off expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" "${votes[@]}" --epochs 4 --out espart --resume auto
grep -q "finished at epoch 3 (of 4)" <<<"$OUT" || fail "votes with min_delta: $OUT $ERR"
[ "$(rows esfull/metrics.csv)" = "$(rows espart/metrics.csv)" ] || fail "votes with min_delta: metrics.csv rows differ after a resume"
same_ckpt esfull/checkpoints/last.h5 espart/checkpoints/last.h5
pass "the votes' early-stopping best survives a resume (gains below min_delta add up)"

# a lower --save-top-k on resume: the next save trims the list to it and deletes the files it drops
mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 3 --save-top-k 3 --early-stop-patience 0 --monitor val/loss --out k3 --no-progress >/dev/null
[ "$(ls k3/checkpoints/epoch=* | wc -l)" = 3 ] || fail "3 top-k files expected: $(ls k3/checkpoints)"
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 6 --save-top-k 1 --early-stop-patience 0 --monitor val/loss --out k3 --resume auto --no-progress
grep -q "notice: --save-top-k 1: kept the best 1 of the checkpoint's 3 top-k files" <<<"$ERR" || fail "no notice of the trimmed list: $ERR"
kept=$(cd k3/checkpoints && ls epoch=*)
[ "$(wc -w <<<"$kept")" = 1 ] && [ "$(topk k3/checkpoints/last.h5)" = "checkpoints/$kept" ] || fail "--save-top-k 1 on resume kept: $kept; listed $(topk k3/checkpoints/last.h5)"
pass "--save-top-k lowered on resume: one file kept and listed"

# a position past the end of this run's epoch (160 samples into an epoch of 96) is refused
MPIDDP_TEST_STOP_AT_STEP=20 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 2 --out past --no-progress >/dev/null
expect_rc 1 mpirun_np 2 "$MPIDDP" train --train small "${common[@]}" --epochs 2 --out past --resume auto --no-progress
grep -q "resume position: 20 optimizer steps and 160 samples into epoch 0 cannot be continued exactly (this run's epoch has 12 steps over 96 samples" <<<"$ERR" ||
  fail "a position past the epoch: $ERR"

# --resume of another run's checkpoint into a directory holding a run: refused (exit 2), nothing touched
(cd full2 && find . -type f -exec md5sum {} + | sort) > before.txt
for np in 1 2; do
  expect_rc 2 mpirun_np $np "$MPIDDP" train "${base[@]}" --epochs 4 --out full2 --resume full1/checkpoints/last.h5
  [ "$(grep -c "full2 holds a run (run.json) and --resume full1/checkpoints/last.h5 is not one of its checkpoints" <<<"$ERR")" = 1 ] ||
    fail "np $np: resume of another run into a run: $ERR"
done
[ "$(cd full2 && find . -type f -exec md5sum {} + | sort)" = "$(cat before.txt)" ] || fail "the refused resume changed full2"
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 4 --out fork --resume full2/checkpoints/last.h5 --no-progress
pass "a position past the epoch, and another run's checkpoint into a run, refused; into a new --out it continues"

# a fresh run: files of checkpoints/ that are not a save's temporaries stay; checkpoints/ as a file stops it at once
mkdir -p mine/checkpoints && echo a > mine/checkpoints/model.h5.tmp.42 && echo b > mine/checkpoints/my.h5.tmp.backup
echo c > mine/checkpoints/last.h5.tmp.x
mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 1 --out mine --no-progress >/dev/null
[ "$(cat mine/checkpoints/model.h5.tmp.42 mine/checkpoints/my.h5.tmp.backup mine/checkpoints/last.h5.tmp.x)" = "$(printf 'a\nb\nc')" ] ||
  fail "a fresh run removed files of checkpoints/ that were not its own: $(ls mine/checkpoints)"
echo d > mine/checkpoints/last.h5.tmp.123 # a save's temporary: --overwrite and a resume remove it, and only it
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 1 --out mine --overwrite --no-progress
[ ! -e mine/checkpoints/last.h5.tmp.123 ] || fail "--overwrite kept a save's temporary"
[ "$(cat mine/checkpoints/model.h5.tmp.42 mine/checkpoints/my.h5.tmp.backup mine/checkpoints/last.h5.tmp.x)" = "$(printf 'a\nb\nc')" ] ||
  fail "--overwrite removed files of checkpoints/ that were not its own: $(ls mine/checkpoints)"
echo d > mine/checkpoints/last.h5.tmp.123
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 2 --out mine --resume auto --no-progress
[ ! -e mine/checkpoints/last.h5.tmp.123 ] && [ -f mine/checkpoints/model.h5.tmp.42 ] || fail "a resume's clean-up: $(ls mine/checkpoints)"
mkdir cf && echo x > cf/checkpoints
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 1 --out cf
grep -q "cf/checkpoints: exists and is not a directory" <<<"$ERR" && ! grep -q "^epoch 0" <<<"$ERR" || fail "checkpoints/ as a file: $ERR"
pass "a fresh run keeps what is not its own; checkpoints/ as a file stops it before training"

# Non-finite data (#31 item 7): `inspect` and `train --check-finite` name the first NaN/Inf feature by file, row,
# column and sample (mapped and HDF5-read shards); a non-finite validation monitor stops the run with one line
# (--skip-nonfinite: no save, "not finite" in decisions.log, the run goes on, the summary says the monitor was never
# finite; eval prints nan, never -nan); a non-finite gradient names the step's offending sample, or says the data
# is finite; a C-API program (capi_misuse) gets both lines without --check-finite or --skip-nonfinite. Multi-rank
# parts at np 1, 2 and 4; `timeout` turns a hang into a failure.
. "$(dirname "$0")/lib.sh"
T="timeout 120"
tmpirun() { local np=$1; shift; timeout 120 mpirun -np "$np" --oversubscribe "$@"; }
synth --out t --samples 240 --dim 6 --classes 3 --shards 3 --seed 2
synth --out v --samples 60 --dim 6 --classes 3 --shards 2 --seed 2 --first-id 100000
# set_value FILE ROW COL VALUE: one float of 'features', in place (the layout, contiguous or chunked, is kept)
set_value() {
  $PY - "$@" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f["features"][int(sys.argv[2]), int(sys.argv[3])] = float(sys.argv[4])
EOF
}
# row_of FILE SAMPLE K: the K-th row of sample SAMPLE of the shard
row_of() { $PY -c "import h5py,sys; print(int(h5py.File(sys.argv[1],'r')['offsets'][int(sys.argv[2])]) + int(sys.argv[3]))" "$@"; }
first_shard() { ls "$1"/*.h5 | head -1; }

# --- 1. inspect: a NaN in the second shard of v (mapped), an Inf in a gzip-chunked shard (HDF5 reads) ---
cp -r v vnan
s1=$(ls vnan/*.h5 | sed -n 2p)
r=$(row_of "$s1" 5 1)
set_value "$s1" "$r" 4 nan
id=$($PY -c "import h5py,sys; f=h5py.File(sys.argv[1],'r'); print(int(f['sample_ids'][5]) if 'sample_ids' in f else -1)" "$s1")
expect_rc 0 $T "$MPIDDP" inspect v
printf '%s' "$OUT" | qgrep "dataset v: valid" || fail "clean dataset: $OUT"
expect_rc 1 $T "$MPIDDP" inspect vnan
want="vnan/$(basename "$s1"): dataset 'features'\[row $r, column 4\]: nan, in sample 5 of the shard (offsets\[5\], id"
printf '%s' "$ERR" | qgrep "^mpiddp inspect: error: $want" || fail "inspect names the NaN: $ERR (want $want)"
[ "$id" = -1 ] || printf '%s' "$ERR" | qgrep "id $id)" || fail "inspect: sample id $id not named: $ERR"
printf '%s' "$ERR" | qgrep "1 non-finite value(s) in 1 sample(s) of the dataset" || fail "inspect totals: $ERR"
[ "$(printf '%s\n' "$ERR" | wc -l)" = 1 ] || fail "inspect: not one line: $ERR"
printf '%s' "$OUT" | qgrep valid && fail "inspect called a NaN dataset valid: $OUT"
$PY "$SRC/tests/py/make_shards.py" variants vars > /dev/null
g=vars/h5py_gzip/part-01.h5
set_value "$g" 3 2 -inf
set_value "$g" 4 0 inf
set_value vars/h5py_gzip/part-03.h5 0 1 nan
expect_rc 1 $T "$MPIDDP" inspect vars/h5py_gzip
printf '%s' "$ERR" | qgrep "part-01.h5: dataset 'features'\[row 3, column 2\]: -inf, in sample [0-9]* of the shard" || fail "inspect, chunked shard: $ERR"
printf '%s' "$ERR" | qgrep "3 non-finite value(s) in [23] sample(s) of the dataset" || fail "inspect totals, chunked: $ERR"

# --- 2. train --check-finite: the same line at np 1, 2 and 4 (the shards are spread over the ranks) ---
base=(--device cpu --train t --batch-size 4 --hidden 8 --no-progress)
for np in 1 2 4; do
  expect_rc 1 tmpirun $np "$MPIDDP" train "${base[@]}" --val vnan --out cf$np --check-finite
  printf '%s' "$ERR" | qgrep "^mpiddp train: error: $want" || fail "--check-finite at np $np: $ERR"
  [ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] || fail "--check-finite at np $np: not one line: $ERR"
  [ -e cf$np/metrics.csv ] && fail "--check-finite at np $np: the run started"
done
expect_rc 0 tmpirun 2 "$MPIDDP" train "${base[@]}" --val v --out cfok --check-finite --fast-dev-run 2
# a NaN in the last shard of the training set: found by the rank that scans it (shard 2: rank 2 at np 4, 0 at np 2)
cp -r t tnan
s2=$(ls tnan/*.h5 | sed -n 3p)
set_value "$s2" 0 0 nan
for np in 2 4; do
  expect_rc 1 tmpirun $np "$MPIDDP" train --device cpu --train tnan --val v --batch-size 4 --hidden 8 --no-progress --out cft$np --check-finite
  printf '%s' "$ERR" | qgrep "error: tnan/$(basename "$s2"): dataset 'features'\[row 0, column 0\]: nan, in sample 0 of the shard" || fail "--check-finite, train set, np $np: $ERR"
done

# --- 3. a NaN in the validation set without --check-finite: val/loss is not finite ---
for np in 1 2 4; do
  expect_rc 1 tmpirun $np "$MPIDDP" train "${base[@]}" --val vnan --out vl$np --epochs 2
  printf '%s' "$ERR" | qgrep -x "mpiddp train: error: val/loss is not finite (nan) after epoch 0 (step [0-9]*), so it can neither rank checkpoints nor stop early (a NaN or Inf in the validation data? mpiddp inspect or train --check-finite names it; --skip-nonfinite goes on without saving)" || fail "NaN monitor at np $np: $ERR"
  [ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] || fail "NaN monitor at np $np: not one line: $ERR"
  ls vl$np/checkpoints/epoch=* 2>/dev/null && fail "NaN monitor at np $np: a top-k checkpoint was saved"
  # opting out: the run goes on, no top-k file, each decision says why
  expect_rc 0 tmpirun $np "$MPIDDP" train "${base[@]}" --val vnan --out vs$np --epochs 2 --skip-nonfinite --early-stop-patience 5 --log-per-rank
  # the headers run-directory.md shows: train/skipped_steps in metrics.csv only
  [ "$(head -1 vs$np/metrics.csv)" = "epoch,step,train/loss,train/samples_per_s,lr,val/loss,val/acc,val/macro_f1,train/rows_per_rank_max_over_mean,train/skipped_steps" ] &&
    [ "$(head -1 vs$np/metrics_rank$((np - 1)).csv)" = "epoch,step,train/loss,train/samples_per_s,lr,val/loss,val/acc,val/macro_f1,train/rows_per_rank_max_over_mean,val/count,rank" ] ||
    fail "--skip-nonfinite at np $np: headers $(head -1 vs$np/metrics.csv) / $(head -1 vs$np/metrics_rank$((np - 1)).csv)"
  [ "$(grep -c 'val/loss=nan; policy reduced: not finite, no save' vs$np/checkpoints/decisions.log)" = 2 ] ||
    fail "--skip-nonfinite at np $np: decisions: $(cat vs$np/checkpoints/decisions.log)"
  ls vs$np/checkpoints/epoch=* 2>/dev/null && fail "--skip-nonfinite at np $np: a NaN monitor saved a top-k file"
  [ -e vs$np/checkpoints/last.h5 ] || fail "--skip-nonfinite at np $np: no last.h5"
  printf '%s' "$OUT" | qgrep "best checkpoint: none (val/loss was never finite; see checkpoints/decisions.log)" ||
    fail "--skip-nonfinite at np $np: the summary: $OUT"
done
# eval over an Inf feature (inf - inf in the softmax: the CPU's NaN has its sign bit set): nan as metrics.csv writes
# it, never printf's -nan, which Python and awk do not read back as a number
cp -r v vinf
set_value "vinf/$(basename "$s1")" "$r" 4 inf
expect_rc 0 $T "$MPIDDP" eval --device cpu --ckpt vs1/checkpoints/last.h5 --data vinf --out pinf.csv
printf '%s' "$OUT" | qgrep "^val/loss=nan val/acc=[0-9.]* val/macro_f1=[0-9.]*$" || fail "eval of an Inf sample: $OUT"
[ "$(grep -c ',nan$' pinf.csv)" = 1 ] && ! grep -q -- '-nan' pinf.csv || fail "eval of an Inf sample: $(grep nan pinf.csv)"
# a vote: the ranks whose local value is not finite are named (v's second shard holds the NaN: the last samples)
expect_rc 1 tmpirun 2 "$MPIDDP" train "${base[@]}" --val vnan --out vote --ckpt-policy all
printf '%s' "$ERR" | qgrep "error: val/loss is not finite on rank(s) [0-9,]* after epoch 0" || fail "vote: $ERR"

# --- 4. a NaN in the training data: the gradient error names the sample; finite data says so ---
cp -r t tg
s0=$(first_shard tg)
set_value "$s0" "$(row_of "$s0" 3 0)" 5 nan
gid=$($PY -c "import h5py,sys; f=h5py.File(sys.argv[1],'r'); print(int(f['sample_ids'][3]) if 'sample_ids' in f else 3)" "$s0")
for np in 1 2 4; do
  for acc in 1 2; do
    expect_rc 1 tmpirun $np "$MPIDDP" train --device cpu --train tg --val v --batch-size 4 --hidden 8 --no-progress --accumulate $acc --out g$np$acc
    printf '%s' "$ERR" | qgrep -x "mpiddp train: error: non-finite gradient at step [0-9]* in parameter '[a-z0-9.]*', from the data: tg/$(basename "$s0"): dataset 'features'\[row [0-9]*, column 5\]: nan, in sample 3 of the shard (offsets\[3\], id $gid), global index 3, on rank [0-9]; 1 sample(s) of the step hold non-finite features (--check-finite or mpiddp inspect finds them before training; --skip-nonfinite skips such steps)" ||
      fail "gradient message at np $np, accumulate $acc: $ERR"
    [ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] || fail "gradient message at np $np: not one line: $ERR"
  done
done
# a C-API program (tools/capi_misuse_io.c) is pointed at mpiddp inspect and cfg.skip_nonfinite, not at --check-finite
for np in 1 2; do
  rm -rf capi && mkdir capi
  expect_rc 0 tmpirun $np "$CAPI_MISUSE" nonfinite_grad tg v "$PWD/capi"
  printf '%s' "$ERR" | qgrep -x "ok rank 0 ddp_train(a NaN feature in the training data): non-finite value (non-finite value): non-finite gradient at step [0-9]* in parameter '[a-z0-9.]*', from the data: tg/$(basename "$s0"): dataset 'features'\[row [0-9]*, column 5\]: nan, in sample 3 of the shard (offsets\[3\], id $gid), global index 3, on rank [0-9]; 1 sample(s) of the step hold non-finite features (mpiddp inspect finds them before training; cfg.skip_nonfinite = 1 skips such steps)" ||
    fail "C API, gradient message at np $np: $ERR"
  expect_rc 0 tmpirun $np "$CAPI_MISUSE" nonfinite_val t vnan "$PWD/capi"
  printf '%s' "$ERR" | qgrep -x "ok rank 0 ddp_train(a NaN feature in the validation data): non-finite value (non-finite value): val/loss is not finite (nan) after epoch 0 (step [0-9]*), so it can neither rank checkpoints nor stop early (a NaN or Inf in the validation data? mpiddp inspect names it; cfg.skip_nonfinite = 1 goes on without saving)" ||
    fail "C API, NaN monitor at np $np: $ERR"
  ! grep -e '^FAIL' -e '--[a-z]' <<<"$ERR" || fail "C API at np $np: a check failed or a line names a CLI option"
done
# finite but huge: the forward pass overflows; the message says the data is finite
cp -r t tbig
sb=$(first_shard tbig)
for k in 0 1 2 3 4 5; do set_value "$sb" 0 $k 3e38; done
expect_rc 1 tmpirun 2 "$MPIDDP" train --device cpu --train tbig --val v --batch-size 4 --hidden 8 --no-progress --out big
printf '%s' "$ERR" | qgrep "error: non-finite gradient at step [0-9]* in parameter '[a-z0-9.]*'; every feature of the step's samples is finite, so the cause is not in the data" ||
  fail "overflow message: $ERR"
# a finite gradient past ~1.8e19 overflows AdamW's second moment to +inf (its square; PyTorch's too) while training
# goes on: the run's checkpoints hold it and must still resume (bitwise, the stop after the overflow) and evaluate;
# they were refused as "non-finite value inf" in /optim/exp_avg_sq, so a requeued job could never continue
ov=(--device cpu --train t --val v --model transformer --hidden 8 --heads 2 --batch-size 8 --lr 1000 --weight-decay 0
    --epochs 2 --no-progress)
tmpirun 2 "$MPIDDP" train "${ov[@]}" --out ovf >/dev/null
MPIDDP_TEST_STOP_AT_STEP=20 tmpirun 2 "$MPIDDP" train "${ov[@]}" --out ovs >/dev/null
$PY - <<'EOF' || fail "the overflow did not happen by step 20 (the test would be vacuous)"
import h5py, numpy as np
f = h5py.File("ovs/checkpoints/last.h5", "r")
assert int(f.attrs["global_step"]) == 20, dict(f.attrs)
v = np.concatenate([f["optim/exp_avg_sq"][k][()].ravel() for k in f["optim/exp_avg_sq"]])
assert np.isposinf(v).any() and not np.isnan(v).any(), (np.isposinf(v).sum(), np.isnan(v).sum())
EOF
expect_rc 0 $T "$MPIDDP" eval --device cpu --ckpt ovs/checkpoints/last.h5 --data v
expect_rc 0 tmpirun 2 "$MPIDDP" train "${ov[@]}" --out ovs --resume auto
$PY - <<'EOF' || fail "the run resumed after the overflow differs from the uninterrupted one"
import h5py, numpy as np
a, b = h5py.File("ovf/checkpoints/last.h5", "r"), h5py.File("ovs/checkpoints/last.h5", "r")
for g in ("params", "optim/exp_avg", "optim/exp_avg_sq"):
    for k in a[g]:
        assert np.array_equal(a[g][k][()], b[g][k][()]), (g, k)
EOF
pass "inspect, --check-finite, a non-finite monitor and the gradient message name NaN/Inf data; AdamW's overflowed v resumes"

# The Transformer end to end at np 2: on the order task (label = which marker row comes first) it reaches
# val/acc >= 0.95 while the MLP (mean pooling) and the transformer without positions stay within 0.1 of
# chance; eval rebuilds the model from the checkpoint alone (same metrics at np 1 and 3 as the run's last
# validation), the PyTorch bridge reproduces them; bad transformer options and a sample longer than
# --max-positions are one-line errors on every rank.
. "$(dirname "$0")/lib.sh"
synth --out train --task order --samples 4000 --dim 8 --classes 2 --min-rows 4 --max-rows 16 --seed 3
synth --out val --task order --samples 1000 --dim 8 --classes 2 --min-rows 4 --max-rows 16 --seed 3 --first-id 1000000
common=(--train train --val val --epochs 4 --lr 1e-3 --batch-size 32 --hidden 32 --heads 4 --seed 1 --device "$DEVICE" --no-progress)

mpirun_np 2 "$MPIDDP" train "${common[@]}" --out tx --model transformer >/dev/null
acc=$(csv_last tx/metrics.csv val/acc)
awk -v a="$acc" 'BEGIN{exit !(a >= 0.95)}' || fail "transformer val/acc $acc < 0.95"
echo "transformer: val/acc $acc"
mpirun_np 2 "$MPIDDP" train "${common[@]}" --out mlp --model mlp >/dev/null
acc_mlp=$(csv_last mlp/metrics.csv val/acc)
awk -v a="$acc_mlp" 'BEGIN{exit !(a <= 0.6)}' || fail "MLP val/acc $acc_mlp > chance + 0.1: the task leaks order-free information"
echo "mlp: val/acc $acc_mlp"
mpirun_np 2 "$MPIDDP" train "${common[@]}" --out nopos --model transformer --positions none >/dev/null
acc_np=$(csv_last nopos/metrics.csv val/acc)
awk -v a="$acc_np" 'BEGIN{exit !(a <= 0.6)}' || fail "transformer without positions reached $acc_np: it must be order-blind"
echo "transformer --positions none: val/acc $acc_np"

# eval from the checkpoint alone, at two world sizes, equals the run's last validation
ck=tx/checkpoints/last.h5
$PY - "$ck" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
assert a["model"] == "transformer", a["model"]
assert (a["model_layers"], a["model_heads"], a["model_ff"], a["model_max_positions"], a["model_positions"]) == (2, 4, 64, 512, 1), a
assert "enc.layers.1.self_attn.in_proj_weight" in f["params"], list(f["params"])
PY
mpirun_np 1 "$MPIDDP" eval --ckpt "$ck" --data val --device "$DEVICE" > e1.txt
mpirun_np 3 "$MPIDDP" eval --ckpt "$ck" --data val --device "$DEVICE" --batch-size 7 > e3.txt
# accuracy and macro-F1 identical, loss to 1e-6 relative (GEMM rounding depends on the batch's packing)
$PY - e1.txt e3.txt <<'PY'
import sys
a, b = (dict(kv.split("=") for kv in open(p).read().split()) for p in sys.argv[1:3])
assert a["val/acc"] == b["val/acc"] and a["val/macro_f1"] == b["val/macro_f1"], (a, b)
assert abs(float(a["val/loss"]) - float(b["val/loss"])) <= 1e-6 * float(a["val/loss"]), (a, b)
PY
$PY - e1.txt tx/metrics.csv <<'PY'
import csv, sys
ev = dict(kv.split("=") for kv in open(sys.argv[1]).read().split())
rows = [r for r in csv.DictReader(open(sys.argv[2])) if r["val/acc"]]
last = rows[-1]
assert float(ev["val/acc"]) == float(last["val/acc"]), (ev, last)
assert abs(float(ev["val/loss"]) - float(last["val/loss"])) <= 1e-6 * abs(float(last["val/loss"])), (ev, last)
print("eval equals the run's last validation:", ev)
PY
$PY "$SRC/scripts/ckpt_to_torch.py" "$ck" --data val > torch.txt
$PY - e1.txt torch.txt <<'PY'
import sys
ev = dict(kv.split("=") for kv in open(sys.argv[1]).read().split())
pt = dict(kv.split("=") for kv in open(sys.argv[2]).read().split())
assert abs(float(pt["val/loss"]) - float(ev["val/loss"])) <= 1e-5 * float(ev["val/loss"]), (pt, ev)
assert abs(float(pt["val/acc"]) - float(ev["val/acc"])) <= 1.5 / 1000, (pt, ev)  # at most one borderline sample
print("PyTorch bridge:", pt)
PY

# errors: one line, on every rank, non-zero exit
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --out bad1 --model transformer --max-positions 8
[ "$(grep -c "more than --max-positions 8" <<<"$ERR")" -ge 1 ] || fail "no max-positions error: $ERR"
grep -q "train/shard-0000[0-3].h5: /offsets\[[0-9]*\]: sample (id [0-9]*) has 1[0-6] rows, more than --max-positions 8" <<<"$ERR" \
  || fail "the error does not name file, object and index: $ERR"
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${common[@]}" --out bad2 --model transformer --heads 5
[ "$(grep -c -- "--heads 5 must divide --hidden 32" <<<"$ERR")" = 1 ] && ! grep -q "MPI_ABORT" <<<"$ERR" || fail "heads error (one line from rank 0, exit 2): $ERR"
expect_rc 2 "$MPIDDP" train "${common[@]}" --out bad3 --model rnn
grep -q "model" <<<"$ERR" || fail "unknown model: $ERR"
# a resume with other --heads: the parameter shapes do not depend on them, so the checkpoint's tensors would be
# split into other heads (a different model, silently); refused in one line, the run directory untouched
sum0=$(cat tx/metrics.csv tx/run.json | md5sum)
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --out tx --model transformer --heads 2 --epochs 5 --resume auto
[ "$(grep -c -- "saved with --heads 4; this run uses --heads 2" <<<"$ERR")" = 1 ] || fail "resume with other --heads: $ERR"
[ "$(cat tx/metrics.csv tx/run.json | md5sum)" = "$sum0" ] || fail "a resume refused for its --heads changed the run directory"
# nor with fewer --layers: layer 1's tensors would be dropped (the model trained and saved without them)
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --out tx --model transformer --layers 1 --epochs 5 --resume auto
[ "$(grep -c -- "/params/enc.layers.1.[a-z0-9_.]*': not a tensor of the transformer model this run builds ([0-9]* in the file, [0-9]* in the model: another --layers?)" <<<"$ERR")" = 1 ] ||
  fail "resume with fewer --layers: $ERR"
[ "$(cat tx/metrics.csv tx/run.json | md5sum)" = "$sum0" ] || fail "a resume refused for its --layers changed the run directory"
# nor with --positions none: pos.weight would be dropped; the line names that option, not --layers
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --out tx --model transformer --positions none --epochs 5 --resume auto
[ "$(grep -c -- "/params/pos.weight': not a tensor of the transformer model this run builds ([0-9]* in the file, [0-9]* in the model: another --positions?)" <<<"$ERR")" = 1 ] ||
  fail "resume with --positions none: $ERR"
# a resume with another --dropout is allowed (fine-tuning), and said: one notice line from rank 0 naming both values;
# a checkpoint written before mpiddp recorded dropout (no model_dropout attribute) resumes without one
cp -r tx txd && cp -r tx txd_old && cp -r tx txw
mpirun_np 2 "$MPIDDP" train "${common[@]}" --out txd --model transformer --dropout 0.1 --epochs 5 --resume auto >/dev/null 2>txd.err ||
  fail "resume with another --dropout: $(cat txd.err)"
[ "$(grep -c -- "notice: txd/checkpoints/last.h5 was trained with --dropout 0; this run continues with --dropout 0.1$" txd.err)" = 1 ] ||
  fail "resume with another --dropout: no notice naming both values: $(cat txd.err)"
[ "$(grep -c -- "--dropout" txd.err)" = 1 ] || fail "resume with another --dropout: not one line: $(cat txd.err)"
! grep -q -- "--weight-decay" txd.err || fail "resume with the same --weight-decay: a notice: $(cat txd.err)"
# so is one with another --weight-decay (attribute weight_decay)
mpirun_np 2 "$MPIDDP" train "${common[@]}" --out txw --model transformer --weight-decay 0.05 --epochs 5 --resume auto \
  >/dev/null 2>txw.err || fail "resume with another --weight-decay: $(cat txw.err)"
[ "$(grep -c -- "--weight-decay" txw.err)" = 1 ] &&
  grep -q -- "notice: txw/checkpoints/last.h5 was trained with --weight-decay 0.01; this run continues with --weight-decay 0.05$" txw.err ||
  fail "resume with another --weight-decay: not one notice naming both values: $(cat txw.err)"
$PY -c "import h5py; a = h5py.File('txd_old/checkpoints/last.h5', 'r+').attrs; del a['model_dropout']; del a['weight_decay']"
mpirun_np 2 "$MPIDDP" train "${common[@]}" --out txd_old --model transformer --dropout 0.1 --epochs 5 --resume auto >/dev/null 2>txd_old.err ||
  fail "resume of a checkpoint without model_dropout: $(cat txd_old.err)"
! grep -q -- "--dropout" txd_old.err || fail "a checkpoint without model_dropout: a dropout notice: $(cat txd_old.err)"
! grep -q -- "--weight-decay" txd_old.err || fail "a checkpoint without weight_decay: a notice: $(cat txd_old.err)"
pass "transformer: order task $acc (mlp $acc_mlp, no positions $acc_np), eval, PyTorch bridge, errors"

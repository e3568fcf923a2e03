# Exact, world-size independent validation: one checkpoint evaluated on a 1001-sample set at np 1, 2, 3
# and 4 gives the same accuracy and macro-F1 (same confusion matrix), and prediction files with each
# sample id exactly once, the same labels and the same predicted classes. Float outputs are compared
# with the tolerances README states (val/loss 1e-6 relative, prob 1e-5 absolute): a sample's logits
# depend on its position in the packed batch, because OpenBLAS sums a GEMM's edge rows in another order
# on some CPUs (OPENBLAS_CORETYPE=Haswell shows it). The trainer's own validation equals eval's; a batch past the
# set gives eval's results bit for bit; a rank with no validation sample abstains from the vote (np 2 and 4); shard
# sampling at np 4 over 7 uneven shards runs equal step counts; the plot script draws metrics.csv.
. "$(dirname "$0")/lib.sh"
synth --out train --samples 400 --dim 8 --classes 5 --min-rows 1 --max-rows 9 --shards 3 --seed 2
synth --out val --samples 1001 --dim 8 --classes 5 --min-rows 1 --max-rows 9 --shards 3 --seed 2 --first-id 50000
mpirun_np 1 "$MPIDDP" train --device "$DEVICE" --train train --val val --out run --epochs 3 --batch-size 16 --hidden 16 --lr 0.01 --no-progress "${MODEL_ARGS[@]}" >/dev/null
for np in 1 2 3 4; do
  mpirun_np $np "$MPIDDP" eval --device "$DEVICE" --ckpt run/checkpoints/last.h5 --data val --out pred$np.csv --batch-size 7 > eval$np.txt
  cat eval$np.txt
done
runs="1 2 3 4"
if [ "$DEVICE" != cpu ]; then # the CUDA path (GPU or host emulator) against the CPU backend, same tolerances
  mpirun_np 1 "$MPIDDP" eval --device cpu --ckpt run/checkpoints/last.h5 --data val --out predcpu.csv --batch-size 7 > evalcpu.txt
  runs="$runs cpu"
fi
RUNS="$runs" $PY - <<'PY' || fail "eval differs across world sizes"
import csv, os
vals = []
worst = 0.0
for np in os.environ["RUNS"].split():
    kv = dict(x.split("=") for x in open(f"eval{np}.txt").read().split())
    vals.append({k: float(v) for k, v in kv.items()})
    rows = list(csv.DictReader(open(f"pred{np}.csv")))
    ids = [int(r["sample_id"]) for r in rows]
    assert len(ids) == 1001 and len(set(ids)) == 1001 and min(ids) == 50000 and max(ids) == 51000, np
    ref = list(csv.DictReader(open("pred1.csv")))
    for a, b in zip(rows, ref):
        assert (a["sample_id"], a["label"], a["pred"]) == (b["sample_id"], b["label"], b["pred"]), (np, a, b)
        d = abs(float(a["prob"]) - float(b["prob"]))
        worst = max(worst, d)
        assert d <= 1e-5, f"prob of sample {a['sample_id']} at np {np}: {a['prob']} vs {b['prob']}"
    correct = sum(r["label"] == r["pred"] for r in rows) / 1001
    assert abs(correct - vals[-1]["val/acc"]) < 1e-8, (correct, vals[-1])
for v in vals[1:]:
    assert v["val/acc"] == vals[0]["val/acc"] and v["val/macro_f1"] == vals[0]["val/macro_f1"], (v, vals[0])
    assert abs(v["val/loss"] - vals[0]["val/loss"]) <= 1e-6 * abs(vals[0]["val/loss"]), (v, vals[0])
# the trainer's validation of the same parameters is the same computation
last = [r for r in csv.DictReader(open("run/metrics.csv")) if r["val/loss"]][-1]
assert abs(float(last["val/loss"]) - vals[0]["val/loss"]) <= 1e-6 * vals[0]["val/loss"], (last, vals[0])
assert abs(float(last["val/acc"]) - vals[0]["val/acc"]) < 1e-8
print(f"largest prob difference across np 1-4: {worst:.2e}; val/loss spread: "
      f"{max(abs(v['val/loss'] - vals[0]['val/loss']) for v in vals) / vals[0]['val/loss']:.2e} relative")
PY
# a batch past the set: eval's buffers hold a rank's share (tests/unit/test_sampler.c), the results are a batch of it
mpirun_np 2 "$MPIDDP" eval --device "$DEVICE" --ckpt run/checkpoints/last.h5 --data val --out big.csv --batch-size 10000000 > big.txt
mpirun_np 2 "$MPIDDP" eval --device "$DEVICE" --ckpt run/checkpoints/last.h5 --data val --out share.csv --batch-size 501 > share.txt
cmp -s big.txt share.txt && cmp -s big.csv share.csv || fail "--batch-size 10000000 differs from a rank's share (501): $(cat big.txt share.txt)"
# a validation set smaller than the world: a rank holding padding only has no local value (empty cells in its
# metrics file, val/count 0) and abstains from the vote; it neither blocks a save nor counts as a rank that did not
# improve (it voted with 0 before: "ranks disagree" and an early stop while rank 0 improved)
synth --out val1 --samples 1 --dim 8 --classes 5 --min-rows 1 --max-rows 9 --shards 1 --seed 4 --first-id 60000
synth --out val3 --samples 3 --dim 8 --classes 5 --min-rows 1 --max-rows 9 --shards 1 --seed 4 --first-id 60000
for np in 2 4; do
  v=$([ $np = 2 ] && echo val1 || echo val3) idle=$((np - 1))
  mpirun_np $np "$MPIDDP" train --device "$DEVICE" --train train --val $v --out abst$np --epochs 3 --batch-size 16 --hidden 16 \
    --lr 0.01 --ckpt-policy all --early-stop-patience 1 --log-per-rank --no-progress "${MODEL_ARGS[@]}" >/dev/null
  log=abst$np/checkpoints/decisions.log
  [ "$(grep -c "; no value on ranks $idle)" $log)" = "$(grep -c . $log)" ] || fail "np $np: rank $idle voted: $(cat $log)"
  [ $np = 4 ] || [ "$(grep -c -e 'save (improved on ranks 0; not on ranks none;' -e 'no save (improved on ranks none; not on ranks 0;' $log)" = "$(grep -c . $log)" ] ||
    fail "np 2: the decision is not rank 0's: $(cat $log)"
  awk -F, -v r=$idle 'NR==1{for(i=1;i<=NF;i++) c[$i]=i; next} $c["val/count"]!="" {n++; if ($c["val/count"]!=0 || $c["val/loss"]!="" || $c["val/acc"]!="" || $c["val/macro_f1"]!="") bad=1}
    END{exit !(n && !bad)}' abst$np/metrics_rank$idle.csv || fail "np $np: rank $idle's validation cells: $(cat abst$np/metrics_rank$idle.csv)"
  [ "$(csv_last abst$np/metrics_rank0.csv val/loss)" != "" ] || fail "np $np: rank 0 has no val/loss"
done
# shard sampling over 7 uneven shards (3..37 samples) at np 4: equal step counts, every rank finishes
$PY "$SRC/tests/py/make_shards.py" variants v
mpirun_np 4 "$MPIDDP" train --device "$DEVICE" --train v/h5py_contig --val v/one_shard --out shard4 --sampling shard --epochs 2 --batch-size 4 --log-every 1 --log-per-rank --no-progress >/dev/null
for r in 1 2 3; do
  [ "$(wc -l < shard4/metrics_rank$r.csv)" = "$(wc -l < shard4/metrics_rank0.csv)" ] || fail "rank $r logged a different number of steps"
done
# the largest shard (37 samples, batch 4) sets 10 steps per epoch on every rank: 20 train rows + 2 val rows
[ "$(grep -c . shard4/metrics.csv)" = 23 ] || fail "shard mode step count: $(grep -c . shard4/metrics.csv) lines"
bash "$SRC/scripts/plot_metrics.sh" run run/metrics.png >/dev/null
head -c 8 run/metrics.png | od -An -c | qgrep "P   N   G" || fail "metrics.png is not a PNG"
pass "validation and predictions are exact at np 1-4; a batch past the set; ranks without a sample abstain; shard sampling balanced at np 4; plot"

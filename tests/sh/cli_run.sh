# The CLI and the run directory: --help everywhere, one-line usage errors with exit 2, --config INI with
# the command line winning, metrics.csv columns, run.json, per-rank files, --fast-dev-run at np 1/2/4.
. "$(dirname "$0")/lib.sh"
for c in synth pack inspect train env; do expect_rc 0 "$MPIDDP" $c --help; done
expect_rc 0 "$MPIDDP" --help
expect_rc 2 "$MPIDDP" frobnicate
for bad in "--epochs 0" "--epochs x" "--lr -1" "--sampling both" "--batch-size" "--nope 1"; do
  expect_rc 2 "$MPIDDP" train --device "$DEVICE" --train t --val v --out o $bad
  [ "$(printf '%s\n' "$ERR" | wc -l)" = 1 ] || fail "'$bad': expected one line: $ERR"
done
synth --out t --samples 120 --shards 2 --dim 6 --classes 3
synth --out v --samples 50 --shards 1 --dim 6 --classes 3 --first-id 9999
printf '[train]\nepochs = 1\nbatch_size = 5\nhidden = 12\nlr = 0.002\n' > good.ini
mpirun_np 2 "$MPIDDP" train --device "$DEVICE" --config good.ini --train t --val v --out r --hidden 10 --log-per-rank --log-every 3 --no-progress > o.txt
grep -q "run directory: $WORK/r" o.txt || fail "run directory not printed"
head -1 r/metrics.csv | qgrep '^epoch,step,train/loss,train/samples_per_s,lr,val/loss,val/acc,val/macro_f1' || fail "metrics.csv header: $(head -1 r/metrics.csv)"
$PY - <<'PY' || fail "run.json / config precedence / per-rank files"
import csv, json
j = json.load(open("r/run.json"))
assert j["world_size"] == 2 and len(j["ranks"]) == 2 and j["hosts"], j
c = j["config"]
assert c["epochs"] == 1 and c["batch-size"] == 5 and c["hidden"] == 10 and abs(c["lr"] - 0.002) < 1e-12, c
assert j["versions"]["hdf5"] and j["versions"]["mpi"] and j["start_time"]
assert "onednn" in j["versions"], j["versions"]
g = [r for r in csv.DictReader(open("r/metrics.csv"))]
ranks = [[r for r in csv.DictReader(open(f"r/metrics_rank{k}.csv"))] for k in range(2)]
for k in range(2):
    assert all(r["rank"] == str(k) for r in ranks[k])
# every logging event on both files; per-rank train losses average (equal counts) to the global one
tg = [float(r["train/loss"]) for r in g if r["train/loss"]]
t0 = [float(r["train/loss"]) for r in ranks[0] if r["train/loss"]]
t1 = [float(r["train/loss"]) for r in ranks[1] if r["train/loss"]]
assert len(tg) == len(t0) == len(t1) > 0
assert all(abs((a + b) / 2 - x) < 1e-6 for a, b, x in zip(t0, t1, tg)), (tg, t0, t1)
vg = float([r for r in g if r["val/loss"]][-1]["val/loss"])
v = [[r for r in ranks[k] if r["val/loss"]][-1] for k in range(2)]
n = [float(x["val/count"]) for x in v]
assert sum(n) == 50, n
assert abs(sum(float(x["val/loss"]) * m for x, m in zip(v, n)) / 50 - vg) < 1e-6
PY
printf 'epochs = 1\nwarp = 9\n' > bad.ini
expect_rc 2 "$MPIDDP" train --device "$DEVICE" --config bad.ini --train t --val v --out r2
printf '%s' "$ERR" | qgrep "bad.ini:2: unknown key 'warp'" || fail "bad config message: $ERR"
for np in 1 2 4; do
  mpirun_np $np "$MPIDDP" train --device "$DEVICE" --train t --val v --out f$np --fast-dev-run 2 --batch-size 4 --no-progress >/dev/null
  [ ! -e f$np/checkpoints/last.h5 ] || fail "fast-dev-run wrote a checkpoint"
  [ "$(grep -c . f$np/metrics.csv)" -ge 3 ] || fail "fast-dev-run np $np metrics"
done
pass "CLI, config, run directory"

# docs/walkthrough.md, run as written: every ```bash block of the page, in order, in one shell, at np 2 with
# the page's own sizes: numpy arrays -> shards (h5py writer, and mpiddp pack) -> inspect -> train -> slurm-script
# -> eval -> ckpt_to_torch.py and the page's predict.py. The ```sh blocks are the ones it does not run: the
# setup line (replaced here by the build under test) and the SLURM submission. Then the page's promises.
. "$(dirname "$0")/lib.sh"
DOC="$SRC/docs/walkthrough.md"
# The page's own environment block must be enough: drop what lib.sh exports for the mpirun of other tests.
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_mpi_yield_when_idle OMPI_MCA_rmaps_base_oversubscribe
# The page's setup: `mpiddp` and a python3 with numpy, h5py and torch on PATH, SRC the source tree; ~ is ours.
mkdir -p bin home
ln -s "$MPIDDP" bin/mpiddp
ln -s "$PY" bin/python3
export PATH="$WORK/bin:$PATH" HOME="$WORK/home" SRC

awk '/^```bash$/ {on = 1; next} /^```/ {on = 0} on' "$DOC" > blocks.sh
[ "$(grep -c '^```bash$' "$DOC")" -ge 10 ] || fail "expected the walkthrough's bash blocks in $DOC"
set +e
bash -euo pipefail blocks.sh > walk.out 2> walk.err
rc=$?
set -e
[ "$rc" = 0 ] || { cat walk.out; cat walk.err >&2; fail "the walkthrough's commands exited $rc"; }

D="$WORK/home/mpiddp-walk"
cd "$D"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
# 2a and 2b: the same samples, 4 training shards each, all memory-mappable
for ds in data packed; do
  [ "$(ls $ds/train/*.h5 | wc -l)" = 4 ] || fail "$ds/train: expected 4 shards"
  "$MPIDDP" inspect $ds/train > $ds.inspect
  grep -q "4 of 4 shard(s) memory-mappable" $ds.inspect || fail "$ds/train not mappable: $(cat $ds.inspect)"
done
[ "$(sed -n 2p data.inspect)" = "$(sed -n 2p packed.inspect)" ] || fail "pack and the h5py writer differ: $(sed -n 2p data.inspect) vs $(sed -n 2p packed.inspect)"
grep -q "shards 4  samples 2400 .* D 16  classes 5" data.inspect || fail "inspect: $(sed -n 2p data.inspect)"
# 4: trained, balanced, a best checkpoint by val/acc
acc=$(csv_last runs/first/metrics.csv val/acc)
bal=$(csv_last runs/first/metrics.csv train/rows_per_rank_max_over_mean)
awk -v a="$acc" 'BEGIN{exit !(a >= 0.8)}' || fail "val/acc $acc < 0.8"
awk -v b="$bal" 'BEGIN{exit !(b >= 1 && b < 1.1)}' || fail "rows_per_rank_max_over_mean $bal"
grep -q "run directory: $D/runs/first" "$WORK/walk.out" || fail "no run directory line"
# 5: the generated script runs the page's train arguments under srun --mpi=pmix
grep -q "^srun --mpi=pmix --kill-on-bad-exit=1 .*mpiddp train --train data/train --val data/val --out runs/slurm .*--resume auto$" job.sh \
  || fail "job.sh: $(grep srun job.sh)"
# 6 and 7: eval's numbers, the bridge's and predict.py's agree
[ "$(($(wc -l < preds.csv) - 1))" = 600 ] || fail "preds.csv: expected 600 rows"
ev=$(grep -o 'val/acc=[0-9.]*' "$WORK/walk.out" | head -1 | cut -d= -f2)
tv=$(grep -o 'val/acc=[0-9.]*' "$WORK/walk.out" | sed -n 2p | cut -d= -f2)
awk -v a="$ev" -v b="$tv" 'BEGIN{d = a - b; exit !(a != "" && (d < 0 ? -d : d) < 1e-4)}' || fail "eval val/acc $ev vs ckpt_to_torch $tv"
grep -q "agree on 600 of 600 predictions" "$WORK/walk.out" || fail "predict.py: $(grep agree "$WORK/walk.out")"
[ -s model.pt ] || fail "model.pt not written"
# predict.py as written also serves a Transformer checkpoint (forward_packed)
mkdir tx && cp mydata.py predict.py tx/ && cd tx
mpirun_np 2 "$MPIDDP" train --train ../data/train --val ../data/val --out run --epochs 1 --batch-rows 512 \
  --model transformer --hidden 16 --heads 2 --layers 1 --no-progress > /dev/null
mpirun_np 2 "$MPIDDP" eval --ckpt run/checkpoints/last.h5 --data ../data/val --out preds.csv > /dev/null
python3 predict.py run/checkpoints/last.h5 > predict.out
grep -q "agree on 600 of 600 predictions" predict.out || fail "predict.py on a transformer: $(cat predict.out)"
pass "the walkthrough runs as written (val/acc $acc, rows max/mean $bal)"

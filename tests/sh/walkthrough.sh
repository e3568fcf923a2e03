# docs/walkthrough.md, run as written: every ```bash block of the page, in order, in one shell, at np 2 with
# the page's own sizes: numpy arrays -> shards (h5py writer, and mpiddp pack) -> inspect -> train -> slurm-script
# -> eval -> ckpt_to_torch.py and the page's predict.py. The ```sh blocks are the ones it does not run: the
# setup line (replaced here by the build under test) and the SLURM submission. Then the page's promises: the
# progress lines and the end-of-run summary it quotes (#34: one format, epochs from 0, the step within the epoch
# and the global step, the best checkpoint's path and value), pack --classes, and that the Python steps call $PY.
. "$(dirname "$0")/lib.sh"
DOC="$SRC/docs/walkthrough.md"
# The page's own environment block must be enough: drop what lib.sh exports for the mpirun of other tests.
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_mpi_yield_when_idle OMPI_MCA_rmaps_base_oversubscribe
# The page's setup: `mpiddp` on PATH, SRC the source tree, PY a python3 with numpy, h5py and torch; ~ is ours.
# A bare `python3` in the page would find whatever python3 comes first on PATH, which may lack h5py: the page
# calls "$PY", and a python3 here fails loudly.
mkdir -p bin home
ln -s "$MPIDDP" bin/mpiddp
printf '#!/bin/sh\necho "walkthrough.md ran a bare python3 ($*): its examples call \\"\\$PY\\"" >&2\nexit 127\n' > bin/python3
chmod +x bin/python3
export PATH="$WORK/bin:$PATH" HOME="$WORK/home" SRC PY

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
[ "$(grep '^shards ' data.inspect)" = "$(grep '^shards ' packed.inspect)" ] || fail "pack and the h5py writer differ: $(grep '^shards ' data.inspect) vs $(grep '^shards ' packed.inspect)"
grep -q "shards 4  samples 2400 .* D 16  classes 5" data.inspect || fail "inspect: $(sed -n 2p data.inspect)"
# 4: trained, balanced, a best checkpoint by val/acc
acc=$(csv_last runs/first/metrics.csv val/acc)
bal=$(csv_last runs/first/metrics.csv train/rows_per_rank_max_over_mean)
awk -v a="$acc" 'BEGIN{exit !(a >= 0.8)}' || fail "val/acc $acc < 0.8"
awk -v b="$bal" 'BEGIN{exit !(b >= 1 && b < 1.1)}' || fail "rows_per_rank_max_over_mean $bal"
grep -q "run directory: $D/runs/first" "$WORK/walk.out" || fail "no run directory line"
# the progress lines: one format, epochs from 0, the step within the epoch and the global step (#34 item 4); the
# page's quoted lines have the same format
RE='^epoch [0-9]+ \(of [0-9]+\) step [0-9]+/[0-9]+ \(global [0-9]+\) loss [0-9.]+ [0-9]+ samples/s ETA ([0-9]+:)?[0-9]+:[0-9][0-9]$'
grep '^epoch [0-9]* (of' "$WORK/walk.err" > progress.txt || fail "no progress lines: $(head -5 "$WORK/walk.err")"
bad=$(grep -Ev "$RE" progress.txt || true)
[ -z "$bad" ] || fail "progress lines not in the documented format: $bad"
grep -q '^epoch 0 (of 4) step' progress.txt || fail "progress does not count epochs from 0: $(head -2 progress.txt)"
# within an epoch K/M counts the epoch's optimizer steps, and global = the steps of the epochs before + K
awk '{split($6, km, "/"); g = $8; sub(/\)/, "", g); e = $2
      if (e != pe) { base += m; if (pk != pm) bad = bad " epoch " pe " ended at " pk "/" pm }
      if (g != base + km[1]) bad = bad " [" $0 "]"
      pe = e; pk = km[1]; pm = km[2]; m = km[2]}
     END {if (pk != pm) bad = bad " last epoch ended at " pk "/" pm; if (bad != "") {print bad; exit 1}}' progress.txt \
  || fail "progress steps do not add up: $(awk '{split($6, km, "/"); g = $8; sub(/\)/, "", g); e = $2; if (e != pe) base += m; if (g != base + km[1]) print; pe = e; m = km[2]}' progress.txt | head -3)"
quoted=$(grep '^    epoch [0-9]* (of' "$DOC" | sed 's/^    //')
[ -n "$quoted" ] || fail "the page quotes no progress line"
bad=$(printf '%s\n' "$quoted" | grep -Ev "$RE" || true)
[ -z "$bad" ] || fail "the page's progress lines are not the program's format: $bad"
# decisions.log and the validation lines count epochs from 0 too (the page used to say 1)
head -1 runs/first/checkpoints/decisions.log | qgrep '^epoch 0 step ' || fail "decisions.log: $(head -1 runs/first/checkpoints/decisions.log)"
grep -q '^epoch 0: val/loss=' "$WORK/walk.err" || fail "no 'epoch 0:' validation line"
grep -qi 'from 1' "$DOC" && fail "the page still says something counts from 1: $(grep -i 'from 1' "$DOC")"
# the end-of-run summary on stdout: where it ended (= metrics.csv's last row), the best checkpoint (a file of the
# run, val/acc = the best of metrics.csv), the samples trained (2400 per epoch, no padding with --batch-rows)
end=$(grep '^mpiddp train: \(finished\|early stopping\) at epoch' "$WORK/walk.out") || fail "no summary: $(cat "$WORK/walk.out")"
last_step=$(tail -1 runs/first/metrics.csv | cut -d, -f2)
last_epoch=$(tail -1 runs/first/metrics.csv | cut -d, -f1)
printf '%s' "$end" | qgrep -E "at epoch $last_epoch \(of 4\) step ([0-9]+)/\1 \(global $last_step\)$" \
  || fail "summary '$end' vs metrics.csv's last row (epoch $last_epoch, step $last_step)"
best=$(grep '^mpiddp train: best checkpoint: ' "$WORK/walk.out") || fail "no best checkpoint line"
path=$(printf '%s' "$best" | sed -E 's/^mpiddp train: best checkpoint: (.*\.h5), val\/acc=.*/\1/')
[ -f "$path" ] && case $path in "$D"/runs/first/checkpoints/epoch=*) ;; *) false ;; esac || fail "best checkpoint '$path' is not a file of the run"
val=$(printf '%s' "$best" | sed -E 's/.*, val\/acc=([^ ]*) .*/\1/')
top=$(awk -F, 'NR==1{for(i=1;i<=NF;i++) if($i=="val/acc") c=i; next} $c!="" && ($c+0 > b+0 || b=="") {b=$c} END{print b}' runs/first/metrics.csv)
[ "$val" = "$top" ] || fail "summary's best val/acc $val, metrics.csv's best $top"
samples=$(grep -o 'trained [0-9]* samples' "$WORK/walk.out" | cut -d' ' -f2)
[ "$samples" = $(( (last_epoch + 1) * 2400 )) ] || fail "summary: trained $samples samples, expected $(( (last_epoch + 1) * 2400 ))"
grep -Eq '^mpiddp train: [0-9.]+ s; trained [0-9]+ samples, [0-9]+ samples/s \([0-9]+ tokens/s\)$' "$WORK/walk.out" \
  || fail "summary throughput line: $(grep 'samples/s' "$WORK/walk.out")"
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
$PY predict.py run/checkpoints/last.h5 > predict.out
grep -q "agree on 600 of 600 predictions" predict.out || fail "predict.py on a transformer: $(cat predict.out)"
pass "the walkthrough runs as written (val/acc $acc, rows max/mean $bal)"

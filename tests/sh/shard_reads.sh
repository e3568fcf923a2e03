# A feature read that fails after validation (a corrupt chunk: its Fletcher-32 checksum no longer matches) names the
# shard by its directory as well, since train and val both hold shard-00001.h5, and says which rows and which sample
# (it once said "shard-00001.h5: dataset 'features'[3]", a sample index that read like a row): train at np 1 and 2,
# train --check-finite and inspect. And inspect's rows-per-sample histogram labels its last bin 32768+ (it once
# labelled samples of 65536 rows and more "32768-65535"), from the shards and from the manifest.
. "$(dirname "$0")/lib.sh"
$PY "$SRC/tests/py/make_data_cases.py" corrupt cc
read -r _ lo hi < <(grep '^rows ' cc/expect.txt)
read -r _ smp < <(grep '^sample ' cc/expect.txt)
read -r _ total < <(grep '^total ' cc/expect.txt)
cd cc
for np in 1 2; do
  expect_rc 1 timeout 60 mpirun -np $np --oversubscribe "$MPIDDP" train --device cpu --train train --val val --out run_$np --batch-size 2 \
    --hidden 4 --epochs 1 --no-progress
  line=$(printf '%s\n' "$ERR" | grep 'error:' || true)
  [ "$(printf '%s\n' "$line" | wc -l)" = 1 ] || fail "train at np $np: expected one error line, got: $ERR"
  printf '%s\n' "$line" | qgrep -E "^mpiddp train: (rank [0-9]+: )?error: train/shard-00001\.h5: dataset 'features'\[rows $lo\.\.$hi\]: read failed \(corrupt or truncated file\?\), in sample $smp of the shard \(offsets\[$smp\]\)$" ||
    fail "train at np $np: $line"
  expect_rc 1 timeout 60 mpirun -np $np --oversubscribe "$MPIDDP" train --device cpu --train train --val val --out fin_$np --batch-size 2 \
    --hidden 4 --epochs 1 --no-progress --check-finite
  printf '%s\n' "$ERR" | qgrep -E "error: train/shard-00001\.h5: dataset 'features'\[rows 0\.\.$((total - 1))\]: read failed \(corrupt or truncated file\?\)$" ||
    fail "train --check-finite at np $np: $ERR"
  expect_rc 1 timeout 60 mpirun -np $np --oversubscribe "$MPIDDP" inspect train
  printf '%s\n' "$ERR" | qgrep -E "^mpiddp inspect: error: train/shard-00001\.h5: dataset 'features'\[rows 0\.\.$((total - 1))\]: read failed \(corrupt or truncated file\?\)$" ||
    fail "inspect at np $np: $ERR"
done
cd "$WORK"

$PY "$SRC/tests/py/make_data_cases.py" long lc
hist() { printf '%s\n' "$1" | awk '/^rows-per-sample histogram:/ {on = 1; next} /^class counts:/ {on = 0} on {print $1, $2}'; }
for pass_ in shards manifest; do
  [ $pass_ = manifest ] && { expect_rc 0 "$MPIDDP" index lc; }
  expect_rc 0 "$MPIDDP" inspect lc
  [ $pass_ = shards ] || printf '%s' "$OUT" | qgrep "^metadata from lc/mpiddp-manifest.bin (1 shards unchanged, 0 re-validated)$" ||
    fail "inspect did not use the manifest: $OUT"
  [ "$(hist "$OUT")" = "$(cat lc/hist.txt)" ] || fail "histogram from the $pass_: got $(hist "$OUT" | tr '\n' ';'), expected $(tr '\n' ';' < lc/hist.txt)"
done
pass "read errors name DIR/FILE, rows and sample; the histogram's last bin is 32768+"

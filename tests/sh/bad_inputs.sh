# Every docs/faults.md data case, written with h5py: `inspect` exits 1 with one line naming file, object and
# index (data stored outside the shard also at np 2); under mpirun -np 4 `train` stops every rank non-zero within
# 10 s and writes no run directory.
. "$(dirname "$0")/lib.sh"
$PY "$SRC/tests/py/make_shards.py" bad bad
n=0
while IFS='|' read -r name regex; do
  expect_rc 1 "$MPIDDP" inspect "bad/$name"
  [ "$(printf '%s\n' "$ERR" | wc -l)" = 1 ] || fail "$name: expected one line, got: $ERR"
  printf '%s\n' "$ERR" | qgrep -E "$regex" || fail "$name: '$ERR' does not match /$regex/"
  n=$((n + 1))
done < bad/cases.txt
synth --out good --samples 40 --dim 5 --classes 3 --shards 2
# data stored outside the shard (virtual or external datasets) at np 2, in the shard rank 1 validates: one line
for name in virtual_features virtual_labels external_features external_offsets; do
  mkdir "mix_$name"; cp good/shard-00000.h5 "mix_$name/a0.h5"; cp "bad/$name/s0.h5" "mix_$name/z1.h5"
  regex=$(grep "^$name|" bad/cases.txt | cut -d'|' -f2- | sed "s|^$name/s0|mix_$name/z1|")
  expect_rc 1 mpirun_np 2 "$MPIDDP" inspect "mix_$name"
  [ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] || fail "$name at np 2: expected one error line, got: $ERR"
  printf '%s\n' "$ERR" | grep 'error:' | qgrep -E "$regex" || fail "$name at np 2: '$ERR' does not match /$regex/"
  n=$((n + 1))
done
for name in $(cut -d'|' -f1 bad/cases.txt); do
  start=$(date +%s)
  expect_rc 1 timeout 10 mpirun -np 4 --oversubscribe "$MPIDDP" train --device "$DEVICE" --train "bad/$name" --val good --out "run_$name"
  [ $(( $(date +%s) - start )) -le 10 ] || fail "$name: took more than 10 s"
  [ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] || fail "$name: expected one error line, got: $ERR"
  [ ! -e "run_$name" ] || fail "$name: run directory was created"
done
# files that crash or hang HDF5 itself (found by the fuzzer): contained, one line, every rank exits
for f in "$SRC"/tests/fuzz/regressions/*; do
  d=fz_$(basename "$f" .h5); mkdir -p "$d"; cp "$f" "$d/s0.h5"
  expect_rc 1 env MPIDDP_VALIDATE_TIMEOUT=3 timeout 20 "$MPIDDP" inspect "$d"
  [ "$(printf '%s\n' "$ERR" | wc -l)" = 1 ] && printf '%s' "$ERR" | qgrep "$d/s0.h5" || fail "$d: $ERR"
  start=$(date +%s)
  expect_rc 1 env MPIDDP_VALIDATE_TIMEOUT=3 timeout 20 mpirun -np 4 --oversubscribe "$MPIDDP" train --device "$DEVICE" --train "$d" --val good --out "run_$d"
  [ $(( $(date +%s) - start )) -le 10 ] || fail "$d: took more than 10 s"
  n=$((n + 1))
done
pass "$n bad-input cases rejected with the expected one-line messages"

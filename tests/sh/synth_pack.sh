# synth is deterministic and independent of how many ranks write it; pack round-trips a per-sample file;
# writers produce contiguous, 4096-aligned, mappable shards and refuse to overwrite a dataset.
. "$(dirname "$0")/lib.sh"
"$MPIDDP" synth --out a --samples 500 --shards 5 --seed 3 >/dev/null
mpirun_np 3 "$MPIDDP" synth --out b --samples 500 --shards 5 --seed 3 >/dev/null
"$MPIDDP" synth --out c --samples 500 --shards 5 --seed 4 >/dev/null
"$TESTTOOL" dump a > a.dump; "$TESTTOOL" dump b > b.dump; "$TESTTOOL" dump c > c.dump
cmp -s a.dump b.dump || fail "synth differs between 1 and 3 writer ranks"
! cmp -s a.dump c.dump || fail "a different seed gave the same data"
"$MPIDDP" inspect a | qgrep "5 of 5 shard(s) memory-mappable" || fail "synth shards not mappable"
expect_rc 1 "$MPIDDP" synth --out a --samples 10
printf '%s' "$ERR" | qgrep "already holds" || fail "synth overwrote a dataset: $ERR"
ls -a a | qgrep tmp && fail "temporary files left behind"
$PY "$SRC/tests/py/make_shards.py" pack-input in.h5
mpirun_np 2 "$MPIDDP" pack --input in.h5 --out packed --shards 4 >/dev/null
$PY "$SRC/tests/py/make_shards.py" check-pack in.h5 packed
"$MPIDDP" inspect packed | qgrep "samples 57" || fail "inspect of packed dataset"
# --classes sets num_classes above the largest label (a split without the top class), and refuses one below it
mpirun_np 2 "$MPIDDP" pack --input in.h5 --out packed9 --classes 9 >/dev/null
$PY -c "import h5py, glob; assert all(int(h5py.File(p).attrs['num_classes']) == 9 for p in glob.glob('packed9/*.h5'))" || fail "pack --classes 9"
top=$($PY -c "import h5py; print(int(h5py.File('in.h5')['labels'][()].max()))")
expect_rc 1 mpirun_np 2 "$MPIDDP" pack --input in.h5 --out packed_low --classes "$top"
grep -q "holds label $top, not below --classes $top" <<<"$ERR" || fail "pack --classes below a label: $ERR"
expect_rc 1 "$MPIDDP" pack --input missing.h5 --out p2
printf '%s' "$ERR" | qgrep "missing.h5" || fail "pack error does not name the file"
pass "synth and pack"

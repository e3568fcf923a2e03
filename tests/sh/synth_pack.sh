# synth is deterministic and independent of how many ranks write it; pack round-trips a per-sample file;
# writers produce contiguous, 4096-aligned, mappable shards and refuse to overwrite a dataset; pack refuses labels
# beyond the format's 2^24 classes; index's manifest of unsigned or big-endian labels is one its readers accept;
# a failed pack or synth leaves no shard behind.
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
# a writer killed before its rename leaves its temporary; the next synth or pack into that directory (it holds no
# shard) removes it, and the manifest writer's, but no file of another form: a 200 MB shard killed while written
"$MPIDDP" synth --out killed --samples 25000 --dim 64 --shards 1 --seed 3 >/dev/null 2>&1 &
job=$!
for _ in $(seq 600); do compgen -G "killed/.shard-*.h5.tmp.*" >/dev/null && break; sleep 0.02; done
kill -KILL $job; wait $job || true
[ -n "$(compgen -G "killed/.shard-00000.h5.tmp.*")" ] || fail "no temporary of the killed synth (it finished first?): $(ls -a killed)"
touch killed/mpiddp-manifest.bin.tmp.123 killed/.shard-00000.h5.tmp.mine killed/.shard-x.h5.tmp.1 killed/mpiddp-manifest.bin.tmp.
"$MPIDDP" synth --out killed --samples 50 --shards 2 --seed 3 >/dev/null
[ "$(LC_ALL=C ls -A killed | tr '\n' ' ')" = ".shard-00000.h5.tmp.mine .shard-x.h5.tmp.1 mpiddp-manifest.bin mpiddp-manifest.bin.tmp. shard-00000.h5 shard-00001.h5 " ] ||
  fail "after a killed synth and a new one: $(ls -A killed | tr '\n' ' ')"
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
# a label of 2^24 or more (num_classes would leave the format's range; 2^63 wrapped) is refused with its index, and
# --classes above 2^24 is a usage error: pack once wrote shards no reader accepts and exited 0
for big in 16777216 9223372036854775807; do
  $PY -c "import h5py, numpy as np, shutil; shutil.copy('in.h5', 'big.h5'); f = h5py.File('big.h5', 'a'); l = f['labels'][()].astype(np.int64); l[3] = $big; del f['labels']; f['labels'] = l"
  expect_rc 1 mpirun_np 2 "$MPIDDP" pack --input big.h5 --out packed_big
  grep -q "big.h5: dataset '/labels'\[3\]: label $big: at most 16777216 classes" <<<"$ERR" || fail "pack, label $big: $ERR"
  [ -z "$(ls packed_big 2>/dev/null)" ] || fail "pack, label $big: wrote $(ls packed_big)"
done
expect_rc 2 "$MPIDDP" pack --input in.h5 --out packed_big --classes 16777217
# labels that validation reads but cannot map (unsigned, big-endian) still give a manifest its readers accept
for t in u4 '>i8'; do
  rm -rf lab; cp -a a lab; rm lab/mpiddp-manifest.bin
  $PY -c "import h5py, glob; [(lambda f: (lambda l: (f.__delitem__('labels'), f.create_dataset('labels', data=l.astype('$t'))))(f['labels'][()]))(h5py.File(p, 'a')) for p in sorted(glob.glob('lab/*.h5'))]"
  expect_rc 0 "$MPIDDP" index lab
  expect_rc 0 "$MPIDDP" inspect lab
  ! grep -q "notice" <<<"$ERR" && grep -q "metadata from lab/mpiddp-manifest.bin (5 shards unchanged" <<<"$OUT" || fail "labels $t: the manifest index wrote is not used: $OUT $ERR"
done
# a failed pack or synth removes the shards it wrote (every rank its own, after they agreed on the failure) and the
# --out directory if the run created it: it left 3 of 4 shards, which inspect called valid and a rerun refused.
# Sample 56 (the last, in shard 3: at np 2 written by rank 1 after shards 0-2) is one chunk whose Fletcher-32 checksum
# fails (a missing external file did this before pack refused external storage as it scans its input).
$PY -c "
import h5py, shutil
shutil.copy('in.h5', 'unr.h5')
with h5py.File('unr.h5', 'a') as f:
    g = f['samples']; n = sorted(g)[-1]; x = g[n][()]; del g[n]
    off = g.create_dataset(n, data=x, chunks=x.shape, fletcher32=True).id.get_chunk_info(0).byte_offset
with open('unr.h5', 'r+b') as fh:
    fh.seek(off + 1); b = fh.read(1); fh.seek(off + 1); fh.write(bytes([b[0] ^ 0xFF]))"
mkdir -p kept && echo mine > kept/notes.txt
for np in 1 2; do
  for out in new_$np kept; do
    expect_rc 1 mpirun_np $np "$MPIDDP" pack --input unr.h5 --out $out --shards 4
    [ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] && grep -q "unr.h5: dataset '/samples/.*'\[56\]: cannot be read" <<<"$ERR" || fail "pack, np $np, unreadable sample: $ERR"
    ! ls $out/*.h5 >/dev/null 2>&1 || fail "pack, np $np: a failed pack left $(ls $out)"
  done
  [ ! -e new_$np ] || fail "pack, np $np: the out directory it created is left: $(ls -a new_$np)"
  [ "$(cat kept/notes.txt)" = mine ] || fail "pack, np $np: removed what it did not write: $(ls -a kept)"
  mpirun_np $np "$MPIDDP" pack --input in.h5 --out kept --shards 4 >/dev/null || fail "pack, np $np: rerun into kept"
  $PY "$SRC/tests/py/make_shards.py" check-pack in.h5 kept
  rm -f kept/*.h5 kept/mpiddp-manifest.bin
  # synth: an allocation of its shard loop fails on rank np-1 (at np 2 after rank 0 wrote shards 0, 2 and 4)
  site=io/synth.c:$(grep -n 'int64_t \*off = ddp_calloc' "$SRC/io/synth.c" | cut -d: -f1)
  expect_rc 1 env MPIDDP_TEST_FAIL_ALLOC=$site MPIDDP_TEST_FAIL_ALLOC_RANK=$((np - 1)) mpirun -np $np --oversubscribe "$MPIDDP" synth --out syn_$np --samples 50 --shards 5
  grep -q "out of memory" <<<"$ERR" && [ ! -e syn_$np ] || fail "synth, np $np, failed: left $(ls -a syn_$np 2>&1): $ERR"
done
# misnamed inputs: samples of D=0 and 2-D labels are named as such (once "D=0 differs from D=0", "6 values for 6")
$PY -c "
import h5py, numpy as np
with h5py.File('d0.h5', 'w') as f:
    g = f.create_group('samples'); [g.create_dataset('s%d' % i, data=np.ones((2, 0), 'f4')) for i in range(6)]
    f['labels'] = np.arange(6) % 3
with h5py.File('lab2d.h5', 'w') as f:
    g = f.create_group('samples'); [g.create_dataset('s%d' % i, data=np.ones((2, 3), 'f4')) for i in range(6)]
    f['labels'] = (np.arange(6) % 3).reshape(2, 3)"
expect_rc 1 "$MPIDDP" pack --input d0.h5 --out pd0
grep -q "d0.h5: dataset '/samples/s0'\[0\]: D=0 (no features per row)" <<<"$ERR" || fail "pack, D=0: $ERR"
expect_rc 1 "$MPIDDP" pack --input lab2d.h5 --out plab
grep -q "lab2d.h5: dataset '/labels': wrong rank 2 (expected 1: one label per sample)" <<<"$ERR" || fail "pack, 2-D labels: $ERR"
expect_rc 1 "$MPIDDP" pack --input missing.h5 --out p2
printf '%s' "$ERR" | qgrep "missing.h5" || fail "pack error does not name the file"
pass "synth and pack"

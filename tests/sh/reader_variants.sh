# h5py-written shards read identically to mpiddp's: 7 uneven shards (contiguous: mmap), the same with
# chunked+gzip features (HDF5 read path), big-endian index arrays (converted), features as a non-IEEE 4-byte float
# (converted by HDF5, once mapped as IEEE floats) and one fixed-string shard with explicit sample_ids all give
# bitwise the same samples, labels and ids. Through the C API, a NULL scratch buffer on the HDF5 read path is
# DDP_ERR_ARG.
. "$(dirname "$0")/lib.sh"
$PY "$SRC/tests/py/make_shards.py" variants v
for d in h5py_contig h5py_gzip bigendian oddfloat one_shard; do
  "$TESTTOOL" dump "v/$d" > "$d.dump" || fail "dump $d"
  "$MPIDDP" inspect "v/$d" > "$d.inspect" || fail "inspect $d"
done
[ "$(wc -l < h5py_contig.dump)" = 120 ] || fail "expected 120 samples"
for d in h5py_gzip bigendian oddfloat one_shard; do
  cmp -s h5py_contig.dump "$d.dump" || { diff h5py_contig.dump "$d.dump" | head || true; fail "$d reads differently"; }
done
grep -q "7 of 7 shard(s) memory-mappable" h5py_contig.inspect || fail "contiguous h5py shards should be mappable"
grep -q "0 of 7 shard(s) memory-mappable" h5py_gzip.inspect || fail "gzip shards should use the HDF5 read path"
grep -q "0 of 7 shard(s) memory-mappable" oddfloat.inspect || fail "non-IEEE float shards should use the HDF5 read path"
# training over the gzip (HDF5 read) path and the mmap path gives the same parameters
common=(--val v/one_shard --epochs 1 --batch-size 4 --hidden 8 --no-progress)
mpirun_np 2 "$MPIDDP" train --device "$DEVICE" --train v/h5py_contig "${common[@]}" --out ra >/dev/null
mpirun_np 2 "$MPIDDP" train --device "$DEVICE" --train v/h5py_gzip "${common[@]}" --out rb >/dev/null 2>notice.txt
[ "$(grep -c 'notice: 7 of 7 shard(s) of v/h5py_gzip have features that cannot be memory-mapped (chunked, compressed, unaligned or not IEEE float32 little-endian)' notice.txt)" = 1 ] || fail "one-time notice: $(cat notice.txt)"
$PY "$SRC/tests/py/compare_ckpt.py" ra/checkpoints/last.h5 rb/checkpoints/last.h5 0 || fail "gzip vs mmap training differs"
# the C API: ddp_dataset_sample without a scratch buffer on a shard read through HDF5 is the caller's DDP_ERR_ARG,
# naming the function and the argument (tools/capi_misuse.c case scratch)
mkdir -p w_scratch
timeout 120 mpirun -np 1 --oversubscribe "${CAPI_MISUSE:?}" scratch v/h5py_gzip v/one_shard "$PWD/w_scratch" 2>scratch.txt ||
  { cat scratch.txt >&2; fail "capi_misuse scratch"; }
pass "all reader paths agree bitwise; a NULL scratch on an HDF5-read shard is DDP_ERR_ARG"

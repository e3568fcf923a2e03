# The ranks of one run open the same dataset (docs/dataset-format.md#every-rank-opens-the-same-dataset): ranks whose
# --train (or --val) resolves to different dataset directories (the same relative path under different working
# directories, here with mpirun -wdir per rank; a node-local path) are refused at open, with one line on every rank
# naming rank 0's directory and the first rank's whose content differs (or that cannot read a shard: which, and
# why); chunked h5py shards of the same sizes are told apart by their bytes; the same dataset copied to two places
# (node-local copies) still trains. Before, each rank trained on its own directory's shards under the sample indices
# of rank 0's listing: silently wrong.
. "$(dirname "$0")/lib.sh"
synth --out a --samples 240 --dim 8 --classes 3 --shards 2 --seed 3
synth --out b --samples 240 --dim 8 --classes 3 --shards 2 --seed 4 # same names and shape, other data
synth --out f1 --samples 240 --dim 8 --classes 3 --min-rows 4 --max-rows 4 --shards 2 --seed 3
synth --out f2 --samples 240 --dim 8 --classes 3 --min-rows 4 --max-rows 4 --shards 2 --seed 3 --first-id 5000
synth --out v --samples 60 --dim 8 --classes 3 --shards 1 --seed 3 --first-id 9000
# h5py-written chunked shards (HDF5 reads them: no array offsets to compare): the same shapes and file sizes, other
# features and labels
$PY "$SRC/tests/py/make_shards.py" chunked c1 1
$PY "$SRC/tests/py/make_shards.py" chunked c2 2
[ "$(cd c1 && stat -c '%n %s' *)" = "$(cd c2 && stat -c '%n %s' *)" ] || fail "c1 and c2 differ in size: $(ls -l c1 c2)"
host=$(hostname)
here=$(pwd -P)
args=(--batch-size 8 --lr 0.01 --hidden 16 --no-progress --device cpu --epochs 1 --train data --val val)
# two RC T0 T1 [V0 V1]: rank 0 in n0, rank 1 in n1, each with --train data (a copy of T0 / T1) and --val val
two() {
  rm -rf n0 n1 run && mkdir n0 n1
  cp -r "$2" n0/data && cp -r "$3" n1/data && cp -r "${4:-v}" n0/val && cp -r "${5:-v}" n1/val
  expect_rc "$1" mpirun --oversubscribe -np 1 -wdir n0 "$MPIDDP" train "${args[@]}" --out "$here/run" : \
    -np 1 -wdir n1 "$MPIDDP" train "${args[@]}" --out "$here/run"
}
for pair in "a b" "f1 f2" "c1 c2"; do
  two 1 $pair
  [ "$(grep -c 'the ranks opened different datasets' <<<"$ERR")" = 1 ] &&
    qgrep -F "mpiddp train: error: the ranks opened different datasets: rank 0 data (= $here/n0/data) on $host, rank 1 data (= $here/n1/data) on $host: their shards differ in size or content" <<<"$ERR" ||
    fail "$pair: not refused with one line: $ERR"
  [ ! -e run/metrics.csv ] || fail "$pair: a run was started"
done
pass "ranks that open different datasets (other data; same sizes, other sample ids; chunked h5py shards of the same sizes) are refused on every rank"
two 0 a a
[ -f run/metrics.csv ] || fail "a and its copy did not train: $OUT $ERR"
two 0 c1 c1
[ -f run/metrics.csv ] || fail "c1 and its copy did not train: $OUT $ERR"
pass "the same dataset at two paths trains"
rm -rf n0 n1 run && mkdir n0 n1 && cp -r a n0/data && cp -r a n1/data && cp -r v n0/val && cp -r v n1/val
rm n1/data/shard-00000.h5 # rank 0 validates it; rank 1's copy lacks it
expect_rc 1 mpirun --oversubscribe -np 1 -wdir n0 "$MPIDDP" train "${args[@]}" --out "$here/run" : \
  -np 1 -wdir n1 "$MPIDDP" train "${args[@]}" --out "$here/run"
qgrep -F "mpiddp train: error: the ranks opened different datasets: rank 0 data (= $here/n0/data) on $host, rank 1 data (= $here/n1/data) on $host: rank 1 cannot read shard-00000.h5: No such file or directory; give every rank" <<<"$ERR" ||
  fail "a shard missing on rank 1: $ERR"
pass "a shard missing from one rank's copy is named, with the reason"
two 1 a a v b
qgrep -F "the ranks opened different datasets: rank 0 val (= $here/n0/val) on $host, rank 1 val (= $here/n1/val)" <<<"$ERR" ||
  fail "--val differs: $ERR"
pass "a validation set that differs between ranks is refused"

# Checkpoint integrity (issue #31): a corrupt checkpoint (bytes flipped in an optimizer dataset, the last 20 KB
# zeroed, a NaN with a valid checksum) is refused by `train --resume` (np 2) and `eval` in one line naming file
# and dataset, non-zero on every rank; an attribute out of range (prev_epoch_steps, adamw_*) likewise, naming it; a
# checkpoint without checksums still loads with exactly one notice; a
# FIFO or a directory where a checkpoint should be is named for what it is within seconds; a full disk while
# saving ends with exit 1, one line, no crash and no temporary file left.
. "$(dirname "$0")/lib.sh"
synth --out t --samples 200 --dim 32 --classes 3 --shards 2 --seed 3
synth --out v --samples 100 --dim 32 --classes 3 --shards 1 --seed 4 --first-id 9000
# hidden 128: a checkpoint of 260 KB, more than the 200 KB file systems below hold
base=(--device cpu --train t --val v --batch-size 5 --lr 0.01 --hidden 128 --no-progress)
mpirun_np 2 "$MPIDDP" train "${base[@]}" --epochs 1 --out good >/dev/null
CK=good/checkpoints/last.h5

# ranks NAME NP CMD...: CMD on NP ranks within 60 s (a hang fails); each rank's exit status in NAME.rc.<rank>,
# mpirun's in $RC, stdout and stderr in $OUT/$ERR. mpirun does not end the other ranks when one exits non-zero
# (orte_abort_on_non_zero_status 0): each rank must end by itself
ranks() {
  local name=$1 np=$2; shift 2
  rm -f "$name".rc.*
  set +e
  OMPI_MCA_orte_abort_on_non_zero_status=0 timeout 60 mpirun -np "$np" --oversubscribe bash -c '"$@"; r=$?; echo $r > '"$WORK/$name"'.rc.$OMPI_COMM_WORLD_RANK; exit $r' _ "$@" \
    >"$name.out" 2>"$name.err"
  RC=$?
  set -e
  OUT=$(cat "$name.out"); ERR=$(cat "$name.err")
  [ "$RC" != 124 ] || { echo "stderr: $ERR" >&2; fail "$name: hung (killed after 60 s)"; }
}
# every rank of the last `ranks` run exited with status $2 (no signal, no crash)
every_rank_rc() {
  local name=$1 want=$2 np=$3 r
  for ((r = 0; r < np; r++)); do
    [ -f "$name.rc.$r" ] || { echo "stderr: $ERR" >&2; fail "$name: rank $r left no exit status (killed?)"; }
    [ "$(cat "$name.rc.$r")" = "$want" ] || { echo "stderr: $ERR" >&2; fail "$name: rank $r exited $(cat "$name.rc.$r"), expected $want"; }
  done
}
# exactly one error line, matching the extended regex $2, and no crash or HDF5 noise
one_error() {
  local name=$1 want=$2
  [ "$(printf '%s\n' "$ERR" | grep -c "error:")" = 1 ] || { echo "stderr: $ERR" >&2; fail "$name: expected one error line"; }
  printf '%s\n' "$ERR" | grep "error:" | qgrep -E -- "$want" || { echo "stderr: $ERR" >&2; fail "$name: error line does not match '$want'"; }
  ! printf '%s\n' "$ERR" | qgrep -Ei "segmentation|signal|core dumped|HDF5-DIAG|H5F|infinite loop|cleanup" ||
    { echo "stderr: $ERR" >&2; fail "$name: crash or HDF5 noise"; }
}
# refused FILE REGEX: train --resume FILE (np 2) and eval --ckpt FILE (np 2) end 1 on every rank with one line
# naming FILE and matching REGEX
refused() {
  local f=$1 want=$2
  rm -rf rr
  ranks resume 2 "$MPIDDP" train "${base[@]}" --epochs 2 --out rr --resume "$f"
  every_rank_rc resume 1 2
  one_error "resume from $f" "$f: .*$want"
  ranks eval 2 "$MPIDDP" eval --device cpu --ckpt "$f" --data v
  every_rank_rc eval 1 2
  one_error "eval of $f" "$f: .*$want"
  [ -z "$OUT" ] || fail "eval of $f printed results: $OUT"
}

# 1. 64 bytes flipped inside the data of /optim/exp_avg/l2.weight (the issue's case: resumed, val/loss 2850)
cp $CK flip.h5
$PY - <<'PY'
import h5py
with h5py.File("flip.h5", "r") as f:
    d = f["optim/exp_avg/l2.weight"]
    off, size = d.id.get_offset(), d.id.get_storage_size()
assert off and size >= 4096, (off, size)
with open("flip.h5", "r+b") as f:
    f.seek(off + size // 2)
    b = f.read(64)
    f.seek(off + size // 2)
    f.write(bytes(x ^ 0xFF for x in b))
PY
refused flip.h5 "dataset '/optim/exp_avg/l2.weight': checksum mismatch"

# 2. the last 20 KB zeroed (data and metadata at the end of the file)
cp $CK tail.h5
$PY -c "
import os
n = os.path.getsize('tail.h5'); f = open('tail.h5', 'r+b'); f.seek(n - 20480); f.write(bytes(20480))"
# (here the root's attribute storage, which HDF5's metadata checksum covers in the 1.8 file format)
refused tail.h5 "(dataset|group|attribute) '/?[^']+': (checksum mismatch|unreadable|cannot be read)"

# 3. a NaN in /params/l3.bias with a valid checksum (as a diverged run would have written it): the finiteness
#    check names the index; the checksum is Python's zlib.crc32 of the little-endian bytes
cp $CK nan.h5
$PY - <<'PY'
import h5py, numpy as np, zlib
with h5py.File("nan.h5", "r+") as f:
    d = f["params/l3.bias"]
    x = d[()]
    sums = "checksums" in f.attrs  # (this script also runs against builds before #31)
    assert not sums or d.attrs["crc32"] == zlib.crc32(x.astype("<f4").tobytes()), "crc32 is not zlib's over little-endian bytes"
    x[1] = np.nan
    d[...] = x
    if sums:
        d.attrs.modify("crc32", np.uint32(zlib.crc32(x.astype("<f4").tobytes())))
PY
refused nan.h5 "dataset '/params/l3.bias': non-finite value nan at index 1"

# 4. a checkpoint written before checksums (attributes stripped): loads, with exactly one notice line
cp $CK old.h5
$PY - <<'PY'
import h5py
with h5py.File("old.h5", "r+") as f:
    if "checksums" in f.attrs:
        del f.attrs["checksums"]
    f.visititems(lambda n, o: o.attrs.__delitem__("crc32") if isinstance(o, h5py.Dataset) and "crc32" in o.attrs else None)
PY
expect_rc 0 timeout 60 "$MPIDDP" eval --device cpu --ckpt old.h5 --data v
printf '%s' "$OUT" | qgrep "val/loss=" || fail "old checkpoint: no result: $OUT"
[ "$(printf '%s\n' "$ERR" | grep -c .)" = 1 ] && printf '%s' "$ERR" | qgrep "old.h5.*no checksums" ||
  fail "old checkpoint (eval): expected exactly one notice line: $ERR"
rm -rf ro
ranks oldresume 2 "$MPIDDP" train "${base[@]}" --epochs 2 --out ro --resume old.h5
every_rank_rc oldresume 0 2
[ "$(printf '%s\n' "$ERR" | grep -c "no checksums")" = 1 ] && printf '%s' "$ERR" | qgrep "old.h5.*no checksums" ||
  fail "old checkpoint (resume): expected exactly one notice line: $ERR"
# the checkpoint the resumed run wrote carries checksums again
$PY -c "import h5py; assert h5py.File('ro/checkpoints/last.h5', 'r').attrs.get('checksums') == b'crc32'" || fail "resumed run wrote no checksums"
# a corrupt dataset in a checkpoint that has checksums but lost one dataset's attribute: refused
cp $CK noattr.h5
$PY -c "import h5py; a = h5py.File('noattr.h5', 'r+')['params/l2.weight'].attrs; 'crc32' in a and a.__delitem__('crc32')"
refused noattr.h5 "dataset '/params/l2.weight': checksum attribute 'crc32' missing"

# 4b. a recorded attribute out of its range (a hand-edited or corrupted file): prev_epoch_steps (the steps of the
#     epoch before: 0 to global_step), AdamW's beta1, beta2 (in [0, 1)), eps (> 0) and weight_decay (>= 0), and
#     model_dropout (in [0, 1)) are refused in one line naming
#     file and attribute (before: a NaN was taken for an absent attribute, other values printed in the resume's summary
#     and notices and carried into the next checkpoint)
$PY -c "import h5py; a = h5py.File('$CK', 'r').attrs; assert a['prev_epoch_steps'] > 0 and 'adamw_eps' in a, dict(a)" ||
  fail "the checkpoint of epoch 1 records no prev_epoch_steps or AdamW constants"
for bad in "prev_epoch_steps int64 -5" "prev_epoch_steps int64 4611686018427387904" "adamw_beta1 float64 nan" \
  "adamw_beta2 float64 1" "adamw_eps float64 -1e-8" "weight_decay float64 nan" "weight_decay float64 -0.5" \
  "model_dropout float64 1.5" "model_dropout float64 nan"; do
  read -r name type value <<<"$bad"
  cp $CK attr.h5
  $PY -c "import h5py, numpy as np; h5py.File('attr.h5', 'r+').attrs.modify('$name', np.$type('$value'))"
  refused attr.h5 "attribute '$name': "
done
# saved at the end of an epoch's training (samples_in_epoch: all 200 samples), whose optimizer steps a resume carries
# into its summary and next checkpoint: more than global_step is refused (before: 'step 4611686018427387904/...')
cp $CK attr.h5
$PY -c "import h5py, numpy as np; a = h5py.File('attr.h5', 'r+').attrs
a.modify('samples_in_epoch', np.int64(200)); a.modify('optim_step_in_epoch', np.int64(1 << 62))"
refused attr.h5 "attribute 'optim_step_in_epoch': "

# 5. a FIFO as --resume / --ckpt (blocked forever before), a directory as last.h5 (said "not an HDF5 file")
mkfifo fifo.h5
refused fifo.h5 "not a regular file \(a FIFO\)"
mkdir -p dirrun/checkpoints/last.h5
rm -rf rr
ranks dirresume 2 "$MPIDDP" train "${base[@]}" --epochs 2 --out dirrun --resume auto
every_rank_rc dirresume 1 2
one_error "last.h5 a directory" "dirrun/checkpoints/last.h5: cannot open checkpoint: is a directory"
refused dirrun/checkpoints/last.h5 "is a directory"

# 6. disk full while saving (rank 0 segfaulted in MPI_Finalize -> H5F__close_cb, exit 139): exit 1 on every
#    rank, one line naming the checkpoint, no temporary file. The checkpoints directory is a 200 KB tmpfs (the
#    checkpoint is 260 KB): empty, and full (creating the file works, its first write fails).
#    Without mount permission: a 100 KB file-size limit (ulimit -f) with SIGXFSZ ignored, write() gets EFBIG.
MNT=()
cleanup() { local m; for m in "${MNT[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done; }
trap cleanup EXIT
small_fs() { # small_fs DIR FILL: DIR a 200 KB tmpfs (FILL=1: filled up); 1 when mounting is not permitted
  mkdir -p "$1"
  mount -t tmpfs -o size=200k tmpfs "$1" 2>/dev/null || return 1
  MNT+=("$1")
  if [ "$2" = 1 ]; then
    # full but one page, which the decision log takes: the checkpoint is what meets the full disk
    dd if=/dev/zero of="$1/filler" bs=4k count=49 2>/dev/null || true
  fi
}
disk_full() { # disk_full NAME FILL TRAIN_ARGS...
  local name=$1 fill=$2; shift 2
  rm -rf "$name"
  if small_fs "$name/checkpoints" "$fill"; then
    ranks "$name" 2 "$MPIDDP" train "${base[@]}" --epochs 2 --out "$name" "$@"
  else
    echo "mount not permitted: ulimit -f 100 with SIGXFSZ ignored instead"
    # (TCP between the ranks: Open MPI's shared-memory segment is a file the limit would refuse)
    OMPI_MCA_btl=self,tcp ranks "$name" 2 bash -c 'trap "" XFSZ; ulimit -f 100; exec "$@"' _ "$MPIDDP" train "${base[@]}" --epochs 2 --out "$name" "$@"
  fi
  every_rank_rc "$name" 1 2
  one_error "$name" "$name/checkpoints/(last|epoch=[^:]*)\.h5: checkpoint not saved: .*(No space left on device|File too large)"
  ! ls "$name"/checkpoints/*.tmp.* >/dev/null 2>&1 || fail "$name: temporary file left: $(ls "$name"/checkpoints)"
}
disk_full full 0
disk_full full_last 0 --save-top-k 0
disk_full full_create 1 --save-top-k 0
disk_full full_create_topk 1
pass "corrupt checkpoints refused (flipped bytes, zeroed tail, NaN), old checkpoints load with one notice, FIFO and directory named, disk full: exit 1 with one line"

# #33: the manifest (DIR/mpiddp-manifest.bin, written by synth, pack and `mpiddp index`): training with a fresh one is
# bitwise the run without (--no-manifest) at np 1, 2 and 4; a stale one (a shard rewritten, one deleted, one added)
# gives one notice line, those shards are re-validated and the run is still bitwise equal; a corrupt one (a flipped
# byte, truncated, empty, wrong magic) gives one notice line and is ignored; a shard made bad after indexing still
# stops every rank with the one-line error; a read-only data directory: `index DIR` fails in one line suggesting
# --manifest FILE, and the manifest kept elsewhere serves train and inspect; index --manifest never replaces a
# file that is not a manifest; a shard edited in place behind the manifest's back is one line, not a crash. The
# code before #33 has no manifest.
. "$(dirname "$0")/lib.sh"
synth --out t --samples 600 --dim 8 --classes 3 --min-rows 1 --max-rows 6 --shards 12 --seed 4
synth --out v --samples 60 --dim 8 --classes 3 --min-rows 1 --max-rows 6 --shards 3 --seed 4 --first-id 100000
[ -f t/mpiddp-manifest.bin ] && [ -f v/mpiddp-manifest.bin ] || fail "synth wrote no manifest"
COMMON=(--device cpu --epochs 2 --hidden 16 --batch-size 8 --no-progress)
same() { "$PY" "$SRC/tests/py/compare_ckpt.py" "$1/checkpoints/last.h5" "$2/checkpoints/last.h5" 0 >/dev/null || fail "$2: not bitwise equal to $1"; }
notices() { grep -c "notice:" <<< "$ERR" || true; }
# train NAME NP TRAIN_DIR ARGS...: a run that must succeed; its stderr in $ERR
train() { local name=$1 np=$2 d=$3; shift 3
  expect_rc 0 mpirun -np "$np" --oversubscribe "$MPIDDP" train "${COMMON[@]}" --train "$d" --val v --out "$name" "$@"; }
for np in 1 2 4; do
  train ref$np $np t --no-manifest
  train fresh$np $np t
  [ "$(notices)" = 0 ] || fail "fresh manifest, np $np: a notice: $ERR"
  same ref$np fresh$np
done
expect_rc 0 mpirun_np 2 "$MPIDDP" inspect t
grep -qx "metadata from t/mpiddp-manifest.bin (12 shards unchanged, 0 re-validated)" <<< "$OUT" || fail "inspect with a fresh manifest: $OUT"
diff <(grep -v "^metadata from" <<< "$OUT") <("$MPIDDP" inspect t --manifest none) >/dev/null || fail "inspect with the manifest differs from without"
echo "fresh: bitwise equal to --no-manifest at np 1, 2, 4; inspect: $(grep '^metadata' <<< "$OUT")"

# stale: shard 3 rewritten with other content, shard 7 deleted, shard-00012.h5 added
synth --out other --samples 600 --dim 8 --classes 3 --min-rows 1 --max-rows 6 --shards 12 --seed 9 --no-manifest
cp -a t s
cp other/shard-00003.h5 s/shard-00003.h5
rm s/shard-00007.h5
cp other/shard-00005.h5 s/shard-00012.h5
want="mpiddp train: notice: s/mpiddp-manifest.bin: 2 of 12 shards changed or new, 1 removed since it was written: re-validated them; \`mpiddp index s\` refreshes it"
for np in 1 2 4; do
  train sref$np $np s --no-manifest
  train stale$np $np s
  [ "$(notices)" = 1 ] && grep -qxF -- "$want" <<< "$ERR" || fail "stale manifest, np $np: expected '$want', got: $ERR"
  same sref$np stale$np
done
expect_rc 0 mpirun_np 4 "$MPIDDP" inspect s
grep -qx "metadata from s/mpiddp-manifest.bin (10 shards unchanged, 2 re-validated)" <<< "$OUT" || fail "inspect, stale manifest: $OUT"
diff <(grep -v "^metadata from" <<< "$OUT") <("$MPIDDP" inspect s --manifest none) >/dev/null || fail "inspect with a stale manifest differs"
expect_rc 0 mpirun_np 2 "$MPIDDP" index s
expect_rc 0 "$MPIDDP" inspect s
grep -qx "metadata from s/mpiddp-manifest.bin (12 shards unchanged, 0 re-validated)" <<< "$OUT" || fail "index did not refresh: $OUT"
echo "stale: one notice, re-validated, bitwise equal at np 1, 2, 4; index refreshes it"

# corrupt manifests: one notice each, ignored, the same run
corrupt() { # corrupt KIND DIR
  cp -a t "$2"
  local m=$2/mpiddp-manifest.bin size
  size=$(stat -c %s "$m")
  case $1 in
    flip) printf '\xff\xfe' | dd of="$m" bs=1 seek=$((size / 2)) conv=notrunc status=none ;;
    truncate) truncate -s $((size - 100)) "$m" ;;
    empty) : > "$m" ;;
    magic) printf 'NOTMPIDD' | dd of="$m" bs=1 seek=0 conv=notrunc status=none ;;
    oldver) # a manifest an older mpiddp wrote (version 1, whose validation accepted shards this one refuses)
      "$PY" -c 'import struct, sys, zlib
b = bytearray(open(sys.argv[1], "rb").read()); struct.pack_into("<I", b, 8, 1)
struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])) & 0xffffffff); open(sys.argv[1], "wb").write(b)' "$m" ;;
    labw|pairs) # a record no validation writes, under a recomputed (valid) CRC: a label width of 2 (its map would be
      # read as 8-byte labels past its end), a class-pair range whose end overflows int64
      "$PY" - "$m" $1 <<'PYEOF'
import struct, sys, zlib
path, kind = sys.argv[1], sys.argv[2]
b = bytearray(open(path, "rb").read())
entry_size = struct.unpack_from("<I", b, 12)[0]
assert entry_size == 37 * 8, entry_size   # the record of io/manifest.h: 37 int64 fields
field = lambda k, i: 40 + k * entry_size + 8 * i
if kind == "labw":
    struct.pack_into("<q", b, field(5, 9), 2)          # entry 5: lab_width
else:
    struct.pack_into("<q", b, field(3, 33), 1 << 62)   # entry 3: ncc
    struct.pack_into("<q", b, field(3, 34), 1 << 62)   # entry 3: cc_first (the sum overflows)
struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])) & 0xffffffff)
open(path, "wb").write(b)
PYEOF
      ;;
  esac
  touch -r t/shard-00000.h5 "$m"
}
for kind in flip truncate empty magic oldver labw pairs; do
  case $kind in flip) why="corrupt (checksum mismatch)" ;; truncate) why="corrupt ([0-9]* bytes, its header says [0-9]*)" ;;
    empty) why="corrupt (empty file)" ;; magic) why="not an mpiddp manifest (bad magic)" ;;
    oldver) why="version 1, this mpiddp reads version 2" ;; labw) why="corrupt (entry 5)" ;; pairs) why="corrupt (entry 3)" ;; esac
  corrupt $kind c_$kind
  line="mpiddp train: notice: c_$kind/mpiddp-manifest.bin: $why: ignored, validating every shard; rerun \`mpiddp index c_$kind\`"
  nps=2
  case $kind in flip|labw) nps="1 2 4" ;; esac
  for np in $nps; do
    train c_${kind}_$np $np c_$kind
    [ "$(notices)" = 1 ] && grep -qx -- "$line" <<< "$ERR" || fail "$kind manifest, np $np: expected /$line/, got: $ERR"
    same ref$np c_${kind}_$np
  done
  expect_rc 0 "$MPIDDP" inspect c_$kind
  [ "$(notices)" = 1 ] && ! grep -q "^metadata from" <<< "$OUT" || fail "inspect, $kind manifest: $ERR / $OUT"
  echo "$kind: $(grep notice: <<< "$ERR")"
done

# a shard made bad after indexing: the usual one-line error on every rank, as without the manifest
cp -a t b
"$PY" -c "
import h5py, sys
with h5py.File('b/shard-00005.h5', 'a') as f:
    o = f['offsets'][:]; o[3] = o[2] - 1; del f['offsets']; f.create_dataset('offsets', data=o)"
cp -a t tr
truncate -s 3000 tr/shard-00002.h5
for d in b tr; do
  expect_rc 1 mpirun -np 1 "$MPIDDP" train "${COMMON[@]}" --train $d --val v --out bad_ref_$d --no-manifest
  ref=$(grep "error:" <<< "$ERR")
  grep -q "^mpiddp train: error: $d/shard-0000[52]\.h5: " <<< "$ref" || fail "$d: unexpected line $ref"
  for np in 1 2 4; do
    expect_rc 1 mpirun -np $np --oversubscribe "$MPIDDP" train "${COMMON[@]}" --train $d --val v --out bad_$d$np
    [ "$(grep -c "error:" <<< "$ERR")" = 1 ] && [ "$(grep "error:" <<< "$ERR")" = "$ref" ] || fail "$d np $np: expected '$ref', got: $ERR"
    [ ! -e bad_$d$np ] || fail "$d np $np: a run directory was created"
  done
  echo "changed after indexing: ${ref#mpiddp train: error: }"
done

# a shard edited in place after indexing, its size and mtime kept (what a manifest cannot see): a label outside
# [0, classes) or offsets out of order stop train and eval with a line naming file, object and index, where eval
# once died of SIGSEGV, wrote outside the confusion matrix or trained on the wrong rows
poke() { # FILE DATASET INDEX VALUE: one element rewritten in the file's bytes, the mtime of t/'s copy restored
  "$PY" -c "
import sys, h5py, numpy as np
p, ds, i, v = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with h5py.File(p, 'r') as f: off, dt = f[ds].id.get_offset(), f[ds].dtype
with open(p, 'r+b') as fh: fh.seek(off + dt.itemsize * i); fh.write(np.array(v, dtype=dt).tobytes())" "$@"
  touch -r "t/$(basename "$1")" "$1"; }
cp -a t pl; poke pl/shard-00005.h5 labels 3 99
cp -a t po; poke po/shard-00005.h5 offsets 3 0
# (offsets[3] = 0 breaks samples 2 and 3: at np 2 either rank may be the one that reports, with its own index)
want_pl="pl/shard-00005\\.h5: dataset 'labels'\\[3\\]: 99: not in \\[0, 3\\): the file changed after it was validated"
want_po="po/shard-00005\\.h5: dataset 'offsets'\\[(2\\]: [0-9]+, then 0|3\\]: 0, then [0-9]+): not a sample of 1 to [0-9]+ rows"
for d in pl po; do
  want=want_$d
  for np in 1 2; do
    for cmd in "train ${COMMON[*]} --train $d --val v --out inplace_$d$np" "eval --ckpt ref1/checkpoints/last.h5 --data $d --batch-size 4"; do
      set +e; mpirun -np $np --oversubscribe "$MPIDDP" $cmd >out.txt 2>err.txt; rc=$?; set -e
      [ "$rc" != 0 ] && [ "$rc" -lt 128 ] || fail "$d np $np: '$cmd' exited $rc: $(cat err.txt)"
      grep -qE -- "${!want}" err.txt && ! grep -qi "segmentation\|signal" err.txt || fail "$d np $np '$cmd': $(cat err.txt)"
    done
  done
  echo "edited in place: $(grep -o "$d/shard.*" err.txt | head -1)"
done

# a manifest entry that contradicts its shard under a valid CRC (n = 10 for a shard of 50 samples; its size and mtime
# kept), the shard's offsets and labels chunked, so read through HDF5: one line naming file and dataset on every rank,
# where every rank once died of SIGSEGV in H5Dread (the whole dataset read into a buffer of the manifest's n)
mkdir lie
"$PY" - <<'PYEOF'
import h5py
with h5py.File("t/shard-00005.h5", "r") as a, h5py.File("lie/s0.h5", "w") as b:
    for k, v in a.attrs.items(): b.attrs[k] = v
    for k in a: b.create_dataset(k, data=a[k][()], **({} if k == "features" else {"chunks": (16,)}))
PYEOF
expect_rc 0 "$MPIDDP" index lie
"$PY" - lie/mpiddp-manifest.bin <<'PYEOF'
import struct, sys, zlib
b = bytearray(open(sys.argv[1], "rb").read())
e = list(struct.unpack_from("<37q", b, 40))         # the one entry (io/manifest.h: 37 int64 fields)
assert e[0] == 50 and e[6] == -1 and e[7] == -1, e[:10]   # n; offsets and labels not mappable
e[0], e[13], e[4] = 10, 1, e[1]                     # n, min_rows, max_rows: every sample passes the runtime row check
e[15:31] = [10] + [0] * 15                           # hist sums to n
e[33] = 0                                            # no (class, count) pairs
struct.pack_into("<37q", b, 40, *e)
struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])) & 0xffffffff)
open(sys.argv[1], "wb").write(b)
PYEOF
touch -r lie/s0.h5 lie/mpiddp-manifest.bin
for np in 1 2; do
  expect_rc 1 timeout 60 mpirun -np $np --oversubscribe "$MPIDDP" train "${COMMON[@]}" --train lie --val v --out lie$np
  [ "$(grep -c "error:" <<< "$ERR")" = 1 ] && ! grep -qi "segmentation\|signal" <<< "$ERR" &&
    grep -qx "mpiddp train: error: lie/s0\.h5: dataset 'offsets': 51 elements, the manifest or validation recorded 11: the file changed after it was validated (rerun mpiddp index on the dataset)" <<< "$ERR" ||
    fail "a manifest entry contradicting its shard, np $np: $ERR"
done
echo "a manifest entry contradicting its chunked shard: $(grep -o "lie/s0.h5: dataset 'offsets': [^:]*" <<< "$ERR")"

# an explicit manifest that is missing: a notice, the run goes on
train miss 2 t --train-manifest nowhere.bin
grep -qx "mpiddp train: notice: nowhere.bin: cannot read (No such file or directory): ignored, validating every shard; write it with \`mpiddp index t --manifest nowhere.bin\`" <<< "$ERR" ||
  fail "missing --train-manifest: $ERR"
same ref2 miss
# the other dataset's own manifest (--train-manifest v/mpiddp-manifest.bin, the validation set's): the notice says so
# instead of suggesting `mpiddp index t --manifest v/mpiddp-manifest.bin`, which would replace v's manifest
train swap 2 t --train-manifest v/mpiddp-manifest.bin
grep -qxF "mpiddp train: notice: v/mpiddp-manifest.bin: 12 of 12 shards changed or new, 0 removed since it was written: re-validated them; it is the manifest of v, not of t: name t/mpiddp-manifest.bin (the default) or none" <<< "$ERR" ||
  fail "--train-manifest of the validation set: $ERR"
same ref2 swap
# a directory given as the manifest (the dataset's own): no `mpiddp index t --manifest t`, which index refuses
train dirm 2 t --train-manifest t
grep -qxF "mpiddp train: notice: t: not a regular file: ignored, validating every shard (is it the manifest you meant to give?)" <<< "$ERR" ||
  fail "--train-manifest naming a directory: $ERR"
# t's own manifest kept in a directory of no shard (index k --manifest keep/mpiddp-manifest.bin, the default name
# elsewhere), then a shard changed: the refresh is suggested, not "the manifest of keep" (it was said to be another
# dataset's manifest whenever its directory was not the dataset's)
cp -a t k && mkdir -p keep
expect_rc 0 "$MPIDDP" index k --manifest keep/mpiddp-manifest.bin
cp other/shard-00003.h5 k/shard-00003.h5
train kept 2 k --train-manifest keep/mpiddp-manifest.bin
grep -qxF "mpiddp train: notice: keep/mpiddp-manifest.bin: 1 of 12 shards changed or new, 0 removed since it was written: re-validated them; \`mpiddp index k --manifest keep/mpiddp-manifest.bin\` refreshes it" <<< "$ERR" ||
  fail "a manifest kept outside its dataset, stale: $ERR"

# a read-only data directory (a tmpfs remounted read-only: root ignores mode bits)
mkdir -p ro elsewhere
if mount -t tmpfs -o size=32m tmpfs ro 2>/dev/null; then
  trap 'umount "$WORK/ro" 2>/dev/null || true' EXIT
  cp t/*.h5 ro/
  mount -o remount,ro ro
  ( : > ro/probe ) 2>/dev/null && fail "ro/ is writable"
  expect_rc 1 mpirun_np 2 "$MPIDDP" index ro
  line="mpiddp index: error: ro: cannot write the manifest there (Read-only file system); keep it elsewhere: mpiddp index ro --manifest FILE (and give that FILE to train and inspect)"
  [ "$(grep -c error: <<< "$ERR")" = 1 ] && grep -qxF -- "$line" <<< "$ERR" || fail "index of a read-only directory: $ERR"
  expect_rc 0 mpirun_np 2 "$MPIDDP" index ro --manifest elsewhere/ro.bin
  [ -f elsewhere/ro.bin ] || fail "no elsewhere/ro.bin"
  for np in 1 4; do
    train ro$np $np ro --train-manifest elsewhere/ro.bin
    [ "$(notices)" = 0 ] || fail "read-only, np $np: $ERR"
    same ref$np ro$np
  done
  expect_rc 0 "$MPIDDP" inspect ro --manifest elsewhere/ro.bin
  grep -qx "metadata from elsewhere/ro.bin (12 shards unchanged, 0 re-validated)" <<< "$OUT" || fail "inspect ro: $OUT"
  umount ro
  trap - EXIT
  echo "read-only: index refused in one line; --manifest elsewhere/ro.bin used by train (bitwise equal) and inspect"
else
  echo "SKIP read-only: mount -t tmpfs is not permitted here"
fi
# --manifest naming a file that is not a manifest (a shard, a checkpoint given by mistake): index refuses it before
# validating (exit 2, one line from rank 0) and leaves it as it was (it once replaced it); train ignores it with a
# notice that no longer suggests writing the manifest there; an empty file or an old manifest is replaced
cp t/shard-00001.h5 keep.h5
for np in 1 2; do
  expect_rc 2 mpirun_np $np "$MPIDDP" index t --manifest t/shard-00001.h5
  [ "$(grep -c "mpiddp index: t/shard-00001.h5: exists and is not an mpiddp manifest; refusing to replace it" <<< "$ERR")" = 1 ] ||
    fail "index over a shard, np $np: $ERR"
  cmp -s t/shard-00001.h5 keep.h5 || fail "index --manifest replaced the shard t/shard-00001.h5"
done
train foreign 2 t --train-manifest ref1/checkpoints/last.h5
grep -q "ref1/checkpoints/last.h5: not an mpiddp manifest (bad magic): ignored, validating every shard" <<< "$ERR" &&
  ! grep -q "mpiddp index" <<< "$ERR" || fail "the notice for a checkpoint given as the manifest: $ERR"
same ref2 foreign
: > empty.bin
expect_rc 0 "$MPIDDP" index t --manifest empty.bin
expect_rc 0 "$MPIDDP" index t --manifest empty.bin
head -c 8 empty.bin | qgrep -x MPIDDPMF || fail "index did not write over an empty file, then over its own manifest"
pass "manifest: fresh, stale, corrupt, changed-after-indexing and read-only cases; a foreign --manifest file is refused"

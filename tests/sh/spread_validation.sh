# #33: start-up validation spread over the ranks (rank r validates shards r, r + W, ...; io/dataset_scan.c). Datasets
# of 9 shards with one bad shard at index 0, 1, 2, 3, 5 or 8 (decreasing offsets, float labels, a missing dataset, a
# D or num_classes differing from shard 0's, a file that crashes or hangs HDF5) and with two bad shards at once: `inspect` and
# `train` at np 1, 2 and 4, with and without the forked validation child, all give the one line of the serial
# validation, the first problem in shard order, once, and exit 1. Each rank validates only its share (testtool
# meta): the code before #33 validated every shard on rank 0 and fails there.
. "$(dirname "$0")/lib.sh"
mk() { # mk NAME SPEC...: 9 valid shards, then SPEC = INDEX:KIND corrupts shard INDEX
  local name=$1; shift
  synth --out "$name" --samples 90 --dim 5 --classes 3 --min-rows 1 --max-rows 4 --shards 9 --seed 2 --no-manifest
  "$PY" - "$name" "$SRC" "$@" <<'PYEOF'
import shutil, sys, h5py, numpy as np
d, src = sys.argv[1], sys.argv[2]
for spec in sys.argv[3:]:
    k, kind = spec.split(":")
    p = f"{d}/shard-{int(k):05d}.h5"
    if kind in ("crash", "hang"):
        shutil.copy(f"{src}/tests/fuzz/regressions/" + ("hdf5-vlen-heap-overlap.h5" if kind == "crash" else "hdf5-hang-vlen-global-heap.h5"), p)
        continue
    with h5py.File(p, "a") as f:
        if kind == "decreasing":
            o = f["offsets"][:]; o[3] = o[2] - 1; del f["offsets"]; f.create_dataset("offsets", data=o)
        elif kind == "labels_float":
            l = f["labels"][:].astype(np.float32); del f["labels"]; f.create_dataset("labels", data=l)
        elif kind == "no_labels":
            del f["labels"]
        elif kind == "dim":
            x = f["features"][:]; del f["features"]; f.create_dataset("features", data=np.zeros((x.shape[0], 6), np.float32))
        elif kind == "classes":
            f.attrs["num_classes"] = np.int64(4)
        else:
            raise SystemExit("unknown kind " + kind)
PYEOF
}
synth --out good --samples 40 --dim 5 --classes 3 --shards 2 --seed 2 --first-id 1000
cases=(
  "b0 0:decreasing" "b1 1:labels_float" "b2 2:no_labels" "b3 3:dim" "b5 5:classes" "b8 8:decreasing" "c4 4:crash"
  "two_a 2:dim 1:no_labels" "two_b 2:no_labels 1:dim" "two_c 6:decreasing 3:classes" "two_d 7:labels_float 5:crash" "h6 6:hang 8:no_labels"
)
n=0
for c in "${cases[@]}"; do
  read -r name specs <<< "$c"
  # shellcheck disable=SC2086
  mk "$name" $specs
  ref=""
  for fork in 1 0; do
    [ "$fork" = 0 ] && case $name in c4 | two_d | h6) true ;; *) false ;; esac && continue # in process a crash kills the rank
    nps="1 2 4"
    [ "$fork" = 0 ] && nps=2
    for np in $nps; do
      expect_rc 1 env MPIDDP_VALIDATE_FORK=$fork MPIDDP_VALIDATE_TIMEOUT=3 timeout 60 mpirun -np $np --oversubscribe \
        -x MPIDDP_VALIDATE_FORK -x MPIDDP_VALIDATE_TIMEOUT "$MPIDDP" inspect "$name"
      [ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] || fail "$name np $np fork $fork: expected one error line, got: $ERR"
      line=$(grep 'error:' <<< "$ERR")
      [ -n "$ref" ] || ref=$line
      [ "$line" = "$ref" ] || fail "$name np $np fork $fork: '$line' differs from the serial line '$ref'"
    done
  done
  # the shard the line names: the first bad one in shard order
  first=$(tr ' ' '\n' <<< "$specs" | cut -d: -f1 | sort -n | head -1)
  grep -q "^mpiddp inspect: error: $name/shard-0000$first\.h5: " <<< "$ref" || fail "$name: '$ref' does not name shard $first"
  for np in 2 4; do # train: the same line, once, every rank exits non-zero
    expect_rc 1 env MPIDDP_VALIDATE_TIMEOUT=3 timeout 60 mpirun -np $np --oversubscribe -x MPIDDP_VALIDATE_TIMEOUT \
      "$MPIDDP" train --device "$DEVICE" --train "$name" --val good --out "run_$name" --no-progress
    [ "$(printf '%s\n' "$ERR" | grep -c 'error:')" = 1 ] || fail "$name train np $np: expected one error line, got: $ERR"
    [ "$(grep 'error:' <<< "$ERR" | sed 's/^mpiddp train: //')" = "${ref#mpiddp inspect: }" ] ||
      fail "$name train np $np: '$ERR' is not the line of inspect: '$ref'"
    [ ! -e "run_$name" ] || fail "$name: run directory was created"
  done
  echo "$name: ${ref#mpiddp inspect: error: }"
  n=$((n + 1))
done
# each rank validated its share of the 9 shards (the counters of testtool meta), not rank 0 all of them
synth --out spread --samples 90 --dim 5 --classes 3 --shards 9 --no-manifest
for np in 2 4; do
  mpirun_np $np "$TESTTOOL" meta spread > meta$np.txt || { cat meta$np.txt >&2; fail "np $np: validation not spread over the ranks"; }
done
pass "$n datasets with bad shards: the serial line at np 1, 2 and 4, forked or not, inspect and train; validation spread"

# pack's input (docs/dataset-format.md#mpiddp-pack), at np 1 and 2: a sample or /labels whose values HDF5 would make
# up (storage never or partly written, a sample declaring 2^31 rows with nothing written, a virtual dataset whose
# source is missing, external storage in a short file) is refused before anything is written: one line naming the
# input, the dataset and its index, exit 1, a --out it created removed and one that existed left as it was (pack once
# wrote the fill values, zeros, and exited 0; the 2^31-row sample was an 8 GiB allocation). Shards that hold NaN or
# Inf (a NaN in the input, float64 values beyond float32's range) exit 0 with one notice naming the count and the
# first input sample (pack once said nothing); a finite input gives none.
. "$(dirname "$0")/lib.sh"
$PY "$SRC/tests/py/make_data_cases.py" pack pc
cd pc
mkdir kept && echo mine > kept/notes.txt
n=0
for np in 1 2; do
  while IFS='|' read -r -u 3 name rc regex; do # fd 3: mpirun reads (and would eat) standard input
    out=out_${name}_$np
    regex=${regex//OUT/$out}
    expect_rc "$rc" timeout 60 mpirun -np "$np" --oversubscribe "$MPIDDP" pack --input "$name.h5" --out "$out" --shards "$np"
    lines=$(printf '%s\n' "$ERR" | grep '^mpiddp' || true)
    ! grep -qE 'HDF5-DIAG|rank [0-9]+: (error|notice)' <<<"$ERR" || fail "$name at np $np: a rank's own line or HDF5's: $ERR"
    if [ -z "$regex" ]; then
      [ -z "$lines" ] || fail "$name at np $np: expected no notice, got: $ERR"
    else
      [ "$(printf '%s\n' "$lines" | wc -l)" = 1 ] || fail "$name at np $np: expected one line, got: $ERR"
      printf '%s\n' "$lines" | qgrep -E "$regex" || fail "$name at np $np: '$lines' does not match /$regex/"
    fi
    if [ "$rc" = 1 ]; then
      [ ! -e "$out" ] || fail "$name at np $np: the --out it created is left: $(ls -a "$out")"
      expect_rc 1 timeout 60 mpirun -np "$np" --oversubscribe "$MPIDDP" pack --input "$name.h5" --out kept --shards "$np"
      [ "$(ls -A kept)" = notes.txt ] && [ "$(cat kept/notes.txt)" = mine ] || fail "$name at np $np: kept now holds $(ls -A kept)"
    else
      "$MPIDDP" inspect "$out" > /dev/null 2>&1 && inspect_rc=0 || inspect_rc=$?
      [ "$inspect_rc" = "$([ -z "$regex" ] && echo 0 || echo 1)" ] || fail "$name at np $np: inspect of the packed data exited $inspect_rc"
    fi
    n=$((n + 1))
  done 3< cases.txt
done
[ "$n" = $((2 * $(wc -l < cases.txt))) ] || fail "ran $n of the $((2 * $(wc -l < cases.txt))) cases" 
pass "$n pack inputs: values HDF5 would make up refused in one line, NaN/Inf in the shards named in a notice"
# a sample too large for the write buffer: the out-of-memory line names the shard, the sample and its rows (it named
# only io/writer.c's line), exit 1, no --out left
if ldd "$MPIDDP" | qgrep libasan; then # its shadow memory is reserved beyond any ulimit -v: the Release pass runs it
  echo "SKIP: a sample too large to buffer (AddressSanitizer cannot start under ulimit -v)"
else
  expect_rc 1 bash -c 'ulimit -v 4000000 && exec "$0" pack --input huge_early.h5 --out out_huge' "$MPIDDP"
  [ "$ERR" = "mpiddp pack: error: out_huge/shard-00000.h5: out of memory for a block of 2147483648 rows x 3 features (25769803776 bytes); the longest sample, 5 of the shard (offsets[5]), has 2147483648 rows" ] ||
    fail "a sample too large to buffer: $ERR"
  [ ! -e out_huge ] || fail "a sample too large to buffer: out_huge left: $(ls -a out_huge)"
  pass "a sample too large to buffer is named"
fi

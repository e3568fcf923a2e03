# eval's output, where it goes wrong (docs/cli.md#mpiddp-eval, exit codes): (1) an --out in the --data directory
# (a new shard, lock or manifest name, a predictions file; the directories compared by device and inode, so a link
# or another spelling of it counts; a file already there was refused before: it is a file of the dataset) is refused with exit 2 before anything is written, and the dataset stays as it was;
# (2) a stop signal while the predictions are written leaves no FILE.csv.tmp.PID (strace holds the rename);
# (3) a standard output that cannot be written (/dev/full) is one line and exit 1, on the rank that printed only,
# and a closed pipe keeps the convention (SIGPIPE, or EPIPE's line where SIGPIPE is ignored); (4) an existing
# predictions file in a directory the user cannot write is refused with exit 2 before the evaluation (as root
# the check runs as nobody). Multi-rank parts at np 1 and 2.
. "$(dirname "$0")/lib.sh"
tmpirun() { local np=$1; shift; timeout 60 mpirun -np "$np" --oversubscribe "$@"; }
# one_line WHAT LINE: $ERR holds LINE and no other line of mpiddp's (mpirun may add its own report at np 2)
one_line() {
  printf '%s\n' "$ERR" | qgrep -xF -- "$2" || fail "$1: $ERR"
  [ "$(printf '%s\n' "$ERR" | grep -c '^mpiddp')" = 1 ] || fail "$1: not one line: $ERR"
}
synth --out t --samples 60 --dim 4 --classes 3 --shards 2 --seed 3
synth --out v --samples 40 --dim 4 --classes 3 --shards 3 --seed 4
expect_rc 0 timeout 60 "$MPIDDP" train --device cpu --train t --val v --batch-size 8 --hidden 8 --epochs 1 \
  --no-progress --out run
ck=run/checkpoints/last.h5
ev=("$MPIDDP" eval --device cpu --ckpt "$ck" --batch-size 4)

# --- 1. --out in the --data directory ---
cp -r v w
rm w/mpiddp-manifest.bin # a manifest written there would be a new file too
expect_rc 0 "${ev[@]}" --data v --out p.csv
ln -s w wl
expect_rc 0 "$MPIDDP" inspect w
inspect_ok=$OUT
before=$(ls -la --time-style=full-iso w | md5sum)
for np in 1 2; do
  for o in w/zz.h5 w/mpiddp-dataset.lock w/mpiddp-manifest.bin ./w/../w/p.csv wl/p.csv "$(pwd)/w/new.csv"; do
    expect_rc 2 tmpirun $np "${ev[@]}" --data w --out "$o"
    one_line "--out $o in --data w at np $np" "mpiddp eval: --out $o: is in the dataset directory --data w; refusing to write there (a file there changes the dataset: choose a file outside it)"
    [ -z "$OUT" ] || fail "--out $o in --data w at np $np: evaluated: $OUT"
    [ "$(ls -la --time-style=full-iso w | md5sum)" = "$before" ] || fail "--out $o at np $np: the dataset directory changed: $(ls w)"
  done
  expect_rc 2 tmpirun $np "${ev[@]}" --data wl --out w/zz.h5 # --data the link, --out the directory itself
  printf '%s' "$ERR" | qgrep "^mpiddp eval: --out w/zz.h5: is in the dataset directory --data wl;" || fail "--data a link at np $np: $ERR"
done
expect_rc 0 "$MPIDDP" inspect w
[ "$OUT" = "$inspect_ok" ] || fail "the dataset changed: $OUT"
expect_rc 0 "${ev[@]}" --data w --out w.csv # beside the dataset: fine
cmp -s w.csv p.csv || fail "predictions of the copy differ"
pass "an --out in the --data directory is refused (exit 2, one line) and the dataset stays"

# --- 2. a stop signal while the predictions are written: the temporary goes with the process ---
command -v strace >/dev/null || fail "strace is missing (scripts/deps.sh installs it)"
if strace -qq -o /dev/null true 2>/dev/null; then
  # sig_during_write NP SIGNAL: eval --out sig.csv with rank 0's rename held 4 s by strace; SIGNAL to rank 0 (the PID
  # in the temporary's name) once the temporary exists; sets rc
  sig_during_write() {
    local np=$1 sig=$2 job t= pid
    rm -f sig.csv sig.csv.tmp.*
    tmpirun "$np" strace -f -qq -o /dev/null -e trace=rename -e inject=rename:delay_enter=4000000 \
      "${ev[@]}" --data v --out sig.csv > sig.out 2> sig.err &
    job=$!
    for _ in $(seq 300); do
      t=$(ls sig.csv.tmp.* 2>/dev/null | head -1) || true
      [ -n "$t" ] && break
      sleep 0.1
    done
    [ -n "$t" ] || fail "np $np: no temporary appeared: $(cat sig.err)"
    pid=${t##*.}
    sleep 0.5 # the rows are written; rank 0 waits in the rename
    kill -"$sig" "$pid" || fail "np $np: could not signal rank 0 ($pid)"
    set +e; wait $job; rc=$?; set -e
    [ -z "$(ls sig.csv.tmp.* 2>/dev/null)" ] || fail "np $np, SIG$sig: the temporary stayed: $(ls sig.csv.tmp.*)"
    [ ! -e sig.csv ] || fail "np $np, SIG$sig: sig.csv was placed although the process was stopped before the rename"
  }
  for s in TERM INT HUP; do
    sig_during_write 1 $s
    [ "$rc" = $((128 + $(kill -l $s))) ] || fail "np 1, SIG$s: exit $rc: $(cat sig.err)"
  done
  sig_during_write 2 TERM
  [ "$rc" != 0 ] || fail "np 2, SIGTERM to rank 0: mpirun exited 0"
  pass "a stop signal during the predictions write leaves no temporary (np 1: SIGTERM, SIGINT, SIGHUP; np 2)"
else
  echo "SKIP: strace cannot trace here (ptrace denied: $(strace -qq -o /dev/null true 2>&1 | head -1)), section 2"
fi

# --- 3. standard output that cannot be written ---
line="mpiddp eval: error: cannot write standard output: No space left on device"
expect_rc 1 sh -c '"$0" "$@" > /dev/full' "${ev[@]}" --data v
[ "$ERR" = "$line" ] || fail "eval > /dev/full: $ERR"
expect_rc 1 sh -c '"$0" "$@" > /dev/full' "$MPIDDP" inspect v
[ "$ERR" = "mpiddp inspect: error: cannot write standard output: No space left on device" ] || fail "inspect > /dev/full: $ERR"
expect_rc 1 sh -c '"$0" "$@" > /dev/full' "$MPIDDP" --version
[ "$ERR" = "mpiddp: error: cannot write standard output: No space left on device" ] || fail "--version > /dev/full: $ERR"
expect_rc 1 sh -c '"$0" "$@" > /dev/full' "${ev[@]}" --data v --out full.csv # the predictions are written, the line lost
[ "$(wc -l < full.csv)" = 41 ] || fail "eval --out > /dev/full: predictions $(wc -l < full.csv) lines"
# np 2, every rank's standard output /dev/full (under mpirun a rank writes to mpirun's pipe otherwise): rank 0,
# which prints the line, fails; rank 1 printed nothing and says nothing
expect_rc 1 tmpirun 2 bash -c '"$0" "$@" > /dev/full; rc=$?; echo "rank $OMPI_COMM_WORLD_RANK exit $rc" >&2; exit $rc' "${ev[@]}" --data v
[ "$(printf '%s\n' "$ERR" | grep -c 'cannot write standard output')" = 1 ] || fail "np 2 > /dev/full: not one line: $ERR"
printf '%s\n' "$ERR" | qgrep -x "$line" || fail "np 2 > /dev/full: $ERR"
printf '%s\n' "$ERR" | qgrep -x "rank 0 exit 1" && printf '%s\n' "$ERR" | qgrep -x "rank 1 exit 0" || fail "np 2 > /dev/full: ranks' exits: $ERR"
expect_rc 0 tmpirun 2 bash -c '[ "$OMPI_COMM_WORLD_RANK" = 0 ] || exec > /dev/full; exec "$0" "$@"' "${ev[@]}" --data v
printf '%s' "$OUT" | qgrep "^val/loss=" || fail "np 2, rank 1's stdout /dev/full: no metric line: $OUT"
# a closed pipe: SIGPIPE ends eval as it ends any tool (128 + 13); with SIGPIPE ignored, EPIPE's line and exit 1
set +e
"${ev[@]}" --data v 2> pipe.err | true
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 141 ] && [ ! -s pipe.err ] || fail "eval | (closed): exit $rc, $(cat pipe.err)"
set +e
(trap '' PIPE; "${ev[@]}" --data v 2> pipe.err | true; exit "${PIPESTATUS[0]}")
rc=$?
set -e
[ "$rc" = 1 ] && [ "$(cat pipe.err)" = "mpiddp eval: error: cannot write standard output: Broken pipe" ] ||
  fail "eval | (closed), SIGPIPE ignored: exit $rc, $(cat pipe.err)"
pass "a standard output that cannot be written: one line, exit 1 (rank 0 only at np 2); a closed pipe as usual"

# --- 4. an existing predictions file in a directory the user cannot write: refused before the evaluation ---
priv=$(mktemp -d /tmp/eval_out.XXXXXX)
trap 'chmod -R u+w "$priv" 2>/dev/null; rm -rf "$priv"' EXIT
chmod 755 "$priv"
cp -r v "$ck" "$priv/"
mkdir "$priv/ro"
cp p.csv "$priv/ro/p.csv"
chmod -R a+rX "$priv"
chmod 777 "$priv/v" # the user takes the dataset's shared lock there
as_user=()
if [ "$(id -u)" = 0 ]; then # root writes anywhere: run as nobody
  command -v setpriv > /dev/null || fail "running as root without setpriv: cannot check a directory another user cannot write"
  as_user=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups env HOME="$priv")
  "${as_user[@]}" test -x "$MPIDDP" || fail "nobody cannot run $MPIDDP (a parent directory without o+x?)"
  chown -R nobody "$priv/ro/p.csv" # the user's own predictions file, in a directory that is not theirs
else
  chmod 555 "$priv/ro"
fi
"${as_user[@]}" test -w "$priv/ro" && fail "the user can write $priv/ro: the check would prove nothing"
for np in 1 2; do
  expect_rc 2 "${as_user[@]}" timeout 60 mpirun -np $np --oversubscribe "$MPIDDP" eval --device cpu --ckpt "$priv/last.h5" \
    --data "$priv/v" --batch-size 4 --out "$priv/ro/p.csv"
  one_line "existing file, np $np" "mpiddp eval: --out $priv/ro/p.csv: cannot create files in $priv/ro: Permission denied"
  [ -z "$OUT" ] || fail "existing file in a read-only directory, np $np: evaluated first: $OUT"
  cmp -s p.csv "$priv/ro/p.csv" || fail "np $np: the existing predictions file changed"
done
pass "an existing predictions file in a directory the user cannot write is refused before the evaluation"

# Hangs and silent misreads (#31 item 8): --config that is /dev/zero, a directory, a FIFO, too large or binary
# is refused at once with one line and exit 2 (`timeout` turns a spin or a block into a failure); `eval --out`
# never replaces the checkpoint, a shard or a file mpiddp did not write (compared by device and inode), says
# "is a directory" for one, and refuses a file in a missing directory before it evaluates; a shard without read
# permission says "Permission denied" (as root the check runs as `nobody`, through setpriv or runuser: it is never
# skipped), also under a fresh manifest (the same line at start-up, no run directory made); a FIFO as the manifest,
# `pack --input`, `index --manifest` or `eval --ckpt` is refused or ignored at once (it once blocked every rank in
# open(2)). Multi-rank parts at np 1, 2 and 4.
. "$(dirname "$0")/lib.sh"
tmpirun() { local np=$1; shift; timeout 60 mpirun -np "$np" --oversubscribe "$@"; }
one_line() { [ "$(printf '%s\n' "$ERR" | grep -c '^mpiddp')" = 1 ] || fail "$1: not one line: $ERR"; }
synth --out t --samples 120 --dim 4 --classes 3 --shards 2 --seed 3
synth --out v --samples 40 --dim 4 --classes 3 --shards 2 --seed 3 --first-id 5000
args=(--device cpu --train t --val v --batch-size 8 --hidden 8 --epochs 1 --no-progress)

# --- 1. --config: only a regular text file of at most 1 MiB ---
mkdir cfgdir
mkfifo cfg.fifo
head -c 1100000 /dev/zero | tr '\0' '#' > big.ini
printf 'epochs = 2\n\0\n' > nul.ini
for np in 1 2 4; do
  expect_rc 2 tmpirun $np "$MPIDDP" train "${args[@]}" --out c$np --config /dev/zero
  printf '%s' "$ERR" | qgrep "^mpiddp train: --config /dev/zero: is a character device, not a regular file$" || fail "/dev/zero at np $np: $ERR"
  one_line "/dev/zero at np $np"
  expect_rc 2 tmpirun $np "$MPIDDP" train "${args[@]}" --out c$np --config cfg.fifo
  printf '%s' "$ERR" | qgrep "^mpiddp train: --config cfg.fifo: is a FIFO, not a regular file$" || fail "FIFO at np $np: $ERR"
  [ -e c$np ] && fail "--config refused at np $np, yet a run directory was made"
done
expect_rc 2 timeout 10 "$MPIDDP" train "${args[@]}" --out c --config cfgdir
printf '%s' "$ERR" | qgrep "^mpiddp train: --config cfgdir: is a directory, not an INI file$" || fail "directory: $ERR"
expect_rc 2 timeout 10 "$MPIDDP" train "${args[@]}" --out c --config=cfgdir/
printf '%s' "$ERR" | qgrep "is a directory" || fail "directory with a slash: $ERR"
expect_rc 2 timeout 10 "$MPIDDP" train "${args[@]}" --out c --config big.ini
printf '%s' "$ERR" | qgrep "^mpiddp train: --config big.ini: 1100000 bytes, more than the 1048576 a config file may hold$" || fail "large file: $ERR"
expect_rc 2 timeout 10 "$MPIDDP" train "${args[@]}" --out c --config nul.ini
printf '%s' "$ERR" | qgrep "^mpiddp train: --config nul.ini: holds a NUL byte at offset 11: not a text file$" || fail "NUL byte: $ERR"
expect_rc 2 timeout 10 "$MPIDDP" train "${args[@]}" --out c --config missing.ini
printf '%s' "$ERR" | qgrep "^mpiddp train: --config missing.ini: cannot open: No such file or directory$" || fail "missing file: $ERR"
printf 'epochs = 1\nhidden = 8\n' > ok.ini # a regular file still works (through the same reader)
expect_rc 0 timeout 60 "$MPIDDP" train --device cpu --train t --val v --batch-size 8 --no-progress --out cok --config ok.ini
grep -Eq '"hidden":[[:space:]]*8,' cok/run.json || fail "config values not applied: $(head -c 400 cok/run.json)"

# --- 2. eval --out: never an input, never a directory, never a file mpiddp did not write ---
expect_rc 0 timeout 60 "$MPIDDP" train "${args[@]}" --out run
ck=run/checkpoints/last.h5
cp "$ck" ck.copy
cp v/shard-00001.h5 shard.copy
echo "my notes" > notes.txt
ln -s "$ck" ck-link.csv
mkdir preds
for np in 1 2 4; do
  ev=(tmpirun $np "$MPIDDP" eval --device cpu --ckpt "$ck" --data v --batch-size 4)
  expect_rc 2 "${ev[@]}" --out "$ck"
  printf '%s' "$ERR" | qgrep "^mpiddp eval: --out $ck: is the checkpoint --ckpt $ck; refusing to replace it$" || fail "--out = --ckpt at np $np: $ERR"
  expect_rc 2 "${ev[@]}" --out ck-link.csv # another name, the same inode
  printf '%s' "$ERR" | qgrep "is the checkpoint" || fail "--out a link to the checkpoint at np $np: $ERR"
  expect_rc 2 "${ev[@]}" --out "$(pwd)/v/../v/shard-00001.h5"
  printf '%s' "$ERR" | qgrep "is v/shard-00001.h5 of the dataset --data v; refusing to replace it" || fail "--out = a shard at np $np: $ERR"
  expect_rc 2 "${ev[@]}" --out notes.txt
  printf '%s' "$ERR" | qgrep "^mpiddp eval: --out notes.txt: exists and is not a predictions CSV of mpiddp eval" || fail "--out = a foreign file at np $np: $ERR"
  expect_rc 2 "${ev[@]}" --out preds/
  printf '%s' "$ERR" | qgrep "^mpiddp eval: --out preds/: is a directory (give a file name, e.g. preds/predictions.csv)$" || fail "--out dir/ at np $np: $ERR"
  one_line "--out dir/ at np $np"
  expect_rc 2 "${ev[@]}" --out preds
  printf '%s' "$ERR" | qgrep "is a directory" || fail "--out dir at np $np: $ERR"
  expect_rc 2 "${ev[@]}" --out nodir/p.csv # refused before the evaluation, not after it
  printf '%s' "$ERR" | qgrep "^mpiddp eval: --out nodir/p.csv: directory nodir: No such file or directory$" || fail "--out in a missing directory at np $np: $ERR"
  one_line "--out in a missing directory at np $np"
  expect_rc 0 "${ev[@]}" --out p.csv # a new file, then the same file again: mpiddp wrote it, it may be replaced
  expect_rc 0 "${ev[@]}" --out p.csv
  [ "$(head -1 p.csv)" = "sample_id,label,pred,prob" ] && [ "$(wc -l < p.csv)" = 41 ] || fail "predictions at np $np: $(head -3 p.csv)"
done
cmp -s "$ck" ck.copy || fail "the checkpoint was modified"
cmp -s v/shard-00001.h5 shard.copy || fail "the shard was modified"
[ "$(cat notes.txt)" = "my notes" ] || fail "notes.txt was replaced"
[ -z "$(ls preds)" ] || fail "files appeared in preds/: $(ls preds)"

# --- 3. a shard without read permission: the real cause, for a user the mode 000 applies to ---
priv=$(mktemp -d /tmp/misreads.XXXXXX)
trap 'rm -rf "$priv"' EXIT
chmod 755 "$priv"
cp -r v "$priv/v"
chmod 000 "$priv/v/shard-00001.h5"
as_user=()
if [ "$(id -u)" = 0 ]; then # root reads mode 000: run as nobody
  if command -v setpriv > /dev/null; then as_user=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups --)
  elif command -v runuser > /dev/null; then as_user=(runuser -u nobody --)
  else fail "running as root without setpriv or runuser: cannot check a mode-000 shard as another user"; fi
  "${as_user[@]}" test -x "$MPIDDP" || fail "nobody cannot run $MPIDDP (a parent directory without o+x?)"
  "${as_user[@]}" test -r "$priv/v/shard-00001.h5" && fail "nobody can read a mode-000 file: the check would prove nothing"
fi
expect_rc 1 timeout 60 "${as_user[@]}" "$MPIDDP" inspect "$priv/v"
printf '%s' "$ERR" | qgrep "^mpiddp inspect: error: $priv/v/shard-00001.h5: cannot open: Permission denied$" || fail "mode 000, inspect: $ERR"
for np in 2 4; do
  expect_rc 1 env HOME="$priv" "${as_user[@]}" timeout 60 mpirun -np $np --oversubscribe "$MPIDDP" train --device cpu --train "$priv/v" --val v \
    --no-progress --out "$priv/run"
  printf '%s' "$ERR" | qgrep "^mpiddp train: error: $priv/v/shard-00001.h5: cannot open: Permission denied" || fail "mode 000, train at np $np: $ERR"
done
# the same under a fresh manifest (cp -a keeps the mtimes it records; a chmod changes neither size nor mtime): the
# shard was once trusted unopened, inspect said valid and train failed mid-run after making its run directory
cp -a v "$priv/vm"
mkdir "$priv/runs" && chmod 777 "$priv/runs" # where the user may make a run directory: none must appear
expect_rc 0 timeout 60 "${as_user[@]}" "$MPIDDP" inspect "$priv/vm"
printf '%s' "$OUT" | qgrep "^metadata from $priv/vm/mpiddp-manifest.bin (2 shards unchanged, 0 re-validated)$" || fail "the manifest is not fresh: $OUT"
chmod 000 "$priv/vm/shard-00001.h5"
for np in 1 2; do
  expect_rc 1 timeout 60 "${as_user[@]}" mpirun -np $np --oversubscribe "$MPIDDP" inspect "$priv/vm"
  printf '%s' "$ERR" | qgrep "^mpiddp inspect: error: $priv/vm/shard-00001.h5: cannot open: Permission denied$" || fail "mode 000 under a fresh manifest, inspect at np $np: $ERR"
  one_line "mode 000 under a fresh manifest, inspect at np $np"
  expect_rc 1 env HOME="$priv" "${as_user[@]}" timeout 60 mpirun -np $np --oversubscribe "$MPIDDP" train --device cpu --train "$priv/vm" --val v \
    --no-progress --out "$priv/runs/m$np"
  printf '%s' "$ERR" | qgrep "^mpiddp train: error: $priv/vm/shard-00001.h5: cannot open: Permission denied$" || fail "mode 000 under a fresh manifest, train at np $np: $ERR"
  one_line "mode 000 under a fresh manifest, train at np $np"
  [ -z "$(ls -A "$priv/runs")" ] || fail "mode 000 under a fresh manifest, train at np $np: made $(ls -A "$priv/runs")"
done

# --- 4. a FIFO where a manifest, pack's input or a checkpoint is read: refused or ignored at once, never waited on ---
cp -r t tf
rm tf/mpiddp-manifest.bin
mkfifo tf/mpiddp-manifest.bin in.fifo
notice="notice: tf/mpiddp-manifest.bin: not a regular file (a FIFO): ignored, validating every shard"
for np in 1 2; do
  expect_rc 0 timeout 20 mpirun -np $np --oversubscribe "$MPIDDP" inspect tf
  printf '%s' "$ERR" | qgrep "^mpiddp inspect: $notice" || fail "the manifest a FIFO, inspect at np $np: $ERR"
  expect_rc 0 timeout 20 mpirun -np $np --oversubscribe "$MPIDDP" inspect t --manifest in.fifo
  printf '%s' "$ERR" | qgrep "^mpiddp inspect: notice: in.fifo: not a regular file (a FIFO): ignored" || fail "inspect --manifest FIFO at np $np: $ERR"
done
expect_rc 0 timeout 30 "$MPIDDP" train "${args[@]}" --train tf --out fifo_run
printf '%s' "$ERR" | qgrep "^mpiddp train: $notice" || fail "the manifest a FIFO, train: $ERR"
expect_rc 1 timeout 20 "$MPIDDP" pack --input in.fifo --out packed
printf '%s' "$ERR" | qgrep "^mpiddp pack: error: in.fifo: cannot open --input: not a regular file (a FIFO)$" || fail "pack --input FIFO: $ERR"
expect_rc 2 timeout 20 "$MPIDDP" index t --manifest in.fifo
expect_rc 1 timeout 20 "$MPIDDP" eval --device cpu --ckpt in.fifo --data v
printf '%s' "$ERR" | qgrep "in.fifo: cannot open checkpoint: not a regular file (a FIFO)" || fail "eval --ckpt FIFO: $ERR"
pass "--config refuses what is not a regular text file, eval --out keeps its inputs, a mode-000 shard says Permission denied, a FIFO is never waited on"

# The --config INI file as docs/cli.md states it (#ini-configuration---config-file): indented lines are ordinary
# lines (never a continuation of the previous value); a line inih would split is refused; a syntax error is
# named at its own line; the command line overrides the file also across an either-or pair. Usage errors exit 2
# with one line naming the file and line.
. "$(dirname "$0")/lib.sh"
args=(--train t --val v --device cpu) # no datasets: every refusal below comes before they are opened
refuse() { # refuse FILE MESSAGE [train options]: exit 2 and exactly the line "mpiddp train: MESSAGE"
  local f=$1 msg=$2; shift 2
  expect_rc 2 "$MPIDDP" train "${args[@]}" --config "$f" "$@"
  [ "$ERR" = "mpiddp train: $msg" ] || fail "--config $f: expected 'mpiddp train: $msg', got: $ERR"
}

# --- 1. an indented key = value line is its own key, not a continuation of the previous value ---
printf '[train]\n  out = rA\n  epochs = 2\n  warp = 1\n' > ind.ini
refuse ind.ini "ind.ini:4: unknown key 'warp'"
printf '[train]\n\tout = rA\n  monitor = val/los\n' > ind2.ini
refuse ind2.ini "--monitor val/los: must be one of val/loss, val/acc, val/macro_f1 (decisions are taken after each validation)"
synth --out t --samples 24 --shards 1 --dim 3 --classes 2
synth --out v --samples 8 --shards 1 --dim 3 --classes 2 --first-id 100
printf '\xef\xbb\xbf[train]\r\n  out = rA\r\n  monitor = val/acc\r\n  mode = max\r\n   epochs=1\r\n' > run.ini
expect_rc 0 timeout 120 "$MPIDDP" train "${args[@]}" --hidden 4 --batch-size 8 --no-progress --config run.ini
[ -d rA ] && [ ! -e "mode = max" ] || fail "indented out = rA: $(ls)"
$PY -c 'import json; c = json.load(open("rA/run.json"))["config"]; assert (c["out"], c["monitor"], c["mode"], c["epochs"]) == ("rA", "val/acc", "max", 1), c' ||
  fail "indented keys not applied"

# --- 2. a line longer than inih reads whole (198 characters, line terminator excluded) is refused: inih split it,
# and `out = <long path> run2` wrote to ./run2, or an error named a line that does not exist ---
printf 'epochs = 1\nout = %s run2\n' "$(printf 'a%.0s' {1..190})" > l1.ini
refuse l1.ini "l1.ini:2: line longer than 198 characters (give that option on the command line)"
[ ! -e run2 ] || fail "an over-long out line wrote run2"
printf 'monitor = val/acc%182s\n' "" > l2.ini # 199 characters
refuse l2.ini "l2.ini:1: line longer than 198 characters (give that option on the command line)"
printf 'monitor = val/acc%181s\r\nepochs = 1\r\nwarp = 1\r\n' "" > l3.ini # 198 characters, then CRLF: read whole
refuse l3.ini "l3.ini:3: unknown key 'warp'"
# a comment of any length, and an indented line whose text fits, are read (the indentation is not what inih reads)
printf '%s\n; %s\n  %s\nwarp = 1\n' "$(printf '#%.0s' {1..250})" "$(printf 'x%.0s' {1..250})" "monitor = val/acc$(printf ' %.0s' {1..150})" > l4.ini
sed -i "3s/^/$(printf ' %.0s' {1..40})/" l4.ini
refuse l4.ini "l4.ini:4: unknown key 'warp'"
[ "$(sed -n 2p l1.ini | wc -c)" = 202 ] && [ "$(head -1 l2.ini | wc -c)" = 200 ] && [ "$(head -1 l3.ini | wc -c)" = 200 ] ||
  fail "test files: line lengths"

# --- 3. a syntax error is reported at its own line, before any key's error (inih goes on after it and returns
# the first error's line: a later key's error was reported at the syntax error's line) ---
printf 'epochs 3\nwarp = 1\n' > e1.ini
refuse e1.ini "e1.ini:1: syntax error (expected key = value)"
printf 'epochs = 1\nwarp = 2\nx\n' > e2.ini
refuse e2.ini "e2.ini:3: syntax error (expected key = value)"
printf 'epochs = 1\n[train\nwarp = 2\n' > e3.ini
refuse e3.ini "e3.ini:2: syntax error (expected [section])"
printf 'epochs = 1\nmonitor ; = val/acc\n' > e4.ini # the inline comment starts before the '='
refuse e4.ini "e4.ini:2: syntax error (expected key = value)"
printf 'epochs = 1\n\n; c\n# c\nbatch-size = 0\n' > e5.ini # then a key's error, at its line
refuse e5.ini "e5.ini:5: --batch-size 0: must be in [1, 10000000]"
# what the file may hold: comments, sections, duplicate keys (the last wins), key : value, inline ; comments,
# _ or - in keys, = in a value
printf '; c\n# c\n[a]\nepochs = 3\n[b]\nepochs = 1\nbatch_size : 8\nlog-every = 7 ; seven\nout = rC\nhidden=4\nmonitor = val/acc\n' > ok.ini
expect_rc 0 timeout 120 "$MPIDDP" train "${args[@]}" --no-progress --config ok.ini
$PY -c 'import json; c = json.load(open("rC/run.json"))["config"]; assert (c["epochs"], c["batch-size"], c["log-every"], c["hidden"], c["monitor"]) == (1, 8, 7, 4, "val/acc"), c' ||
  fail "ok.ini not applied as written"

# --- 5. the command line overrides the file also across an either-or pair (--batch-size / --batch-rows,
# --resume / --overwrite): the file's value is dropped; a pair within the file, or on the command line, is refused ---
cfg() { $PY -c 'import json, sys; c = json.load(open(sys.argv[1] + "/run.json"))["config"]; print(*[c[k] for k in sys.argv[2:]])' "$@"; }
small=(--hidden 4 --epochs 1 --no-progress)
printf 'batch_size = 16\nout = rB\n' > bs.ini
expect_rc 0 timeout 120 "$MPIDDP" train "${args[@]}" "${small[@]}" --config bs.ini --batch-rows 200
[ "$(cfg rB batch-size batch-rows)" = "None 200" ] || fail "file batch_size, --batch-rows: $(cfg rB batch-size batch-rows)"
printf 'batch_rows = 200\nout = rB\n' > br.ini
expect_rc 0 timeout 120 "$MPIDDP" train "${args[@]}" "${small[@]}" --batch-size 8 --config br.ini --overwrite
[ "$(cfg rB batch-size batch-rows)" = "8 0" ] || fail "file batch_rows, --batch-size: $(cfg rB batch-size batch-rows)"
printf 'resume = auto\nout = rB\n' > rs.ini # rB holds a run: --overwrite starts afresh, the file's resume dropped
expect_rc 0 timeout 120 "$MPIDDP" train "${args[@]}" "${small[@]}" --config rs.ini --overwrite
[ "$(cfg rB resume overwrite)" = "None True" ] && ! grep -q resuming <<<"$ERR" || fail "file resume, --overwrite: $(cfg rB resume overwrite) $ERR"
printf 'overwrite = true\nout = rB\n' > ow2.ini # --resume auto continues it, the file's overwrite dropped
expect_rc 0 timeout 120 "$MPIDDP" train "${args[@]}" "${small[@]}" --config ow2.ini --resume auto --epochs 2
[ "$(cfg rB resume overwrite)" = "auto False" ] && grep -q "resuming from rB/checkpoints/last.h5" <<<"$ERR" ||
  fail "file overwrite, --resume auto: $(cfg rB resume overwrite) $ERR"
expect_rc 0 timeout 120 "$MPIDDP" train "${args[@]}" "${small[@]}" --config rs.ini --overwrite=false --epochs 2 # not given
grep -q "nothing to do: rB/checkpoints/last.h5 has finished 2 epoch(s)" <<<"$ERR" || fail "file resume, --overwrite=false: $ERR"
printf 'batch_size = 8\nbatch_rows = 200\n' > both.ini
refuse both.ini "--batch-size and --batch-rows: give one (samples per rank per step, or a token budget per rank per step)" --out rD
refuse both.ini "--batch-size and --batch-rows: give one (samples per rank per step, or a token budget per rank per step)" --out rD --batch-size 8 --batch-rows 200
printf 'resume = auto\noverwrite = true\n' > both2.ini
refuse both2.ini "--resume and --overwrite: give one (continue the run in --out, or remove its files and start afresh)" --out rD
refuse rs.ini "--resume and --overwrite: give one (continue the run in --out, or remove its files and start afresh)" --resume auto --overwrite
[ ! -e rD ] || fail "a refused pair left a run directory"
# slurm-script as train: no --resume auto beside either; a pair within the file or on the command line refused
for a in "--config rs.ini --overwrite" "--config ow2.ini --resume auto"; do
  read -r -a extra <<<"$a"
  expect_rc 0 "$MPIDDP" slurm-script -- --train t --val v --out r "${extra[@]}"
  [[ $(grep '^srun' <<<"$OUT") != *"--resume auto --resume auto"* && $(grep '^srun' <<<"$OUT") == *"$a" ]] || fail "slurm-script $a: $OUT"
done
for a in "--config both2.ini" "--config rs.ini --resume auto --overwrite"; do
  read -r -a extra <<<"$a"
  expect_rc 2 "$MPIDDP" slurm-script -- --train t --val v --out r "${extra[@]}"
  [ "$ERR" = "mpiddp train: --resume and --overwrite: give one (continue the run in --out, or remove its files and start afresh)" ] ||
    fail "slurm-script $a: $ERR"
done

# --- 4. slurm-script reads the --config file of its train arguments as train does: once it spun on /dev/zero,
# waited on a FIFO and printed a script for a directory ---
mkfifo cfg.fifo && mkdir cfgdir
for c in "/dev/zero|is a character device, not a regular file" "cfg.fifo|is a FIFO, not a regular file" \
  "cfgdir|is a directory, not an INI file" "l1.ini|line longer than 198 characters (give that option on the command line)"; do
  f=${c%%|*} msg=${c#*|}
  [ "$f" = l1.ini ] && want="l1.ini:2: $msg" || want="--config $f: $msg"
  expect_rc 2 timeout 10 "$MPIDDP" slurm-script -- --train t --val v --out r --config "$f"
  [ "$ERR" = "mpiddp train: $want" ] && [ -z "$OUT" ] || fail "slurm-script --config $f: $ERR / $OUT"
done
printf '[train]\n  out = r\n  overwrite = true\n' > ow.ini # an indented key counts: no --resume auto beside it
expect_rc 0 timeout 10 "$MPIDDP" slurm-script -- --train t --val v --config ow.ini
[[ $(grep '^srun' <<<"$OUT") != *"--resume auto"* ]] || fail "slurm-script, indented overwrite: $(grep '^srun' <<<"$OUT")"

pass "--config: indented, over-long and malformed lines; the command line over the file across either-or pairs; slurm-script reads it as train does"

# The documentation's examples, run as written (#34 item 5): every ```bash block of docs/lightning.md,
# docs/distributed.md and docs/faults.md, in order, each page in one shell of its own at np 2 in a scratch home
# (walkthrough.md has its own test, walkthrough.sh). ```sh blocks are the ones a page shows but cannot run here
# (GPUs, a cluster). Then each page's promises: the messages, exit codes and numbers it quotes appear in the
# output, and the statements the issue found false are gone. Also the README's eval and pack synopses against
# their --help, and `mpiddp --help` naming --version.
. "$(dirname "$0")/lib.sh"
mkdir -p bin home
ln -s "$MPIDDP" bin/mpiddp
# the pages call "$PY" (a python3 with numpy and h5py, walkthrough.md#before-you-start); a bare python3 fails here
printf '#!/bin/sh\necho "a page ran a bare python3 ($*): its examples call \\"\\$PY\\"" >&2\nexit 127\n' > bin/python3
chmod +x bin/python3
export PATH="$WORK/bin:$PATH" HOME="$WORK/home" SRC PY

# run_page NAME MIN_BLOCKS: the page's bash blocks -> NAME.sh, run with -euo pipefail; NAME.out / NAME.err
run_page() {
  local doc="$SRC/docs/$1.md" n rc
  awk '/^```bash$/ {on = 1; next} /^```/ {on = 0} on' "$doc" > "$WORK/$1.sh"
  n=$(grep -c '^```bash$' "$doc" || true)
  [ "$n" -ge "$2" ] || fail "$1.md: $n bash blocks, expected at least $2"
  set +e
  (cd "$HOME" && bash -euo pipefail "$WORK/$1.sh" > "$WORK/$1.out" 2> "$WORK/$1.err")
  rc=$?
  set -e
  [ "$rc" = 0 ] || { tail -20 "$WORK/$1.out"; tail -40 "$WORK/$1.err" >&2; fail "$1.md: its commands exited $rc"; }
}
# has FILE TEXT WHAT: TEXT (fixed string) occurs in FILE
has() { grep -qF -- "$2" "$1" || { tail -20 "$1" >&2; fail "$3: '$2' not in $(basename "$1")"; }; }
# not_in_doc PAGE PATTERN WHY: the page no longer says it (extended regex, case-insensitive)
not_in_doc() { ! grep -Eqi -- "$2" "$SRC/docs/$1.md" || fail "$1.md still says: $(grep -Ei -- "$2" "$SRC/docs/$1.md" | head -2) ($3)"; }
PROGRESS_RE='^epoch [0-9]+ \(of [0-9]+\) step [0-9]+/[0-9]+ \(global [0-9]+\) loss [0-9.]+ [0-9]+ samples/s ETA ([0-9]+:)?[0-9]+:[0-9][0-9]$'
DECISION_RE='^epoch [0-9]+ step [0-9]+: val/[a-z_]+=[-0-9.e+a-z]+; policy (reduced|rank0): (save|improved|no improvement|not finite, no save)$|^epoch [0-9]+ step [0-9]+: val/[a-z_]+=[-0-9.e+a-z]+; policy (all|any|majority): (save|no save|not finite, no save) \(improved on ranks [-0-9,none]+; not on ranks [-0-9,none]+\)( - ranks disagree)?$'

# ---------------------------------------------------------------- lightning.md
run_page lightning 4
L="$HOME/mpiddp-lightning"
# the first run: 32 optimizer steps per epoch, 0-based epochs, at most save_top_k=2 top-k files, the summary
has lightning.err "epoch 0 (of 4) step 10/32 (global 10)" "lightning.md's progress line"
bad=$(grep '^epoch [0-9]* (of' lightning.err | grep -Ev "$PROGRESS_RE" || true)
[ -z "$bad" ] || fail "lightning.md: progress lines not in the documented format: $bad"
topk=$(ls "$L/runs/lit/checkpoints" | grep -c '^epoch=[0-9]*-step=[0-9]*-val_acc=.*\.h5$' || true)
[ "$topk" -ge 1 ] && [ "$topk" -le 2 ] || fail "lightning.md: $topk top-k files (save_top_k=2)"
[ -f "$L/runs/lit/checkpoints/last.h5" ] || fail "lightning.md: no last.h5"
head -1 "$L/runs/lit/checkpoints/decisions.log" | qgrep '^epoch 0 step 32: val/acc=' \
  || fail "lightning.md: decisions.log: $(head -1 "$L/runs/lit/checkpoints/decisions.log")"
has lightning.out "best checkpoint: $L/runs/lit/checkpoints/epoch=" "lightning.md's summary"
# the lr column: warmup over the first 13 steps (10% of 128), then the cosine decay
awk -F, 'NR==1{for(i=1;i<=NF;i++) if($i=="lr") c=i; next} $c!="" && $2 <= 128 {n++; v[n]=$c; s[n]=$2}
         END {for (i = 1; i <= n; i++) if (v[i] > m) {m = v[i]; at = s[i]}
              if (!(v[1] < m && at >= 13 && at <= 20 && v[n] < m / 2)) {print "lr", v[1], m, "at", at, v[n]; exit 1}}' \
  "$L/runs/lit/metrics.csv" || fail "lightning.md: the lr column is not a 13-step warmup and a decay"
# the resume: from the epoch after the first run's last one (4, or earlier after early stopping), step 128 then
first_end=$(grep -m1 '^mpiddp train: .* at epoch' lightning.out)
case $first_end in
  *"finished at epoch 3 (of 4) step 32/32 (global 128)")
    has lightning.err "mpiddp train: resuming from runs/lit/checkpoints/last.h5 at epoch 4 (0-based), optimizer step 0 of the epoch, step 128" "lightning.md's resume notice" ;;
  *"early stopping at epoch "*)
    e=$(printf '%s' "$first_end" | sed -E 's/.* at epoch ([0-9]+) .*\(global ([0-9]+)\)$/\1 \2/')
    has lightning.err "at epoch $(( ${e% *} + 1 )) (0-based), optimizer step 0 of the epoch, step ${e#* }" "lightning.md's resume after early stopping" ;;
  *) fail "lightning.md: the first run's summary: $first_end" ;;
esac
[ -z "$(ls "$L/runs/smoke/checkpoints")" ] || fail "lightning.md: --fast-dev-run left checkpoints: $(ls "$L/runs/smoke/checkpoints")"
grep -qx '0' lightning.out || fail "lightning.md: 'ls runs/smoke/checkpoints | wc -l' did not print 0"
has lightning.out "best checkpoint: none (--fast-dev-run makes no checkpoint decision)" "the --fast-dev-run summary"
# what the page said and was not true
not_in_doc lightning 'is planned|being added' "--precision and the schedule options exist"
not_in_doc lightning 'count from 1|counted from 1' "epochs count from 0 everywhere"
not_in_doc lightning 'the only mode' "--precision exists"

# ---------------------------------------------------------------- distributed.md
run_page distributed 2
Dd="$HOME/mpiddp-dist"
# decisions.log: the page's quoted lines are the real ones (values aside) and both have the program's format
real=$(sed -E 's/=[^;]*;/=V;/' "$Dd/runs/vote/checkpoints/decisions.log")
quoted=$(grep -E '^    epoch [0-9]+ step [0-9]+: ' "$SRC/docs/distributed.md" | sed -E 's/^    //; s/=[^;]*;/=V;/')
[ "$real" = "$quoted" ] || fail "distributed.md quotes a decisions.log of
$quoted
but the run wrote
$real"
bad=$(grep -Ev "$DECISION_RE" "$Dd/runs/vote/checkpoints/decisions.log" || true)
[ -z "$bad" ] || fail "decisions.log lines out of format: $bad"
for line in "epoch 0 step 59: val/loss=0.473969; policy reduced: save" \
            "epoch 2 step 177: val/loss=0.0194398; policy all: no save (improved on ranks 0; not on ranks 1) - ranks disagree"; do
  printf '%s\n' "$line" | qgrep -E "$DECISION_RE" || fail "distributed.md's example '$line' is not the program's format"
  has "$SRC/docs/distributed.md" "$line" "the test's copy of distributed.md's examples"
done
# the stop and the resume on 1 rank with --accumulate 2: the messages the page quotes, the end at step 177
has distributed.out "mpiddp train: stopped on request at step 131 (epoch 2, batch 13 of 59); last.h5 saved, continue with --resume auto" "distributed.md's stop message"
has distributed.out "mpiddp train: stopped at epoch 2 (of 3) step 13/59 (global 131)" "the stopped run's summary"
has distributed.err "mpiddp train: resuming from runs/dist/checkpoints/last.h5 at epoch 2 (0-based), optimizer step 13 of the epoch, step 131" "distributed.md's resume notice"
has "$SRC/docs/distributed.md" "    mpiddp train: resuming from runs/dist/checkpoints/last.h5 at epoch 2 (0-based), optimizer step 13 of the epoch, step 131" "the page's resume notice"
has distributed.out "mpiddp train: finished at epoch 2 (of 3) step 59/59 (global 177)" "the resumed run's end"
"$PY" "$SRC/tests/py/compare_ckpt.py" "$Dd/runs/dist/checkpoints/last.h5" "$Dd/runs/vote/checkpoints/last.h5" 1e-4 > cmp.txt \
  || fail "distributed.md: the run resumed on 1 rank with --accumulate 2 is not the uninterrupted run: $(cat cmp.txt)"
not_in_doc distributed 'counted from 1|count from 1' "epochs count from 0"
not_in_doc distributed 'epoch 3 step 750|micro-batch B|stored in micro-batches\.|moves the position' "the stale example and position text"
grep -q 'CUDA_VISIBLE_DEVICES=2,3 mpirun' "$SRC/docs/distributed.md" && grep -q -- '-x CUDA_VISIBLE_DEVICES' "$SRC/docs/distributed.md" \
  && grep -q 'srun --mpi=pmix .*--gpus-per-node' "$SRC/docs/distributed.md" || fail "distributed.md: using some of a node's GPUs is not documented"

# ---------------------------------------------------------------- faults.md
run_page faults 7
F="$HOME/mpiddp-faults"
codes=$(grep -o '^exit code [0-9]*' faults.out | cut -d' ' -f3 | tr '\n' ' ')
[ "$codes" = "1 1 2 2 1 1 2 1 1 1 " ] || fail "faults.md: exit codes '$codes', the page says '1 1 2 2 1 1 2 1 1 1 '"
has faults.err "mpiddp train: error: data/nope: dataset directory: No such file or directory" "faults.md, missing directory"
has faults.err "mpiddp inspect: error: data/cut/shard-00001.h5: not an HDF5 file (or truncated)" "faults.md, truncated shard"
# `ls runs` after the failed train printed only ok: the failed run wrote nothing
[ "$(awk '/^exit code/ {n++; next} n == 2 {print; exit}' faults.out)" = ok ] && [ ! -e "$F/runs/bad" ] \
  || fail "faults.md: the failed train wrote a run directory: $(cat faults.out)"
[ "$(grep -c "^mpiddp train: --sampling 'both': expected one of global|shard$" faults.err)" = 1 ] || fail "faults.md: the --sampling line, once"
[ "$(grep -c "^mpiddp train: run.ini:2: unknown key 'warp'$" faults.err)" = 1 ] || fail "faults.md: the config line, once"
has faults.err "mpiddp train: error: runs/ok/checkpoints/last.h5: global batch 64 differs from this run's 32 (batch-size x ranks x accumulate)" "faults.md, resume with another global batch"
grep -Eq "^mpiddp eval: error: broken.h5: dataset '/optim/exp_avg/l2.weight': checksum mismatch \(stored crc32 [0-9a-f]+, data [0-9a-f]+\): the file is corrupt$" faults.err \
  || fail "faults.md, corrupt checkpoint: $(grep 'mpiddp eval' faults.err)"
has faults.err "mpiddp train: error: runs/ok holds a run (run.json): continue it with --resume auto, start afresh with a new --out, or pass --overwrite to remove that run's files first" "faults.md, a finished run's directory"
nan="data/nan/shard-00000.h5: dataset 'features'[row 140, column 5]: nan, in sample 8 of the shard (offsets[8], id 8)"
[ "$(grep -cF "$nan" faults.err)" = 3 ] || fail "faults.md: inspect, --check-finite and the gradient error should each name '$nan': $(grep -F 'nan' faults.err)"
grep -Eq "^mpiddp train: error: non-finite gradient at step [0-9]+ in parameter 'l1.weight', from the data: data/nan/shard-00000.h5: dataset 'features'\[row 140, column 5\]: nan, " faults.err \
  || fail "faults.md, the gradient error: $(grep 'non-finite gradient' faults.err)"
[ ! -e "$F/runs/nan" ] || fail "faults.md: --check-finite left a run directory"
# every message the page quotes in backquotes after "prints" is the program's (the check above, by hand)

# ---------------------------------------------------------------- README and --help
"$MPIDDP" --help > help.txt
grep -q -- '--version' help.txt || fail "mpiddp --help does not mention --version: $(cat help.txt)"
"$MPIDDP" --version | qgrep -E '^mpiddp [0-9]+\.[0-9]+' || fail "mpiddp --version: $("$MPIDDP" --version)"
# the options the README's eval and pack synopses lacked (#34), each one that --help lists
for co in eval:--batch-size eval:--batch-rows eval:--device eval:--precision eval:--out pack:--shards pack:--classes; do
  cmd=${co%%:*} o=${co#*:}
  row=$(grep -F "| \`mpiddp $cmd" "$SRC/README.md" | head -1)
  "$MPIDDP" $cmd --help | qgrep -- "^  $o " || fail "mpiddp $cmd --help has no $o"
  case $row in *"[$o "* | *"| $o "*) ;; *) fail "README's synopsis of mpiddp $cmd lacks $o: $row" ;; esac
done
grep -F '| `mpiddp pack' "$SRC/README.md" | qgrep -- '--classes' || fail "README: pack --classes"
pass "lightning.md, distributed.md and faults.md run as written; README's eval and pack synopses; --help names --version"

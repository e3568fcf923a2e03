# The command line as docs/cli.md states it (issue: a newcomer's first day): usage and range errors, option
# conflicts and errors found by combining options exit 2 with one line from rank 0 and no MPI_Abort, at np 1
# and 2, and leave no run directory; epochs are 0-based everywhere (progress, validation lines, resume notice,
# metrics.csv, file names); a resume with nothing left to train says so and exits 0; eval's conflicting batch
# options; help texts.
. "$(dirname "$0")/lib.sh"
synth --out train --samples 64 --dim 4 --classes 2 --min-rows 1 --max-rows 9 --shards 2 --seed 1
synth --out val --samples 20 --dim 4 --classes 2 --min-rows 1 --max-rows 9 --shards 1 --seed 1 --first-id 100
common=(--train train --val val --hidden 8 --device "$DEVICE")
one_line() { # $1: expected text; checks ERR has it exactly once, from rank 0, without MPI_Abort
  [ "$(grep -cF -- "$1" <<<"$ERR")" = 1 ] || fail "expected one line '$1': $ERR"
  ! grep -q "MPI_ABORT\|rank [0-9]*: error" <<<"$ERR" || fail "not a clean usage error: $ERR"
}
for np in 1 2; do
  expect_rc 2 mpirun_np $np "$MPIDDP" synth --out s1 --samples 3 --shards 4
  one_line "mpiddp synth: --shards 4: must be in [1, samples=3]"
  expect_rc 2 mpirun_np $np "$MPIDDP" synth --out s2 --min-rows 10 --max-rows 5
  one_line "mpiddp synth: --min-rows 10 --max-rows 5: need 1 <= min <= max"
  [ ! -e s1 ] && [ ! -e s2 ] || fail "a refused synth wrote a directory"
  ncase=0
  while IFS='|' read -r -u 3 args msg; do # fd 3: mpirun reads (and would eat) standard input
    read -r -a extra <<<"$args"
    expect_rc 2 mpirun_np $np "$MPIDDP" train "${common[@]}" --out bad "${extra[@]}"
    one_line "$msg"
    [ ! -e bad ] || fail "'$args' left a run directory"
    ncase=$((ncase + 1))
  done 3<<'CASES'
--model transformer --hidden 64 --heads 3|mpiddp train: transformer: --heads 3 must divide --hidden 64
--batch-rows 48 --sampling shard|--batch-rows needs --sampling global
--shuffle block --sampling shard|--shuffle block needs --sampling global
--batch-size 16 --batch-rows 300|--batch-size and --batch-rows: give one
--monitor train/loss|--monitor train/loss: must be one of val/loss, val/acc, val/macro_f1
--monitor val/los|--monitor val/los: must be one of
--resume --epochs 3|mpiddp train: --resume needs a value
--lr-schedule cosine --lr 0.001 --min-lr 0.01|--min-lr 0.01 is above --lr 0.001
--warmup-steps 1.5|--warmup-steps 1.5: a step count (an integer >= 1) or a fraction in (0, 1)
--seed 9300000000000000000|mpiddp train: --seed 9300000000000000000: must be in [0, 9200000000000000000]
CASES
  [ "$ncase" = 10 ] || fail "np $np: ran $ncase of the 10 cases"
  # a required option forgotten: the line names which one (it once listed all of them, given or not)
  expect_rc 2 mpirun_np $np "$MPIDDP" train "${common[@]}"
  one_line "mpiddp train: missing --out RUNDIR (--train, --val and --out are required; see mpiddp train --help)"
  expect_rc 2 mpirun_np $np "$MPIDDP" train --train train --out bad
  one_line "mpiddp train: missing --val DIR (--train, --val and --out are required; see mpiddp train --help)"
  [ ! -e bad ] || fail "a train without --val left a run directory"
  expect_rc 2 mpirun_np $np "$MPIDDP" eval --ckpt x.h5
  one_line "mpiddp eval: missing --data DIR (--ckpt and --data are required; see mpiddp eval --help)"
  expect_rc 2 mpirun_np $np "$MPIDDP" pack --out p
  one_line "mpiddp pack: missing --input FILE.h5 (--input and --out are required; see mpiddp pack --help)"
  expect_rc 2 mpirun_np $np "$MPIDDP" synth --samples 8
  one_line "mpiddp synth: missing --out DIR (--out is required; see mpiddp synth --help)"
  # a budget below the longest sample: a runtime error naming the longest sample, and still no run directory
  longest=$($PY -c "import h5py, glob, numpy as np; print(max(int(np.diff(h5py.File(p)['offsets'][()]).max()) for p in glob.glob('train/*.h5') + glob.glob('val/*.h5')))")
  expect_rc 1 mpirun_np $np "$MPIDDP" train "${common[@]}" --out bad --batch-rows 2
  grep -q "has $longest rows, more than --batch-rows 2" <<<"$ERR" || fail "the budget error does not name the longest sample ($longest rows): $ERR"
  [ ! -e bad ] || fail "--batch-rows below the longest sample left a run directory"
done
# epochs are 0-based on every line and in every file
mpirun_np 2 "$MPIDDP" train "${common[@]}" --epochs 2 --batch-size 8 --log-every 100 --out r >out.txt 2>err.txt
grep -q "^epoch 0 (of 2) step" err.txt && grep -q "^epoch 1 (of 2) step" err.txt || fail "progress lines: $(cat err.txt)"
grep -q "^epoch 0: val/loss=" err.txt && grep -q "^epoch 1: val/loss=" err.txt && ! grep -q "^epoch 2" err.txt || fail "validation lines: $(cat err.txt)"
[ "$(cut -d, -f1 r/metrics.csv | sort -u | grep -v epoch | tr '\n' ' ')" = "0 1 " ] || fail "metrics.csv epochs"
ls r/checkpoints | qgrep "^epoch=[01]-" || fail "checkpoint names: $(ls r/checkpoints)"
mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --fast-dev-run 3 --log-every 1 --out fdr 2>err.txt >/dev/null
grep -q "^epoch 0 (of 1) step" err.txt && ! grep -q "of 3" err.txt || fail "fast-dev-run progress: $(cat err.txt)"
# nothing left to train: one clear line and exit 0, whether --epochs equals or is below what is done
for e in 2 1; do
  expect_rc 0 mpirun_np 2 "$MPIDDP" train "${common[@]}" --epochs $e --batch-size 8 --out r --resume auto
  grep -q "nothing to do: r/checkpoints/last.h5 has finished 2 epoch(s)" <<<"$ERR" || fail "--epochs $e on a finished run: $ERR"
done
expect_rc 0 mpirun_np 2 "$MPIDDP" train "${common[@]}" --epochs 3 --batch-size 8 --out r --resume auto --log-every 100
grep -q "resuming from r/checkpoints/last.h5 at epoch 2 (0-based)" <<<"$ERR" && grep -q "^epoch 2: val/loss" <<<"$ERR" || fail "resume notice: $ERR"
# eval refuses the pair train refuses (--batch-rows once won silently)
for np in 1 2; do
  expect_rc 2 mpirun_np $np "$MPIDDP" eval --ckpt r/checkpoints/last.h5 --data val --batch-size 4 --batch-rows 64 --device "$DEVICE"
  one_line "mpiddp eval: --batch-size and --batch-rows: give one"
done
# help texts and the environment report (captured first: grep -q would end the pipe early under pipefail)
h=$("$MPIDDP" eval --help); head -1 <<<"$h" | qgrep -- "--batch-rows N" || fail "eval usage line: $h"
h=$("$MPIDDP" train --help); grep -q -- "--sampling.*(default)" <<<"$h" || fail "train --sampling default"
h=$("$MPIDDP" pack --help); grep -q "must hold no \*.h5" <<<"$h" || fail "pack --out"
h=$("$MPIDDP" env); ! grep -q 'driver 0\.0' <<<"$h" || fail "env reports a driver 0.0 where there is none: $h"
# slurm-script never writes a train command that train refuses: no --resume auto beside --overwrite (given or in the
# --config file), none beside a --config resume; values sbatch would split are quoted, ones it cannot hold refused;
# srun gets the job's --cpus-per-task (Slurm >= 22.05 does not pass it on)
printf 'overwrite = true\n' > ow.ini && printf 'resume = r/checkpoints/last.h5\n' > rs.ini
for args in "--overwrite" "--config ow.ini" "--config=rs.ini" "--config ow.ini --overwrite=true"; do
  read -r -a extra <<<"$args"
  expect_rc 0 "$MPIDDP" slurm-script -- --train t --val v --out r "${extra[@]}"
  [[ $(grep '^srun' <<<"$OUT") != *"--resume auto"* ]] || fail "slurm-script $args: $(grep '^srun' <<<"$OUT")"
done
expect_rc 0 "$MPIDDP" slurm-script -- --train t --val v --out r --config ow.ini --overwrite=false
grep -q -- "^srun .* --overwrite=false --resume auto$" <<<"$OUT" || fail "slurm-script --overwrite=false: $(grep srun <<<"$OUT")"
# both on the command line are refused (one on the command line beside the other in the file is no conflict: the
# command line's wins, as in train; tests/sh/cli_config.sh)
expect_rc 2 "$MPIDDP" slurm-script -- --train t --val v --out r --config ow.ini --resume auto --overwrite
one_line "mpiddp train: --resume and --overwrite: give one"
expect_rc 0 "$MPIDDP" slurm-script --job-name 'my job' --output 'logs dir/%j.out' -- --train t --val v --out r
grep -qx '#SBATCH --job-name="my job"' <<<"$OUT" && grep -qx '#SBATCH --output="logs dir/%j.out"' <<<"$OUT" ||
  fail "slurm-script quoting: $OUT"
grep -qx '\[ -z "${SLURM_CPUS_PER_TASK:-}" \] || export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK' <<<"$OUT" ||
  fail "slurm-script: no SRUN_CPUS_PER_TASK: $OUT"
for v in 'a"b' $'a\nb'; do
  expect_rc 2 "$MPIDDP" slurm-script --job-name "$v" -- --train t --val v --out r
  one_line "mpiddp slurm-script: --job-name: a value with a newline or a double quote cannot be an #SBATCH line"
  [ -z "$OUT" ] || fail "a refused slurm-script printed: $OUT"
done
# the train arguments pass train's own checks (for the job's world size) before a script is printed: a typo is said
# now, not after the job's wait in the queue; so is a --time the 90 s warning would cut at the job's first step
for args in "--epoch 3|unknown option '--epoch' (see mpiddp train --help)" \
            "--batch-size 8 --batch-rows 64|--batch-size and --batch-rows: give one" \
            "--model transformer --hidden 30 --heads 4|transformer: --heads 4 must divide --hidden 30" \
            "--batch-size 3000000 --accumulate 3|--batch-size 3000000 x 2 ranks x --accumulate 3: more than 2^24"; do
  read -r -a extra <<<"${args%%|*}"
  expect_rc 2 "$MPIDDP" slurm-script --nodes 2 -- --train t --val v --out r "${extra[@]}"
  one_line "mpiddp train: ${args#*|}"
  [ -z "$OUT" ] || fail "slurm-script printed a script for train arguments train refuses: $OUT"
done
expect_rc 2 "$MPIDDP" slurm-script -- --train t --val v
one_line "mpiddp train: missing --out RUNDIR (--train, --val and --out are required"
expect_rc 0 "$MPIDDP" slurm-script -- --train t --val v --out r --help
head -1 <<<"$OUT" | qgrep "^usage: mpiddp train " || fail "slurm-script -- --help: $OUT"
for t in 1 1:30 00:01:30 0-0:1; do
  expect_rc 2 "$MPIDDP" slurm-script --time "$t" -- --train t --val v --out r
  one_line "mpiddp slurm-script: --time $t: the time-limit warning comes 90 s before the limit"
  [ -z "$OUT" ] || fail "slurm-script --time $t printed: $OUT"
done
for t in 2 1:31 0 UNLIMITED 2-12 1-0:30:00; do
  expect_rc 0 "$MPIDDP" slurm-script --time "$t" -- --train t --val v --out r
  qgrep -x -- "#SBATCH --time=$t" <<<"$OUT" || fail "slurm-script --time $t: $OUT"
done
for t in 1h 1:2:3:4 1-2-3 -5 1: 99999999999; do
  expect_rc 2 "$MPIDDP" slurm-script --time "$t" -- --train t --val v --out r
  one_line "mpiddp slurm-script: --time $t: not a Slurm time limit"
done
pass "usage errors exit 2 with one line at np 1 and 2; 0-based epochs; nothing-to-do resume; help texts; slurm-script"

# Stop signals at random moments (issue #31 items 3, 4): SIGTERM or SIGINT to every rank (scancel, a
# terminal's Ctrl-C), SIGUSR1, SIGINT and SIGTERM to mpirun, across training and validation, the MLP and the
# transformer, sample counts and token budgets, oneDNN's JIT GEMMs on and off. Every run must end with the
# documented status (0; mpirun's own 1 after SIGINT/SIGTERM to it, docs/faults.md), a last.h5 saved by the
# stop, a resume that ends bitwise equal to the uninterrupted run, and no heap or sanitizer report. Every
# thread of a rank but the one waiting for them blocks the stop signals.
#   STORM_SIGNALS (default 30), STORM_SEED (default: the time; printed, rerun with it to repeat a sequence)
. "$(dirname "$0")/lib.sh"
N=${STORM_SIGNALS:-30}
SEED=${STORM_SEED:-$(date +%s)}
RANDOM=$SEED
echo "signal storm: $N signals, STORM_SEED=$SEED"
# Open MPI's mpirun answers SIGINT/SIGTERM with SIGCONT, then SIGTERM to the ranks odls_base_sigkill_timeout
# seconds later, then SIGKILL as long again: the documented setting that gives a stopping rank time to save
KILL_AFTER=3
export OMPI_MCA_odls_base_sigkill_timeout=$KILL_AFTER
synth --out t --samples 320 --dim 16 --classes 4 --shards 3 --min-rows 8 --max-rows 40 --seed 5
synth --out v --samples 640 --dim 16 --classes 4 --shards 2 --min-rows 8 --max-rows 40 --seed 5 --first-id 9000
common=(--train t --val v --epochs 3 --lr 0.003 --no-progress --device cpu --log-every 4)
# name | environment | options: the MLP's GEMMs (H 2048) and the transformer's (d 512) are large enough for
# oneDNN's JIT kernels (>= 2^20 multiply-adds) where it is on; validation takes about half of each run
configs=(
  "mlp-onednn|MPIDDP_CPU_ONEDNN=1|--hidden 2048 --batch-size 6"
  "mlp-openblas|MPIDDP_CPU_ONEDNN=0|--hidden 2048 --batch-size 6"
  "tx-budget-onednn|MPIDDP_CPU_ONEDNN=1|--model transformer --hidden 512 --heads 8 --layers 2 --batch-rows 192"
  "tx-samples-openblas|MPIDDP_CPU_ONEDNN=0|--model transformer --hidden 512 --heads 8 --layers 2 --batch-size 4"
)
kinds=(ranks-TERM ranks-INT mpirun-USR1 mpirun-INT mpirun-TERM)
# heap corruption (glibc), sanitizer reports, a rank killed by a signal
BAD='corrupted|malloc\(\)|free\(\)|double free|AddressSanitizer|LeakSanitizer|runtime error|Segmentation|Aborted|signal [0-9]+ \(|core dumped'

# every thread of each rank blocks SIGINT, SIGUSR1, SIGUSR2 and SIGTERM (mask 0x4a02), but one thread waiting for them
check_masks() {
  local p t blk bad=0 waiting
  for p in $(rank_pid 0) $(rank_pid 1); do
    waiting=0
    for t in /proc/$p/task/*; do
      blk=$(awk '/^SigBlk/ {print $2}' "$t/status" 2>/dev/null) || continue
      [ -n "$blk" ] || continue
      if (( (0x$blk & 0x4a02) != 0x4a02 )); then
        if grep -q sigtimedwait "$t/wchan" 2>/dev/null || grep -q sigtimedwait "$t/stack" 2>/dev/null; then waiting=$((waiting + 1))
        else bad=1; echo "rank pid $p thread ${t##*/} ($(cat "$t/comm")): SigBlk $blk" >&2; fi
      fi
    done
    [ $waiting -le 1 ] || bad=1
  done
  [ $bad = 0 ] || fail "a thread other than the signal waiter can take a stop signal"
}

declare -A dur
for c in "${configs[@]}"; do
  IFS='|' read -r name envs opts <<< "$c"
  # shellcheck disable=SC2086
  start=$(date +%s.%N)
  env $envs mpirun -np 2 --oversubscribe "$MPIDDP" train "${common[@]}" $opts --out ref_$name > ref_$name.log 2>&1 || { cat ref_$name.log >&2; fail "reference run $name"; }
  dur[$name]=$(echo "$(date +%s.%N) - $start" | bc)
  ! grep -Eq "$BAD" ref_$name.log || fail "reference run $name: $(grep -E "$BAD" ref_$name.log)"
done
echo "reference runs (s): $(for k in "${!dur[@]}"; do printf '%s=%.1f ' "$k" "${dur[$k]}"; done)"

masks_checked=0
declare -A seen
for i in $(seq 1 "$N"); do
  # every (signal, configuration) pair within 20 signals (5 and 4 are coprime); the moment is random
  c=${configs[$(((i - 1) % ${#configs[@]}))]}
  IFS='|' read -r name envs opts <<< "$c"
  kind=${kinds[$(((i - 1) % ${#kinds[@]}))]}
  run=s$i
  # a moment within 10-80% of the run after its set-up (run.json written); the ranks hear of a signal to
  # mpirun KILL_AFTER seconds late
  span=${dur[$name]}
  case $kind in mpirun-INT | mpirun-TERM) span=$(echo "$span - $KILL_AFTER" | bc) ;; esac
  pct=$((10 + RANDOM % 70)) # drawn here: $RANDOM inside $(...) would be a subshell's
  delay=$(echo "scale=2; d = $span * $pct / 100; if (d < 0.1) d = 0.1; d" | bc)
  # shellcheck disable=SC2086
  env $envs MPIDDP_TEST_STEP_DELAY_MS=5 mpirun -np 2 --oversubscribe "$MPIDDP" train "${common[@]}" $opts --out $run > $run.log 2>&1 &
  job=$!
  wait_for $run/run.json
  if [ $masks_checked -lt 2 ]; then sleep 0.3; check_masks; masks_checked=$((masks_checked + 1)); fi
  sleep "$delay"
  case $kind in
    ranks-*) for r in 0 1; do p=$(rank_pid $r); [ -z "$p" ] || kill -"${kind#ranks-}" "$p" 2>/dev/null || true; done ;;
    mpirun-*) kill -"${kind#mpirun-}" $job 2>/dev/null || true ;;
  esac
  set +e; wait $job; rc=$?; set -e
  want=0
  case $kind in mpirun-INT | mpirun-TERM) want=1 ;; esac
  stopped=$(grep -c "stopped on request" $run.log || true)
  echo "signal $i: $kind to $name after ${delay}s: rc $rc, $( [ "$stopped" -gt 0 ] && grep -o 'stopped on request[^;]*' $run.log | head -1 || echo 'finished before the signal')"
  ! grep -Eq "$BAD" $run.log || { cat $run.log >&2; fail "signal $i ($kind, $name): $(grep -E "$BAD" $run.log | head -3)"; }
  if [ "$stopped" -gt 0 ]; then
    [ "$rc" = "$want" ] || { cat $run.log >&2; fail "signal $i ($kind, $name): exit $rc, documented $want"; }
    seen[$kind]=1
    case $(grep -o 'stopped on request [a-z]*' $run.log | head -1) in *during*) seen[validation]=1 ;; *) seen[training]=1 ;; esac
  else # the run ended before the signal: only a normal end is acceptable
    [ "$rc" = 0 ] || [ "$rc" = "$want" ] || { cat $run.log >&2; fail "signal $i ($kind, $name): exit $rc without a stop"; }
    grep -q "run directory:" $run.log || { cat $run.log >&2; fail "signal $i ($kind, $name): neither stopped nor finished"; }
  fi
  [ -f $run/checkpoints/last.h5 ] || fail "signal $i ($kind, $name): no last.h5"
  [ -z "$(find $run -name '*.tmp*')" ] || [ "$rc" != 0 ] || fail "signal $i: temporary files left: $(find $run -name '*.tmp*')"
  # shellcheck disable=SC2086
  env $envs mpirun -np 2 --oversubscribe "$MPIDDP" train "${common[@]}" $opts --out $run --resume auto > $run.resume.log 2>&1 \
    || { cat $run.resume.log >&2; fail "signal $i ($kind, $name): the resume failed"; }
  ! grep -Eq "$BAD" $run.resume.log || fail "signal $i resume: $(grep -E "$BAD" $run.resume.log | head -3)"
  $PY "$SRC/tests/py/compare_ckpt.py" ref_$name/checkpoints/last.h5 $run/checkpoints/last.h5 0 >/dev/null \
    || fail "signal $i ($kind, $name): stop + resume is not bitwise equal to the uninterrupted run"
  rm -rf $run
done
# the storm must have stopped runs in training and in validation, and through each kind of signal
for k in training validation "${kinds[@]}"; do
  [ -n "${seen[$k]:-}" ] || fail "no run was stopped by/in $k (STORM_SEED=$SEED; raise STORM_SIGNALS?)"
done
pass "$N stop signals: documented exit status, last.h5 saved, bitwise resume, no heap or sanitizer report"

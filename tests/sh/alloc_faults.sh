# Allocation failures on one rank, swept over every allocation site a short run reaches (the way SQLite tests
# malloc failures): a first run lists the sites each rank reaches (MPIDDP_TEST_ALLOC_SITES), then one run per
# site fails that site's first allocation on one rank (MPIDDP_TEST_FAIL_ALLOC, _RANK; host allocations and
# backend/device allocations alike). Every such run must end on every rank within 30 s, non-zero, with one
# error line saying what could not be allocated and how many bytes, and no sanitizer report. The run resumes
# from a checkpoint, trains with per-rank metrics, validates and saves, so set-up, resume, the loaders,
# training, validation and checkpointing are all swept. MPIDDP_TEST_MODEL_ARGS picks the model; the emulator
# registration runs it with --device cuda. A metric row's allocations are its caller's site (ddp_row_set), so the
# validation's own values (val/acc, val/macro_f1, val/count of each rank) are swept too: a failure there was ignored
# (exit 0).
. "$(dirname "$0")/lib.sh"
synth --out train --samples 96 --dim 6 --classes 3 --min-rows 1 --max-rows 9 --shards 2 --seed 3
synth --out val --samples 40 --dim 6 --classes 3 --min-rows 1 --max-rows 9 --shards 2 --seed 4 --first-id 500
sizes=(--batch-size 6) # unless the registration picks token budgets
[[ " ${MODEL_ARGS[*]} " == *" --batch-rows "* ]] && sizes=()
common=(--train train --val val --hidden 8 "${sizes[@]}" --log-every 2 --log-per-rank --no-progress --device "$DEVICE"
        --collective-timeout 20 "${MODEL_ARGS[@]}" "$@")
mpirun_np 2 "$MPIDDP" train "${common[@]}" --epochs 1 --out base >/dev/null
cp -r base listing
MPIDDP_TEST_ALLOC_SITES=$WORK/sites mpirun_np 2 "$MPIDDP" train "${common[@]}" --epochs 2 --out listing --resume auto >/dev/null
# each site on the rank that reaches it (rank 1 where both do: rank 0 alone writes the shared files)
# (a forked child that validates shards on rank 0 lists its sites again: each site once)
{ sed 's/$/ 1/' sites.r1; grep -vxF -f sites.r1 sites.r0 | sed 's/$/ 0/'; } | awk '!seen[$1]++' > plan.txt
n=$(wc -l < plan.txt)
[ "$n" -ge 20 ] || fail "only $n allocation sites reached: the hook is not wired"
bad=0
while read -r site rank; do
  rm -rf run && cp -r base run
  start=$(date +%s)
  set +e
  MPIDDP_TEST_FAIL_ALLOC=$site MPIDDP_TEST_FAIL_ALLOC_RANK=$rank timeout -k 5 30 \
    mpirun -np 2 --oversubscribe "$MPIDDP" train "${common[@]}" --epochs 2 --out run --resume auto </dev/null >out.txt 2>err.txt
  rc=$?
  set -e
  secs=$(( $(date +%s) - start ))
  errs=$(grep -c 'error:' err.txt || true)
  why=""
  if [ $rc = 124 ] || [ $rc = 137 ]; then why="hung (killed after 30 s)"
  elif [ $rc = 0 ]; then why="exit 0 after an allocation failure (ignored?)"
  elif [ "$errs" != 1 ]; then why="$errs error lines"
  elif ! grep 'error:' err.txt | qgrep -E 'bytes|MiB'; then why="the error does not say how much: $(grep 'error:' err.txt)"
  fi
  grep -qE 'AddressSanitizer|runtime error:|LeakSanitizer' err.txt && why="sanitizer report"
  if [ -n "$why" ]; then
    bad=$((bad + 1)); echo "FAIL $site (rank $rank, rc $rc, ${secs}s): $why"; sed 's/^/    /' err.txt | head -5
  else
    echo "ok   $site (rank $rank, rc $rc, ${secs}s): $(grep 'error:' err.txt | head -1 | cut -c1-160)"
  fi
done < plan.txt
[ $bad = 0 ] || fail "$bad of $n allocation sites do not end the job cleanly"
pass "$n allocation sites: each failure ends every rank within 30 s with one line"

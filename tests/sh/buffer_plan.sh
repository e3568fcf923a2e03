# buffer_plan.sh — activation buffers sized to the run's plan (MPIDDP_PLAN_BUFFERS=1, the default on a GPU; here on
# the CPU, or --device cuda on the emulator): at np 1, 2 and 4, with global and shard sampling, --shuffle block and
# token budgets, training over every epoch succeeds with each rank's workspace below batch x longest sample; one row
# fewer (MPIDDP_TEST_PLAN_SLACK=-1) makes every rank fail on the largest batch with the model's one line, so the
# plan is that batch exactly; and the planned run's checkpoint has the bits of the unplanned one.
. "$(dirname "$0")/lib.sh"
synth --out t --samples 300 --dim 6 --classes 3 --min-rows 2 --max-rows 40 --shards 4 --seed 5
synth --out v --samples 70 --dim 6 --classes 3 --min-rows 2 --max-rows 40 --shards 2 --seed 5 --first-id 9000
base=(train --device "$DEVICE" --train t --val v --model transformer --hidden 8 --heads 2 --layers 1 --epochs 3
      --lr 0.01 --no-progress --log-every 1)
rows() { $PY -c "import json, sys; j = json.load(open(sys.argv[1])); print(j['config']['buffer_plan'], *[r['activation_rows'] for r in j['ranks']])" "$1/run.json"; }
n=0
for np in 1 2 4; do
  for v in "--batch-size 8" "--batch-size 6 --sampling shard" "--batch-size 8 --shuffle block --shuffle-block-mb 0.001" \
           "--batch-rows 60"; do
    read -r -a extra <<< "$v"
    n=$((n + 1))
    bound=$([ "${extra[0]}" = --batch-rows ] && echo $((60 + 40)) || echo $((extra[1] * 40)))
    MPIDDP_PLAN_BUFFERS=1 expect_rc 0 mpirun_np $np "$MPIDDP" "${base[@]}" "${extra[@]}" --out "p$n"
    read -r plan r0 rest <<< "$(rows "p$n")"
    [ "$plan" = True ] || fail "np $np $v: run.json's buffer_plan is $plan"
    for r in $r0 $rest; do [ "$r" -gt 0 ] && [ "$r" -lt "$bound" ] || fail "np $np $v: a rank's workspace is $r rows (bound $bound)"; done
    MPIDDP_PLAN_BUFFERS=1 MPIDDP_TEST_PLAN_SLACK=-1 expect_rc 1 mpirun_np $np "$MPIDDP" "${base[@]}" "${extra[@]}" --out "s$n"
    grep -q "exceeds the model's workspace" <<< "$ERR" || fail "np $np $v: one row fewer did not fail on the workspace: $ERR"
    echo "np $np $v: workspace rows per rank: $r0 $rest (bound $bound); one row fewer refused"
  done
done
# unplanned (MPIDDP_PLAN_BUFFERS=0): the bound, and the same bits as the planned run p1 (np 1, --batch-size 8)
MPIDDP_PLAN_BUFFERS=0 expect_rc 0 mpirun_np 1 "$MPIDDP" "${base[@]}" --batch-size 8 --out u1
read -r plan r0 <<< "$(rows u1)"
[ "$plan" = False ] && [ "$r0" = 320 ] || fail "unplanned: buffer_plan $plan, $r0 rows (want False, 320)"
$PY "$SRC/tests/py/compare_ckpt.py" p1/checkpoints/last.h5 u1/checkpoints/last.h5 0 || fail "the planned run's bits differ"
# unplanned, a batch past the set (full-batch training): no micro-batch holds more samples than the set (300, each
# at most 40 rows, shard sampling's padding included) nor, with token budgets, more rows, so the workspace is sized
# no larger; it was --batch-size x the longest sample (--batch-rows 1e12: 256 TB asked for, "out of memory")
for v in "--batch-size 1000000 --sampling shard" "--batch-rows 1000000000000"; do
  read -r -a extra <<< "$v"
  MPIDDP_PLAN_BUFFERS=0 expect_rc 0 mpirun_np 2 "$MPIDDP" "${base[@]}" "${extra[@]}" --out "big$n"
  read -r plan r0 rest <<< "$(rows "big$n")"
  for r in $r0 $rest; do [ "$r" -gt 0 ] && [ "$r" -le 12000 ] || fail "$v: a rank's workspace is $r rows (the set: 300 x 40)"; done
  n=$((n + 1))
done
pass "buffer plan: 12 runs at np 1, 2, 4 under the bound, each exact (one row fewer refused); same bits as unplanned; a batch past the set"

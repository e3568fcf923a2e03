# A training shard truncated while a 2-rank job has it memory-mapped: the rank that next reads a page the
# truncation took away gets SIGBUS. The job must end within seconds with a non-zero status and one line
# naming the shard file and the mapped object it read ("the file changed while mapped"), not a raw crash
# report (io/sigbus.c). Twice: cut to 8 KiB (every map loses pages: offsets, labels or features is named)
# and cut in half (only the features, stored last, lose pages: the read offset is past the new end).
. "$(dirname "$0")/lib.sh"
# truncated_run SIZE OBJECTS: starts a job, truncates its first training shard to SIZE bytes, checks the end
truncated_run() {
  local cut=$1 objs=$2
  rm -rf t v run
  # ~8.5 MiB per shard (4000 samples of ~34 rows x 32 floats in 2 shards), contiguous: mapped, not read by HDF5
  synth --out t --samples 4000 --dim 32 --classes 4 --shards 2 --seed 3
  synth --out v --samples 64 --dim 32 --classes 4 --shards 1 --seed 3 --first-id 100000
  local shard size
  shard=$(ls t/*.h5 | head -1) # as the ranks name it: --train t
  size=$(stat -c %s "$shard")
  [ "$size" -gt 4000000 ] || fail "training shard too small for the test: $size bytes"
  [ "$cut" = half ] && cut=$((size / 2))
  # slow steps (test hook) so that the job is still training when the file shrinks
  MPIDDP_TEST_STEP_DELAY_MS=20 mpirun -np 2 --oversubscribe -x MPIDDP_TEST_STEP_DELAY_MS "$MPIDDP" train --device cpu \
    --train t --val v --out run --epochs 1000 --batch-size 4 --hidden 16 --no-progress > job.out 2> job.err &
  local job=$! ended=0 start took rc
  for _ in $(seq 300); do [ -e run/run.json ] && break; sleep 0.1; done
  [ -e run/run.json ] || { kill "$job" 2>/dev/null; cat job.err >&2; fail "the job did not start training"; }
  sleep 1
  kill -0 "$job" 2>/dev/null || { cat job.err >&2; fail "the job ended before the truncation"; }
  truncate -s "$cut" "$shard"
  start=$(date +%s)
  for _ in $(seq 200); do kill -0 "$job" 2>/dev/null || { ended=1; break; }; sleep 0.1; done
  if [ "$ended" = 0 ]; then
    kill "$job" 2>/dev/null || true
    wait "$job" 2>/dev/null || true
    cat job.err >&2
    fail "the job still ran 20 s after its shard was truncated to $cut bytes"
  fi
  set +e; wait "$job"; rc=$?; set -e
  took=$(( $(date +%s) - start ))
  [ "$rc" != 0 ] || { cat job.err >&2; fail "the job exited 0 after its shard was truncated"; }
  [ "$took" -le 20 ] || fail "the job took $took s to end"
  local line="mpiddp: rank [01]: error: $shard: \\($objs\\): the file changed while mapped (read at byte offset [0-9]*, file is now $cut bytes; was the dataset regenerated or truncated?)"
  grep -q "changed while mapped" job.err || { cat job.err >&2; fail "no 'changed while mapped' line"; }
  grep -qx -- "$line" job.err || { cat job.err >&2; fail "the message does not match: $line"; }
  # the offset read lies past the new end of the file
  local off
  off=$(grep -o "read at byte offset [0-9]*" job.err | head -1 | grep -o "[0-9]*$")
  [ "$off" -ge "$cut" ] || fail "read offset $off is inside the truncated file ($cut bytes)"
  ! grep -Eqi "backtrace|segmentation|bus error|signal: |signal code|\[ *[0-9]+\] .*(\.so|mpiddp)" job.err ||
    { cat job.err >&2; fail "raw crash output"; }
  echo "truncated to $cut bytes: ended in $took s: $(grep "changed while mapped" job.err | head -1)"
}
truncated_run 8192 'features\|offsets\|labels'
truncated_run half 'features'
pass "a shard truncated while mapped ends the job in seconds with one line naming the file"

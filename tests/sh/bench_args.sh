# bench_args.sh — the benchmark programs refuse bad options with one line and exit 2 (on every rank, the line from
# rank 0 only), where they once read before a buffer (bench_io --ahead -5), wrote past one (bench_ckpt --floats
# 2^62: the malloc size wrapped), looped for ever (bench_allreduce -f 1, -b 0) or printed figures measured from the
# machine's boot (bench_train --warmup -2), or passed a --check that checked nothing (bench_kernels --only with no
# such op) or timed the CPU for --device gpu; each refusal within 60 s. --help lists every option a program parses
# (it once said "--help needs a value"). Then the options the scripts use still run.
. "$(dirname "$0")/lib.sh"
B=$BENCH_DIR
for b in bench_io bench_ckpt bench_allreduce bench_train bench_kernels; do
  [ -x "$B/$b" ] || { echo "SKIP: benchmarks not built (MPIDDP_BENCHMARKS=OFF)"; exit 77; }
done
synth --out d --samples 64 --dim 4 --classes 3 --min-rows 1 --max-rows 4 --shards 2 --seed 1
refuse() { # refuse PATTERN CMD...: exit 2 within 60 s, PATTERN on stderr, exactly one such line
  local pat=$1; shift
  expect_rc 2 timeout 60 "$@"
  echo "$ERR" | qgrep -F -- "$pat" || fail "'$*': no '$pat' in: $ERR"
  [ "$(echo "$ERR" | grep -cF -- "$pat")" = 1 ] || fail "'$*': the error printed more than once: $ERR"
}
refuse "bench_io: --ahead -5: expected an integer from 0 to" "$B/bench_io" --data d --ahead -5 --csv io.csv
refuse "bench_io: --samples 0: expected an integer from 1 to" "$B/bench_io" --data d --samples 0
refuse "bench_io: unknown option --sample" "$B/bench_io" --data d --sample 5
refuse "bench_io: --csv needs a value" "$B/bench_io" --data d --csv
refuse "bench_ckpt: --floats 4611686018427387904: expected an integer from 16 to" "$B/bench_ckpt" --floats 4611686018427387904 --dir .
refuse "bench_ckpt: --floats 1e8: expected" "$B/bench_ckpt" --floats 100,1e8 --dir .
refuse "bench_ckpt: --reps 0: expected an integer from 1 to 100" "$B/bench_ckpt" --floats 16 --reps 0
[ -z "$(ls bench_ckpt_* 2>/dev/null)" ] || fail "bench_ckpt wrote before refusing"
for a in "-f 1" "-f 0" "-n 0" "-w -3" "-c 2"; do
  refuse "bench_allreduce: ${a% *} ${a#* }: expected an integer from" mpirun -np 2 --oversubscribe "$B/bench_allreduce" -e 1K $a -o ar.csv
done
for a in "-b 0" "-b -8" "-b 1e30" "-b 5" "-b 2K -e 1K" "-b 8 -e 16G"; do
  refuse "bench_allreduce: -b" mpirun -np 2 --oversubscribe "$B/bench_allreduce" -e 1K $a -o ar.csv
done
refuse "bench_allreduce: -d gpu: expected cpu|cuda" "$B/bench_allreduce" -d gpu
refuse "bench_allreduce: unknown option -x" "$B/bench_allreduce" -x 1
for a in "--warmup -2" "--steps -1" "--layers 4294967297" "--heads 0" "--bucket-mb 0" "--batch-rows -1" "--cold 2"; do
  refuse "bench_train: $a: expected" mpirun -np 2 --oversubscribe "$B/bench_train" --data d $a
done
refuse "bench_train: --model mpl: expected mlp|transformer" "$B/bench_train" --data d --model mpl
refuse "bench_train: --shuffle blocks: expected full|block" "$B/bench_train" --data d --shuffle blocks
refuse "bench_train: --hidden needs a value" "$B/bench_train" --data d --hidden
refuse "bench_kernels: --only nomatch: no op is named so" "$B/bench_kernels" --preset tiny --check --only nomatch --reps 1
refuse "bench_kernels: --config d 9: no configuration" "$B/bench_kernels" --preset tiny --config "d 9" --reps 1
refuse "bench_kernels: --inner 0: expected an integer from 1 to 1000" "$B/bench_kernels" --preset tiny --inner 0
refuse "bench_kernels: --rows 12abc: expected an integer from 1 to" "$B/bench_kernels" --preset tiny --rows 12abc
refuse "bench_kernels: --peak-gflops nan: expected a number above 0" "$B/bench_kernels" --preset tiny --peak-gflops nan
refuse "bench_kernels: --peak-gbs -1: expected a number above 0" "$B/bench_kernels" --preset tiny --peak-gbs -1
[ ! -x "$B/bench_gemm" ] || refuse "bench_gemm: --dims: empty list" "$B/bench_gemm" --dims ""
refuse "bench_kernels: --device gpu: expected cpu|cuda" "$B/bench_kernels" --preset tiny --device gpu
refuse "bench_train: unknown option --batch-size (bench_train --help lists them)" "$B/bench_train" --data d --batch-size 4
refuse "bench_allreduce: --bogus needs a value, or is not an option (bench_allreduce --help lists them)" "$B/bench_allreduce" --bogus
# -h as an option's value is that value, not --help (it printed the usage, exit 0)
refuse "bench_train: unknown option --nope (bench_train --help lists them)" "$B/bench_train" --data -h --nope 1
pass "bad options: one line, exit 2, at once"

# --help (in any option's place): the usage on standard output, exit 0, listing every option the program parses
for b in bench_io bench_allreduce bench_train; do
  expect_rc 0 timeout 60 "$B/$b" --data d --help
  echo "$OUT" | qgrep "^usage: mpirun -np R $b " || fail "$b --help: no usage line: $OUT"
  opts=$(grep -o 'strcmp(a, "-[-a-z]*")' "$SRC/benchmarks/$b.c" | grep -o '"-[^"]*"' | tr -d '"' || true)
  [ "$(echo "$opts" | wc -w)" -ge 5 ] || fail "$b: found only $(echo "$opts" | wc -w) options in its source"
  for o in $opts; do echo "$OUT" | qgrep -F -e "$o " -e "$o]" || fail "$b --help does not list $o: $OUT"; done
done
pass "bench_io, bench_allreduce and bench_train --help list their options"

# what the scripts pass still runs
expect_rc 0 mpirun_np 2 "$B/bench_allreduce" -b 8 -e 1K -f 4 -n 2 -w 1 -o ar.csv
[ "$(grep -c '^allreduce,mpi,2,\(8\|32\|128\|512\),' ar.csv)" = 4 ] || { cat ar.csv; fail "bench_allreduce: not the sizes 8 to 512 by 4"; }
expect_rc 0 "$B/bench_ckpt" --floats 16,32 --reps 1 --dir .
[ "$(echo "$OUT" | grep -c '^| \(16\|32\) | 0 |')" = 6 ] || fail "bench_ckpt: not 3 variants x 2 sizes: $OUT"
expect_rc 0 mpirun_np 2 "$B/bench_io" --data d --samples 10 --ahead 3 --csv io.csv
expect_rc 0 mpirun_np 2 "$B/bench_train" --data d --hidden 8 --batch 4 --steps 2 --warmup 1 --csv tr.csv --shuffle full
# --rows is the tiny preset's too (it once became 64 from 4096 up); the given roofline is the one used
expect_rc 0 "$B/bench_kernels" --preset tiny --rows 5000 --reps 1 --only layernorm --peak-gflops 100 --peak-gbs 20
echo "$OUT" | qgrep "enc d 32 h 4, [4-6][0-9][0-9][0-9] rows" || fail "bench_kernels --preset tiny --rows 5000: $OUT"
echo "$OUT" | qgrep "roofline 100.0 GFLOP/s, 20.0 GB/s (given)" || fail "bench_kernels: the given roofline: $OUT"
pass "bench_allreduce, bench_ckpt, bench_io, bench_train and bench_kernels run with good options"

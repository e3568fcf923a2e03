# The public C API misused as a new user might (tools/capi_misuse.c, which includes only mpiddp.h): NULL pointers,
# bad sizes and config values, some on one rank only, calls before ddp_init. At np 1 and 2 every case ends in time
# with exit 0 on every rank (each check's status and its one-line message held), nothing on stdout, no crash. The
# config refusals and the resume refusals and notices name ddp_train_config's fields (cfg.lr = -0.1), no --option.
. "$(dirname "$0")/lib.sh"
: "${CAPI_MISUSE:?}"
synth --out tr --samples 64 --shards 2 --dim 4 --classes 3
synth --out va --samples 32 --shards 1 --dim 4 --classes 3 --first-id 100000
for np in 1 2; do
  for c in before_init after_finalize context dataset metrics models config train; do
    rm -rf "w_$c" && mkdir "w_$c"
    set +e
    timeout 120 mpirun -np $np --oversubscribe "$CAPI_MISUSE" "$c" tr va "$PWD/w_$c" > out.txt 2> err.txt
    rc=$?
    set -e
    [ $rc = 0 ] || { cat err.txt >&2; fail "case $c at np $np: exit $rc (124: a hang)"; }
    [ ! -s out.txt ] || fail "case $c at np $np printed to stdout: $(head -3 out.txt)"
    ! grep '^FAIL' err.txt || fail "case $c at np $np: a check failed"
    if [ "$c" = train ]; then # a resume's notice names the fields a C-API program set, no CLI option
      qgrep 'was trained with cfg.weight_decay = 0.01; this run continues with cfg.weight_decay = 0.02' err.txt ||
        fail "case train at np $np: no notice naming cfg.weight_decay: $(grep notice err.txt)"
      ! grep -e '^mpiddp train: .*--' err.txt || fail "case train at np $np: a library line names a CLI option"
    fi
  done
done
pass "the C API's misuse cases at np 1 and 2: statuses, one-line messages, no hang, crash or output"

# A synth or pack ended by a signal (SIGTERM, SIGINT, SIGUSR1: what cli_fatal_signals_cleanup handles) leaves no
# partial dataset (docs/dataset-format.md#one-writer-per-directory): while the shards are written (one complete, the
# next in progress: MPIDDP_TEST_SHARD_DELAY_MS holds each shard with its temporary made) no shard it wrote, under its
# final or its temporary name, no lock file, and no --out directory it created (one that was there stays, empty), and
# rerunning the same command succeeds and its dataset validates; while the manifest is written (every shard in place)
# the complete dataset stays, every sample valid, with neither the manifest nor its temporary nor the lock file, and
# `index` writes the manifest. Alone and under mpirun (np 2), with the signal to mpirun or to one rank. Before, the
# shards already complete stayed with the lock file and no manifest: `inspect` called a quarter of the dataset valid,
# and the rerun was refused ("already holds *.h5 shard files").
. "$(dirname "$0")/lib.sh"
# a job control shell: a background job's SIGINT is not ignored (an ignored signal stays ignored in mpiddp)
set -m
$PY "$SRC/tests/py/make_shards.py" pack-input in.h5 # 57 samples
SYNTH=(synth --samples 400 --dim 8 --classes 5 --max-rows 16 --shards 4 --seed 5)
PACK=(pack --input in.h5 --shards 4)
# shard files of DIR, complete or in progress, under final or temporary names
nshards() { find "$1" -maxdepth 1 \( -name 'shard-*.h5' -o -name '.shard-*.h5.tmp.*' \) 2>/dev/null | wc -l; }
# rank_of MPIRUN_PID R: the PID of rank R among mpirun's children
rank_of() {
  local p
  for p in $(pgrep -P "$1"); do
    if grep -qaxz "OMPI_COMM_WORLD_RANK=$2" "/proc/$p/environ" 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
}
# killed SIG NP WHOM PHASE OUT CMD...: `mpiddp CMD --out OUT` (under mpirun -np NP unless NP is 1), signalled SIG
# (WHOM: self at np 1, mpirun, rank0, rank1) once PHASE is reached: shards (NP + 1 shard files: each rank holds one
# temporary at a time, so one is complete) or manifest (the manifest's temporary exists: every shard is complete).
# Then: no shard file, no lock file, OUT gone if this run made it (else still there, empty), and the same command
# run again succeeds with a valid dataset.
killed() {
  local sig=$1 np=$2 whom=$3 phase=$4 out=$5 pid target rc had=0 want
  shift 5
  [ -d "$out" ] && had=1
  local run=("$MPIDDP" "$@" --out "$out")
  [ "$np" = 1 ] || run=(mpirun -np "$np" --oversubscribe "${run[@]}")
  if [ "$phase" = shards ]; then
    MPIDDP_TEST_SHARD_DELAY_MS=1500 "${run[@]}" >killed.out 2>&1 &
  else
    MPIDDP_TEST_MANIFEST_DELAY_MS=60000 "${run[@]}" >killed.out 2>&1 &
  fi
  pid=$!
  for _ in $(seq 600); do
    if [ "$phase" = shards ]; then
      [ "$(nshards "$out")" -gt "$np" ] && break
    else
      compgen -G "$out/mpiddp-manifest.bin.tmp.*" >/dev/null && break
    fi
    sleep 0.05
  done
  case $phase in
    shards) [ "$(nshards "$out")" -gt "$np" ] || fail "$* np $np: no complete shard seen: $(ls -A "$out"; cat killed.out)" ;;
    *) compgen -G "$out/mpiddp-manifest.bin.tmp.*" >/dev/null || fail "$* np $np: no manifest temporary: $(ls -A "$out")" ;;
  esac
  case $whom in
    self | mpirun) target=$pid ;;
    rank*) target=$(rank_of "$pid" "${whom#rank}") ;;
  esac
  [ -n "$target" ] || fail "$* np $np: $whom not found"
  kill -"$sig" "$target"
  set +e; wait "$pid"; rc=$?; set -e
  what="$1 np $np, SIG$sig to $whom while it writes its $phase"
  if [ "$np" = 1 ]; then want=$((128 + $(kill -l "$sig"))); else want=nonzero; fi
  [ "$rc" != 0 ] && { [ "$want" = nonzero ] || [ "$rc" = "$want" ]; } || fail "$what: exit $rc: $(cat killed.out)"
  if [ "$phase" = manifest ]; then # complete: it stays, without the manifest and the lock file
    [ -z "$(ls -A "$out" | grep -v '^shard-.*\.h5$')" ] || fail "$what: more than the shards left: $(ls -A "$out")"
    expect_rc 0 "$MPIDDP" inspect "$out"
    qgrep "^dataset $out: valid" <<<"$OUT" && qgrep "shards 4  samples $N " <<<"$OUT" || fail "$what: the dataset: $OUT"
    expect_rc 0 "$MPIDDP" index "$out"
    [ -f "$out/mpiddp-manifest.bin" ] || fail "$what: index wrote no manifest: $(ls -A "$out")"
    rm -rf "$out"
    [ "$had" = 0 ] || mkdir "$out"
    return 0
  fi
  if [ "$had" = 1 ]; then
    [ -d "$out" ] && [ -z "$(ls -A "$out")" ] || fail "$what: the --out that was there is not left empty: $(ls -A "$out" 2>&1)"
  else
    [ ! -e "$out" ] || fail "$what: left $out: $(ls -A "$out")"
  fi
  expect_rc 0 "${run[@]}"
  expect_rc 0 "$MPIDDP" inspect "$out"
  qgrep "^dataset $out: valid" <<<"$OUT" && qgrep "shards 4  samples $N " <<<"$OUT" || fail "$what: the rerun's dataset: $OUT"
  [ ! -e "$out/mpiddp-dataset.lock" ] || fail "$what: the rerun left its lock file"
  rm -rf "$out"
  [ "$had" = 0 ] || mkdir "$out"
}

N=400
for sig in TERM INT USR1; do killed $sig 1 self shards new "${SYNTH[@]}"; done
mkdir kept
killed TERM 1 self shards kept "${SYNTH[@]}"
killed TERM 1 self manifest new "${SYNTH[@]}"
pass "synth ended by SIGTERM, SIGINT or SIGUSR1 leaves no shard, no lock file, no --out it made (a rerun succeeds), or the complete dataset"

# an --out reached through "..": the directories removed are only those the run made (userdir stays; before, the
# undo stripped new/../userdir/x down to userdir and removed it)
mkdir userdir
MPIDDP_TEST_SHARD_DELAY_MS=1500 "$MPIDDP" "${SYNTH[@]}" --out new/../userdir/x >dots.out 2>&1 &
pid=$!
for _ in $(seq 600); do [ "$(nshards userdir/x)" -gt 1 ] && break; sleep 0.05; done
[ "$(nshards userdir/x)" -gt 1 ] || fail "--out new/../userdir/x: no complete shard seen: $(cat dots.out)"
kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
[ "$rc" = 143 ] && [ -d userdir ] && [ ! -e userdir/x ] ||
  fail "synth --out new/../userdir/x, SIGTERM: exit $rc, userdir (not the run's) $(ls -d userdir 2>&1), x $(ls -A userdir/x 2>&1)"
rm -rf new userdir
# an --out with a trailing slash (as shell completion writes it), two directories made: both go (the undo took the
# empty name after the slash for a directory, removed x/ and stopped, leaving nest)
MPIDDP_TEST_SHARD_DELAY_MS=1500 "$MPIDDP" "${SYNTH[@]}" --out nest/x/ >slash.out 2>&1 &
pid=$!
for _ in $(seq 600); do [ "$(nshards nest/x)" -gt 1 ] && break; sleep 0.05; done
[ "$(nshards nest/x)" -gt 1 ] || fail "--out nest/x/: no complete shard seen: $(cat slash.out)"
kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
[ "$rc" = 143 ] && [ ! -e nest ] || fail "synth --out nest/x/, SIGTERM: exit $rc, left $(find nest 2>&1)"
pass "synth --out through .. or with a trailing slash: the undo removes the directories the run made, only those"

N=57
for sig in TERM INT USR1; do killed $sig 1 self shards new "${PACK[@]}"; done
killed INT 1 self shards kept "${PACK[@]}"
killed TERM 1 self manifest new "${PACK[@]}"
pass "pack ended by SIGTERM, SIGINT or SIGUSR1 leaves no shard, no lock file, no --out it made (a rerun succeeds), or the complete dataset"

N=400
killed TERM 2 rank1 shards new "${SYNTH[@]}"
killed TERM 2 rank0 shards kept "${SYNTH[@]}"
killed TERM 2 mpirun shards new "${SYNTH[@]}"
killed INT 2 mpirun shards kept "${SYNTH[@]}"
killed TERM 2 mpirun manifest new "${SYNTH[@]}"
killed TERM 2 rank1 manifest new "${SYNTH[@]}"
N=57
killed TERM 2 rank1 shards new "${PACK[@]}"
killed TERM 2 mpirun shards kept "${PACK[@]}"
killed TERM 2 mpirun manifest new "${PACK[@]}"
pass "synth and pack under mpirun -np 2, with the signal to mpirun or to one rank, leave no partial dataset"

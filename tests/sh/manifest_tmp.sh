# The manifest's temporary (DIR/mpiddp-manifest.bin.tmp.HOST.pidns-NS.PID) does not stay in a dataset directory: `mpiddp
# index` killed by SIGTERM, SIGINT or SIGHUP while the temporary exists removes it before it dies (alone and under
# mpirun); one killed by SIGKILL leaves it, and the next index removes it. A temporary of a live process of this host
# (a concurrent index) stays, as do those of another host (it may be writing over a shared file system: one notice
# line); synth still takes the new names for leftovers in its --out (docs/dataset-format.md#the-manifest). Before,
# the temporary (then .tmp.PID) of a killed index stayed forever. synth killed while it writes a shard removes the
# shard's temporary too. The temporary names the writer's PID namespace (HOST.pidns-NS.PID): a live index in another
# PID namespace of the same host name (a container beside this one, run here with unshare) keeps its temporary;
# before, its PID, dead in this namespace, made the next index remove it.
# SIGUSR1 and SIGUSR2 (a `pkill -USR1 mpiddp` meant for train) do the same for index and synth; before, their default
# action ended the process at once and left the temporary.
. "$(dirname "$0")/lib.sh"
synth --out d --samples 200 --dim 4 --classes 3 --min-rows 1 --max-rows 4 --shards 4 --seed 1 --no-manifest
host=$(printf %s "$(hostname)" | tr -c 'A-Za-z0-9._-' '_')
ns=$(stat -L -c %i /proc/self/ns/pid)
ntmp() { find "$1" -maxdepth 1 -name 'mpiddp-manifest.bin.tmp.*' | wc -l; }
# a job control shell: a background job's SIGINT is not ignored (an ignored signal stays ignored in mpiddp)
set -m
# killed SIG CMD...: CMD in the background with the manifest's rename held back 60 s, signalled once its temporary
# exists; its exit status in $rc
killed() {
  local sig=$1 pid; shift
  MPIDDP_TEST_MANIFEST_DELAY_MS=60000 "$@" >killed.out 2>&1 &
  pid=$!
  for _ in $(seq 300); do [ "$(ntmp d)" = 0 ] || break; sleep 0.1; done
  [ "$(ntmp d)" = 1 ] && ls d/mpiddp-manifest.bin.tmp."$host".pidns-"$ns".* >/dev/null ||
    fail "no temporary named with host $host and PID namespace $ns: $(ls d)"
  kill -"$sig" "$pid"
  set +e; wait "$pid"; rc=$?; set -e
}

for sig in TERM INT HUP USR1 USR2; do
  killed $sig "$MPIDDP" index d
  [ "$rc" = $((128 + $(kill -l $sig))) ] || fail "SIG$sig: index exited $rc: $(cat killed.out)"
  [ "$(ntmp d)" = 0 ] || fail "SIG$sig: the temporary stayed: $(ls d)"
  [ ! -e d/mpiddp-manifest.bin ] || fail "SIG$sig: a manifest was written"
done
pass "index killed by SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2 removes its temporary"

killed TERM mpirun -np 2 --oversubscribe "$MPIDDP" index d
[ "$rc" != 0 ] || fail "mpirun index survived SIGTERM"
[ "$(ntmp d)" = 0 ] || fail "mpirun, SIGTERM: the temporary stayed: $(ls d)"
pass "index under mpirun killed by SIGTERM removes its temporary"

killed KILL "$MPIDDP" index d
[ "$(ntmp d)" = 1 ] || fail "SIGKILL: expected the temporary left behind: $(ls d)"
expect_rc 0 "$MPIDDP" index d
[ "$(ntmp d)" = 0 ] && [ -f d/mpiddp-manifest.bin ] || fail "the next index kept a dead writer's temporary: $(ls d)"
[ -z "$ERR" ] || fail "stale temporary of this host: $ERR"
pass "the next index removes a SIGKILLed index's temporary"

# a live writer's temporary on this host and PID namespace (a sleeping process's PID), a dead one's (also without a
# namespace, as an mpiddp without /proc or an older one names it), one of another PID namespace, another host's and an
# older mpiddp's (no host): only the dead ones of this host and namespace go
sleep 300 &
live=$!
true &
dead=$!
wait "$dead"
for f in "$host.pidns-$ns.$live" "$host.pidns-$ns.$dead" "$host.$dead" "$host.pidns-1.$dead" \
  other-node.example.1234 4321; do echo x >"d/mpiddp-manifest.bin.tmp.$f"; done
expect_rc 0 mpirun_np 2 "$MPIDDP" index d
kill "$live"
[ -e "d/mpiddp-manifest.bin.tmp.$host.pidns-$ns.$live" ] || fail "a live writer's temporary was removed"
[ ! -e "d/mpiddp-manifest.bin.tmp.$host.pidns-$ns.$dead" ] && [ ! -e "d/mpiddp-manifest.bin.tmp.$host.$dead" ] ||
  fail "a dead writer's temporary was kept: $(ls d)"
[ -e "d/mpiddp-manifest.bin.tmp.$host.pidns-1.$dead" ] || fail "another PID namespace's temporary was removed"
[ -e d/mpiddp-manifest.bin.tmp.other-node.example.1234 ] && [ -e d/mpiddp-manifest.bin.tmp.4321 ] ||
  fail "another host's temporary was removed: $(ls d)"
[ "$(grep -c . <<<"$ERR")" = 1 ] &&
  qgrep "^mpiddp index: notice: 3 manifest temporary file(s) of another host or PID namespace kept (d/mpiddp-manifest.bin.tmp.[^ ]*): an index there may be writing; remove them once none runs$" <<<"$ERR" ||
  fail "other hosts' temporaries: $ERR"
pass "a live writer's and other hosts' and PID namespaces' temporaries stay, a dead writer's goes"

# a live index in another PID namespace (unshare: as a container of the same host name on a shared file system), its
# PID one that no process of this namespace has: the index here keeps its temporary and names it in the notice
if unshare --pid --fork --mount-proc true 2>/dev/null; then
  rm -f d/mpiddp-manifest.bin.tmp.*
  n=5000
  while kill -0 "$n" 2>/dev/null; do n=$((n + 1)); done
  # sh is PID 1 there; the index it starts takes PID n (ns_last_pid, writable by root in its own namespace)
  MPIDDP_TEST_MANIFEST_DELAY_MS=60000 unshare --pid --fork --mount-proc sh -c \
    'echo $(($1 - 1)) >/proc/sys/kernel/ns_last_pid && "$0" index d' "$MPIDDP" "$n" >ns.out 2>&1 &
  upid=$!
  for _ in $(seq 300); do [ "$(ntmp d)" = 0 ] || break; sleep 0.1; done
  theirs=$(find d -maxdepth 1 -name 'mpiddp-manifest.bin.tmp.*')
  case "$theirs" in
    "d/mpiddp-manifest.bin.tmp.$host.pidns-$ns."*) fail "the other namespace's index named this one's: $theirs" ;;
    "d/mpiddp-manifest.bin.tmp.$host.pidns-"*".$n") ;;
    *) fail "no temporary of the index in the other PID namespace, PID $n: '$theirs' $(cat ns.out)" ;;
  esac
  ! kill -0 "$n" 2>/dev/null || fail "PID $n is taken here now"
  expect_rc 0 "$MPIDDP" index d
  [ -e "$theirs" ] || fail "the temporary of a live index in another PID namespace was removed"
  qgrep -F "notice: 1 manifest temporary file(s) of another host or PID namespace kept ($theirs)" <<<"$ERR" ||
    fail "another PID namespace's temporary: $ERR"
  # the index there (unshare -> sh -> index; unshare ignores SIGTERM while it waits), by its PID here
  ipid=$(pgrep -P "$(pgrep -P "$upid")")
  [ -n "$ipid" ] || fail "the index in the other PID namespace is gone: $(cat ns.out)"
  kill -TERM "$ipid"
  set +e; wait "$upid"; set -e
  [ ! -e "$theirs" ] || fail "the other namespace's index, stopped, left its temporary"
  pass "a live index's temporary in another PID namespace of this host stays"
else
  echo "NOTE: unshare --pid unusable here (not root?): the PID namespace case is not run"
fi

# --manifest FILE: the temporaries beside FILE
mkdir -p elsewhere && echo x >"elsewhere/m.bin.tmp.$host.$dead" && echo x >"elsewhere/other.bin.tmp.$host.$dead"
expect_rc 0 "$MPIDDP" index d --manifest elsewhere/m.bin
[ ! -e "elsewhere/m.bin.tmp.$host.$dead" ] && [ -e "elsewhere/other.bin.tmp.$host.$dead" ] ||
  fail "--manifest: $(ls elsewhere)"
pass "index --manifest FILE removes FILE's dead temporaries only"

# synth into a directory without shards removes every writer temporary it finds, the host-named ones included
mkdir -p s && echo x >"s/mpiddp-manifest.bin.tmp.$host.$live" && echo x >s/mpiddp-manifest.bin.tmp.99
synth --out s --samples 40 --dim 4 --classes 3 --shards 1 --seed 2 --no-manifest
[ "$(ntmp s)" = 0 ] || fail "synth kept a temporary in its --out: $(ls s)"
pass "synth removes manifest temporaries from its --out"

# synth (and pack: the same writer) killed while it writes a shard removes that shard's temporary
# (OUT/.shard-N.h5.tmp.PID): 8000 samples of up to 64 x 64 floats per shard take long enough to be signalled while
# the temporary exists. Before, it stayed until the next synth into that directory.
shtmp() { if [ -d "$1" ]; then find "$1" -maxdepth 1 -name '.shard-*.h5.tmp.*' | wc -l; else echo 0; fi; }
for launch in single mpirun; do
  for _ in 1 2 3; do
    rm -rf big
    if [ $launch = single ]; then
      "$MPIDDP" synth --out big --samples 8000 --dim 64 --shards 2 --no-manifest >killed.out 2>&1 &
    else
      mpirun -np 2 --oversubscribe "$MPIDDP" synth --out big --samples 16000 --dim 64 --shards 4 --no-manifest \
        >killed.out 2>&1 &
    fi
    pid=$!
    for _ in $(seq 3000); do [ "$(shtmp big)" = 0 ] || break; sleep 0.005; done
    [ "$(shtmp big)" != 0 ] || fail "$launch synth: no shard temporary seen: $(ls -a big; cat killed.out)"
    # under mpirun the ranks themselves, as scancel signals every task: mpirun, signalled, passes SIGTERM on and
    # SIGKILL odls_base_sigkill_timeout (1 s) later, which a rank in the fsync of its shard may not outlast
    if [ $launch = single ]; then kill -TERM "$pid"; else kill -TERM $(pgrep -P "$pid"); fi
    set +e; wait "$pid"; rc=$?; set -e
    [ "$rc" != 0 ] || fail "$launch synth survived SIGTERM"
    [ "$(shtmp big)" = 0 ] || fail "$launch synth, SIGTERM: a shard temporary stayed: $(ls -a big)"
  done
done
# SIGUSR1 and SIGUSR2 (`pkill -USR1 mpiddp`, meant for train's ranks, reaches a synth too) end it the same way, by the
# signal. Before, their default action ended it at once and left the shard's temporary.
for sig in USR1 USR2; do
  rm -rf big
  "$MPIDDP" synth --out big --samples 8000 --dim 64 --shards 2 --no-manifest >killed.out 2>&1 &
  pid=$!
  for _ in $(seq 3000); do [ "$(shtmp big)" = 0 ] || break; sleep 0.005; done
  [ "$(shtmp big)" != 0 ] || fail "synth: no shard temporary seen: $(ls -a big; cat killed.out)"
  kill -$sig "$pid"
  set +e; wait "$pid"; rc=$?; set -e
  [ "$rc" = $((128 + $(kill -l $sig))) ] || fail "synth, SIG$sig: exit $rc: $(cat killed.out)"
  [ "$(shtmp big)" = 0 ] || fail "synth, SIG$sig: a shard temporary stayed: $(ls -a big)"
done
rm -rf big
pass "synth killed by SIGTERM, SIGUSR1 or SIGUSR2 while writing a shard removes the shard's temporary (alone and under mpirun)"

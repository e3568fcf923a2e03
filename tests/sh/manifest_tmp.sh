# The manifest's temporary (DIR/mpiddp-manifest.bin.tmp.HOST.PID) does not stay in a dataset directory: `mpiddp
# index` killed by SIGTERM, SIGINT or SIGHUP while the temporary exists removes it before it dies (alone and under
# mpirun); one killed by SIGKILL leaves it, and the next index removes it. A temporary of a live process of this host
# (a concurrent index) stays, as do those of another host (it may be writing over a shared file system: one notice
# line); synth still takes the new names for leftovers in its --out (docs/dataset-format.md#the-manifest). Before,
# the temporary (then .tmp.PID) of a killed index stayed forever. synth killed while it writes a shard removes the
# shard's temporary too.
. "$(dirname "$0")/lib.sh"
synth --out d --samples 200 --dim 4 --classes 3 --min-rows 1 --max-rows 4 --shards 4 --seed 1 --no-manifest
host=$(printf %s "$(hostname)" | tr -c 'A-Za-z0-9._-' '_')
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
  [ "$(ntmp d)" = 1 ] && ls d/mpiddp-manifest.bin.tmp."$host".* >/dev/null || fail "no temporary named with host $host: $(ls d)"
  kill -"$sig" "$pid"
  set +e; wait "$pid"; rc=$?; set -e
}

for sig in TERM INT HUP; do
  killed $sig "$MPIDDP" index d
  [ "$rc" = $((128 + $(kill -l $sig))) ] || fail "SIG$sig: index exited $rc: $(cat killed.out)"
  [ "$(ntmp d)" = 0 ] || fail "SIG$sig: the temporary stayed: $(ls d)"
  [ ! -e d/mpiddp-manifest.bin ] || fail "SIG$sig: a manifest was written"
done
pass "index killed by SIGTERM, SIGINT, SIGHUP removes its temporary"

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

# a live writer's temporary on this host (a sleeping process's PID), a dead one's, another host's and an older
# mpiddp's (no host): only the dead one's goes
sleep 300 &
live=$!
true &
dead=$!
wait "$dead"
for f in "$host.$live" "$host.$dead" other-node.example.1234 4321; do echo x >"d/mpiddp-manifest.bin.tmp.$f"; done
expect_rc 0 mpirun_np 2 "$MPIDDP" index d
kill "$live"
[ -e "d/mpiddp-manifest.bin.tmp.$host.$live" ] || fail "a live writer's temporary was removed"
[ ! -e "d/mpiddp-manifest.bin.tmp.$host.$dead" ] || fail "a dead writer's temporary was kept"
[ -e d/mpiddp-manifest.bin.tmp.other-node.example.1234 ] && [ -e d/mpiddp-manifest.bin.tmp.4321 ] ||
  fail "another host's temporary was removed: $(ls d)"
[ "$(grep -c . <<<"$ERR")" = 1 ] &&
  grep -q "^mpiddp index: notice: 2 manifest temporary file(s) of another host kept (d/mpiddp-manifest.bin.tmp.[^ ]*): an index there may be writing; remove them once none runs$" <<<"$ERR" ||
  fail "other hosts' temporaries: $ERR"
pass "a live writer's and other hosts' temporaries stay, a dead writer's goes"

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
rm -rf big
pass "synth killed by SIGTERM while writing a shard removes the shard's temporary (alone and under mpirun)"

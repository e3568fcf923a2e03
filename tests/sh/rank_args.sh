# Ranks started with different arguments (an MPMD launch line; a --config file that differs between nodes): before,
# the ranks hung in a collective, trained on mixed settings with exit 0, or a usage error of one rank went unsaid.
# Now every rank compares what it parsed right after parsing: one line from rank 0 naming the option, the
# argument or the other rank's usage error, exit 2 on every rank, nothing written. An unknown command under a
# launcher is said once.
. "$(dirname "$0")/lib.sh"
synth --out d --samples 64 --dim 6 --classes 3 --shards 1 --seed 3
A=(train --train d --val d --hidden 8 --no-progress --device cpu --out R)
mpmd() { timeout 60 mpirun --oversubscribe -np 1 "$MPIDDP" "$@"; }
lines() { grep -c "^mpiddp" <<<"$ERR" || true; }
expect_rc 2 mpmd "${A[@]}" --epochs 2 : -np 1 "$MPIDDP" "${A[@]}" --epochs 3
[ "$(lines)" = 1 ] && grep -qx "mpiddp train: the ranks were given different options: --epochs is 2 on rank 0 and 3 on rank 1 (every rank must get the same command line and --config file)" <<<"$ERR" ||
  fail "different --epochs: $ERR"
[ ! -e R ] || fail "different --epochs: R was created"
expect_rc 2 mpmd "${A[@]}" --lr 1e-3 : -np 1 "$MPIDDP" "${A[@]}" --lr 100
grep -q "^mpiddp train: the ranks were given different options: --lr is 0.001 on rank 0 and 100 on rank 1" <<<"$ERR" || fail "different --lr: $ERR"
# a usage error on rank 1 only, then on rank 0 only: the erring rank's line, once
expect_rc 2 mpmd "${A[@]}" --epochs 1 : -np 1 "$MPIDDP" "${A[@]}" --epochs 0
[ "$(lines)" = 1 ] && grep -q "^mpiddp train: --epochs 0: must be in \[1, 1000000\] (rank 1; rank 0 parsed its command line" <<<"$ERR" ||
  fail "usage error on rank 1: $ERR"
expect_rc 2 mpmd "${A[@]}" --epochs 0 : -np 1 "$MPIDDP" "${A[@]}" --epochs 1
[ "$(lines)" = 1 ] && grep -qx "mpiddp train: --epochs 0: must be in \[1, 1000000\]" <<<"$ERR" || fail "usage error on rank 0: $ERR"
# a --config file whose content differs by rank: one path, two working directories stand for two nodes
mkdir -p w0 w1 && printf 'epochs = 2\n' >w0/c.ini && printf 'epochs = 2\nbatch_size = 4\n' >w1/c.ini
B=(train --train "$WORK/d" --val "$WORK/d" --hidden 8 --no-progress --device cpu --out "$WORK/R" --config c.ini)
expect_rc 2 timeout 60 mpirun --oversubscribe -np 1 -wdir w0 "$MPIDDP" "${B[@]}" : -np 1 -wdir w1 "$MPIDDP" "${B[@]}"
grep -q "^mpiddp train: the ranks were given different options: --batch-size is 32 on rank 0 and 4 on rank 1" <<<"$ERR" ||
  fail "different --config contents: $ERR"
expect_rc 2 mpmd inspect d : -np 1 "$MPIDDP" inspect d2
grep -qx "mpiddp inspect: the ranks were given different arguments: argument 1 is 'd' on rank 0 and 'd2' on rank 1" <<<"$ERR" ||
  fail "different positional arguments: $ERR"
expect_rc 2 mpmd "${A[@]}" : -np 1 "$MPIDDP" "${A[@]}" --help
grep -qx "mpiddp train: the ranks were given different arguments: --help on rank 1 only" <<<"$ERR" || fail "--help on one rank: $ERR"
# different commands with the same options (index and inspect) hung; a 64-bit option past 2^53 (a double's
# mantissa) differing; a command whose options are a subset of the other's (env: --device, as train's) was refused
# without a line; an unknown command on rank 1 only was never said
expect_rc 2 mpmd index d : -np 1 "$MPIDDP" inspect d
grep -qx "mpiddp: the ranks were given different commands: 'index' on rank 0 and 'inspect' on rank 1" <<<"$ERR" ||
  fail "different commands: $ERR"
expect_rc 2 mpmd synth --out s --samples 8 --dim 2 --classes 2 --seed 9000000000000000000 : -np 1 "$MPIDDP" synth --out s --samples 8 --dim 2 --classes 2 --seed 9000000000000000001
grep -q "^mpiddp synth: the ranks were given different options: --seed is 9000000000000000000 on rank 0 and 9000000000000000001 on rank 1" <<<"$ERR" ||
  fail "different 64-bit --seed: $ERR"
expect_rc 2 mpmd env : -np 1 "$MPIDDP" "${A[@]}"
[ "$(lines)" = 1 ] && grep -qx "mpiddp: the ranks were given different commands: 'env' on rank 0 and 'train' on rank 1" <<<"$ERR" ||
  fail "env and train: $ERR"
expect_rc 2 mpmd inspect d : -np 1 "$MPIDDP" inspcet d
grep -qx "mpiddp: the ranks were given different commands: 'inspect' on rank 0 and 'inspcet' on rank 1" <<<"$ERR" ||
  fail "unknown command on rank 1: $ERR"
# the same arguments everywhere still run, and an unknown command is said once
expect_rc 0 mpirun_np 2 "$MPIDDP" "${A[@]}" --epochs 1
expect_rc 2 mpirun_np 2 "$MPIDDP" trian
[ "$(grep -c "^mpiddp: unknown command 'trian'" <<<"$ERR")" = 1 ] || fail "unknown command: $ERR"
pass "ranks given different arguments: one line, exit 2 on every rank"

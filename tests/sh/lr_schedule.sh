# Learning-rate schedules (--lr-schedule, --warmup-steps, --min-lr): the lr column of metrics.csv step by
# step against PyTorch's schedulers on a dummy optimizer (LinearLR warmup, then CosineAnnealingLR or LinearLR
# decay, chained by SequentialLR), the same at np 1 x accumulate 2 as at np 2, a warmup given as a fraction,
# and resume mid-warmup and mid-decay bitwise equal to the uninterrupted run.
. "$(dirname "$0")/lib.sh"
synth --out train --samples 160 --dim 6 --classes 3 --min-rows 1 --max-rows 8 --shards 2 --seed 3
synth --out val --samples 40 --dim 6 --classes 3 --min-rows 1 --max-rows 8 --shards 1 --seed 4 --first-id 900
common=(--train train --val val --epochs 3 --hidden 16 --lr 0.01 --log-every 1 --no-progress --device "$DEVICE" "${MODEL_ARGS[@]}")
# 160 samples, 16 per optimizer step: 10 steps per epoch, 30 in the run
mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --lr-schedule cosine --warmup-steps 5 --min-lr 0.001 --out cos2 >/dev/null
mpirun_np 1 "$MPIDDP" train "${common[@]}" --batch-size 8 --accumulate 2 --lr-schedule cosine --warmup-steps 5 --min-lr 0.001 --out cos1 >/dev/null
mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --lr-schedule linear --warmup-steps 0.1 --out lin2 >/dev/null
mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --warmup-steps 4 --out const2 >/dev/null
$PY - <<'PY' || fail "schedules differ from PyTorch's"
import csv, torch
def lrs(run):
    rows = [r for r in csv.DictReader(open(f"{run}/metrics.csv")) if r["lr"]]
    return {int(r["step"]): float(r["lr"]) for r in rows}
def torch_lrs(total, warmup, decay, base=0.01, min_lr=0.0):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base)
    parts, miles = [], []
    if warmup:
        parts.append(torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / warmup, end_factor=1.0, total_iters=warmup - 1))
        miles.append(warmup)
    span = total - warmup
    if decay == "cosine":
        parts.append(torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=span - 1, eta_min=min_lr))
    elif decay == "linear":
        parts.append(torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=min_lr / base, total_iters=span - 1))
    else:
        parts.append(torch.optim.lr_scheduler.ConstantLR(opt, factor=1.0, total_iters=0))
    sch = torch.optim.lr_scheduler.SequentialLR(opt, parts, milestones=miles) if len(parts) > 1 else parts[0]
    out = {}
    for step in range(1, total + 1):   # mpiddp logs the lr that optimizer step `step` used
        out[step] = opt.param_groups[0]["lr"]
        opt.step()
        sch.step()
    return out
import warnings; warnings.filterwarnings("ignore")
cases = [("cos2", 30, 5, "cosine", 0.001), ("cos1", 30, 5, "cosine", 0.001), ("lin2", 30, 3, "linear", 0.0), ("const2", 30, 4, "constant", 0.0)]
for run, total, warmup, decay, min_lr in cases:
    got, want = lrs(run), torch_lrs(total, warmup, decay, min_lr=min_lr)
    assert sorted(got) == sorted(want), (run, sorted(got)[:5], len(got))
    worst = max(abs(got[s] - want[s]) / want[s] if want[s] else abs(got[s]) for s in want)
    print(f"{run}: {len(got)} steps, worst relative difference to PyTorch {worst:.2e}; first {got[1]:.5g}, peak {max(got.values()):.5g}, last {got[total]:.5g}")
    assert worst < 1e-5, (run, worst)
assert lrs("cos1") == lrs("cos2"), "np 1 x accumulate 2 and np 2 log different learning rates"
PY
# resume mid-warmup (stop at step 3 of 5) and mid-decay (step 17): bitwise the uninterrupted run
for stop in 3 17; do
  rm -rf part$stop
  MPIDDP_TEST_STOP_AT_STEP=$stop mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --lr-schedule cosine --warmup-steps 5 --min-lr 0.001 --out part$stop >/dev/null
  mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --lr-schedule cosine --warmup-steps 5 --min-lr 0.001 --out part$stop --resume auto >/dev/null 2>&1
  $PY "$SRC/tests/py/compare_ckpt.py" cos2/checkpoints/last.h5 part$stop/checkpoints/last.h5 0 || fail "resume at step $stop is not bitwise exact"
  [ "$(csv_last part$stop/metrics.csv lr)" = "$(csv_last cos2/metrics.csv lr)" ] || fail "resume at $stop: lr column differs"
done
$PY -c "import h5py; a = h5py.File('cos2/checkpoints/last.h5').attrs; assert a['lr_schedule'] in (b'cosine', 'cosine') and int(a['lr_warmup_steps']) == 5 and int(a['lr_total_steps']) == 30, dict(a)" || fail "schedule attributes"
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${common[@]}" --lr-schedule cosine --min-lr 0.5 --out bad
grep -q -- "--min-lr 0.5 is above --lr 0.01" <<<"$ERR" || fail "min-lr above lr: $ERR"
pass "lr schedules match PyTorch's step by step, at np 1 x2 and np 2; resume mid-warmup and mid-decay bitwise"

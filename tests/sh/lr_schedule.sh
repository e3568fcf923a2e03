# Learning-rate schedules (--lr-schedule, --warmup-steps, --min-lr): the lr column of metrics.csv step by
# step against PyTorch's schedulers on a dummy optimizer (LinearLR warmup, then CosineAnnealingLR or LinearLR
# decay, chained by SequentialLR), the same at np 1 x accumulate 2 as at np 2, a warmup given as a fraction,
# and resume mid-warmup and mid-decay bitwise equal to the uninterrupted run; a resume that asks for another
# horizon (--lr-horizon keep|restart), another --lr, or from a checkpoint without a schedule (notices); a decay of
# one step (issue #34).
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
# #34: extending a finished run. Resuming the finished 3-epoch run with --epochs 5 asks for a horizon of 50 steps
# instead of 30: by default (--lr-horizon keep) the checkpoint's schedule stays, lr holds at --min-lr from step 30 on
# (it used to jump back up to 0.0039), and rank 0 says so in one notice line, old -> new. --lr-horizon restart starts
# warmup and decay again at step 30 over the 20 new steps (PyTorch's schedulers on 20 steps), and a requeue of that
# run with the same options continues the restarted schedule exactly (no notice).
sched=(--batch-size 8 --lr-schedule cosine --warmup-steps 5 --min-lr 0.001)
cp -r cos2 keep5 && cp -r cos2 restart5 && cp -r cos2 requeue5 && cp -r cos2 old5
mpirun_np 2 "$MPIDDP" train "${common[@]}" "${sched[@]}" --epochs 5 --out keep5 --resume auto >/dev/null 2>keep5.err
grep -q "^mpiddp train: notice: keep5/checkpoints/last.h5: learning-rate schedule at step 30: horizon 30 -> 50 steps (--epochs 5, 10 per epoch from epoch 3) not taken: the checkpoint's is kept (--lr-horizon keep; --lr-horizon restart starts warmup and decay again at step 30); lr continues at 0.001 (the new horizon would make it 0.00.*)$" keep5.err ||
  fail "keep: no notice old -> new: $(cat keep5.err)"
[ "$(grep -c notice keep5.err)" = 1 ] || fail "keep: not one notice line: $(cat keep5.err)"
mpirun_np 2 "$MPIDDP" train "${common[@]}" "${sched[@]}" --epochs 5 --lr-horizon restart --out restart5 --resume auto >/dev/null 2>restart5.err
grep -q "^mpiddp train: notice: restart5/checkpoints/last.h5: learning-rate schedule at step 30: horizon 30 -> 50 steps (--epochs 5, 10 per epoch from epoch 3): the schedule starts again at step 30 (warmup 5 steps, then cosine decay to step 50; --lr-horizon restart); lr 0.001 -> 0.002$" restart5.err ||
  fail "restart: no notice: $(cat restart5.err)"
MPIDDP_TEST_STOP_AT_STEP=37 mpirun_np 2 "$MPIDDP" train "${common[@]}" "${sched[@]}" --epochs 5 --lr-horizon restart --out requeue5 --resume auto >/dev/null 2>&1
mpirun_np 2 "$MPIDDP" train "${common[@]}" "${sched[@]}" --epochs 5 --lr-horizon restart --out requeue5 --resume auto >/dev/null 2>requeue5.err
! grep -q "learning-rate" requeue5.err || fail "requeue of a restarted schedule: a notice: $(cat requeue5.err)"
$PY "$SRC/tests/py/compare_ckpt.py" restart5/checkpoints/last.h5 requeue5/checkpoints/last.h5 0 || fail "requeue of a restarted schedule is not bitwise exact"
# a checkpoint of an older mpiddp records no schedule: as before (the horizon follows --epochs), with a notice
$PY -c "
import h5py
with h5py.File('old5/checkpoints/last.h5', 'r+') as f:
    for k in ('lr_schedule', 'lr_warmup_steps', 'lr_start_step', 'lr_total_steps', 'lr', 'min_lr'): del f.attrs[k]"
mpirun_np 2 "$MPIDDP" train "${common[@]}" "${sched[@]}" --epochs 5 --out old5 --resume auto >/dev/null 2>old5.err
grep -q "^mpiddp train: notice: old5/checkpoints/last.h5 records no learning-rate schedule (written by an older mpiddp): this run's applies as given (cosine, --lr 0.01, horizon 50 steps from --epochs 5)$" old5.err ||
  fail "old checkpoint: no notice: $(cat old5.err)"
# another --lr mid-run: one notice, old -> new
rm -rf lr17
MPIDDP_TEST_STOP_AT_STEP=17 mpirun_np 2 "$MPIDDP" train "${common[@]}" "${sched[@]}" --out lr17 >/dev/null 2>&1
mpirun_np 2 "$MPIDDP" train "${common[@]}" "${sched[@]}" --lr 0.02 --out lr17 --resume auto >/dev/null 2>lr17.err
grep -q "^mpiddp train: notice: lr17/checkpoints/last.h5: learning-rate schedule at step 17: --lr 0.01 -> 0.02; lr 0.0055 -> 0.0105$" lr17.err ||
  fail "--lr changed on resume: no notice: $(cat lr17.err)"
# a decay of exactly one optimizer step keeps the peak lr (it was --min-lr, 0: a step that trained nothing):
# 16 samples at np 2 x 8 are one step per epoch; 1 epoch, and 3 epochs with a warmup of 2 (then one decay step)
synth --out one --samples 16 --dim 6 --classes 3 --min-rows 1 --max-rows 8 --shards 1 --seed 5
mpirun_np 2 "$MPIDDP" train "${common[@]}" --train one --batch-size 8 --epochs 1 --lr-schedule cosine --out one1 >/dev/null
mpirun_np 2 "$MPIDDP" train "${common[@]}" --train one --batch-size 8 --epochs 3 --lr-schedule linear --warmup-steps 2 --out one3 >/dev/null
$PY - <<'PY' || fail "extending a run, or a one-step decay"
import csv, h5py, json, torch, warnings
warnings.filterwarnings("ignore")
def lrs(run):
    return {int(r["step"]): float(r["lr"]) for r in csv.DictReader(open(f"{run}/metrics.csv")) if r["lr"]}
def attrs(run):
    a = h5py.File(f"{run}/checkpoints/last.h5").attrs
    return int(a["lr_start_step"]), int(a["lr_total_steps"]), int(a["lr_warmup_steps"])
def torch_cosine(total, warmup, base=0.01, min_lr=0.001):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base)
    sch = torch.optim.lr_scheduler.SequentialLR(opt, [
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / warmup, end_factor=1.0, total_iters=warmup - 1),
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - warmup - 1, eta_min=min_lr)], milestones=[warmup])
    out = []
    for _ in range(total):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sch.step()
    return out
cos, keep, restart, old = lrs("cos2"), lrs("keep5"), lrs("restart5"), lrs("old5")
assert sorted(keep) == list(range(1, 51)) and all(keep[s] == cos[s] for s in range(1, 31)), "keep: steps 1-30 changed"
assert all(keep[s] == 0.001 for s in range(31, 51)), ("keep: lr past the horizon is not --min-lr", [keep[s] for s in range(29, 35)])
assert attrs("keep5") == (0, 30, 5), attrs("keep5")
assert json.load(open("keep5/run.json"))["lr_schedule"] == {"schedule": "cosine", "lr": 0.01, "min_lr": 0.001, "warmup_steps": 5,
                                                            "start_step": 0, "total_steps": 30, "horizon": "checkpoint"}
want = torch_cosine(20, 5)
worst = max(abs(restart[30 + k] - want[k - 1]) / want[k - 1] for k in range(1, 21))
assert all(restart[s] == cos[s] for s in range(1, 31)) and worst < 1e-5, ("restart", worst, [restart[s] for s in range(29, 35)])
assert attrs("restart5") == (30, 50, 5), attrs("restart5")
assert json.load(open("restart5/run.json"))["lr_schedule"]["horizon"] == "restart"
assert old[31] > 0.003, ("an old checkpoint: the horizon should follow --epochs, as before", old[31])
print(f"keep: lr {keep[30]:.5g} at step 30, {keep[31]:.5g} at 31 ({old[31]:.5g} with the horizon moved); restart: "
      f"{restart[31]:.5g} at 31 up to {max(restart[s] for s in range(31, 51)):.5g}, worst relative difference to PyTorch {worst:.1e}")
one1, one3 = lrs("one1"), lrs("one3")
assert one1 == {1: 0.01}, one1
assert one3 == {1: 0.005, 2: 0.01, 3: 0.01}, one3
PY
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${common[@]}" --lr-schedule cosine --min-lr 0.5 --out bad
grep -q -- "--min-lr 0.5 is above --lr 0.01" <<<"$ERR" || fail "min-lr above lr: $ERR"
# a warmup longer than the run would still be warming at its last step (and past it, where --min-lr applies): refused
# before anything is written, in one line naming both numbers; on resume, against the schedule the run keeps
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --warmup-steps 31 --out longwarm
[ "$(grep -c -- "error: --warmup-steps 31 exceeds the run's 30 optimizer steps (steps 0-29)" <<<"$ERR")" = 1 ] ||
  fail "a warmup longer than the run: $ERR"
[ ! -e longwarm/metrics.csv ] && [ ! -e longwarm/run.json ] || fail "a refused warmup wrote the run directory"
cp -r cos2 warm5
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" "${sched[@]}" --warmup-steps 31 --epochs 5 --out warm5 --resume auto
[ "$(grep -c -- "error: --warmup-steps 31 exceeds the checkpoint's schedule's 30 optimizer steps (steps 0-29)" <<<"$ERR")" = 1 ] ||
  fail "a warmup longer than the kept schedule: $ERR"
# --fast-dev-run smoke-tests the run's options: a warmup that fits the run's 30 steps runs (the smoke test trains 2),
# one that does not is refused as the run would be
mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --warmup-steps 5 --fast-dev-run 2 --out fdr5 >/dev/null 2>fdr5.err ||
  fail "--fast-dev-run 2 with a warmup the run fits: $(cat fdr5.err)"
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --warmup-steps 31 --fast-dev-run 2 --out fdr31
[ "$(grep -c -- "error: --warmup-steps 31 exceeds the run's 30 optimizer steps (steps 0-29)" <<<"$ERR")" = 1 ] ||
  fail "--fast-dev-run with a warmup longer than the run: $ERR"
mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 8 --warmup-steps 30 --out warm30 >/dev/null # ends at the peak
[ "$(csv_last warm30/metrics.csv lr)" = 0.01 ] || fail "a warmup of the whole run: last lr $(csv_last warm30/metrics.csv lr)"
pass "lr schedules match PyTorch's step by step, at np 1 x2 and np 2; resume mid-warmup and mid-decay bitwise; a longer --epochs keeps the horizon (or restarts it), with a notice; a one-step decay keeps the peak lr; a warmup longer than the run refused (with --fast-dev-run too, against the run it smoke-tests)"

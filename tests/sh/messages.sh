# Messages of issue #34 (item 3), each in the situation the issue names: run.json of a --batch-rows 512 run at np 2
# records the budget (1024 rows per step), not a global batch of 64 samples; a resume with the other kind of batch
# names each side's option; a resume with another --model says which model the checkpoint holds; train/val class
# counts that differ after `pack` suggest `pack --classes`; `ckpt_to_torch.py --save` says what it wrote;
# `--device cuda` on a machine without a GPU says so once, with the host (not "on this node on HOST"); the sampler's
# refusals (--sampling shard, --drop-last) and bf16's out-of-memory line name the CLI's options.
. "$(dirname "$0")/lib.sh"
synth --out train --samples 96 --dim 6 --classes 3 --min-rows 1 --max-rows 40 --shards 2 --seed 3
synth --out val --samples 32 --dim 6 --classes 3 --min-rows 1 --max-rows 40 --shards 1 --seed 4 --first-id 900
common=(--train train --val val --hidden 8 --epochs 1 --no-progress --device cpu)

# 1. run.json of a token-budget run: the budget per rank and the global one; batch-size and the global batch do not apply
mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-rows 512 --out rows >/dev/null
$PY - <<'PY' || fail "run.json of a --batch-rows run"
import json
c = json.load(open("rows/run.json"))["config"]
assert c["batch_rows"] == 512 and c["global_batch_rows"] == 1024, c
assert c["global_batch"] is None and c["batch_size"] is None and c["batch-size"] is None, c
s = json.load(open("rows/run.json"))["lr_schedule"]
assert s["schedule"] == "constant" and s["total_steps"] > 0 and s["horizon"] == "run", s
PY
mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 4 --out samples >/dev/null
$PY -c "
import json; c = json.load(open('samples/run.json'))['config']
assert c['batch_size'] == 4 and c['global_batch'] == 8 and 'global_batch_rows' not in c, c" || fail "run.json of a --batch-size run"

# 2. a resume with --batch-size from a --batch-rows checkpoint, and the other way round: each side's option
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --epochs 2 --batch-size 32 --out rows --resume auto
grep -q "rows/checkpoints/last.h5: saved with token-budget batches (--batch-rows, 1024 rows per optimizer step); this run uses sample-count batches (--batch-size): resume with --batch-rows (batch-rows x ranks x accumulate = 1024)" <<<"$ERR" ||
  fail "--batch-size resume of a --batch-rows checkpoint: $ERR"
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --epochs 2 --batch-rows 512 --out samples --resume auto
grep -q "samples/checkpoints/last.h5: saved with sample-count batches (--batch-size, 8 samples per optimizer step); this run uses token-budget batches (--batch-rows): resume with --batch-size (batch-size x ranks x accumulate = 8)" <<<"$ERR" ||
  fail "--batch-rows resume of a --batch-size checkpoint: $ERR"

# 3. a resume with another --model: the checkpoint holds the other model (not "dataset '/params/...': missing")
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --epochs 2 --batch-size 4 --model transformer --out samples --resume auto
grep -q "samples/checkpoints/last.h5 holds an mlp model (--model mlp), not the transformer this run builds (--model transformer)" <<<"$ERR" ||
  fail "resume with another --model (mlp checkpoint): $ERR"
mpirun_np 2 "$MPIDDP" train "${common[@]}" --batch-size 4 --model transformer --out tx >/dev/null
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --epochs 2 --batch-size 4 --out tx --resume auto
grep -q "tx/checkpoints/last.h5 holds a transformer model (--model transformer), not the mlp this run builds (--model mlp)" <<<"$ERR" ||
  fail "resume with another --model (transformer checkpoint): $ERR"
! grep -q "missing" <<<"$ERR" || fail "another --model reported as a missing dataset: $ERR"
# --resume last (Lightning's ckpt_path="last"): into the run, the refusal offers --resume auto; into a new --out, the
# missing file says what --resume takes
expect_rc 2 mpirun_np 2 "$MPIDDP" train "${common[@]}" --epochs 2 --batch-size 4 --out samples --resume last
grep -qF "samples holds a run (run.json) and --resume last is not one of its checkpoints: continue this run with --resume auto (samples/checkpoints/last.h5), resume into a new --out" <<<"$ERR" ||
  fail "--resume last into a run: $ERR"
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --epochs 2 --batch-size 4 --out fresh --resume last
grep -qF "mpiddp train: error: last: cannot open checkpoint: No such file or directory (--resume takes a checkpoint file, or auto: fresh/checkpoints/last.h5 when it exists)" <<<"$ERR" ||
  fail "--resume last into a new --out: $ERR"
# a resume with another --hidden: both shapes, and what to give (it said only 'shape does not match the model')
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --epochs 2 --batch-size 4 --hidden 16 --out samples --resume auto
grep -qF "samples/checkpoints/last.h5: dataset '/params/l1.weight': shape does not match the model: [8, 6] in the checkpoint, [16, 6] in this run's model (another --hidden, D or number of classes: resume with the model options and data it was trained with)" <<<"$ERR" ||
  fail "resume with another --hidden: $ERR"
# a Transformer resumed with another --ff: the options named are the Transformer's (it named only --hidden, D and the
# classes, none of which changed)
expect_rc 1 mpirun_np 2 "$MPIDDP" train "${common[@]}" --epochs 2 --batch-size 4 --model transformer --ff 32 --out tx --resume auto
grep -qF "tx/checkpoints/last.h5: dataset '/params/enc.layers.0.linear1.weight': shape does not match the model: [16, 8] in the checkpoint, [32, 8] in this run's model (another --hidden, --ff, --max-positions, D or number of classes: resume with the model options and data it was trained with)" <<<"$ERR" ||
  fail "transformer resume with another --ff: $ERR"

# 4. pack: a validation split without the top label gets fewer classes; the error suggests pack --classes
$PY - <<'PY'
import h5py, numpy as np
rng = np.random.default_rng(1)
for name, top in (("train.h5", 5), ("val.h5", 4)):
    with h5py.File(name, "w") as f:
        g = f.create_group("samples")
        for i in range(20):
            g[f"s{i:03d}"] = rng.standard_normal((1 + i % 3, 6)).astype(np.float32)
        f["labels"] = np.arange(20) % top
PY
"$MPIDDP" pack --input train.h5 --out ptrain >/dev/null
"$MPIDDP" pack --input val.h5 --out pval >/dev/null
expect_rc 1 mpirun_np 2 "$MPIDDP" train --train ptrain --val pval --out packed --no-progress --device cpu
grep -qF "ptrain and pval disagree: classes 5 vs 4 (a split that lacks the top label counts fewer): give both num_classes 5 (mpiddp pack --classes 5; with h5py, f.attrs['num_classes'] = 5 in every shard)" <<<"$ERR" ||
  fail "class counts of packed splits: $ERR"
rm -rf pval && "$MPIDDP" pack --input val.h5 --out pval --classes 5 >/dev/null
mpirun_np 2 "$MPIDDP" train --train ptrain --val pval --out packed --no-progress --device cpu --epochs 1 >/dev/null || fail "pack --classes 5 did not fix it"

# 5. ckpt_to_torch.py: a missing checkpoint, or --data of another D, is one line and exit 1 (it was a Python traceback
#    ending in h5py's "Unable to open file" or torch's "mat1 and mat2 shapes cannot be multiplied")
expect_rc 1 $PY "$SRC/scripts/ckpt_to_torch.py" nope.h5
[ "$ERR" = "ckpt_to_torch.py: error: nope.h5: cannot open checkpoint: No such file or directory" ] || fail "ckpt_to_torch.py nope.h5: $ERR"
synth --out val9 --samples 8 --dim 9 --classes 3 --shards 1
expect_rc 1 $PY "$SRC/scripts/ckpt_to_torch.py" samples/checkpoints/last.h5 --data val9
[ "$ERR" = "ckpt_to_torch.py: error: val9 has D=9 and 3 classes (shard-00000.h5) but the checkpoint was trained on D=6, 3 classes" ] ||
  fail "ckpt_to_torch.py --data of another D: $ERR"
# a file that is not HDF5 as the checkpoint, a shard without num_classes in --data: one line naming the file (h5py's
# own message names none: it was 'Unable to open file (file signature not found)' alone)
echo "not a checkpoint" > notckpt.h5
expect_rc 1 $PY "$SRC/scripts/ckpt_to_torch.py" notckpt.h5
[ "$(wc -l <<<"$ERR")" = 1 ] && grep -q "^ckpt_to_torch.py: error: notckpt.h5: cannot open checkpoint: " <<<"$ERR" ||
  fail "ckpt_to_torch.py on a file that is not HDF5: $ERR"
cp -r val valnc && $PY -c "import h5py; del h5py.File('valnc/shard-00000.h5', 'a').attrs['num_classes']"
expect_rc 1 $PY "$SRC/scripts/ckpt_to_torch.py" samples/checkpoints/last.h5 --data valnc
[ "$(wc -l <<<"$ERR")" = 1 ] && grep -q "^ckpt_to_torch.py: error: valnc/shard-00000.h5: .*num_classes" <<<"$ERR" ||
  fail "ckpt_to_torch.py --data with a shard lacking num_classes: $ERR"
# ckpt_to_torch.py --save says what it wrote
expect_rc 0 $PY "$SRC/scripts/ckpt_to_torch.py" samples/checkpoints/last.h5 --save model.pt
grep -q "^wrote model.pt (torch.save): the state_dict of the mlp in samples/checkpoints/last.h5, 6 tensors, [0-9]* parameters$" <<<"$OUT" ||
  fail "ckpt_to_torch.py --save: '$OUT'"
$PY -c "import torch; sd = torch.load('model.pt'); assert sorted(sd) == ['l1.bias', 'l1.weight', 'l2.bias', 'l2.weight', 'l3.bias', 'l3.weight'], sorted(sd)" ||
  fail "model.pt is not the state_dict"

# 6. --device cuda without a GPU, with a CUDA plugin that loads (a stand-in next to a copy of mpiddp: found before any
# other, and never asked for a device): "no NVIDIA GPU found on HOST" where this machine has no NVIDIA device node;
# everywhere, CUDA_VISIBLE_DEVICES="" says that it hides the GPUs
mkdir -p bin && cp "$MPIDDP" bin/mpiddp
api=$(sed -n 's/^#define DDP_CUDA_API_VERSION \([0-9]*\).*/\1/p' "$SRC/mpi_ddp/backend/cuda/cuda_api.h")
printf 'static struct { int version, emulated; void *fn[64]; } api = {%s, 0, {0}};\nconst void *ddp_cuda_plugin_api(void *f) { (void)f; return &api; }\n' "$api" > plugin.c
cc -shared -fPIC -o bin/libmpiddp_cuda.so plugin.c
host=$(hostname)
if [ ! -e /dev/nvidia0 ] && [ ! -e /dev/nvidiactl ] && [ ! -e /proc/driver/nvidia/gpus ]; then
  expect_rc 1 env -u MPIDDP_CUDA_PLUGIN -u CUDA_VISIBLE_DEVICES mpirun -np 2 --oversubscribe bin/mpiddp train "${common[@]}" --device cuda --out cuda
  grep -q "^mpiddp train: error: --device cuda: no NVIDIA GPU found on $host$" <<<"$ERR" || fail "--device cuda without a GPU: $ERR"
  expect_rc 0 env -u MPIDDP_CUDA_PLUGIN -u CUDA_VISIBLE_DEVICES bin/mpiddp train --train train --val val --hidden 8 --epochs 1 --batch-size 4 --device auto --out auto
  grep -q "^mpiddp train: --device auto: no NVIDIA GPU found, using cpu$" <<<"$ERR" || fail "--device auto without a GPU: $ERR"
fi
expect_rc 1 env -u MPIDDP_CUDA_PLUGIN CUDA_VISIBLE_DEVICES= mpirun -np 2 --oversubscribe bin/mpiddp train "${common[@]}" --device cuda --out cuda
grep -q "^mpiddp train: error: --device cuda: every GPU hidden by CUDA_VISIBLE_DEVICES=\"\" on $host$" <<<"$ERR" || fail "--device cuda, GPUs hidden: $ERR"
# no plugin at MPIDDP_CUDA_PLUGIN: the line names the CLI's --device cuda (a C-API program's, DDP_DEVICE_CUDA)
expect_rc 1 env MPIDDP_CUDA_PLUGIN="$WORK/none.so" mpirun -np 2 --oversubscribe "$MPIDDP" train "${common[@]}" --device cuda --out noplugin
grep -qx "mpiddp train: error: --device cuda: CUDA plugin unavailable: MPIDDP_CUDA_PLUGIN=$WORK/none.so: No such file or directory" <<<"$ERR" ||
  fail "--device cuda without a plugin: $ERR"
# an MPIDDP_ATTENTION neither device knows (a typo of a path) is refused, not taken for auto
expect_rc 1 env MPIDDP_ATTENTION=Tiled mpirun -np 2 --oversubscribe "$MPIDDP" train "${common[@]}" --model transformer --heads 2 --out attn
[ "$(grep -c "^mpiddp" <<<"$ERR")" = 1 ] && grep -q "^mpiddp train: error: MPIDDP_ATTENTION=Tiled: not an attention path" <<<"$ERR" ||
  fail "unknown MPIDDP_ATTENTION: $ERR"
# the sampler's refusals name the CLI's options (a C-API program's cfg fields: sh/capi_misuse.sh)
expect_rc 1 mpirun -np 2 --oversubscribe "$MPIDDP" train "${common[@]}" --train val --sampling shard --out shard1
grep -qx "mpiddp train: error: --sampling shard: rank 1 gets no samples (1 shards for 2 ranks); use --sampling global or more shards" <<<"$ERR" ||
  fail "--sampling shard with fewer shards than ranks: $ERR"
synth --out one --samples 1 --dim 6 --classes 3 --shards 1 --seed 5 --first-id 5000
expect_rc 1 mpirun -np 2 --oversubscribe "$MPIDDP" train "${common[@]}" --train one --drop-last --out drop1
grep -qx "mpiddp train: error: sampler: --drop-last leaves rank 0 with no samples (1 samples for 2 ranks)" <<<"$ERR" ||
  fail "--drop-last with fewer samples than ranks: $ERR"
# --precision bf16 on the CPU, its operands' scratch not allocated (the test hook fails that allocation)
site="cpu/backend_cpu_bf16.c:$(grep -n '[*]buf = ddp_calloc(need, 1);' "$SRC/mpi_ddp/backend/cpu/backend_cpu_bf16.c" | cut -d: -f1)"
expect_rc 1 env MPIDDP_TEST_FAIL_ALLOC="$site" "$MPIDDP" train "${common[@]}" --precision bf16 --out bf16oom
grep -qx "mpiddp train: rank 0: error: out of memory: [0-9]* bytes for the GEMM operands rounded to bf16 (--precision bf16)" <<<"$ERR" ||
  fail "bf16 operands not allocated ($site): $ERR"
pass "run.json records the budget; resume and pack messages name the options that fix them; ckpt_to_torch --save reports; --device cuda without a GPU; an unknown MPIDDP_ATTENTION; the sampler's and bf16's lines"

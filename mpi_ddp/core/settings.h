/* settings.h — every MPIDDP_* environment knob, declared once (NCCL_PARAM style) with its default and meaning,
 * and the launchers' variables mpiddp reads. docs/cli.md's tables are checked against this list (tests/py/knobs.py). */
#ifndef DDP_SETTINGS_H
#define DDP_SETTINGS_H

#include <stdint.h>

/* I(NAME, default, "meaning"): an integer knob MPIDDP_<NAME>; S(NAME, "meaning"): a string knob (unset: NULL). */
#define DDP_KNOBS(I, S)                                                                                       \
    I(MADVISE, 1, "0: no access-pattern hints (madvise) in the data loader")                                  \
    I(ROW_BLOCK_KB, 2048, "KiB of activations per row block of the CPU forward pass; 0: the whole batch")     \
    I(CPU_ONEDNN, 1, "0: the CPU backend uses no oneDNN")                                                     \
    I(CPU_ONEDNN_FP32, 1, "0: every fp32 GEMM on OpenBLAS")                                                   \
    I(BF16_ACTIVATIONS, 1, "0: the transformer keeps layernorm and GELU outputs in fp32 at --precision bf16") \
    I(CUBLASLT, 1, "0: no GEMM epilogues or shared dy rounding on the GPU: the unfused calls, as at fp32")    \
    S(ATTENTION, "GPU: cudnn or own; CPU: fused, gemm or tiled for every sample; auto or unset: the default") \
    S(CUDNN_LIB, "cuDNN graph library the GPU plugin dlopens instead of libcudnn_graph.so.9")                 \
    I(ATTENTION_GEMM_MIN, 8, "rows from which a sample uses the gemm attention method (auto)")                \
    I(ATTENTION_TILED_MIN, 24, "rows from which a sample uses the tiled attention method (auto)")             \
    I(VALIDATE_TIMEOUT, 120, "seconds HDF5 may spend validating one object of a shard; 0: no limit")          \
    I(VALIDATE_FORK, 1, "0: validate shards inside the process, not in a forked child")                       \
    I(VALIDATE_STDERR, 0, "1: keep HDF5's own error output from the validation child")                        \
    I(MAX_OPEN_SHARDS, 0, "shards a rank keeps open at most; 0: as RLIMIT_NOFILE allows")                     \
    I(MAX_SHARD_MAPS, 0, "memory maps a rank's open shards hold at most; 0: as vm.max_map_count allows")      \
    S(CUDA_PLUGIN, "path of the CUDA plugin to load instead of searching for libmpiddp_cuda.so")              \
    I(CUDA_PREFETCH, 1, "0: upload each batch on the compute stream, no staging on a copy stream")            \
    I(NCCL_INIT_TIMEOUT, 0, "seconds NCCL start-up may take; 0: --collective-timeout if set, else 300")       \
    I(REQUEUE, 1, "0: train does not run scontrol requeue after a stop request")                              \
    I(PLAN_BUFFERS, -1, "1: activations sized to the run's largest batch; 0: batch x longest; -1: GPU only")  \
    S(TEST_TRACE_SAMPLES, "test hook: PREFIX.r<rank> gets one line per trained micro-batch")                  \
    I(TEST_FIRST_STEP_DELAY_MS, 0, "test hook: the first training step sleeps this long first")               \
    I(TEST_STEP_DELAY_MS, 0, "test hook: every training step sleeps this long")                               \
    I(TEST_STOP_AT_STEP, -1, "test hook: a stop request (as SIGUSR1) during this optimizer step")             \
    I(TEST_STOP_RANK, 0, "test hook: the rank of TEST_STOP_AT_STEP's request")                                \
    I(TEST_STOP_IN_VAL, -1, "test hook: a stop request (as SIGUSR1) on rank 0 before this validation batch")  \
    I(TEST_STOP_SELF_AT_START, -1, "test hook: this rank stops itself (SIGSTOP) as training starts")          \
    S(TEST_MONITOR_OFFSET, "test hook: rank:epoch:offset,... added to one rank's monitored value")            \
    S(TEST_FAIL_ALLOC, "test hook: dir/file.c:LINE, the first allocation there fails")                        \
    I(TEST_FAIL_ALLOC_RANK, 0, "test hook: the rank of TEST_FAIL_ALLOC")                                      \
    S(TEST_ALLOC_SITES, "test hook: PREFIX.r<rank> gets every allocation site reached")                       \
    I(TEST_GATHER_CHUNK, 134217728, "test hook: elements per message of the prediction gather")               \
    I(TEST_DIE_IN_SAVE, 0, "test hook: rank 0 is killed between writing and renaming its N-th checkpoint")    \
    I(TEST_PLAN_SLACK, 0, "test hook: rows added to the planned activation buffers (negative: fewer)")        \
    I(TEST_NOLOCK, 0, "test hook: 1: the dataset lock fails with ENOLCK (a file system without locks)")       \
    I(TEST_SHARD_DELAY_MS, 0, "test hook: the shard writer waits this long with a shard's temporary made")    \
    I(TEST_MANIFEST_DELAY_MS, 0, "test hook: the manifest writer waits this long before renaming its temporary")

#define DDP_KNOB_ENUM_(name, ...) DDP_KNOB_##name,
typedef enum { DDP_KNOBS(DDP_KNOB_ENUM_, DDP_KNOB_ENUM_) DDP_KNOB_COUNT } ddp_knob;
#undef DDP_KNOB_ENUM_

/* An integer knob: its value; the default when unset, empty or not a whole integer. */
int64_t ddp_knob_int(ddp_knob k);
/* A string knob: its value; NULL when unset or empty. */
const char *ddp_knob_str(ddp_knob k);
/* A launcher's integer variable (SLURM_CPUS_PER_TASK, OMPI_...): its leading number ("2(x2)" gives 2), default
 * when unset or malformed. */
int ddp_env_plain_int(const char *name, int dflt);
/* Threads for the CPU GEMMs: SLURM_CPUS_PER_TASK, else OMP_NUM_THREADS, else 1. */
int ddp_blas_threads_from_env(void);

#endif

/* mpiddp.h — the public API of mpiddp: status codes, the launch context, datasets and batches, the model interface a
 * user's C program implements, metric logging, and the trainer (a user program in brief: above ddp_train). */
#ifndef MPIDDP_H
#define MPIDDP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MPIDDP_VERSION "0.1.0"

/* Every function that can fail returns a ddp_status; DDP_OK is 0. On failure ddp_last_error() holds one line naming the
 * file, object and index where that applies. Library code never prints errors or calls exit(). A required pointer
 * argument that is NULL is DDP_ERR_ARG, "FUNCTION: ARGUMENT is NULL"; the functions that return a pointer or a number
 * return NULL or 0 for a NULL object, and the ones that free (ddp_finalize, ddp_*_close, _destroy, _free) accept
 * NULL. A collective function checks its arguments collectively: bad input on one rank fails every rank alike. */
typedef enum {
    DDP_OK = 0,
    DDP_ERR_ARG,      /* bad argument or option value */
    DDP_ERR_IO,       /* file system: open, read, write, rename, mmap */
    DDP_ERR_FORMAT,   /* a file that breaks the dataset or checkpoint format */
    DDP_ERR_MPI,      /* an MPI call failed */
    DDP_ERR_HDF5,     /* an HDF5 call failed */
    DDP_ERR_CUDA,     /* a CUDA runtime or cuBLAS call failed */
    DDP_ERR_NCCL,     /* an NCCL call failed */
    DDP_ERR_NOMEM,    /* allocation failed */
    DDP_ERR_MISMATCH, /* ranks disagree (metric names, step counts, world facts) */
    DDP_ERR_REMOTE,   /* another rank failed; its message was shared */
    DDP_ERR_NUMERIC,  /* non-finite loss or gradient */
    DDP_ERR_INTERNAL,
    DDP_ERR_BUSY,     /* the run directory is in use by a live run, or holds another run's files */
    DDP_STOPPED = 100 /* not an error: training stopped on request (signal) after saving last.h5 */
} ddp_status;

const char *ddp_status_name(ddp_status st);
/* The message of the last error on this thread (one line, no newline). */
const char *ddp_last_error(void);
/* 1 when the last error was agreed collectively, so every rank returned it at the same point and the
 * job can shut down cleanly; 0 when only this rank failed: the other ranks may be in a collective this rank will not
 * join. Then agree it before anything else (ddp_agree_status(ctx, st) makes it every rank's), or end the job:
 * MPI_Abort, or ddp_finalize and exit non-zero. ddp_finalize leaves MPI_Finalize alone (which would wait for the
 * others) after a failure of ddp_train on this rank alone, and after one of ddp_model_create, ddp_refmodel_create,
 * ddp_metrics_create, ddp_log, ddp_log_rank0 or ddp_dataset_sample (not collective) for another reason than
 * DDP_ERR_ARG (out of memory, a device error, a shard this rank cannot read): on the thread that called ddp_init,
 * until one of this library's collectives that began after the failure completes on the ctx; on another thread (a
 * loader's), until ddp_agree_status or ddp_all_ok agrees a failure. After DDP_ERR_ARG of this rank's alone it
 * finalizes MPI: agree first, or MPI_Abort. */
int ddp_error_shared(void);

/* ---------------------------------------------------------------- launch context */
typedef struct ddp_ctx ddp_ctx;
typedef struct ddp_metrics ddp_metrics;

typedef enum { DDP_DEVICE_AUTO = 0, DDP_DEVICE_CPU, DDP_DEVICE_CUDA } ddp_device;

typedef struct {
    int rank, size;             /* world */
    int local_rank, local_size; /* from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) */
    int node_id, num_nodes;     /* node index among the job's nodes */
    char host[256];
    char launcher[16]; /* "pmix", "slurm", "ompi" or "none": where job facts came from */
    char job_id[64];   /* scheduler job id, "" when none */
    int restart_count; /* SLURM_RESTART_COUNT (a requeued job), 0 when none */
} ddp_topology;

/* Initialises MPI (unless already initialised) and discovers the topology. Once MPI is finalized (ddp_finalize of a
 * context that started it) MPI cannot start again: DDP_ERR_ARG. */
ddp_status ddp_init(int *argc, char ***argv, ddp_ctx **ctx);
/* Frees the context and finalizes MPI when ddp_init started it. NULL: DDP_OK. A context already finalized is refused,
 * DDP_ERR_ARG ("ddp_finalize: ctx is not a live context ..."), here and by every function given one. After a
 * collective timeout (cfg.collective_timeout) the context's communication is broken: every later collective on it
 * fails at once naming the timeout, and ddp_finalize returns DDP_ERR_MISMATCH without finalizing MPI (that would wait
 * for the stalled rank): exit non-zero or MPI_Abort. */
ddp_status ddp_finalize(ddp_ctx *ctx);
const ddp_topology *ddp_topo(const ddp_ctx *ctx);
/* Resolves --device for this rank: AUTO becomes CUDA when a GPU is visible, else CPU. Collective over the ranks of
 * this node: they must pass the same want (else DDP_ERR_ARG on every rank of the node, one line naming the wants) and,
 * unless it is CPU, see the same number of GPUs (CUDA refuses, AUTO picks the CPU otherwise). `why` (may be NULL, 160
 * bytes) receives a one-line explanation ("DDP_DEVICE_AUTO: no NVIDIA GPU found, using cpu"; the CLI's lines say
 * --device auto). */
ddp_status ddp_select_device(ddp_ctx *ctx, ddp_device want, ddp_device *got, char *why);
/* Collective: ddp_select_device on every rank, its status agreed, and every rank on the same kind of device
 * (--device auto may not leave some nodes on cpu and others on cuda). Every rank must pass the same want (else
 * DDP_ERR_ARG on every rank). */
ddp_status ddp_select_device_all(ddp_ctx *ctx, ddp_device want, ddp_device *got, char *why);
/* True when every rank passes ok != 0. A collective; use it to agree before diverging paths. */
ddp_status ddp_all_ok(ddp_ctx *ctx, int ok, int *all);
/* Shares the error of the lowest failing rank with every rank: each rank passes its own status;
 * all return the same status and ddp_last_error() holds the same message (collective): the failing rank's failure
 * still pending when it has the status passed (the first since the last agreement, on any thread: a loader's
 * ddp_dataset_sample), else the calling thread's last error. */
ddp_status ddp_agree_status(ddp_ctx *ctx, ddp_status mine);

/* ---------------------------------------------------------------- data */
typedef struct ddp_dataset ddp_dataset;

typedef struct {
    int64_t num_samples, num_rows;
    int64_t dim, num_classes;
    int64_t num_shards;
    int64_t max_sample_rows;  /* longest sample, in rows */
    int64_t hdf5_read_shards; /* shards whose features are chunked/compressed: read through HDF5 (slower) */
} ddp_dataset_info;

/* Collective: rank 0 reads and validates every shard's metadata, broadcasts it; others map lazily. */
ddp_status ddp_dataset_open(ddp_ctx *ctx, const char *dir, ddp_dataset **out);
/* Not collective. Also after ddp_finalize: it then frees the memory and closes the files without calling a parallel
 * HDF5, which MPI_Finalize shut down. */
void ddp_dataset_close(ddp_dataset *ds);
const ddp_dataset_info *ddp_dataset_get_info(const ddp_dataset *ds);
/* Zero-copy view of one sample (global index): rows [nrows, dim] row-major. `rows` points into the
 * memory-mapped shard when the shard is mappable, else into `scratch` (nrows*dim floats, may be NULL
 * only for mappable datasets: else DDP_ERR_ARG naming scratch and the shard). A rank keeps a bounded set of shards open
 * (docs/dataset-format.md): the shard stays open, and `rows` valid, until the calling thread's next ddp_dataset_sample
 * (on any dataset), ddp_dataset_close or the thread's exit. Any number of threads may call it at once, each with
 * its own scratch: each holds one shard open (past the open-shard budget when there are more threads than it allows);
 * reads through HDF5 take turns under one process-wide lock, mapped reads take no HDF5 lock (HDF5-read shards: limits
 * in docs/dataset-format.md). After ddp_finalize of the dataset's ctx: DDP_ERR_ARG ("DIR's ctx was finalized"). */
ddp_status ddp_dataset_sample(ddp_dataset *ds, int64_t index, float *scratch, const float **rows, int64_t *nrows,
                              int64_t *label, int64_t *sample_id);

/* A packed batch: the rows of its samples concatenated, no padding rows. */
typedef struct {
    int64_t nsamples, nrows, dim;
    const int64_t *offsets;    /* [nsamples+1], offsets[0] = 0 */
    const int64_t *labels;     /* [nsamples] */
    const int64_t *sample_ids; /* [nsamples] */
    const int64_t *indices;    /* [nsamples] global sample index in the dataset */
    const uint8_t *is_pad;     /* [nsamples]: 1 for a sampler-padding duplicate */
    const float *x;            /* [nrows, dim] host memory */
    int64_t step;              /* the optimizer step it is trained in (0-based; dropout keys); 0 in eval */
} ddp_batch;

/* ---------------------------------------------------------------- model interface */
typedef struct {
    const char *name; /* PyTorch state_dict name, e.g. "l1.weight" */
    int ndim;
    int64_t shape[4];
} ddp_tensor_spec;

/* Called by a model's backward as gradient ranges become final, so gradient buckets can be reduced
 * while backward continues. [lo, hi) are element indices into the flat gradient buffer. */
typedef void (*ddp_grad_ready_fn)(void *arg, int64_t lo, int64_t hi);

/* The batch a model's next train_step will be given, when it is already assembled; else NULL. Never waits. */
typedef const ddp_batch *(*ddp_next_batch_fn)(void *arg);

typedef struct {
    double loss_sum; /* sum of per-sample losses over non-padding samples */
    int64_t count;   /* non-padding samples */
    int64_t *pred;   /* optional per-sample predicted class (eval), [nsamples] */
    float *prob;     /* optional per-sample probability of pred, [nsamples] */
    float *loss;     /* optional per-sample loss, [nsamples] */
} ddp_forward_out;

typedef struct ddp_model {
    const char *name;
    int ntensors;
    const ddp_tensor_spec *tensors; /* flat layout: tensors back to back, in this order */
    int num_classes;
    ddp_device device;    /* memory the callbacks take: DDP_DEVICE_CPU (host) or DDP_DEVICE_CUDA */
    ddp_metrics *metrics; /* set by ddp_train: callbacks may ddp_log() their own metrics through it, under names
                             of their own (those ddp_train logs itself, e.g. val/loss, are DDP_ERR_ARG). Valid
                             only during ddp_train: it is NULL again when ddp_train returns (its accumulator is
                             gone), so that a later ddp_log(model->metrics, ...) is DDP_ERR_ARG, not a crash */
    void *self;
    /* Fills params (host memory, flat layout) from seed. */
    ddp_status (*init)(void *self, float *params, uint64_t seed);
    /* Forward + backward on a packed batch. Adds d(sum of the batch's per-sample losses)/dparam into
     * grads (zeroed by the trainer before an optimizer step's first micro-batch); the trainer divides by
     * the global sample count after the allreduce. Padding duplicates are trained on like any sample
     * (as DistributedSampler does); out->loss_sum/count cover all samples of the batch. ready may be NULL.
     * A status other than DDP_OK from train_step or eval_step ends ddp_train with it on that rank; ddp_last_error()
     * is then the line of the failing library call the callback made (e.g. a ddp_log), or, where the callback set
     * none, one naming the model, the callback, its status and the step ("model 'mine': train_step returned
     * DDP_ERR_INTERNAL at step 3 (...)"). DDP_STOPPED is not a callback's to return (only ddp_train returns it,
     * with last.h5 saved): it is DDP_ERR_ARG; a model that wants the run to stop calls ddp_request_stop(). */
    ddp_status (*train_step)(void *self, const ddp_batch *b, const float *params, float *grads, ddp_forward_out *out,
                             ddp_grad_ready_fn ready, void *ready_arg);
    /* Forward only: per-sample loss, prediction and probability into out (arrays sized nsamples). The trainer leaves
     * padding duplicates (b->is_pad) out of its metrics; a metric of the model's own (ddp_log) must too, or the
     * duplicates count twice. */
    ddp_status (*eval_step)(void *self, const ddp_batch *b, const float *params, ddp_forward_out *out);
    void (*destroy)(void *self);
    /* Optional (NULL: not used). Called by ddp_train before each train_step: during that step, once its work is
     * queued and before its results are waited for, the model may call next(arg) and start moving the batch it
     * returns (that of the following train_step; its host memory stays valid and unchanged until that step
     * returns) to the device, so that the copy overlaps this step's compute. next NULL: no next batch (and
     * anything moved early is dropped). Results must be the same with or without it. */
    ddp_status (*prefetch)(void *self, ddp_next_batch_fn next, void *arg);
    /* Optional (NULL: not said): which attention the model runs and why, "<path>: <reason>" (run.json) */
    const char *attention;
} ddp_model;

int64_t ddp_model_num_params(const ddp_model *m);

/* The reference model of docs/model.md on a backend chosen by device. params/grads passed to its callbacks
 * are host memory for CPU and device memory for CUDA. */
ddp_status ddp_refmodel_create(ddp_ctx *ctx, ddp_device dev, int64_t dim, int64_t hidden, int64_t classes,
                               int64_t max_batch_rows, int64_t max_batch_samples, ddp_model *out);

/* The built-in models (docs/model.md, docs/transformer.md): the per-row MLP with mean pooling, and the packed
 * pre-LayerNorm Transformer encoder. ddp_model_config_default() fills the defaults; set dim and classes from the
 * dataset and the workspace limits from the batches the model will see. */
typedef enum { DDP_MODEL_MLP = 0, DDP_MODEL_TRANSFORMER = 1 } ddp_model_kind;

/* The arithmetic of the model's GEMMs (docs/cli.md, --precision). fp32: exact fp32, the reference. tf32: fp32
 * operands rounded to TF32 (10-bit mantissa) by tensor cores, fp32 accumulation. bf16: operands rounded to bf16
 * (8-bit significand), fp32 accumulation and outputs. Everything else (parameters, AdamW, the gradient allreduce,
 * loss, normalisation, attention) stays fp32. tf32 needs the CUDA backend; bf16 also runs on the CPU (oneDNN where
 * built in). */
typedef enum { DDP_PRECISION_FP32 = 0, DDP_PRECISION_TF32 = 1, DDP_PRECISION_BF16 = 2 } ddp_precision;
/* "fp32", "tf32", "bf16" ("?" for another value). */
const char *ddp_precision_name(ddp_precision p);
typedef struct ddp_model_config {
    ddp_model_kind kind;
    int64_t dim, classes;  /* input features D and classes C */
    int64_t hidden;        /* MLP: hidden units H; transformer: model width d (default 64) */
    int layers, heads;     /* transformer: encoder layers L (2), attention heads (4, must divide d) */
    int64_t ff;            /* transformer: FFN width f (0: 2*d) */
    int64_t max_positions; /* transformer: P, the longest sample it takes (512) */
    int positions;         /* transformer: 1 learned positions (default), 0 none (unordered sets) */
    double dropout;        /* transformer: dropout probability (0) */
    int64_t max_batch_rows, max_batch_samples; /* workspace: the largest packed batch */
    ddp_precision precision; /* transformer: the precision it will compute at (default fp32). bf16 stores the
                                activations only GEMMs read (the layernorm and GELU outputs) in bf16 where the
                                backend can (half their memory, the same results); such a model then needs its
                                backend at bf16. MPIDDP_BF16_ACTIVATIONS=0 keeps them fp32. */
} ddp_model_config;

void ddp_model_config_default(ddp_model_config *c);
const char *ddp_model_kind_name(ddp_model_kind k);
/* The hyperparameter checks of a built-in model that need no data (heads divide hidden, ...): DDP_ERR_ARG with one
 * line naming the field as cfg.model_config->FIELD ("cfg.model_config->heads = 3 must divide ..."). ddp_model_create
 * runs them too. */
ddp_status ddp_model_config_check(const ddp_model_config *c);
/* Builds a built-in model on the backend of device (params/grads in its memory). The model keeps a copy of *c:
 * ddp_train reads it (the max_positions check, token budgets, checkpoints, run.json's workspace) and refuses a
 * cfg.model_config that contradicts its hyperparameters (docs/faults.md). */
ddp_status ddp_model_create(ddp_ctx *ctx, ddp_device dev, const ddp_model_config *c, ddp_model *out);

/* ---------------------------------------------------------------- metrics */

/* A set of (name, value) pairs, as returned by a sync point. */
typedef struct {
    int n, cap;
    char **names;
    double *vals;
} ddp_metric_row;

ddp_status ddp_metrics_create(ddp_ctx *ctx, ddp_metrics **out);
void ddp_metrics_destroy(ddp_metrics *m);
/* Threads: ddp_log and ddp_log_rank0 may be called on one ddp_metrics from any number of threads at once (each
 * call is applied whole: no value is lost); ddp_metrics_sync, a collective, runs on the thread that called ddp_init,
 * and reduces what was logged before it began (a value logged meanwhile on another thread counts at the next sync
 * point). ddp_metrics_create and ddp_metrics_destroy are not concurrent with any other call on the object. */
/* Collective sync point: checks that every rank logged the same set of names (else every rank returns
 * DDP_ERR_MISMATCH naming the metric and the ranks — within one round trip, never a hang), then reduces
 * all (sum, count) pairs in one MPI_Allreduce. global receives sum/count per name (nan where no rank logged a
 * count) plus rank-0 values (on rank 0); local (may be NULL) this rank's own sum/count, leaving out a name whose count
 * on this rank is 0 (a rank that evaluated no sample has no value of its own, not 0). The accumulators are cleared. */
ddp_status ddp_metrics_sync(ddp_metrics *m, ddp_metric_row *global, ddp_metric_row *local);
void ddp_metric_row_free(ddp_metric_row *r);
/* Accumulates (sum, count) locally under name; reduced with every rank's at the next sync point. Through a model's
 * metrics (ddp_train's), the names ddp_train logs itself (docs/distributed.md#metrics) are DDP_ERR_ARG. */
ddp_status ddp_log(ddp_metrics *m, const char *name, double sum, double count);
/* A value known on rank 0 only (e.g. throughput); never part of a collective. No-op on other ranks. */
ddp_status ddp_log_rank0(ddp_metrics *m, const char *name, double value);

/* ---------------------------------------------------------------- training */
enum { DDP_LR_CONSTANT = 0, DDP_LR_COSINE = 1, DDP_LR_LINEAR = 2 };
enum { DDP_LR_HORIZON_KEEP = 0, DDP_LR_HORIZON_RESTART = 1 };
typedef struct {
    const char *out_dir;
    int epochs;
    int batch_size;          /* samples per rank per micro-step */
    int64_t batch_rows;      /* > 0: token-budget batches instead (--batch-rows): an optimizer step takes the next
                                samples of the epoch's order within batch_rows x ranks x accumulate rows, split
                                over the ranks by cost; no padding duplicates (docs/distributed.md) */
    int shuffle_block;       /* 1: --shuffle block: permute blocks of consecutive samples, shuffle within windows of
                                blocks (datasets larger than memory read in long sequential runs); 0: full shuffle */
    double shuffle_block_mb; /* features per block, MiB (default 4) */
    int shuffle_window;      /* blocks per window (default 16, at most 64) */
    int accumulate;          /* micro-steps per optimizer step */
    double lr, weight_decay; /* AdamW: lr > 0 (default 1e-3), weight_decay >= 0 (0.01) */
    double beta1, beta2;     /* AdamW: each in [0, 1) (defaults 0.9, 0.999) */
    double eps;              /* AdamW: > 0 (default 1e-8) */
    int lr_schedule;         /* DDP_LR_CONSTANT (default), DDP_LR_COSINE or DDP_LR_LINEAR: after the warmup, lr decays
                                to min_lr over the run's optimizer steps (epochs x the first epoch's steps) */
    double warmup;           /* warmup steps (>= 1), or a fraction in (0, 1) of the run's optimizer steps; 0 none */
    double min_lr;           /* the decay's end value (default 0) */
    int lr_horizon;          /* a resume asking for another horizon than the checkpoint's (another --epochs):
                                DDP_LR_HORIZON_KEEP (default) keeps the recorded schedule, whose lr stays at min_lr
                                past its end; DDP_LR_HORIZON_RESTART starts warmup and decay afresh at the resumed
                                step, over the run's remaining steps (docs/cli.md#extending-a-finished-run) */
    int64_t lr_start_step, lr_end_step; /* lr_end_step > 0: the schedule spans optimizer steps [start, end) instead of
                                 the whole run. A resume sets them from the checkpoint (in ddp_train's own copy) */
    double grad_clip;                   /* global-norm clip; 0 = off */
    uint64_t seed;
    int sampling_shard; /* 0 global, 1 shard */
    int drop_last;
    int log_every; /* optimizer steps between train metric rows */
    int log_per_rank;
    int fast_dev_run; /* >0: that many train and val batches, no checkpoint */
    double bucket_mb; /* gradient bucket size */
    /* seconds (>= 0) a rank waits in any of ddp_train's collectives before failing; 0 = forever. It applies within
     * ddp_train only: the program's own collectives after it (ddp_all_ok, ...) are untimed again. */
    double collective_timeout;
    ddp_device device;
    int progress;            /* print a progress line on rank 0 */
    const char *config_json; /* optional: extra configuration echoed into run.json (a JSON object) */
    int hidden;              /* informational, echoed to run.json */
    /* checkpoints and decisions */
    const char *resume;       /* NULL, "auto" (RUNDIR/checkpoints/last.h5 if present) or a checkpoint path */
    int overwrite;            /* a run directory holding another run's files: remove them first (else refused) */
    int64_t ckpt_every_steps; /* also write last.h5 every N optimizer steps (0: at epoch ends only) */
    const char *monitor;      /* metric the decisions watch (default "val/loss") */
    int mode_max;             /* 1: higher is better */
    int save_top_k;           /* top-k checkpoint files to keep (default 1; 0 none) */
    int ckpt_policy;          /* 0 reduced, 1 rank0, 2 all, 3 any, 4 majority */
    int early_stop_patience;  /* stop after this many epochs without improvement (0: off) */
    double early_stop_min_delta;
    int skip_nonfinite; /* a non-finite gradient skips the update (counted as train/skipped_steps) instead of failing */
    /* optional: a built-in model's kind and hyperparameters, recorded in checkpoints so eval rebuilds the model.
     * NULL: those ddp_model_create kept in the model (none for a model of the program's own); else its kind and
     * hyperparameters must be those the model was created with (else DDP_ERR_ARG naming the field, before anything is
     * written; max_batch_rows, max_batch_samples and precision may differ: the model's own apply) */
    const struct ddp_model_config *model_config;
    ddp_precision precision; /* the GEMMs' arithmetic (default fp32; tf32 needs a CUDA model), recorded in
                                run.json and checkpoints; a resume may change it (parameters are fp32 either way) */
} ddp_train_config;

/* Why a run is asked to stop; a run's requests are OR-ed over the ranks (an agreed stop carries every kind asked). */
enum {
    DDP_STOP_END = 1,    /* end the job: SIGTERM (scancel, preemption), SIGINT (Ctrl-C) */
    DDP_STOP_REQUEUE = 2 /* the time-limit warning (SIGUSR1, SIGUSR2): continue in a requeued job */
};
/* Asks a running ddp_train to stop at the next step boundary: the ranks agree through the step's
 * allreduce, save last.h5 and ddp_train returns DDP_STOPPED. Async-signal-safe (lock-free atomics; callable from a
 * signal handler, any thread or a model's callback). ddp_request_stop() asks DDP_STOP_END; ddp_request_stop_kind
 * adds kind (DDP_STOP_*) to this process's requests. A request is taken by the ddp_train that stops for it: the
 * requests made until the ranks agreed to stop are then spent, and a later ddp_train in the process runs until a
 * newer one. A request that no ddp_train has stopped for yet (made before ddp_train started, e.g. a signal during
 * start-up, or after the last one ended) stops the next ddp_train at its first step. */
void ddp_request_stop(void);
void ddp_request_stop_kind(int kind);
/* Every kind of stop request this process has made so far (DDP_STOP_* bits, 0: none), spent or not; local,
 * async-signal-safe. */
int ddp_stop_requested(void);

void ddp_train_config_default(ddp_train_config *cfg);
/* Checks cfg for a job of `world` ranks (ranges, conflicts, the global batch and budget fit their types):
 * DDP_ERR_ARG with one line naming the field ("cfg.lr = -0.1: must be a positive number"). Local; ddp_train runs it
 * too. */
ddp_status ddp_train_config_check(const ddp_train_config *cfg, int world);
/* Collective. Trains model on train, validates on val after each epoch, writes the run directory. It first checks its
 * arguments on every rank (ddp_train_config_check; model: init, train_step and eval_step set, 1+ tensors with a name,
 * ndim in [1, 4] and shape >= 1; train and val not NULL) and agrees: bad arguments on any rank are DDP_ERR_ARG on
 * every rank, with that rank's line, before anything is written. Then the ranks must hold the same cfg and tensor
 * table: valid values that differ (cfg.lr on one rank) are DDP_ERR_MISMATCH on every rank, naming the first setting
 * that differs ('ddp_train: the ranks were given different cfg.lr (0.001 and 0.002 among them): ...'). Its lines
 * (ddp_last_error) and notices about a setting of cfg name its field, not the CLI's option: a refused run directory
 * (DDP_ERR_BUSY: 'RUN holds a run (run.json): continue it with cfg.resume = "auto", start afresh with a new
 * cfg.out_dir, or set cfg.overwrite = 1
 * ...'), a resume that cannot continue its checkpoint (DDP_ERR_ARG: 'FILE: saved with cfg.seed = 0; this run uses
 * cfg.seed = 5 ...'). A user program
 * that brings its own model (examples/user_model.c is a complete one):
 *
 *     ddp_ctx *ctx;  ddp_init(&argc, &argv, &ctx);
 *     ddp_dataset *tr, *va;  ddp_dataset_open(ctx, "data/train", &tr);  ...
 *     ddp_model m = { .name = "mine", .ntensors = ..., .tensors = ..., .train_step = my_train_step, ... };
 *     ddp_train_config cfg;  ddp_train_config_default(&cfg);  cfg.out_dir = "run";
 *     ddp_status st = ddp_train(ctx, &cfg, &m, tr, va);
 *     if (st) fprintf(stderr, "%s\n", ddp_last_error());
 *     ddp_finalize(ctx);
 */
ddp_status ddp_train(ddp_ctx *ctx, const ddp_train_config *cfg, ddp_model *model, ddp_dataset *train, ddp_dataset *val);

#ifdef __cplusplus
}
#endif
#endif

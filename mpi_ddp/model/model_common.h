/* model_common.h — what the built-in models (model_mlp.c, model_transformer.c) share, private to mpi_ddp/model/: the
 * parameter table (named tensors back to back over one flat buffer), init on the host then one upload, a step's I/O
 * (checking, staging, one download of loss/prob/pred), releasing backend buffers, and a monotonic step clock. */
#ifndef DDP_MODEL_COMMON_H
#define DDP_MODEL_COMMON_H

#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/core/status.h"

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ parameter table */
typedef struct {
    int n;                 /* tensors added so far */
    ddp_tensor_spec *spec; /* [cap], names pointing into `names` */
    char (*names)[64];     /* [cap] */
    int64_t *off;          /* [cap+1] element offsets in the flat buffer; off[n] is the total */
} ddp_param_table;

/* Room for cap tensors (DDP_ERR_NOMEM with the bytes and site otherwise). */
ddp_status ddp_param_table_alloc(ddp_param_table *t, int cap);
/* Appends a tensor of shape [d0] (d1 == 0) or [d0, d1]; returns its index. The caller sized the table. */
int ddp_param_table_add(ddp_param_table *t, const char *name, int64_t d0, int64_t d1);
void ddp_param_table_free(ddp_param_table *t);

/* Writes tensor k's initial values (off[k+1] - off[k] floats) into dst; self is the model. */
typedef void (*ddp_param_fill_fn)(const void *self, int k, float *dst, uint64_t seed);
/* Fills every tensor of t on the host (in params directly on host backends, else in a host copy that is
 * uploaded to params). */
ddp_status ddp_model_init_params(ddp_backend *be, const ddp_param_table *t, float *params, uint64_t seed,
                                 ddp_param_fill_fn fill, const void *self);

/* ------------------------------------------------------------------ a step's I/O */
/* One set of device copies of a batch (device backends). */
typedef struct {
    float *x;
    int64_t *off, *lab;
    int64_t *sid; /* packing only: sample ids [maxB], */
    int64_t *seg; /* the row -> sample map [maxR] followed by the attention tiles [DDP_ATT_TILES_MAX(maxR, maxB)] */
} ddp_io_set;

/* A batch's I/O on the backend. With a staging backend (be->stage, unless MPIDDP_CUDA_PREFETCH=0) batches are
 * uploaded from pinned memory on the copy stream into two sets of device buffers used in turn, and the batch of
 * the next train_step may be uploaded while this one computes (prefetch); else one set, uploaded on the compute
 * stream. */
typedef struct {
    int64_t D, maxR, maxB; /* the workspace: row width, most rows and samples in a batch */
    int packing;           /* also the sample ids and the row -> sample map (the Transformer) */
    void *out;             /* one block on the backend: loss [maxB], prob [maxB], pred [maxB] (int64) */
    float *loss, *prob;    /* into out */
    int64_t *pred;
    void *h_out;              /* host staging of out, same layout (device backends) */
    int64_t *seg_h;           /* packing: the host row -> sample map and tiles of the batch last staged (as seg) */
    ddp_io_set set[2];        /* device copies of the batch (device backends; set[1] only when staged) */
    int staged;               /* 1: uploads through be->stage, two sets */
    int cur;                  /* the set of the batch being computed (-1: none yet) */
    int pf;                   /* the set holding a prefetched batch, -1: none */
    const float *pf_x;        /* the prefetched batch: its buffers and sizes, and a host copy of */
    const int64_t *pf_ptr[3]; /* offsets, labels, sample ids to tell it from any other batch */
    int64_t pf_B, pf_R;
    int64_t *pf_meta;       /* [3 * maxB + 1]: offsets, labels, sample ids */
    ddp_next_batch_fn next; /* ddp_model.prefetch: where the next train_step's batch may be peeked at */
    void *next_arg;
} ddp_model_io;

/* Host synchronisations of one train_step or eval_step on a device backend: the results' download. Staging waits
 * on the host only for a pinned slot whose copy has not landed, which a step's download already ensured, and the
 * timers are read once their events completed (tests/unit/test_cuda_prefetch.c checks it; docs/architecture.md). */
#define DDP_MODEL_HOST_SYNCS_PER_STEP 1

/* The batch as the kernels see it: host pointers on host backends, device copies otherwise. */
typedef struct {
    const float *x;
    const int64_t *off, *lab;
    const int64_t *sid, *seg; /* packing only, */
    const int64_t *tile;      /* with the attention tiles (ddp_packing.tile) */
    int64_t tiles;
} ddp_staged;

/* Allocates io's buffers on be (the batch copies and h_out only on device backends; with packing also the sample
 * ids and the row -> sample map). On failure io holds what was allocated, for ddp_model_io_release. */
ddp_status ddp_model_io_alloc(ddp_backend *be, ddp_model_io *io, int64_t D, int64_t maxR, int64_t maxB, int packing);
/* DDP_ERR_ARG unless the batch fits the workspace and has the model's row width. */
ddp_status ddp_model_io_check(const ddp_model_io *io, const ddp_batch *b);
/* Moves x, offsets and labels (and the packing) to the backend, or takes the prefetched copies when they are of
 * this batch; the compute stream waits for them (no host synchronisation: on the unstaged path the batch stays
 * valid until the step's results are collected). The caller checked the batch (ddp_model_io_check). */
ddp_status ddp_model_io_stage(ddp_backend *be, ddp_model_io *io, const ddp_batch *b, ddp_staged *s);
/* The end of a step's queued work that reads the staged batch: releases its set, then (train steps: prefetch
 * non-zero) uploads the next train_step's batch into the other set when io->next has it ready. Call before
 * ddp_model_io_collect. */
ddp_status ddp_model_io_done(ddp_backend *be, ddp_model_io *io, int prefetch);
/* ddp_model.prefetch of the built-in models: remembers next (NULL: none) for the coming train_step; NULL next
 * also drops a prefetched batch. */
void ddp_model_io_set_next(ddp_model_io *io, ddp_next_batch_fn next, void *arg);
/* The step's per-sample results of B samples into out (one download on device backends). */
ddp_status ddp_model_io_collect(ddp_backend *be, const ddp_model_io *io, int64_t B, ddp_forward_out *out);
void ddp_model_io_release(ddp_backend *be, ddp_model_io *io);

/* Device timers of a train step (be->mark, be->elapsed; read after the results' download): forward from
 * DDP_T_FWD0 to DDP_T_FWD1, backward to DDP_T_BWD1; the Transformer's attention calls take pairs from
 * DDP_T_ATTN0 on. */
enum { DDP_T_FWD0, DDP_T_FWD1, DDP_T_BWD1, DDP_T_ATTN0 };
/* *acc += the seconds from timer k0 to k1 (device backends with timers). */
ddp_status ddp_model_elapsed(ddp_backend *be, int k0, int k1, double *acc);

/* ------------------------------------------------------------------ buffers and timing */
/* Releases the non-NULL ones of n backend buffers. */
void ddp_model_release_all(ddp_backend *be, void *const *bufs, size_t n);
/* Seconds on a monotonic clock. */
double ddp_model_clock(void);

/* A backend buffer of `count` elements of *ptr through the allocation hook (the site is the caller's line);
 * needs `ddp_status st` and a `done:` label, like DDP_TRY. */
#define DDP_MODEL_ALLOC(be, ptr, count)                                    \
    do {                                                                   \
        void *p_;                                                          \
        DDP_TRY(DDP_BE_ALLOC((be), &p_, (size_t)(count) * sizeof *(ptr))); \
        (ptr) = p_;                                                        \
    } while (0)

#endif

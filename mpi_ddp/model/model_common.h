/* model_common.h — what the built-in models (model_mlp.c, model_transformer.c) share, private to
 * mpi_ddp/model/: the parameter table (named tensors back to back over one flat buffer), parameter init drawn
 * on the host then uploaded, a step's I/O on the backend (checking and staging a batch, the loss/prob/pred
 * block collected with one download), releasing backend buffers, and a monotonic clock for step timings. */
#ifndef DDP_MODEL_COMMON_H
#define DDP_MODEL_COMMON_H

#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/core/status.h"

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ parameter table */
typedef struct {
    int n;                    /* tensors added so far */
    ddp_tensor_spec *spec;    /* [cap], names pointing into `names` */
    char (*names)[64];        /* [cap] */
    int64_t *off;             /* [cap+1] element offsets in the flat buffer; off[n] is the total */
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
typedef struct {
    int64_t D, maxR, maxB;    /* the workspace: row width, most rows and samples in a batch */
    void *out;                /* one block on the backend: loss [maxB], prob [maxB], pred [maxB] (int64) */
    float *loss, *prob;       /* into out */
    int64_t *pred;
    void *h_out;              /* host staging of out, same layout (device backends) */
    float *x_dev;             /* device copies of the batch (device backends) */
    int64_t *off_dev, *lab_dev;
} ddp_model_io;

/* The batch as the kernels see it: host pointers on host backends, device copies otherwise. */
typedef struct {
    const float *x;
    const int64_t *off, *lab;
} ddp_staged;

/* Allocates io's buffers on be (the batch copies and h_out only on device backends). On failure io holds
 * what was allocated, for ddp_model_io_release. */
ddp_status ddp_model_io_alloc(ddp_backend *be, ddp_model_io *io, int64_t D, int64_t maxR, int64_t maxB);
/* DDP_ERR_ARG unless the batch fits the workspace and has the model's row width. */
ddp_status ddp_model_io_check(const ddp_model_io *io, const ddp_batch *b);
/* Moves x, offsets and labels to the backend (no host synchronisation: the batch stays valid until the step's
 * results are collected). The caller checked the batch (ddp_model_io_check). */
ddp_status ddp_model_io_stage(ddp_backend *be, ddp_model_io *io, const ddp_batch *b, ddp_staged *s);
/* The step's per-sample results of B samples into out (one download on device backends). */
ddp_status ddp_model_io_collect(ddp_backend *be, const ddp_model_io *io, int64_t B, ddp_forward_out *out);
void ddp_model_io_release(ddp_backend *be, ddp_model_io *io);

/* ------------------------------------------------------------------ buffers and timing */
/* Releases the non-NULL ones of n backend buffers. */
void ddp_model_release_all(ddp_backend *be, void *const *bufs, size_t n);
/* Seconds on a monotonic clock. */
double ddp_model_clock(void);

/* A backend buffer of `count` elements of *ptr through the allocation hook (the site is the caller's line);
 * needs `ddp_status st` and a `done:` label, like DDP_TRY. */
#define DDP_MODEL_ALLOC(be, ptr, count)                                                            \
    do {                                                                                           \
        void *p_;                                                                                  \
        DDP_TRY(DDP_BE_ALLOC((be), &p_, (size_t)(count) * sizeof *(ptr)));                         \
        (ptr) = p_;                                                                                \
    } while (0)

#endif

/* finite.h — finding NaN and Inf features: a vectorisable scan of a shard's mapped features (or of bounded blocks
 * read through HDF5) that names the shard, the row and column of 'features' and the sample; for `inspect`,
 * `train --check-finite` (ddp_dataset_check_finite, dataset.h) and the diagnosis of a non-finite gradient. */
#ifndef DDP_FINITE_H
#define DDP_FINITE_H

#include "io/dataset.h"

/* What a scan found. */
typedef struct {
    int64_t values;  /* non-finite floats */
    int64_t samples; /* samples holding at least one */
    int64_t row;     /* the first: row of 'features' (-1: none), its column, sample (index in the shard) and id */
    int64_t col, sample, id;
    float value;
} ddp_finite_scan;

/* Index of the first NaN or Inf in x[0..n), or -1. Reads each float once, in blocks the compiler vectorises. */
int64_t ddp_first_nonfinite(const float *x, int64_t n);
/* Scans the features of shard s of the dataset in dir (opened here if it is not, and closed again; mapped pages
 * are dropped as the scan passes them, so memory stays bounded for shards larger than RAM). all = 0 stops at the
 * first non-finite value. */
ddp_status ddp_shard_scan_finite(ddp_shard *s, const char *dir, int all, ddp_finite_scan *r);
/* Records the one-line error for r (r->values > 0) of shard s in dir: "DIR/FILE: dataset 'features'[row R, column
 * C]: nan in sample I (id X)", and DDP_ERR_FORMAT. */
ddp_status ddp_finite_error(const char *dir, const ddp_shard *s, const ddp_finite_scan *r);
/* `inspect`: scans every shard of a validated dataset (metas from ddp_dataset_scan); serial, no MPI. Fails with
 * the first non-finite value, naming it, and the totals of the whole dataset. */
ddp_status ddp_dataset_scan_finite(const char *dir, const ddp_shard_meta *metas, int64_t nshards);
/* (dataset.c) Rows [0, nrows) of sample `index` of ds (dim floats each) hold a non-finite value: its position as a scan
 * result with row relative to the shard, for ddp_finite_error. Returns 0 when every value is finite. */
int ddp_sample_nonfinite(ddp_dataset *ds, int64_t index, const float *rows, int64_t nrows, ddp_shard **shard,
                         ddp_finite_scan *r);

#endif

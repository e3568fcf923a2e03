/* metrics.h — metric accumulation and the batched, name-checked reduction at sync points, plus the
 * metrics CSV writer (metrics.csv on rank 0, metrics_rank<R>.csv per rank). */
#ifndef DDP_METRICS_H
#define DDP_METRICS_H

#include "mpi_ddp/core/ctx.h"

/* Index of name in r, or -1. */
int ddp_row_find(const ddp_metric_row *r, const char *name);
/* Sets (or adds) name = v; DDP_ERR_NOMEM leaves r as it was. Its allocations are the caller's site (file:line) for
 * the allocation-failure hook (MPIDDP_TEST_FAIL_ALLOC), so that each use can be failed on its own. */
ddp_status ddp_row_set_at(ddp_metric_row *r, const char *name, double v, const char *file, int line);
#define ddp_row_set(r, name, v) ddp_row_set_at((r), (name), (v), __FILE__, __LINE__)
void ddp_row_clear(ddp_metric_row *r);

/* Makes m the trainer's accumulator: ddp_log and ddp_log_rank0 refuse the names ddp_train logs itself (DDP_ERR_ARG
 * naming it), which the trainer logs through ddp_log_own and ddp_log_rank0_own. */
void ddp_metrics_reserve_builtin(ddp_metrics *m);
ddp_status ddp_log_own(ddp_metrics *m, const char *name, double sum, double count);
ddp_status ddp_log_rank0_own(ddp_metrics *m, const char *name, double value);

/* Number of names currently accumulated (collective + rank-0). */
int ddp_metrics_pending(ddp_metrics *m);
/* The count over all ranks of a collective metric (ddp_log) at the last sync point: 0 when no rank logged a sample
 * for it (its global value is nan); -1 when the last sync point had no such collective metric. */
double ddp_metrics_count(const ddp_metrics *m, const char *name);

/* v as the metric files write it: %.<digits>g, and nan, inf, -inf for the non-finite (printf's "-nan" is not a
 * number Python, pandas or awk read back). Returns buf. */
const char *ddp_fmt_value(char *buf, size_t n, double v, int digits);

typedef struct ddp_csv ddp_csv;
/* rank >= 0 adds a `rank` column holding that value. `first` lists columns in their preferred order.
 * keep_upto_step >= 0 (resume): an existing file's columns (all of them, in its order) and its rows with step <=
 * keep_upto_step are kept (rows logged
 * after the checkpoint would be logged again), except, with drop_val_at_keep, rows at keep_upto_step that hold val/
 * columns (the resumed run validates at that step again); -1 starts a new file. */
ddp_status ddp_csv_open(const char *path, int rank, const char *const *first, int nfirst, int64_t keep_upto_step,
                        int drop_val_at_keep, ddp_csv **out);
/* A column for name from the next row on (its cells blank where a row has no value), unless it has one. */
ddp_status ddp_csv_add_column(ddp_csv *c, const char *name);
ddp_status ddp_csv_write(ddp_csv *c, int64_t epoch, int64_t step, const ddp_metric_row *row);
void ddp_csv_close(ddp_csv *c);

#endif

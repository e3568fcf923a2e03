/* loader.h — packed batch assembly with one batch of look-ahead: while a step computes, a worker thread copies the
 * next batch's rows out of the mapped shards, faulting its pages in (what the kernel reads ahead beyond: readahead.h).
 * Datasets that need HDF5 reads are assembled in the caller's thread, since HDF5 is not thread-safe. */
#ifndef DDP_LOADER_H
#define DDP_LOADER_H

#include "io/dataset.h"
#include "io/sampler.h"

typedef struct ddp_loader ddp_loader;

ddp_status ddp_loader_create(ddp_dataset *ds, ddp_sampler *sm, int threaded, ddp_loader **out);
void ddp_loader_destroy(ddp_loader *ld);
/* Starts epoch at first_step (resume) and begins assembling it. */
ddp_status ddp_loader_start_epoch(ddp_loader *ld, int64_t epoch, int64_t first_step);
/* The batch of `step` (steps must be taken in order); valid until the next call. */
ddp_status ddp_loader_next(ddp_loader *ld, int64_t step, const ddp_batch **out);
/* The batch of `step` when it is already assembled (the step after the last ddp_loader_next's), else NULL; never
 * waits. It stays valid until the ddp_loader_next after the one for `step`. */
const ddp_batch *ddp_loader_peek(ddp_loader *ld, int64_t step);
/* The dataset the loader reads (a diagnosis re-reads a step's samples from it). */
ddp_dataset *ddp_loader_dataset(const ddp_loader *ld);
/* The next batch for ddp_model.prefetch (a ddp_next_batch_fn over a cursor): ddp_loader_peek of its step, NULL
 * when step is -1 (past the epoch). */
typedef struct {
    ddp_loader *ld;
    int64_t step;
} ddp_loader_cursor;
const ddp_batch *ddp_loader_peek_cursor(void *cursor);
/* Largest batch in rows this loader can return. */
int64_t ddp_loader_max_rows(const ddp_loader *ld);

#endif

/* readahead.h — what the batch loader asks the kernel to read before it is needed: with the full shuffle,
 * the next batch's samples (madvise WILLNEED); with --shuffle block, the current and next two windows' blocks,
 * each a sequential run of a shard, populated by a thread of their own (MADV_POPULATE_READ). */
#ifndef DDP_READAHEAD_H
#define DDP_READAHEAD_H

#include "io/dataset.h"
#include "io/sampler.h"

typedef struct ddp_readahead ddp_readahead;

/* threaded: the loader assembles batches on a worker thread (read-ahead is only worth it then). */
ddp_status ddp_readahead_create(ddp_dataset *ds, const ddp_sampler *sm, int threaded, ddp_readahead **out);
/* Called after the batch of `step` is assembled, on the thread that assembles batches. NULL: nothing. */
void ddp_readahead_after(ddp_readahead *ra, int64_t step);
/* Stops the populating thread; call after the last ddp_readahead_after has returned. NULL is a no-op. */
void ddp_readahead_destroy(ddp_readahead *ra);

#endif

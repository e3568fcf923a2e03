/* grad_diag.h — what stops a run whose reduced gradient is not finite: every rank re-reads the samples of its
 * micro-batches of that step, and the one-line error names the first non-finite feature (file, row, column,
 * sample, global index) or says that the data is finite and the cause is elsewhere. */
#ifndef DDP_GRAD_DIAG_H
#define DDP_GRAD_DIAG_H

#include "io/dataset.h"
#include "io/sampler.h"
#include "mpi_ddp/core/ctx.h"

/* Collective, on the error path of a non-finite gradient (every rank sees the same reduced gradient). sm: the
 * training order over ds (the loader's dataset; NULL: not looked at); micro-batches [first_mb, last_mb) of the
 * epoch made the step (first_mb < 0 counts from 0). Sets the shared error "non-finite gradient at step STEP in
 * parameter 'PARAM'..." and returns DDP_ERR_NUMERIC. */
ddp_status ddp_grad_nonfinite_error(ddp_ctx *ctx, const ddp_sampler *sm, ddp_dataset *ds, int64_t first_mb,
                                    int64_t last_mb, int64_t step, const char *param);

#endif

/* grad_diag.c — is a non-finite gradient's cause in the data? Re-reads each rank's samples of the step (their
 * shards are open: the loader read them) and names the first NaN/Inf feature; see grad_diag.h. */
#include "mpi_ddp/train/grad_diag.h"

#include "io/dataset.h"
#include "io/finite.h"
#include "mpi_ddp/comm/watchdog.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/optname.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* This rank's samples of micro-batches [lo, hi): how many hold a non-finite feature; the first is named in
 * `first` (one line). */
static ddp_status scan_steps(ddp_ctx *ctx, ddp_dataset *ds, const ddp_sampler *sm, int64_t lo, int64_t hi, int64_t *bad,
                             char *first, size_t n)
{
    int64_t *idx = ddp_calloc((size_t)sm->max_samples + 1, sizeof *idx);
    uint8_t *pad = ddp_calloc((size_t)sm->max_samples + 1, 1);
    float *scratch = ddp_malloc((size_t)(ds->info.max_sample_rows * ds->info.dim), sizeof *scratch);
    ddp_status st = idx && pad && scratch ? DDP_OK
                                          : ddp_set_error(DDP_ERR_NOMEM, "out of memory re-reading the step's samples");
    for (int64_t k = lo; st == DDP_OK && k < hi; k++) {
        int64_t cnt = 0;
        st = ddp_sampler_batch(sm, k, idx, pad, &cnt);
        for (int64_t i = 0; st == DDP_OK && i < cnt; i++) {
            const float *rows;
            int64_t nr;
            ddp_shard *sh;
            ddp_finite_scan r;
            st = ddp_dataset_sample(ds, idx[i], scratch, &rows, &nr, NULL, NULL);
            if (st != DDP_OK || !ddp_sample_nonfinite(ds, idx[i], rows, nr, &sh, &r)) continue;
            if ((*bad)++ == 0) {
                ddp_finite_error(ds->dir, sh, &r);
                snprintf(first, n, "%s, global index %lld, on rank %d", ddp_last_error(), (long long)idx[i],
                         ctx->topo.rank);
            }
        }
    }
    free(idx);
    free(pad);
    free(scratch);
    return st;
}

ddp_status ddp_grad_nonfinite_error(ddp_ctx *ctx, const ddp_sampler *sm, ddp_dataset *ds, int64_t first_mb,
                                    int64_t last_mb, int64_t step, const char *param)
{
    int64_t bad = 0, checked = ds != NULL;
    char first[900] = "";
    ddp_status st = ds ? scan_steps(ctx, ds, sm, first_mb < 0 ? 0 : first_mb, last_mb, &bad, first, sizeof first)
                       : DDP_OK;
    /* samples found, ranks that could not look, ranks whose look failed (out of memory, a read error): a failure is
     * agreed below on every rank, never left to its rank alone while the others said the data was finite */
    int64_t v[3] = {bad, checked ? 0 : 1, st != DDP_OK};
    DDP_CHECK(ddp_allreduce(ctx, v, 3, MPI_INT64_T, MPI_SUM, "the non-finite gradient diagnosis"));
    if (v[0] == 0 && v[2] == 0) { /* the same line on every rank */
        int cli = ctx->cli_names;
        char skip[64], fp32[64];
        ddp_opt_set(skip, sizeof skip, cli, DDP_OPT_SKIP_NONFINITE, NULL);
        ddp_opt_set(fp32, sizeof fp32, cli, DDP_OPT_PRECISION, "fp32");
        if (v[1])
            ddp_set_error(DDP_ERR_NUMERIC,
                          "non-finite gradient at step %lld in parameter '%s' (check the data with mpiddp inspect, "
                          "and %s; %s skips such steps)",
                          (long long)step, param, ddp_opt_name(cli, DDP_OPT_LR), skip);
        else
            ddp_set_error(DDP_ERR_NUMERIC,
                          "non-finite gradient at step %lld in parameter '%s'; every feature of the step's samples is "
                          "finite, so the cause is not in the data (too high a %s, an overflow: try a lower %s, "
                          "%s or %s; %s skips such steps)",
                          (long long)step, param, ddp_opt_name(cli, DDP_OPT_LR), ddp_opt_name(cli, DDP_OPT_LR),
                          ddp_opt_name(cli, DDP_OPT_GRAD_CLIP), fp32, skip);
        ddp_mark_error_shared();
        return DDP_ERR_NUMERIC;
    }
    char skip[64];
    /* train --check-finite has no C-API counterpart: a program is pointed at mpiddp inspect (installed with it) */
    if (st == DDP_OK && bad)
        st = ddp_set_error(DDP_ERR_NUMERIC,
                           "non-finite gradient at step %lld in parameter '%s', from the data: %s; %lld sample(s) of "
                           "the step hold non-finite features (%smpiddp inspect finds them before training; %s skips "
                           "such steps)",
                           (long long)step, param, first, (long long)v[0], ctx->cli_names ? "--check-finite or " : "",
                           ddp_opt_set(skip, sizeof skip, ctx->cli_names, DDP_OPT_SKIP_NONFINITE, NULL));
    return ddp_agree_status(ctx, st); /* the lowest rank that found one (or failed to look) speaks for all */
}

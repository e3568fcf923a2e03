/* capi_misuse_comm.c — capi_misuse's cases finalize_twice and timeout: a context after ddp_finalize, and after a
 * collective timeout (the rest of the program is capi_misuse.c). */
#include "capi_misuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Cases finalize_twice and timeout (sh/capi_misuse.sh runs them apart from the others).
 * finalize_twice: a context used after ddp_finalize (its memory freed) is refused, DDP_ERR_ARG, never touched.
 * timeout: the last rank stops itself as ddp_train starts (MPIDDP_TEST_STOP_SELF_AT_START, set by the script);
 * the others time out (cfg.collective_timeout 1), and then every collective on that context fails at once naming
 * the timeout (no second wait, no collective out of step), and ddp_finalize returns instead of waiting in
 * MPI_Finalize for the stopped rank. The program then exits 0 unless a check failed (mpirun ends the job).
 * With MPIDDP_TEST_DEVICE=cuda the model is the built-in MLP on DDP_DEVICE_CUDA (the host emulator in the tests):
 * the script makes an NCCL allreduce hang instead (MPIDDP_EMU_NCCL_FAULT), so the timeout is the NCCL wait's.
 * timeout_after_train: ddp_train with cfg.collective_timeout 1 succeeds; then the last rank works 3 s on its own and
 * ddp_all_ok must still succeed on every rank (the timeout is ddp_train's, not the context's), ddp_finalize DDP_OK. */
int comm_cases(int argc, char **argv, const char *trd, const char *vad, const char *work)
{
    ddp_ctx *ctx = NULL;
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) {
        fprintf(stderr, "init: %s\n", ddp_last_error());
        return 3;
    }
    g_rank = ddp_topo(ctx)->rank;
    int all = 0, size = ddp_topo(ctx)->size;
    if (!strcmp(g_case, "finalize_twice")) {
        expect("ddp_finalize", ddp_finalize(ctx), DDP_OK, NULL);
        expect("ddp_finalize again", ddp_finalize(ctx), DDP_ERR_ARG, "ddp_finalize: ctx is not a live context");
        expect("ddp_all_ok(finalized ctx)", ddp_all_ok(ctx, 1, &all), DDP_ERR_ARG, "not a live context");
        expect("ddp_agree_status(finalized ctx)", ddp_agree_status(ctx, DDP_OK), DDP_ERR_ARG, "not a live context");
        ddp_metrics *mt = NULL;
        expect("ddp_metrics_create(finalized ctx)", ddp_metrics_create(ctx, &mt), DDP_ERR_ARG, "not a live context");
        if (ddp_topo(ctx) != NULL) expect("ddp_topo(finalized ctx) is NULL", DDP_ERR_INTERNAL, DDP_OK, NULL);
        return g_failed;
    }
    ddp_dataset *tr = NULL, *va = NULL;
    expect("ddp_dataset_open(train)", ddp_dataset_open(ctx, trd, &tr), DDP_OK, NULL);
    expect("ddp_dataset_open(val)", ddp_dataset_open(ctx, vad, &va), DDP_OK, NULL);
    ddp_model m = user_model(tr);
    if (!strcmp(g_case, "timeout_after_train")) {
        ddp_train_config cfg = base_cfg(work, "after");
        cfg.collective_timeout = 1;
        expect("ddp_train(collective_timeout 1)", ddp_train(ctx, &cfg, &m, tr, va), DDP_OK, NULL);
        if (g_rank == size - 1) sleep(3); /* slow but alive, outside ddp_train */
        expect("ddp_all_ok after ddp_train, one rank 3 s late", ddp_all_ok(ctx, 1, &all), DDP_OK, NULL);
        ddp_dataset_close(tr);
        ddp_dataset_close(va);
        expect("ddp_finalize", ddp_finalize(ctx), DDP_OK, NULL);
        return g_failed;
    }
    const char *dev = getenv("MPIDDP_TEST_DEVICE");
    int cuda = dev && !strcmp(dev, "cuda");
    if (cuda) { /* the NCCL path: the built-in MLP on the GPU */
        ddp_device got = DDP_DEVICE_CPU;
        expect("ddp_select_device_all(cuda)", ddp_select_device_all(ctx, DDP_DEVICE_CUDA, &got, NULL), DDP_OK, NULL);
        ddp_model_config mc;
        ddp_model_config_default(&mc);
        const ddp_dataset_info *ti = ddp_dataset_get_info(tr), *vi = ddp_dataset_get_info(va);
        mc.dim = ti->dim;
        mc.classes = ti->num_classes;
        mc.max_batch_samples = 8;
        mc.max_batch_rows = 8 * (ti->max_sample_rows > vi->max_sample_rows ? ti->max_sample_rows : vi->max_sample_rows);
        expect("ddp_model_create(cuda)", ddp_model_create(ctx, DDP_DEVICE_CUDA, &mc, &m), DDP_OK, NULL);
    }
    ddp_train_config cfg = base_cfg(work, "stall");
    cfg.collective_timeout = 1;
    cfg.epochs = 50;
    expect(cuda ? "ddp_train(an NCCL allreduce hangs)" : "ddp_train(the last rank stopped)",
           ddp_train(ctx, &cfg, &m, tr, va), DDP_ERR_MISMATCH, "collective timeout: rank");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    expect("ddp_all_ok after the timeout", ddp_all_ok(ctx, 1, &all), DDP_ERR_MISMATCH,
           "ddp_all_ok: no collective can run on this ctx after an earlier collective timeout");
    expect("ddp_agree_status after the timeout", ddp_agree_status(ctx, DDP_OK), DDP_ERR_MISMATCH,
           "collective timeout: rank");
    expect("ddp_train after the timeout", ddp_train(ctx, &cfg, &m, tr, va), DDP_ERR_MISMATCH,
           "ddp_train: no collective can run on this ctx");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    expect(took < 0.5 ? "the calls after the timeout failed at once" : "the calls after the timeout waited",
           took < 0.5 ? DDP_OK : DDP_ERR_INTERNAL, DDP_OK, NULL);
    expect("the errors after the timeout are this rank's own", ddp_error_shared() ? DDP_ERR_INTERNAL : DDP_OK, DDP_OK,
           NULL);
    if (cuda && m.destroy) m.destroy(m.self);
    ddp_dataset_close(tr);
    ddp_dataset_close(va);
    expect("ddp_finalize after the timeout", ddp_finalize(ctx), DDP_ERR_MISMATCH, "ddp_finalize: MPI not finalized");
    expect("ddp_finalize again", ddp_finalize(ctx), DDP_ERR_ARG, "not a live context");
    fprintf(stderr, "done rank %d\n", g_rank);
    /* the first rank to exit unfinalized makes mpirun end the others: each waits (a file each, not MPI) until every
     * rank that timed out has printed its checks */
    char p[4300];
    snprintf(p, sizeof p, "%s/done.%d", work, g_rank);
    FILE *f = fopen(p, "w");
    if (f) fclose(f);
    for (int r = 0, tries = 0; r < size - 1 && tries < 600; tries++) {
        snprintf(p, sizeof p, "%s/done.%d", work, r);
        if (access(p, F_OK) == 0)
            r++;
        else
            usleep(50000);
    }
    return g_failed;
}

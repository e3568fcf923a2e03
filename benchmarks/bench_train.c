/* bench_train.c — training throughput of mpiddp's models (samples/s, rows/s, a per-step breakdown, GFLOP/s, peak RSS)
 * beside PyTorch DDP (run_train.sh: the MLP and peers/torch_ddp.py; run_tx.sh: the encoder and peers/torch_tx.py). */
#include "io/dataset.h"
#include "io/loader.h"
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/model/models.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/comm/comm.h"
#include "mpi_ddp/comm/sync.h"
#include "mpi_ddp/train/plan.h"
#include "mpiddp.h"
#include "bench_util.h"

#include <cblas.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define DIE(...)                                      \
    do {                                              \
        fprintf(stderr, "bench_train: " __VA_ARGS__); \
        fprintf(stderr, ": %s\n", ddp_last_error());  \
        MPI_Abort(MPI_COMM_WORLD, 1);                 \
    } while (0)

/* one fp32 GEMM [M x H] x [H x H]^T: the backend's gemm (openblas 0: on the CPU, oneDNN's matmul where it picks it)
 * or OpenBLAS's sgemm itself (openblas 1) */
static void ref_gemm(ddp_backend *be, int openblas, int64_t M, int64_t H, const float *a, const float *b, float *c)
{
    if (openblas)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)H, (int)H, 1.0f, a, (int)H, b, (int)H, 0.0f,
                    c, (int)H);
    else
        be->gemm(be, 0, 1, M, H, H, 1.0f, a, H, b, H, 0.0f, c, H);
}

/* The reference GEMM rate at the shapes the model runs, [rows x H] x [H x H]: the best of the backend's gemm and
 * (CPU) OpenBLAS's sgemm, i.e. the best in-process GEMM rate at the run's precision (at fp32: oneDNN or OpenBLAS;
 * at bf16 the backend's gemm is the bf16 one), each the best of three 0.2 s windows (other ranks share the cores). */
static double sgemm_gflops(ddp_backend *be, int64_t M, int64_t H)
{
    float *a = calloc((size_t)(M * H), 4), *b = calloc((size_t)(H * H), 4), *c = calloc((size_t)(M * H), 4);
    for (int64_t i = 0; i < M * H; i++) a[i] = (float)(i % 7) * 0.1f;
    for (int64_t i = 0; i < H * H; i++) b[i] = (float)(i % 5) * 0.1f;
    double best = 0;
    for (int openblas = 0; openblas < 2; openblas++) {
        ref_gemm(be, openblas, M, H, a, b, c); /* warm */
        for (int round = 0; round < 3; round++) {
            int reps = 0;
            double t0 = now_s(), t;
            do {
                ref_gemm(be, openblas, M, H, a, b, c);
                reps++;
            } while ((t = now_s() - t0) < 0.2);
            double r = 2.0 * (double)M * (double)H * (double)H * reps / t / 1e9;
            if (r > best) best = r;
        }
    }
    free(a), free(b), free(c);
    return best;
}

/* The MLP, or with --model transformer the Transformer encoder, whose breakdown adds attention and GEMM time. The
 * breakdown: data wait, forward, backward, gradient sync wait, optimizer; GFLOP/s against the sgemm rate measured in
 * the same process. One row per run appended to --csv by rank 0; the run_*.sh scripts report the ratios to the peer.
 * Before the timed steps an untimed pass reads every sample once, so the whole dataset is mapped: the steady state of
 * training after its first epochs, as the peer holds its data in memory. --cold 1 skips it and times first-touch page
 * faults too. The steps run on into further epochs when they outnumber one epoch's.
 *   mpirun -np R bench_train --data DIR --hidden H [--batch 64] [--steps N] [--warmup W] [--cold 0|1] [--csv FILE]
 *   mpirun -np R bench_train --data DIR --model transformer --hidden d --layers L --heads N [--ff f] [--lens LABEL]
 *                            [--batches-out PREFIX] ...
 * --batches-out (run_tx.sh): rank r writes PREFIX.r<r>, one line of global sample indices per step, which the PyTorch
 * peer trains on, so both see the same batches. --precision fp32|tf32|bf16 (default fp32): the GEMMs' arithmetic, as
 * mpiddp train --precision; tf32 and bf16 need --device cuda, except the CPU's bf16 where the backend has it. Also
 * --device cpu|cuda, --bucket-mb M, --batch-rows N, --shuffle block with --shuffle-block-mb and --shuffle-window. */
#define USAGE                                                                                                         \
    "usage: mpirun -np R bench_train --data DIR --hidden H [--model mlp|transformer] [--layers L] [--heads N] [--ff " \
    "F]\n"                                                                                                            \
    "         [--batch B | --batch-rows N] [--steps N] [--warmup W] [--cold 0|1] [--csv FILE] [--device cpu|cuda]\n"  \
    "         [--precision fp32|tf32|bf16] [--bucket-mb M] [--shuffle full|block] [--shuffle-block-mb M]\n"           \
    "         [--shuffle-window W] [--lens LABEL] [--batches-out PREFIX]   (benchmarks/bench_train.c says what each " \
    "does)"
int main(int argc, char **argv)
{
    ddp_ctx *ctx;
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) return 1;
    const char *data = NULL, *csv = "train_raw.csv", *device = "cpu", *model = "mlp", *lens = "", *bout = NULL,
               *prec = "fp32";
    int64_t H = 64, B = 64, steps = 50, warmup = 5, cold = 0, L = 2, heads = 4, ff = 0, brows = 0, block = 0,
            window = 16;
    double block_mb = 4.0, bucket_mb = 25.0;
    const ddp_topology *t = ddp_topo(ctx);
    const int say = t->rank == 0;
    int bad = 0;
    if (bench_help(argc, argv, USAGE, say)) {
        ddp_finalize(ctx);
        return 0;
    }
#define P "bench_train"
    for (int i = 1; i < argc && !bad; i += 2) { /* a bad value or option: one line, exit 2 on every rank */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            bad = bench_bad_option(P, a, 0, say);
        else if (!strcmp(a, "--data"))
            data = v;
        else if (!strcmp(a, "--hidden"))
            bad = bench_int(P, a, v, 1, 1 << 16, &H, say);
        else if (!strcmp(a, "--batch"))
            bad = bench_int(P, a, v, 1, 1 << 24, &B, say);
        else if (!strcmp(a, "--steps"))
            bad = bench_int(P, a, v, 0, (int64_t)1 << 40, &steps, say);
        else if (!strcmp(a, "--warmup"))
            bad = bench_int(P, a, v, 0, 1 << 30, &warmup, say);
        else if (!strcmp(a, "--cold"))
            bad = bench_int(P, a, v, 0, 1, &cold, say);
        else if (!strcmp(a, "--csv"))
            csv = v;
        else if (!strcmp(a, "--device"))
            device = v;
        else if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--layers"))
            bad = bench_int(P, a, v, 1, 1024, &L, say);
        else if (!strcmp(a, "--heads"))
            bad = bench_int(P, a, v, 1, 1024, &heads, say);
        else if (!strcmp(a, "--ff"))
            bad = bench_int(P, a, v, 0, 1 << 20, &ff, say);
        else if (!strcmp(a, "--lens"))
            lens = v;
        else if (!strcmp(a, "--batches-out"))
            bout = v;
        else if (!strcmp(a, "--batch-rows"))
            bad = bench_int(P, a, v, 0, (int64_t)1 << 40, &brows, say);
        else if (!strcmp(a, "--shuffle"))
            bad = bench_choice(P, a, v, "full|block", say), block = !strcmp(v, "block");
        else if (!strcmp(a, "--shuffle-block-mb"))
            bad = bench_num(P, a, v, 0, 1e6, &block_mb, say);
        else if (!strcmp(a, "--shuffle-window"))
            bad = bench_int(P, a, v, 1, 1 << 20, &window, say);
        else if (!strcmp(a, "--bucket-mb"))
            bad = bench_num(P, a, v, 0, 1e6, &bucket_mb, say);
        else if (!strcmp(a, "--precision"))
            prec = v;
        else
            bad = bench_bad_option(P, a, 1, say);
    }
    if (!bad) bad = bench_choice(P, "--model", model, "mlp|transformer", say);
    if (!bad) bad = bench_choice(P, "--device", device, "cpu|cuda", say);
#undef P
    if (bad) {
        ddp_finalize(ctx);
        return 2;
    }
    int tx = !strcmp(model, "transformer");
    ddp_device dev = !strcmp(device, "cuda") ? DDP_DEVICE_CUDA : DDP_DEVICE_CPU;
    if (dev == DDP_DEVICE_CUDA && ddp_select_device(ctx, DDP_DEVICE_CUDA, NULL, NULL) != DDP_OK) DIE("--device cuda");
    if (!data) {
        if (t->rank == 0) fprintf(stderr, "bench_train: --data is required (bench_train --help lists the options)\n");
        ddp_finalize(ctx);
        return 2;
    }
    ddp_dataset *ds;
    if (ddp_dataset_open(ctx, data, &ds) != DDP_OK) DIE("open %s", data);
    ddp_model_config mc;
    ddp_model_config_default(&mc);
    mc.kind = tx ? DDP_MODEL_TRANSFORMER : DDP_MODEL_MLP;
    mc.dim = ds->info.dim, mc.classes = ds->info.num_classes, mc.hidden = H, mc.layers = (int)L, mc.heads = (int)heads;
    mc.ff = ff;
    if (ff <= 0) ff = 2 * H;
    ddp_sampler sm;
    if (ddp_sampler_init(&sm, DDP_SAMPLE_GLOBAL, ds->info.num_samples, t->size, t->rank, 1, 0, B, NULL, 0, 0) != DDP_OK)
        DIE("sampler");
    int32_t *rowcounts = NULL;
    if ((brows > 0 || block) && ddp_dataset_row_counts(ctx, ds, &rowcounts) != DDP_OK) DIE("row counts");
    if (block) { /* --shuffle block: the trainer's block shuffle, with window read-ahead in the loader */
        int64_t *first = calloc((size_t)ds->nshards + 1, sizeof *first);
        for (int64_t k = 0; k < ds->nshards; k++) first[k] = ds->shards[k].meta.first;
        first[ds->nshards] = ds->info.num_samples;
        if (ddp_sampler_set_blocks(&sm, rowcounts, ds->info.dim, first, ds->nshards, block_mb * 1048576.0, window) !=
            DDP_OK)
            DIE("--shuffle block");
        free(first);
    }
    if (brows > 0) { /* token budgets: the trainer's --batch-rows path (split by cost, no padding) */
        if (ddp_sampler_set_budget(&sm, brows, 1, rowcounts, ds->info.max_sample_rows, ddp_model_cost_sq(&mc)) !=
            DDP_OK)
            DIE("--batch-rows");
        B = sm.max_samples; /* the model's workspace in samples */
    }
    if (ddp_sampler_set_epoch(&sm, 0) != DDP_OK) DIE("epoch");
    if (steps == 0) { /* --steps 0: exactly one epoch, timed from its first step (a cold epoch: --cold 1 --warmup 0) */
        steps = sm.steps - warmup;
        if (steps < 1)
            DIE("--steps 0 with --warmup %lld: the epoch has %lld steps", (long long)warmup, (long long)sm.steps);
    }
    int64_t plan_rows = 0, plan_samples = 0; /* as mpiddp train: the workspace of the largest batch the steps read */
    int plan = 0;
    if (ddp_plan_agree(ctx, dev, &plan) != DDP_OK) DIE("plan");
    if (plan) {
        if (!rowcounts && ddp_dataset_row_counts(ctx, ds, &rowcounts) != DDP_OK) DIE("row counts");
        /* the steps the timed loop reads, epoch after epoch; before the loader's thread reads sm */
        if (ddp_plan_walk(&sm, rowcounts, 0, warmup + steps, &plan_rows, &plan_samples) != DDP_OK ||
            ddp_sampler_set_epoch(&sm, 0) != DDP_OK)
            DIE("batch plan");
    }
    ddp_loader *ld;
    if (ddp_loader_create(ds, &sm, 1, &ld) != DDP_OK) DIE("loader");
    ddp_model m;
    mc.max_batch_rows = ddp_loader_max_rows(ld), mc.max_batch_samples = B;
    if (plan_rows > 0) mc.max_batch_rows = plan_rows, mc.max_batch_samples = plan_samples;
    ddp_precision pr = !strcmp(prec, "bf16")   ? DDP_PRECISION_BF16
                       : !strcmp(prec, "tf32") ? DDP_PRECISION_TF32
                                               : DDP_PRECISION_FP32;
    if (strcmp(prec, ddp_precision_name(pr))) DIE("--precision %s: expected fp32|tf32|bf16", prec);
    mc.precision = pr; /* bf16: GEMM-only activations in bf16, as mpiddp train keeps them */
    if (ddp_model_create(ctx, dev, &mc, &m) != DDP_OK) DIE("model: %s", ddp_last_error());
    if (t->rank == 0 && m.attention) printf("# bench_train: attention %s\n", m.attention); /* cuDNN's or the own */
    FILE *bf = NULL;
    if (bout) {
        char path[4200];
        snprintf(path, sizeof path, "%s.r%d", bout, t->rank);
        if (!(bf = fopen(path, "w"))) DIE("cannot write %s", path);
    }
    ddp_backend *be;
    if (ddp_ctx_backend(ctx, dev, &be) != DDP_OK) DIE("backend");
    if (ddp_backend_set_precision(be, pr) != DDP_OK) DIE("--precision %s", prec);
    int64_t n = ddp_model_num_params(&m);
    float *p, *g, *mo, *v; /* backend memory (device memory on CUDA), zeroed */
    void *q[4];
    for (int k = 0; k < 4; k++)
        if (be->alloc(be, &q[k], (size_t)(n + (k == 1 ? 2 : 0)) * 4) != DDP_OK) DIE("alloc");
    p = q[0], g = q[1], mo = q[2], v = q[3];
    if (m.init(m.self, p, 1) != DDP_OK) DIE("init");
    ddp_sync *sync;
    if (ddp_sync_create(ctx, be, g, n, 2, (int64_t)(bucket_mb * 1048576.0), &sync) != DDP_OK) DIE("sync");
    if (!cold) { /* every sample read once, untimed: the whole dataset mapped in this process, as after the
                  * first epochs of training (each epoch gives a rank other samples) */
        float *scratch = calloc((size_t)(ds->info.max_sample_rows * ds->info.dim), sizeof(float));
        if (!scratch) DIE("scratch");
        for (int64_t i = 0; i < ds->info.num_samples; i++) {
            const float *src;
            int64_t nr, label, id;
            if (ddp_dataset_sample(ds, i, scratch, &src, &nr, &label, &id) != DDP_OK) DIE("sample %lld", (long long)i);
            if (src != scratch) memcpy(scratch, src, (size_t)(nr * ds->info.dim) * sizeof(float));
        }
        free(scratch);
    }
    if (ddp_loader_start_epoch(ld, 0, 0) != DDP_OK) DIE("epoch");
    int64_t total = warmup + steps;
    double tm[5] = {0}, fwd0 = 0, bwd0 = 0, t_start = 0; /* data, step, sync wait, optimizer, allreduce inside step */
    double tx0[4] = {0}, tx1[4] = {0};                   /* transformer: forward, backward, attention, GEMMs */
    int64_t rows = 0, samples = 0, epoch = 0, k_in_epoch = 0;
    double sq = 0;
    double *step_rows = calloc((size_t)steps, sizeof *step_rows), *step_max = calloc((size_t)steps, sizeof *step_max);
    if (!step_rows || !step_max) DIE("alloc"); /* sum over the timed steps' samples of rows^2 (attention FLOPs) */
    long long syncs0 = 0;                      /* the CUDA backend's host synchronisations before the timed steps */
    for (int64_t s = 0; s < total; s++) {
        if (s == warmup) {
            syncs0 = dev == DDP_DEVICE_CUDA ? ddp_cuda()->host_syncs() : 0;
            MPI_Barrier(MPI_COMM_WORLD);
            memset(tm, 0, sizeof tm);
            if (tx) {
                ddp_transformer_times(&m, tx0);
                fwd0 = tx0[0], bwd0 = tx0[1];
            } else {
                ddp_refmodel_times(&m, &fwd0, &bwd0);
            }
            rows = samples = 0;
            sq = 0;
            t_start = now_s();
        }
        double a = now_s();
        const ddp_batch *b;           /* runs on into further epochs when the steps outnumber one epoch's */
        if (k_in_epoch == sm.steps) { /* token budgets: each epoch has its own step count */
            if (ddp_loader_start_epoch(ld, ++epoch, 0) != DDP_OK) DIE("epoch");
            k_in_epoch = 0;
        }
        if (ddp_loader_next(ld, k_in_epoch++, &b) != DDP_OK) DIE("batch");
        if (s >= warmup) step_rows[s - warmup] = (double)b->nrows;
        if (bf) {
            for (int64_t k = 0; k < b->nsamples; k++) fprintf(bf, k ? " %lld" : "%lld", (long long)b->indices[k]);
            fputc('\n', bf);
        }
        double b0 = now_s();
        float ctl[2] = {(float)b->nsamples, 0.0f};
        if (be->zero(be, g, (size_t)n * 4) != DDP_OK || be->upload(be, g + n, ctl, sizeof ctl) != DDP_OK) DIE("step");
        ddp_sync_begin(sync);
        ddp_forward_out out = {0};
        double comm0 = ddp_sync_comm_seconds(sync);
        ddp_loader_cursor pk = {ld,
                                k_in_epoch < sm.steps ? k_in_epoch : -1}; /* the next batch uploads during this step */
        if (m.prefetch && m.prefetch(m.self, ddp_loader_peek_cursor, &pk) != DDP_OK) DIE("prefetch");
        if (m.train_step(m.self, b, p, g, &out, ddp_sync_ready, sync) != DDP_OK) DIE("step");
        double c = now_s();
        tm[4] += ddp_sync_comm_seconds(sync) - comm0;
        if (ddp_sync_finish(sync, "bench") != DDP_OK) DIE("sync");
        double d = now_s();
        double ss;
        if (be->download(be, ctl, g + n, sizeof ctl) != DDP_OK || be->sumsq(be, g, n, &ss) != DDP_OK) DIE("step");
        ddp_adamw_args aw = {.lr = 1e-3f,
                             .beta1 = 0.9f,
                             .beta2 = 0.999f,
                             .eps = 1e-8f,
                             .weight_decay = 0.01f,
                             .bc1 = (float)(1 - pow(0.9, (double)s + 1)),
                             .bc2_sqrt = (float)sqrt(1 - pow(0.999, (double)s + 1)),
                             .gscale = 1.0f / ctl[0]};
        if (be->adamw(be, p, g, mo, v, n, &aw) != DDP_OK) DIE("adamw");
        if (be->synchronize(be) != DDP_OK) DIE("step");
        double e = now_s();
        tm[0] += b0 - a, tm[1] += c - b0, tm[2] += d - c, tm[3] += e - d;
        rows += b->nrows;
        samples += b->nsamples;
        for (int64_t k = 0; k < b->nsamples; k++) {
            double n = (double)(b->offsets[k + 1] - b->offsets[k]);
            sq += n * n;
        }
    }
    if (bf) fclose(bf);
    /* balance: per timed step the busiest rank's rows over the mean rows per rank, averaged over the steps */
    MPI_Allreduce(step_rows, step_max, (int)steps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, step_rows, (int)steps, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double bal = 0;
    for (int64_t k = 0; k < steps; k++) bal += step_rows[k] > 0 ? step_max[k] * t->size / step_rows[k] : 1.0;
    bal /= (double)steps;
    free(step_rows), free(step_max);
    double wall = now_s() - t_start, fwd, bwd;
    if (tx) {
        ddp_transformer_times(&m, tx1);
        fwd = tx1[0], bwd = tx1[1];
    } else {
        ddp_refmodel_times(&m, &fwd, &bwd);
    }
    fwd -= fwd0, bwd -= bwd0;
    /* On CPU the buckets are reduced by blocking MPI_Allreduce calls made from backward as gradients become
     * ready; that time (including waiting for a slower rank) is sync, not backward compute. */
    bwd -= tm[4];
    tm[2] += tm[4];
    /* the step is as slow as its slowest rank */
    double w = wall;
    MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    int64_t agg[2] = {rows, samples};
    MPI_Allreduce(MPI_IN_PLACE, agg, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss = (double)ru.ru_maxrss / 1024.0;
    MPI_Allreduce(MPI_IN_PLACE, &rss, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    /* ru_maxrss counts the mapped dataset pages (shared page cache); RssAnon is this process's own memory */
    double anon = 0, filemb = 0;
    FILE *st = fopen("/proc/self/status", "r");
    if (st) {
        char line[256];
        while (fgets(line, sizeof line, st)) {
            if (!strncmp(line, "RssAnon:", 8)) anon = atof(line + 8) / 1024.0;
            if (!strncmp(line, "RssFile:", 8)) filemb = atof(line + 8) / 1024.0;
        }
        fclose(st);
    }
    MPI_Allreduce(MPI_IN_PLACE, &anon, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &filemb, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (t->rank == 0 && (block || cold)) /* the read side: feature bytes over the wall time, per-rank memory */
        printf("bench_train read: %s shuffle, %.1f MB/s of features, %.0f samples/s, per rank: private %.1f MiB, "
               "file-backed %.1f MiB, "
               "%lld block runs read ahead on rank 0\n",
               block ? "block" : "full", (double)agg[0] * (double)ds->info.dim * 4.0 / w / 1e6, (double)agg[1] / w,
               anon, filemb, (long long)ddp_io_counters_get()->ahead_runs);
    int64_t D = ds->info.dim;
    double flops = (double)rows *
                   (4.0 * (double)D * (double)H + 6.0 * (double)H * (double)H); /* this rank's GEMM work */
    if (tx) /* the encoder's training FLOPs: 3 x forward (projections, FFN, attention scores and weighted sums) */
        flops = 3.0 * ((double)rows * (2.0 * (double)D * (double)H +
                                       (double)L * (8.0 * (double)H * (double)H + 4.0 * (double)H * (double)ff)) +
                       (double)L * 4.0 * sq * (double)H);
    double gf = flops / (fwd + bwd) / 1e9;
    /* the slowest rank's compute (fwd + bwd): far above rank 0's means one rank was slowed (a busy core),
     * which every other rank then waits for in sync */
    double cmax = fwd + bwd;
    MPI_Allreduce(MPI_IN_PLACE, &cmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double sg = be->host_memory ? sgemm_gflops(be, (int64_t)((double)rows / (double)steps), H) : 0.0; /* CPU only */
    if (tx && t->rank == 0) { /* run_tx.sh's format (report_tx.py) */
        double ms = 1e3 / (double)steps, attn = (tx1[2] - tx0[2]) * ms, gemm = (tx1[3] - tx0[3]) * ms;
        /* On a GPU the model's host timers see the GEMMs' asynchronous launches, not their time: no GEMM or
         * element-wise split and no in-process sgemm reference there (empty CSV fields, "n/a" below). */
        char gemm_s[32] = "", ew_s[32] = "n/a", sg_s[32] = "n/a";
        if (be->host_memory) {
            snprintf(gemm_s, sizeof gemm_s, "%.3f", gemm);
            snprintf(ew_s, sizeof ew_s, "%.2f", (fwd + bwd) * ms - attn - gemm);
            snprintf(sg_s, sizeof sg_s, "%.2f", sg);
        }
        FILE *f = fopen(csv, "a");
        if (f) {
            fprintf(f,
                    "mpiddp,%d,%lld,%lld,%lld,%lld,%s,%lld,%lld,%.1f,%.0f,%.3f,%.3f,%.3f,%.3f,%.3f,%s,%.3f,%.3f,%.2f,%"
                    "s,0,%.1f,%.1f\n",
                    t->size, (long long)H, (long long)L, (long long)heads, (long long)ff, lens, (long long)B,
                    (long long)steps, (double)agg[1] / w, (double)agg[0] / w, w * ms, tm[0] * ms, fwd * ms, bwd * ms,
                    attn, gemm_s, tm[2] * ms, tm[3] * ms, gf, be->host_memory ? sg_s : "", rss, anon);
            fclose(f);
        }
        printf("mpiddp %s transformer np=%d d=%lld L=%lld lens %s: %.0f samples/s, %.0f rows/s, step %.2f ms (data "
               "%.2f fwd %.2f "
               "bwd %.2f [attention %.2f, GEMM %s, element-wise %s] sync %.2f opt %.2f), %.2f GFLOP/s of %s sgemm, "
               "peak RSS %.1f MiB, private %.1f MiB\n",
               be->name, t->size, (long long)H, (long long)L, lens, (double)agg[1] / w, (double)agg[0] / w, w * ms,
               tm[0] * ms, fwd * ms, bwd * ms, attn, be->host_memory ? gemm_s : "n/a", ew_s, tm[2] * ms, tm[3] * ms, gf,
               sg_s, rss, anon);
        int64_t pc[4] = {0, 0, 0, 0}; /* cuDNN's plan cache over the run (warm-up included): build cost, hit rate */
        if (be->attention_counts) be->attention_counts(be, pc);
        if (pc[0] + pc[1] + pc[2] > 0)
            printf("cuDNN attention plans: %lld built in %.1f ms (%.2f ms each), %lld calls from the cache (%.1f%%), "
                   "%lld shape classes refused\n",
                   (long long)pc[0], (double)pc[3] / 1e3, pc[0] ? (double)pc[3] / 1e3 / (double)pc[0] : 0.0,
                   (long long)pc[1], 100.0 * (double)pc[1] / (double)(pc[0] + pc[1]), (long long)pc[2]);
    } else if (t->rank == 0) {
        double ms = 1e3 / (double)steps;
        char sgs[32] = "n/a"; /* no in-process sgemm reference on a GPU */
        if (be->host_memory) snprintf(sgs, sizeof sgs, "%.2f", sg);
        FILE *f = fopen(csv, "a");
        if (f) {
            /* impl "mpiddp-rows": token budgets (batch = rows per rank); the last column is the balance */
            fprintf(f, "%s,%d,%lld,%lld,%lld,%.1f,%.0f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.2f,%.2f,%.1f,%.1f,%.3f,%.4f\n",
                    brows > 0 ? "mpiddp-rows" : "mpiddp", t->size, (long long)H, (long long)(brows > 0 ? brows : B),
                    (long long)steps, (double)agg[1] / w, (double)agg[0] / w, w * ms, tm[0] * ms, fwd * ms, bwd * ms,
                    tm[2] * ms, tm[3] * ms, gf, sg, rss, anon, cmax * ms, bal);
            fclose(f);
        }
        printf("mpiddp %s np=%d H=%lld%s: %.0f samples/s, %.0f rows/s, step %.2f ms (data %.2f fwd %.2f bwd %.2f sync "
               "%.2f opt %.2f), "
               "%.2f GFLOP/s of %s sgemm, peak RSS %.1f MiB, private %.1f MiB, slowest rank's fwd+bwd %.2f ms, rows "
               "max/mean %.3f\n",
               be->name, t->size, (long long)H, brows > 0 ? " --batch-rows" : "", (double)agg[1] / w,
               (double)agg[0] / w, w * ms, tm[0] * ms, fwd * ms, bwd * ms, tm[2] * ms, tm[3] * ms, gf, sgs, rss, anon,
               cmax * ms, bal);
    }
    if (t->rank == 0) /* the activation workspace: planned (MPIDDP_PLAN_BUFFERS) or the loader's bound */
        printf("bench_train workspace: %lld rows, %s (bound %lld)\n", (long long)mc.max_batch_rows,
               plan_rows > 0 ? "planned" : "the bound", (long long)ddp_loader_max_rows(ld));
    if (t->rank == 0) /* for the scaling model: the buckets, and the busiest rank's compute (token budgets) */
        printf("bench_train sync: %d buckets of %.4g MiB for %lld parameters; slowest rank's fwd+bwd %.3f ms\n",
               ddp_sync_num_buckets(sync), bucket_mb, (long long)n, cmax * 1e3 / (double)steps);
    if (dev == DDP_DEVICE_CUDA && t->rank == 0)
        printf("mpiddp %s: %.1f host synchronisations per step (cudaStreamSynchronize, cudaEventSynchronize; the NCCL "
               "wait is polled)\n",
               be->name, (double)(ddp_cuda()->host_syncs() - syncs0) / (double)steps);
    ddp_sync_destroy(sync);
    if (m.prefetch) (void)m.prefetch(m.self, NULL, NULL);
    m.destroy(m.self);
    ddp_loader_destroy(ld);
    ddp_sampler_free(&sm);
    free(rowcounts);
    ddp_dataset_close(ds);
    for (int k = 0; k < 4; k++) be->release(be, q[k]);
    ddp_finalize(ctx);
    return 0;
}

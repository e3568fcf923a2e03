/* user_model.c — a user's own model through include/mpiddp.h: mean-pool each sample's rows, then one linear softmax
 * layer; launch, data, gradient sync, trainer, metrics and checkpoints are mpiddp's. */
#include <mpiddp.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t D, C;
    ddp_tensor_spec spec[2];
    float *pooled, *logits; /* scratch, sized per batch */
    int64_t cap;
} linear_model;

static ddp_status lm_init(void *self, float *params, uint64_t seed)
{
    linear_model *m = self;
    uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    float bound = 1.0f / sqrtf((float)m->D);
    for (int64_t i = 0; i < m->C * m->D + m->C; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        params[i] = bound * (2.0f * (float)((x >> 40) & 0xffffff) / 16777216.0f - 1.0f);
    }
    return DDP_OK;
}

static int grow(linear_model *m, int64_t n)
{
    if (n <= m->cap) return 1;
    free(m->pooled);
    free(m->logits);
    m->pooled = malloc((size_t)(n * m->D) * sizeof(float));
    m->logits = malloc((size_t)(n * m->C) * sizeof(float));
    m->cap = n;
    return m->pooled && m->logits;
}

/* forward for all samples; fills per-sample loss/pred/prob when given, adds gradients when G != NULL */
static ddp_status run(linear_model *m, const ddp_batch *b, const float *P, float *G, ddp_forward_out *out)
{
    if (!grow(m, b->nsamples)) return DDP_ERR_NOMEM;
    const float *W = P, *bias = P + m->C * m->D;
    double total = 0;
    for (int64_t s = 0; s < b->nsamples; s++) {
        float *p = m->pooled + s * m->D, *z = m->logits + s * m->C;
        int64_t lo = b->offsets[s], hi = b->offsets[s + 1];
        for (int64_t d = 0; d < m->D; d++) p[d] = 0;
        for (int64_t r = lo; r < hi; r++)
            for (int64_t d = 0; d < m->D; d++) p[d] += b->x[r * m->D + d] / (float)(hi - lo);
        float mx = -INFINITY;
        int64_t am = 0;
        for (int64_t c = 0; c < m->C; c++) {
            z[c] = bias[c];
            for (int64_t d = 0; d < m->D; d++) z[c] += W[c * m->D + d] * p[d];
            if (z[c] > mx) mx = z[c], am = c;
        }
        double se = 0;
        for (int64_t c = 0; c < m->C; c++) se += exp(z[c] - mx);
        double lse = mx + log(se), loss = lse - z[b->labels[s]];
        total += loss;
        if (out->loss) out->loss[s] = (float)loss;
        if (out->pred) out->pred[s] = am;
        if (out->prob) out->prob[s] = (float)(1.0 / se);
        if (G)
            for (int64_t c = 0; c < m->C; c++) {
                float g = (float)exp(z[c] - lse) - (c == b->labels[s] ? 1.0f : 0.0f);
                for (int64_t d = 0; d < m->D; d++) G[c * m->D + d] += g * p[d];
                G[m->C * m->D + c] += g;
            }
    }
    out->loss_sum = total;
    out->count = b->nsamples;
    return DDP_OK;
}

static ddp_status lm_train(void *self, const ddp_batch *b, const float *P, float *G, ddp_forward_out *out,
                           ddp_grad_ready_fn ready, void *arg)
{
    linear_model *m = self;
    ddp_status st = run(m, b, P, G, out);
    if (st == DDP_OK && ready) ready(arg, 0, m->C * m->D + m->C);
    return st;
}

static ddp_status lm_eval(void *self, const ddp_batch *b, const float *P, ddp_forward_out *out)
{
    return run(self, b, P, NULL, out);
}

/*   mpirun -np 2 ./example_user_model TRAIN_DIR VAL_DIR RUN_DIR */
int main(int argc, char **argv)
{
    ddp_ctx *ctx;
    if (ddp_init(&argc, &argv, &ctx) != DDP_OK) {
        fprintf(stderr, "init: %s\n", ddp_last_error());
        return 1;
    }
    if (argc != 4) {
        if (ddp_topo(ctx)->rank == 0) fprintf(stderr, "usage: %s TRAIN_DIR VAL_DIR RUN_DIR\n", argv[0]);
        ddp_finalize(ctx);
        return 2;
    }
    ddp_dataset *tr = NULL, *va = NULL;
    ddp_status st = ddp_dataset_open(ctx, argv[1], &tr);
    if (st == DDP_OK) st = ddp_dataset_open(ctx, argv[2], &va);
    linear_model lm = {0};
    ddp_model model = {0};
    if (st == DDP_OK) {
        lm.D = ddp_dataset_get_info(tr)->dim;
        lm.C = ddp_dataset_get_info(tr)->num_classes;
        lm.spec[0] = (ddp_tensor_spec){.name = "fc.weight", .ndim = 2, .shape = {lm.C, lm.D}};
        lm.spec[1] = (ddp_tensor_spec){.name = "fc.bias", .ndim = 1, .shape = {lm.C}};
        model = (ddp_model){.name = "user-linear",
                            .ntensors = 2,
                            .tensors = lm.spec,
                            .num_classes = (int)lm.C,
                            .device = DDP_DEVICE_CPU,
                            .self = &lm,
                            .init = lm_init,
                            .train_step = lm_train,
                            .eval_step = lm_eval};
        ddp_train_config cfg;
        ddp_train_config_default(&cfg);
        cfg.out_dir = argv[3];
        cfg.epochs = 3;
        cfg.batch_size = 16;
        cfg.lr = 0.05;
        cfg.progress = 0;
        st = ddp_train(ctx, &cfg, &model, tr, va);
    }
    /* DDP_ERR_BUSY: RUN_DIR holds another run or a live run uses it. The library's line names the ddp_train_config
     * fields to set (cfg.out_dir, cfg.resume, cfg.overwrite), which this program's user does not see: say what the
     * program takes. */
    if (st == DDP_ERR_BUSY && ddp_topo(ctx)->rank == 0)
        fprintf(stderr,
                "user_model: RUN_DIR %s holds another run's files or is in use by a running job: give a new "
                "RUN_DIR, or remove that run's files first (this program neither resumes nor overwrites)\n",
                argv[3]);
    else if (st != DDP_OK && ddp_error_shared() && ddp_topo(ctx)->rank == 0) /* agreed: the same line on every rank */
        fprintf(stderr, "user_model: %s\n", ddp_last_error());
    else if (st != DDP_OK && !ddp_error_shared()) /* this rank's own (the others may not know): it says so itself */
        fprintf(stderr, "user_model: rank %d: %s\n", ddp_topo(ctx)->rank, ddp_last_error());
    free(lm.pooled);
    free(lm.logits);
    ddp_dataset_close(tr);
    ddp_dataset_close(va);
    ddp_finalize(ctx);
    return st == DDP_OK ? 0 : st == DDP_ERR_BUSY ? 2 : 1; /* 2: a usage error, as the CLI's */
}

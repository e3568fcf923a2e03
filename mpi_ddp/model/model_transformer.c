/* model_transformer.c — the packed pre-LayerNorm Transformer encoder (docs/transformer.md): parameters in PyTorch's
 * state_dict names, order and layouts, its default init from the run's seed, activation buffers, a batch's packing
 * (row -> sample map, sample ids), the ddp_model callbacks. Passes: transformer_pass.c; shared: model_common.c. */
#include "mpi_ddp/core/ctx.h"
#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/model/model_transformer.h"
#include "mpi_ddp/model/models.h"
#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *layer_names[T_PER_LAYER] = {"self_attn.in_proj_weight",
                                               "self_attn.in_proj_bias",
                                               "self_attn.out_proj.weight",
                                               "self_attn.out_proj.bias",
                                               "linear1.weight",
                                               "linear1.bias",
                                               "linear2.weight",
                                               "linear2.bias",
                                               "norm1.weight",
                                               "norm1.bias",
                                               "norm2.weight",
                                               "norm2.bias"};

/* Appends a tensor; returns its element offset. */
static int64_t add_tensor(txmodel *m, const char *name, int64_t d0, int64_t d1)
{
    return m->tab.off[ddp_param_table_add(&m->tab, name, d0, d1)];
}

static void layout(txmodel *m)
{
    int64_t d = m->d, f = m->f;
    m->inp_w = add_tensor(m, "inp.weight", d, m->D);
    m->inp_b = add_tensor(m, "inp.bias", d, 0);
    m->pos_w = m->positions ? add_tensor(m, "pos.weight", m->P, d) : -1;
    m->body_lo = m->tab.off[m->tab.n];
    int64_t shapes[T_PER_LAYER][2] = {{3 * d, d}, {3 * d, 0}, {d, d}, {d, 0}, {f, d}, {f, 0},
                                      {d, f},     {d, 0},     {d, 0}, {d, 0}, {d, 0}, {d, 0}};
    for (int64_t l = 0; l < m->L; l++) {
        tx_layer *y = &m->lay[l];
        y->lo = m->tab.off[m->tab.n];
        for (int t = 0; t < T_PER_LAYER; t++) {
            char name[64];
            snprintf(name, sizeof name, "enc.layers.%lld.%s", (long long)l, layer_names[t]);
            y->p[t] = add_tensor(m, name, shapes[t][0], shapes[t][1]);
        }
        y->hi = m->tab.off[m->tab.n];
    }
    m->nf_w = add_tensor(m, "enc.norm.weight", d, 0);
    m->nf_b = add_tensor(m, "enc.norm.bias", d, 0);
    m->head_w = add_tensor(m, "head.weight", m->C, d);
    m->head_b = add_tensor(m, "head.bias", m->C, 0);
    m->total = m->tab.off[m->tab.n];
}

/* ------------------------------------------------------------------ init */
static double unif01(uint64_t key, uint64_t i) { return ((ddp_hmix(key ^ ddp_hmix(i)) >> 11) + 0.5) * 0x1.0p-53; }

/* PyTorch's defaults (docs/transformer.md): nn.Linear U(+-1/sqrt(fan_in)) for weight and bias, in_proj xavier
 * uniform with zero bias, out_proj bias 0, LayerNorm 1 and 0, nn.Embedding N(0, 1). Every tensor has its
 * own key (name-independent: its index), so every layer draws its own values. */
static void init_tensor(const void *self, int k, float *dst, uint64_t seed)
{
    const txmodel *m = self;
    const ddp_tensor_spec *s = &m->tab.spec[k];
    const char *nm = s->name;
    int64_t n = m->tab.off[k + 1] - m->tab.off[k];
    uint64_t key = ddp_hmix(seed ^ ddp_hmix(0x7e40000 + (uint64_t)k));
    size_t len = strlen(nm);
#define ENDS(x) (len >= sizeof(x) - 1 && !strcmp(nm + len - (sizeof(x) - 1), x))
    if (ENDS("norm1.weight") || ENDS("norm2.weight") || !strcmp(nm, "enc.norm.weight")) {
        for (int64_t i = 0; i < n; i++) dst[i] = 1.0f;
    } else if (ENDS("norm1.bias") || ENDS("norm2.bias") || !strcmp(nm, "enc.norm.bias") || ENDS("in_proj_bias") ||
               ENDS("out_proj.bias")) {
        memset(dst, 0, (size_t)n * sizeof *dst);
    } else if (!strcmp(nm, "pos.weight")) {
        for (int64_t i = 0; i < n; i++) /* Box-Muller */
            dst[i] = (float)(sqrt(-2.0 * log(unif01(key, 2 * (uint64_t)i))) *
                             cos(6.283185307179586 * unif01(key, 2 * (uint64_t)i + 1)));
    } else {
        double bound;
        if (ENDS("in_proj_weight"))
            bound = sqrt(6.0 / (double)(s->shape[0] + s->shape[1]));
        else if (s->ndim == 2)
            bound = 1.0 / sqrt((double)s->shape[1]);
        else
            bound = 1.0 / sqrt((double)m->tab.spec[k - 1].shape[1]); /* a bias follows its weight */
        for (int64_t i = 0; i < n; i++) dst[i] = (float)((2.0 * unif01(key, (uint64_t)i) - 1.0) * bound);
    }
#undef ENDS
}

static ddp_status tx_init(void *self, float *params, uint64_t seed)
{
    txmodel *m = self;
    m->seed = seed;
    return ddp_model_init_params(m->be, &m->tab, params, seed, init_tensor, m);
}

/* ------------------------------------------------------------------ steps */
/* Checks the batch and moves it, with its row -> sample map and sample ids, to the backend (no host sync). */
static ddp_status stage(txmodel *m, const ddp_batch *b, const float **x, const int64_t **lab)
{
    DDP_CHECK(ddp_model_io_check(&m->io, b));
    int64_t B = b->nsamples, R = b->nrows, nmax = 0;
    for (int64_t s = 0; s < B; s++) {
        int64_t n = b->offsets[s + 1] - b->offsets[s];
        if (n > m->P) {
            char o[96];
            return ddp_set_error(
                DDP_ERR_ARG, "sample %lld (id %lld) has %lld rows, more than %s",
                (long long)(b->indices ? b->indices[s] : s), (long long)b->sample_ids[s], (long long)n,
                ddp_opt_fmt(o, sizeof o, m->be->cli_names, DDP_OPT_MAX_POSITIONS, "%lld", (long long)m->P));
        }
        nmax = n > nmax ? n : nmax;
    }
    ddp_staged s;
    DDP_CHECK(ddp_model_io_stage(m->be, &m->io, b, &s));
    m->pack = (ddp_packing){.B = B,
                            .R = R,
                            .off = s.off,
                            .seg = s.seg,
                            .sid = s.sid,
                            .hoff = b->offsets,
                            .max_rows = nmax,
                            .tile = s.tile,
                            .tiles = s.tiles};
    *x = s.x;
    *lab = s.lab;
    return DDP_OK;
}

/* The end of a step's queued work: the staged batch released (and, training, the next one prefetched), the
 * results downloaded, then the device timers of a train step read (their events have completed by then). */
static ddp_status finish(txmodel *m, const ddp_batch *b, ddp_forward_out *out, int train)
{
    ddp_backend *be = m->be;
    DDP_CHECK(ddp_model_io_done(be, &m->io, train));
    DDP_CHECK(ddp_model_io_collect(be, &m->io, b->nsamples, out));
    if (!train || be->host_memory || !be->mark || b->nsamples == 0) return DDP_OK;
    DDP_CHECK(ddp_model_elapsed(be, DDP_T_FWD0, DDP_T_FWD1, &m->t_fwd));
    DDP_CHECK(ddp_model_elapsed(be, DDP_T_FWD1, DDP_T_BWD1, &m->t_bwd));
    for (int k = DDP_T_ATTN0; k < m->timers; k += 2) DDP_CHECK(ddp_model_elapsed(be, k, k + 1, &m->t_attn));
    return DDP_OK;
}

static ddp_status tx_train_step(void *self, const ddp_batch *b, const float *P, float *G, ddp_forward_out *out,
                                ddp_grad_ready_fn ready, void *ready_arg)
{
    txmodel *m = self;
    const float *x = NULL;
    const int64_t *lab = NULL;
    DDP_CHECK(stage(m, b, &x, &lab));
    if (b->nsamples == 0) { /* no sample on this rank (token budgets): still releases every gradient bucket */
        if (ready) ready(ready_arg, 0, m->total);
        return finish(m, b, out, 1);
    }
    DDP_CHECK(ddp_tx_forward(m, b, P, x, lab, 1));
    DDP_CHECK(ddp_tx_backward(m, b, P, G, x, ready, ready_arg));
    return finish(m, b, out, 1);
}

static ddp_status tx_eval_step(void *self, const ddp_batch *b, const float *P, ddp_forward_out *out)
{
    txmodel *m = self;
    const float *x = NULL;
    const int64_t *lab = NULL;
    DDP_CHECK(stage(m, b, &x, &lab));
    if (b->nsamples > 0) DDP_CHECK(ddp_tx_forward(m, b, P, x, lab, 0));
    return finish(m, b, out, 0);
}

static ddp_status tx_prefetch(void *self, ddp_next_batch_fn next, void *arg)
{
    txmodel *m = self;
    ddp_model_io_set_next(&m->io, next, arg);
    return DDP_OK;
}

static void tx_destroy(void *self)
{
    txmodel *m = self;
    if (!m) return;
    ddp_backend *be = m->be;
    for (int64_t l = 0; m->lay && l < m->L; l++) {
        tx_layer *y = &m->lay[l];
        void *bufs[] = {y->h,    y->y1, y->mu1, y->rs1, y->qkv, y->o, y->lse,
                        y->hmid, y->y2, y->mu2, y->rs2, y->dg,  y->a2};
        ddp_model_release_all(be, bufs, sizeof bufs / sizeof bufs[0]);
    }
    void *bufs[] = {m->hL,     m->yf, m->muf, m->rsf,  m->p,    m->dp,         m->logits,  m->dlogits,
                    m->branch, m->dh, m->dy,  m->dqkv, m->dffn, m->attn_delta, m->dz16_own};
    ddp_model_release_all(be, bufs, sizeof bufs / sizeof bufs[0]);
    ddp_model_io_release(be, &m->io);
    ddp_param_table_free(&m->tab);
    free(m->lay);
    free(m);
}

#define BALLOC(ptr, count) DDP_MODEL_ALLOC(be, ptr, count)

ddp_status ddp_model_config_check(const ddp_model_config *c) { return ddp_model_config_check_as(c, 0); }

ddp_status ddp_model_config_check_as(const ddp_model_config *c, int cli)
{
    DDP_NONNULL(c, "c");
    if (c->kind != DDP_MODEL_MLP && c->kind != DDP_MODEL_TRANSFORMER)
        return ddp_set_error(DDP_ERR_ARG, "model kind %d: not DDP_MODEL_MLP or DDP_MODEL_TRANSFORMER", (int)c->kind);
    if (c->kind != DDP_MODEL_TRANSFORMER) return DDP_OK;
    char a[96], b[96];
    if (c->layers < 1)
        return ddp_set_error(DDP_ERR_ARG, "transformer: %s: must be >= 1",
                             ddp_opt_fmt(a, sizeof a, cli, DDP_OPT_LAYERS, "%d", c->layers));
    if (c->heads < 1 || c->hidden % c->heads)
        return ddp_set_error(DDP_ERR_ARG, "transformer: %s must divide %s",
                             ddp_opt_fmt(a, sizeof a, cli, DDP_OPT_HEADS, "%d", c->heads),
                             ddp_opt_fmt(b, sizeof b, cli, DDP_OPT_HIDDEN, "%lld", (long long)c->hidden));
    if (c->max_positions < 1 || !(c->dropout >= 0.0 && c->dropout < 1.0))
        return ddp_set_error(DDP_ERR_ARG, "transformer: need %s >= 1 and 0 <= %s < 1 (got %lld, %g)",
                             ddp_opt_name(cli, DDP_OPT_MAX_POSITIONS), ddp_opt_name(cli, DDP_OPT_DROPOUT),
                             (long long)c->max_positions, c->dropout);
    return DDP_OK;
}

ddp_status ddp_transformer_create_on(ddp_backend *be, const ddp_model_config *c, ddp_model *out)
{
    int64_t d = c->hidden, f = c->ff > 0 ? c->ff : 2 * c->hidden;
    if (c->dim < 1 || d < 1 || c->classes < 2)
        return ddp_set_error(
            DDP_ERR_ARG, "transformer: need D >= 1, %s >= 1 and classes >= 2 (got D=%lld, hidden=%lld, classes=%lld)",
            ddp_opt_name(be->cli_names, DDP_OPT_HIDDEN), (long long)c->dim, (long long)d, (long long)c->classes);
    if (c->max_batch_rows < 1 || c->max_batch_samples < 1)
        return ddp_set_error(
            DDP_ERR_ARG,
            "transformer: the largest batch must hold >= 1 sample and >= 1 row (got %lld samples, %lld rows)",
            (long long)c->max_batch_samples, (long long)c->max_batch_rows);
    DDP_CHECK(ddp_model_config_check_as(c, be->cli_names));
    DDP_CHECK(ddp_backend_require_enc(be));
    txmodel *m = ddp_calloc(1, sizeof *m);
    if (!m) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    ddp_status st = DDP_OK;
    int64_t L = c->layers, H = c->heads, R = c->max_batch_rows, B = c->max_batch_samples;
    *m = (txmodel){.be = be,
                   .E = be->enc,
                   .D = c->dim,
                   .d = d,
                   .f = f,
                   .C = c->classes,
                   .P = c->max_positions,
                   .L = L,
                   .heads = H,
                   .maxR = R,
                   .maxB = B,
                   .positions = c->positions != 0,
                   .dropout = (float)c->dropout,
                   .own = *c};
    DDP_TRY(ddp_param_table_alloc(&m->tab, 8 + (int)L * T_PER_LAYER));
    m->lay = ddp_calloc((size_t)L, sizeof *m->lay);
    if (!m->lay) DDP_FAIL(DDP_ERR_NOMEM, "out of memory");
    layout(m);
    DDP_TRY(be->reserve(be, R > B ? R : B));
    /* bf16 activations: the tensors only GEMMs read, where the backend has the ops that write and read them */
    m->act16 = c->precision == DDP_PRECISION_BF16 && be->gemm16 && be->enc->layernorm_fwd16 &&
               be->enc->gelu_erf_fwd16 && ddp_knob_int(DDP_KNOB_BF16_ACTIVATIONS) != 0;
    /* at bf16 the attention writes o in bf16 (the values the out projection reads), which the backward's rowsum
     * (dO . O) reads too, as cuDNN's and FlashAttention's do: bf16's arithmetic, not a storage choice */
    m->o16 = c->precision == DDP_PRECISION_BF16 && be->gemm16;
    /* fp32 keeps the unfused calls: the pedantic reference the GPU tests compare against */
    m->fuse_epi = c->precision != DDP_PRECISION_FP32 && be->gemm_epi && ddp_knob_int(DDP_KNOB_CUBLASLT) != 0;
    /* the q|k|v gradient in bf16, the rounding its two products read, where the fused linear_bwd's bias gradient sums
     * those same bf16 values (its epilogue): the bits of an fp32 dqkv there */
    m->dqkv16 = m->act16 && m->fuse_epi && be->linear_bwd;
    /* without dropout the residual stream's gradient dh is the dy of the next linear backward: the layernorm backward
     * that writes dh also writes its bf16 rounding (in dqkv's buffer, free between those two ops), the operand that
     * linear_bwd would round dh to, instead of a conversion pass per GEMM pair: the same bits */
    m->dh16 = m->dqkv16 && m->dropout == 0.0f && be->enc->layernorm_bwd16;
    /* q|k|v in bf16, rounded once by the in projection's bias epilogue: the values the tensor-core kernels and cuDNN
     * round them to when they read them; the SIMT kernels read them widened (docs/transformer.md) */
    m->qkv16 = m->act16 && m->fuse_epi;
    /* linear1's output in bf16 from its bias epilogue, as PyTorch's autocast keeps it: the GELU reads it, its backward
     * recomputes gelu' from it instead of keeping an fp32 gelu', and reads the GELU output's gradient in bf16 as
     * linear2's backward writes it (half the memory, 14 f bytes a row less traffic); unlike the flags above this
     * rounds values nothing rounded before (docs/transformer.md states the bound) */
    m->z16 = m->act16 && m->fuse_epi && be->linear_bwd && be->enc->gelu_erf_fwd16z && be->enc->gelu_erf_bwd16z &&
             be->enc->gelu_erf_bwd16;
    /* the attention output's gradient dO in bf16 from the out projection's linear_bwd (dx16): the operand cuDNN and the
     * bf16 tensor-core kernels round dO to for their products, so there only delta = rowsum(dO . O) sees the rounding,
     * as in FlashAttention and cuDNN (bound: docs/transformer.md); 2 d bytes a row written and read instead of 4 d.
     * It rounds values nothing rounded before, as z16 does: the two go together (z16 implies dqkv16) */
    m->do16 = m->z16;
    /* the out projection's and linear2's outputs in bf16 from their bias epilogues, as autocast's linears write them:
     * the residual add reads bf16(x W^T + b) instead of the fp32 product and an fp32 bias (bound: docs/transformer.md);
     * 8 d bytes a row less traffic per layer, the bias adds move into the epilogues */
    m->t16 = m->z16 && be->enc->residual_layernorm_fwd16t && be->enc->residual_layernorm_fwd;
    /* the attention the encoder runs: cuDNN's fused SDPA where the backend chooses it, else the own kernels. A
     * device ignores the other's names (one setting may serve both kinds of job); a name neither knows is refused */
    const char *knob = ddp_knob_str(DDP_KNOB_ATTENTION);
    static const char *const names[] = {"auto", "cudnn", "own", "fused", "gemm", "tiled"};
    int known = !knob;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !known; i++) known = !strcmp(knob, names[i]);
    if (!known)
        DDP_TRY(ddp_set_error(DDP_ERR_ARG,
                              "MPIDDP_ATTENTION=%s: not an attention path (auto, or cudnn or own on a GPU, fused, gemm "
                              "or tiled on the CPU)",
                              knob));
    if (be->attention_select) {
        const char *name = "own";
        char why[360] = "";
        DDP_TRY(be->attention_select(be, c->precision, d, (int)H, m->dropout, &name, why, sizeof why));
        snprintf(m->attention, sizeof m->attention, "%s: %s", name, why);
    } else {
        const char *k = ddp_knob_str(DDP_KNOB_ATTENTION);
        snprintf(m->attention, sizeof m->attention, "cpu: %s", k ? k : "auto (by each sample's rows)");
    }
    int64_t A = m->act16 ? 2 : 1; /* an activation of n values takes n / A floats' room */
    for (int64_t l = 0; l < L; l++) {
        tx_layer *y = &m->lay[l];
        BALLOC(y->h, R * d);
        BALLOC(y->y1, (R * d + A - 1) / A);
        BALLOC(y->mu1, R);
        BALLOC(y->rs1, R);
        BALLOC(y->qkv, m->qkv16 ? (R * 3 * d + 1) / 2 : R * 3 * d);
        BALLOC(y->o, m->o16 ? (R * d + 1) / 2 : R * d);
        BALLOC(y->lse, R * H);
        BALLOC(y->hmid, R * d);
        BALLOC(y->y2, (R * d + A - 1) / A);
        BALLOC(y->mu2, R);
        BALLOC(y->rs2, R);
        BALLOC(y->dg, m->z16 ? (R * f + 1) / 2 : R * f);
        BALLOC(y->a2, (R * f + A - 1) / A);
    }
    BALLOC(m->hL, R * d);
    BALLOC(m->yf, R * d);
    BALLOC(m->muf, R);
    BALLOC(m->rsf, R);
    BALLOC(m->p, B * d);
    BALLOC(m->dp, B * d);
    BALLOC(m->logits, B * m->C);
    BALLOC(m->dlogits, B * m->C);
    BALLOC(m->branch, R * d);
    BALLOC(m->dh, R * d);
    BALLOC(m->dy, R * d);
    if (m->dqkv16) /* R x 3d bf16 values, shared with dz16's R x f */
        BALLOC(m->dqkv, (R * (3 * d > f ? 3 * d : f) + 1) / 2);
    else
        BALLOC(m->dqkv, R * 3 * d);
    BALLOC(m->dffn, m->z16 ? (R * f + 1) / 2 : R * f); /* bf16 at z16 */
    BALLOC(m->attn_delta, R * H);
    if (m->act16 && be->enc->gelu_erf_bwd16) { /* R x f bf16 values: 2 f bytes a row, dqkv has 12 d (6 d at dqkv16,
                                                * then sized for both) */
        if (m->dqkv16 || f <= 6 * d)
            m->dz16 = m->dqkv;
        else {
            BALLOC(m->dz16_own, (R * f + 1) / 2);
            m->dz16 = m->dz16_own;
        }
    }
    DDP_TRY(ddp_model_io_alloc(be, &m->io, m->D, R, B, 1));
    *out = (ddp_model){.name = "transformer",
                       .ntensors = m->tab.n,
                       .tensors = m->tab.spec,
                       .num_classes = (int)m->C,
                       .device = be->host_memory ? DDP_DEVICE_CPU : DDP_DEVICE_CUDA,
                       .self = m,
                       .init = tx_init,
                       .train_step = tx_train_step,
                       .eval_step = tx_eval_step,
                       .destroy = tx_destroy,
                       .prefetch = tx_prefetch,
                       .attention = m->attention};
    return DDP_OK;
done:
    tx_destroy(m);
    return st;
}

const ddp_model_config *ddp_transformer_own_config(const ddp_model *model)
{
    return model->destroy == tx_destroy && model->self ? &((const txmodel *)model->self)->own : NULL;
}

int ddp_transformer_act16(const ddp_model *model) { return ((const txmodel *)model->self)->act16; }
int ddp_transformer_dqkv16(const ddp_model *model) { return ((const txmodel *)model->self)->dqkv16; }
int ddp_transformer_dh16(const ddp_model *model) { return ((const txmodel *)model->self)->dh16; }
int ddp_transformer_z16(const ddp_model *model) { return ((const txmodel *)model->self)->z16; }
int ddp_transformer_do16(const ddp_model *model) { return ((const txmodel *)model->self)->do16; }
int ddp_transformer_t16(const ddp_model *model) { return ((const txmodel *)model->self)->t16; }
int ddp_transformer_qkv16(const ddp_model *model) { return ((const txmodel *)model->self)->qkv16; }

void ddp_transformer_times(const ddp_model *model, double t[4])
{
    const txmodel *m = model->self;
    t[0] = m->t_fwd;
    t[1] = m->t_bwd;
    t[2] = m->t_attn;
    t[3] = m->t_gemm;
}

/* emu_cudnn_sdpa.c — the emulated cuDNN's flash engine (see emu_cudnn.h): cudnnBackendExecute binds a plan's tensors
 * to the variant pack's pointers and queues a sequential flash-attention job (SDPA forward or backward) on the handle's
 * emulated stream. */
#include "emu_cudnn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the emulator's entry points, with plain types: emu_cuda.h's CUDA types clash with the real headers' */
int ddp_emu_enqueue_host(void *stream, void (*fn)(void *), void *arg, void (*free_arg)(void *));
int ddp_emu_is_device_ptr(const void *p, size_t bytes);
void ddp_emu__fault(const char *fmt, const char *name);

/* ------------------------------------------------------------------ the emulated flash engine */
typedef struct {
    char *p;         /* element (b=0 or the ragged base, 0, 0, 0); NULL: not in the graph */
    int64_t str[4];  /* elements */
    size_t es;       /* element bytes: 2 (bf16) or 4 (fp32 stats) */
    const void *rag; /* ragged offsets (device, elements, B+1), or NULL */
    int rag64;
} jten;

typedef struct {
    int bwd;
    int64_t B, H, S, D;
    float scale;
    const int32_t *seq[2]; /* q, kv lengths (device); NULL: S */
    jten t[NDATA];         /* Q K V O stats dO dQ dK dV */
    float *ws;             /* backward: dO.O per query row, B*H*S */
} sdpa_job;

static float bf16_round(float f) { return emu_bf16_to_f(emu_f_to_bf16(f)); }

static int64_t row_base(const jten *t, int64_t b)
{
    if (!t->rag) return b * t->str[0];
    return t->rag64 ? ((const int64_t *)t->rag)[b] : ((const int32_t *)t->rag)[b];
}

static int main_rows_kv(int r) { return r == R_K || r == R_V || r == R_DK || r == R_DV; }

/* Whether the n rows of sample b that role r touches lie in one device allocation (else the fault a GPU raises). */
static int span_ok(const sdpa_job *j, int r, int64_t b, int64_t n)
{
    const jten *t = &j->t[r];
    int64_t w = r == R_STATS ? 1 : j->D, lo = row_base(t, b);
    int64_t hi = lo + (j->H - 1) * t->str[1] + (n - 1) * t->str[2] + (w - 1) * t->str[3];
    return lo >= 0 && ddp_emu_is_device_ptr(t->p + lo * (int64_t)t->es, (size_t)(hi - lo + 1) * t->es);
}

static int job_fault(const char *what)
{
    ddp_emu__fault("cuDNN SDPA: %s", what);
    return 0;
}

/* The sequence lengths (S where not given) after checking what the job reads and writes. */
static int job_lengths(const sdpa_job *j, int64_t *len)
{
    for (int k = 0; k < 2; k++)
        if (j->seq[k] && !ddp_emu_is_device_ptr(j->seq[k], (size_t)j->B * sizeof(int32_t)))
            return job_fault("sequence lengths outside their allocation");
    for (int r = 0; r < NDATA; r++)
        if (j->t[r].rag && !ddp_emu_is_device_ptr(j->t[r].rag, (size_t)(j->B + 1) * (j->t[r].rag64 ? 8 : 4)))
            return job_fault("ragged offsets outside their allocation");
    for (int64_t b = 0; b < j->B; b++)
        for (int k = 0; k < 2; k++) {
            len[2 * b + k] = j->seq[k] ? j->seq[k][b] : j->S;
            if (len[2 * b + k] < 0 || len[2 * b + k] > j->S) return job_fault("a sequence length outside [0, S]");
        }
    for (int64_t b = 0; b < j->B; b++)
        for (int r = 0; r < NDATA; r++) {
            int64_t n = len[2 * b + main_rows_kv(r)];
            if (j->t[r].p && n > 0 && !span_ok(j, r, b, n)) return job_fault("a tensor outside its allocation");
        }
    if (j->bwd && !ddp_emu_is_device_ptr(j->ws, (size_t)(j->B * j->H * j->S) * sizeof(float)))
        return job_fault("the workspace is smaller than the plan's");
    return 1;
}

static int64_t elem(const jten *t, int64_t base, int64_t h, int64_t s, int64_t d)
{
    return base + h * t->str[1] + s * t->str[2] + d * t->str[3];
}

/* rows [0, n) of (b, h) of a bf16 tensor as fp32, D per row */
static void gather(const sdpa_job *j, int r, int64_t b, int64_t h, int64_t n, float *out)
{
    const jten *t = &j->t[r];
    int64_t base = row_base(t, b);
    for (int64_t s = 0; s < n; s++)
        for (int64_t d = 0; d < j->D; d++)
            out[s * j->D + d] = emu_bf16_to_f(((uint16_t *)t->p)[elem(t, base, h, s, d)]);
}
static void scatter(const sdpa_job *j, int r, int64_t b, int64_t h, int64_t s, const float *row)
{
    const jten *t = &j->t[r];
    int64_t base = row_base(t, b);
    for (int64_t d = 0; d < j->D; d++) ((uint16_t *)t->p)[elem(t, base, h, s, d)] = emu_f_to_bf16(row[d]);
}
static float *stat(const sdpa_job *j, int64_t b, int64_t h, int64_t s)
{
    const jten *t = &j->t[R_STATS];
    return (float *)t->p + elem(t, row_base(t, b), h, s, 0);
}

static float dot(const float *a, const float *b, int64_t n)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

typedef struct {
    float *q, *k, *v, *o, *dout, *p, *ds, *acc;
} scratch;

/* One query row: scores, log-sum-exp (natural log), P rounded to bf16 as the tensor cores read it, O. */
static void fwd_row(const sdpa_job *j, const scratch *w, int64_t i, int64_t skv, float *lse)
{
    int64_t D = j->D;
    float m = -INFINITY, l = 0.0f;
    for (int64_t c = 0; c < skv; c++) m = fmaxf(m, w->p[c] = j->scale * dot(w->q + i * D, w->k + c * D, D));
    for (int64_t c = 0; c < skv; c++) l += expf(w->p[c] - m);
    *lse = m + logf(l);
    memset(w->acc, 0, (size_t)D * sizeof(float));
    for (int64_t c = 0; c < skv; c++) {
        float p = bf16_round(expf(w->p[c] - *lse));
        for (int64_t d = 0; d < D; d++) w->acc[d] += p * w->v[c * D + d];
    }
}

static void fwd_bh(const sdpa_job *j, const scratch *w, int64_t b, int64_t h, int64_t sq, int64_t skv)
{
    gather(j, R_Q, b, h, sq, w->q);
    gather(j, R_K, b, h, skv, w->k);
    gather(j, R_V, b, h, skv, w->v);
    for (int64_t i = 0; i < sq; i++) {
        float lse;
        fwd_row(j, w, i, skv, &lse);
        scatter(j, R_O, b, h, i, w->acc);
        if (j->t[R_STATS].p) *stat(j, b, h, i) = lse;
    }
}

/* P (fp32) and dS = P (dO.V - dO.O) of (b, h), dO.O kept in the workspace. */
static void bwd_probs(const sdpa_job *j, const scratch *w, int64_t b, int64_t h, int64_t sq, int64_t skv)
{
    int64_t D = j->D, S = j->S;
    float *dl = j->ws + (b * j->H + h) * S;
    for (int64_t i = 0; i < sq; i++) {
        dl[i] = dot(w->dout + i * D, w->o + i * D, D);
        float lse = *stat(j, b, h, i);
        for (int64_t c = 0; c < skv; c++) {
            float p = expf(j->scale * dot(w->q + i * D, w->k + c * D, D) - lse);
            w->p[i * S + c] = p;
            w->ds[i * S + c] = p * (dot(w->dout + i * D, w->v + c * D, D) - dl[i]);
        }
    }
}

/* w->acc = scale sum_x ds[x * step] rows[x] over n rows of D: a dK row (a column of dS) or a dQ row (a row of dS) */
static void scaled_ds_sum(const sdpa_job *j, const scratch *w, const float *ds, int64_t step, int64_t n,
                          const float *rows)
{
    int64_t D = j->D;
    memset(w->acc, 0, (size_t)D * sizeof(float));
    for (int64_t x = 0; x < n; x++)
        for (int64_t d = 0; d < D; d++) w->acc[d] += ds[x * step] * rows[x * D + d];
    for (int64_t d = 0; d < D; d++) w->acc[d] *= j->scale;
}

/* dV_c = sum_i bf16(P_ic) dO_i; dK_c = scale sum_i dS_ic Q_i */
static void bwd_keys(const sdpa_job *j, const scratch *w, int64_t b, int64_t h, int64_t sq, int64_t skv)
{
    int64_t D = j->D, S = j->S;
    for (int64_t c = 0; c < skv; c++) {
        memset(w->acc, 0, (size_t)D * sizeof(float));
        for (int64_t i = 0; i < sq; i++)
            for (int64_t d = 0; d < D; d++) w->acc[d] += bf16_round(w->p[i * S + c]) * w->dout[i * D + d];
        scatter(j, R_DV, b, h, c, w->acc);
        scaled_ds_sum(j, w, w->ds + c, S, sq, w->q);
        scatter(j, R_DK, b, h, c, w->acc);
    }
}

/* dQ_i = scale sum_c dS_ic K_c */
static void bwd_queries(const sdpa_job *j, const scratch *w, int64_t b, int64_t h, int64_t sq, int64_t skv)
{
    for (int64_t i = 0; i < sq; i++) {
        scaled_ds_sum(j, w, w->ds + i * j->S, 1, skv, w->k);
        scatter(j, R_DQ, b, h, i, w->acc);
    }
}

static void bwd_bh(const sdpa_job *j, const scratch *w, int64_t b, int64_t h, int64_t sq, int64_t skv)
{
    gather(j, R_Q, b, h, sq, w->q);
    gather(j, R_K, b, h, skv, w->k);
    gather(j, R_V, b, h, skv, w->v);
    gather(j, R_O, b, h, sq, w->o);
    gather(j, R_DO, b, h, sq, w->dout);
    bwd_probs(j, w, b, h, sq, skv);
    bwd_keys(j, w, b, h, sq, skv);
    bwd_queries(j, w, b, h, sq, skv);
}

static void run_job(void *arg)
{
    const sdpa_job *j = arg;
    size_t SD = (size_t)(j->S * j->D), SS = (size_t)(j->S * j->S);
    int64_t *len = malloc((size_t)j->B * 2 * sizeof *len);
    float *mem = malloc((5 * SD + 2 * SS + (size_t)j->S + (size_t)j->D) * sizeof(float));
    if (!len || !mem) {
        job_fault("out of host memory");
    } else if (job_lengths(j, len)) {
        scratch w = {mem,          mem + SD,     mem + 2 * SD,      mem + 3 * SD,
                     mem + 4 * SD, mem + 5 * SD, mem + 5 * SD + SS, mem + 5 * SD + 2 * SS + j->S};
        for (int64_t b = 0; b < j->B; b++)
            for (int64_t h = 0; h < j->H; h++) (j->bwd ? bwd_bh : fwd_bh)(j, &w, b, h, len[2 * b], len[2 * b + 1]);
    }
    free(len);
    free(mem);
}

/* ------------------------------------------------------------------ execute */
/* The pointer the variant pack gives unique id uid (*found 0 when none). */
static void *pack_ptr(const desc *v, int64_t uid, int *found)
{
    const attr *ids = get(v, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), *ptrs = get(v, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    *found = 0;
    for (int64_t i = 0; ids && i < ids->n; i++)
        if (((const int64_t *)ids->v)[i] == uid) return *found = 1, ((void **)ptrs->v)[i];
    return NULL;
}

/* Every tensor of the graph needs a pointer: device memory at its alignment, or a host value (by value). */
static cudnnStatus_t check_pack(const desc *plan, const desc *v)
{
    desc *list[2 * NROLE];
    int n = emu_cudnn_tensors_of(plan, list), found;
    for (int i = 0; i < n; i++) {
        const void *p = pack_ptr(v, list[i]->uid, &found);
        if (!found || !p)
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "variant pack: no pointer for unique id %lld",
                                  (long long)list[i]->uid);
        if (!list[i]->by_value && !ddp_emu_is_device_ptr(p, 1))
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "variant pack: unique id %lld is not device memory",
                                  (long long)list[i]->uid);
        if (!list[i]->by_value && (uintptr_t)p % (uintptr_t)list[i]->align)
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "variant pack: unique id %lld is not %lld-byte aligned",
                                  (long long)list[i]->uid, (long long)list[i]->align);
    }
    return CUDNN_STATUS_SUCCESS;
}

static void bind_tensor(jten *t, const desc *d, const desc *v)
{
    int found;
    if (!d) return;
    t->p = pack_ptr(v, d->uid, &found);
    memcpy(t->str, d->str, sizeof t->str);
    t->es = d->dt == CUDNN_DATA_FLOAT ? 4 : 2;
    if (d->ragged) t->rag = pack_ptr(v, d->ragged->uid, &found), t->rag64 = d->ragged->dt == CUDNN_DATA_INT64;
}

static cudnnStatus_t bind(sdpa_job *j, const desc *plan, const desc *v)
{
    const desc *q = plan->role[R_Q];
    int found;
    cudnnStatus_t s = check_pack(plan, v);
    if (s != CUDNN_STATUS_SUCCESS) return s;
    j->ws = get(v, CUDNN_ATTR_VARIANT_PACK_WORKSPACE) ? *(void **)get(v, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)->v : NULL;
    if (plan->ws > 0 && (!j->ws || !ddp_emu_is_device_ptr(j->ws, 1)))
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "variant pack: the plan needs %lld bytes of device workspace",
                              (long long)plan->ws);
    j->bwd = plan->bwd, j->B = q->dim[0], j->H = q->dim[1], j->S = q->dim[2], j->D = q->dim[3];
    j->scale = plan->role[R_SCALE] ? *(const float *)pack_ptr(v, plan->role[R_SCALE]->uid, &found) : 1.0f;
    for (int k = 0; k < 2; k++)
        j->seq[k] = plan->role[R_SEQQ + k] ? pack_ptr(v, plan->role[R_SEQQ + k]->uid, &found) : NULL;
    for (int r = 0; r < NDATA; r++) bind_tensor(&j->t[r], plan->role[r], v);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack)
{
    const desc *p = as_desc(plan), *v = as_desc(pack);
    if (!handle_ok(h)) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "Execute: not a handle");
    if (!p || p->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !v ||
        v->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "Execute: needs an execution plan and a variant pack");
    if (!p->finalized || !v->finalized)
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "Execute: descriptors not finalized");
    if (p->graph) return emu_cudnn_graph_execute(h, p, v);
    sdpa_job *j = calloc(1, sizeof *j);
    if (!j) return emu_cudnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of memory");
    cudnnStatus_t s = bind(j, p, v);
    if (s != CUDNN_STATUS_SUCCESS) {
        free(j);
        return s;
    }
    if (ddp_emu_enqueue_host((void *)h->stream, run_job, j, free) != 0) /* it freed the job */
        return emu_cudnn_fail(CUDNN_STATUS_EXECUTION_FAILED, "Execute: the stream refused the work");
    return CUDNN_STATUS_SUCCESS;
}

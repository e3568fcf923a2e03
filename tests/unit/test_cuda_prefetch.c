/* test_cuda_prefetch.c — the built-in models' batch uploads on the CUDA backend (model_common.c, ddp_backend.stage*):
 * prefetched, staged and compute-stream uploads give the same bits; host syncs and launches per step; the timers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/model/model_common.h"
#include "mpi_ddp/model/models.h"
#include "cuda_test.h"
#include "test_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(call)                                                           \
    do {                                                                   \
        if ((call) != DDP_OK) fail_msg("%s: %s", #call, ddp_last_error()); \
    } while (0)
enum { NB = 4, B = 12, D = 11, C = 3 };

static ddp_backend *gpu;

/* NB batches of B samples of 1..9 rows each, every one in its own buffers. */
static test_batch bat[NB];
static int64_t max_rows;

static void make_batches(void)
{
    uint64_t s = 12345;
    for (int k = 0; k < NB; k++) {
        test_batch_make(&bat[k], &s, B, 9, C, D, 2.0, 100 * k, 1);
        max_rows = bat[k].b.nrows > max_rows ? bat[k].b.nrows : max_rows;
    }
}

/* ddp_model.prefetch's peek: batch (want) or none; counts its calls. */
typedef struct {
    int want, calls;
} peek;
static const ddp_batch *peek_fn(void *arg)
{
    peek *p = arg;
    p->calls++;
    return p->want >= 0 && p->want < NB ? &bat[p->want].b : NULL;
}

/* What one run leaves: every step's per-sample outputs and the accumulated gradient (host copies). */
typedef struct {
    float loss[NB][B], prob[NB][B];
    int64_t pred[NB][B];
    float *grad;
    long long syncs_max, launches;
} result;

enum { PF_NONE, PF_NEXT, PF_WRONG, PF_PROBE }; /* prefetch: none, the next batch, another one, next then changed */

static ddp_status create(int tx, ddp_model *m)
{
    if (!tx) return ddp_refmodel_create_on(gpu, D, 40, C, max_rows, B, m);
    ddp_model_config c;
    ddp_model_config_default(&c);
    c.kind = DDP_MODEL_TRANSFORMER, c.dim = D, c.classes = C, c.hidden = 16, c.heads = 2, c.ff = 24, c.layers = tx;
    c.max_positions = 16, c.dropout = 0.1, c.max_batch_rows = max_rows, c.max_batch_samples = B;
    return ddp_model_create_on(gpu, &c, m);
}

/* NB train steps of a fresh model (parameters from seed 5) accumulating into one gradient. */
static void run(int tx, int mode, int staged, result *r)
{
    setenv("MPIDDP_CUDA_PREFETCH", staged ? "1" : "0", 1);
    ddp_model m;
    OK(create(tx, &m));
    unsetenv("MPIDDP_CUDA_PREFETCH");
    int64_t n = ddp_model_num_params(&m);
    void *p, *g;
    OK(gpu->alloc(gpu, &p, (size_t)n * 4));
    OK(gpu->alloc(gpu, &g, (size_t)n * 4));
    OK(m.init(m.self, p, 5));
    r->syncs_max = 0;
    long long l0 = ddp_cuda()->launches();
    peek pk = {0};
    for (int k = 0; k < NB; k++) {
        pk.want = mode == PF_WRONG ? (k + 2) % NB : k + 1;
        int calls = pk.calls;
        if (mode != PF_NONE) OK(m.prefetch(m.self, peek_fn, &pk));
        ddp_forward_out o = {.loss = r->loss[k], .prob = r->prob[k], .pred = r->pred[k]};
        long long s0 = ddp_cuda()->host_syncs();
        OK(m.train_step(m.self, &bat[k].b, p, g, &o, NULL, NULL));
        long long ds = ddp_cuda()->host_syncs() - s0;
        r->syncs_max = ds > r->syncs_max ? ds : r->syncs_max;
        if (mode != PF_NONE && pk.calls != calls + 1)
            fail_msg("%s step %d: the model peeked %d times", tx ? "transformer" : "mlp", k, pk.calls - calls);
        if (mode == PF_PROBE && k + 1 < NB) /* changed after its prefetch: a step that uploads it again sees it */
            for (int64_t j = 0; j < bat[k + 1].b.nrows * D; j++) bat[k + 1].x[j] *= 2.0f;
        if (mode == PF_PROBE && k > 0)
            for (int64_t j = 0; j < bat[k].b.nrows * D; j++) bat[k].x[j] *= 0.5f; /* restored */
    }
    r->launches = (ddp_cuda()->launches() - l0) / NB;
    r->grad = malloc((size_t)n * 4);
    OK(gpu->download(gpu, r->grad, g, (size_t)n * 4));
    if (tx) {
        double t[4];
        ddp_transformer_times(&m, t);
        if (!(t[0] > 0 && t[1] > 0 && t[2] > 0))
            fail_msg("transformer device times: fwd %g bwd %g attention %g", t[0], t[1], t[2]);
    } else {
        double f, b;
        ddp_refmodel_times(&m, &f, &b);
        if (!(f > 0 && b > 0)) fail_msg("mlp device times: fwd %g bwd %g", f, b);
    }
    OK(m.prefetch(m.self, NULL, NULL));
    gpu->release(gpu, p);
    gpu->release(gpu, g);
    m.destroy(m.self);
}

static void same(const char *what, int tx, const result *a, const result *b, int64_t n)
{
    const char *name = tx ? "transformer" : "mlp";
    if (!(!memcmp(a->loss, b->loss, sizeof a->loss) && !memcmp(a->prob, b->prob, sizeof a->prob) &&
          !memcmp(a->pred, b->pred, sizeof a->pred)))
        fail_msg("%s %s: per-sample outputs differ", name, what);
    if (memcmp(a->grad, b->grad, (size_t)n * 4)) fail_msg("%s %s: gradients differ", name, what);
}

/* Four micro-batches through the MLP and the Transformer encoder with the next batch prefetched while the current
 * one computes give the same bits (losses, probabilities, predictions and the accumulated gradients) as uploads on
 * the compute stream (MPIDDP_CUDA_PREFETCH=0) and as a prefetch of the wrong batch; a prefetched batch is really
 * used (its host data changed after the prefetch does not reach the step); each train step makes at most
 * DDP_MODEL_HOST_SYNCS_PER_STEP host synchronisations (counted by the backend) and the launches per step are printed
 * (docs/architecture.md); the device timers give forward, backward and attention times without a synchronisation.
 * On a GPU (label gpu) and on the host emulator with jitter (label emu), where a missing event wait shows up as
 * different bits. */
static void test_model(int tx)
{
    ddp_model m;
    OK(create(tx, &m));
    int64_t n = ddp_model_num_params(&m);
    m.destroy(m.self);
    static result ref, r;
    run(tx, PF_NONE, 0, &ref); /* compute-stream uploads (MPIDDP_CUDA_PREFETCH=0) */
    const char *name = tx ? "transformer" : "mlp";
    printf("%s%s: %lld launches (kernels and cuBLAS calls) per train step, at most %lld host synchronisations\n", name,
           tx ? (tx == 1 ? " (1 layer)" : " (2 layers)") : "", ref.launches, ref.syncs_max);
    if (tx == 1) { /* the launches of one layer less, for docs/architecture.md's count */
        free(ref.grad);
        return;
    }
    if (!(ref.syncs_max <= DDP_MODEL_HOST_SYNCS_PER_STEP))
        fail_msg("%s: %lld host synchronisations in a step without staging", name, ref.syncs_max);
    run(tx, PF_NEXT, 1, &r);
    same("prefetched vs compute-stream uploads", tx, &ref, &r, n);
    if (!(r.syncs_max <= DDP_MODEL_HOST_SYNCS_PER_STEP))
        fail_msg("%s: %lld host synchronisations in a prefetching step (at most %d)", name, r.syncs_max,
                 DDP_MODEL_HOST_SYNCS_PER_STEP);
    if (r.launches != ref.launches)
        fail_msg("%s: %lld launches per step with staging, %lld without", name, r.launches, ref.launches);
    free(r.grad);
    run(tx, PF_NONE, 1, &r);
    same("staged without prefetch", tx, &ref, &r, n);
    free(r.grad);
    run(tx, PF_WRONG, 1, &r);
    same("a prefetch of the wrong batch", tx, &ref, &r, n);
    free(r.grad);
    run(tx, PF_PROBE, 1, &r); /* the prefetched copies, not the changed host data, are trained on */
    same("host data changed after its prefetch", tx, &ref, &r, n);
    free(r.grad);
    free(ref.grad);
}

/* The staging and timer entries' refusals, and the pinned slots grown for a larger batch. */
static void test_entries(void **state)
{
    (void)state;
    double s;
    if (gpu->mark(gpu, DDP_TIMERS) == DDP_OK) fail_msg("mark beyond DDP_TIMERS must fail");
    if (!(gpu->elapsed(gpu, DDP_TIMERS - 2, DDP_TIMERS - 1, &s) != DDP_OK && strstr(ddp_last_error(), "never marked")))
        fail_msg("elapsed of timers never marked: %s", ddp_last_error());
    OK(gpu->mark(gpu, DDP_TIMERS - 2));
    OK(gpu->mark(gpu, DDP_TIMERS - 1));
    OK(gpu->elapsed(gpu, DDP_TIMERS - 2, DDP_TIMERS - 1, &s));
    if (!(s >= 0)) fail_msg("elapsed %g", s);
    void *d;
    OK(gpu->alloc(gpu, &d, 1 << 20));
    static char big[1 << 20];
    ddp_copy cp = {d, big, sizeof big};
    OK(gpu->stage_reserve(gpu, 4096));
    OK(gpu->stage_reserve(gpu, 2048)); /* smaller: kept */
    if (!(gpu->stage(gpu, 0, &cp, 1) != DDP_OK && strstr(ddp_last_error(), "stage_reserve")))
        fail_msg("a stage beyond the slots: %s", ddp_last_error());
    OK(gpu->stage_reserve(gpu, sizeof big)); /* grown: the old slots freed once their copies landed */
    for (size_t i = 0; i < sizeof big; i++) big[i] = (char)(i * 7);
    OK(gpu->stage(gpu, 1, &cp, 1));
    OK(gpu->stage(gpu, 1, &cp, 1)); /* the same slot at once: waits for its copy on the host */
    OK(gpu->stage_acquire(gpu, 1));
    static char back[1 << 20];
    OK(gpu->download(gpu, back, d, sizeof back));
    if (memcmp(back, big, sizeof big)) fail_msg("staged bytes differ");
    OK(gpu->stage_release(gpu, 1));
    /* the copy stream waits for the compute that last reads a set's device buffers (stage_release): slow work
     * queued before a column sum of x, x restaged at once with other values, and the sum must see the old ones */
    enum { XR = 512, XC = 512 };
    float *x, *w, *y, *sum;
    OK(gpu->alloc(gpu, (void **)&x, XR * XC * 4));
    OK(gpu->alloc(gpu, (void **)&w, XC * XC * 4));
    OK(gpu->alloc(gpu, (void **)&y, XR * XC * 4));
    OK(gpu->alloc(gpu, (void **)&sum, XC * 4));
    OK(gpu->reserve(gpu, XR));
    static float ones[XR * XC], twos[XR * XC], hs[XC];
    for (int i = 0; i < XR * XC; i++) ones[i] = 1.0f, twos[i] = 2.0f;
    OK(gpu->stage_reserve(gpu, sizeof ones));
    ddp_copy c1 = {x, ones, sizeof ones}, c2 = {x, twos, sizeof twos};
    OK(gpu->stage(gpu, 0, &c1, 1));
    OK(gpu->stage_acquire(gpu, 0));
    for (int k = 0; k < 8; k++)
        OK(gpu->gemm(gpu, 0, 0, XR, XC, XC, 1.0f, x, XC, w, XC, 0.0f, y, XC)); /* slow, reads x */
    OK(gpu->colsum(gpu, x, sum, XR, XC, 0.0f));
    OK(gpu->stage_release(gpu, 0));
    OK(gpu->stage(gpu, 0, &c2, 1)); /* no host wait in between: only the event orders it after the sum */
    OK(gpu->stage_acquire(gpu, 0));
    OK(gpu->download(gpu, hs, sum, sizeof hs));
    int bad = 0;
    for (int c = 0; c < XC; c++) bad += hs[c] != (float)XR;
    if (bad)
        fail_msg("%d column sums saw the next batch's values: the copy did not wait for the compute reading x", bad);
    /* a buffer allocated while the compute stream is busy and staged into at once: its zeroing, queued on the
     * compute stream behind the slow work, must not land over the batch the copy stream wrote */
    float *z;
    for (int k = 0; k < 8; k++) OK(gpu->gemm(gpu, 0, 0, XR, XC, XC, 1.0f, x, XC, w, XC, 0.0f, y, XC));
    OK(gpu->alloc(gpu, (void **)&z, XR * XC * 4));
    ddp_copy c3 = {z, ones, sizeof ones};
    OK(gpu->stage(gpu, 1, &c3, 1));
    OK(gpu->stage_acquire(gpu, 1));
    OK(gpu->colsum(gpu, z, sum, XR, XC, 0.0f));
    OK(gpu->stage_release(gpu, 1));
    OK(gpu->download(gpu, hs, sum, sizeof hs));
    bad = 0;
    for (int c = 0; c < XC; c++) bad += hs[c] != (float)XR;
    if (bad) fail_msg("%d column sums of a new buffer staged at once saw zeros: its zeroing landed over the copy", bad);
    gpu->release(gpu, z);
    gpu->release(gpu, x), gpu->release(gpu, w), gpu->release(gpu, y), gpu->release(gpu, sum);
    long long syncs = ddp_cuda()->host_syncs();
    OK(gpu->synchronize(gpu)); /* the models no longer call it: a host synchronisation, counted */
    if (!(ddp_cuda()->host_syncs() == syncs + 1))
        fail_msg("synchronize: %lld host synchronisations", ddp_cuda()->host_syncs() - syncs);
    gpu->release(gpu, d);
}

static void test_mlp(void **state)
{
    (void)state;
    test_model(0);
}
static void test_transformer_1_layer(void **state) /* its launches, for docs/architecture.md's count */
{
    (void)state;
    test_model(1);
}
static void test_transformer(void **state)
{
    (void)state;
    test_model(2);
}

static int setup(void **state)
{
    (void)state;
    OK(ddp_backend_cuda_create(0, &gpu));
    if (!(gpu->stage && gpu->mark)) fail_msg("the CUDA backend has no staging or timers");
    make_batches();
    return 0;
}
static int teardown(void **state)
{
    (void)state;
    gpu->destroy(gpu);
    for (int k = 0; k < NB; k++) test_batch_free(&bat[k]);
    return 0;
}

int main(void)
{
    int exit_code, ndev = cuda_test_devices(&exit_code);
    if (ndev == 0) return exit_code;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_entries), cmocka_unit_test(test_mlp),
                                       cmocka_unit_test(test_transformer_1_layer), cmocka_unit_test(test_transformer)};
    return cmocka_run_group_tests(tests, setup, teardown);
}

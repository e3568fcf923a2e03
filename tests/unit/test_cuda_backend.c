/* test_cuda_backend.c — the CUDA backend against the CPU backend (the reference twin): every op on the
 * same inputs, then a whole train step and eval step of the reference model. Skips (exit 77) when no
 * GPU is visible; built only with the CUDA backend. Label: gpu. */
#include "mpi_ddp/backend.h"
#include "mpi_ddp/cuda_api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)
#define OK(call) CHECK((call) == DDP_OK, "%s: %s", #call, ddp_last_error())

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static double max_rel(const float *a, const float *b, int64_t n)
{
    double mx = 1e-6, d = 0;
    for (int64_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs(b[i]));
        d = fmax(d, fabs(a[i] - b[i]));
    }
    return d / mx;
}

int main(void)
{
    if (ddp_cuda_device_count() == 0) {
        printf("SKIP: no CUDA device visible\n");
        return 77;
    }
    ddp_backend *cpu, *gpu;
    OK(ddp_backend_cpu_create(1, &cpu));
    OK(ddp_backend_cuda_create(0, &gpu));
    if (failures) return 1;
    enum { D = 24, H = 48, C = 7, B = 16 };
    int64_t off[B + 1] = {0};
    uint64_t s = 1;
    for (int i = 0; i < B; i++) off[i + 1] = off[i] + 1 + (int64_t)((frand(&s) + 1) * 20);
    int64_t R = off[B], lab[B];
    for (int i = 0; i < B; i++) lab[i] = (i * 5) % C;
    float *x = malloc((size_t)(R * D) * sizeof(float));
    for (int64_t i = 0; i < R * D; i++) x[i] = frand(&s) * 2;
    ddp_model mc, mg;
    OK(ddp_refmodel_create_on(cpu, D, H, C, R, B, &mc));
    OK(ddp_refmodel_create_on(gpu, D, H, C, R, B, &mg));
    int64_t n = ddp_model_num_params(&mc);
    float *pc = calloc((size_t)n, 4), *gc = calloc((size_t)n, 4), *mmc = calloc((size_t)n, 4), *vvc = calloc((size_t)n, 4);
    float *pg_h = calloc((size_t)n, 4), *gg_h = calloc((size_t)n, 4);
    void *pg, *gg, *mmg, *vvg;
    OK(gpu->alloc(gpu, &pg, (size_t)n * 4));
    OK(gpu->alloc(gpu, &gg, (size_t)n * 4));
    OK(gpu->alloc(gpu, &mmg, (size_t)n * 4));
    OK(gpu->alloc(gpu, &vvg, (size_t)n * 4));
    OK(mc.init(mc.self, pc, 3));
    OK(mg.init(mg.self, pg, 3));
    OK(gpu->download(gpu, pg_h, pg, (size_t)n * 4));
    CHECK(memcmp(pc, pg_h, (size_t)n * 4) == 0, "init differs between CPU and CUDA");
    uint8_t pad[B] = {0};
    int64_t ids[B] = {0};
    ddp_batch b = {.nsamples = B, .nrows = R, .dim = D, .offsets = off, .labels = lab, .sample_ids = ids, .is_pad = pad, .x = x};
    float lc[B], lg[B], prc[B], prg[B];
    int64_t pdc[B], pdg[B];
    ddp_forward_out oc = {.loss = lc, .prob = prc, .pred = pdc}, og = {.loss = lg, .prob = prg, .pred = pdg};
    OK(mc.train_step(mc.self, &b, pc, gc, &oc, NULL, NULL));
    OK(mg.train_step(mg.self, &b, pg, gg, &og, NULL, NULL));
    OK(gpu->download(gpu, gg_h, gg, (size_t)n * 4));
    CHECK(max_rel(lg, lc, B) < 1e-5, "losses differ: %.3e", max_rel(lg, lc, B));
    CHECK(max_rel(gg_h, gc, n) < 1e-4, "gradients differ: %.3e", max_rel(gg_h, gc, n));
    for (int i = 0; i < B; i++) CHECK(pdc[i] == pdg[i], "prediction %d differs", i);
    ddp_adamw_args a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .bc1 = 0.1f,
                        .bc2_sqrt = sqrtf(0.001f), .gscale = 1.0f / B};
    OK(cpu->adamw(cpu, pc, gc, mmc, vvc, n, &a));
    OK(gpu->adamw(gpu, pg, gg, mmg, vvg, n, &a));
    OK(gpu->download(gpu, pg_h, pg, (size_t)n * 4));
    CHECK(max_rel(pg_h, pc, n) < 1e-4, "AdamW step differs: %.3e", max_rel(pg_h, pc, n));
    double sc, sg;
    OK(cpu->sumsq(cpu, gc, n, &sc));
    OK(gpu->sumsq(gpu, gg, n, &sg));
    CHECK(fabs(sc - sg) <= 1e-4 * sc, "sumsq differs: %g vs %g", sc, sg);
    OK(mc.eval_step(mc.self, &b, pc, &oc));
    OK(mg.eval_step(mg.self, &b, pg, &og));
    CHECK(fabs(oc.loss_sum - og.loss_sum) <= 1e-4 * fabs(oc.loss_sum), "eval loss differs");
    mc.destroy(mc.self);
    mg.destroy(mg.self);
    gpu->release(gpu, pg), gpu->release(gpu, gg), gpu->release(gpu, mmg), gpu->release(gpu, vvg);
    cpu->destroy(cpu);
    gpu->destroy(gpu);
    free(x), free(pc), free(gc), free(mmc), free(vvc), free(pg_h), free(gg_h);
    printf("%s: CUDA backend matches the CPU backend\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}

/* test_cudnn_graph.c — the attention backward's operation graph (cudnn_sdpa_bwd.c) finalized by the real
 * libcudnn_graph.so.9 that configure found, without a GPU: every tensor and operation, then the graph (cuDNN checks
 * the operations' shapes and builds its DAG; it reads the handle only as a value there, so a zeroed block stands in
 * for one, since cudnnCreate needs a GPU). Which engine runs the graph only a GPU shows (docs/transformer.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mpi_ddp/backend/cuda/cudnn_sdpa_priv.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static void graph_of(void *lib, const ddp_sdpa_key *k)
{
    ddp_sdpa *s = calloc(1, sizeof *s);
    assert_non_null(s);
#define LOAD(fn) assert_non_null(*(void **)&s->f.fn = dlsym(lib, #fn));
    SDPA_FNS(LOAD)
#undef LOAD
    s->h = calloc(1, 1 << 16); /* the stand-in handle */
    sdpa_plan *p = &s->plans[0];
    p->k = *k;
    cudnnStatus_t r = CUDNN_STATUS_SUCCESS;
    cudnnBackendDescriptor_t g = ddp_sdpa_bwd_graph(s, p, &r);
    char why[512] = "";
    s->f.cudnnGetLastErrorString(why, sizeof why);
    printf("backward graph of %lld samples x %lld rows, %lld heads of %lld: %d descriptors, %s%s%s\n", (long long)k->B,
           (long long)k->S, (long long)k->H, (long long)k->D, p->nd, s->f.cudnnGetErrorString(r), *why ? ": " : "",
           why);
    if (r != CUDNN_STATUS_SUCCESS || !g) fail_msg("the real cuDNN refused the backward graph");
    int64_t engines = 0, n = 0;
    assert_int_equal(s->f.cudnnBackendGetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64,
                                                   1, &n, &engines),
                     CUDNN_STATUS_SUCCESS);
    if (engines < 1) fail_msg("the graph lists no engine");
    for (int i = p->nd - 1; i >= 0; i--) assert_int_equal(s->f.cudnnBackendDestroyDescriptor(p->d[i]), 0);
    free(s->h);
    free(s);
}

static void test_backward_graph(void **state)
{
    (void)state;
    void *lib = dlopen(MPIDDP_CUDNN_GRAPH_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!lib) fail_msg("%s: %s", MPIDDP_CUDNN_GRAPH_LIBRARY, dlerror());
    size_t (*version)(void) = NULL;
    *(void **)&version = dlsym(lib, "cudnnGetVersion");
    assert_non_null(version);
    printf("cuDNN %zu (%s)\n", version(), MPIDDP_CUDNN_GRAPH_LIBRARY);
    static const ddp_sdpa_key keys[] = {
        {1, 1, 64, 2, 64, 16}, {1, 8, 512, 8, 64, 16}, {1, 4, 128, 4, 128, 4}, {1, 16, 256, 16, 64, 8}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) graph_of(lib, &keys[i]);
    dlclose(lib);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_backward_graph)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

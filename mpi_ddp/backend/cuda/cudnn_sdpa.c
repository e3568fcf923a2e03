/* cudnn_sdpa.c — cuDNN's fused attention through its backend C API (cudnn_graph.h): libcudnn_graph dlopen'ed, the SDPA
 * forward operation (or the backward's graph, cudnn_sdpa_bwd.c) per shape class over the packed rows, its execution
 * plan built once and kept (a deterministic engine for the backward where cuDNN lists one). */
#include "mpi_ddp/backend/cuda/cudnn_sdpa_priv.h"
#include "mpi_ddp/core/settings.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef DDP_CUDNN_LIBRARY_DIR
#define DDP_CUDNN_LIBRARY_DIR ""
#endif
#define CUDNN_GRAPH_LIB "libcudnn_graph.so.9"

#define SDPA_ERR(s, call, r)                                                                  \
    ddp_set_error(DDP_ERR_CUDA, "cuDNN error in %s (%s:%d): %s%s", #call, __FILE__, __LINE__, \
                  (s)->f.cudnnGetErrorString(r), last_error(s))

/* cuDNN's own reason for its last failure (cudnnGetLastErrorString), as ": <reason>", or "" */
static const char *last_error(ddp_sdpa *s)
{
    char m[280] = "";
    s->f.cudnnGetLastErrorString(m, sizeof m);
    snprintf(s->last, sizeof s->last, "%s%s", *m ? ": " : "", m);
    return s->last;
}

/* dlopens cuDNN's graph library, its name in path */
static void *open_lib(char *path, size_t pn)
{
    const char *want = ddp_knob_str(DDP_KNOB_CUDNN_LIB);
    void *lib = NULL;
    snprintf(path, pn, "%s", CUDNN_GRAPH_LIB);
    if (want) {
        snprintf(path, pn, "%s", want);
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    } else {
#ifdef DDP_CUDA_EMU
        Dl_info
            self; /* the emulated cuDNN (emu_cudnn.c) lives in this plugin: load it as a library like the real one */
        if (dladdr((void *)&ddp_sdpa_create, &self) && self.dli_fname) snprintf(path, pn, "%s", self.dli_fname);
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
#else
        if (*DDP_CUDNN_LIBRARY_DIR) {
            snprintf(path, pn, "%s/%s", DDP_CUDNN_LIBRARY_DIR, CUDNN_GRAPH_LIB);
            lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        }
        if (!lib) {
            snprintf(path, pn, "%s", CUDNN_GRAPH_LIB);
            lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        }
#endif
    }
    return lib;
}

void ddp_sdpa_describe(char *buf, size_t n)
{
    char path[1200];
    void *lib = open_lib(path, sizeof path);
    if (!lib) {
        const char *e = dlerror();
        snprintf(buf, n, "unavailable: %s", e ? e : path);
        return;
    }
    size_t (*version)(void) = NULL;
    *(void **)&version = dlsym(lib, "cudnnGetVersion");
    if (!version)
        snprintf(buf, n, "unavailable: %s has no cudnnGetVersion", path);
    else
        snprintf(buf, n, "%zu.%zu.%zu (%s)", version() / 10000, version() / 100 % 100, version() % 100, path);
    dlclose(lib);
}

ddp_status ddp_sdpa_create(void *stream, ddp_sdpa **out, char *why, size_t n)
{
    *out = NULL;
    char path[1200];
    void *lib = open_lib(path, sizeof path);
    if (!lib) {
        const char *e = dlerror();
        snprintf(why, n, "cuDNN not loaded: %s", e ? e : path);
        return DDP_OK;
    }
    ddp_sdpa *s = calloc(1, sizeof *s);
    if (!s) {
        dlclose(lib);
        return ddp_set_error(DDP_ERR_NOMEM, "out of memory for the cuDNN attention state");
    }
    s->lib = lib;
#define SDPA_FN_LOAD(fn)                                                                          \
    if (!(*(void **)&s->f.fn = dlsym(lib, #fn))) {                                                \
        snprintf(why, n, "cuDNN not used: %s has no %s (cuDNN 9.15 or later needed)", path, #fn); \
        ddp_sdpa_destroy(s);                                                                      \
        return DDP_OK;                                                                            \
    }
    SDPA_FNS(SDPA_FN_LOAD)
#undef SDPA_FN_LOAD
    size_t v = s->f.cudnnGetVersion();
    snprintf(s->version, sizeof s->version, "cuDNN %zu.%zu.%zu (%s)", v / 10000, v / 100 % 100, v % 100, path);
    cudnnStatus_t r = v < 91500 ? CUDNN_STATUS_NOT_SUPPORTED : s->f.cudnnCreate(&s->h);
    if (r == CUDNN_STATUS_SUCCESS) r = s->f.cudnnSetStream(s->h, (cudaStream_t)stream);
    if (r != CUDNN_STATUS_SUCCESS) { /* too old (the SDPA operation with sequence lengths: 9.15), or no GPU: reported */
        snprintf(why, n, "cuDNN not used: %s: %s", s->version,
                 v < 91500 ? "9.15 or later needed" : s->f.cudnnGetErrorString(r));
        ddp_sdpa_destroy(s);
        return DDP_OK;
    }
    snprintf(why, n, "%s", s->version);
    *out = s;
    return DDP_OK;
}

static void plan_free(ddp_sdpa *s, sdpa_plan *p)
{
    if (p->plan) s->f.cudnnBackendDestroyDescriptor(p->plan);
    for (int i = 0; i < p->nd; i++) s->f.cudnnBackendDestroyDescriptor(p->d[i]);
    memset(p, 0, sizeof *p);
}

void ddp_sdpa_destroy(ddp_sdpa *s)
{
    if (!s) return;
    if (s->h) {
        for (int i = 0; i < SDPA_PLANS; i++) plan_free(s, &s->plans[i]);
        for (int64_t i = 0; i < s->ndead; i++) s->f.cudnnBackendDestroyDescriptor(s->dead[i]);
        s->f.cudnnDestroy(s->h);
    }
    free(s->dead);
    if (s->lib) dlclose(s->lib);
    free(s);
}

const char *ddp_sdpa_version(const ddp_sdpa *s) { return s->version; }
const char *ddp_sdpa_refusal(const ddp_sdpa *s) { return s->refusal; }
void ddp_sdpa_counts_get(const ddp_sdpa *s, ddp_sdpa_counts *c) { *c = s->n; }

/* ------------------------------------------------------------------ building a plan */
/* The SDPA forward operation of k over the packed layout (docs/transformer.md): q, k and v are the three column blocks
 * of one row of q|k|v (row stride 3HD), head h at columns h*D; o rows of HD; the statistics [R, H]. */
static cudnnBackendDescriptor_t sdpa_fwd_op(ddp_sdpa *s, sdpa_plan *p, cudnnStatus_t *r)
{
    sdpa_io t;
    ddp_sdpa_io(s, p, 0, &t, r);
    cudnnBackendDescriptor_t op = ddp_sdpa_desc(s, p, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, r);
    const cudnnBackendDescriptor_t *in[] = {&t.q, &t.k, &t.v, &t.o, &t.st, &t.sc, &t.sq, &t.skv};
    const cudnnBackendAttributeName_t at[] = {
        CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC,         CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC,
        CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC,         CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC,
        CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC,     CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC,
        CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
        ddp_sdpa_set(s, op, at[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, in[i], r);
    ddp_sdpa_fin(s, op, r);
    return op;
}

/* 1 when the engine of configuration cfg carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC; its global index in *gi */
static int nondeterministic(ddp_sdpa *s, cudnnBackendDescriptor_t cfg, int64_t *gi)
{
    cudnnBackendDescriptor_t eng = NULL;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t n = 0, got = 0;
    int nd = 1; /* unknown counts as nondeterministic */
    *gi = -1;
    if (s->f.cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) return 1;
    if (s->f.cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &eng) ==
            CUDNN_STATUS_SUCCESS &&
        s->f.cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                      CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) == CUDNN_STATUS_SUCCESS) {
        nd = 0;
        for (int64_t i = 0; i < n; i++) nd |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
        s->f.cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, gi);
    }
    s->f.cudnnBackendDestroyDescriptor(eng);
    return nd;
}

/* The graph of k, the heuristics' configurations in their order (for the backward the deterministic ones first), the
 * first whose plan finalizes. A refusal leaves p->ok 0 and its reason in s->refusal. */
static void build(ddp_sdpa *s, sdpa_plan *p)
{
    cudnnStatus_t r = CUDNN_STATUS_SUCCESS;
    const char *stage = p->k.bwd ? "the backward's operations" : "the SDPA operation";
    cudnnBackendDescriptor_t g = p->k.bwd ? ddp_sdpa_bwd_graph(s, p, &r) : NULL;
    if (!p->k.bwd) {
        cudnnBackendDescriptor_t op = sdpa_fwd_op(s, p, &r);
        g = ddp_sdpa_desc(s, p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &r);
        if (r == CUDNN_STATUS_SUCCESS) stage = "the operation graph";
        ddp_sdpa_set(s, g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op, &r);
        ddp_sdpa_set(s, g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->h, &r);
        ddp_sdpa_fin(s, g, &r);
    }
    if (r == CUDNN_STATUS_SUCCESS) stage = "the engine heuristics";
    cudnnBackendDescriptor_t heur = ddp_sdpa_desc(s, p, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &r);
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    ddp_sdpa_set(s, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g, &r);
    ddp_sdpa_set(s, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, &r);
    ddp_sdpa_fin(s, heur, &r);
    cudnnBackendDescriptor_t cfg[SDPA_CONFIGS] = {0};
    int64_t ncfg = 0;
    for (int i = 0; i < SDPA_CONFIGS && r == CUDNN_STATUS_SUCCESS; i++)
        r = s->f.cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]);
    if (r == CUDNN_STATUS_SUCCESS)
        r = s->f.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                          SDPA_CONFIGS, &ncfg, cfg);
    if (r == CUDNN_STATUS_SUCCESS && ncfg == 0) r = CUDNN_STATUS_NOT_SUPPORTED;
    if (r == CUDNN_STATUS_SUCCESS) stage = "every execution plan";
    cudnnStatus_t last = r;
    /* pass 0: deterministic engines only (the backward); pass 1: any */
    for (int pass = p->k.bwd ? 0 : 1; pass < 2 && r == CUDNN_STATUS_SUCCESS && !p->plan; pass++) {
        for (int64_t i = 0; i < ncfg && !p->plan; i++) {
            int64_t gi;
            int nd = nondeterministic(s, cfg[i], &gi);
            if (pass == 0 && nd) continue;
            if (pass == 1 && p->k.bwd && !nd) continue; /* tried in pass 0 */
            cudnnBackendDescriptor_t plan = NULL;
            cudnnStatus_t e = s->f.cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
            ddp_sdpa_set(s, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->h, &e);
            ddp_sdpa_set(s, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i],
                         &e);
            ddp_sdpa_fin(s, plan, &e);
            int64_t got = 0;
            if (e == CUDNN_STATUS_SUCCESS)
                e = s->f.cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                                  &got, &p->ws);
            if (e == CUDNN_STATUS_SUCCESS) {
                p->ws += p->k.bwd ? ddp_sdpa_rowsum_bytes(&p->k) : 0;
                p->plan = plan;
                p->d[p->nd++] = cfg[i]; /* the plan's configuration lives as long as the plan */
                cfg[i] = NULL;
                if (p->k.bwd) s->n.bwd_engine = gi, s->n.bwd_deterministic = !nd;
            } else {
                last = e;
                if (plan) s->f.cudnnBackendDestroyDescriptor(plan);
            }
        }
    }
    for (int i = 0; i < SDPA_CONFIGS; i++)
        if (cfg[i]) s->f.cudnnBackendDestroyDescriptor(cfg[i]);
    p->ok = p->plan != NULL;
    if (!p->ok) {
        if (r == CUDNN_STATUS_SUCCESS) r = last;
        snprintf(s->refusal, sizeof s->refusal,
                 "cuDNN refused the %s attention of %lld samples x %lld rows, %lld heads of %lld at %s: %s%s",
                 p->k.bwd ? "backward" : "forward", (long long)p->k.B, (long long)p->k.S, (long long)p->k.H,
                 (long long)p->k.D, stage, s->f.cudnnGetErrorString(r), last_error(s));
    }
}

/* p's descriptors to s->dead (destroyed with the handle), p emptied */
static ddp_status bury(ddp_sdpa *s, sdpa_plan *p)
{
    cudnnBackendDescriptor_t *d = realloc(s->dead, (size_t)(s->ndead + p->nd + 1) * sizeof *d);
    if (!d) return ddp_set_error(DDP_ERR_NOMEM, "out of memory for the cuDNN plans replaced");
    s->dead = d;
    if (p->plan) d[s->ndead++] = p->plan;
    for (int i = 0; i < p->nd; i++) d[s->ndead++] = p->d[i];
    memset(p, 0, sizeof *p);
    return DDP_OK;
}

static int same(const ddp_sdpa_key *a, const ddp_sdpa_key *b)
{
    return a->bwd == b->bwd && a->B == b->B && a->S == b->S && a->H == b->H && a->D == b->D &&
           a->st_align == b->st_align;
}
static sdpa_plan *lookup(ddp_sdpa *s, const ddp_sdpa_key *k)
{
    for (int i = 0; i < SDPA_PLANS; i++)
        if (s->plans[i].used && same(&s->plans[i].k, k)) return &s->plans[i];
    return NULL;
}

ddp_status ddp_sdpa_prepare(ddp_sdpa *s, const ddp_sdpa_key *k, int *ok, int64_t *ws)
{
    sdpa_plan *p = lookup(s, k);
    if (p) {
        s->n.hits += p->ok;
    } else {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        p = &s->plans[0]; /* a free slot, else the least recently used plan, whose descriptors are kept till the end */
        for (int i = 1; i < SDPA_PLANS && p->used; i++)
            if (!s->plans[i].used || s->plans[i].last < p->last) p = &s->plans[i];
        if (p->used) DDP_CHECK(bury(s, p));
        p->k = *k;
        p->used = 1;
        build(s, p);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        s->n.build_us += (int64_t)((t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000);
        if (p->ok)
            s->n.built++;
        else
            s->n.refused++;
    }
    p->last = ++s->calls;
    *ok = p->ok;
    *ws = p->ws;
    return DDP_OK;
}

ddp_status ddp_sdpa_run(ddp_sdpa *s, const ddp_sdpa_key *k, const ddp_sdpa_ptrs *a)
{
    sdpa_plan *p = lookup(s, k);
    if (!p || !p->ok) return ddp_set_error(DDP_ERR_ARG, "cuDNN attention: run without a prepared plan");
    char *qkv = a->qkv, *dqkv = a->dqkv;
    const int64_t d2 = k->H * k->D * 2; /* bytes of one third of a q|k|v row in bf16 */
    float scale = a->scale, one = 1.0f, neg_inf = -INFINITY;
    /* the backward: its row sums at the workspace's start, cuDNN's workspace after them */
    char *ws = a->ws, *cu_ws = ws + (k->bwd ? ddp_sdpa_rowsum_bytes(k) : 0);
    int64_t uid[18] = {U_Q,     U_K,      U_V,  U_O,  U_ST, U_SCALE, U_SEQ_Q, U_SEQ_KV,  U_OFF_QKV,
                       U_OFF_O, U_OFF_ST, U_DO, U_DQ, U_DK, U_DV,    U_ONE,   U_NEG_INF, U_ROWSUM};
    void *ptr[18] = {qkv,      qkv + d2,  qkv + 2 * d2, a->o, a->stats,  &scale,        a->seq, a->seq,   a->off_qkv,
                     a->off_o, a->off_st, a->dout,      dqkv, dqkv + d2, dqkv + 2 * d2, &one,   &neg_inf, ws};
    int64_t n = k->bwd ? 18 : 11;
    cudnnStatus_t r = CUDNN_STATUS_SUCCESS;
    cudnnBackendDescriptor_t vp = NULL;
    r = s->f.cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (r != CUDNN_STATUS_SUCCESS) return SDPA_ERR(s, cudnnBackendCreateDescriptor(VARIANT_PACK), r);
    ddp_sdpa_set(s, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uid, &r);
    ddp_sdpa_set(s, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptr, &r);
    ddp_sdpa_set(s, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &cu_ws, &r);
    ddp_sdpa_fin(s, vp, &r);
    if (r == CUDNN_STATUS_SUCCESS) r = s->f.cudnnBackendExecute(s->h, p->plan, vp);
    ddp_status st = r == CUDNN_STATUS_SUCCESS ? DDP_OK : SDPA_ERR(s, cudnnBackendExecute(variant pack), r);
    s->f.cudnnBackendDestroyDescriptor(vp);
    return st;
}

/* emu_cudnn_finalize.c — the emulated cuDNN's finalize (see emu_cudnn.h): the rules cuDNN checks on the descriptors the
 * plugin's fused attention builds (tensors, SDPA forward/backward, graph, heuristics, engines, plans, variant packs),
 * and cudnnBackendGetAttribute, the descriptors it returns copied and finalized as cuDNN does. */
#include "emu_cudnn.h"

#include <stdlib.h>
#include <string.h>

#define ENGINE_COUNT 2 /* engine 0: nondeterministic (backward), engine 1: deterministic */

/* The roles an SDPA forward [0] and backward [1] require, and their names in messages. */
static const unsigned role_required[2] = {MAIN_FWD, MAIN_BWD | BIT(R_STATS)};
static const char *const role_name[NROLE] = {"Q",  "K",  "V",  "O",     "stats",     "dO",
                                             "dQ", "dK", "dV", "scale", "seq_len_q", "seq_len_kv"};

static desc *get_desc(const desc *d, cudnnBackendAttributeName_t name)
{
    const attr *a = get(d, name);
    return a && a->n ? ((desc **)a->v)[0] : NULL;
}
static int64_t get_i64(const desc *d, cudnnBackendAttributeName_t name)
{
    const attr *a = get(d, name);
    return a && a->n ? ((const int64_t *)a->v)[0] : 0;
}

/* ------------------------------------------------------------------ finalize */
static int data_type_ok(cudnnDataType_t t)
{
    return t == CUDNN_DATA_BFLOAT16 || t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_INT32 || t == CUDNN_DATA_INT64 ||
           t == CUDNN_DATA_BOOLEAN;
}

static int dims_are(const desc *t, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    return t->dim[0] == d0 && t->dim[1] == d1 && t->dim[2] == d2 && t->dim[3] == d3;
}

static cudnnStatus_t tensor_ragged(desc *d)
{
    desc *r = d->ragged = get_desc(d, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC);
    if (!r) return CUDNN_STATUS_SUCCESS;
    if (r->dt != CUDNN_DATA_INT32 && r->dt != CUDNN_DATA_INT64)
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "tensor %lld: ragged offsets must be int32 or int64",
                              (long long)d->uid);
    if (!dims_are(r, d->dim[0] + 1, 1, 1, 1) || r->by_value)
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "tensor %lld: ragged offsets must be [B+1,1,1,1]",
                              (long long)d->uid);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t tensor_fin(desc *d)
{
    const attr *dt = get(d, CUDNN_ATTR_TENSOR_DATA_TYPE), *dim = get(d, CUDNN_ATTR_TENSOR_DIMENSIONS);
    const attr *str = get(d, CUDNN_ATTR_TENSOR_STRIDES), *bv = get(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
    if (!dt || !dim || !str || !get(d, CUDNN_ATTR_TENSOR_UNIQUE_ID) || !get(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT))
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM,
                              "tensor: data type, dimensions, strides, unique id and alignment required");
    if (dim->n != str->n) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "tensor: as many strides as dimensions");
    if (dim->n != 4) return emu_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "tensor: the emulator takes 4 dimensions");
    memcpy(d->dim, dim->v, sizeof d->dim);
    memcpy(d->str, str->v, sizeof d->str);
    for (int i = 0; i < 4; i++)
        if (d->dim[i] < 1 || d->str[i] < 1)
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "tensor: dimensions and strides >= 1");
    d->dt = *(const cudnnDataType_t *)dt->v;
    if (!data_type_ok(d->dt)) return emu_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "tensor: data type %d", (int)d->dt);
    d->uid = get_i64(d, CUDNN_ATTR_TENSOR_UNIQUE_ID);
    d->align = get_i64(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
    if (d->align < 1 || (d->align & (d->align - 1)))
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "tensor: alignment %lld", (long long)d->align);
    d->by_value = bv && *(const bool *)bv->v;
    const attr *virt = get(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL);
    d->is_virtual = virt && *(const bool *)virt->v;
    if (d->is_virtual && d->by_value)
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "tensor %lld: virtual and by value", (long long)d->uid);
    return tensor_ragged(d);
}

/* Two descriptors with one unique id must describe the same tensor. */
static int same_tensor(const desc *a, const desc *b)
{
    return a->dt == b->dt && a->by_value == b->by_value && !memcmp(a->dim, b->dim, sizeof a->dim) &&
           !memcmp(a->str, b->str, sizeof a->str) &&
           (a->ragged ? b->ragged && a->ragged->uid == b->ragged->uid : !b->ragged);
}
static int add_tensor(desc **list, int n, desc *t)
{
    for (int i = 0; i < n; i++)
        if (list[i]->uid == t->uid) return list[i] == t || same_tensor(list[i], t) ? n : -1;
    list[n] = t;
    return n + 1;
}
/* The distinct tensors (by unique id) of an operation and their ragged offsets; -1 when one id names two tensors. */
int emu_cudnn_tensors_of(const desc *d, desc *list[2 * NROLE])
{
    int n = 0;
    for (int r = 0; r < NROLE && n >= 0; r++) {
        if (d->role[r]) n = add_tensor(list, n, d->role[r]);
        if (n >= 0 && d->role[r] && d->role[r]->ragged) n = add_tensor(list, n, d->role[r]->ragged);
    }
    return n;
}

/* The shape rules of the flash engines the plugin's SDPA uses (bf16 Q, K, V, O and gradients, all [B,H,S,D]). */
static cudnnStatus_t sdpa_main(const desc *d, unsigned main)
{
    const desc *q = d->role[R_Q];
    for (int r = 0; r < NROLE; r++)
        if ((main & BIT(r)) && (memcmp(d->role[r]->dim, q->dim, sizeof q->dim) || d->role[r]->by_value))
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "SDPA: %s is not [B,H,S,D] like Q", role_name[r]);
    for (int r = 0; r < NROLE; r++)
        if ((main & BIT(r)) && d->role[r]->dt != CUDNN_DATA_BFLOAT16)
            return emu_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "SDPA: %s must be bf16 (the flash engines)",
                                  role_name[r]);
    if (q->dim[3] % 8 || q->dim[3] > 128)
        return emu_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "SDPA: head width %lld (a multiple of 8, at most 128)",
                              (long long)q->dim[3]);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t sdpa_side(const desc *d)
{
    const desc *q = d->role[R_Q], *st = d->role[R_STATS], *sc = d->role[R_SCALE];
    if (st && (!dims_are(st, q->dim[0], q->dim[1], q->dim[2], 1) || st->dt != CUDNN_DATA_FLOAT || st->by_value))
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "SDPA: stats must be fp32 [B,H,S,1]");
    for (int r = R_SEQQ; r <= R_SEQKV; r++) {
        const desc *s = d->role[r];
        if (s && (!dims_are(s, q->dim[0], 1, 1, 1) || s->dt != CUDNN_DATA_INT32 || s->by_value || s->ragged))
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "SDPA: %s must be int32 [B,1,1,1]", role_name[r]);
    }
    if (sc && (!dims_are(sc, 1, 1, 1, 1) || sc->dt != CUDNN_DATA_FLOAT || !sc->by_value))
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "SDPA: the scale must be an fp32 [1,1,1,1] tensor by value");
    for (int r = 0; r < NROLE; r++)
        if (d->role[r] && d->role[r]->ragged && (!d->role[R_SEQQ] || !d->role[R_SEQKV]))
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "SDPA: ragged offsets need both sequence-length tensors");
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t sdpa_fin(desc *d)
{
    int bwd = d->type == CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR;
    desc *list[2 * NROLE];
    for (int r = 0; r < NROLE; r++)
        d->role[r] = emu_cudnn_role_in[bwd] & BIT(r) ? get_desc(d, emu_cudnn_role_attr[bwd][r]) : NULL;
    for (int r = 0; r < NROLE; r++)
        if ((role_required[bwd] & BIT(r)) && !d->role[r])
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "SDPA %s: %s is required", bwd ? "backward" : "forward",
                                  role_name[r]);
    cudnnStatus_t s = sdpa_main(d, bwd ? MAIN_BWD : MAIN_FWD);
    if (s == CUDNN_STATUS_SUCCESS) s = sdpa_side(d);
    if (s == CUDNN_STATUS_SUCCESS && emu_cudnn_tensors_of(d, list) < 0)
        s = emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "SDPA: one unique id names two different tensors");
    d->bwd = bwd;
    return s;
}

/* What a graph, engine, configuration or plan inherits from the descriptor under it. */
static void inherit(desc *d, const desc *from)
{
    d->bwd = from->bwd;
    d->graph = from->graph;
    memcpy(d->role, from->role, sizeof d->role);
    d->index = from->index;
}

static cudnnStatus_t graph_fin(desc *d)
{
    const attr *ops = get(d, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    if (!ops) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "operation graph: no operations");
    const desc *op = ((desc **)ops->v)[0];
    if (ops->n > 1 || is_graph_op(op->type)) return emu_cudnn_graph_fin(d);
    if (!is_sdpa(op->type))
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "operation graph: descriptor %d is no operation", op->type);
    /* cuDNN 9.19 finalizes the unified SDPA backward operation but not a graph of it (buildDAG: BAD_PARAM; no engine
     * takes it); MPIDDP_EMU_CUDNN_BWD=1 emulates a cuDNN that does */
    const char *bwd = getenv("MPIDDP_EMU_CUDNN_BWD");
    if (op->type == CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR && !(bwd && !strcmp(bwd, "1")))
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "operation graph: outputGraph.buildDAG() (the SDPA backward, "
                                                      "as cuDNN 9.19; MPIDDP_EMU_CUDNN_BWD=1 takes it)");
    inherit(d, op);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t heur_fin(desc *d)
{
    const attr *mode = get(d, CUDNN_ATTR_ENGINEHEUR_MODE);
    const desc *g = get_desc(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
    if (!g || !mode)
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "engine heuristics: operation graph and mode required");
    cudnnBackendHeurMode_t m = *(const cudnnBackendHeurMode_t *)mode->v;
    if (m != CUDNN_HEUR_MODE_INSTANT && m != CUDNN_HEUR_MODE_A && m != CUDNN_HEUR_MODE_B &&
        m != CUDNN_HEUR_MODE_FALLBACK)
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "engine heuristics: mode %d", (int)m);
    inherit(d, g);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t engine_fin(desc *d)
{
    const desc *g = get_desc(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH);
    if (!g || !get(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX))
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "engine: operation graph and global index required");
    inherit(d, g);
    d->index = get_i64(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
    if (d->index < 0 || d->index >= ENGINE_COUNT)
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "engine: global index %lld", (long long)d->index);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t cfg_fin(desc *d)
{
    const desc *e = get_desc(d, CUDNN_ATTR_ENGINECFG_ENGINE);
    if (!e) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "engine configuration: engine required");
    inherit(d, e);
    return CUDNN_STATUS_SUCCESS;
}

/* The backward's workspace: an fp32 per query row (the emulator keeps dO.O there). */
static int64_t workspace_of(const desc *d)
{
    const desc *q = d->role[R_Q];
    return d->bwd && !d->graph ? q->dim[0] * q->dim[1] * q->dim[2] * (int64_t)sizeof(float) : 0;
}

/* MPIDDP_EMU_CUDNN_REFUSE=1: no plan is supported; =bwd: no backward plan (read at each finalize). */
static int refused(int bwd)
{
    const char *v = getenv("MPIDDP_EMU_CUDNN_REFUSE");
    return v && (!strcmp(v, "1") || (bwd && !strcmp(v, "bwd")));
}

static cudnnStatus_t plan_fin(desc *d)
{
    const desc *c = get_desc(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
    if (!c) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "execution plan: engine configuration required");
    inherit(d, c);
    if (refused(d->bwd))
        return emu_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "MPIDDP_EMU_CUDNN_REFUSE: no engine supports this %s graph",
                              d->bwd ? "backward" : "forward");
    d->ws = workspace_of(d);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t pack_fin(desc *d)
{
    const attr *ids = get(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), *ptrs = get(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    int64_t n = ids ? ids->n : 0;
    if (n != (ptrs ? ptrs->n : 0))
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "variant pack: as many pointers as unique ids");
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < i; k++)
            if (((const int64_t *)ids->v)[i] == ((const int64_t *)ids->v)[k])
                return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "variant pack: unique id %lld twice",
                                      (long long)((const int64_t *)ids->v)[i]);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t finalize(desc *d)
{
    switch (d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return tensor_fin(d);
    case CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR: return sdpa_fin(d);
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: return graph_fin(d);
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: return heur_fin(d);
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR: return engine_fin(d);
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: return cfg_fin(d);
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: return plan_fin(d);
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: return pack_fin(d);
    default:
        if (is_graph_op(d->type)) return emu_cudnn_op_fin(d);
        return emu_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "descriptor type %d", (int)d->type);
    }
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t p)
{
    desc *d = as_desc(p);
    if (!d || d->destroyed) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "Finalize: not a descriptor");
    if (d->finalized) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "Finalize: already finalized");
    cudnnStatus_t s = finalize(d);
    d->finalized = s == CUDNN_STATUS_SUCCESS;
    return s;
}

/* ------------------------------------------------------------------ get */
/* A finalized copy of src in the caller's descriptor dst (how cuDNN returns descriptors). */
static cudnnStatus_t copy_into(cudnnBackendDescriptor_t out, const desc *src)
{
    desc *d = as_desc(out);
    if (!d || d->destroyed || d->type != src->type)
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "GetAttribute: output descriptor must be of type %d",
                              (int)src->type);
    if (d == src) return CUDNN_STATUS_SUCCESS;
    if (d->refs > 1) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "GetAttribute: output descriptor is in use");
    emu_cudnn_clear_attrs(d);
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    for (int i = 0; i < src->nattr && s == CUDNN_STATUS_SUCCESS; i++)
        s = emu_cudnn_store(d, src->a[i].name, src->a[i].type, src->a[i].n, src->a[i].v);
    if (s == CUDNN_STATUS_SUCCESS && src->finalized) s = finalize(d);
    d->finalized = s == CUDNN_STATUS_SUCCESS && src->finalized;
    return s;
}

/* min(requested, n) values into out (descriptors copied into the caller's); the count: those, or n when none asked */
static cudnnStatus_t put_values(cudnnBackendAttributeType_t type, const void *vals, int64_t n, int64_t req,
                                int64_t *count, void *out)
{
    int64_t k = req < n ? req : n;
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    if (type == DESC_T)
        for (int64_t i = 0; i < k && s == CUDNN_STATUS_SUCCESS; i++)
            s = copy_into(((cudnnBackendDescriptor_t *)out)[i], ((desc *const *)vals)[i]);
    else if (k > 0)
        memcpy(out, vals, (size_t)k * emu_cudnn_type_size(type));
    if (count) *count = req > 0 ? k : n;
    return s;
}

/* One heuristic result: out becomes a finalized configuration of engine `index` on graph g. */
static cudnnStatus_t make_cfg(cudnnBackendDescriptor_t out, desc *g, int64_t index)
{
    desc *c = as_desc(out), *e = emu_cudnn_new_desc(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    if (!e) return emu_cudnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of memory");
    cudnnStatus_t s = !c || c->destroyed || c->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR || c->refs > 1
                          ? emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM,
                                           "heuristic results go into engine configuration descriptors")
                          : emu_cudnn_store(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, DESC_T, 1, &g);
    if (s == CUDNN_STATUS_SUCCESS) s = emu_cudnn_store(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &index);
    if (s == CUDNN_STATUS_SUCCESS && (s = finalize(e)) == CUDNN_STATUS_SUCCESS) {
        e->finalized = 1;
        emu_cudnn_clear_attrs(c);
        if ((s = emu_cudnn_store(c, CUDNN_ATTR_ENGINECFG_ENGINE, DESC_T, 1, &e)) == CUDNN_STATUS_SUCCESS)
            s = finalize(c);
        c->finalized = s == CUDNN_STATUS_SUCCESS;
    }
    emu_cudnn_unref(e);
    return s;
}

static cudnnStatus_t heur_results(const desc *d, int64_t req, int64_t *count, void *out)
{
    int64_t n = d->bwd ? 2 : 1, k = req < n ? req : n; /* backward: the nondeterministic engine 0 first */
    desc *g = get_desc(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    for (int64_t i = 0; i < k && s == CUDNN_STATUS_SUCCESS; i++)
        s = make_cfg(((cudnnBackendDescriptor_t *)out)[i], g, i);
    if (count) *count = req > 0 ? k : n;
    return s;
}

/* Attributes computed from a finalized descriptor. */
static int computed(const desc *d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t *type)
{
    static const struct {
        cudnnBackendDescriptorType_t desc;
        cudnnBackendAttributeName_t name;
        cudnnBackendAttributeType_t type;
    } c[] = {
        {GRAPH_D, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64},
        {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_RESULTS, DESC_T},
        {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE},
        {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64},
        {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        if (c[i].desc == d->type && c[i].name == name) return *type = c[i].type, 1;
    return 0;
}

static cudnnStatus_t get_computed(const desc *d, cudnnBackendAttributeName_t name, int64_t req, int64_t *count,
                                  void *out)
{
    if (!d->finalized)
        return emu_cudnn_fail(CUDNN_STATUS_NOT_INITIALIZED, "GetAttribute %d: descriptor not finalized", name);
    if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS) return heur_results(d, req, count, out);
    if (name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE) {
        cudnnBackendNumericalNote_t notes[2] = {CUDNN_NUMERICAL_NOTE_TENSOR_CORE,
                                                CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC};
        return put_values(CUDNN_TYPE_NUMERICAL_NOTE, notes, d->bwd && d->index == 0 ? 2 : 1, req, count, out);
    }
    int64_t v = name == CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT ? ENGINE_COUNT
                : d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR  ? d->ws
                                                                      : workspace_of(d);
    return put_values(CUDNN_TYPE_INT64, &v, 1, req, count, out);
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const p, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t req, int64_t *count, void *out)
{
    desc *d = as_desc(p);
    cudnnBackendAttributeType_t want;
    if (!d || d->destroyed) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "GetAttribute: not a descriptor");
    if (req < 0 || (req > 0 && !out)) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "GetAttribute %d: no room", name);
    if (computed(d, name, &want)) {
        if (type != want)
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "GetAttribute %d: type %d, not %d", name, type, want);
        return get_computed(d, name, req, count, out);
    }
    const attr *a = get(d, name);
    if (!a)
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "GetAttribute %d: not set on descriptor type %d", name, d->type);
    if (type != a->type)
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "GetAttribute %d: type %d, not %d", name, type, a->type);
    return put_values(a->type, a->v, a->n, req, count, out);
}

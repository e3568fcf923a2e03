/* emu_cudnn.c — the emulated cuDNN backend (graph) API over the real cudnn_graph.h: the descriptors the plugin's fused
 * attention builds (tensors, SDPA forward/backward, graph, heuristics, engines, plans, variant packs), validated as
 * cuDNN does, and a sequential flash-attention job queued on the handle's emulated stream by cudnnBackendExecute. */
#include <cudnn_graph.h>

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the emulator's entry points, with plain types: emu_cuda.h's CUDA types clash with the real headers' */
int ddp_emu_enqueue_host(void *stream, void (*fn)(void *), void *arg, void (*free_arg)(void *));
int ddp_emu_is_device_ptr(const void *p, size_t bytes);
void ddp_emu__fault(const char *fmt, const char *name);

#define EMU_CUDNN_VERSION 91900
#define ENGINE_COUNT 2 /* engine 0: nondeterministic (backward), engine 1: deterministic */
#define MAGIC_HANDLE 0x444e4e48u
#define MAGIC_DESC 0x444e4e44u
#define MAXATTR 16

/* ------------------------------------------------------------------ status, last error */
static __thread char t_msg[256];

__attribute__((format(printf, 2, 3))) static cudnnStatus_t fail(cudnnStatus_t s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(t_msg, sizeof t_msg, "emulated cuDNN: ");
    vsnprintf(t_msg + n, sizeof t_msg - (size_t)n, fmt, ap);
    va_end(ap);
    return s;
}

void cudnnGetLastErrorString(char *message, size_t max_size)
{
    if (message && max_size) snprintf(message, max_size, "%s", t_msg);
}

const char *cudnnGetErrorString(cudnnStatus_t s)
{
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED:
        return "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_UNKNOWN_STATUS_FOUND";
    }
}

size_t cudnnGetVersion(void) { return EMU_CUDNN_VERSION; }

/* ------------------------------------------------------------------ handle */
struct cudnnContext {
    uint32_t magic;
    cudaStream_t stream;
};

static int handle_ok(cudnnHandle_t h) { return h && h->magic == MAGIC_HANDLE; }

cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
    int n = 0;
    if (!h) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreate: NULL handle pointer");
    *h = NULL;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) return fail(CUDNN_STATUS_NOT_INITIALIZED, "no CUDA device");
    *h = calloc(1, sizeof **h);
    if (!*h) return fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "cudnnCreate: out of memory");
    (*h)->magic = MAGIC_HANDLE;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h)
{
    if (!handle_ok(h)) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: not a handle");
    h->magic = 0;
    free(h);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s)
{
    if (!handle_ok(h)) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: not a handle");
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetStream(cudnnHandle_t h, cudaStream_t *s)
{
    if (!handle_ok(h) || !s) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetStream: not a handle");
    *s = h->stream;
    return CUDNN_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------ descriptors */
/* An SDPA operation's tensors, by role; the main ones are [B,H,S,D] bf16. */
enum { R_Q, R_K, R_V, R_O, R_STATS, R_DO, R_DQ, R_DK, R_DV, R_SCALE, R_SEQQ, R_SEQKV, NROLE };
#define NDATA (R_DV + 1) /* the roles the job reads and writes */
#define BIT(r) (1u << (r))
#define MAIN_FWD (BIT(R_Q) | BIT(R_K) | BIT(R_V) | BIT(R_O))
#define MAIN_BWD (MAIN_FWD | BIT(R_DO) | BIT(R_DQ) | BIT(R_DK) | BIT(R_DV))
static const unsigned role_in[2] = {MAIN_FWD | BIT(R_STATS) | BIT(R_SCALE) | BIT(R_SEQQ) | BIT(R_SEQKV),
                                    (1u << NROLE) - 1};
static const unsigned role_required[2] = {MAIN_FWD, MAIN_BWD | BIT(R_STATS)};
static const cudnnBackendAttributeName_t role_attr[2][NROLE] = {
    {CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC,
     CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, 0, 0, 0, 0,
     CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC,
     CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC,
     CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC,
     CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC,
     CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC,
     CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_QDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_KVDESC}};
static const char *const role_name[NROLE] = {"Q",  "K",  "V",  "O",     "stats",     "dO",
                                             "dQ", "dK", "dV", "scale", "seq_len_q", "seq_len_kv"};

typedef struct {
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int64_t n;
    void *v; /* n values, copied; descriptors referenced */
} attr;

typedef struct desc desc;
struct desc {
    uint32_t magic;
    cudnnBackendDescriptorType_t type;
    int finalized, destroyed, refs, nattr;
    attr a[MAXATTR];
    /* derived by finalize: a tensor's properties */
    cudnnDataType_t dt;
    int64_t dim[4], str[4], uid, align;
    bool by_value;
    desc *ragged;
    /* an operation's tensors, inherited by its graph, engines, configurations and plans (borrowed: the attribute
     * chain holds them) */
    int bwd;
    desc *role[NROLE];
    int64_t index, ws; /* engine (and up): its global index; plan: workspace bytes */
};

static desc *as_desc(cudnnBackendDescriptor_t p)
{
    desc *d = p;
    return d && d->magic == MAGIC_DESC ? d : NULL;
}

static void unref(desc *d);

static void drop_attr(attr *a)
{
    if (a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        for (int64_t k = 0; k < a->n; k++) unref(((desc **)a->v)[k]);
    free(a->v);
}
static void clear_attrs(desc *d)
{
    for (int i = 0; i < d->nattr; i++) drop_attr(&d->a[i]);
    d->nattr = 0;
    d->finalized = 0;
}

static void unref(desc *d)
{
    if (__atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    clear_attrs(d);
    d->magic = 0;
    free(d);
}

static desc *new_desc(cudnnBackendDescriptorType_t t)
{
    desc *d = calloc(1, sizeof *d);
    if (d) d->magic = MAGIC_DESC, d->type = t, d->refs = 1;
    return d;
}

static size_t type_size(cudnnBackendAttributeType_t t)
{
    switch (t) {
    case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_DATA_TYPE: return sizeof(cudnnDataType_t);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64: return sizeof(int64_t);
    case CUDNN_TYPE_VOID_PTR: return sizeof(void *);
    case CUDNN_TYPE_HEUR_MODE: return sizeof(cudnnBackendHeurMode_t);
    case CUDNN_TYPE_NUMERICAL_NOTE: return sizeof(cudnnBackendNumericalNote_t);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
    default: return 0;
    }
}

static const attr *get(const desc *d, cudnnBackendAttributeName_t name)
{
    for (int i = 0; i < d->nattr; i++)
        if (d->a[i].name == name) return &d->a[i];
    return NULL;
}
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

/* Sets (or replaces) an attribute: the values copied, descriptors referenced. */
static cudnnStatus_t store(desc *d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n,
                           const void *vals)
{
    size_t bytes = (size_t)n * type_size(type);
    void *v = bytes ? malloc(bytes) : NULL;
    if (bytes && !v) return fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of memory");
    if (bytes) memcpy(v, vals, bytes);
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        for (int64_t k = 0; k < n; k++) __atomic_add_fetch(&((desc **)v)[k]->refs, 1, __ATOMIC_ACQ_REL);
    attr *a = (attr *)get(d, name);
    if (a) { /* the old values go */
        drop_attr(a);
    } else if (d->nattr < MAXATTR) {
        a = &d->a[d->nattr++];
    } else {
        free(v);
        return fail(CUDNN_STATUS_INTERNAL_ERROR, "too many attributes");
    }
    *a = (attr){name, type, n, v};
    return CUDNN_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------ settable attributes */
typedef struct {
    cudnnBackendDescriptorType_t desc;
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int64_t lo, hi; /* element count */
    int ref;        /* a descriptor attribute: the type its values must have (-1: any) */
} spec;

#define TENSOR_D CUDNN_BACKEND_TENSOR_DESCRIPTOR
#define GRAPH_D CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR
#define PACK_D CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR
#define DESC_T CUDNN_TYPE_BACKEND_DESCRIPTOR
static const spec specs[] = {
    {TENSOR_D, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, 1, 0},
    {TENSOR_D, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, 0},
    {TENSOR_D, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, 0},
    {TENSOR_D, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, 1, 0},
    {TENSOR_D, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, 1, 0},
    {TENSOR_D, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, 1, 0},
    {TENSOR_D, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, DESC_T, 1, 1, TENSOR_D},
    {GRAPH_D, CUDNN_ATTR_OPERATIONGRAPH_OPS, DESC_T, 1, 64, -1},
    {GRAPH_D, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, 1, 0},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, DESC_T, 1, 1, GRAPH_D},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, 1, 0},
    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, DESC_T, 1, 1, GRAPH_D},
    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, 1, 0},
    {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, CUDNN_ATTR_ENGINECFG_ENGINE, DESC_T, 1, 1, CUDNN_BACKEND_ENGINE_DESCRIPTOR},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, 1, 0},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, DESC_T, 1, 1,
     CUDNN_BACKEND_ENGINECFG_DESCRIPTOR},
    {PACK_D, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 0, 1 << 16, 0},
    {PACK_D, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 0, 1 << 16, 0},
    {PACK_D, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, 1, 0},
};
static const spec sdpa_tensor_spec = {0, 0, DESC_T, 1, 1, TENSOR_D};

static int is_sdpa(cudnnBackendDescriptorType_t t)
{
    return t == CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR || t == CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR;
}

static const spec *find_spec(cudnnBackendDescriptorType_t t, cudnnBackendAttributeName_t name)
{
    if (is_sdpa(t)) {
        int bwd = t == CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR;
        for (int r = 0; r < NROLE; r++)
            if ((role_in[bwd] & BIT(r)) && role_attr[bwd][r] == name) return &sdpa_tensor_spec;
        return NULL;
    }
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        if (specs[i].desc == t && specs[i].name == name) return &specs[i];
    return NULL;
}

/* Descriptor values must be finalized descriptors of the attribute's type; handles must be handles. */
static cudnnStatus_t check_values(const spec *s, int64_t n, const void *vals)
{
    for (int64_t k = 0; k < n && s->type == DESC_T; k++) {
        desc *v = as_desc(((cudnnBackendDescriptor_t const *)vals)[k]);
        if (!v || v->destroyed) return fail(CUDNN_STATUS_BAD_PARAM, "attribute %d: not a descriptor", (int)s->name);
        if (!v->finalized) return fail(CUDNN_STATUS_BAD_PARAM, "attribute %d: descriptor not finalized", (int)s->name);
        if (s->ref >= 0 && (int)v->type != s->ref)
            return fail(CUDNN_STATUS_BAD_PARAM, "attribute %d: descriptor of the wrong type", (int)s->name);
    }
    if (s->type == CUDNN_TYPE_HANDLE && !handle_ok(*(cudnnHandle_t const *)vals))
        return fail(CUDNN_STATUS_BAD_PARAM, "attribute %d: not a handle", (int)s->name);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *out)
{
    if (!out) return fail(CUDNN_STATUS_BAD_PARAM, "CreateDescriptor: NULL output");
    *out = NULL;
    switch (t) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: break;
    default: return fail(CUDNN_STATUS_NOT_SUPPORTED, "descriptor type %d is outside the emulated subset", (int)t);
    }
    *out = new_desc(t);
    return *out ? CUDNN_STATUS_SUCCESS : fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of memory");
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t p)
{
    desc *d = as_desc(p);
    if (!d || d->destroyed) return fail(CUDNN_STATUS_BAD_PARAM, "DestroyDescriptor: not a descriptor");
    d->destroyed = 1; /* operations that use it keep it alive */
    unref(d);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t p, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t n, const void *vals)
{
    desc *d = as_desc(p);
    if (!d || d->destroyed) return fail(CUDNN_STATUS_BAD_PARAM, "SetAttribute: not a descriptor");
    if (d->finalized) return fail(CUDNN_STATUS_NOT_INITIALIZED, "SetAttribute %d: the descriptor is finalized", name);
    const spec *s = find_spec(d->type, name);
    if (!s) return fail(CUDNN_STATUS_BAD_PARAM, "attribute %d is not settable on descriptor type %d", name, d->type);
    if (type != s->type) return fail(CUDNN_STATUS_BAD_PARAM, "attribute %d: type %d, not %d", name, type, s->type);
    if (n < s->lo || n > s->hi || (n && !vals))
        return fail(CUDNN_STATUS_BAD_PARAM, "attribute %d: %lld elements", name, (long long)n);
    cudnnStatus_t st = check_values(s, n, vals);
    return st != CUDNN_STATUS_SUCCESS ? st : store(d, name, type, n, vals);
}

/* ------------------------------------------------------------------ finalize */
static int data_type_ok(cudnnDataType_t t)
{
    return t == CUDNN_DATA_BFLOAT16 || t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_INT32 || t == CUDNN_DATA_INT64;
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
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor %lld: ragged offsets must be int32 or int64", (long long)d->uid);
    if (!dims_are(r, d->dim[0] + 1, 1, 1, 1) || r->by_value)
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor %lld: ragged offsets must be [B+1,1,1,1]", (long long)d->uid);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t tensor_fin(desc *d)
{
    const attr *dt = get(d, CUDNN_ATTR_TENSOR_DATA_TYPE), *dim = get(d, CUDNN_ATTR_TENSOR_DIMENSIONS);
    const attr *str = get(d, CUDNN_ATTR_TENSOR_STRIDES), *bv = get(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
    if (!dt || !dim || !str || !get(d, CUDNN_ATTR_TENSOR_UNIQUE_ID) || !get(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT))
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor: data type, dimensions, strides, unique id and alignment required");
    if (dim->n != str->n) return fail(CUDNN_STATUS_BAD_PARAM, "tensor: as many strides as dimensions");
    if (dim->n != 4) return fail(CUDNN_STATUS_NOT_SUPPORTED, "tensor: the emulator takes 4 dimensions");
    memcpy(d->dim, dim->v, sizeof d->dim);
    memcpy(d->str, str->v, sizeof d->str);
    for (int i = 0; i < 4; i++)
        if (d->dim[i] < 1 || d->str[i] < 1) return fail(CUDNN_STATUS_BAD_PARAM, "tensor: dimensions and strides >= 1");
    d->dt = *(const cudnnDataType_t *)dt->v;
    if (!data_type_ok(d->dt)) return fail(CUDNN_STATUS_NOT_SUPPORTED, "tensor: data type %d", (int)d->dt);
    d->uid = get_i64(d, CUDNN_ATTR_TENSOR_UNIQUE_ID);
    d->align = get_i64(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
    if (d->align < 1 || (d->align & (d->align - 1)))
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor: alignment %lld", (long long)d->align);
    d->by_value = bv && *(const bool *)bv->v;
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
static int tensors_of(const desc *d, desc *list[2 * NROLE])
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
            return fail(CUDNN_STATUS_BAD_PARAM, "SDPA: %s is not [B,H,S,D] like Q", role_name[r]);
    for (int r = 0; r < NROLE; r++)
        if ((main & BIT(r)) && d->role[r]->dt != CUDNN_DATA_BFLOAT16)
            return fail(CUDNN_STATUS_NOT_SUPPORTED, "SDPA: %s must be bf16 (the flash engines)", role_name[r]);
    if (q->dim[3] % 8 || q->dim[3] > 128)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "SDPA: head width %lld (a multiple of 8, at most 128)",
                    (long long)q->dim[3]);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t sdpa_side(const desc *d)
{
    const desc *q = d->role[R_Q], *st = d->role[R_STATS], *sc = d->role[R_SCALE];
    if (st && (!dims_are(st, q->dim[0], q->dim[1], q->dim[2], 1) || st->dt != CUDNN_DATA_FLOAT || st->by_value))
        return fail(CUDNN_STATUS_BAD_PARAM, "SDPA: stats must be fp32 [B,H,S,1]");
    for (int r = R_SEQQ; r <= R_SEQKV; r++) {
        const desc *s = d->role[r];
        if (s && (!dims_are(s, q->dim[0], 1, 1, 1) || s->dt != CUDNN_DATA_INT32 || s->by_value || s->ragged))
            return fail(CUDNN_STATUS_BAD_PARAM, "SDPA: %s must be int32 [B,1,1,1]", role_name[r]);
    }
    if (sc && (!dims_are(sc, 1, 1, 1, 1) || sc->dt != CUDNN_DATA_FLOAT || !sc->by_value))
        return fail(CUDNN_STATUS_BAD_PARAM, "SDPA: the scale must be an fp32 [1,1,1,1] tensor by value");
    for (int r = 0; r < NROLE; r++)
        if (d->role[r] && d->role[r]->ragged && (!d->role[R_SEQQ] || !d->role[R_SEQKV]))
            return fail(CUDNN_STATUS_BAD_PARAM, "SDPA: ragged offsets need both sequence-length tensors");
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t sdpa_fin(desc *d)
{
    int bwd = d->type == CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR;
    desc *list[2 * NROLE];
    for (int r = 0; r < NROLE; r++) d->role[r] = role_in[bwd] & BIT(r) ? get_desc(d, role_attr[bwd][r]) : NULL;
    for (int r = 0; r < NROLE; r++)
        if ((role_required[bwd] & BIT(r)) && !d->role[r])
            return fail(CUDNN_STATUS_BAD_PARAM, "SDPA %s: %s is required", bwd ? "backward" : "forward", role_name[r]);
    cudnnStatus_t s = sdpa_main(d, bwd ? MAIN_BWD : MAIN_FWD);
    if (s == CUDNN_STATUS_SUCCESS) s = sdpa_side(d);
    if (s == CUDNN_STATUS_SUCCESS && tensors_of(d, list) < 0)
        s = fail(CUDNN_STATUS_BAD_PARAM, "SDPA: one unique id names two different tensors");
    d->bwd = bwd;
    return s;
}

/* What a graph, engine, configuration or plan inherits from the descriptor under it. */
static void inherit(desc *d, const desc *from)
{
    d->bwd = from->bwd;
    memcpy(d->role, from->role, sizeof d->role);
    d->index = from->index;
}

static cudnnStatus_t graph_fin(desc *d)
{
    const attr *ops = get(d, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    if (!ops) return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: no operations");
    if (ops->n != 1) return fail(CUDNN_STATUS_NOT_SUPPORTED, "operation graph: the emulator runs one SDPA operation");
    const desc *op = ((desc **)ops->v)[0];
    if (!is_sdpa(op->type))
        return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: descriptor %d is no operation", op->type);
    inherit(d, op);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t heur_fin(desc *d)
{
    const attr *mode = get(d, CUDNN_ATTR_ENGINEHEUR_MODE);
    const desc *g = get_desc(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
    if (!g || !mode) return fail(CUDNN_STATUS_BAD_PARAM, "engine heuristics: operation graph and mode required");
    cudnnBackendHeurMode_t m = *(const cudnnBackendHeurMode_t *)mode->v;
    if (m != CUDNN_HEUR_MODE_INSTANT && m != CUDNN_HEUR_MODE_A && m != CUDNN_HEUR_MODE_B &&
        m != CUDNN_HEUR_MODE_FALLBACK)
        return fail(CUDNN_STATUS_BAD_PARAM, "engine heuristics: mode %d", (int)m);
    inherit(d, g);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t engine_fin(desc *d)
{
    const desc *g = get_desc(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH);
    if (!g || !get(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX))
        return fail(CUDNN_STATUS_BAD_PARAM, "engine: operation graph and global index required");
    inherit(d, g);
    d->index = get_i64(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
    if (d->index < 0 || d->index >= ENGINE_COUNT)
        return fail(CUDNN_STATUS_BAD_PARAM, "engine: global index %lld", (long long)d->index);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t cfg_fin(desc *d)
{
    const desc *e = get_desc(d, CUDNN_ATTR_ENGINECFG_ENGINE);
    if (!e) return fail(CUDNN_STATUS_BAD_PARAM, "engine configuration: engine required");
    inherit(d, e);
    return CUDNN_STATUS_SUCCESS;
}

/* The backward's workspace: an fp32 per query row (the emulator keeps dO.O there). */
static int64_t workspace_of(const desc *d)
{
    const desc *q = d->role[R_Q];
    return d->bwd ? q->dim[0] * q->dim[1] * q->dim[2] * (int64_t)sizeof(float) : 0;
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
    if (!c) return fail(CUDNN_STATUS_BAD_PARAM, "execution plan: engine configuration required");
    inherit(d, c);
    if (refused(d->bwd))
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "MPIDDP_EMU_CUDNN_REFUSE: no engine supports this %s graph",
                    d->bwd ? "backward" : "forward");
    d->ws = workspace_of(d);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t pack_fin(desc *d)
{
    const attr *ids = get(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), *ptrs = get(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    int64_t n = ids ? ids->n : 0;
    if (n != (ptrs ? ptrs->n : 0)) return fail(CUDNN_STATUS_BAD_PARAM, "variant pack: as many pointers as unique ids");
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < i; k++)
            if (((const int64_t *)ids->v)[i] == ((const int64_t *)ids->v)[k])
                return fail(CUDNN_STATUS_BAD_PARAM, "variant pack: unique id %lld twice",
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
    default: return fail(CUDNN_STATUS_NOT_SUPPORTED, "descriptor type %d", (int)d->type);
    }
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t p)
{
    desc *d = as_desc(p);
    if (!d || d->destroyed) return fail(CUDNN_STATUS_BAD_PARAM, "Finalize: not a descriptor");
    if (d->finalized) return fail(CUDNN_STATUS_BAD_PARAM, "Finalize: already finalized");
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
        return fail(CUDNN_STATUS_BAD_PARAM, "GetAttribute: output descriptor must be of type %d", (int)src->type);
    if (d == src) return CUDNN_STATUS_SUCCESS;
    if (d->refs > 1) return fail(CUDNN_STATUS_BAD_PARAM, "GetAttribute: output descriptor is in use");
    clear_attrs(d);
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    for (int i = 0; i < src->nattr && s == CUDNN_STATUS_SUCCESS; i++)
        s = store(d, src->a[i].name, src->a[i].type, src->a[i].n, src->a[i].v);
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
        memcpy(out, vals, (size_t)k * type_size(type));
    if (count) *count = req > 0 ? k : n;
    return s;
}

/* One heuristic result: out becomes a finalized configuration of engine `index` on graph g. */
static cudnnStatus_t make_cfg(cudnnBackendDescriptor_t out, desc *g, int64_t index)
{
    desc *c = as_desc(out), *e = new_desc(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    if (!e) return fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of memory");
    cudnnStatus_t s = !c || c->destroyed || c->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR || c->refs > 1
                          ? fail(CUDNN_STATUS_BAD_PARAM, "heuristic results go into engine configuration descriptors")
                          : store(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, DESC_T, 1, &g);
    if (s == CUDNN_STATUS_SUCCESS) s = store(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &index);
    if (s == CUDNN_STATUS_SUCCESS && (s = finalize(e)) == CUDNN_STATUS_SUCCESS) {
        e->finalized = 1;
        clear_attrs(c);
        if ((s = store(c, CUDNN_ATTR_ENGINECFG_ENGINE, DESC_T, 1, &e)) == CUDNN_STATUS_SUCCESS) s = finalize(c);
        c->finalized = s == CUDNN_STATUS_SUCCESS;
    }
    unref(e);
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
    if (!d->finalized) return fail(CUDNN_STATUS_NOT_INITIALIZED, "GetAttribute %d: descriptor not finalized", name);
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
    if (!d || d->destroyed) return fail(CUDNN_STATUS_BAD_PARAM, "GetAttribute: not a descriptor");
    if (req < 0 || (req > 0 && !out)) return fail(CUDNN_STATUS_BAD_PARAM, "GetAttribute %d: no room", name);
    if (computed(d, name, &want)) {
        if (type != want) return fail(CUDNN_STATUS_BAD_PARAM, "GetAttribute %d: type %d, not %d", name, type, want);
        return get_computed(d, name, req, count, out);
    }
    const attr *a = get(d, name);
    if (!a) return fail(CUDNN_STATUS_BAD_PARAM, "GetAttribute %d: not set on descriptor type %d", name, d->type);
    if (type != a->type) return fail(CUDNN_STATUS_BAD_PARAM, "GetAttribute %d: type %d, not %d", name, type, a->type);
    return put_values(a->type, a->v, a->n, req, count, out);
}

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

static float bf16_to_f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
/* nearest even; NaN becomes the canonical 0x7FFF, as CUDA's __float2bfloat16_rn */
static uint16_t f_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float bf16_round(float f) { return bf16_to_f(f_to_bf16(f)); }

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
        for (int64_t d = 0; d < j->D; d++) out[s * j->D + d] = bf16_to_f(((uint16_t *)t->p)[elem(t, base, h, s, d)]);
}
static void scatter(const sdpa_job *j, int r, int64_t b, int64_t h, int64_t s, const float *row)
{
    const jten *t = &j->t[r];
    int64_t base = row_base(t, b);
    for (int64_t d = 0; d < j->D; d++) ((uint16_t *)t->p)[elem(t, base, h, s, d)] = f_to_bf16(row[d]);
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

/* dV_c = sum_i bf16(P_ic) dO_i; dK_c = scale sum_i dS_ic Q_i */
static void bwd_keys(const sdpa_job *j, const scratch *w, int64_t b, int64_t h, int64_t sq, int64_t skv)
{
    int64_t D = j->D, S = j->S;
    for (int64_t c = 0; c < skv; c++) {
        memset(w->acc, 0, (size_t)D * sizeof(float));
        for (int64_t i = 0; i < sq; i++)
            for (int64_t d = 0; d < D; d++) w->acc[d] += bf16_round(w->p[i * S + c]) * w->dout[i * D + d];
        scatter(j, R_DV, b, h, c, w->acc);
        memset(w->acc, 0, (size_t)D * sizeof(float));
        for (int64_t i = 0; i < sq; i++)
            for (int64_t d = 0; d < D; d++) w->acc[d] += w->ds[i * S + c] * w->q[i * D + d];
        for (int64_t d = 0; d < D; d++) w->acc[d] *= j->scale;
        scatter(j, R_DK, b, h, c, w->acc);
    }
}

/* dQ_i = scale sum_c dS_ic K_c */
static void bwd_queries(const sdpa_job *j, const scratch *w, int64_t b, int64_t h, int64_t sq, int64_t skv)
{
    int64_t D = j->D, S = j->S;
    for (int64_t i = 0; i < sq; i++) {
        memset(w->acc, 0, (size_t)D * sizeof(float));
        for (int64_t c = 0; c < skv; c++)
            for (int64_t d = 0; d < D; d++) w->acc[d] += w->ds[i * S + c] * w->k[c * D + d];
        for (int64_t d = 0; d < D; d++) w->acc[d] *= j->scale;
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
    int n = tensors_of(plan, list), found;
    for (int i = 0; i < n; i++) {
        const void *p = pack_ptr(v, list[i]->uid, &found);
        if (!found || !p)
            return fail(CUDNN_STATUS_BAD_PARAM, "variant pack: no pointer for unique id %lld", (long long)list[i]->uid);
        if (!list[i]->by_value && !ddp_emu_is_device_ptr(p, 1))
            return fail(CUDNN_STATUS_BAD_PARAM, "variant pack: unique id %lld is not device memory",
                        (long long)list[i]->uid);
        if (!list[i]->by_value && (uintptr_t)p % (uintptr_t)list[i]->align)
            return fail(CUDNN_STATUS_BAD_PARAM, "variant pack: unique id %lld is not %lld-byte aligned",
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
        return fail(CUDNN_STATUS_BAD_PARAM, "variant pack: the plan needs %lld bytes of device workspace",
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
    if (!handle_ok(h)) return fail(CUDNN_STATUS_BAD_PARAM, "Execute: not a handle");
    if (!p || p->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !v ||
        v->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
        return fail(CUDNN_STATUS_BAD_PARAM, "Execute: needs an execution plan and a variant pack");
    if (!p->finalized || !v->finalized) return fail(CUDNN_STATUS_BAD_PARAM, "Execute: descriptors not finalized");
    sdpa_job *j = calloc(1, sizeof *j);
    if (!j) return fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of memory");
    cudnnStatus_t s = bind(j, p, v);
    if (s != CUDNN_STATUS_SUCCESS) {
        free(j);
        return s;
    }
    if (ddp_emu_enqueue_host((void *)h->stream, run_job, j, free) != 0) /* it freed the job */
        return fail(CUDNN_STATUS_EXECUTION_FAILED, "Execute: the stream refused the work");
    return CUDNN_STATUS_SUCCESS;
}

/* emu_cudnn.c — the emulated cuDNN backend (graph) API over the real cudnn_graph.h (see emu_cudnn.h): status and the
 * last error, the handle, and the descriptor store (create, destroy, set attributes, validated as cuDNN does); finalize
 * and get are emu_cudnn_finalize.c's, the flash engine and cudnnBackendExecute emu_cudnn_sdpa.c's. */
#include "emu_cudnn.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMU_CUDNN_VERSION 91900

/* ------------------------------------------------------------------ status, last error */
static __thread char t_msg[256];

__attribute__((format(printf, 2, 3))) cudnnStatus_t emu_cudnn_fail(cudnnStatus_t s, const char *fmt, ...)
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
cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
    int n = 0;
    if (!h) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreate: NULL handle pointer");
    *h = NULL;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1)
        return emu_cudnn_fail(CUDNN_STATUS_NOT_INITIALIZED, "no CUDA device");
    *h = calloc(1, sizeof **h);
    if (!*h) return emu_cudnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "cudnnCreate: out of memory");
    (*h)->magic = MAGIC_HANDLE;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h)
{
    if (!handle_ok(h)) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: not a handle");
    h->magic = 0;
    free(h);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s)
{
    if (!handle_ok(h)) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: not a handle");
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetStream(cudnnHandle_t h, cudaStream_t *s)
{
    if (!handle_ok(h) || !s) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetStream: not a handle");
    *s = h->stream;
    return CUDNN_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------ descriptors */
/* The roles an SDPA forward [0] and backward [1] take, and the attributes that set them. */
const unsigned emu_cudnn_role_in[2] = {MAIN_FWD | BIT(R_STATS) | BIT(R_SCALE) | BIT(R_SEQQ) | BIT(R_SEQKV),
                                       (1u << NROLE) - 1};
const cudnnBackendAttributeName_t emu_cudnn_role_attr[2][NROLE] = {
    {CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC,
     CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, 0, 0, 0, 0,
     CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC,
     CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC,
     CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC,
     CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC,
     CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC,
     CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_QDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_KVDESC}};

static void drop_attr(attr *a)
{
    if (a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        for (int64_t k = 0; k < a->n; k++) emu_cudnn_unref(((desc **)a->v)[k]);
    free(a->v);
}
void emu_cudnn_clear_attrs(desc *d)
{
    for (int i = 0; i < d->nattr; i++) drop_attr(&d->a[i]);
    d->nattr = 0;
    emu_cudnn_prog_free(d->prog); /* what finalize derived from them */
    d->prog = NULL;
    d->finalized = 0;
}

void emu_cudnn_unref(desc *d)
{
    if (__atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    emu_cudnn_clear_attrs(d);
    d->magic = 0;
    free(d);
}

desc *emu_cudnn_new_desc(cudnnBackendDescriptorType_t t)
{
    desc *d = calloc(1, sizeof *d);
    if (d) d->magic = MAGIC_DESC, d->type = t, d->refs = 1;
    return d;
}

size_t emu_cudnn_type_size(cudnnBackendAttributeType_t t)
{
    switch (t) {
    case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_DATA_TYPE: return sizeof(cudnnDataType_t);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64: return sizeof(int64_t);
    case CUDNN_TYPE_VOID_PTR: return sizeof(void *);
    case CUDNN_TYPE_HEUR_MODE: return sizeof(cudnnBackendHeurMode_t);
    case CUDNN_TYPE_POINTWISE_MODE: return sizeof(cudnnPointwiseMode_t);
    case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE: return sizeof(cudnnReduceTensorOp_t);
    case CUDNN_TYPE_NUMERICAL_NOTE: return sizeof(cudnnBackendNumericalNote_t);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
    default: return 0;
    }
}

/* Sets (or replaces) an attribute: the values copied, descriptors referenced. */
cudnnStatus_t emu_cudnn_store(desc *d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n,
                              const void *vals)
{
    size_t bytes = (size_t)n * emu_cudnn_type_size(type);
    void *v = bytes ? malloc(bytes) : NULL;
    if (bytes && !v) return emu_cudnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of memory");
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
        return emu_cudnn_fail(CUDNN_STATUS_INTERNAL_ERROR, "too many attributes");
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

#define PW_D CUDNN_BACKEND_POINTWISE_DESCRIPTOR
#define OP_PW CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR
#define OP_MM CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR
#define OP_RED CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR
static const spec specs[] = {
    {TENSOR_D, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, 1, 0},
    {TENSOR_D, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, 0},
    {TENSOR_D, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, 0},
    {TENSOR_D, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, 1, 0},
    {TENSOR_D, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, 1, 0},
    {TENSOR_D, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, 1, 0},
    {TENSOR_D, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, DESC_T, 1, 1, TENSOR_D},
    {TENSOR_D, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, 1, 0},
    {PW_D, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, 1, 0},
    {PW_D, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, 1, 0},
    {PW_D, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, 1, 0},
    {CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, 1, 0},
    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, 1, 0},
    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, 1, 0},
    {OP_PW, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, DESC_T, 1, 1, PW_D},
    {OP_PW, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, DESC_T, 1, 1, TENSOR_D},
    {OP_PW, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, DESC_T, 1, 1, TENSOR_D},
    {OP_PW, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, DESC_T, 1, 1, TENSOR_D},
    {OP_PW, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, DESC_T, 1, 1, TENSOR_D},
    {OP_MM, CUDNN_ATTR_OPERATION_MATMUL_ADESC, DESC_T, 1, 1, TENSOR_D},
    {OP_MM, CUDNN_ATTR_OPERATION_MATMUL_BDESC, DESC_T, 1, 1, TENSOR_D},
    {OP_MM, CUDNN_ATTR_OPERATION_MATMUL_CDESC, DESC_T, 1, 1, TENSOR_D},
    {OP_MM, CUDNN_ATTR_OPERATION_MATMUL_DESC, DESC_T, 1, 1, CUDNN_BACKEND_MATMUL_DESCRIPTOR},
    {OP_MM, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, DESC_T, 1, 1, TENSOR_D},
    {OP_MM, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, DESC_T, 1, 1, TENSOR_D},
    {OP_MM, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, DESC_T, 1, 1, TENSOR_D},
    {OP_RED, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, DESC_T, 1, 1, TENSOR_D},
    {OP_RED, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, DESC_T, 1, 1, TENSOR_D},
    {OP_RED, CUDNN_ATTR_OPERATION_REDUCTION_DESC, DESC_T, 1, 1, CUDNN_BACKEND_REDUCTION_DESCRIPTOR},
    {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, DESC_T, 1, 1, TENSOR_D},
    {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, DESC_T, 1, 1, TENSOR_D},
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

static const spec *find_spec(cudnnBackendDescriptorType_t t, cudnnBackendAttributeName_t name)
{
    if (is_sdpa(t)) {
        int bwd = t == CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR;
        for (int r = 0; r < NROLE; r++)
            if ((emu_cudnn_role_in[bwd] & BIT(r)) && emu_cudnn_role_attr[bwd][r] == name) return &sdpa_tensor_spec;
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
        if (!v || v->destroyed)
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "attribute %d: not a descriptor", (int)s->name);
        if (!v->finalized)
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "attribute %d: descriptor not finalized", (int)s->name);
        if (s->ref >= 0 && (int)v->type != s->ref)
            return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "attribute %d: descriptor of the wrong type", (int)s->name);
    }
    if (s->type == CUDNN_TYPE_HANDLE && !handle_ok(*(cudnnHandle_t const *)vals))
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "attribute %d: not a handle", (int)s->name);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *out)
{
    if (!out) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "CreateDescriptor: NULL output");
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
    default:
        if (is_graph_op(t)) break;
        return emu_cudnn_fail(CUDNN_STATUS_NOT_SUPPORTED, "descriptor type %d is outside the emulated subset", (int)t);
    }
    *out = emu_cudnn_new_desc(t);
    return *out ? CUDNN_STATUS_SUCCESS
                : emu_cudnn_fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of memory");
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t p)
{
    desc *d = as_desc(p);
    if (!d || d->destroyed) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "DestroyDescriptor: not a descriptor");
    d->destroyed = 1; /* operations that use it keep it alive */
    emu_cudnn_unref(d);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t p, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t n, const void *vals)
{
    desc *d = as_desc(p);
    if (!d || d->destroyed) return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "SetAttribute: not a descriptor");
    if (d->finalized)
        return emu_cudnn_fail(CUDNN_STATUS_NOT_INITIALIZED, "SetAttribute %d: the descriptor is finalized", name);
    const spec *s = find_spec(d->type, name);
    if (!s)
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "attribute %d is not settable on descriptor type %d", name,
                              d->type);
    if (type != s->type)
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "attribute %d: type %d, not %d", name, type, s->type);
    if (n < s->lo || n > s->hi || (n && !vals))
        return emu_cudnn_fail(CUDNN_STATUS_BAD_PARAM, "attribute %d: %lld elements", name, (long long)n);
    cudnnStatus_t st = check_values(s, n, vals);
    return st != CUDNN_STATUS_SUCCESS ? st : emu_cudnn_store(d, name, type, n, vals);
}

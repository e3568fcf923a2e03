/* emu_cudnn.h — private to emu_cudnn*.c, the emulated cuDNN backend API: the handle, the descriptor (its attributes
 * and what finalize derives), the SDPA tensor roles, and the helpers the files share. */
#ifndef DDP_EMU_CUDNN_H
#define DDP_EMU_CUDNN_H
#include <cudnn_graph.h>

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define MAGIC_HANDLE 0x444e4e48u
#define MAGIC_DESC 0x444e4e44u
#define MAXATTR 16

struct cudnnContext {
    uint32_t magic;
    cudaStream_t stream;
};

static inline int handle_ok(cudnnHandle_t h) { return h && h->magic == MAGIC_HANDLE; }

/* An SDPA operation's tensors, by role; the main ones are [B,H,S,D] bf16. */
enum { R_Q, R_K, R_V, R_O, R_STATS, R_DO, R_DQ, R_DK, R_DV, R_SCALE, R_SEQQ, R_SEQKV, NROLE };
#define NDATA (R_DV + 1) /* the roles the job reads and writes */
#define BIT(r) (1u << (r))
#define MAIN_FWD (BIT(R_Q) | BIT(R_K) | BIT(R_V) | BIT(R_O))
#define MAIN_BWD (MAIN_FWD | BIT(R_DO) | BIT(R_DQ) | BIT(R_DK) | BIT(R_DV))
extern const unsigned emu_cudnn_role_in[2];                             /* the roles an operation takes */
extern const cudnnBackendAttributeName_t emu_cudnn_role_attr[2][NROLE]; /* their attributes: [bwd][role] */

#define TENSOR_D CUDNN_BACKEND_TENSOR_DESCRIPTOR
#define GRAPH_D CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR
#define PACK_D CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR
#define DESC_T CUDNN_TYPE_BACKEND_DESCRIPTOR

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
    bool is_virtual;
    /* a graph of matmul, pointwise, reduction and reshape operations (emu_cudnn_graph.c), inherited like role[]; its
     * order of execution (prog, the graph's own); a pointwise's mode and axis; a reshape's permutation of x's dims */
    const desc *graph;
    void *prog;
    cudnnPointwiseMode_t mode;
    int64_t axis;
    int perm[4];
};

static inline desc *as_desc(cudnnBackendDescriptor_t p)
{
    desc *d = p;
    return d && d->magic == MAGIC_DESC ? d : NULL;
}
static inline const attr *get(const desc *d, cudnnBackendAttributeName_t name)
{
    for (int i = 0; i < d->nattr; i++)
        if (d->a[i].name == name) return &d->a[i];
    return NULL;
}
static inline int is_sdpa(cudnnBackendDescriptorType_t t)
{
    return t == CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR || t == CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR;
}

/* bf16 bits to fp32, and fp32 to bf16 at nearest even (NaN becomes the canonical 0x7FFF, as CUDA's
 * __float2bfloat16_rn): emu_cuda.h's own, which these files cannot include (its CUDA types clash with the real
 * headers') */
static inline float emu_bf16_to_f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint16_t emu_f_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* emu_cudnn.c: the last error, the descriptor store */
__attribute__((format(printf, 2, 3))) cudnnStatus_t emu_cudnn_fail(cudnnStatus_t s, const char *fmt, ...);
desc *emu_cudnn_new_desc(cudnnBackendDescriptorType_t t);
void emu_cudnn_unref(desc *d);
void emu_cudnn_clear_attrs(desc *d);
size_t emu_cudnn_type_size(cudnnBackendAttributeType_t t);
cudnnStatus_t emu_cudnn_store(desc *d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n,
                              const void *vals);
/* emu_cudnn_finalize.c */
int emu_cudnn_tensors_of(const desc *d, desc *list[2 * NROLE]);
/* emu_cudnn_graph.c: the operations' finalize, the graph's, its execution */
static inline int is_graph_op(cudnnBackendDescriptorType_t t)
{
    return t == CUDNN_BACKEND_POINTWISE_DESCRIPTOR || t == CUDNN_BACKEND_MATMUL_DESCRIPTOR ||
           t == CUDNN_BACKEND_REDUCTION_DESCRIPTOR || t == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR ||
           t == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR || t == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR ||
           t == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR;
}
cudnnStatus_t emu_cudnn_op_fin(desc *d);
cudnnStatus_t emu_cudnn_graph_fin(desc *d);
cudnnStatus_t emu_cudnn_graph_execute(cudnnHandle_t h, const desc *plan, const desc *pack);
void emu_cudnn_prog_free(void *p);

#endif

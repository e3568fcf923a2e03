/* emu_cudnn.h — private to emu_cudnn*.c, the emulated cuDNN backend API: the handle, the descriptor (its attributes
 * and what finalize derives), the SDPA tensor roles, and the helpers the files share. */
#ifndef DDP_EMU_CUDNN_H
#define DDP_EMU_CUDNN_H
#include <cudnn_graph.h>

#include <stdbool.h>
#include <stdint.h>

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

#endif

/* test_emu_cudnn.h — what test_emu_cudnn.c (SDPA) and test_emu_cudnn_graph.c (operation graphs) share: the real
 * cudnn_graph.h over the emulator's CUDA types, the problem's sizes and tensors, the context, the descriptor helpers.
 */
#ifndef DDP_TEST_EMU_CUDNN_H
#define DDP_TEST_EMU_CUDNN_H

#include "test_emu.h"

/* the real cudnn_graph.h over emu_cuda.h's CUDA types: the runtime headers it includes would define them again */
#define __CUDA_RUNTIME_API_H__
#define __LIBRARY_TYPES_H__
typedef enum libraryPropertyType_t { MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL } libraryPropertyType;
typedef struct CUgraph_st *cudaGraph_t;
#include <cudnn_graph.h>
#include <stdbool.h>

/* the problem: CB samples of up to CS rows (CR in all), CH heads of width CD, rows of q|k|v (CQKV) and of o (CHD) */
enum { CB = 2, CH = 2, CD = 8, CS = 8, CR = 8, CHD = CH * CD, CQKV = 3 * CHD };
/* the tensors, unique id 100 + index: the SDPA roles, then the ragged offsets of q|k|v, o|do and the stats */
enum { TQ, TK, TV, TO, TST, TDO, TDQ, TDK, TDV, TSC, TSQ, TSKV, TRQKV, TRO, TRST, NT };
#define CK(call) assert_int_equal((call), CUDNN_STATUS_SUCCESS)
#define CD_DESC CUDNN_TYPE_BACKEND_DESCRIPTOR

typedef struct {
    cudaStream_t s;
    cudnnHandle_t h;
    cudnnBackendDescriptor_t t[NT];
    void *ptr[NT]; /* by tensor: device memory; the scale's: its host value */
    void *ws;
    float scale;
    uint16_t qkv[CR * CQKV], dout[CR * CHD];
} cd_ctx;

/* A finalized tensor of unique id uid; rag: its ragged offsets (or NULL); virtual, or by value */
cudnnBackendDescriptor_t cg_tensor(int64_t uid, cudnnDataType_t dt, const int64_t *dim, const int64_t *str,
                                   cudnnBackendDescriptor_t rag, bool virt, bool by_value);
void cd_destroy(cudnnBackendDescriptor_t *d, int n);
/* the plan of an engine configuration: its Finalize status */
cudnnStatus_t cd_plan_of(const cd_ctx *c, cudnnBackendDescriptor_t cfg, cudnnBackendDescriptor_t *plan);
/* the operation graphs (test_emu_cudnn_graph.c) over the context's handle, stream and workspace */
void cd_graph(cd_ctx *c);

#endif

// backend_cuda_attn_tc_emu.cpp — mpi_ddp/backend/cuda/backend_cuda_attn_tc.cu compiled as C++ for the host emulator
// (nvcuda::wmma from emu_wmma.h): a translation unit of its own, as under nvcc, holding nothing else, so the GPU
// code has one source.
#include "mpi_ddp/backend/cuda/backend_cuda_attn_tc.cu"

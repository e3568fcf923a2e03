// backend_cuda_attn_tc_emu.cpp — backend_cuda_attn_tc.cu compiled as C++ for the host emulator (libmpiddp_cudaemu.so,
// nvcuda::wmma from tests/cuda_emu/emu_wmma.h): a translation unit of its own, as under nvcc. It holds nothing else,
// so the GPU code has one source.
#include "backend_cuda_attn_tc.cu"

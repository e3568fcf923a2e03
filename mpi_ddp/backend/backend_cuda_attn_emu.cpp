// backend_cuda_attn_emu.cpp — backend_cuda_attn.cu compiled as C++ for the host emulator (libmpiddp_cudaemu.so):
// a translation unit of its own, as under nvcc. It holds nothing else, so the GPU code has one source.
#include "backend_cuda_attn.cu"

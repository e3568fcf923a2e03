// backend_cuda_enc_emu.cpp — backend_cuda_enc.cu compiled as C++ for the host emulator (libmpiddp_cudaemu.so):
// a translation unit of its own, as under nvcc. It holds nothing else, so the GPU code has one source.
#include "backend_cuda_enc.cu"

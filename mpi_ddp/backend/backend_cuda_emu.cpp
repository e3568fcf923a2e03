// backend_cuda_emu.cpp — backend_cuda.cu compiled for the host emulator (libmpiddp_cudaemu.so): the same
// kernels and cuBLAS calls, with cuda_compat.h mapping launches and the runtime onto cuda_emu.h (the
// encoder's half, backend_cuda_enc.cu, is backend_cuda_enc_emu.cpp). This file holds nothing else, so the GPU
// code has one source.
#include "backend_cuda.cu"

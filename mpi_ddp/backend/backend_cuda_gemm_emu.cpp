// backend_cuda_gemm_emu.cpp — backend_cuda_gemm.cu (the CUDA backend's GEMMs) compiled for the host emulator
// (libmpiddp_cudaemu.so), as backend_cuda_emu.cpp does for backend_cuda.cu: a translation unit of its own,
// as under nvcc. This file holds nothing else, so the GPU code has one source.
#include "backend_cuda_gemm.cu"

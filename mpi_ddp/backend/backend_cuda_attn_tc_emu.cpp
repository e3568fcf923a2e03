// backend_cuda_attn_tc_emu.cpp — backend_cuda_attn_tc.cu (attention on tensor cores, WMMA) compiled for the host
// emulator (libmpiddp_cudaemu.so), whose nvcuda::wmma is tests/cuda_emu/emu_wmma.h: a translation unit of its own,
// as under nvcc. This file holds nothing else, so the GPU code has one source.
#include "backend_cuda_attn_tc.cu"

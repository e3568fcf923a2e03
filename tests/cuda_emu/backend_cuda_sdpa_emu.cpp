// backend_cuda_sdpa_emu.cpp — mpi_ddp/backend/cuda/backend_cuda_sdpa.cu compiled as C++ for the host emulator:
// a translation unit of its own, as under nvcc, holding nothing else, so the GPU code has one source.
#include "mpi_ddp/backend/cuda/backend_cuda_sdpa.cu"

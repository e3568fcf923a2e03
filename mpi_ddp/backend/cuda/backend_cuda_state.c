/* backend_cuda_state.c — the CUDA plugin's shared state: the error slot (status.h's ddp_plugin_set_error, through
 * which ddp_set_error reports inside the plugin) and the launch and block counters (backend_cuda_state.h).
 * A file of its own, at the bottom: every other plugin file uses it and it uses none, so no call circle forms. */
#include "mpi_ddp/backend/cuda/backend_cuda_state.h"
#include "mpi_ddp/core/status.h"

/* set by ddp_cuda_plugin_api (cuda_plugin.c) when the library loads the plugin */
ddp_status (*ddp_plugin_set_error)(ddp_status st, const char *fmt, ...);

long long ddp_cuda_launches;
long long ddp_cuda_blocks;
long long ddp_cuda_backend_launches_impl(void) { return ddp_cuda_launches; }
long long ddp_cuda_backend_blocks_impl(void) { return ddp_cuda_blocks; }

/* ctx.h — the launch context every layer reads: communicators, topology, device. What the launcher said
 * (slurm/env.h), the watchdog's board (comm/watchdog.h) and the backends and NCCL communicator (comm/comm.h)
 * hang from it as their owners' types; ddp_init (comm/comm.c) allocates them with it. */
#ifndef DDP_CTX_H
#define DDP_CTX_H

#include "mpiddp.h"

#include <mpi.h>
#include <stdatomic.h>

struct ddp_ctx {
    MPI_Comm world; /* dup of MPI_COMM_WORLD, errors return */
    MPI_Comm local; /* ranks sharing this node */
    ddp_topology topo;
    struct ddp_jobfacts *facts; /* slurm/env.h */
    int owns_mpi;               /* ddp_init called MPI_Init */
    ddp_device device;
    int cuda_device;
    void *nccl;                      /* ncclComm_t on CUDA builds once bootstrapped; NULL again after an abort */
    double nccl_init_timeout;        /* seconds (the trainer sets --collective-timeout); 0: 300 */
    struct ddp_backend *backends[3]; /* by ddp_device, created on first use */
    struct ddp_watch *watch;         /* comm/watchdog.h */
    int cli_names;        /* the CLI (app/) sets it: library messages name its options (--out, --lr, ...), else the
                             ddp_train_config fields a C-API program sets (cfg.out_dir, cfg.lr, ...): optname.h, rundir.c */
    int comm_broken;      /* no further collective (comm/ctxlive.h): 1 a collective timed out and is still pending, 2
                           * this rank failed alone (ddp_train, a collective buffer; the others may wait in a collective) */
    char broken_why[768]; /* that timeout's or failure's error line */
    atomic_int alone_pending; /* a call that is not collective failed on this rank alone (any thread: a loader's
                               * ddp_dataset_sample) and no collective begun since has completed
                               * (ddp_ctx_local_failure): ddp_finalize leaves MPI_Finalize alone; collectives still run.
                               * 2 while alone_why is written, then 1 */
    char alone_why[768];      /* its error line */
};

#endif

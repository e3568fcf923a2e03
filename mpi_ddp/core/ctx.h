/* ctx.h — the launch context every layer reads: communicators, topology, device. What the launcher said
 * (slurm/env.h), the watchdog's board (comm/watchdog.h) and the backends and NCCL communicator (comm/comm.h)
 * hang from it as their owners' types; ddp_init (comm/comm.c) allocates them with it. */
#ifndef DDP_CTX_H
#define DDP_CTX_H

#include "mpiddp.h"

#include <mpi.h>
#include <pthread.h>

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
    pthread_t owner;      /* the thread that called ddp_init, the one that runs collectives (MPI_THREAD_FUNNELED) */
    int alone_pending;    /* a call that is not collective failed on this rank alone (ddp_ctx_local_failure), on the
                           * owner: until a collective begun after it completes, ddp_finalize leaves MPI_Finalize alone */
    int thread_pending;   /* the same on another thread (a loader's ddp_dataset_sample): until an agreement of a failure
                           * (ddp_agree_status, ddp_all_ok), since the owner may not have seen it in the collectives
                           * between. Both under ctxlive.c's lock; collectives still run */
    char alone_why[768];  /* the first one's error line */
    ddp_status alone_st;  /* and its status */
};

#endif

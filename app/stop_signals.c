/* stop_signals.c — the stop requests of `mpiddp train` (SIGUSR1, SIGUSR2, SIGTERM, SIGINT), taken by one thread that
 * waits for them; every other thread of the process, MPI's, OpenMP's and oneDNN's included, has them blocked,
 * so no signal handler ever runs on a compute thread's stack (docs/faults.md, "Stop signals"). A further stop signal
 * to a rank long blocked in a collective says why the stop waits. The other commands: SIGINT, SIGTERM, SIGHUP, SIGUSR1
 * and SIGUSR2 remove the temporary being written (a shard's, the manifest's), and a synth's or pack's shards, lock file
 * and the --out it made, before they end it. */
#include "stop_signals.h"

#include "mpi_ddp/comm/watchdog.h"
#include "mpi_ddp/core/fsutil.h"
#include "mpi_ddp/train/train_state.h"
#include "mpiddp.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* A further stop signal this long after the first, to a rank blocked this long in a collective, says why the stop
 * waits. */
#define BLOCKED_NOTICE_S 2.0

static sigset_t g_set;
static atomic_int g_last_signal, g_armed;
static atomic_int g_training; /* 1: ddp_train runs (cli_stop_signals_training .. _settle) */
static int g_rank = -1;       /* the rank the notice names; set before g_training */
static int g_requests;        /* the signal thread's own: stop signals taken while training, the first's time, */
static double g_first_s;      /* notices given */
static int g_noticed;

static void stop_set(sigset_t *s)
{
    sigemptyset(s);
    sigaddset(s, SIGUSR1);
    sigaddset(s, SIGUSR2);
    sigaddset(s, SIGTERM);
    sigaddset(s, SIGINT);
}

/* What a signal asks for: the time-limit warning (SLURM's --signal) continues in a requeued job; SIGTERM (scancel,
 * preemption) and SIGINT (Ctrl-C) end the job. */
static int kind_of(int sig) { return sig == SIGUSR1 || sig == SIGUSR2 ? DDP_STOP_REQUEUE : DDP_STOP_END; }

/* Runs only on a thread that did not block the signals, none once set-up is done (the test checks every
 * thread's mask); a thread of a library started before main would land here, on its own stack. */
static void on_stop(int sig)
{
    atomic_store(&g_last_signal, sig);
    if (!(atomic_load(&g_armed) & kind_of(sig))) {
        signal(sig, SIG_DFL);
        raise(sig); /* delivered when the handler returns */
        return;
    }
    ddp_request_stop_kind(kind_of(sig));
}

int cli_stop_signals_block(void)
{
    stop_set(&g_set);
    if (pthread_sigmask(SIG_BLOCK, &g_set, NULL) != 0) return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sa.sa_mask = g_set;
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGUSR1, &sa, NULL) != 0 || sigaction(SIGUSR2, &sa, NULL) != 0 ||
        sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0)
        return -1;
    /* OpenBLAS (pthread build) starts its thread pool when the library loads, before main: shut it down here,
     * and its next parallel call starts it again from this thread, with the mask (the way its fork handler
     * does). Other builds lack the symbol and start their threads later, from a masked thread. */
    int (*pool_shutdown)(void) = NULL;
    *(void **)&pool_shutdown = dlsym(RTLD_DEFAULT, "blas_thread_shutdown_");
    if (pool_shutdown) pool_shutdown();
    return 0;
}

/* The signal's default action, from the signal thread (which has it blocked): the process ends by the signal. */
static void default_action(int sig)
{
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
}

/* A stop signal taken while training, BLOCKED_NOTICE_S or more after the first (Slurm delivers scancel's SIGTERM twice
 * within milliseconds, mpirun passes Ctrl-C on as a SIGTERM a second later: such duplicates say nothing): when this
 * rank has waited BLOCKED_NOTICE_S or more in the MPI collective it is in (ddp_wait_blocked_s: the gradient
 * allreduce, a status agreement, the validation stop check) and the ranks have not agreed the stop, one line (once per
 * rank) says why nothing happens yet: the stop is acted on at a step boundary, which a rank that never arrives
 * (stopped, hung) keeps the others from; --collective-timeout, or SIGKILL, ends such a job. The signal is not
 * escalated: a rank waiting for a slow one (a long checkpoint write, an uneven step) cannot tell it from a hung one,
 * and a stop always saves (docs/slurm.md). */
static void further_signal(void)
{
    if (!atomic_load(&g_training) || g_noticed) return;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double now = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec, blocked = ddp_wait_blocked_s();
    if (g_requests++ == 0) g_first_s = now;
    if (now - g_first_s < BLOCKED_NOTICE_S || blocked < BLOCKED_NOTICE_S || ddp_stop_agreed()) return;
    g_noticed = 1;
    fprintf(stderr,
            "mpiddp train: rank %d: notice: the stop waits for the next step boundary; this rank has waited %.0f s in "
            "a collective for a rank that has not arrived yet (slow, stopped or hung; a hung job: --collective-timeout "
            "ends it, or SIGKILL)\n",
            g_rank, blocked);
    fflush(stderr);
}

static void *waiter(void *arg)
{
    (void)arg;
    for (;;) {
        int sig = 0;
        if (sigwait(&g_set, &sig) != 0) continue;
        atomic_store(&g_last_signal, sig);
        if (!(atomic_load(&g_armed) & kind_of(sig))) default_action(sig); /* not taken now */
        further_signal();
        ddp_request_stop_kind(kind_of(sig)); /* the ranks agree on it at the next step or validation batch */
    }
    return NULL;
}

int cli_stop_signals_start(void)
{
    pthread_t t;
    pthread_attr_t a;
    if (pthread_attr_init(&a) != 0) return -1;
    int rc = pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (rc == 0) rc = pthread_create(&t, &a, waiter, NULL);
    pthread_attr_destroy(&a);
    return rc == 0 ? 0 : -1;
}

void cli_stop_signals_arm(int kinds) { atomic_store(&g_armed, kinds); }

void cli_stop_signals_training(int rank)
{
    g_rank = rank;
    atomic_store(&g_training, 1);
}

void cli_stop_signals_settle(void) { atomic_store(&g_training, 0); }

int cli_stop_signal_received(void) { return atomic_load(&g_last_signal); }

static atomic_int g_undoing; /* 1: a fatal signal's handler runs (on one thread); the process ends with it */

/* Async-signal-safe: unlink of a path registered before the temporary was created, and of what a dataset writer's run
 * made (io/writer.c: its shards, its lock file, the --out it created), then the signal's default action (the raised
 * signal, blocked in the handler, is delivered when it returns). The other fatal signals wait on this thread; one
 * that another thread takes meanwhile (MPI's threads block nothing: scancel and mpirun both send SIGTERM) waits for
 * this undo, which ends the process, instead of ending it half done. */
static void on_fatal(int sig)
{
    int e = errno;
    if (atomic_exchange(&g_undoing, 1)) {
        for (;;) (void)poll(NULL, 0, 100); /* the first handler's raise ends the process */
    }
    ddp_unlink_registered_temporary();
    signal(sig, SIG_DFL);
    sigset_t one;      /* unblocked here, so the raise ends the process inside the handler: a lower-numbered signal */
    sigemptyset(&one); /* pending on this thread would otherwise run this handler again first, and wait for ever */
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
    errno = e;
}

/* SIGUSR1 and SIGUSR2 too: `pkill -USR1 mpiddp`, meant for train's ranks, ends a synth or pack as well */
static const int g_fatal[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
#define NFATAL (sizeof g_fatal / sizeof g_fatal[0])

int cli_fatal_signals_cleanup(void)
{
    const int *sigs = g_fatal;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < NFATAL; i++) sigaddset(&sa.sa_mask, sigs[i]);
    sa.sa_flags = 0; /* not SA_RESETHAND: the same signal again, to another thread, would end the undo half done */
    for (size_t i = 0; i < NFATAL; i++) {
        if (sigaction(sigs[i], NULL, &old) != 0) return -1;
        if (old.sa_handler == SIG_IGN) continue; /* ignored when started (nohup, a background job): stays ignored */
        if (sigaction(sigs[i], &sa, NULL) != 0) return -1;
    }
    return 0;
}

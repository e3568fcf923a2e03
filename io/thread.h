/* thread.h — the helper threads of io/ (the loader's batch worker, loader.c; the read-ahead populator,
 * readahead.c): each with its mutex, condition variable and quit flag, started and ended the same way. Not public. */
#ifndef DDP_IO_THREAD_H
#define DDP_IO_THREAD_H

#include <pthread.h>

/* Initialises mu and cv and starts fn(arg) on *t: 1 when the thread runs; 0 when it could not be started
 * (mu and cv destroyed again: nothing to undo). */
static inline int ddp_io_thread_start(pthread_mutex_t *mu, pthread_cond_t *cv, pthread_t *t, void *(*fn)(void *),
                                      void *arg)
{
    pthread_mutex_init(mu, NULL);
    pthread_cond_init(cv, NULL);
    if (pthread_create(t, NULL, fn, arg) == 0) return 1;
    pthread_mutex_destroy(mu);
    pthread_cond_destroy(cv);
    return 0;
}

/* Ends a thread ddp_io_thread_start started; the caller holds mu. Sets *quit, wakes the thread, unlocks,
 * joins it and destroys mu and cv. */
static inline void ddp_io_thread_stop(pthread_mutex_t *mu, pthread_cond_t *cv, pthread_t t, int *quit)
{
    *quit = 1;
    pthread_cond_broadcast(cv);
    pthread_mutex_unlock(mu);
    pthread_join(t, NULL);
    pthread_mutex_destroy(mu);
    pthread_cond_destroy(cv);
}

#endif

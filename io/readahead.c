/* readahead.c — the loader's read-ahead policy; see readahead.h. */
#include "io/readahead.h"
#include "io/thread.h"

#include "mpi_ddp/core/status.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

enum { QUEUE = 256 };

struct ddp_readahead {
    ddp_dataset *ds;
    const ddp_sampler *sm;
    int threaded;
    int64_t ahead_first[3]; /* --shuffle block: first samples of the three windows last advised */
    /* --shuffle block, threaded: a thread populates the mapped pages of queued block runs (MADV_POPULATE_READ:
     * read and mapped, so the loader copies without faults or waits) */
    int on, quit, head, tail;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct {
        void *addr;
        size_t len;
    } q[QUEUE];
};

static void *populate(void *arg)
{
    ddp_readahead *ra = arg;
    pthread_mutex_lock(&ra->mu);
    for (;;) {
        while (ra->head == ra->tail && !ra->quit) pthread_cond_wait(&ra->cv, &ra->mu);
        if (ra->quit) break;
        void *a = ra->q[ra->head].addr;
        size_t n = ra->q[ra->head].len;
        ra->head = (ra->head + 1) % QUEUE;
        pthread_mutex_unlock(&ra->mu);
#ifdef MADV_POPULATE_READ
        if (madvise(a, n, MADV_POPULATE_READ) != 0) madvise(a, n, MADV_WILLNEED); /* kernels before 5.14 */
#else
        madvise(a, n, MADV_WILLNEED);
#endif
        pthread_mutex_lock(&ra->mu);
    }
    pthread_mutex_unlock(&ra->mu);
    return NULL;
}

ddp_status ddp_readahead_create(ddp_dataset *ds, const ddp_sampler *sm, int threaded, ddp_readahead **out)
{
    *out = NULL;
    ddp_readahead *ra = ddp_calloc(1, sizeof *ra);
    if (!ra) return ddp_set_error(DDP_ERR_NOMEM, "out of memory for the read-ahead state");
    ra->ds = ds;
    ra->sm = sm;
    ra->threaded = threaded;
    ra->ahead_first[0] = ra->ahead_first[1] = ra->ahead_first[2] = -1;
    if (threaded && sm->nblocks > 0) ra->on = ddp_io_thread_start(&ra->mu, &ra->cv, &ra->thread, populate, ra);
    *out = ra;
    return DDP_OK;
}

void ddp_readahead_destroy(ddp_readahead *ra)
{
    if (!ra) return;
    if (ra->on) {
        pthread_mutex_lock(&ra->mu);
        ddp_io_thread_stop(&ra->mu, &ra->cv, ra->thread, &ra->quit); /* populate() is the only waiter on cv */
    }
    free(ra);
}

/* One block's run of a shard: to the populating thread when there is one and room in its queue, else
 * madvise(WILLNEED) here. The shard is located (opened) in this thread, never in that one. */
static void ahead_run(ddp_readahead *ra, int64_t lo, int64_t hi)
{
    void *a;
    size_t n;
    if (!ra->on || !ddp_dataset_range(ra->ds, lo, hi, &a, &n)) {
        ddp_dataset_prefetch_range(ra->ds, lo, hi);
        return;
    }
    pthread_mutex_lock(&ra->mu);
    int next = (ra->tail + 1) % QUEUE;
    if (next != ra->head) {
        ra->q[ra->tail].addr = a;
        ra->q[ra->tail].len = n;
        ra->tail = next;
        ddp_io_counters_get()->ahead_runs++;
        pthread_cond_signal(&ra->cv);
        n = 0;
    }
    pthread_mutex_unlock(&ra->mu);
    if (n) madvise(a, n, MADV_WILLNEED); /* queue full */
}

void ddp_readahead_after(ddp_readahead *ra, int64_t step)
{
    if (!ra) return;
    const ddp_sampler *sm = ra->sm;
    if (sm->nblocks > 0) { /* --shuffle block: the windows' blocks, each a sequential run of a shard file */
        int64_t p = sm->budget > 0 ? sm->plan[step / sm->acc] : step * sm->batch * sm->world;
        for (int64_t ahead = 0; ahead < 3; ahead++) { /* this batch's window (epoch start), then the next two */
            int64_t runs[2 * 64], k = ddp_sampler_window_runs(sm, p, ahead, runs, 64);
            if (k > 0 && runs[0] != ra->ahead_first[0] && runs[0] != ra->ahead_first[1] &&
                runs[0] != ra->ahead_first[2]) {
                for (int64_t i = 0; i < k; i++) ahead_run(ra, runs[2 * i], runs[2 * i + 1]);
                ra->ahead_first[0] = ra->ahead_first[1];
                ra->ahead_first[1] = ra->ahead_first[2];
                ra->ahead_first[2] = runs[0];
            }
        }
    } else if (ra->threaded && step + 1 < sm->steps && sm->budget == 0) { /* the next batch's samples */
        int64_t lo = (step + 1) * sm->batch;
        int64_t hi = lo + sm->batch < sm->per_rank ? lo + sm->batch : sm->per_rank;
        uint8_t pad;
        for (int64_t j = lo; j < hi; j++) ddp_dataset_prefetch(ra->ds, ddp_sampler_at(sm, j, &pad));
    }
}

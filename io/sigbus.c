/* sigbus.c — the table of live shard maps and the SIGBUS handler that reads it; see sigbus.h. */
#include "io/sigbus.h"

#include "mpi_ddp/core/status.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK_ENTRIES 256
#define MAX_BLOCKS 4096 /* 1 M maps: 256 K shards of four maps each */

enum { FREE = 0, LIVE = 1 };

typedef struct {
    atomic_int state;
    uintptr_t lo, hi; /* [lo, hi) of the map */
    int64_t file_off; /* file byte at lo */
    int fd;
    char obj[16];
    char *path; /* owned copy */
} entry;

/* The table: blocks of entries that are never freed, published with release stores, so the handler can walk it
 * while another thread registers a map. */
static _Atomic(entry *) g_blocks[MAX_BLOCKS];
static atomic_long g_high; /* entries in use or once used: the handler scans [0, g_high) */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t *g_free; /* indices of freed entries (under g_mu) */
static int64_t g_nfree, g_capfree, g_live;
static struct sigaction g_old;
static int g_installed;
static char g_rank[32]; /* "rank N: " when known at install time */
static atomic_flag g_reporting = ATOMIC_FLAG_INIT;
static char g_line[8192];

static entry *at(int64_t i)
{
    entry *b = atomic_load_explicit(&g_blocks[i / BLOCK_ENTRIES], memory_order_acquire);
    return b ? &b[i % BLOCK_ENTRIES] : NULL;
}

/* ------------------------------------------------------------------ the handler (async-signal-safe) */
static size_t put(size_t at_, const char *s)
{
    while (*s && at_ < sizeof g_line - 2) g_line[at_++] = *s++;
    return at_;
}

static size_t put_u(size_t at_, unsigned long long v)
{
    char d[24];
    int n = 0;
    do d[n++] = (char)('0' + v % 10), v /= 10;
    while (v);
    while (n && at_ < sizeof g_line - 2) g_line[at_++] = d[--n];
    return at_;
}

static void pass_on(int sig, siginfo_t *si, void *uc)
{
    if ((g_old.sa_flags & SA_SIGINFO) && g_old.sa_sigaction) {
        g_old.sa_sigaction(sig, si, uc);
        return;
    }
    if (!(g_old.sa_flags & SA_SIGINFO) && g_old.sa_handler != SIG_DFL && g_old.sa_handler != SIG_IGN &&
        g_old.sa_handler) {
        g_old.sa_handler(sig);
        return;
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGBUS, &dfl, NULL);
    raise(SIGBUS); /* pending until the handler returns; the fault also repeats */
}

/* A read of a page that a truncation (or an in-place rewrite) took away from a MAP_SHARED file raises SIGBUS: find
 * the map holding si_addr, write one line with write(2) and leave with _exit(1); mpirun then ends the other ranks.
 * Everything touched here is async-signal-safe: atomics, fstat, write, sigaction, raise, _exit. */
static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    entry *hit = NULL;
    if (si && si->si_code > 0) { /* raised by the kernel for a fault, not sent by kill/raise */
        uintptr_t a = (uintptr_t)si->si_addr;
        long n = atomic_load_explicit(&g_high, memory_order_acquire);
        for (long i = 0; i < n && !hit; i++) {
            entry *e = at(i);
            if (e && atomic_load_explicit(&e->state, memory_order_acquire) == LIVE && a >= e->lo && a < e->hi) hit = e;
        }
    }
    if (!hit) {
        pass_on(sig, si, uc);
        return;
    }
    if (atomic_flag_test_and_set(&g_reporting)) /* another thread is reporting: it exits for us */
        for (;;) pause();
    unsigned long long off = (unsigned long long)hit->file_off + ((uintptr_t)si->si_addr - hit->lo);
    struct stat sb;
    int known = fstat(hit->fd, &sb) == 0;
    size_t k = put(0, "mpiddp: ");
    k = put(k, g_rank);
    k = put(k, "error: ");
    k = put(k, hit->path);
    k = put(k, ": ");
    k = put(k, hit->obj);
    if (known && (unsigned long long)sb.st_size > off) { /* the page is inside the file now */
        k = put(k, ": cannot read the mapped file at byte offset ");
        k = put_u(k, off);
        k = put(k, " (file is now ");
        k = put_u(k, (unsigned long long)sb.st_size);
        k = put(k, " bytes; an I/O error, or was it rewritten while mapped?)\n");
    } else {
        k = put(k, ": the file changed while mapped (read at byte offset ");
        k = put_u(k, off);
        if (known) {
            k = put(k, ", file is now ");
            k = put_u(k, (unsigned long long)sb.st_size);
            k = put(k, " bytes");
        } else {
            k = put(k, ", file size unknown");
        }
        k = put(k, "; was the dataset regenerated or truncated?)\n");
    }
    if (g_line[k - 1] != '\n') g_line[k++] = '\n'; /* put() leaves room for it */
    ssize_t w = write(STDERR_FILENO, g_line, k);
    (void)w;
    _exit(1);
}

/* ------------------------------------------------------------------ registration */
static ddp_status install(void)
{
    /* the rank from the launcher's environment: shards may first be opened by the loader's thread, which
     * must not call MPI */
    const char *keys[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !g_rank[0]; i++) {
        const char *v = getenv(keys[i]);
        char *end;
        long r = v && *v ? strtol(v, &end, 10) : -1;
        if (r >= 0 && !*end) snprintf(g_rank, sizeof g_rank, "rank %ld: ", r);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &g_old) != 0)
        return ddp_set_error(DDP_ERR_INTERNAL, "cannot install the SIGBUS handler for mapped shards");
    g_installed = 1;
    return DDP_OK;
}

ddp_status ddp_sigbus_register(const void *addr, size_t len, const char *path, const char *obj, int64_t file_off,
                               int fd, int64_t *handle)
{
    *handle = 0;
    char *copy = strdup(path);
    if (!copy) return ddp_set_error(DDP_ERR_NOMEM, "out of memory");
    ddp_status st = DDP_OK;
    pthread_mutex_lock(&g_mu);
    if (!g_installed) st = install();
    int64_t i = -1;
    if (st == DDP_OK) {
        if (g_nfree) {
            i = g_free[--g_nfree];
        } else {
            long n = atomic_load_explicit(&g_high, memory_order_relaxed);
            if (n / BLOCK_ENTRIES >= MAX_BLOCKS) {
                st = ddp_set_error(DDP_ERR_ARG, "%s: more than %d memory-mapped shard objects at once", path,
                                   MAX_BLOCKS * BLOCK_ENTRIES);
            } else if (!at(n)) {
                entry *b = calloc(BLOCK_ENTRIES, sizeof *b);
                if (!b)
                    st = ddp_set_error(DDP_ERR_NOMEM, "out of memory");
                else
                    atomic_store_explicit(&g_blocks[n / BLOCK_ENTRIES], b, memory_order_release);
            }
            if (st == DDP_OK) i = n;
        }
    }
    if (st == DDP_OK) {
        entry *e = at(i);
        e->lo = (uintptr_t)addr;
        e->hi = (uintptr_t)addr + len;
        e->file_off = file_off;
        e->fd = fd;
        snprintf(e->obj, sizeof e->obj, "%s", obj);
        e->path = copy;
        copy = NULL;
        atomic_store_explicit(&e->state, LIVE, memory_order_release);
        if (i == atomic_load_explicit(&g_high, memory_order_relaxed))
            atomic_store_explicit(&g_high, i + 1, memory_order_release);
        g_live++;
        *handle = i + 1;
    }
    pthread_mutex_unlock(&g_mu);
    free(copy);
    return st;
}

void ddp_sigbus_unregister(int64_t *handle)
{
    if (*handle <= 0) return;
    int64_t i = *handle - 1;
    *handle = 0;
    pthread_mutex_lock(&g_mu);
    entry *e = i < atomic_load_explicit(&g_high, memory_order_relaxed) ? at(i) : NULL;
    if (e && atomic_load_explicit(&e->state, memory_order_relaxed) == LIVE) {
        atomic_store_explicit(&e->state, FREE, memory_order_release);
        free(e->path);
        e->path = NULL;
        g_live--;
        int64_t *f = g_free;
        if (g_nfree == g_capfree) { /* on failure the entry stays FREE, just never reused */
            int64_t cap = g_capfree ? 2 * g_capfree : 64;
            f = realloc(g_free, (size_t)cap * sizeof *f);
            if (f) g_free = f, g_capfree = cap;
        }
        if (f) g_free[g_nfree++] = i;
    }
    pthread_mutex_unlock(&g_mu);
}

int64_t ddp_sigbus_count(void)
{
    pthread_mutex_lock(&g_mu);
    int64_t n = g_live;
    pthread_mutex_unlock(&g_mu);
    return n;
}

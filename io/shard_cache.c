/* shard_cache.c — the open-shard LRU of a rank (see shard_cache.h): budgets from RLIMIT_NOFILE and vm.max_map_count,
 * pins that keep a shard open while a thread reads it, eviction of the least recently used unpinned shard, and the
 * refusal of a batch that needs more shards at once than the budget allows. */
#include "io/shard_cache.h"

#include "mpi_ddp/core/optname.h"
#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/core/status.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* One shard's place in the cache. An open shard is in the LRU list exactly when no thread pins it. */
typedef struct lru_node {
    struct lru_node *prev, *next;
    ddp_dataset *ds;
    int32_t pins;
    int16_t fds, maps; /* what the shard holds while open through the cache (0 when closed) */
    int8_t in_cache;   /* opened through the cache (not by finite.c's one-off scan) */
} lru_node;

struct ddp_shard_lru {
    lru_node *nodes; /* [nshards] */
    int64_t *stamp;  /* [nshards] the batch check's last batch per shard (allocated on first use) */
    int64_t gen;
    int64_t cap; /* shards of this dataset that fit the budgets at once */
    const char *limit;
    int64_t hits, misses;
    pthread_t owner; /* the thread that opened the dataset: the only one that may close HDF5 handles */
    uint64_t id;     /* unique over the process's life (a thread's current shard names it) */
};

enum { LOOKUP_BATCH = 0, LOOKUP_AHEAD = 1, LOOKUP_OTHER = 2 }; /* who asks: only batch lookups make the hit rate */

/* A thread's current shard (ddp_shard_cache_pin_current): one per thread that called it, made on its first call and
 * freed, its pin dropped, when the thread exits (the key's destructor), so any number of threads may call it. */
typedef struct current_slot {
    struct current_slot *next;
    ddp_dataset *ds; /* NULL: none pinned (never yet, or its dataset was closed) */
    int64_t k;
} current_slot;

static struct {
    pthread_mutex_t mu;
    int ready;
    lru_node head; /* sentinel: head.next is the most recently used unpinned shard, head.prev the least */
    ddp_shard_cache_info info;
    current_slot *current; /* every live thread's slot, for ddp_shard_cache_detach */
    pthread_key_t key;     /* a thread's slot, for its destructor */
    int key_made;
    uint64_t next_id;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The calling thread's current shard (its slot in g.current) as (dataset id, shard): a call for the same shard needs
 * no lock, since the pin this thread holds keeps it open. */
static __thread current_slot *t_slot;
static __thread uint64_t t_cur_id;
static __thread int64_t t_cur_k = -1;

/* ------------------------------------------------------------------ budgets */
static int64_t read_int_file(const char *path, int64_t dflt)
{
    FILE *f = fopen(path, "re");
    long long v = 0;
    int ok = f && fscanf(f, "%lld", &v) == 1;
    if (f) fclose(f);
    return ok ? (int64_t)v : dflt;
}

static int64_t count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 32;
    int64_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n > 0 ? n - 1 : 0; /* less the directory's own descriptor */
}

static int64_t count_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return 512;
    int64_t n = 0;
    char buf[16384];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0)
        for (const char *p = buf, *e = buf + k; (p = memchr(p, '\n', (size_t)(e - p))); p++) n++;
    fclose(f);
    return n;
}

/* Raises RLIMIT_NOFILE's soft limit to the hard one, then leaves room beside the shards: what is open now (MPI,
 * stdio), 64 + 2 per rank (MPI's connections made later, HDF5's checkpoint files, CUDA, the run directory's
 * files) and 1/16 of the limit; for maps, what is mapped now, 4096 and 1/8 of vm.max_map_count (CUDA, the
 * allocator's arenas, thread stacks, oneDNN's code). */
static void init_budgets(int world)
{
    ddp_shard_cache_info *in = &g.info;
    struct rlimit rl;
    in->nofile = in->nofile_was = in->nofile_hard = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        int64_t nr_open = read_int_file("/proc/sys/fs/nr_open", 1048576);
        rlim_t want = rl.rlim_max == RLIM_INFINITY || (int64_t)rl.rlim_max > nr_open ? (rlim_t)nr_open : rl.rlim_max;
        in->nofile_was = rl.rlim_cur == RLIM_INFINITY ? nr_open : (int64_t)rl.rlim_cur;
        in->nofile_hard = rl.rlim_max == RLIM_INFINITY ? nr_open : (int64_t)rl.rlim_max;
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
            struct rlimit up = {want, rl.rlim_max};
            (void)setrlimit(RLIMIT_NOFILE, &up); /* on failure the soft limit stays, and the budget follows it */
        }
        in->nofile = in->nofile_was;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
            in->nofile = rl.rlim_cur == RLIM_INFINITY ? nr_open : (int64_t)rl.rlim_cur;
    }
    in->fds_at_start = count_fds();
    in->fd_budget = in->nofile - in->fds_at_start - (64 + 2 * (int64_t)world + in->nofile / 16);
    if (in->fd_budget < 2) in->fd_budget = 2;
    in->max_map_count = read_int_file("/proc/sys/vm/max_map_count", 65530);
    in->maps_at_start = count_maps();
    in->map_budget = in->max_map_count - in->maps_at_start - (4096 + in->max_map_count / 8);
    in->knob_maps = ddp_knob_int(DDP_KNOB_MAX_SHARD_MAPS);
    if (in->knob_maps < 0) in->knob_maps = 0;
    if (in->knob_maps > 0 && in->knob_maps < in->map_budget) in->map_budget = in->knob_maps;
    if (in->map_budget < 4) in->map_budget = 4;
    in->knob_open = ddp_knob_int(DDP_KNOB_MAX_OPEN_SHARDS);
    if (in->knob_open < 0) in->knob_open = 0;
    in->max_open = in->fd_budget;
    if (in->knob_open > 0 && in->knob_open < in->max_open) in->max_open = in->knob_open;
    g.head.next = g.head.prev = &g.head;
    g.ready = 1;
}

/* What shard s holds while open: descriptors (its own; HDF5's when features are read through HDF5) and maps. */
static void shard_needs(const ddp_shard_meta *m, int64_t *fds, int64_t *maps)
{
    *fds = 1 + (m->feat_off < 0);
    *maps = (m->feat_off >= 0) + (m->off_off >= 0) + (m->lab_off >= 0) + (m->has_ids && m->ids_off >= 0);
}

ddp_status ddp_shard_cache_attach(ddp_dataset *ds, int world)
{
    struct ddp_shard_lru *c = ddp_calloc(1, sizeof *c);
    lru_node *nodes = ddp_calloc((size_t)ds->nshards, sizeof *nodes);
    if (!c || !nodes) {
        free(c);
        free(nodes);
        return ddp_set_error(DDP_ERR_NOMEM, "%s: out of memory for the open-shard table of %lld shards", ds->dir,
                             (long long)ds->nshards);
    }
    c->nodes = nodes;
    c->owner = pthread_self();
    int64_t fps = 1, mps = 0;
    for (int64_t k = 0; k < ds->nshards; k++) {
        nodes[k].ds = ds;
        int64_t f, m;
        shard_needs(&ds->shards[k].meta, &f, &m);
        if (f > fps) fps = f;
        if (m > mps) mps = m;
    }
    pthread_mutex_lock(&g.mu);
    if (!g.ready) init_budgets(world);
    c->id = ++g.next_id;
    const ddp_shard_cache_info *in = &g.info;
    c->cap = in->max_open;
    c->limit = in->knob_open > 0 && in->knob_open == in->max_open ? "MPIDDP_MAX_OPEN_SHARDS" : "RLIMIT_NOFILE";
    if (in->fd_budget / fps < c->cap) c->cap = in->fd_budget / fps, c->limit = "RLIMIT_NOFILE";
    if (mps > 0 && in->map_budget / mps < c->cap)
        c->cap = in->map_budget / mps,
        c->limit = in->knob_maps > 0 && in->knob_maps == in->map_budget ? "MPIDDP_MAX_SHARD_MAPS" : "vm.max_map_count";
    if (c->cap < 1) c->cap = 1;
    pthread_mutex_unlock(&g.mu);
    ds->lru = c;
    return DDP_OK;
}

/* ------------------------------------------------------------------ the list (under g.mu) */
static void unlink_node(lru_node *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = NULL;
}

static void push_mru(lru_node *n)
{
    n->next = g.head.next;
    n->prev = &g.head;
    g.head.next->prev = n;
    g.head.next = n;
}

static ddp_shard *shard_of_node(lru_node *n) { return &n->ds->shards[n - n->ds->lru->nodes]; }

/* Closes an open shard of the cache; it must be unpinned and in the list, or pinned by nobody (detach). */
static void close_node(lru_node *n, int evicted)
{
    if (n->prev) unlink_node(n);
    if (evicted)
        ddp_shard_release_handles(shard_of_node(n)); /* index arrays read through HDF5 stay */
    else
        ddp_shard_close(shard_of_node(n));
    g.info.open--;
    g.info.fds -= n->fds;
    g.info.maps -= n->maps;
    n->fds = n->maps = 0;
    n->in_cache = 0;
    g.info.evictions += evicted;
}

/* The least recently used shard this thread may close: unpinned (all in the list are) and holding no HDF5 handle
 * unless this is the thread that opened its dataset (HDF5 is not thread-safe). */
static lru_node *victim(void)
{
    pthread_t self = pthread_self();
    for (lru_node *n = g.head.prev; n != &g.head; n = n->prev)
        if (shard_of_node(n)->h5file < 0 || pthread_equal(self, n->ds->lru->owner)) return n;
    return NULL;
}

static ddp_status open_locked(ddp_dataset *ds, int64_t k, int kind)
{
    ddp_shard *s = &ds->shards[k];
    lru_node *n = &ds->lru->nodes[k];
    ddp_shard_cache_info *in = &g.info;
    int64_t f, m;
    shard_needs(&s->meta, &f, &m);
    while (in->open + 1 > in->max_open || in->fds + f > in->fd_budget || in->maps + m > in->map_budget) {
        lru_node *v = victim();
        if (!v) { /* every open shard is in use (docs/sizing.md: two batches assembled at once) */
            in->overshoots++;
            break;
        }
        close_node(v, 1);
    }
    if (s->opened) { /* opened outside the cache (finite.c's scan); not counted: take it over as it is */
        ddp_shard_release_handles(s);
    }
    s->access_hint = ds->access_hint;
    DDP_CHECK(ddp_shard_open(s, ds->dir));
    n->fds = (int16_t)((s->fd >= 0) + (s->h5file >= 0));
    n->maps = 0;
    for (int i = 0; i < 4; i++) n->maps += s->maps[i] != NULL;
    n->in_cache = 1;
    in->open++;
    in->fds += n->fds;
    in->maps += n->maps;
    in->opens++;
    in->ahead_opens += kind == LOOKUP_AHEAD;
    if (in->open > in->peak_open) in->peak_open = in->open;
    if (in->fds > in->peak_fds) in->peak_fds = in->fds;
    if (in->maps > in->peak_maps) in->peak_maps = in->maps;
    return DDP_OK;
}

/* Pins shard k of ds, opening it if needed. */
static ddp_status pin_locked(ddp_dataset *ds, int64_t k, int kind)
{
    lru_node *n = &ds->lru->nodes[k];
    if (n->in_cache && ds->shards[k].opened) {
        ds->lru->hits += kind == LOOKUP_BATCH;
        if (n->pins == 0) unlink_node(n);
    } else {
        ds->lru->misses += kind == LOOKUP_BATCH;
        DDP_CHECK(open_locked(ds, k, kind));
    }
    n->pins++;
    return DDP_OK;
}

static void unpin_locked(ddp_dataset *ds, int64_t k)
{
    lru_node *n = &ds->lru->nodes[k];
    if (n->pins > 0 && --n->pins == 0 && n->in_cache) push_mru(n);
}

/* ------------------------------------------------------------------ pins */
ddp_status ddp_dataset_acquire_batch(ddp_dataset *ds, const int64_t *index, int64_t n, ddp_shard **shards,
                                     int64_t *local)
{
    for (int64_t i = 0; i < n; i++)
        if (index[i] < 0 || index[i] >= ds->info.num_samples)
            return ddp_set_error(DDP_ERR_ARG, "%s: sample index %lld out of range [0, %lld)", ds->dir,
                                 (long long)index[i], (long long)ds->info.num_samples);
    ddp_status st = DDP_OK;
    int64_t i = 0;
    pthread_mutex_lock(&g.mu);
    for (; i < n && st == DDP_OK; i++) {
        int64_t k = ddp_dataset_shard_of(ds, index[i]);
        st = pin_locked(ds, k, LOOKUP_BATCH);
        shards[i] = &ds->shards[k];
        local[i] = index[i] - ds->shards[k].meta.first;
    }
    if (st != DDP_OK) /* the pins taken so far */
        for (int64_t j = 0; j + 1 < i; j++) unpin_locked(ds, shards[j] - ds->shards);
    pthread_mutex_unlock(&g.mu);
    return st;
}

void ddp_dataset_release_batch(ddp_dataset *ds, ddp_shard *const *shards, int64_t n)
{
    pthread_mutex_lock(&g.mu);
    for (int64_t i = 0; i < n; i++) unpin_locked(ds, shards[i] - ds->shards);
    pthread_mutex_unlock(&g.mu);
}

int ddp_dataset_with_shard(ddp_dataset *ds, int64_t index, void (*fn)(ddp_shard *s, int64_t local, void *arg),
                           void *arg)
{
    if (index < 0 || index >= ds->info.num_samples) return 0;
    int64_t k = ddp_dataset_shard_of(ds, index);
    lru_node *n = &ds->lru->nodes[k];
    pthread_mutex_lock(&g.mu);
    int ok = n->in_cache && ds->shards[k].opened; /* open: its place in the LRU stays (the batch's lookup moves it) */
    if (!ok && open_locked(ds, k, LOOKUP_AHEAD) == DDP_OK) {
        push_mru(n);
        ok = 1;
    }
    if (ok) fn(&ds->shards[k], index - ds->shards[k].meta.first, arg); /* under the lock: nothing closes the shard */
    pthread_mutex_unlock(&g.mu);
    return ok;
}

/* A thread's exit (the key's destructor, not under g.mu): its current shard unpinned, its slot gone. No HDF5 call. */
static void slot_exit(void *p)
{
    current_slot *cs = p;
    pthread_mutex_lock(&g.mu);
    if (cs->ds) unpin_locked(cs->ds, cs->k);
    for (current_slot **q = &g.current; *q; q = &(*q)->next)
        if (*q == cs) {
            *q = cs->next;
            break;
        }
    pthread_mutex_unlock(&g.mu);
    free(cs);
    t_slot = NULL, t_cur_id = 0, t_cur_k = -1; /* this thread's: a later exit destructor's sample makes a new slot */
}

/* The calling thread's slot, made on its first call (under g.mu). */
static ddp_status own_slot_locked(const ddp_dataset *ds, current_slot **out)
{
    if (t_slot) {
        *out = t_slot;
        return DDP_OK;
    }
    int e = g.key_made ? 0 : pthread_key_create(&g.key, slot_exit);
    if (e != 0)
        return ddp_set_error(DDP_ERR_NOMEM, "%s: cannot make a thread key for this thread's current shard: %s", ds->dir,
                             strerror(e));
    g.key_made = 1;
    current_slot *cs = ddp_calloc(1, sizeof *cs);
    if (!cs) return ddp_set_error(DDP_ERR_NOMEM, "%s: out of memory for this thread's current shard", ds->dir);
    e = pthread_setspecific(g.key, cs);
    if (e != 0) {
        free(cs);
        return ddp_set_error(DDP_ERR_NOMEM, "%s: cannot record this thread's current shard: %s", ds->dir, strerror(e));
    }
    cs->next = g.current;
    g.current = cs;
    *out = t_slot = cs;
    return DDP_OK;
}

ddp_status ddp_shard_cache_pin_current(ddp_dataset *ds, int64_t k, ddp_shard **shard)
{
    if (t_cur_k == k && t_cur_id == ds->lru->id) { /* pinned by this thread already */
        *shard = &ds->shards[k];
        return DDP_OK;
    }
    pthread_mutex_lock(&g.mu);
    current_slot *cs = NULL;
    ddp_status st = own_slot_locked(ds, &cs);
    if (st == DDP_OK && (cs->ds != ds || cs->k != k)) { /* else pinned already */
        st = pin_locked(ds, k, LOOKUP_OTHER);
        if (st == DDP_OK && cs->ds) unpin_locked(cs->ds, cs->k);
        if (st == DDP_OK) cs->ds = ds, cs->k = k;
    }
    if (st == DDP_OK) t_cur_id = ds->lru->id, t_cur_k = k;
    pthread_mutex_unlock(&g.mu);
    if (st == DDP_OK) *shard = &ds->shards[k];
    return st;
}

void ddp_shard_cache_drop_hdf5(void)
{
    pthread_t self = pthread_self();
    pthread_mutex_lock(&g.mu);
    for (lru_node *n = g.head.prev, *prev; n != &g.head; n = prev) {
        prev = n->prev;
        if (shard_of_node(n)->h5file >= 0 && pthread_equal(self, n->ds->lru->owner)) close_node(n, 1);
    }
    pthread_mutex_unlock(&g.mu);
}

void ddp_shard_cache_detach(ddp_dataset *ds)
{
    struct ddp_shard_lru *c = ds->lru;
    if (!c) return;
    pthread_mutex_lock(&g.mu);
    for (current_slot *cs = g.current; cs; cs = cs->next) /* the slots stay: their threads may call again */
        if (cs->ds == ds) {
            unpin_locked(ds, cs->k);
            cs->ds = NULL;
        }
    if (t_cur_id == c->id) t_cur_k = -1; /* (another thread's copy names an id no dataset will have again) */
    for (int64_t k = 0; k < ds->nshards; k++)
        if (c->nodes[k].in_cache) close_node(&c->nodes[k], 0);
    pthread_mutex_unlock(&g.mu);
    free(c->nodes);
    free(c->stamp);
    free(c);
    ds->lru = NULL;
}

/* ------------------------------------------------------------------ the batch check and the figures */
int64_t ddp_shard_cache_capacity(const ddp_dataset *ds, const char **limit)
{
    if (limit) *limit = ds->lru->limit;
    return ds->lru->cap;
}

/* "the limit, and what to raise" for the refusal's message */
static void describe_limit(const struct ddp_shard_lru *c, char *lim, size_t nl, char *raise, size_t nr)
{
    const ddp_shard_cache_info *in = &g.info;
    if (strcmp(c->limit, "MPIDDP_MAX_OPEN_SHARDS") == 0) {
        snprintf(lim, nl, "MPIDDP_MAX_OPEN_SHARDS=%lld", (long long)in->knob_open);
        snprintf(raise, nr, "raise MPIDDP_MAX_OPEN_SHARDS");
    } else if (strcmp(c->limit, "MPIDDP_MAX_SHARD_MAPS") == 0) {
        snprintf(lim, nl, "MPIDDP_MAX_SHARD_MAPS=%lld", (long long)in->knob_maps);
        snprintf(raise, nr, "raise MPIDDP_MAX_SHARD_MAPS");
    } else if (strcmp(c->limit, "vm.max_map_count") == 0) {
        snprintf(lim, nl, "vm.max_map_count %lld: %lld maps left for shards", (long long)in->max_map_count,
                 (long long)in->map_budget);
        snprintf(raise, nr, "raise vm.max_map_count (sysctl)");
    } else {
        snprintf(lim, nl, "RLIMIT_NOFILE %lld (ulimit -n): %lld descriptors left for shards", (long long)in->nofile,
                 (long long)in->fd_budget);
        snprintf(raise, nr, "raise the hard open-file limit (ulimit -Hn, limits.conf or the batch system)");
    }
}

ddp_status ddp_shard_cache_check_batches(ddp_dataset *ds, const ddp_sampler *sm, int64_t first_step)
{
    struct ddp_shard_lru *c = ds->lru;
    int64_t lim = c->cap > 1 ? c->cap - 1 : 1; /* one shard stays for the caller's thread (ddp_dataset_sample) */
    if (sm->max_samples <= lim || first_step >= sm->steps) return DDP_OK;
    if (!c->stamp) {
        c->stamp = ddp_malloc((size_t)ds->nshards, sizeof *c->stamp);
        if (!c->stamp) return ddp_set_error(DDP_ERR_NOMEM, "%s: out of memory for the batch check", ds->dir);
        for (int64_t k = 0; k < ds->nshards; k++) c->stamp[k] = -1;
    }
    int64_t *idx = ddp_malloc((size_t)sm->max_samples, sizeof *idx);
    uint8_t *pad = ddp_malloc((size_t)sm->max_samples, 1);
    ddp_status st = idx && pad ? DDP_OK
                               : ddp_set_error(DDP_ERR_NOMEM, "%s: out of memory for the batch check", ds->dir);
    for (int64_t step = first_step; st == DDP_OK && step < sm->steps; step++) {
        int64_t cnt = 0, distinct = 0, gen = ++c->gen;
        st = ddp_sampler_batch(sm, step, idx, pad, &cnt);
        for (int64_t i = 0; st == DDP_OK && i < cnt; i++) {
            int64_t k = ddp_dataset_shard_of(ds, idx[i]);
            if (c->stamp[k] != gen) c->stamp[k] = gen, distinct++;
        }
        if (st == DDP_OK && distinct > lim) {
            char what[160], raise[128];
            describe_limit(c, what, sizeof what, raise, sizeof raise);
            st = ddp_set_error(
                DDP_ERR_ARG,
                "%s: the batch of step %lld (epoch %lld) on rank %d reads %lld shard files at once, more than the %lld "
                "the open-shard budget allows (%s); %s, or lower %s/%s",
                ds->dir, (long long)step, (long long)sm->epoch, sm->rank, (long long)distinct, (long long)lim, what,
                raise, ddp_opt_name(sm->cli_names, DDP_OPT_BATCH_SIZE),
                ddp_opt_name(sm->cli_names, DDP_OPT_BATCH_ROWS));
        }
    }
    free(idx);
    free(pad);
    return st;
}

void ddp_shard_cache_get(ddp_shard_cache_info *out)
{
    pthread_mutex_lock(&g.mu);
    *out = g.info;
    pthread_mutex_unlock(&g.mu);
}

void ddp_shard_cache_dataset_stats(const ddp_dataset *ds, int64_t *hits, int64_t *misses)
{
    pthread_mutex_lock(&g.mu);
    *hits = ds->lru ? ds->lru->hits : 0;
    *misses = ds->lru ? ds->lru->misses : 0;
    pthread_mutex_unlock(&g.mu);
}

int64_t ddp_dataset_shard_of(const ddp_dataset *ds, int64_t index)
{
    int64_t lo = 0, hi = ds->nshards - 1;
    while (lo < hi) { /* last shard with first <= index */
        int64_t mid = (lo + hi + 1) / 2;
        if (ds->shards[mid].meta.first <= index)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* emu_launch.c — kernel launches of the emulated runtime: the configuration is checked as a GPU checks
 * it, then the launch is queued on its stream; the stream's worker runs every block, the threads of a block
 * as fibers (64 KiB stacks pooled per worker; entered once with swapcontext, then switched with
 * _setjmp/_longjmp, which make no system call) so that __syncthreads waits for every thread of the block,
 * __syncwarp and the shuffles for every thread of the warp, and __shared__ (a per-worker static) is shared by them. A
 * kernel whose first thread finishes without a barrier is remembered as barrier-free and later runs its threads as a
 * plain loop. Misuse that a GPU would hang or fault on (a barrier some threads never reach) becomes the sticky launch
 * failure. */
#undef _FORTIFY_SOURCE /* _longjmp between fiber stacks is deliberate (see resume) */
#include "emu_cuda.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

cudaError_t ddp_emu__fail(cudaError_t e);
void ddp_emu__fault(const char *fmt, const char *name);
void ddp_emu__count_launch(void);
int ddp_emu__enter(void);

__thread dim3 ddp_emu_threadIdx, ddp_emu_blockIdx, ddp_emu_blockDim, ddp_emu_gridDim;

#define STACK (64 << 10)
#define MAXT 1024

typedef struct {
    const char *name;
    dim3 grid, block;
    size_t smem;
    void (*fn)(void *);
    void *arg;
    void (*free_arg)(void *);
} launch_args;

enum { T_RUN, T_BARRIER, T_WARP, T_DONE }; /* T_WARP: at __syncwarp (or inside a shuffle) */
typedef struct {
    ucontext_t ctx; /* first entry */
    jmp_buf jb;     /* where the fiber waits at a barrier */
    char *stack;
    int state, started;
} fiber;

/* per worker thread */
static __thread fiber *t_fib; /* [MAXT], stacks mapped on first use */
static __thread ucontext_t t_sched;
static __thread jmp_buf t_sched_jb;
static __thread int t_cur, t_fiber_mode;
static __thread launch_args *t_launch;
static __thread uint64_t t_xch[MAXT]; /* the shuffles' published values, by linear thread index */
static __thread char *t_smem;
static __thread size_t t_smem_cap;

/* fn pointer -> 1 barrier-free, 2 uses barriers */
static pthread_mutex_t g_kmu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void (*fn)(void *);
    int kind;
} g_kinds[256];

static int kind_of(void (*fn)(void *))
{
    int k = 0;
    pthread_mutex_lock(&g_kmu);
    for (int i = 0; i < 256 && g_kinds[i].fn; i++)
        if (g_kinds[i].fn == fn) k = g_kinds[i].kind;
    pthread_mutex_unlock(&g_kmu);
    return k;
}
static void set_kind(void (*fn)(void *), int kind)
{
    pthread_mutex_lock(&g_kmu);
    for (int i = 0; i < 256; i++)
        if (!g_kinds[i].fn || g_kinds[i].fn == fn) {
            g_kinds[i].fn = fn, g_kinds[i].kind = kind;
            break;
        }
    pthread_mutex_unlock(&g_kmu);
}

static void set_thread(unsigned linear)
{
    dim3 b = t_launch->block;
    ddp_emu_threadIdx.x = linear % b.x;
    ddp_emu_threadIdx.y = (linear / b.x) % b.y;
    ddp_emu_threadIdx.z = linear / (b.x * b.y);
}

void *ddp_emu_dynamic_smem(void) { return t_smem; }

void ddp_emu_syncthreads(void)
{
    if (!t_fiber_mode) { /* a plain-loop thread cannot wait: thread 0 of the first block never got here */
        ddp_emu__fault("kernel %s: __syncthreads reached by some threads of a block only (divergent barrier)",
                       t_launch->name);
        return;
    }
    t_fib[t_cur].state = T_BARRIER;
    if (!_setjmp(t_fib[t_cur].jb)) _longjmp(t_sched_jb, 1);
}

void ddp_emu_syncwarp(void)
{
    if (!t_fiber_mode) {
        ddp_emu__fault("kernel %s: __syncwarp or a shuffle reached by some threads of a block only (divergent)",
                       t_launch->name);
        return;
    }
    t_fib[t_cur].state = T_WARP;
    if (!_setjmp(t_fib[t_cur].jb)) _longjmp(t_sched_jb, 1);
}

unsigned ddp_emu_lane(void) { return (unsigned)t_cur % 32; }

uint64_t ddp_emu_shfl(uint64_t v, unsigned src_lane)
{
    const dim3 b = t_launch->block;
    const unsigned me = (unsigned)t_cur, src = (me & ~31u) + src_lane % 32, n = b.x * b.y * b.z;
    t_xch[me] = v;
    ddp_emu_syncwarp();
    uint64_t r = src < n ? t_xch[src] : v; /* a lane past the block's last thread: CUDA leaves it undefined */
    ddp_emu_syncwarp();                    /* nobody publishes again before every lane has read */
    return r;
}

/* After a sweep, every fiber waits or is done. Releases each warp whose threads all wait at __syncwarp; 1 if one
 * did, 0 if no fiber waits there, -1 if some do but no warp is complete (a warp-mate exited or waits at
 * __syncthreads: a hang on a GPU). */
static int release_warps(unsigned n)
{
    int waiting = 0, released = 0;
    for (unsigned w0 = 0; w0 < n; w0 += 32) {
        const unsigned e = w0 + 32 < n ? w0 + 32 : n;
        unsigned at = 0;
        for (unsigned i = w0; i < e; i++) at += t_fib[i].state == T_WARP;
        waiting |= at > 0;
        if (at && at == e - w0) {
            for (unsigned i = w0; i < e; i++) t_fib[i].state = T_RUN;
            released = 1;
        }
    }
    return released ? 1 : waiting ? -1 : 0;
}

static void fiber_main(void)
{
    t_launch->fn(t_launch->arg);
    t_fib[t_cur].state = T_DONE;
    _longjmp(t_sched_jb, 1); /* this stack is abandoned; the fiber is restarted with makecontext */
}

static int fiber_start(int i)
{
    if (!t_fib) {
        t_fib = calloc(MAXT, sizeof *t_fib);
        if (!t_fib) return -1;
    }
    if (!t_fib[i].stack) {
        void *m = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return -1;
        t_fib[i].stack = m;
    }
    getcontext(&t_fib[i].ctx);
    t_fib[i].ctx.uc_stack.ss_sp = t_fib[i].stack;
    t_fib[i].ctx.uc_stack.ss_size = STACK;
    t_fib[i].ctx.uc_link = NULL;
    makecontext(&t_fib[i].ctx, fiber_main, 0);
    t_fib[i].state = T_RUN;
    t_fib[i].started = 0;
    return 0;
}

/* Runs fiber i until it waits at a barrier or finishes: the first time through its ucontext, afterwards
 * back into its _setjmp in ddp_emu_syncthreads. Either way it comes back through t_sched_jb. */
static void resume(int i)
{
    t_cur = i;
    set_thread((unsigned)i);
    if (_setjmp(t_sched_jb)) return;
    if (t_fib[i].started) _longjmp(t_fib[i].jb, 1);
    t_fib[i].started = 1;
    swapcontext(&t_sched, &t_fib[i].ctx);
}

/* Runs the block's threads as fibers until all are done; thread `started` (0 or -1) already began. */
static void run_fibers(unsigned n, int started)
{
    t_fiber_mode = 1;
    for (unsigned i = 0; i < n; i++)
        if ((int)i != started && fiber_start((int)i) != 0) {
            ddp_emu__fault("kernel %s: out of memory for the fibers of a block", t_launch->name);
            t_fiber_mode = 0;
            return;
        }
    for (;;) {
        unsigned done = 0, waiting = 0;
        for (unsigned i = 0; i < n; i++) {
            if (t_fib[i].state == T_RUN) resume((int)i);
            done += t_fib[i].state == T_DONE;
            waiting += t_fib[i].state == T_BARRIER;
        }
        if (done == n) break;
        const int wr = release_warps(n);
        if (wr > 0) continue; /* the released warps run on; the block barrier waits for them */
        if (wr < 0) {
            ddp_emu__fault("kernel %s: __syncwarp or a shuffle not reached by every thread of the warp",
                           t_launch->name);
            break;
        }
        if (waiting && done) { /* on a GPU: a hang, or undefined behaviour */
            ddp_emu__fault("kernel %s: some threads of a block exited while others wait in __syncthreads",
                           t_launch->name);
            break;
        }
        for (unsigned i = 0; i < n; i++) /* everybody arrived: release the barrier */
            if (t_fib[i].state == T_BARRIER) t_fib[i].state = T_RUN;
    }
    t_fiber_mode = 0;
}

static void run_launch(void *p)
{
    launch_args *a = p;
    t_launch = a;
    ddp_emu_gridDim = a->grid;
    ddp_emu_blockDim = a->block;
    unsigned n = a->block.x * a->block.y * a->block.z;
    if (a->smem > t_smem_cap) {
        free(t_smem);
        t_smem = malloc(a->smem);
        t_smem_cap = t_smem ? a->smem : 0;
    }
    int kind = kind_of(a->fn);
    for (unsigned z = 0; z < a->grid.z; z++)
        for (unsigned y = 0; y < a->grid.y; y++)
            for (unsigned x = 0; x < a->grid.x; x++) {
                ddp_emu_blockIdx.x = x, ddp_emu_blockIdx.y = y, ddp_emu_blockIdx.z = z;
                if (t_smem && a->smem) memset(t_smem, 0xff, a->smem);
                if (kind == 1) { /* barrier-free: a plain loop over the threads */
                    for (unsigned i = 0; i < n; i++) {
                        t_cur = (int)i;
                        set_thread(i);
                        a->fn(a->arg);
                    }
                } else if (kind == 2) {
                    run_fibers(n, -1);
                } else { /* first block of an unknown kernel: thread 0 in a fiber tells whether it waits */
                    if (fiber_start(0) != 0) {
                        ddp_emu__fault("kernel %s: out of memory for a fiber", a->name);
                        return;
                    }
                    t_fiber_mode = 1;
                    resume(0);
                    t_fiber_mode = 0;
                    if (t_fib[0].state == T_DONE) {
                        kind = 1;
                        set_kind(a->fn, 1);
                        for (unsigned i = 1; i < n; i++) {
                            t_cur = (int)i;
                            set_thread(i);
                            a->fn(a->arg);
                        }
                    } else {
                        kind = 2;
                        set_kind(a->fn, 2);
                        run_fibers(n, 0);
                    }
                }
            }
}

static void free_launch(void *p)
{
    launch_args *a = p;
    if (a->free_arg) a->free_arg(a->arg);
    free(a);
}

cudaError_t ddp_emu_launch(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s, void (*fn)(void *),
                           void *arg, void (*free_arg)(void *))
{
    cudaError_t e = cudaSuccess;
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (!ddp_emu__enter())
        e = cudaErrorInsufficientDriver;
    else if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z || threads > MAXT || block.z > 64 ||
             grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
        e = cudaErrorInvalidConfiguration;
    else if (smem > (48 << 10))
        e = cudaErrorInvalidValue;
    if (e != cudaSuccess) {
        if (free_arg) free_arg(arg);
        return ddp_emu__fail(e);
    }
    launch_args *a = malloc(sizeof *a);
    if (!a) {
        if (free_arg) free_arg(arg);
        return ddp_emu__fail(cudaErrorMemoryAllocation);
    }
    *a = (launch_args){name, grid, block, smem, fn, arg, free_arg};
    ddp_emu__count_launch();
    return ddp_emu_enqueue(s, run_launch, a, free_launch);
}

/* ddp_emu_enqueue with plain types for emu_cudnn_sdpa.c, which includes the real CUDA headers instead of emu_cuda.h: 0
 * when queued (on failure free_arg(arg) has run). */
int ddp_emu_enqueue_host(void *stream, void (*fn)(void *), void *arg, void (*free_arg)(void *))
{
    return ddp_emu_enqueue((cudaStream_t)stream, fn, arg, free_arg) == cudaSuccess ? 0 : -1;
}

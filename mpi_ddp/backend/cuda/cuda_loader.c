/* cuda_loader.c — finds and dlopens the GPU plugin: $MPIDDP_CUDA_PLUGIN (the real plugin or the host emulator,
 * libmpiddp_cudaemu.so) when set, else libmpiddp_cuda.so next to the executable, in ../lib beside it, beside
 * libmpiddp.so (a program built against an install), in the build tree (its archive only), in the configured lib
 * directory, then on the loader's search path. */
#include "mpi_ddp/backend/backend.h"
#include "mpi_ddp/backend/cuda/cuda_api.h"
#include "mpi_ddp/core/status.h"
#include "mpi_ddp/core/settings.h"

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MPIDDP_PLUGIN_BUILD_DIR
#define MPIDDP_PLUGIN_BUILD_DIR ""
#endif
#ifndef MPIDDP_PLUGIN_INSTALL_DIR
#define MPIDDP_PLUGIN_INSTALL_DIR ""
#endif
#define PLUGIN "libmpiddp_cuda.so"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const ddp_cuda_api *g_api;
static void *g_handle;
static char g_why[600] = "not loaded";

static char g_dev_why[700];
static int g_found; /* a plugin file existed somewhere on the search path */

/* dlopens path when the file exists; a file that exists but fails to load (libcublas or libnccl missing, say) keeps
 * the loader's message, which is what gets reported */
static void *try_open(const char *path)
{
    if (strchr(path, '/') && access(path, F_OK) != 0) return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        if (strchr(path, '/') || (e && !strstr(e, "No such file") && !strstr(e, "cannot open shared object file"))) {
            snprintf(g_why, sizeof g_why, "%s", e ? e : path);
            g_found = 1;
        }
    }
    return h;
}

static void load(void)
{
    snprintf(g_why, sizeof g_why, "%s not found (mpiddp was built without CUDA, or set MPIDDP_CUDA_PLUGIN)", PLUGIN);
    char exe[PATH_MAX], dir[PATH_MAX], path[PATH_MAX + 64];
    const char *env = ddp_knob_str(DDP_KNOB_CUDA_PLUGIN);
    void *h = NULL;
    if (env) { /* an explicit choice: no fallback to another plugin */
        if (access(env, F_OK) != 0) {
            snprintf(g_why, sizeof g_why, "MPIDDP_CUDA_PLUGIN=%s: %s", env, strerror(errno));
            return;
        }
        h = try_open(env);
        if (!h) return;
    }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (!h && !g_found && n > 0) {
        exe[n] = 0;
        snprintf(dir, sizeof dir, "%s", dirname(exe));
        snprintf(path, sizeof path, "%s/%s", dir, PLUGIN);
        h = try_open(path);
        if (!h && !g_found) {
            snprintf(path, sizeof path, "%s/../lib/%s", dir, PLUGIN);
            h = try_open(path);
        }
    }
    Dl_info self; /* the shared library holding this code (the executable itself when linked statically) */
    if (!h && !g_found && dladdr((void *)&ddp_cuda, &self) && self.dli_fname && self.dli_fname[0] == '/') {
        char lib[PATH_MAX];
        snprintf(lib, sizeof lib, "%s", self.dli_fname);
        const char *libdir = dirname(lib);
        snprintf(path, sizeof path, "%s/%s", libdir, PLUGIN);
        if (n <= 0 || strcmp(libdir, dir)) h = try_open(path);
    }
    if (!h && !g_found && *MPIDDP_PLUGIN_BUILD_DIR) h = try_open(MPIDDP_PLUGIN_BUILD_DIR "/" PLUGIN);
    if (!h && !g_found && *MPIDDP_PLUGIN_INSTALL_DIR) h = try_open(MPIDDP_PLUGIN_INSTALL_DIR "/" PLUGIN);
    if (!h && !g_found) h = try_open(PLUGIN);
    if (!h) return;
    /* the file actually loaded (MPIDDP_CUDA_PLUGIN's, or where the search found libmpiddp_cuda.so) */
    const char *file = env && *env ? env : PLUGIN;
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name) file = lm->l_name;
    ddp_cuda_plugin_fn fn;
    dlerror();
    *(void **)&fn = dlsym(h, "ddp_cuda_plugin_api");
    if (!fn) {
        const char *e = dlerror();
        snprintf(g_why, sizeof g_why, "%s: not an mpiddp CUDA plugin: %s", file, e ? e : "ddp_cuda_plugin_api is NULL");
        dlclose(h);
        return;
    }
    const ddp_cuda_api *api = fn(ddp_set_error);
    if (!api || api->version != DDP_CUDA_API_VERSION) {
        snprintf(g_why, sizeof g_why, "%s: incompatible plugin (API version %d, expected %d)", file,
                 api ? api->version : -1, DDP_CUDA_API_VERSION);
        dlclose(h);
        return;
    }
    g_api = api;
    g_handle = h;
    snprintf(g_why, sizeof g_why, "loaded");
}

const ddp_cuda_api *ddp_cuda(void)
{
    pthread_once(&g_once, load);
    return g_api;
}

const char *ddp_cuda_why(void)
{
    ddp_cuda();
    return g_why;
}

int ddp_cuda_built(void) { return ddp_cuda() != NULL; }

#ifdef MPIDDP_COVERAGE
void __gcov_dump(void);
#endif
void ddp_coverage_flush(void)
{
#ifdef MPIDDP_COVERAGE
    void (*flush)(void) = NULL;
    if (g_handle) *(void **)&flush = dlsym(g_handle, "ddp_plugin_coverage_flush");
    if (flush) flush();
    __gcov_dump();
#endif
}

int ddp_cuda_loaded(void) { return g_api != NULL; }

int ddp_cuda_maybe_present(void)
{
    const char *plugin = ddp_knob_str(DDP_KNOB_CUDA_PLUGIN);
    if (plugin && *plugin) return 1; /* an explicit plugin (the emulator needs no device nodes) */
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && (!*vis || !strcmp(vis, "-1") || !strcmp(vis, "none"))) return 0;
    return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0 ||
           access("/proc/driver/nvidia/gpus", F_OK) == 0;
}

int ddp_cuda_device_count(void)
{
    g_dev_why[0] = 0;
    if (!ddp_cuda_maybe_present()) { /* no NVIDIA device nodes: do not load CUDA at all */
        /* callers add the place: "--device cuda: ... on HOST", "--device auto: ..., using cpu" */
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        if (vis && (!*vis || !strcmp(vis, "-1") || !strcmp(vis, "none")))
            snprintf(g_dev_why, sizeof g_dev_why, "every GPU hidden by CUDA_VISIBLE_DEVICES=\"%s\"", vis);
        else /* no /dev/nvidia0, /dev/nvidiactl or /proc/driver/nvidia/gpus */
            snprintf(g_dev_why, sizeof g_dev_why, "no NVIDIA GPU found");
        return 0;
    }
    if (!ddp_cuda()) {
        snprintf(g_dev_why, sizeof g_dev_why, "CUDA plugin unavailable: %s", g_why);
        return 0;
    }
    char err[400] = "";
    int n = ddp_cuda()->device_count(err, sizeof err);
    if (n < 0)
        snprintf(g_dev_why, sizeof g_dev_why, "%s", err);
    else if (n == 0)
        snprintf(g_dev_why, sizeof g_dev_why, "no CUDA device visible");
    return n < 0 ? 0 : n;
}

const char *ddp_cuda_device_why(void) { return g_dev_why; }

void ddp_cuda_device_name(int dev, char *buf, size_t n)
{
    if (ddp_cuda())
        ddp_cuda()->device_name(dev, buf, n);
    else if (n)
        buf[0] = 0;
}

void ddp_cuda_version_string(char *buf, size_t n)
{
    if (ddp_cuda_maybe_present() && ddp_cuda())
        ddp_cuda()->version_string(buf, n);
    else
        snprintf(buf, n, "not available");
}

void ddp_nccl_version_string(char *buf, size_t n)
{
    if (ddp_cuda_maybe_present() && ddp_cuda())
        ddp_cuda()->nccl_version_string(buf, n);
    else
        snprintf(buf, n, "not available");
}

void *ddp_backend_cuda_stream(struct ddp_backend *b) { return ddp_cuda() ? ddp_cuda()->backend_stream(b) : NULL; }

ddp_status ddp_backend_cuda_create(int device, ddp_backend **out)
{
    *out = NULL;
    if (!ddp_cuda()) return ddp_set_error(DDP_ERR_ARG, "the CUDA backend: CUDA plugin unavailable: %s", g_why);
    return ddp_cuda()->backend_create(device, out);
}

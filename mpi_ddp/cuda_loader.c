/* cuda_loader.c — finds and dlopens libmpiddp_cuda.so: $MPIDDP_CUDA_PLUGIN, next to the executable,
 * ../lib beside it, the build tree, then the loader's search path. */
#include "backend.h"
#include "cuda_api.h"
#include "status.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
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
static char g_why[600] = "not loaded";

static void *try_open(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        /* keep the most informative failure: a plugin that exists but cannot load (missing CUDA libs) */
        if (e && !strstr(e, "No such file")) snprintf(g_why, sizeof g_why, "%s", e);
    }
    return h;
}

static void load(void)
{
    snprintf(g_why, sizeof g_why, "%s not found (mpiddp was built without CUDA, or set MPIDDP_CUDA_PLUGIN)", PLUGIN);
    char exe[PATH_MAX], dir[PATH_MAX], path[PATH_MAX + 64];
    const char *env = getenv("MPIDDP_CUDA_PLUGIN");
    void *h = NULL;
    if (env && *env) h = try_open(env);
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (!h && n > 0) {
        exe[n] = 0;
        snprintf(dir, sizeof dir, "%s", dirname(exe));
        snprintf(path, sizeof path, "%s/%s", dir, PLUGIN);
        h = try_open(path);
        if (!h) {
            snprintf(path, sizeof path, "%s/../lib/%s", dir, PLUGIN);
            h = try_open(path);
        }
    }
    if (!h && *MPIDDP_PLUGIN_BUILD_DIR) h = try_open(MPIDDP_PLUGIN_BUILD_DIR "/" PLUGIN);
    if (!h && *MPIDDP_PLUGIN_INSTALL_DIR) h = try_open(MPIDDP_PLUGIN_INSTALL_DIR "/" PLUGIN);
    if (!h) h = try_open(PLUGIN);
    if (!h) return;
    ddp_cuda_plugin_fn fn;
    *(void **)&fn = dlsym(h, "ddp_cuda_plugin_api");
    const ddp_cuda_api *api = fn ? fn(ddp_set_error) : NULL;
    if (!api || api->version != DDP_CUDA_API_VERSION) {
        snprintf(g_why, sizeof g_why, "%s: incompatible plugin (API version %d, expected %d)", PLUGIN, api ? api->version : -1,
                 DDP_CUDA_API_VERSION);
        dlclose(h);
        return;
    }
    g_api = api;
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

int ddp_cuda_loaded(void) { return g_api != NULL; }

int ddp_cuda_maybe_present(void)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && (!*vis || !strcmp(vis, "-1") || !strcmp(vis, "none"))) return 0;
    return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0 || access("/proc/driver/nvidia/gpus", F_OK) == 0;
}

int ddp_cuda_device_count(void)
{
    if (!ddp_cuda_maybe_present()) return 0; /* no NVIDIA device nodes: do not load CUDA at all */
    return ddp_cuda() ? ddp_cuda()->device_count() : 0;
}

void ddp_cuda_device_name(int dev, char *buf, size_t n)
{
    if (ddp_cuda()) ddp_cuda()->device_name(dev, buf, n);
    else if (n) buf[0] = 0;
}

void ddp_cuda_version_string(char *buf, size_t n)
{
    if (ddp_cuda_maybe_present() && ddp_cuda()) ddp_cuda()->version_string(buf, n);
    else snprintf(buf, n, "not available");
}

void ddp_nccl_version_string(char *buf, size_t n)
{
    if (ddp_cuda_maybe_present() && ddp_cuda()) ddp_cuda()->nccl_version_string(buf, n);
    else snprintf(buf, n, "not available");
}

void *ddp_backend_cuda_stream(struct ddp_backend *b) { return ddp_cuda() ? ddp_cuda()->backend_stream(b) : NULL; }

ddp_status ddp_backend_cuda_create(int device, ddp_backend **out)
{
    *out = NULL;
    if (!ddp_cuda()) return ddp_set_error(DDP_ERR_ARG, "--device cuda: CUDA plugin unavailable: %s", g_why);
    return ddp_cuda()->backend_create(device, out);
}

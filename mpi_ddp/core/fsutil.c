/* fsutil.c — see fsutil.h. */
#include "mpi_ddp/core/fsutil.h"

#include "mpi_ddp/core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

ddp_status ddp_fsync_path(const char *p, int is_dir)
{
    int fd = open(p, (is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return ddp_set_error(DDP_ERR_IO, "%s: open for fsync: %s", p, strerror(errno));
    int rc = fsync(fd), e = errno;
    close(fd);
    if (rc != 0) return ddp_set_error(DDP_ERR_IO, "%s: fsync: %s", p, strerror(e));
    return DDP_OK;
}

ddp_status ddp_mkdir_p(const char *dir) { return ddp_mkdir_p_made(dir, NULL, 0); }

ddp_status ddp_mkdir_p_made(const char *dir, char *made, size_t len)
{
    char p[4400];
    snprintf(p, sizeof p, "%s", dir);
    int had = made && made[0]; /* an earlier call's record (rundir's second call) stays */
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/') continue;
        char c = *s;
        *s = 0;
        char *comp = strrchr(p, '/');
        comp = comp ? comp + 1 : p;
        if (made && !had && (!strcmp(comp, ".") || !strcmp(comp, ".."))) {
            /* the directories are removed again by stripping components down to `made`: after a "..", the path's
             * prefixes are no longer the directories made (new/../userdir/x would strip to userdir), so only those made
             * after the last "." or ".." count (new stays, empty) */
            made[0] = 0;
        } else if (mkdir(p, 0777) == 0) {
            if (made && !made[0]) snprintf(made, len, "%s", p); /* the first one this call made */
        } else if (errno != EEXIST)
            return ddp_set_error(DDP_ERR_IO, "%s: mkdir: %s", p, strerror(errno));
        *s = c;
        if (!c) break;
    }
    struct stat sb; /* EEXIST: a directory, not a file of that name (found before the first save, not at it) */
    if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ddp_set_error(DDP_ERR_IO, "%s: exists and is not a directory", p);
    if (access(p, W_OK) != 0) return ddp_set_error(DDP_ERR_IO, "%s: not writable: %s", p, strerror(errno));
    return DDP_OK;
}

ddp_status ddp_check_regular_file(const char *path, const char *what)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return ddp_set_error(DDP_ERR_IO, "%s: cannot open %s: %s", path, what, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return ddp_set_error(DDP_ERR_IO, "%s: cannot open %s: is a directory", path, what);
    if (!S_ISREG(sb.st_mode))
        return ddp_set_error(DDP_ERR_IO, "%s: cannot open %s: not a regular file (%s)", path, what,
                             S_ISFIFO(sb.st_mode)   ? "a FIFO"
                             : S_ISSOCK(sb.st_mode) ? "a socket"
                             : S_ISCHR(sb.st_mode)  ? "a character device"
                             : S_ISBLK(sb.st_mode)  ? "a block device"
                                                    : "unknown type");
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* replaced by a FIFO since the stat: still no hang */
    if (fd < 0) return ddp_set_error(DDP_ERR_IO, "%s: cannot open %s: %s", path, what, strerror(errno));
    close(fd);
    return DDP_OK;
}

ddp_status ddp_write_file_durable(const char *path, const void *buf, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return ddp_set_error(DDP_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    const char *p = buf, *op = "write";
    int err = 0;
    while (len > 0) {
        ssize_t w = write(fd, p, len < ((size_t)1 << 30) ? len : ((size_t)1 << 30));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            err = w < 0 ? errno : EIO;
            break;
        }
        p += w;
        len -= (size_t)w;
    }
    if (!err && fsync(fd) != 0) err = errno, op = "fsync";
    if (close(fd) != 0 && !err) err = errno, op = "close"; /* NFS reports a full quota here */
    if (!err) return DDP_OK;
    unlink(path);
    return ddp_set_error(DDP_ERR_IO, "%s: %s: %s", path, op, strerror(err));
}

static herr_t scalar_attr(hid_t obj, const char *name, hid_t file_type, hid_t mem_type, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, file_type, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e = a < 0 ? -1 : H5Awrite(a, mem_type, v);
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    return e;
}

herr_t ddp_h5_attr_i64(hid_t obj, const char *name, int64_t v)
{
    return scalar_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}
herr_t ddp_h5_attr_f64(hid_t obj, const char *name, double v)
{
    return scalar_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}

herr_t ddp_h5_attr_str(hid_t obj, const char *name, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    herr_t e = scalar_attr(obj, name, t, t, v);
    H5Tclose(t);
    return e;
}

void ddp_rank_list(const int *flags, int n, int want, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = 0;
    for (int r = 0; r < n && k + 16 < len; r++) {
        if ((flags[r] != 0) != want) continue;
        int e = r;
        while (e + 1 < n && ((flags[e + 1] != 0) == want)) e++;
        k += (size_t)snprintf(buf + k, len - k, "%s%d", k ? "," : "", r);
        if (e > r) k += (size_t)snprintf(buf + k, len - k, "-%d", e);
        r = e;
    }
    if (!k) snprintf(buf, len, "none");
}

int ddp_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

int ddp_read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k == 0) errno = 0;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Two buffers: the one a handler may be reading is never the one being filled. */
static char g_tmp[2][4400];
static atomic_int g_tmp_slot = -1; /* the buffer holding the registered path; -1: none */

void ddp_register_temporary(const char *path)
{
    if (!path) {
        atomic_store(&g_tmp_slot, -1);
        return;
    }
    int next = atomic_load(&g_tmp_slot) == 0 ? 1 : 0;
    snprintf(g_tmp[next], sizeof g_tmp[next], "%s", path);
    atomic_store(&g_tmp_slot, next);
}

static void (*_Atomic g_cleanup)(void);

void ddp_register_signal_cleanup(void (*fn)(void)) { atomic_store(&g_cleanup, fn); }

void ddp_unlink_registered_temporary(void)
{
    int slot = atomic_load(&g_tmp_slot);
    if (slot >= 0) (void)unlink(g_tmp[slot]); /* async-signal-safe; ENOENT (not created yet, or renamed) is fine */
    void (*fn)(void) = atomic_load(&g_cleanup);
    if (fn) fn(); /* after the temporary: a directory it would empty is empty then */
}

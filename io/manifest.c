/* manifest.c — the dataset manifest's file format (io/manifest.h, docs/dataset-format.md#the-manifest): parsing with
 * every check a stale or damaged file can fail (magic, version, sizes, CRC-32, names), and the atomic write. */
#include "io/manifest.h"

#include "mpi_ddp/core/fsutil.h"
#include "mpi_ddp/core/settings.h"
#include "mpi_ddp/core/status.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

typedef struct {
    char magic[8];
    uint32_t version, entry_size;
    int64_t count, names_bytes, npairs;
} mf_header;

static uint32_t crc_of(const void *p, int64_t len)
{
    uLong c = crc32(0L, Z_NULL, 0);
    const unsigned char *b = p;
    while (len > 0) { /* crc32 takes a uInt length */
        uInt k = len > (1 << 30) ? (1u << 30) : (uInt)len;
        c = crc32(c, b, k);
        b += k;
        len -= k;
    }
    return (uint32_t)c;
}

/* An array of count elements of size bytes at file offset off (-1: not mappable) lies inside a file of file_bytes. */
static int in_file(int64_t off, int64_t count, int64_t size, int64_t file_bytes)
{
    if (off == -1) return 1;
    return off >= 0 && off <= file_bytes && count >= 0 && count <= (file_bytes - off) / size;
}

/* Every field of entry e is one that validation could have written: the manifest passed its CRC, but a CRC is no
 * proof against a file written by something else, and these values size maps and allocations. */
static int entry_ok(const ddp_manifest *m, const ddp_manifest_entry *e)
{
    const int64_t big = (int64_t)1 << 50;
    if (e->n < 1 || e->n > ((int64_t)1 << 40) || e->rows < e->n || e->rows > big || e->dim < 1 || e->dim > big ||
        e->classes < 2 || e->classes > DDP_MAX_CLASSES || e->max_rows < 1 || e->max_rows > e->rows || e->min_rows < 1 ||
        e->min_rows > e->max_rows || e->sum_rows != e->rows || e->file_bytes < 0 || e->file_bytes > big ||
        (e->lab_width != 4 && e->lab_width != 8 && !(e->lab_off == -1 && e->lab_width == 0)) ||
        (e->has_ids != 0 && e->has_ids != 1) || e->nonfinite < -1 || e->nonfinite_samples < -1 ||
        e->nonfinite_samples > e->n)
        return 0;
    if (!in_file(e->feat_off, e->rows, 4 * e->dim, e->file_bytes) || !in_file(e->off_off, e->n + 1, 8, e->file_bytes) ||
        !in_file(e->lab_off, e->n, e->lab_width, e->file_bytes) || !in_file(e->ids_off, e->n, 8, e->file_bytes))
        return 0;
    int64_t hist = 0;
    for (int b = 0; b < 16; b++) {
        if (e->hist[b] < 0) return 0;
        hist += e->hist[b];
    }
    if (hist != e->n) return 0;
    if (e->name_off < 0 || e->name_off >= m->names_bytes || e->name_len < 1 || e->name_len >= DDP_SHARD_NAME_MAX ||
        e->name_len >= m->names_bytes - e->name_off || m->names[e->name_off + e->name_len] != 0 ||
        (int64_t)strlen(m->names + e->name_off) != e->name_len)
        return 0;
    if (e->ncc < 0 || e->ncc > e->classes || e->cc_first < 0 || e->cc_first > m->npairs ||
        e->ncc > m->npairs - e->cc_first)
        return 0;
    int64_t counted = 0;
    for (int64_t j = e->cc_first; j < e->cc_first + e->ncc; j++) {
        if (m->pairs[2 * j] < 0 || m->pairs[2 * j] >= e->classes || m->pairs[2 * j + 1] < 1) return 0;
        counted += m->pairs[2 * j + 1];
        if (counted > e->n) return 0;
    }
    return 1;
}

int ddp_manifest_parse(const void *buf, int64_t len, ddp_manifest *m, char *why, size_t whylen)
{
    memset(m, 0, sizeof *m);
    mf_header h;
    if (len == 0) return snprintf(why, whylen, "corrupt (empty file)"), -1;
    if (len < (int64_t)sizeof h + 4)
        return snprintf(why, whylen, "corrupt (truncated: %lld bytes)", (long long)len), -1;
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, DDP_MANIFEST_MAGIC, 8) != 0)
        return snprintf(why, whylen, "not an mpiddp manifest (bad magic)"), -1;
    if (h.version != DDP_MANIFEST_VERSION)
        return snprintf(why, whylen, "version %u, this mpiddp reads version %d", h.version, DDP_MANIFEST_VERSION), -1;
    if (h.entry_size != sizeof(ddp_manifest_entry) || h.count < 0 || h.names_bytes < 0 || h.npairs < 0 ||
        h.count > (int64_t)1 << 40 || h.names_bytes % 8 || h.names_bytes > (int64_t)1 << 50 ||
        h.npairs > (int64_t)1 << 50)
        return snprintf(why, whylen, "corrupt (bad header)"), -1;
    int64_t want = (int64_t)sizeof h + h.count * (int64_t)sizeof(ddp_manifest_entry) + h.names_bytes + h.npairs * 16 +
                   4;
    if (want != len)
        return snprintf(why, whylen, "corrupt (%lld bytes, its header says %lld)", (long long)len, (long long)want), -1;
    uint32_t crc;
    memcpy(&crc, (const char *)buf + len - 4, 4);
    if (crc != crc_of(buf, len - 4)) return snprintf(why, whylen, "corrupt (checksum mismatch)"), -1;
    const char *p = (const char *)buf + sizeof h;
    m->count = h.count;
    m->e = (const ddp_manifest_entry *)p;
    m->names = p + h.count * (int64_t)sizeof(ddp_manifest_entry);
    m->names_bytes = h.names_bytes;
    m->pairs = (const int64_t *)(m->names + h.names_bytes);
    m->npairs = h.npairs;
    for (int64_t i = 0; i < m->count; i++) { /* a valid CRC over wrong content is a bug, but never trust blindly */
        const ddp_manifest_entry *e = &m->e[i];
        if (!entry_ok(m, e) || (i && strcmp(m->names + m->e[i - 1].name_off, m->names + e->name_off) >= 0)) {
            memset(m, 0, sizeof *m);
            return snprintf(why, whylen, "corrupt (entry %lld)", (long long)i), -1;
        }
    }
    return 0;
}

const char *ddp_manifest_name(const ddp_manifest *m, int64_t i) { return m->names + m->e[i].name_off; }

int64_t ddp_manifest_find(const ddp_manifest *m, const char *name)
{
    int64_t lo = 0, hi = m->count - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ddp_manifest_name(m, mid), name);
        if (c == 0) return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

typedef struct {
    FILE *f;
    uLong crc;
    int bad;
} mf_out;

static void put(mf_out *o, const void *p, size_t n)
{
    if (o->bad || !n) return;
    const unsigned char *b = p;
    for (size_t at = 0; at < n;) {
        uInt k = n - at > (1u << 30) ? (1u << 30) : (uInt)(n - at);
        o->crc = crc32(o->crc, b + at, k);
        at += k;
    }
    if (fwrite(p, 1, n, o->f) != n) o->bad = 1;
}

/* This host's name as temporaries carry it: gethostname, every character outside [A-Za-z0-9._-] as '_'. */
static void tmp_host(char *buf, size_t len)
{
    if (gethostname(buf, len - 1) != 0) buf[0] = 0;
    buf[len - 1] = 0;
    for (char *c = buf; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("._-", *c)))
            *c = '_';
    if (!buf[0]) snprintf(buf, len, "host");
}

/* This process's PID namespace (the inode of /proc/self/ns/pid); 0 where /proc does not tell. Two containers may share
 * a host name and a directory, and a PID of one means nothing in the other. */
static unsigned long long tmp_pidns(void)
{
    struct stat sb;
    return stat("/proc/self/ns/pid", &sb) == 0 ? (unsigned long long)sb.st_ino : 0;
}

int ddp_manifest_is_temporary(const char *name, const char *base, char *host, size_t hostlen, unsigned long long *pidns,
                              long *pid)
{
    size_t n = strlen(base);
    if (strncmp(name, base, n) != 0 || strncmp(name + n, ".tmp.", 5) != 0) return 0;
    const char *rest = name + n + 5, *dot = strrchr(rest, '.');
    const char *digits = dot ? dot + 1 : rest;
    if (!*digits || strspn(digits, "0123456789") != strlen(digits) || strlen(digits) > 9) return 0;
    if (dot && dot == rest) return 0; /* ".tmp..PID": no host */
    int hlen = dot ? (int)(dot - rest) : 0;
    unsigned long long ns = 0;
    const char *nsdot = NULL; /* HOST.pidns-NS: the last '.' of the host part, then "pidns-" and digits */
    for (const char *c = rest; c < rest + hlen; c++)
        if (*c == '.') nsdot = c;
    if (nsdot && nsdot > rest && !strncmp(nsdot + 1, "pidns-", 6)) {
        const char *nd = nsdot + 7;
        size_t nl = (size_t)(rest + hlen - nd);
        if (nl > 0 && nl <= 20 && strspn(nd, "0123456789") == nl) {
            ns = strtoull(nd, NULL, 10);
            hlen = (int)(nsdot - rest);
        }
    }
    if (host) snprintf(host, hostlen, "%.*s", hlen, rest);
    if (pidns) *pidns = ns;
    if (pid) *pid = strtol(digits, NULL, 10);
    return 1;
}

int64_t ddp_manifest_remove_stale(const char *path, char *other, size_t otherlen)
{
    char dir[4200], me[256], host[256];
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else
        snprintf(dir, sizeof dir, ".");
    if (other && otherlen) other[0] = 0;
    tmp_host(me, sizeof me);
    unsigned long long my_ns = tmp_pidns(), ns;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int64_t kept = 0;
    struct dirent *e;
    long pid;
    while ((e = readdir(d))) {
        if (!ddp_manifest_is_temporary(e->d_name, base, host, sizeof host, &ns, &pid)) continue;
        /* another node's (or an older mpiddp's, without a host), or one of this host name in another PID namespace
         * (a container beside this one) or whose namespace this process cannot tell: its PID is not ours to test, and
         * it may be writing. Named with this host and no namespace (an mpiddp without /proc, or an older one): as
         * this namespace's. */
        if (strcmp(host, me) != 0 || (ns && ns != my_ns)) {
            if (!kept++ && other) snprintf(other, otherlen, "%s/%s", dir, e->d_name);
            continue;
        }
        if (pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            (void)unlinkat(dirfd(d), e->d_name, 0); /* its writer is gone; best effort: a temporary is never read */
    }
    closedir(d);
    return kept;
}

ddp_status ddp_manifest_replaceable(const char *path)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    struct stat sb;
    if (!strcmp(base, DDP_MANIFEST_NAME)) return DDP_OK; /* the name is mpiddp's: index DIR rewrites it too */
    if (lstat(path, &sb) != 0)
        return errno == ENOENT ? DDP_OK : ddp_set_error(DDP_ERR_IO, "%s: %s", path, strerror(errno));
    char magic[8] = {0};
    int fd = S_ISREG(sb.st_mode) ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    ssize_t got = fd >= 0 ? read(fd, magic, sizeof magic) : -1;
    if (fd >= 0) close(fd);
    if (S_ISREG(sb.st_mode) && (sb.st_size == 0 || (got == 8 && !memcmp(magic, DDP_MANIFEST_MAGIC, 8)))) return DDP_OK;
    return ddp_set_error(DDP_ERR_ARG,
                         "%s: exists and is not an mpiddp manifest; refusing to replace it (remove it, or give "
                         "--manifest a new path)",
                         path);
}

ddp_status ddp_manifest_write(const char *path, ddp_manifest_entry *entries, char *const *names, int64_t count,
                              const int64_t *pairs, int64_t npairs)
{
    int64_t nb = 0, cc = 0;
    for (int64_t i = 0; i < count; i++) {
        entries[i].name_off = nb;
        entries[i].name_len = (int64_t)strlen(names[i]);
        nb += entries[i].name_len + 1;
        entries[i].cc_first = cc;
        cc += entries[i].ncc;
    }
    if (cc != npairs)
        return ddp_set_error(DDP_ERR_INTERNAL, "%s: %lld class pairs, the entries say %lld", path, (long long)npairs,
                             (long long)cc);
    int64_t pad = (8 - nb % 8) % 8;
    char tmp[4200], dir[4200], host[256], nspart[32] = "";
    tmp_host(host, sizeof host);
    unsigned long long ns = tmp_pidns();
    if (ns) snprintf(nspart, sizeof nspart, ".pidns-%llu", ns); /* without /proc: FILE.tmp.HOST.PID */
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%s%s.%ld", path, host, nspart, (long)getpid()) >= (int)sizeof tmp)
        return ddp_set_error(DDP_ERR_ARG, "%.200s...: manifest path too long", path);
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = 0; /* a file in / */
    else if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    ddp_register_temporary(tmp); /* a fatal signal: the handler removes it (app/stop_signals.c) */
    mf_out o = {fopen(tmp, "wb"), crc32(0L, Z_NULL, 0), 0};
    if (!o.f) {
        ddp_register_temporary(NULL);
        return ddp_set_error(DDP_ERR_IO, "%s: cannot write the manifest there (%s)", dir, strerror(errno));
    }
    mf_header h = {.version = DDP_MANIFEST_VERSION,
                   .entry_size = sizeof(ddp_manifest_entry),
                   .count = count,
                   .names_bytes = nb + pad,
                   .npairs = npairs};
    memcpy(h.magic, DDP_MANIFEST_MAGIC, 8);
    put(&o, &h, sizeof h);
    put(&o, entries, (size_t)count * sizeof *entries);
    for (int64_t i = 0; i < count; i++) put(&o, names[i], (size_t)entries[i].name_len + 1);
    static const char zeros[8];
    put(&o, zeros, (size_t)pad);
    put(&o, pairs, (size_t)npairs * 16);
    uint32_t crc = (uint32_t)o.crc;
    if (!o.bad && fwrite(&crc, 4, 1, o.f) != 1) o.bad = 1;
    int err = 0;
    if (o.bad || fflush(o.f) != 0 || fsync(fileno(o.f)) != 0) err = errno ? errno : EIO;
    if (fclose(o.f) != 0 && !err) err = errno;
    int64_t delay_ms = ddp_knob_int(DDP_KNOB_TEST_MANIFEST_DELAY_MS);
    if (!err && delay_ms > 0) {
        struct timespec ts = {(time_t)(delay_ms / 1000), (long)(delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) remove(tmp);
    ddp_register_temporary(NULL);
    if (err) {
        return ddp_set_error(DDP_ERR_IO, "%s: cannot write the manifest (%s)", path, strerror(err));
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return DDP_OK;
}

void ddp_manifest_to_meta(const ddp_manifest_entry *e, const char *name, ddp_shard_meta *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->n = e->n, m->rows = e->rows, m->dim = e->dim, m->classes = e->classes, m->max_rows = e->max_rows;
    m->feat_off = e->feat_off, m->off_off = e->off_off, m->lab_off = e->lab_off, m->ids_off = e->ids_off;
    m->lab_width = (int32_t)e->lab_width, m->has_ids = (int32_t)e->has_ids, m->file_bytes = e->file_bytes;
}

void ddp_manifest_from_meta(const ddp_shard_meta *m, ddp_manifest_entry *e)
{
    e->n = m->n, e->rows = m->rows, e->dim = m->dim, e->classes = m->classes, e->max_rows = m->max_rows;
    e->feat_off = m->feat_off, e->off_off = m->off_off, e->lab_off = m->lab_off, e->ids_off = m->ids_off;
    e->lab_width = m->lab_width, e->has_ids = m->has_ids, e->file_bytes = m->file_bytes;
}

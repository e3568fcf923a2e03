/* cli_agree.c — the ranks' agreement on what they parsed: a launcher that gave them different arguments (an MPMD
 * line, a --config file that differs between nodes) would hang a collective or train on mixed settings. */
#include "cli_agree.h"

#include "mpi_ddp/core/ctx.h"

#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEP '\x1f'     /* between the fields of a rank's text; a field is a value the command line gave as it is */
#define TEXT_MAX 65536 /* what rank 0 receives of the first differing rank's text (the message quotes 200 bytes) */

typedef struct {
    char *p;    /* NUL-terminated */
    size_t len; /* bytes before the NUL */
    int oom;    /* an allocation failed: p is what was built before */
} text;

/* Appends s to b; sep: then a field separator. */
static void put(text *b, const char *s, int sep)
{
    size_t n = strlen(s);
    char *g = b->oom ? NULL : realloc(b->p, b->len + n + 2);
    if (!g) {
        b->oom = 1;
        return;
    }
    b->p = g;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    if (sep) b->p[b->len++] = SEP;
    b->p[b->len] = 0;
}

/* What this rank parsed, as SEP-separated fields: the command, the outcome, then the usage error's line, or each
 * option as --NAME=VALUE with its exact value (64-bit integers in full, doubles in 17 digits) and the positional
 * arguments. NULL when out of memory. */
static char *parsed_text(const cli_cmd *c, int rc, const char *err, const char **pos, int npos)
{
    text b = {NULL, 0, 0};
    char f[400];
    put(&b, c->name, 1);
    snprintf(f, sizeof f, "%d", rc);
    put(&b, f, 1);
    if (rc == CLI_USAGE) put(&b, err, 1);
    for (int i = 0; rc == CLI_OK && i < c->nopts; i++) {
        const cli_opt *o = &c->opts[i];
        int n = snprintf(f, sizeof f, "--%s=", o->name);
        switch (o->kind) {
        case OPT_STR: {
            const char *v = *(const char *const *)o->dst;
            put(&b, f, 0); /* the value goes on in the same field: a string of any length */
            put(&b, v ? v : "(unset)", 1);
            continue;
        }
        case OPT_INT: snprintf(f + n, sizeof f - (size_t)n, "%d", *(const int *)o->dst); break;
        case OPT_FLAG: snprintf(f + n, sizeof f - (size_t)n, "%s", *(const int *)o->dst ? "true" : "false"); break;
        case OPT_CHOICE: { /* its name: the idx-th of "a|b|c" */
            const char *s = o->choices;
            for (int k = 0; k < *(const int *)o->dst && s; k++)
                if ((s = strchr(s, '|'))) s++;
            snprintf(f + n, sizeof f - (size_t)n, "%.*s", s ? (int)strcspn(s, "|") : 1, s ? s : "?");
            break;
        }
        case OPT_I64: snprintf(f + n, sizeof f - (size_t)n, "%" PRId64, *(const int64_t *)o->dst); break;
        case OPT_F64: { /* the shortest of 15 to 17 digits that reads back as the same double: exact, and readable */
            double v = *(const double *)o->dst;
            for (int digits = 15; digits <= 17; digits++) {
                snprintf(f + n, sizeof f - (size_t)n, "%.*g", digits, v);
                if (strtod(f + n, NULL) == v || v != v) break;
            }
            break;
        }
        }
        put(&b, f, 1);
    }
    for (int i = 0; rc == CLI_OK && i < npos; i++) put(&b, pos[i], 1);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The field that starts at s, into buf: at most 200 bytes, control characters as '?' (the line stays one line). */
static const char *field(const char *s, char *buf, size_t len)
{
    size_t n = 0;
    for (; s && *s && *s != SEP && n + 1 < len && n < 200; s++) buf[n++] = (unsigned char)*s < 32 ? '?' : *s;
    buf[n] = 0;
    return buf;
}

static const char *next(const char *s) /* the field after s's, or NULL */
{
    s = s ? strchr(s, SEP) : NULL;
    return s && s[1] ? s + 1 : NULL;
}

/* Rank 0's line for two texts that differ: its own, a, and rank r's, b (rank 0's own usage error is printed by the
 * caller, as it is). */
static void explain(const char *a, const char *b, int r, char *line, size_t len)
{
    char x[256], y[256], cmd[256];
    field(a, cmd, sizeof cmd);
    if (strcmp(field(b, y, sizeof y), cmd) != 0) {
        snprintf(line, len, "mpiddp: the ranks were given different commands: '%s' on rank 0 and '%s' on rank %d", cmd,
                 y, r);
        return;
    }
    const char *pa = next(a), *pb = next(b);
    int ra = atoi(field(pa, x, sizeof x)), rb = atoi(field(pb, y, sizeof y));
    if (rb == CLI_USAGE) {
        snprintf(line, len, "%s (rank %d; rank 0 parsed its command line: the ranks were given different arguments)",
                 field(next(pb), y, sizeof y), r);
        return;
    }
    if (ra != rb) {
        snprintf(line, len, "mpiddp %s: the ranks were given different arguments: --help on rank %d only", cmd,
                 ra == CLI_HELP ? 0 : r);
        return;
    }
    pa = next(pa), pb = next(pb);
    for (int i = 1; pa || pb; pa = next(pa), pb = next(pb)) {
        field(pa, x, sizeof x);
        field(pb, y, sizeof y);
        size_t la = pa ? strcspn(pa, "\x1f") : 0, lb = pb ? strcspn(pb, "\x1f") : 0;
        int opt = !strncmp(x, "--", 2) && strchr(x, '=');
        if (pa && pb && la == lb && !strncmp(pa, pb, la)) {
            i += !opt;
            continue;
        }
        if (opt && !strncmp(x, y, (size_t)(strchr(x, '=') - x + 1))) { /* the same option, another value */
            char *eq = strchr(x, '=');
            *eq = 0;
            snprintf(line, len,
                     "mpiddp %s: the ranks were given different options: %s is %s on rank 0 and %s on rank %d (every "
                     "rank must get the same command line and --config file)",
                     cmd, x, eq + 1, strchr(y, '=') + 1, r);
        } else
            snprintf(line, len,
                     "mpiddp %s: the ranks were given different arguments: argument %d is '%s' on rank 0 and '%s' on "
                     "rank %d",
                     cmd, i, x, y, r);
        return;
    }
}

int cli_agree_parse(ddp_ctx *ctx, const cli_cmd *c, int rc, const char *err, const char **pos, int npos)
{
    const ddp_topology *t = ddp_topo(ctx);
    if (t->size <= 1) return 0;
    char *mine = parsed_text(c, rc, err, pos, npos);
    /* a rank without memory for its text stands out from the others (hash 0), and says what it can */
    uint64_t h = mine ? fnv1a(mine) >> 1 : 0, h0 = h;
    int bad = MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, ctx->world) != MPI_SUCCESS, first = INT_MAX;
    int who = h != h0 ? t->rank : INT_MAX;
    bad |= MPI_Allreduce(&who, &first, 1, MPI_INT, MPI_MIN, ctx->world) != MPI_SUCCESS;
    if (!bad && first != INT_MAX) { /* rank `first` tells rank 0 what it parsed: one message, at most TEXT_MAX */
        if (t->rank == first) {
            const char *s = mine ? mine : "?\x1f?\x1f";
            size_t n = strlen(s) + 1;
            char *cut = n > TEXT_MAX ? strndup(s, TEXT_MAX - 1) : NULL;
            bad |= MPI_Send(cut ? cut : s, cut ? TEXT_MAX : (int)n, MPI_CHAR, 0, 0, ctx->world) != MPI_SUCCESS;
            free(cut);
        } else if (t->rank == 0) {
            static char other[TEXT_MAX]; /* no allocation: the message is always received */
            char line[2048] = "";
            memset(other, 0, sizeof other);
            bad |= MPI_Recv(other, TEXT_MAX, MPI_CHAR, first, 0, ctx->world, MPI_STATUS_IGNORE) != MPI_SUCCESS;
            other[TEXT_MAX - 1] = 0;
            if (!bad && rc != CLI_USAGE) {
                if (mine) explain(mine, other, first, line, sizeof line);
                if (!line[0]) /* out of memory, or texts that differ in what the message leaves out */
                    snprintf(line, sizeof line,
                             "mpiddp %s: the ranks were given different arguments (rank 0 and rank %d)", c->name,
                             first);
                fprintf(stderr, "%s\n", line);
            }
        }
    }
    free(mine);
    if (bad) {
        if (t->rank == 0) fprintf(stderr, "mpiddp %s: error: MPI failed comparing the ranks' arguments\n", c->name);
        return 1;
    }
    return first == INT_MAX ? 0 : 2;
}

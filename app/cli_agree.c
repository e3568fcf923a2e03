/* cli_agree.c — the ranks' agreement on what they parsed: a launcher that gave them different arguments (an MPMD
 * line, a --config file that differs between nodes) would hang a collective or train on mixed settings. */
#include "cli_agree.h"

#include "mpi_ddp/core/ctx.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What this rank parsed, as text: the code, then the options' values (JSON) and the positional arguments, or the
 * usage error's line. */
static char *parsed_text(const cli_cmd *c, int rc, const char *err, const char **pos, int npos)
{
    char *json = rc == CLI_OK ? cli_to_json(c->opts, c->nopts) : NULL;
    size_t n = 16 + (json ? strlen(json) : 0) + (rc == CLI_USAGE ? strlen(err) : 0);
    for (int i = 0; rc == CLI_OK && i < npos; i++) n += strlen(pos[i]) + 1;
    char *t = malloc(n);
    if (t) {
        int k = snprintf(t, n, "%d\n%s", rc, rc == CLI_USAGE ? err : json ? json : "");
        for (int i = 0; rc == CLI_OK && i < npos; i++) k += snprintf(t + k, n - (size_t)k, "\n%s", pos[i]);
    }
    free(json);
    return t;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* One option's value as the command line gives it. */
static void value_text(const cJSON *v, char *buf, size_t len)
{
    if (!v || cJSON_IsNull(v))
        snprintf(buf, len, "unset");
    else if (cJSON_IsString(v))
        snprintf(buf, len, "'%s'", v->valuestring);
    else if (cJSON_IsBool(v))
        snprintf(buf, len, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else
        snprintf(buf, len, "%.17g", v->valuedouble);
}

/* Rank 0's line for two texts that differ (its own, a, and rank r's, b). */
static void explain(const char *cmd, const char *a, const char *b, int r, char *line, size_t len)
{
    int ra = atoi(a), rb = atoi(b);
    const char *ba = strchr(a, '\n') + 1, *bb = strchr(b, '\n') + 1;
    if (rb == CLI_USAGE) { /* rank 0's own usage error is printed as it is */
        snprintf(line, len, "%s (rank %d; rank 0 parsed its command line: the ranks were given different arguments)",
                 bb, r);
        return;
    }
    if (ra != rb) {
        snprintf(line, len, "mpiddp %s: the ranks were given different arguments: --help on rank %d only", cmd,
                 ra == CLI_HELP ? 0 : r);
        return;
    }
    /* the options agree: a positional argument differs (the lines after the JSON) */
    const char *pa = strchr(ba, '\n'), *pb = strchr(bb, '\n');
    for (int i = 1; pa || pb; i++) {
        size_t la = pa ? strcspn(pa + 1, "\n") : 0, lb = pb ? strcspn(pb + 1, "\n") : 0;
        if (pa && pb && la == lb && !strncmp(pa + 1, pb + 1, la)) {
            pa = strchr(pa + 1, '\n'), pb = strchr(pb + 1, '\n');
            continue;
        }
        snprintf(line, len,
                 "mpiddp %s: the ranks were given different arguments: argument %d is '%.*s' on rank 0 and '%.*s' on "
                 "rank %d",
                 cmd, i, (int)la, pa ? pa + 1 : "", (int)lb, pb ? pb + 1 : "", r);
        break;
    }
    char *ja = strndup(ba, strcspn(ba, "\n")), *jb = strndup(bb, strcspn(bb, "\n"));
    cJSON *oa = ja ? cJSON_Parse(ja) : NULL, *ob = jb ? cJSON_Parse(jb) : NULL;
    const cJSON *e;
    cJSON_ArrayForEach(e, oa)
    {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(ob, e->string);
        if (f && cJSON_Compare(e, f, 1)) continue;
        char va[300], vb[300];
        value_text(e, va, sizeof va);
        value_text(f, vb, sizeof vb);
        snprintf(line, len,
                 "mpiddp %s: the ranks were given different options: --%s is %s on rank 0 and %s on rank %d (every "
                 "rank must get the same command line and --config file)",
                 cmd, e->string, va, vb, r);
        break;
    }
    cJSON_Delete(oa);
    cJSON_Delete(ob);
    free(ja);
    free(jb);
}

int cli_agree_parse(ddp_ctx *ctx, const cli_cmd *c, int rc, const char *err, const char **pos, int npos)
{
    const ddp_topology *t = ddp_topo(ctx);
    if (t->size <= 1) return 0;
    char *mine = parsed_text(c, rc, err, pos, npos);
    /* a rank without memory for its text stands out from the others (hash 0) and says so */
    uint64_t h = mine ? fnv1a(mine) >> 1 : 0, h0 = h;
    int bad = MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, ctx->world) != MPI_SUCCESS, first = INT_MAX;
    int who = h != h0 ? t->rank : INT_MAX;
    bad |= MPI_Allreduce(&who, &first, 1, MPI_INT, MPI_MIN, ctx->world) != MPI_SUCCESS;
    if (!bad && first != INT_MAX) { /* rank `first` tells rank 0 what it parsed */
        int n = mine ? (int)strlen(mine) + 1 : 0;
        if (t->rank == first) {
            bad |= MPI_Send(&n, 1, MPI_INT, 0, 0, ctx->world) != MPI_SUCCESS;
            if (n) bad |= MPI_Send(mine, n, MPI_CHAR, 0, 0, ctx->world) != MPI_SUCCESS;
        } else if (t->rank == 0) {
            char line[2048] = "", *other = NULL;
            bad |= MPI_Recv(&n, 1, MPI_INT, first, 0, ctx->world, MPI_STATUS_IGNORE) != MPI_SUCCESS;
            if (!bad && n > 0 && (other = malloc((size_t)n)))
                bad |= MPI_Recv(other, n, MPI_CHAR, first, 0, ctx->world, MPI_STATUS_IGNORE) != MPI_SUCCESS;
            if (!bad && mine && other && rc != CLI_USAGE)
                explain(c->name, mine, other, first, line, sizeof line);
            else if (!bad && rc != CLI_USAGE)
                snprintf(line, sizeof line, "mpiddp %s: error: out of memory comparing the ranks' arguments", c->name);
            if (line[0]) fprintf(stderr, "%s\n", line);
            free(other);
        }
    }
    free(mine);
    if (bad) {
        if (t->rank == 0) fprintf(stderr, "mpiddp %s: error: MPI failed comparing the ranks' arguments\n", c->name);
        return 1;
    }
    return first == INT_MAX ? 0 : 2;
}

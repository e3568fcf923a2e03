/* opts.c — option parsing for every subcommand; see opts.h. */
#include "opts.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CONFIG_MAX (1 << 20) /* bytes a --config file may hold: an INI file of options is a few hundred */

static cli_opt *find(cli_opt *o, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(o[i].name, name) == 0) return &o[i];
    return NULL;
}

int cli_parse_bool(const char *v, int *out)
{
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on")) return *out = 1, 1;
    if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off")) return *out = 0, 1;
    return 0;
}

/* An option's value, as its kind stores it. */
typedef union {
    const char *s;
    int i;
    int64_t l;
    double d;
} opt_val;

static void opt_save(const cli_opt *o, opt_val *v)
{
    switch (o->kind) {
    case OPT_STR: v->s = *(const char *const *)o->dst; break;
    case OPT_I64: v->l = *(const int64_t *)o->dst; break;
    case OPT_F64: v->d = *(const double *)o->dst; break;
    default: v->i = *(const int *)o->dst; break; /* OPT_INT, OPT_FLAG, OPT_CHOICE */
    }
}

static void opt_restore(cli_opt *o, const opt_val *v)
{
    switch (o->kind) {
    case OPT_STR: *(const char **)o->dst = v->s; break;
    case OPT_I64: *(int64_t *)o->dst = v->l; break;
    case OPT_F64: *(double *)o->dst = v->d; break;
    default: *(int *)o->dst = v->i; break;
    }
}

/* The values the options of the last cli_parse held before it set any (their defaults), for cli_either. */
static struct {
    const cli_opt *opts;
    opt_val *v;
} defaults;

/* Sets o from text v (given in from: CLI_FROM_FILE or CLI_FROM_ARGS); writes a message (without the command prefix) on
 * failure. */
static int set_value(cli_opt *o, const char *v, int from, char *err, size_t n)
{
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case OPT_STR:
        if (!*v) return snprintf(err, n, "--%s: empty value", o->name), 0;
        *(const char **)o->dst = v;
        break;
    case OPT_FLAG:
        if (!cli_parse_bool(v, (int *)o->dst))
            return snprintf(err, n, "--%s '%s': expected true or false", o->name, v), 0;
        break;
    case OPT_INT:
    case OPT_I64: {
        long long x = strtoll(v, &end, 10);
        if (*v && !*end && errno == ERANGE) /* an integer, beyond 64 bits: the range, as for any other */
            return snprintf(err, n, "--%s %s: must be in [%.0f, %.0f]", o->name, v, o->min, o->max), 0;
        if (!*v || *end || errno) return snprintf(err, n, "--%s '%s': not an integer", o->name, v), 0;
        if ((double)x < o->min || (double)x > o->max)
            return snprintf(err, n, "--%s %lld: must be in [%.0f, %.0f]", o->name, x, o->min, o->max), 0;
        if (o->kind == OPT_INT)
            *(int *)o->dst = (int)x;
        else
            *(int64_t *)o->dst = (int64_t)x;
        break;
    }
    case OPT_F64: {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x)) return snprintf(err, n, "--%s '%s': not a number", o->name, v), 0;
        if (x < o->min || x > o->max)
            return snprintf(err, n, "--%s %g: must be in [%g, %g]", o->name, x, o->min, o->max), 0;
        *(double *)o->dst = x;
        break;
    }
    case OPT_CHOICE: {
        int idx = 0;
        const char *c = o->choices;
        size_t len = strlen(v);
        while (c && *c) {
            const char *bar = strchr(c, '|');
            size_t cl = bar ? (size_t)(bar - c) : strlen(c);
            if (cl == len && strncmp(c, v, len) == 0) {
                *(int *)o->dst = idx;
                o->seen |= from;
                return 1;
            }
            idx++;
            c = bar ? bar + 1 : NULL;
        }
        return snprintf(err, n, "--%s '%s': expected one of %s", o->name, v, o->choices), 0;
    }
    }
    o->seen |= from;
    return 1;
}

typedef struct {
    cli_opt *opts;
    int n;
    const char *file;
    char *err;
    size_t errlen;
    int failed;
    char **keep; /* INI values must outlive parsing */
    int nkeep;
} ini_state;

static int ini_cb(void *user, const char *section, const char *name, const char *value)
{
    ini_state *s = user;
    (void)section;
    if (s->failed) return 0;
    char key[128];
    snprintf(key, sizeof key, "%s", name);
    for (char *p = key; *p; p++)
        if (*p == '_') *p = '-';
    cli_opt *o = find(s->opts, s->n, key);
    if (!o || !strcmp(key, "config")) {
        snprintf(s->err, s->errlen, "unknown key '%s'", name);
        s->failed = 1;
        return 0;
    }
    char *v = strdup(value);
    if (!v) return 0;
    char **keep = realloc(s->keep, (size_t)(s->nkeep + 1) * sizeof *s->keep);
    if (!keep) { /* the values kept so far stay in s->keep, freed by the caller */
        free(v);
        return 0;
    }
    s->keep = keep;
    s->keep[s->nkeep++] = v;
    char msg[400];
    if (!set_value(o, v, CLI_FROM_FILE, msg, sizeof msg)) {
        snprintf(s->err, s->errlen, "%s", msg);
        s->failed = 1;
        return 0;
    }
    return 1;
}

static const char *file_kind(mode_t m)
{
    return S_ISFIFO(m)   ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a file";
}

/* The text of a --config file, NUL-terminated (caller frees), or NULL with the reason in err. Only a regular file
 * of at most CONFIG_MAX bytes without NUL bytes: a directory, a FIFO or a device (/dev/zero) is refused at once,
 * never read forever or waited on (O_NONBLOCK: opening a FIFO does not wait for a writer). */
static char *read_config(const char *file, char *err, size_t n)
{
    int fd = open(file, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return snprintf(err, n, "cannot open: %s", strerror(errno)), NULL;
    struct stat sb;
    char *buf = NULL;
    size_t len = 0;
    if (fstat(fd, &sb) != 0)
        snprintf(err, n, "cannot stat: %s", strerror(errno));
    else if (S_ISDIR(sb.st_mode))
        snprintf(err, n, "is a directory, not an INI file");
    else if (!S_ISREG(sb.st_mode))
        snprintf(err, n, "is %s, not a regular file", file_kind(sb.st_mode));
    else if (sb.st_size > CONFIG_MAX)
        snprintf(err, n, "%lld bytes, more than the %d a config file may hold", (long long)sb.st_size, CONFIG_MAX);
    else if (!(buf = malloc(CONFIG_MAX + 2)))
        snprintf(err, n, "out of memory");
    else {
        for (;;) { /* to the end, or one byte past the limit (a file that grew since fstat) */
            ssize_t k = read(fd, buf + len, CONFIG_MAX + 1 - len);
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) {
                snprintf(err, n, "read failed: %s", strerror(errno));
                break;
            }
            len += (size_t)k;
            if (k == 0 || len > CONFIG_MAX) break;
        }
        if (len > CONFIG_MAX)
            snprintf(err, n, "more than the %d bytes a config file may hold", CONFIG_MAX);
        else if (memchr(buf, 0, len))
            snprintf(err, n, "holds a NUL byte at offset %zu: not a text file",
                     (size_t)((char *)memchr(buf, 0, len) - buf));
        else {
            buf[len] = 0;
            close(fd);
            return buf;
        }
    }
    free(buf);
    close(fd);
    return NULL;
}

/* The longest line of a --config file, line terminator excluded: inih (INI_MAX_LINE 200, no realloc) reads a
 * line of 199 or more characters as two lines, which cut a value short (`out = <long path> run2` wrote to ./run2)
 * or shifted the line numbers of its errors. */
#define INI_LINE_MAX 198

/* Where inih's find_chars_or_comment stops in [s, e): at the first of chars, at an inline comment (';' after
 * whitespace), or at e. */
static const char *ini_find(const char *s, const char *e, const char *chars)
{
    for (int was_space = 0; s < e && !strchr(chars, *s) && !(was_space && *s == ';'); s++)
        was_space = isspace((unsigned char)*s);
    return s;
}

/* Rewrites a --config text in place for ini_parse_string, line for line (line numbers stay the file's): a UTF-8 BOM
 * at its start and every line's leading whitespace (and a CR before its LF) are removed. inih (built with
 * INI_ALLOW_MULTILINE) takes an indented line as a continuation of the previous key's value, so `  mode = max`
 * under `  monitor = val/acc` set --monitor to "mode = max" without a word: here an indented line is an ordinary
 * line, and continuation lines are not supported. A line that is not empty, a ;/# comment, a [section] header or
 * `key = value` (`key : value`) is a syntax error, found here so that it is reported first and inih's result is
 * then the line of the first key the handler refused (inih goes on after a syntax error and returns the first
 * error's line: 'epochs 3' above 'warp = 1' was reported as "FILE:1: unknown key 'warp'"). Returns 0, or the
 * 1-based number of the first line inih would misread, with the reason in err. */
static int ini_prepare(char *text, char *err, size_t n)
{
    char *r = text, *w = text;
    if (!strncmp(r, "\xEF\xBB\xBF", 3)) r += 3;
    for (int line = 1; *r; line++) {
        char *end = strchr(r, '\n');
        size_t len = end ? (size_t)(end - r) : strlen(r);
        if (len && r[len - 1] == '\r') len--;
        size_t skip = 0;
        while (skip < len && isspace((unsigned char)r[skip])) skip++;
        if (skip < len && (r[skip] == ';' || r[skip] == '#')) skip = len; /* a comment: an empty line, any length */
        if (len - skip > INI_LINE_MAX) /* what inih reads of the line: without its indentation */
            return snprintf(err, n, "line longer than %d characters (give that option on the command line)",
                            INI_LINE_MAX),
                   line;
        const char *p = r + skip, *q = r + len, *f = NULL;
        if (p < q && *p == '[' && ((f = ini_find(p + 1, q, "]")) == q || *f != ']'))
            return snprintf(err, n, "syntax error (expected [section])"), line;
        if (p < q && *p != '[' && *p != ';' && *p != '#' && ((f = ini_find(p, q, "=:")) == q || *f == ';'))
            return snprintf(err, n, "syntax error (expected key = value)"), line;
        memmove(w, r + skip, len - skip);
        w += len - skip;
        if (!end) break;
        *w++ = '\n';
        r = end + 1;
    }
    *w = 0;
    return 0;
}

int cli_ini_parse(const char *file, cli_ini_handler handler, void *user, char *err, size_t errlen)
{
    char why[300];
    char *text = read_config(file, why, sizeof why);
    if (!text) return snprintf(err, errlen, "--config %s: %s", file, why), -1;
    int bad = ini_prepare(text, why, sizeof why);
    if (bad) {
        free(text);
        return snprintf(err, errlen, "%s:%d: %s", file, bad, why), -1;
    }
    int rc = ini_parse_string(text, handler, user);
    free(text);
    if (rc < 0) return snprintf(err, errlen, "--config %s: cannot parse (out of memory)", file), -1;
    return rc; /* inih reports the line of the first error */
}

int cli_parse(const char *cmd, cli_opt *opts, int nopts, int argc, char **argv, int first, const char **pos, int npos,
              int *npos_out, char *err, size_t errlen)
{
    int np = 0;
    char msg[600];
    for (int i = first; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return CLI_HELP;
    free(defaults.v); /* without the memory, cli_either leaves a conflict to the command */
    defaults.opts = opts;
    if ((defaults.v = calloc((size_t)nopts, sizeof *defaults.v)))
        for (int i = 0; i < nopts; i++) opt_save(&opts[i], &defaults.v[i]);
    /* --config first, so the command line wins */
    cli_opt *cfg = find(opts, nopts, "config");
    if (cfg) {
        const char *file = NULL;
        for (int i = first; i < argc; i++) {
            if (!strcmp(argv[i], "--config") && i + 1 < argc)
                file = argv[i + 1];
            else if (!strncmp(argv[i], "--config=", 9))
                file = argv[i] + 9;
        }
        if (file) {
            static ini_state st; /* values stay alive for the process */
            st = (ini_state){.opts = opts, .n = nopts, .file = file, .err = msg, .errlen = sizeof msg};
            char why[500];
            int rc = cli_ini_parse(file, ini_cb, &st, why, sizeof why);
            if (rc < 0) return snprintf(err, errlen, "mpiddp %s: %s", cmd, why), CLI_USAGE;
            if (rc > 0)
                return snprintf(err, errlen, "mpiddp %s: %s:%d: %s", cmd, file, rc, st.failed ? msg : "syntax error"),
                       CLI_USAGE;
        }
    }
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || a[2] == 0) {
            if (np >= npos) return snprintf(err, errlen, "mpiddp %s: unexpected argument '%s'", cmd, a), CLI_USAGE;
            pos[np++] = a;
            continue;
        }
        char name[128];
        const char *eq = strchr(a + 2, '=');
        size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (nl >= sizeof name) nl = sizeof name - 1;
        memcpy(name, a + 2, nl);
        name[nl] = 0;
        cli_opt *o = find(opts, nopts, name);
        if (!o)
            return snprintf(err, errlen, "mpiddp %s: unknown option '--%s' (see mpiddp %s --help)", cmd, name, cmd),
                   CLI_USAGE;
        const char *v = eq ? eq + 1 : NULL;
        if (o->kind == OPT_FLAG && !v) v = "true";
        if (!v) { /* the next word is the value, unless it is another option (--resume --epochs 3) */
            if (i + 1 >= argc ||
                (!strncmp(argv[i + 1], "--", 2) && o->kind != OPT_F64 && o->kind != OPT_INT && o->kind != OPT_I64))
                return snprintf(err, errlen, "mpiddp %s: --%s needs a value", cmd, name), CLI_USAGE;
            v = argv[++i];
        }
        if (!set_value(o, v, CLI_FROM_ARGS, msg, sizeof msg))
            return snprintf(err, errlen, "mpiddp %s: %s", cmd, msg), CLI_USAGE;
    }
    if (npos_out) *npos_out = np;
    return CLI_OK;
}

/* Whether o holds a value that conflicts: given, and for a flag, true. */
static int opt_given(const cli_opt *o) { return o->seen && (o->kind != OPT_FLAG || *(const int *)o->dst); }

void cli_either(cli_opt *opts, int nopts, const char *a, const char *b)
{
    cli_opt *x = find(opts, nopts, a), *y = find(opts, nopts, b);
    if (!x || !y || defaults.opts != opts || !defaults.v) return;
    for (int k = 0; k < 2; k++) {
        cli_opt *arg = k ? y : x, *file = k ? x : y;
        if ((arg->seen & CLI_FROM_ARGS) && opt_given(arg) && file->seen == CLI_FROM_FILE) {
            opt_restore(file, &defaults.v[file - opts]);
            file->seen = 0;
        }
    }
}

int cli_seen(const cli_opt *opts, int nopts, const char *name)
{
    for (int i = 0; i < nopts; i++)
        if (strcmp(opts[i].name, name) == 0) return opts[i].seen;
    return 0;
}

void cli_help(FILE *f, const char *cmd, const char *usage, const char *about, const cli_opt *opts, int nopts)
{
    fprintf(f, "usage: mpiddp %s %s\n\n%s\n\noptions:\n", cmd, usage, about);
    for (int i = 0; i < nopts; i++) {
        const cli_opt *o = &opts[i];
        char left[96];
        const char *arg = o->kind == OPT_FLAG     ? ""
                          : o->kind == OPT_CHOICE ? o->choices
                          : o->kind == OPT_STR    ? "VALUE"
                                                  : "N";
        snprintf(left, sizeof left, "--%s %s", o->name, arg);
        fprintf(f, "  %-34s %s\n", left, o->help);
    }
    fprintf(f, "  %-34s %s\n", "--help", "show this help");
}

char *cli_to_json(const cli_opt *opts, int nopts)
{
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < nopts; i++) {
        const cli_opt *p = &opts[i];
        switch (p->kind) {
        case OPT_STR: {
            const char *v = *(const char *const *)p->dst;
            if (v)
                cJSON_AddStringToObject(o, p->name, v);
            else
                cJSON_AddNullToObject(o, p->name);
            break;
        }
        case OPT_INT: cJSON_AddNumberToObject(o, p->name, *(const int *)p->dst); break;
        case OPT_I64: cJSON_AddNumberToObject(o, p->name, (double)*(const int64_t *)p->dst); break;
        case OPT_F64: cJSON_AddNumberToObject(o, p->name, *(const double *)p->dst); break;
        case OPT_FLAG: cJSON_AddBoolToObject(o, p->name, *(const int *)p->dst); break;
        case OPT_CHOICE: {
            int idx = *(const int *)p->dst;
            const char *c = p->choices;
            for (int k = 0; k < idx && c; k++) {
                c = strchr(c, '|');
                if (c) c++;
            }
            char buf[64] = "";
            if (c) {
                const char *bar = strchr(c, '|');
                snprintf(buf, sizeof buf, "%.*s", bar ? (int)(bar - c) : (int)strlen(c), c);
            }
            cJSON_AddStringToObject(o, p->name, buf);
            break;
        }
        }
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* cmd_data.c — the dataset commands: `synth` (deterministic synthetic shards, written in parallel when
 * run on several ranks), `pack` (per-sample HDF5 -> shards), `index` (the manifest) and `inspect` (validate +
 * statistics, from the manifest where it is fresh). */
#include "cli.h"

#include "io/dataset.h"
#include "io/finite.h"
#include "io/manifest.h"
#include "io/writer.h"
#include "mpi_ddp/core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* After synth and pack: index what was written (a failure is a warning: the shards are fine). */
static void write_manifest_after(ddp_ctx *ctx, const char *cmd, const char *dir)
{
    ddp_survey sv;
    ddp_status st = ddp_dataset_survey(ctx, dir, "none", DDP_SURVEY_STATS | DDP_SURVEY_FINITE, &sv);
    if (st == DDP_OK) st = ddp_survey_write_manifest(ctx, &sv, NULL);
    if (st != DDP_OK && cli_rank0(ctx))
        fprintf(stderr, "mpiddp %s: warning: no manifest written: %s; `mpiddp index %s` writes it\n", cmd,
                ddp_last_error(), dir);
    ddp_survey_free(&sv);
}

int cmd_synth(ddp_ctx *ctx, int argc, char **argv)
{
    ddp_synth_opts o = {.samples = 4000, .dim = 32, .classes = 4, .min_rows = 4, .max_rows = 64, .shards = 4};
    int64_t seed = 0;
    int no_manifest = 0;
    cli_opt opts[] = {
        {"out", OPT_STR, &o.out, NULL, 0, 0, "output directory (required; must hold no *.h5)", 0},
        {"samples", OPT_I64, &o.samples, NULL, 1, 1e15, "number of samples (default 4000)", 0},
        {"dim", OPT_I64, &o.dim, NULL, 1, 1e6, "features per row D (default 32)", 0},
        {"classes", OPT_I64, &o.classes, NULL, 2, 1e6, "number of classes (default 4)", 0},
        {"min-rows", OPT_I64, &o.min_rows, NULL, 1, 1e9, "fewest rows per sample (default 4)", 0},
        {"max-rows", OPT_I64, &o.max_rows, NULL, 1, 1e9, "most rows per sample (default 64)", 0},
        {"shards", OPT_I64, &o.shards, NULL, 1, 1e9, "number of shard files (default 4)", 0},
        {"seed", OPT_I64, &seed, NULL, 0, 9.2e18, "seed: class prototypes and every sample (default 0)", 0},
        {"first-id", OPT_I64, &o.first_id, NULL, 0, 9.2e18,
         "id of the first sample; use disjoint ranges for train/val (default 0)", 0},
        {"task", OPT_CHOICE, &o.task, "class|order", 0, 0,
         "class: label from the row mean; order: label = first of C markers, needs --min-rows >= --classes (default "
         "class)",
         0},
        {"no-manifest", OPT_FLAG, &no_manifest, NULL, 0, 0, "do not index the result into OUT/" DDP_MANIFEST_NAME, 0},
    };
    const cli_cmd cmd = {"synth", "--out DIR [options]",
                         "Writes a variable-length dataset whose class is learnable from the mean of a sample's rows\n"
                         "(--task class), or only from the order of its rows (--task order: the first of C markers).\n"
                         "Sample `id` depends only on (seed, id), so train and validation sets are made with the same\n"
                         "seed and disjoint --first-id ranges. Under mpirun the ranks write shards in parallel.",
                         opts, (int)(sizeof opts / sizeof opts[0])};
    int done = cli_cmd_parse(ctx, &cmd, argc, argv, NULL, 0, NULL);
    if (done >= 0) return done;
    const char *const required[] = {"--out DIR"};
    int rc = cli_require(ctx, "synth", 1, required, (const int[]){!!o.out});
    if (rc >= 0) return rc;
    if (ddp_synth_check(&o) != DDP_OK) /* ranges that depend on each other: usage errors too */
        return cli_usage(ctx, "synth", "%s", ddp_last_error());
    o.seed = (uint64_t)seed;
    ddp_out_lock lk; /* --out is this run's until the manifest is written: no other synth, pack or index there */
    ddp_status st = ddp_out_lock_take(ctx, o.out, 1, "synth", &lk);
    if (st != DDP_OK) return cli_fail(ctx, "synth", st);
    st = ddp_synth(ctx, &o);
    if (st != DDP_OK) {
        ddp_out_lock_release(&lk);
        return cli_fail(ctx, "synth", st);
    }
    if (cli_rank0(ctx))
        printf("synth: wrote %lld %ssamples (D=%lld, %lld classes, %lld-%lld rows) in %lld shards to %s\n",
               (long long)o.samples, o.task == 1 ? "order-task " : "", (long long)o.dim, (long long)o.classes,
               (long long)o.min_rows, (long long)o.max_rows, (long long)o.shards, o.out);
    if (!no_manifest) write_manifest_after(ctx, "synth", o.out);
    ddp_out_lock_release(&lk);
    return 0;
}

int cmd_pack(ddp_ctx *ctx, int argc, char **argv)
{
    const char *input = NULL, *out = NULL;
    int64_t shards = 1, classes = 0;
    int no_manifest = 0;
    cli_opt opts[] = {
        {"input", OPT_STR, &input, NULL, 0, 0, "HDF5 file with /samples/<name> (rows x D) and /labels (required)", 0},
        {"out", OPT_STR, &out, NULL, 0, 0, "output dataset directory (required; must hold no *.h5)", 0},
        {"shards", OPT_I64, &shards, NULL, 1, 1e9, "number of shards, balanced by rows (default 1)", 0},
        {"classes", OPT_I64, &classes, NULL, 2, 16777216,
         "num_classes of the dataset (default: largest label + 1; give it when a split may lack the top class)", 0},
        {"no-manifest", OPT_FLAG, &no_manifest, NULL, 0, 0, "do not index the result into OUT/" DDP_MANIFEST_NAME, 0},
    };
    const cli_cmd cmd = {
        "pack", "--input FILE.h5 --out DIR [--shards S] [--classes C]",
        "Converts one 2-D dataset per sample under /samples (taken in sorted name order) plus a 1-D /labels\n"
        "into a sharded dataset; sample_ids are the positions in that order; num_classes = max label + 1\n"
        "unless --classes says more.",
        opts, (int)(sizeof opts / sizeof opts[0])};
    int done = cli_cmd_parse(ctx, &cmd, argc, argv, NULL, 0, NULL);
    if (done >= 0) return done;
    const char *const required[] = {"--input FILE.h5", "--out DIR"};
    int rc = cli_require(ctx, "pack", 2, required, (const int[]){!!input, !!out});
    if (rc >= 0) return rc;
    ddp_out_lock lk; /* as synth's */
    ddp_status st = ddp_out_lock_take(ctx, out, 1, "pack", &lk);
    if (st != DDP_OK) return cli_fail(ctx, "pack", st);
    char notice[1024];
    st = ddp_pack(ctx, input, out, shards, classes, notice, sizeof notice);
    if (st != DDP_OK) {
        ddp_out_lock_release(&lk);
        return cli_fail(ctx, "pack", st);
    }
    if (cli_rank0(ctx)) printf("pack: wrote %lld shard(s) to %s\n", (long long)shards, out);
    if (cli_rank0(ctx) && notice[0]) /* NaN/Inf are allowed (as index says): a notice, exit 0 */
        fprintf(stderr, "mpiddp pack: notice: %s; `mpiddp inspect %s` names the first in the shards\n", notice, out);
    if (!no_manifest) write_manifest_after(ctx, "pack", out);
    ddp_out_lock_release(&lk);
    return 0;
}

static void human(char *buf, size_t n, double b)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) b /= 1024, i++;
    snprintf(buf, n, "%.1f %s", b, u[i]);
}

int cmd_index(ddp_ctx *ctx, int argc, char **argv)
{
    const char *pos[1] = {NULL}, *manifest = NULL;
    int np = 0;
    cli_opt opts[] = {
        {"manifest", OPT_STR, &manifest, NULL, 0, 0,
         "write the manifest to FILE instead of DIR/" DDP_MANIFEST_NAME " (read-only data)", 0},
    };
    const cli_cmd cmd = {
        "index", "DIR [--manifest FILE]",
        "Validates every shard (spread over the ranks under mpirun), scans every feature for NaN/Inf and writes the\n"
        "manifest: each shard's name, size, mtime, metadata and statistics, so that train, eval and inspect "
        "re-validate\n"
        "only the shards that changed since (docs/dataset-format.md#the-manifest).",
        opts, (int)(sizeof opts / sizeof opts[0])};
    int done = cli_cmd_parse(ctx, &cmd, argc, argv, pos, 1, &np);
    if (done >= 0) return done;
    if (np != 1) return cli_usage(ctx, "index", "expected one dataset directory");
    if (manifest && !strcmp(manifest, "none"))
        return cli_usage(ctx, "index", "--manifest none: give the file to write");
    if (manifest && ddp_agree_status(ctx, cli_rank0(ctx) ? ddp_manifest_replaceable(manifest) : DDP_OK) != DDP_OK)
        return cli_usage(ctx, "index", "%s", ddp_last_error()); /* before validating: a shard named by mistake */
    ddp_out_lock lk; /* shared: concurrent indexes are fine, a synth or pack writing DIR refuses this one */
    ddp_status st = ddp_out_lock_take(ctx, pos[0], 0, "index", &lk);
    if (st != DDP_OK) return cli_fail(ctx, "index", st);
    if (cli_rank0(ctx)) { /* the temporaries of an index killed before its rename (rank 0 writes the manifest) */
        char path[4200], other[4400];
        snprintf(path, sizeof path, "%s%s%s", manifest ? manifest : pos[0], manifest ? "" : "/",
                 manifest ? "" : DDP_MANIFEST_NAME);
        int64_t kept = ddp_manifest_remove_stale(path, other, sizeof other);
        if (kept)
            fprintf(stderr,
                    "mpiddp index: notice: %lld manifest temporary file(s) of another host or PID namespace kept (%s): "
                    "an index there may be writing; remove them once none runs\n",
                    (long long)kept, other);
    }
    ddp_survey sv;
    st = ddp_dataset_survey(ctx, pos[0], "none", DDP_SURVEY_STATS | DDP_SURVEY_FINITE, &sv);
    if (st == DDP_OK) st = ddp_survey_write_manifest(ctx, &sv, manifest);
    ddp_out_lock_release(&lk);
    if (st != DDP_OK) return cli_fail(ctx, "index", st);
    if (cli_rank0(ctx)) {
        int64_t N = 0, bad = 0, badsh = 0;
        for (int64_t k = 0; k < sv.nshards; k++) {
            N += sv.metas[k].n;
            bad += sv.entries[k].nonfinite > 0 ? sv.entries[k].nonfinite : 0;
            badsh += sv.entries[k].nonfinite > 0;
        }
        printf("index: %s: %lld shards, %lld samples validated; wrote %s%s%s\n", pos[0], (long long)sv.nshards,
               (long long)N, manifest ? manifest : pos[0], manifest ? "" : "/", manifest ? "" : DDP_MANIFEST_NAME);
        if (bad)
            fprintf(stderr,
                    "mpiddp index: notice: %lld non-finite feature value(s) in %lld shard(s); `mpiddp inspect %s` "
                    "names the first\n",
                    (long long)bad, (long long)badsh, pos[0]);
    }
    ddp_survey_free(&sv);
    return 0;
}

int cmd_inspect(ddp_ctx *ctx, int argc, char **argv)
{
    const char *pos[1] = {NULL}, *manifest = NULL;
    int np = 0;
    cli_opt opts[] = {
        {"manifest", OPT_STR, &manifest, NULL, 0, 0,
         "the manifest to use (default DIR/" DDP_MANIFEST_NAME " when present; none: validate every shard)", 0},
    };
    const cli_cmd cmd = {
        "inspect", "DIR [--manifest FILE|none]",
        "Validates every rule of the dataset format (docs/dataset-format.md), reads every feature for NaN or Inf "
        "(naming\n"
        "the first by file, row, column and sample), and prints counts, row-length statistics, class counts, bytes\n"
        "and whether each shard can be memory-mapped. Shards unchanged since `mpiddp index` are taken from the "
        "manifest\n"
        "without being opened. Exit 0 only when valid and finite.",
        opts, (int)(sizeof opts / sizeof opts[0])};
    int done = cli_cmd_parse(ctx, &cmd, argc, argv, pos, 1, &np);
    if (done >= 0) return done;
    if (np != 1) return cli_usage(ctx, "inspect", "expected one dataset directory");
    ddp_survey sv;
    ddp_status st = ddp_dataset_survey(ctx, pos[0], manifest, DDP_SURVEY_STATS | DDP_SURVEY_FINITE, &sv);
    /* a manifest ignored is a notice; a stale one is not: the "metadata from" line below counts what was re-validated
     */
    if (sv.notice[0] && !sv.manifest_used && cli_rank0(ctx)) fprintf(stderr, "mpiddp inspect: notice: %s\n", sv.notice);
    if (st != DDP_OK) return cli_fail(ctx, "inspect", st);
    if (cli_rank0(ctx)) st = ddp_survey_check_finite(&sv); /* NaN/Inf features: named, not "valid" */
    st = ddp_agree_status(ctx, st);
    if (st == DDP_OK && cli_rank0(ctx)) {
        const ddp_shard_meta *m = sv.metas;
        int64_t ns = sv.nshards, N = 0, R = 0, bytes = 0, mappable = 0, minr = 0, maxr = 0, hist[16] = {0};
        int64_t C = m[0].classes, *cc = calloc((size_t)C, sizeof *cc);
        for (int64_t i = 0; i < ns; i++) {
            const ddp_manifest_entry *e = &sv.entries[i];
            N += m[i].n;
            R += m[i].rows;
            bytes += m[i].file_bytes;
            mappable += m[i].feat_off >= 0;
            if (!minr || e->min_rows < minr) minr = e->min_rows;
            if (e->max_rows > maxr) maxr = e->max_rows;
            for (int b = 0; b < 16; b++) hist[b] += e->hist[b];
            for (int64_t j = 0; cc && j < e->ncc; j++) {
                const int64_t *p = sv.pairs + 2 * (e->cc_first + j);
                if (p[0] >= 0 && p[0] < C) cc[p[0]] += p[1];
            }
        }
        char b1[32], b2[32];
        human(b1, sizeof b1, (double)R * (double)m[0].dim * 4);
        human(b2, sizeof b2, (double)bytes);
        printf("dataset %s: valid\n", pos[0]);
        if (sv.manifest_used)
            printf("metadata from %s (%lld shards unchanged, %lld re-validated)\n", sv.manifest, (long long)sv.fresh,
                   (long long)sv.validated);
        printf("shards %lld  samples %lld  rows %lld  D %lld  classes %lld\n", (long long)ns, (long long)N,
               (long long)R, (long long)m[0].dim, (long long)C);
        printf("rows per sample: min %lld  mean %.2f  max %lld\n", (long long)minr, (double)R / (double)N,
               (long long)maxr);
        printf("rows-per-sample histogram:\n");
        for (int b = 0; b < 16; b++) /* the last bin holds every longer sample too (io/shard_validate.c bin_of) */
            if (hist[b] && b < 15)
                printf("  %8lld-%-8lld %10lld\n", 1LL << b, (2LL << b) - 1, (long long)hist[b]);
            else if (hist[b])
                printf("  %8lld+%-8s %10lld\n", 1LL << b, "", (long long)hist[b]);
        printf("class counts:");
        for (int64_t c = 0; cc && c < C; c++) printf(" %lld:%lld", (long long)c, (long long)cc[c]);
        printf("\nbytes: features %s, files %s; %lld of %lld shard(s) memory-mappable\n", b1, b2, (long long)mappable,
               (long long)ns);
        printf("%-28s %12s %14s %14s  %s\n", "shard", "samples", "rows", "bytes", "features");
        for (int64_t i = 0; i < ns; i++)
            printf("%-28s %12lld %14lld %14lld  %s\n", m[i].name, (long long)m[i].n, (long long)m[i].rows,
                   (long long)m[i].file_bytes, m[i].feat_off >= 0 ? "mmap" : "hdf5-read (not mappable: slower)");
        free(cc);
    }
    ddp_survey_free(&sv);
    if (st != DDP_OK) return cli_fail(ctx, "inspect", st);
    return 0;
}

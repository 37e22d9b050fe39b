/*
 * pull.c - `kiln pull ORG/NAME[:QUANT] [--revision REV]`: downloads a model from the Hugging Face
 * Hub ($HF_ENDPOINT) into the Hugging Face cache (layout in hub.h), where kiln ls, -m ORG/NAME and
 * Python tools find it.
 *
 * Without a tag the whole repository's model files are fetched (safetensors, configs, tokenizer
 * and template files; hub_wanted_file); a repository of GGUF files only gets its Q4_K_M quant (else
 * its first GGUF). With a tag, one GGUF quant, every part of a split one. Before downloading it says
 * whether the model fits this machine (hub_fit.c). Each file goes to blobs/ID.incomplete (resumed
 * from its size on the next run), is checked against its size and LFS sha256, and only then is
 * renamed into blobs/ and linked into the snapshot; refs/REV is written last. A file already in the
 * cache is not downloaded again. HF_HUB_OFFLINE=1 uses the cache only.
 */
#include "cli.h"
#include "hub.h"
#include "hub_fit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* A download's progress line. */
typedef struct bar {
    const char *label;
    bool tty;
    double t0, last;
    uint64_t start;     /* bytes present when this run began (resumed) */
    uint64_t last_done; /* bytes drawn last */
    int shown;
} bar;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fmt_time(double s, char *buf, size_t cap) {
    if (s < 0 || s > 360000) snprintf(buf, cap, "--:--");
    else if (s >= 3600) snprintf(buf, cap, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
    else snprintf(buf, cap, "%d:%02d", (int)s / 60, (int)s % 60);
}

/* The terminal bar: name, a 20-cell bar, percent, bytes, rate and ETA, at most 10 times a second. */
static void on_progress(void *user, uint64_t done, uint64_t total) {
    bar *b = user;
    if (!b->tty) return;
    const double t = now_s();
    if (b->shown && (t - b->last < 0.1 || done == b->last_done) && done < total) return;
    if (b->shown && done == b->last_done) return; /* the end, drawn once */
    b->last = t;
    b->last_done = done;
    b->shown = 1;
    const double dt = t - b->t0 > 1e-3 ? t - b->t0 : 1e-3;
    const double rate = done > b->start ? (double)(done - b->start) / dt : 0;
    char d[32], tot[32], r[32], eta[16], cells[21];
    cli_fmt_bytes(done, d, sizeof d);
    cli_fmt_bytes(total, tot, sizeof tot);
    cli_fmt_bytes((uint64_t)rate, r, sizeof r);
    fmt_time(rate > 0 && total > done ? (double)(total - done) / rate
             : total && done >= total ? 0
                                      : -1,
             eta, sizeof eta);
    const int pct = total ? (int)(done * 100 / total) : 0;
    for (int i = 0; i < 20; i++) cells[i] = i < pct / 5 ? '#' : '.';
    cells[20] = '\0';
    fprintf(stderr, "\r\033[K  %.40s [%s] %3d%% %s / %s  %s/s  ETA %s", b->label, cells, pct, d, tot, r, eta);
    fflush(stderr);
}

/* What a run of the command works on. */
typedef struct job {
    const char *repo, *tag, *rev;
    char *repo_dir;
    hub_repo r;
    bool *pick;
    size_t n_pick;
    bool offline;
} job;

static bool env_true(const char *name) {
    const char *v = getenv(name);
    return v &&
           (strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0 || strcasecmp(v, "on") == 0);
}

static bool is_weights(const char *path) {
    const size_t n = strlen(path);
    return (n > 12 && strcasecmp(path + n - 12, ".safetensors") == 0) || hub_is_gguf_model(path);
}

/* Chooses the files to fetch into j->pick; false after printing why none. */
static bool choose(job *j) {
    const hub_repo *r = &j->r;
    if (!(j->pick = calloc(r->n ? r->n : 1, sizeof *j->pick))) return false;
    char quants[1024];
    hub_list_quants(r->files, r->n, quants, sizeof quants);
    if (j->tag) {
        j->n_pick = hub_pick_quant(r->files, r->n, j->tag, j->pick);
        if (j->n_pick) return true;
        if (quants[0])
            fprintf(stderr, "kiln pull: %s has no GGUF file of quant %s; available: %s (pull one as %s:QUANT)\n",
                    j->repo, j->tag, quants, j->repo);
        else fprintf(stderr, "kiln pull: %s has no GGUF files; pull the whole repository as %s\n", j->repo, j->repo);
        return false;
    }
    bool safetensors = false;
    size_t skipped = 0;
    const char *example = NULL;
    for (size_t i = 0; i < r->n; i++) {
        j->pick[i] = hub_wanted_file(r->files[i].path);
        if (j->pick[i] && is_weights(r->files[i].path)) safetensors = true;
        if (!j->pick[i]) {
            skipped++;
            if (!example && strcmp(r->files[i].path, ".gitattributes") != 0) example = r->files[i].path;
        }
        j->n_pick += j->pick[i];
    }
    if (!safetensors && quants[0]) { /* a GGUF repository named without a quant */
        memset(j->pick, 0, r->n * sizeof *j->pick);
        const char *tag = HUB_DEFAULT_QUANT;
        j->n_pick = hub_pick_quant(r->files, r->n, tag, j->pick);
        for (size_t i = 0; i < r->n && !j->n_pick; i++) {
            if (hub_is_gguf_model(r->files[i].path)) {
                tag = NULL;
                j->n_pick = hub_pick_quant(r->files, r->n, r->files[i].path, j->pick);
            }
        }
        fprintf(stderr, "%s is a GGUF repository (quants: %s); pulling %s. Name another as %s:QUANT.\n", j->repo,
                quants, tag ? tag : "its first GGUF file", j->repo);
        return j->n_pick > 0;
    }
    if (!safetensors) {
        fprintf(stderr, "kiln pull: %s has no safetensors or GGUF weights kiln can use\n", j->repo);
        return false;
    }
    if (example) fprintf(stderr, "Skipping %zu file(s) kiln does not use (e.g. %s).\n", skipped, example);
    return true;
}

/* Says whether the chosen model fits, before anything large is downloaded: the weights are the files'
 * bytes (times what an MLX-quantized model's take in memory, hub_fit_mlx_ratio). */
static void report_fit(job *j) {
    const hub_repo *r = &j->r;
    uint64_t weights = 0;
    const hub_file *config = NULL, *gguf = NULL;
    for (size_t i = 0; i < r->n; i++) {
        if (!j->pick[i]) continue;
        if (is_weights(r->files[i].path)) weights += r->files[i].size;
        if (strcmp(r->files[i].path, "config.json") == 0) config = &r->files[i];
        int c;
        if (hub_is_gguf_model(r->files[i].path) && (!gguf || hub_split_part(r->files[i].path, &c) == 1))
            gguf = &r->files[i];
    }
    kiln_model_info dims;
    bool known = false;
    const hub_file *src = config ? config : gguf;
    if (src) {
        char *text = NULL, *blob = NULL;
        size_t len = 0;
        /* GGUF: the metadata at the file's start (the dimensions come before the vocabulary) */
        const size_t want = config ? 0 : (size_t)2 << 20;
        /* from the cache when the blob is there */
        if (asprintf(&blob, "%s/blobs/%s", j->repo_dir, src->blob_id) >= 0) {
            FILE *f = fopen(blob, "rb");
            if (f) {
                const size_t cap = config ? HUB_MAX_SMALL : want;
                if ((text = malloc(cap + 1))) {
                    len = fread(text, 1, cap, f);
                    text[len] = '\0';
                }
                fclose(f);
            }
        }
        free(blob);
        hub_error e;
        if (!text && !j->offline && hub_fetch_small(j->repo, r->commit, src->path, want, &text, &len, &e) != HUB_OK)
            text = NULL;
        if (text) known = config ? hub_fit_from_config(text, len, &dims) : hub_fit_from_gguf(text, len, &dims);
        if (text && config) weights = (uint64_t)((double)weights * hub_fit_mlx_ratio(text, len));
        free(text);
    }
    hub_fit_report(stderr, weights, known ? &dims : NULL);
}

/* Prints a download failure; returns the exit status. */
static int download_failed(const job *j, const hub_file *f, const char *partial, const hub_error *e) {
    switch (e->kind) {
        case HUB_INTERRUPT:
            fprintf(stderr, "\nkiln pull: interrupted; %s stays as %s, and `kiln pull %s%s%s` resumes it\n", f->path,
                    partial, j->repo, j->tag ? ":" : "", j->tag ? j->tag : "");
            return 130;
        case HUB_WRITE:
            fprintf(stderr, "kiln pull: cannot write %s: %s%s\n", partial, strerror(e->err),
                    e->err == ENOSPC || e->err == EFBIG || e->err == EDQUOT
                        ? " (free some space and run the command again: it resumes)"
                        : "");
            return CLI_EXIT_FAIL;
        default: fprintf(stderr, "kiln pull: %s\n", e->msg); return CLI_EXIT_FAIL;
    }
}

/* Fetches one file into the cache and links it into the snapshot. *fetched: bytes downloaded. */
static int fetch_one(job *j, const hub_file *f, uint64_t *fetched) {
    char *blob = NULL, *partial = NULL;
    int rc = 0;
    if (asprintf(&blob, "%s/blobs/%s", j->repo_dir, f->blob_id) < 0 || asprintf(&partial, "%s.incomplete", blob) < 0) {
        free(blob);
        fprintf(stderr, "kiln pull: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    const bool tty = isatty(STDERR_FILENO) == 1;
    struct stat st;
    if (stat(blob, &st) == 0 && S_ISREG(st.st_mode) && (!f->size || (uint64_t)st.st_size == f->size)) {
        fprintf(stderr, "  %s: in the cache\n", f->path);
    } else {
        uint64_t before = stat(partial, &st) == 0 ? (uint64_t)st.st_size : 0;
        bar b = {.label = f->path, .tty = tty, .t0 = now_s(), .start = before};
        hub_error e;
        const hub_fail hf = hub_download(j->repo, j->r.commit, f, partial, on_progress, &b, &e);
        if (b.shown) fputs("\r\033[K", stderr);
        if (hf != HUB_OK) {
            rc = download_failed(j, f, partial, &e);
            goto out;
        }
        const uint64_t got = stat(partial, &st) == 0 ? (uint64_t)st.st_size : 0;
        if (f->size && got != f->size) {
            fprintf(stderr, "kiln pull: %s: received %llu bytes, expected %llu; the download was deleted\n", f->path,
                    (unsigned long long)got, (unsigned long long)f->size);
            unlink(partial);
            rc = CLI_EXIT_FAIL;
            goto out;
        }
        if (f->sha256[0]) {
            char hex[65];
            if (kiln_sha256_file(partial, hex) != KILN_OK) {
                fprintf(stderr, "kiln pull: %s\n", kiln_last_error());
                rc = CLI_EXIT_FAIL;
                goto out;
            }
            if (strcmp(hex, f->sha256) != 0) {
                fprintf(stderr,
                        "kiln pull: %s: checksum mismatch (sha256 %s, expected %s); the download was deleted, run "
                        "the command again\n",
                        f->path, hex, f->sha256);
                unlink(partial);
                rc = CLI_EXIT_FAIL;
                goto out;
            }
        }
        if (rename(partial, blob) != 0) {
            fprintf(stderr, "kiln pull: cannot rename %s: %s\n", partial, strerror(errno));
            rc = CLI_EXIT_FAIL;
            goto out;
        }
        const double dt = now_s() - b.t0;
        char sz[32], rate[32];
        cli_fmt_bytes(got, sz, sizeof sz);
        cli_fmt_bytes(dt > 0 ? (uint64_t)((double)(got - before) / dt) : 0, rate, sizeof rate);
        fprintf(stderr, "  %s: %s in %.1f s (%s/s)%s%s\n", f->path, sz, dt, rate, f->sha256[0] ? ", sha256 ok" : "",
                before ? ", resumed" : "");
        *fetched += got - before;
    }
    if (!hub_link_snapshot(j->repo_dir, j->r.commit, f->path, f->blob_id)) {
        fprintf(stderr, "kiln pull: cannot link %s into the snapshot: %s\n", f->path, strerror(errno));
        rc = CLI_EXIT_FAIL;
    }
out:
    free(blob);
    free(partial);
    return rc;
}

/* Makes the directories of the repository in the cache; false after printing why. */
static bool make_dirs(const char *repo_dir) {
    char *hub = hub_cache_dir(), *blobs = NULL;
    bool ok = hub != NULL;
    if (ok) {
        /* the cache directory itself and its parents */
        for (char *s = strchr(hub + 1, '/'); s; s = strchr(s + 1, '/')) {
            *s = '\0';
            mkdir(hub, 0755);
            *s = '/';
        }
        mkdir(hub, 0755);
    }
    ok = ok && asprintf(&blobs, "%s/blobs", repo_dir) >= 0;
    if (ok && ((mkdir(repo_dir, 0755) != 0 && errno != EEXIST) || (mkdir(blobs, 0755) != 0 && errno != EEXIST))) {
        fprintf(stderr, "kiln pull: cannot create %s: %s\n", blobs, strerror(errno));
        ok = false;
    }
    free(hub);
    free(blobs);
    return ok;
}

/* Bytes still to download: the chosen files not in blobs/, less their partial downloads. */
static uint64_t bytes_missing(const job *j) {
    uint64_t need = 0;
    for (size_t i = 0; i < j->r.n; i++) {
        if (!j->pick[i]) continue;
        const hub_file *f = &j->r.files[i];
        char *blob = NULL, *partial = NULL;
        struct stat st;
        if (asprintf(&blob, "%s/blobs/%s", j->repo_dir, f->blob_id) < 0) continue;
        if (stat(blob, &st) != 0 && asprintf(&partial, "%s.incomplete", blob) >= 0) {
            const uint64_t have = stat(partial, &st) == 0 ? (uint64_t)st.st_size : 0;
            need += f->size > have ? f->size - have : 0;
        }
        free(blob);
        free(partial);
    }
    return need;
}

/* False after saying so when the file system of the cache has less free space than need. */
static bool space_ok(const job *j, uint64_t need) {
    char *blobs = NULL;
    struct statvfs vfs;
    if (asprintf(&blobs, "%s/blobs", j->repo_dir) < 0) return true;
    bool ok = true;
    if (statvfs(blobs, &vfs) == 0) {
        const uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
        if (avail < need) {
            char a[32], n[32];
            cli_fmt_bytes(avail, a, sizeof a);
            cli_fmt_bytes(need, n, sizeof n);
            fprintf(stderr, "kiln pull: not enough space in %s: %s free, %s to download\n", blobs, a, n);
            ok = false;
        }
    }
    free(blobs);
    return ok;
}

/* HF_HUB_OFFLINE: the model from the cache only. */
static int pull_offline(job *j) {
    char *commit = hub_read_ref(j->repo_dir, j->rev);
    if (!commit || !hub_list_snapshot(j->repo_dir, commit, &j->r)) {
        fprintf(stderr, "kiln pull: HF_HUB_OFFLINE is set and %s (revision %s) is not in the cache (%s)\n", j->repo,
                j->rev, j->repo_dir);
        free(commit);
        return CLI_EXIT_FAIL;
    }
    free(commit);
    if (!choose(j)) {
        fprintf(stderr, "kiln pull: HF_HUB_OFFLINE is set: only the cache's snapshot %s was searched\n", j->r.commit);
        return CLI_EXIT_FAIL;
    }
    size_t missing = 0;
    for (size_t i = 0; i < j->r.n; i++)
        if (j->pick[i] && !j->r.files[i].size) missing++;
    if (missing) {
        fprintf(stderr, "kiln pull: HF_HUB_OFFLINE is set and %zu file(s) of %s are missing from the cache\n", missing,
                j->repo);
        return CLI_EXIT_FAIL;
    }
    fprintf(stderr, "%s%s%s is in the cache (HF_HUB_OFFLINE: nothing was downloaded): %s/snapshots/%s\n", j->repo,
            j->tag ? ":" : "", j->tag ? j->tag : "", j->repo_dir, j->r.commit);
    return 0;
}

int cli_pull(int argc, char **argv) {
    const char *name = NULL, *rev = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_usage("pull", false);
            return 0;
        }
        if (strcmp(a, "--revision") == 0 && i + 1 < argc) {
            rev = argv[++i];
            continue;
        }
        if (a[0] == '-' || name) {
            fprintf(stderr, "kiln pull: %s '%s'\n", a[0] == '-' ? "unknown option" : "unexpected argument", a);
            cli_usage("pull", true);
            return CLI_EXIT_USAGE;
        }
        name = a;
    }
    if (!name) {
        fprintf(stderr, "kiln pull: which model? (kiln pull ORG/NAME or ORG/NAME:QUANT)\n");
        cli_usage("pull", true);
        return CLI_EXIT_USAGE;
    }
    char *repo = NULL, *tag = NULL;
    if (!hub_parse_name(name, &repo, &tag)) {
        fprintf(stderr, "kiln pull: '%s' is not a model name of the form ORG/NAME or ORG/NAME:QUANT\n", name);
        return CLI_EXIT_USAGE;
    }
    if (rev && (!*rev || strlen(rev) > 200 || strstr(rev, "..") || rev[0] == '/')) {
        fprintf(stderr, "kiln pull: invalid --revision '%s'\n", rev);
        free(repo);
        free(tag);
        return CLI_EXIT_USAGE;
    }
    job j = {.repo = repo, .tag = tag, .rev = rev ? rev : HUB_DEFAULT_REV, .offline = env_true("HF_HUB_OFFLINE")};
    int rc = 0;
    if (!(j.repo_dir = hub_repo_dir(repo))) {
        fprintf(stderr, "kiln pull: no Hugging Face cache directory (set HF_HUB_CACHE, HF_HOME or HOME)\n");
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    if (j.offline) {
        rc = pull_offline(&j);
        goto out;
    }
    if (!hub_http_init()) {
        fprintf(stderr, "kiln pull: cannot start libcurl\n");
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    hub_error e;
    if (hub_model_info(repo, j.rev, &j.r, &e) != HUB_OK) {
        fprintf(stderr, "kiln pull: %s\n", e.msg);
        rc = e.kind == HUB_INTERRUPT ? 130 : CLI_EXIT_FAIL;
        goto done;
    }
    if (!choose(&j)) {
        rc = CLI_EXIT_FAIL;
        goto done;
    }
    if (!make_dirs(j.repo_dir)) {
        rc = CLI_EXIT_FAIL;
        goto done;
    }
    uint64_t total = 0, fetched = 0;
    for (size_t i = 0; i < j.r.n; i++) total += j.pick[i] ? j.r.files[i].size : 0;
    char tot[32];
    cli_fmt_bytes(total, tot, sizeof tot);
    fprintf(stderr, "Pulling %s%s%s from %s (commit %.12s): %zu file(s), %s.\n", repo, tag ? ":" : "", tag ? tag : "",
            hub_endpoint(), j.r.commit, j.n_pick, tot);
    report_fit(&j);
    if (!space_ok(&j, bytes_missing(&j))) {
        rc = CLI_EXIT_FAIL;
        goto done;
    }
    /* small files first: the configs are there early, and the weights come last */
    for (int pass = 0; pass < 2 && !rc; pass++)
        for (size_t i = 0; i < j.r.n && !rc; i++)
            if (j.pick[i] && is_weights(j.r.files[i].path) == (pass == 1)) rc = fetch_one(&j, &j.r.files[i], &fetched);
    if (!rc && !hub_write_ref(j.repo_dir, j.rev, j.r.commit)) {
        fprintf(stderr, "kiln pull: cannot write %s/refs/%s: %s\n", j.repo_dir, j.rev, strerror(errno));
        rc = CLI_EXIT_FAIL;
    }
    if (!rc) {
        char f[32];
        cli_fmt_bytes(fetched, f, sizeof f);
        fprintf(stderr, "Pulled %s%s%s (%s downloaded) into %s/snapshots/%s\n", repo, tag ? ":" : "", tag ? tag : "",
                fetched ? f : "nothing new", j.repo_dir, j.r.commit);
        printf("%s/snapshots/%s\n", j.repo_dir, j.r.commit);
        bool gguf = false;
        for (size_t i = 0; i < j.r.n; i++) gguf |= j.pick[i] && hub_is_gguf_model(j.r.files[i].path);
        if (gguf)
            fprintf(stderr, "Run it: kiln run %s%s%s -p 'Once upon a time'\n", repo, tag ? ":" : "", tag ? tag : "");
    }
done:
    hub_http_cleanup();
out:
    hub_repo_free(&j.r);
    free(j.pick);
    free(j.repo_dir);
    free(repo);
    free(tag);
    return rc;
}

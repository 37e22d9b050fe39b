/*
 * rm.c - `kiln rm ORG/NAME[:QUANT] [-y]`: removes a pulled model from the Hugging Face cache.
 * ORG/NAME removes the whole repository (every snapshot, ref and blob); ORG/NAME:QUANT removes that
 * quant's GGUF files (every part of a split one) from the snapshots, then the blobs no snapshot
 * links to any more, and a snapshot (with the refs naming it) that is left empty. On a terminal it
 * asks first unless -y is given.
 */
#include "cli.h"
#include "hub.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SNAPSHOTS 1024

/* The snapshot names of repo_dir into v (malloc'd strings); returns how many. */
static size_t list_snapshots(const char *repo_dir, char **v, size_t cap) {
    char *dir = NULL;
    if (asprintf(&dir, "%s/snapshots", repo_dir) < 0) return 0;
    DIR *d = opendir(dir);
    free(dir);
    size_t n = 0;
    struct dirent *e;
    while (d && n < cap && (e = readdir(d)))
        if (e->d_name[0] != '.' && (v[n] = strdup(e->d_name))) n++;
    if (d) closedir(d);
    return n;
}

/* Removes the empty directories of path's parents up to (not including) stop. */
static void prune_dirs(const char *path, const char *stop) {
    char *p = strdup(path);
    const size_t sl = strlen(stop);
    while (p) {
        char *slash = strrchr(p, '/');
        if (!slash) break;
        *slash = '\0';
        if (strlen(p) <= sl || rmdir(p) != 0) break;
    }
    free(p);
}

/* Deletes the files under refs/ that name commit. */
static void drop_refs(const char *repo_dir, const char *commit) {
    char *dir = NULL;
    if (asprintf(&dir, "%s/refs", repo_dir) < 0) return;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *c = hub_read_ref(repo_dir, e->d_name), *p = NULL;
        if (c && strcmp(c, commit) == 0 && asprintf(&p, "%s/%s", dir, e->d_name) >= 0) unlink(p), free(p);
        free(c);
    }
    if (d) closedir(d);
    free(dir);
}

static bool confirm(const char *what) {
    fprintf(stderr, "Remove %s? [y/N] ", what);
    fflush(stderr);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) return false;
    return line[0] == 'y' || line[0] == 'Y';
}

/* Bytes of the blobs under repo_dir/blobs. */
static uint64_t blob_bytes(const char *repo_dir, size_t *n) {
    char *dir = NULL;
    *n = 0;
    if (asprintf(&dir, "%s/blobs", repo_dir) < 0) return 0;
    DIR *d = opendir(dir);
    uint64_t b = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *p = NULL;
        struct stat st;
        if (e->d_name[0] == '.' || asprintf(&p, "%s/%s", dir, e->d_name) < 0) continue;
        if (lstat(p, &st) == 0 && S_ISREG(st.st_mode)) b += (uint64_t)st.st_size, (*n)++;
        free(p);
    }
    if (d) closedir(d);
    free(dir);
    return b;
}

/* ORG/NAME:QUANT: the quant's links in every snapshot, then unused blobs. */
static int rm_quant(const char *repo, const char *tag, const char *repo_dir, bool yes) {
    char *snaps[MAX_SNAPSHOTS];
    const size_t ns = list_snapshots(repo_dir, snaps, MAX_SNAPSHOTS);
    size_t n_links = 0;
    uint64_t bytes = 0;
    char quants[1024] = "";
    /* two passes: count (and ask), then remove */
    int rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        for (size_t s = 0; s < ns; s++) {
            hub_repo r;
            if (!hub_list_snapshot(repo_dir, snaps[s], &r)) continue;
            bool *pick = calloc(r.n ? r.n : 1, sizeof *pick);
            if (pick && hub_pick_quant(r.files, r.n, tag, pick)) {
                for (size_t i = 0; i < r.n; i++) {
                    if (!pick[i]) continue;
                    if (pass == 0) {
                        n_links++;
                        bytes += r.files[i].size;
                        continue;
                    }
                    char *p = NULL, *root = NULL;
                    if (asprintf(&p, "%s/snapshots/%s/%s", repo_dir, snaps[s], r.files[i].path) >= 0 &&
                        asprintf(&root, "%s/snapshots/%s", repo_dir, snaps[s]) >= 0) {
                        if (unlink(p) != 0 && errno != ENOENT) {
                            fprintf(stderr, "kiln rm: cannot remove %s: %s\n", p, strerror(errno));
                            rc = CLI_EXIT_FAIL;
                        }
                        prune_dirs(p, root);
                    }
                    free(p);
                    free(root);
                }
            } else if (pass == 0 && !quants[0]) {
                hub_list_quants(r.files, r.n, quants, sizeof quants);
            }
            free(pick);
            hub_repo_free(&r);
            if (pass == 1) { /* an emptied snapshot goes, with its refs */
                char *root = NULL;
                if (asprintf(&root, "%s/snapshots/%s", repo_dir, snaps[s]) >= 0 && rmdir(root) == 0)
                    drop_refs(repo_dir, snaps[s]);
                free(root);
            }
        }
        if (pass == 0) {
            if (!n_links) {
                fprintf(stderr, "kiln rm: %s has no %s files in the cache%s%s\n", repo, tag,
                        quants[0] ? "; it has " : "", quants);
                rc = CLI_EXIT_FAIL;
            } else {
                char what[512], sz[32];
                cli_fmt_bytes(bytes, sz, sizeof sz);
                snprintf(what, sizeof what, "%s:%s (%zu file(s), %s)", repo, tag, n_links, sz);
                if (!yes && isatty(STDIN_FILENO) && isatty(STDERR_FILENO) && !confirm(what)) {
                    fprintf(stderr, "kiln rm: nothing removed\n");
                    rc = CLI_EXIT_FAIL;
                }
            }
        }
    }
    for (size_t s = 0; s < ns; s++) free(snaps[s]);
    if (rc) return rc;
    size_t n_blobs;
    uint64_t freed;
    hub_gc_blobs(repo_dir, false, &n_blobs, &freed);
    char *rest[1];
    const size_t left = list_snapshots(repo_dir, rest, 1);
    if (left) free(rest[0]);
    else if (!hub_rmtree(repo_dir)) fprintf(stderr, "kiln rm: cannot remove %s: %s\n", repo_dir, strerror(errno));
    char f[32];
    cli_fmt_bytes(freed, f, sizeof f);
    fprintf(stderr, "Removed %s:%s (%zu file(s); %zu blob(s), %s freed)\n", repo, tag, n_links, n_blobs, f);
    return 0;
}

int cli_rm(int argc, char **argv) {
    const char *name = NULL;
    bool yes = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_usage("rm", false);
            return 0;
        }
        if (strcmp(a, "-y") == 0 || strcmp(a, "--yes") == 0) {
            yes = true;
            continue;
        }
        if (a[0] == '-' || name) {
            fprintf(stderr, "kiln rm: %s '%s'\n", a[0] == '-' ? "unknown option" : "unexpected argument", a);
            cli_usage("rm", true);
            return CLI_EXIT_USAGE;
        }
        name = a;
    }
    char *repo = NULL, *tag = NULL;
    if (!name || !hub_parse_name(name, &repo, &tag)) {
        fprintf(stderr, "kiln rm: expected a pulled model's name, ORG/NAME or ORG/NAME:QUANT (kiln ls lists them)\n");
        return CLI_EXIT_USAGE;
    }
    char *dir = hub_repo_dir(repo);
    struct stat st;
    int rc = 0;
    if (!dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        char *hub = hub_cache_dir();
        fprintf(stderr, "kiln rm: %s is not in the Hugging Face cache (%s)\n", repo, hub ? hub : "no cache directory");
        free(hub);
        rc = CLI_EXIT_FAIL;
    } else if (tag) {
        rc = rm_quant(repo, tag, dir, yes);
    } else {
        size_t n;
        char what[512], sz[32];
        cli_fmt_bytes(blob_bytes(dir, &n), sz, sizeof sz);
        snprintf(what, sizeof what, "%s (%zu file(s), %s)", repo, n, sz);
        if (!yes && isatty(STDIN_FILENO) && isatty(STDERR_FILENO) && !confirm(what)) {
            fprintf(stderr, "kiln rm: nothing removed\n");
            rc = CLI_EXIT_FAIL;
        } else if (!hub_rmtree(dir)) {
            fprintf(stderr, "kiln rm: cannot remove %s: %s\n", dir, strerror(errno));
            rc = CLI_EXIT_FAIL;
        } else {
            fprintf(stderr, "Removed %s (%zu blob(s), %s freed)\n", repo, n, sz);
        }
    }
    free(dir);
    free(repo);
    free(tag);
    return rc;
}

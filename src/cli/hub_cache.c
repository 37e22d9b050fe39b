/*
 * hub_cache.c - the Hugging Face cache on disk (the layout is described in hub.h): where it is,
 * refs, snapshot links, listing a snapshot, and removing blobs no snapshot uses.
 */
#include "hub.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DEPTH 16 /* directory levels followed inside a snapshot */

char *hub_cache_dir(void) {
    const char *v;
    char *d = NULL;
    if ((v = getenv("HF_HUB_CACHE")) && *v) return strdup(v);
    if ((v = getenv("HF_HOME")) && *v) return asprintf(&d, "%s/hub", v) < 0 ? NULL : d;
    if ((v = getenv("XDG_CACHE_HOME")) && *v) return asprintf(&d, "%s/huggingface/hub", v) < 0 ? NULL : d;
    if ((v = getenv("HOME")) && *v) return asprintf(&d, "%s/.cache/huggingface/hub", v) < 0 ? NULL : d;
    return NULL;
}

char *hub_repo_dir(const char *repo) {
    char *hub = hub_cache_dir(), *d = NULL;
    if (!hub) return NULL;
    const char *slash = strchr(repo, '/');
    int r = slash ? asprintf(&d, "%s/models--%.*s--%s", hub, (int)(slash - repo), repo, slash + 1)
                  : asprintf(&d, "%s/models--%s", hub, repo);
    free(hub);
    return r < 0 ? NULL : d;
}

static bool is_commit(const char *s) {
    if (strlen(s) != 40) return false;
    for (int i = 0; i < 40; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

char *hub_read_ref(const char *repo_dir, const char *rev) {
    if (is_commit(rev)) return strdup(rev);
    char *path = NULL, buf[64];
    if (strstr(rev, "..") || asprintf(&path, "%s/refs/%s", repo_dir, rev) < 0) return NULL;
    FILE *f = fopen(path, "r");
    free(path);
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = '\0';
    return is_commit(buf) ? strdup(buf) : NULL;
}

/* Creates every missing directory of path up to (not including) its last component. */
static bool mkdirs_for(const char *path) {
    char *p = strdup(path);
    if (!p) {
        errno = ENOMEM;
        return false;
    }
    for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            const int err = errno;
            free(p);
            errno = err;
            return false;
        }
        *s = '/';
    }
    free(p);
    return true;
}

bool hub_write_ref(const char *repo_dir, const char *rev, const char *commit) {
    if (is_commit(rev)) return true; /* a commit names itself: no ref */
    char *path = NULL, *tmp = NULL;
    if (strstr(rev, "..") || asprintf(&path, "%s/refs/%s", repo_dir, rev) < 0) {
        errno = EINVAL;
        return false;
    }
    bool ok = false;
    if (mkdirs_for(path) && asprintf(&tmp, "%s.tmp%ld", path, (long)getpid()) >= 0) {
        FILE *f = fopen(tmp, "w");
        if (f) {
            ok = fputs(commit, f) >= 0;
            ok = (fclose(f) == 0) && ok;
            ok = ok && rename(tmp, path) == 0;
            if (!ok) {
                const int err = errno;
                unlink(tmp);
                errno = err;
            }
        }
    }
    free(tmp);
    free(path);
    return ok;
}

bool hub_link_snapshot(const char *repo_dir, const char *commit, const char *path, const char *blob_id) {
    char *link = NULL, *target = NULL;
    size_t depth = 0;
    for (const char *p = path; *p; p++) depth += *p == '/';
    /* snapshots/COMMIT/a/b/file -> ../../../../blobs/ID: two levels for snapshots/COMMIT, one per directory */
    size_t cap = (depth + 2) * 3 + 8 + strlen(blob_id);
    if (!(target = malloc(cap))) {
        errno = ENOMEM;
        return false;
    }
    target[0] = '\0';
    for (size_t i = 0; i < depth + 2; i++) strcat(target, "../");
    strcat(target, "blobs/");
    strcat(target, blob_id);
    bool ok = asprintf(&link, "%s/snapshots/%s/%s", repo_dir, commit, path) >= 0;
    if (!ok) link = NULL;
    ok = ok && mkdirs_for(link);
    if (ok) {
        char cur[PATH_MAX];
        ssize_t n = readlink(link, cur, sizeof cur - 1);
        if (n >= 0) cur[n] = '\0';
        if (n < 0 || strcmp(cur, target) != 0) {
            if (unlink(link) != 0 && errno != ENOENT) ok = false;
            else ok = symlink(target, link) == 0;
        }
    }
    const int err = errno;
    free(link);
    free(target);
    errno = err;
    return ok;
}

/* Adds path (relative) with its target's size to out. */
static bool add_listed(hub_repo *out, const char *rel, uint64_t size) {
    if (out->n >= HUB_MAX_FILES) return true;
    if (out->n % 64 == 0) {
        hub_file *v = realloc(out->files, (out->n + 64) * sizeof *v);
        if (!v) return false;
        out->files = v;
    }
    hub_file *f = &out->files[out->n];
    memset(f, 0, sizeof *f);
    if (!(f->path = strdup(rel))) return false;
    f->size = size;
    out->n++;
    return true;
}

static int cmp_files(const void *a, const void *b) {
    return strcmp(((const hub_file *)a)->path, ((const hub_file *)b)->path);
}

static bool list_dir(hub_repo *out, const char *dir, const char *rel, int depth) {
    DIR *d = opendir(dir);
    if (!d) return false;
    struct dirent *e;
    bool ok = true;
    while (ok && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char *p = NULL, *r = NULL;
        if (asprintf(&p, "%s/%s", dir, e->d_name) < 0) p = NULL;
        if (asprintf(&r, "%s%s%s", rel, *rel ? "/" : "", e->d_name) < 0) r = NULL;
        struct stat lst, st;
        if (!p || !r) ok = false;
        else if (lstat(p, &lst) == 0 && S_ISDIR(lst.st_mode)) {
            if (depth > 0) list_dir(out, p, r, depth - 1);
        } else if (lstat(p, &lst) == 0) {
            ok = add_listed(out, r, stat(p, &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0);
        }
        free(p);
        free(r);
    }
    closedir(d);
    return ok;
}

bool hub_list_snapshot(const char *repo_dir, const char *commit, hub_repo *out) {
    memset(out, 0, sizeof *out);
    char *dir = NULL;
    if (asprintf(&dir, "%s/snapshots/%s", repo_dir, commit) < 0) return false;
    struct stat st;
    bool ok = stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && list_dir(out, dir, "", MAX_DEPTH);
    free(dir);
    if (!ok) {
        hub_repo_free(out);
        return false;
    }
    if (out->n) qsort(out->files, out->n, sizeof *out->files, cmp_files);
    out->commit = strdup(commit);
    return out->commit != NULL;
}

/* Records the blob name of every link below dir into names (a growing array). */
static void collect_links(const char *dir, int depth, char ***names, size_t *n, size_t *cap) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char *p = NULL;
        if (asprintf(&p, "%s/%s", dir, e->d_name) < 0) continue;
        struct stat st;
        if (lstat(p, &st) == 0) {
            if (S_ISDIR(st.st_mode) && depth > 0) {
                collect_links(p, depth - 1, names, n, cap);
            } else if (S_ISLNK(st.st_mode)) {
                char t[PATH_MAX];
                ssize_t k = readlink(p, t, sizeof t - 1);
                if (k > 0) {
                    t[k] = '\0';
                    const char *b = strrchr(t, '/');
                    b = b ? b + 1 : t;
                    if (*n == *cap) {
                        size_t nc = *cap ? *cap * 2 : 64;
                        char **v = realloc(*names, nc * sizeof *v);
                        if (v) *names = v, *cap = nc;
                    }
                    if (*n < *cap && ((*names)[*n] = strdup(b))) (*n)++;
                }
            }
        }
        free(p);
    }
    closedir(d);
}

void hub_gc_blobs(const char *repo_dir, bool partials, size_t *n_blobs, uint64_t *bytes) {
    *n_blobs = 0;
    *bytes = 0;
    char *snaps = NULL, *blobs = NULL;
    if (asprintf(&snaps, "%s/snapshots", repo_dir) < 0) return;
    if (asprintf(&blobs, "%s/blobs", repo_dir) < 0) {
        free(snaps);
        return;
    }
    char **used = NULL;
    size_t n = 0, cap = 0;
    collect_links(snaps, MAX_DEPTH, &used, &n, &cap);
    DIR *d = opendir(blobs);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        const size_t len = strlen(e->d_name);
        const bool partial = len > 11 && strcmp(e->d_name + len - 11, ".incomplete") == 0;
        if (partial && !partials) continue;
        bool keep = false;
        for (size_t i = 0; i < n && !keep && !partial; i++) keep = strcmp(used[i], e->d_name) == 0;
        if (keep) continue;
        char *p = NULL;
        if (asprintf(&p, "%s/%s", blobs, e->d_name) < 0) continue;
        struct stat st;
        if (lstat(p, &st) == 0 && !S_ISDIR(st.st_mode) && unlink(p) == 0) {
            (*n_blobs)++;
            *bytes += (uint64_t)st.st_size;
        }
        free(p);
    }
    if (d) closedir(d);
    for (size_t i = 0; i < n; i++) free(used[i]);
    free(used);
    free(snaps);
    free(blobs);
}

bool hub_rmtree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT;
    if (!S_ISDIR(st.st_mode)) return unlink(path) == 0;
    DIR *d = opendir(path);
    if (!d) return false;
    struct dirent *e;
    bool ok = true;
    while (ok && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char *p = NULL;
        if (asprintf(&p, "%s/%s", path, e->d_name) < 0) {
            errno = ENOMEM;
            ok = false;
            break;
        }
        ok = hub_rmtree(p);
        free(p);
    }
    closedir(d);
    return ok && rmdir(path) == 0;
}

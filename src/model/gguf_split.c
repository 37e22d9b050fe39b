/*
 * gguf_split.c - a split GGUF model (PREFIX-00001-of-0000N.gguf ... PREFIX-0000N-of-0000N.gguf, as
 * GGUF tooling writes them) opened as one kn_gguf (see kn_gguf_join_split in gguf.h).
 *
 * Every part is a complete GGUF file whose metadata holds split.no (0-based), split.count and
 * split.tensors.count; the first part holds the model's metadata, each part some of the tensors. The
 * set is opened from any of its parts: the first part's key/values, every part's tensors (their data
 * views point into that part's mapping). Checked: every part exists and says it is part i of the same
 * count, the names follow the convention, no tensor is in two parts, the parts together hold exactly
 * split.tensors.count tensors, and no other part of a different split of the same prefix lies beside
 * them (a leftover of an older download). Errors name the file.
 */
#include "model/gguf.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARTS 9999

typedef struct split_set {
    kn_gguf *parts; /* [n]; parts[0] is the caller's kn_gguf moved here */
    int n;
} split_set;

static void set_free(void *p) {
    split_set *s = p;
    if (!s) return;
    for (int i = 0; i < s->n; i++) kn_gguf_close(&s->parts[i]);
    free(s->parts);
    free(s);
}

/* Splits path "DIR/PREFIX-NNNNN-of-MMMMM.gguf" into its prefix (with DIR), part number and count. */
static bool parse_name(const char *path, char *prefix, size_t cap, int *no, int *count) {
    const size_t n = strlen(path);
    if (n < 20 || strcmp(path + n - 5, ".gguf") != 0) return false;
    const char *t = path + n - 20; /* "-NNNNN-of-MMMMM.gguf" */
    int a = 0, b = 0, used = 0;
    if (t[0] != '-' || sscanf(t, "-%5d-of-%5d.gguf%n", &a, &b, &used) != 2 || used != 20) return false;
    for (int i = 1; i < 6; i++)
        if (t[i] < '0' || t[i] > '9' || t[i + 9] < '0' || t[i + 9] > '9') return false;
    if ((size_t)(t - path) + 1 > cap) return false;
    memcpy(prefix, path, (size_t)(t - path));
    prefix[t - path] = 0;
    *no = a;
    *count = b;
    return true;
}

static bool meta_u64(const kn_gguf *g, const char *key, uint64_t *v) { return kn_gguf_get_u64(g, key, v); }

/* Files in prefix's directory named prefix-NNNNN-of-MMMMM.gguf that are not parts 1..count of count. */
static kiln_status check_strays(const char *prefix, int count) {
    char dir[4096];
    const char *slash = strrchr(prefix, '/');
    const char *base = slash ? slash + 1 : prefix;
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - prefix) : 1, slash ? prefix : ".");
    if (slash == prefix) snprintf(dir, sizeof dir, "/");
    DIR *d = opendir(dir);
    if (!d) return KILN_OK;
    kiln_status st = KILN_OK;
    struct dirent *e;
    const size_t bl = strlen(base);
    while (!st && (e = readdir(d))) {
        char p[4400], pre[4400];
        int no, c;
        if (strncmp(e->d_name, base, bl) != 0) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (!parse_name(p, pre, sizeof pre, &no, &c) || strcmp(pre + strlen(dir) + 1, base) != 0) continue;
        if (c != count || no < 1 || no > count)
            st = kn_error(KILN_ERR_FORMAT, "%s: not part of the split model of %d parts beside it (remove it)", p,
                          count);
    }
    closedir(d);
    return st;
}

kiln_status kn_gguf_join_split(const char *path, kn_gguf *g) {
    uint64_t count = 0, no = 0, total = 0;
    meta_u64(g, "split.count", &count);
    char prefix[4096];
    int pno = 0, pcount = 0;
    if (!parse_name(path, prefix, sizeof prefix, &pno, &pcount)) {
        kn_gguf_close(g);
        return kn_error(KILN_ERR_FORMAT,
                        "%s: split.count is %llu but the name does not follow the split convention "
                        "(PREFIX-00001-of-%05llu.gguf)",
                        path, (unsigned long long)count, (unsigned long long)count);
    }
    kiln_status st = KILN_OK;
    if (count > MAX_PARTS || (uint64_t)pcount != count || !meta_u64(g, "split.no", &no) || no + 1 != (uint64_t)pno)
        st = kn_error(KILN_ERR_FORMAT, "%s: split.no / split.count (%llu of %llu) disagree with the file name", path,
                      (unsigned long long)no, (unsigned long long)count);
    if (!st) st = check_strays(prefix, (int)count);
    split_set *s = NULL;
    if (!st && !(s = calloc(1, sizeof *s))) st = KILN_ERR_NOMEM;
    if (!st && !(s->parts = calloc(count, sizeof *s->parts))) st = KILN_ERR_NOMEM;
    if (st) {
        free(s);
        kn_gguf_close(g);
        return st;
    }
    /* part pno - 1 is the one already open; the others in order */
    s->n = (int)count;
    s->parts[pno - 1] = *g;
    memset(g, 0, sizeof *g);
    uint64_t n_tensors = 0;
    for (int i = 0; i < s->n && !st; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s-%05d-of-%05d.gguf", prefix, i + 1, s->n);
        if (i != pno - 1) {
            st = kn_gguf_open_file(p, &s->parts[i]);
            if (st == KILN_ERR_IO)
                st = kn_error(KILN_ERR_IO, "%s: missing or unreadable (part %d of the split model of %d parts)", p,
                              i + 1, s->n);
            else if (st) kn_error_prefix("%s", p);
            if (st) break;
        }
        uint64_t c2 = 0, n2 = 0;
        if (!meta_u64(&s->parts[i], "split.count", &c2) || !meta_u64(&s->parts[i], "split.no", &n2) || c2 != count ||
            n2 != (uint64_t)i)
            st = kn_error(KILN_ERR_FORMAT, "%s: its split.no / split.count (%llu of %llu) is not part %d of %d", p,
                          (unsigned long long)n2, (unsigned long long)c2, i, s->n);
        n_tensors += s->parts[i].n_tensors;
    }
    if (!st && (!meta_u64(&s->parts[0], "split.tensors.count", &total) || total != n_tensors))
        st = kn_error(KILN_ERR_FORMAT,
                      "%s-00001-of-%05d.gguf: split.tensors.count is %llu but the parts hold %llu tensors", prefix,
                      s->n, (unsigned long long)total, (unsigned long long)n_tensors);
    /* the joined view: the first part's metadata (copied table, views into its mapping), all tensors */
    if (!st) {
        g->kv = calloc(s->parts[0].n_kv ? s->parts[0].n_kv : 1, sizeof *g->kv);
        g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
        if (!g->kv || !g->tensors) st = KILN_ERR_NOMEM;
    }
    if (!st) {
        g->version = s->parts[0].version;
        g->alignment = s->parts[0].alignment;
        g->data_offset = s->parts[0].data_offset;
        g->n_kv = s->parts[0].n_kv;
        memcpy(g->kv, s->parts[0].kv, g->n_kv * sizeof *g->kv);
        for (int i = 0; i < s->n; i++)
            for (uint64_t t = 0; t < s->parts[i].n_tensors; t++) {
                const kn_gguf_tensor *x = &s->parts[i].tensors[t];
                for (uint64_t k = 0; k < g->n_tensors && !st; k++)
                    if (g->tensors[k].name.len == x->name.len &&
                        !memcmp(g->tensors[k].name.ptr, x->name.ptr, x->name.len))
                        st = kn_error(KILN_ERR_FORMAT, "%s-%05d-of-%05d.gguf: tensor '%.*s' is in two parts", prefix,
                                      i + 1, s->n, (int)KN_MIN(x->name.len, 200), x->name.ptr);
                g->tensors[g->n_tensors++] = *x;
            }
    }
    g->owner = s;
    g->owner_free = set_free;
    if (st) kn_gguf_close(g);
    return st;
}

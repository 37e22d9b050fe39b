/*
 * models.c - finding the GGUF models on this machine, for `kiln ls`, for `kiln serve` without -m
 * and for -m NAME.
 *
 * Discovery order (the first place a file is found under wins; files are unique by their resolved
 * path, so a model reachable from two places is listed once):
 *   1. ~/.cache/kiln/models, searched recursively (4 levels of directories);
 *   2. every entry of KILN_MODELS (colon-separated directories, searched like 1, or files);
 *   3. the Hugging Face hub cache ($HF_HUB_CACHE, else $HF_HOME/hub, else
 *      $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub):
 *      models--ORG--NAME/snapshots/REV/ ... /FILE.gguf, symlinks into ../blobs that are followed,
 *      and a snapshot holding config.json and *.safetensors (a model directory as kiln pull
 *      ORG/NAME fetches it), listed as the directory itself.
 * Only each file's header is read (kiln_model_info_read). An unreadable or invalid .gguf is left
 * out with a one-line reason. A model split into several files (NAME-00001-of-00003.gguf ...) is
 * one entry, NAME, found by its first part: the header read opens and checks the whole set (a
 * missing or stray part leaves it out with the reason), its size is that of all parts, and its path
 * is the first part, from which kiln loads it.
 *
 * Friendly names: the path under the searched directory without ".gguf" (and without a split
 * model's "-00001-of-0000N"; a file named directly
 * in KILN_MODELS: its base name), or ORG/NAME:FILE for the Hugging Face cache (ORG/NAME for a
 * model directory). -m also takes ORG/NAME[:QUANT] as kiln pull does: the snapshot refs/main
 * names (else the newest), its GGUF file of that quant, or without one its model directory (else
 * its Q4_K_M GGUF, else its first GGUF).
 */
#include "cli.h"
#include "hub.h"
#include "hub_fit.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define MAX_DEPTH  4      /* directory levels searched below a models directory */
#define MAX_MODELS 100000 /* entries kept; beyond, the listing is cut */

typedef struct walker {
    cli_model_list *list;
    bool warn;
    bool nomem;
} walker;

static bool has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

static bool all_digits(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return n > 0;
}

/* Recognizes the split-file names of GGUF tools, "...-00001-of-00003.gguf": returns the part
 * number (1-based) and sets *count, or 0 for an ordinary name. */
static int split_part(const char *name, int *count) {
    static const char tail[] = "-00000-of-00000.gguf";
    size_t n = strlen(name), k = sizeof tail - 1;
    if (n <= k) return 0;
    const char *p = name + n - k;
    if (p[0] != '-' || !all_digits(p + 1, 5) || strncmp(p + 6, "-of-", 4) != 0 || !all_digits(p + 10, 5) ||
        strcasecmp(p + 15, ".gguf") != 0)
        return 0;
    *count = atoi(p + 10);
    return atoi(p + 1);
}

/* Cuts "-00001-of-0000N" off the end of a split model's friendly name (NULL: nothing). */
static void name_drop_part(char *name) {
    const size_t k = sizeof "-00001-of-00003" - 1, n = name ? strlen(name) : 0;
    if (n > k) name[n - k] = '\0';
}

/* Bytes of every part of the split model whose first part is path (NAME-00001-of-0000N.gguf). */
static uint64_t split_bytes(const char *path, int parts) {
    const size_t n = strlen(path), k = sizeof "00001-of-00003.gguf" - 1;
    uint64_t total = 0;
    char *p = strdup(path);
    for (int i = 1; p && n > k && i <= parts; i++) {
        char tail[48];
        if ((size_t)snprintf(tail, sizeof tail, "%05d-of-%05d.gguf", i, parts) != k) break; /* over 5 digits */
        memcpy(p + n - k, tail, k);
        struct stat st;
        if (stat(p, &st) == 0) total += (uint64_t)st.st_size;
    }
    free(p);
    return total;
}

/* Copies name without its ".gguf" suffix (malloc'd). */
static char *strip_gguf(const char *name) {
    size_t n = strlen(name);
    if (has_suffix(name, ".gguf")) n -= 5;
    return strndup(name, n);
}

/* Adds the file at path (already known to end in .gguf) under the friendly name (taken over: freed
 * here when not kept). Reasons for leaving it out are printed when w->warn. */
static void add_file(walker *w, const char *path, char *name, const char *source) {
    cli_model_list *l = w->list;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    int parts = 0, part = split_part(base, &parts);
    if (part > 1) { /* listed once, by its first part; without one, the last part says so */
        char *first = strdup(path);
        const size_t k = sizeof "00001-of-00003.gguf" - 1, n = first ? strlen(first) : 0;
        if (first && part == parts && n > k) {
            memcpy(first + n - k, "00001", 5);
            struct stat st;
            if (stat(first, &st) != 0) {
                if (w->warn)
                    fprintf(stderr, "kiln: skipping %s: the first part of its split model, %s, is missing\n", path,
                            first);
                l->n_skipped++;
            }
        }
        free(first);
        free(name);
        return;
    }
    char *real = realpath(path, NULL);
    if (!real) {
        if (w->warn) fprintf(stderr, "kiln: skipping %s: %s\n", path, strerror(errno));
        l->n_skipped++;
        free(name);
        return;
    }
    for (size_t i = 0; i < l->n; i++) {
        if (strcmp(l->v[i].real, real) == 0) { /* the same file seen from another place */
            free(real);
            free(name);
            return;
        }
    }
    kiln_model_info info;
    /* a split model is read through the first part's own name (beside the others; in the Hugging
     * Face cache the resolved file is a blob whose name says nothing), which opens the whole set */
    kiln_status st = kiln_model_info_read(part ? path : real, &info);
    if (st) {
        const char *msg = kiln_last_error(); /* "REAL: why": the path is printed once */
        const char *named = part ? path : real;
        const size_t rl = strlen(named);
        if (strncmp(msg, named, rl) == 0 && strncmp(msg + rl, ": ", 2) == 0) msg += rl + 2;
        if (w->warn) fprintf(stderr, "kiln: skipping %s: %s\n", path, msg);
        l->n_skipped++;
        free(real);
        free(name);
        return;
    }
    if (info.split_count > 1 && !part) { /* split metadata in a file not named as a part: not loadable */
        if (w->warn)
            fprintf(stderr,
                    "kiln: skipping %s: part of a model split into %d files, but not named "
                    "NAME-0000i-of-0000N.gguf\n",
                    path, info.split_count);
        l->n_skipped++;
        free(real);
        free(name);
        return;
    }
    if (part) { /* the model's name without the part suffix; its size is that of every part */
        name_drop_part(name);
        info.file_bytes = split_bytes(path, parts);
        l->n_split++;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        cli_model_entry *v = l->n < MAX_MODELS ? realloc(l->v, cap * sizeof *v) : NULL;
        if (!v) {
            w->nomem = l->n < MAX_MODELS;
            free(real);
            free(name);
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    char *p = strdup(path);
    if (!p || !name) {
        w->nomem = true;
        free(p);
        free(real);
        free(name);
        return;
    }
    l->v[l->n++] = (cli_model_entry){.name = name, .path = p, .real = real, .source = source, .info = info};
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Lists the names in dir (without "." entries and hidden files), sorted, into a malloc'd array
 * of malloc'd strings. NULL when the directory cannot be read (*n = 0). */
static char **read_dir_sorted(const char *dir, size_t *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **names = NULL;
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 32;
            char **nn = nc < MAX_MODELS ? realloc(names, nc * sizeof *nn) : NULL;
            if (!nn) break;
            names = nn;
            cap = nc;
        }
        if (!(names[*n] = strdup(e->d_name))) break;
        (*n)++;
    }
    closedir(d);
    if (names) qsort(names, *n, sizeof *names, cmp_names);
    return names;
}

static void free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Searches dir for *.gguf down to depth more levels. rel is the path below the root searched
 * ("" at the root); names are prefix + rel + file name without .gguf. */
static void walk(walker *w, const char *dir, const char *rel, int depth, const char *prefix, const char *source) {
    size_t n;
    char **names = read_dir_sorted(dir, &n);
    for (size_t i = 0; i < n && !w->nomem; i++) {
        char *path = NULL, *sub = NULL;
        if (asprintf(&path, "%s/%s", dir, names[i]) < 0) path = NULL;
        if (asprintf(&sub, "%s%s%s", rel, *rel ? "/" : "", names[i]) < 0) sub = NULL;
        struct stat st;
        if (!path || !sub) {
            w->nomem = true;
        } else if (stat(path, &st) != 0) {
            if (has_suffix(names[i], ".gguf")) {
                if (w->warn) fprintf(stderr, "kiln: skipping %s: %s\n", path, strerror(errno));
                w->list->n_skipped++;
            }
        } else if (S_ISDIR(st.st_mode)) {
            if (depth > 0) walk(w, path, sub, depth - 1, prefix, source);
        } else if (S_ISREG(st.st_mode) && has_suffix(names[i], ".gguf")) {
            char *stripped = strip_gguf(sub), *name = NULL;
            if (stripped && asprintf(&name, "%s%s", prefix, stripped) < 0) name = NULL;
            free(stripped);
            add_file(w, path, name, source);
        }
        free(path);
        free(sub);
    }
    free_names(names, n);
}

/* The Hugging Face hub cache directory (malloc'd), or NULL when no HOME-like variable is set. */
static char *hf_hub_dir(void) { return hub_cache_dir(); }

/* True when dir holds config.json and at least one *.safetensors file (a model directory); the
 * safetensors bytes go in *bytes. */
static bool is_model_dir(const char *dir, uint64_t *bytes) {
    size_t n;
    char **names = read_dir_sorted(dir, &n);
    bool config = false, weights = false;
    *bytes = 0;
    for (size_t i = 0; i < n; i++) {
        char *p = NULL;
        struct stat st;
        if (strcmp(names[i], "config.json") == 0) config = true;
        if (has_suffix(names[i], ".safetensors") && asprintf(&p, "%s/%s", dir, names[i]) >= 0 && stat(p, &st) == 0) {
            weights = true;
            *bytes += (uint64_t)st.st_size;
        }
        free(p);
    }
    free_names(names, n);
    return config && weights;
}

/* What a model directory's config.json says, for a listing when the library cannot read the
 * directory itself: the dimensions, the weights' type (torch_dtype, or MLX-Qn for MLX's n-bit
 * quantization) and size. runnable stays false. */
static void dir_info_from_config(const char *dir, uint64_t bytes, kiln_model_info *info) {
    memset(info, 0, sizeof *info);
    char *p = NULL;
    size_t len = 0;
    char *text = asprintf(&p, "%s/config.json", dir) >= 0 ? cli_read_file(p, &len) : NULL;
    free(p);
    if (text) {
        hub_fit_from_config(text, len, info);
        json_t *root = json_loadb(text, len, 0, NULL);
        const char *dt = json_string_value(json_object_get(root, "torch_dtype"));
        json_t *q = json_object_get(root, "quantization");
        if (json_is_integer(json_object_get(q, "bits")))
            snprintf(info->weight_type, sizeof info->weight_type, "MLX-Q%d",
                     (int)json_integer_value(json_object_get(q, "bits")));
        else if (dt)
            snprintf(info->weight_type, sizeof info->weight_type, "%s",
                     strcmp(dt, "bfloat16") == 0  ? "BF16"
                     : strcmp(dt, "float16") == 0 ? "F16"
                     : strcmp(dt, "float32") == 0 ? "F32"
                                                  : dt);
        json_decref(root);
        free(text);
    }
    info->tensor_bytes = info->file_bytes = bytes;
    info->n_tensors = 1; /* not counted; not 0, which a listing shows as "no weights" */
    info->split_count = 1;
}

/* Adds the model directory dir of the Hugging Face cache under the name repo (ORG/NAME). */
static void add_dir(walker *w, const char *dir, const char *repo, uint64_t bytes) {
    cli_model_list *l = w->list;
    char *real = realpath(dir, NULL);
    if (!real) return;
    for (size_t i = 0; i < l->n; i++) {
        if (strcmp(l->v[i].name, repo) == 0 || strcmp(l->v[i].real, real) == 0) { /* an older snapshot */
            free(real);
            return;
        }
    }
    kiln_model_info info;
    if (kiln_model_info_read(real, &info) != KILN_OK) dir_info_from_config(real, bytes, &info);
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        cli_model_entry *v = l->n < MAX_MODELS ? realloc(l->v, cap * sizeof *v) : NULL;
        if (!v) {
            w->nomem = l->n < MAX_MODELS;
            free(real);
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    char *p = strdup(dir), *name = strdup(repo);
    if (!p || !name) {
        w->nomem = true;
        free(p);
        free(name);
        free(real);
        return;
    }
    l->v[l->n++] = (cli_model_entry){.name = name, .path = p, .real = real, .source = "huggingface", .info = info};
}

char *cli_models_dir(void) {
    const char *home = getenv("HOME");
    char *d = NULL;
    if (!home || !*home) return NULL;
    return asprintf(&d, "%s/.cache/kiln/models", home) < 0 ? NULL : d;
}

/* Walks the hub cache: models--ORG--NAME/snapshots/REV/..., named ORG/NAME:FILE. */
static void walk_hf(walker *w, const char *hub) {
    size_t n;
    char **repos = read_dir_sorted(hub, &n);
    for (size_t i = 0; i < n && !w->nomem; i++) {
        if (strncmp(repos[i], "models--", 8) != 0 || !repos[i][8]) continue;
        /* ORG--NAME -> ORG/NAME (a repository without an organisation is just NAME) */
        char *repo = strdup(repos[i] + 8), *snaps = NULL;
        if (!repo) {
            w->nomem = true;
            break;
        }
        char *sep = strstr(repo, "--");
        if (sep) {
            *sep = '/';
            memmove(sep + 1, sep + 2, strlen(sep + 2) + 1);
        }
        if (asprintf(&snaps, "%s/%s/snapshots", hub, repos[i]) < 0) {
            free(repo);
            w->nomem = true;
            break;
        }
        size_t nr;
        char **revs = read_dir_sorted(snaps, &nr);
        /* the snapshot refs/main names first: its model directory is the one listed as ORG/NAME */
        char *repo_dir = NULL, *main_rev = NULL;
        if (asprintf(&repo_dir, "%s/%s", hub, repos[i]) >= 0) main_rev = hub_read_ref(repo_dir, HUB_DEFAULT_REV);
        for (size_t r = 1; main_rev && r < nr; r++) {
            if (strcmp(revs[r], main_rev) == 0) {
                char *t = revs[0];
                revs[0] = revs[r];
                revs[r] = t;
            }
        }
        free(main_rev);
        free(repo_dir);
        for (size_t r = 0; r < nr && !w->nomem; r++) {
            char *rev = NULL, *prefix = NULL;
            if (asprintf(&rev, "%s/%s", snaps, revs[r]) < 0) rev = NULL;
            if (asprintf(&prefix, "%s:", repo) < 0) prefix = NULL;
            uint64_t bytes = 0;
            if (rev && is_model_dir(rev, &bytes)) add_dir(w, rev, repo, bytes);
            if (rev && prefix) walk(w, rev, "", MAX_DEPTH - 1, prefix, "huggingface");
            else w->nomem = true;
            free(rev);
            free(prefix);
        }
        free_names(revs, nr);
        free(snaps);
        free(repo);
    }
    free_names(repos, n);
}

bool cli_models_find(cli_model_list *out, bool warn) {
    memset(out, 0, sizeof *out);
    walker w = {.list = out, .warn = warn};
    char *kdir = cli_models_dir();
    if (kdir) walk(&w, kdir, "", MAX_DEPTH, "", "kiln");
    free(kdir);
    const char *env = getenv("KILN_MODELS");
    char *list = env ? strdup(env) : NULL, *save = NULL;
    if (env && !list) w.nomem = true;
    for (char *e = list ? strtok_r(list, ":", &save) : NULL; e && !w.nomem; e = strtok_r(NULL, ":", &save)) {
        struct stat st;
        if (stat(e, &st) != 0) {
            if (warn) fprintf(stderr, "kiln: KILN_MODELS entry %s: %s\n", e, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            walk(&w, e, "", MAX_DEPTH, "", "KILN_MODELS");
        } else {
            const char *b = strrchr(e, '/');
            add_file(&w, e, strip_gguf(b ? b + 1 : e), "KILN_MODELS");
        }
    }
    free(list);
    char *hub = hf_hub_dir();
    if (hub && !w.nomem) walk_hf(&w, hub);
    free(hub);
    if (w.nomem) fprintf(stderr, "kiln: out of memory while looking for models; the list is incomplete\n");
    return !w.nomem;
}

void cli_models_free(cli_model_list *l) {
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].name);
        free(l->v[i].path);
        free(l->v[i].real);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

void cli_models_print_places(FILE *f) {
    char *kdir = cli_models_dir(), *hub = hf_hub_dir();
    const char *env = getenv("KILN_MODELS");
    fprintf(f, "  %s\n", kdir ? kdir : "~/.cache/kiln/models (HOME is not set)");
    fprintf(f, "  KILN_MODELS: %s\n", env && *env ? env : "(not set)");
    fprintf(f, "  %s (the Hugging Face cache)\n", hub ? hub : "~/.cache/huggingface/hub (HOME is not set)");
    free(kdir);
    free(hub);
}

void cli_models_print_howto(FILE *f) {
    fputs("To get a model:\n"
          "  - put a GGUF file (or a link to one) in ~/.cache/kiln/models, or name files or directories in\n"
          "    KILN_MODELS (colon-separated);\n"
          "  - or download one from Hugging Face into its cache, e.g. a small one to start with:\n"
          "      kiln pull " CLI_DEFAULT_PULL "\n"
          "    (kiln pull ORG/NAME:QUANT for a GGUF quant, kiln pull ORG/NAME for a safetensors model);\n"
          "  - or give a file directly: kiln serve -m PATH.gguf (or set KILN_MODEL=PATH.gguf).\n"
          "kiln runs GGUF files and Hugging Face / MLX directories of the llama, mistral, qwen2, qwen3,\n"
          "qwen3-moe, gemma2, gemma3, phi3, smollm3, mixtral and gpt-oss families (`kiln ls` marks what it\n"
          "cannot run).\n",
          f);
}

const cli_model_entry *cli_models_lookup(const cli_model_list *l, const char *s) {
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i].name, s) == 0) return &l->v[i];
    return NULL;
}

/* ORG/NAME[:QUANT] in the Hugging Face cache (see the top of this file): the file or directory
 * (malloc'd), or NULL when the cache does not hold it. */
static char *resolve_pulled(const char *arg) {
    char *repo = NULL, *tag = NULL, *dir = NULL, *commit = NULL, *found = NULL;
    if (!hub_parse_name(arg, &repo, &tag) || !(dir = hub_repo_dir(repo))) goto out;
    commit = hub_read_ref(dir, HUB_DEFAULT_REV);
    if (!commit) { /* no ref: the last snapshot by name */
        char *snaps = NULL;
        size_t n = 0;
        char **names = asprintf(&snaps, "%s/snapshots", dir) >= 0 ? read_dir_sorted(snaps, &n) : NULL;
        if (n) commit = strdup(names[n - 1]);
        free_names(names, n);
        free(snaps);
    }
    hub_repo r;
    if (!commit || !hub_list_snapshot(dir, commit, &r)) goto out;
    char *snap = NULL;
    uint64_t bytes;
    if (asprintf(&snap, "%s/snapshots/%s", dir, commit) < 0) snap = NULL;
    bool *pick = calloc(r.n ? r.n : 1, sizeof *pick);
    if (snap && pick) {
        size_t k = 0;
        if (tag) k = hub_pick_quant(r.files, r.n, tag, pick);
        else if (is_model_dir(snap, &bytes)) found = strdup(snap);
        else if (!(k = hub_pick_quant(r.files, r.n, HUB_DEFAULT_QUANT, pick)))
            for (size_t i = 0; i < r.n && !k; i++)
                if (hub_is_gguf_model(r.files[i].path)) k = hub_pick_quant(r.files, r.n, r.files[i].path, pick);
        for (size_t i = 0; i < r.n && k && !found; i++) /* the first part of a split model */
            if (pick[i] && asprintf(&found, "%s/%s", snap, r.files[i].path) < 0) found = NULL;
    }
    free(pick);
    free(snap);
    hub_repo_free(&r);
out:
    free(repo);
    free(tag);
    free(dir);
    free(commit);
    return found;
}

char *cli_model_resolve(const char *arg, bool verbose) {
    struct stat st;
    if (stat(arg, &st) == 0) return strdup(arg);
    cli_model_list l;
    cli_models_find(&l, verbose);
    const cli_model_entry *e = cli_models_lookup(&l, arg);
    char *pulled = e ? NULL : resolve_pulled(arg);
    if (pulled) {
        if (verbose) fprintf(stderr, "kiln: model %s is %s\n", arg, pulled);
        cli_models_free(&l);
        return pulled;
    }
    char *r = strdup(e ? e->path : arg);
    if (e && verbose) fprintf(stderr, "kiln: model %s is %s\n", arg, e->path);
    cli_models_free(&l);
    return r;
}

uint64_t cli_machine_memory(void) {
    const char *t = getenv("KILN_TEST_MEMORY"); /* tests only: pretend the machine has this much */
    if (t && *t) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(t, &end, 10);
        uint64_t mul = 1;
        if (*end == 'K' || *end == 'k') mul = 1ull << 10;
        else if (*end == 'M' || *end == 'm') mul = 1ull << 20;
        else if (*end == 'G' || *end == 'g') mul = 1ull << 30;
        if (!errno && end != t && (mul == 1 ? *end == 0 : end[1] == 0) && v > 0 && v <= (UINT64_MAX >> 30))
            return (uint64_t)v * mul;
        fprintf(stderr, "kiln: ignoring KILN_TEST_MEMORY='%s' (expected bytes, or a number with K, M or G)\n", t);
    }
    return kiln_physical_memory();
}

const cli_model_entry *cli_models_pick(const cli_model_list *l, uint64_t budget, bool *fits) {
    const cli_model_entry *best = NULL, *smallest = NULL;
    for (size_t k = 0; k < l->n; k++) {
        const cli_model_entry *e = &l->v[k];
        if (!e->info.runnable) continue;
        if (!smallest || e->info.tensor_bytes < smallest->info.tensor_bytes) smallest = e;
        const uint64_t ctx = (uint64_t)kiln_default_n_ctx(e->info.n_ctx_train);
        const uint64_t need = e->info.tensor_bytes + kiln_kv_bytes_per_token(&e->info, KILN_KV_F16) * ctx;
        if (need <= budget && (!best || e->info.tensor_bytes > best->info.tensor_bytes)) best = e;
    }
    *fits = best != NULL;
    return best ? best : smallest;
}

void cli_fmt_bytes(uint64_t b, char *buf, size_t cap) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%llu B", (unsigned long long)b);
    else snprintf(buf, cap, v < 10 ? "%.1f %s" : "%.0f %s", v, units[u]);
}

void cli_fmt_count(uint64_t n, char *buf, size_t cap) {
    static const char suffix[] = " KMBT";
    double v = (double)n;
    int u = 0;
    while (v >= 1000 && u < 4) {
        v /= 1000;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%llu", (unsigned long long)n);
    else snprintf(buf, cap, v < 10 ? "%.1f%c" : "%.0f%c", v, suffix[u]);
}

char *cli_models_choose(const char *flag_model, bool verbose, uint64_t mem, char *src, size_t src_cap) {
    const char *env = getenv("KILN_MODEL");
    if (flag_model || (env && *env)) {
        const char *arg = flag_model ? flag_model : env;
        char *path = cli_model_resolve(arg, verbose);
        if (path)
            snprintf(src, src_cap, "%s%s%s", flag_model ? "flag -m" : "env KILN_MODEL", strcmp(arg, path) ? ": " : "",
                     strcmp(arg, path) ? arg : "");
        return path;
    }
    cli_model_list l;
    cli_models_find(&l, verbose);
    bool fits = false;
    uint64_t budget = mem / 100 * CLI_MEMORY_PCT;
    /* less when less is available now: what the check before loading (hub_fit.c) will accept, less
     * the allowance it counts beside weights and KV */
    char avail_src[96], mem_s[32];
    const uint64_t avail = cli_memory_available(avail_src, sizeof avail_src);
    const uint64_t usable = avail / 100 * (100 - CLI_FIT_SLACK_PCT);
    const bool by_avail = avail && usable < budget;
    if (by_avail) budget = usable > CLI_FIT_ALLOWANCE ? usable - CLI_FIT_ALLOWANCE : 0;
    const cli_model_entry *e = cli_models_pick(&l, budget, &fits);
    cli_fmt_bytes(by_avail ? avail : mem, mem_s, sizeof mem_s);
    if (!e) {
        fprintf(stderr, "kiln: no model to run: %s. kiln looked in:\n",
                l.n ? "none of the models found is one kiln runs" : "no GGUF model was found");
        cli_models_print_places(stderr);
        if (l.n_skipped) fprintf(stderr, "(%zu unusable file(s) were left out; kiln ls -v says why)\n", l.n_skipped);
        cli_models_print_howto(stderr);
        cli_models_free(&l);
        return NULL;
    }
    size_t runnable = 0;
    for (size_t k = 0; k < l.n; k++) runnable += l.v[k].info.runnable;
    char where[96];
    if (by_avail) snprintf(where, sizeof where, "the %s available now", mem_s);
    else snprintf(where, sizeof where, "%d%% of %s", CLI_MEMORY_PCT, mem_s);
    if (fits) snprintf(src, src_cap, "discovered %s: the largest of %zu fitting in %s", e->name, runnable, where);
    else snprintf(src, src_cap, "discovered %s: the smallest of %zu; none fits in %s", e->name, runnable, where);
    if (!fits)
        fprintf(stderr, "kiln: warning: no model found fits in %s%s; trying the smallest, %s\n", where,
                by_avail ? "" : " of memory", e->name);
    char *path = strdup(e->path);
    cli_models_free(&l);
    return path;
}

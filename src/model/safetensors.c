/*
 * safetensors.c - validating safetensors reader (single files and sharded directories).
 *
 * The file is hostile input: the header length is checked against the file and KN_ST_MAX_HEADER
 * before the JSON is parsed (by jansson, duplicates rejected); every entry's dtype, shape and byte
 * range are checked, and the ranges must tile the data section exactly, as the format requires.
 * Sharded directories are read through their index, whose file names must be plain names inside the
 * directory. Messages name the file and the tensor.
 */
#include "model/safetensors.h"
#include "base/json.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[KN_ST_DTYPE_COUNT] = {
    [KN_ST_BOOL] = {"BOOL", 1},       [KN_ST_U8] = {"U8", 1},           [KN_ST_I8] = {"I8", 1},
    [KN_ST_F8_E4M3] = {"F8_E4M3", 1}, [KN_ST_F8_E5M2] = {"F8_E5M2", 1}, [KN_ST_U16] = {"U16", 2},
    [KN_ST_I16] = {"I16", 2},         [KN_ST_F16] = {"F16", 2},         [KN_ST_BF16] = {"BF16", 2},
    [KN_ST_U32] = {"U32", 4},         [KN_ST_I32] = {"I32", 4},         [KN_ST_F32] = {"F32", 4},
    [KN_ST_U64] = {"U64", 8},         [KN_ST_I64] = {"I64", 8},         [KN_ST_F64] = {"F64", 8},
};

const char *kn_st_dtype_name(kn_st_dtype t) { return (unsigned)t < KN_ST_DTYPE_COUNT ? dtypes[t].name : "?"; }
size_t kn_st_dtype_size(kn_st_dtype t) { return (unsigned)t < KN_ST_DTYPE_COUNT ? dtypes[t].size : 0; }

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const kn_st_tensor *)a)->name, ((const kn_st_tensor *)b)->name);
}

void kn_st_close(kn_safetensors *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
    free(st->tensors);
    for (int f = 0; f < st->n_files; f++) {
        kn_unmap_file(&st->maps[f]);
        free(st->paths[f]);
    }
    free(st->maps);
    free(st->paths);
    memset(st, 0, sizeof *st);
}

const kn_st_tensor *kn_st_find(const kn_safetensors *st, const char *name) {
    if (!st->n_tensors) return NULL;
    kn_st_tensor key = {.name = (char *)name};
    return bsearch(&key, st->tensors, st->n_tensors, sizeof key, cmp_name);
}

/* Reads one header entry (name: {"dtype", "shape", "data_offsets"}) into t; begin/end relative to the
 * data section. */
static kiln_status read_entry(const char *path, const char *name, json_t *v, kn_st_tensor *t, uint64_t *begin,
                              uint64_t *end) {
    if (!json_is_object(v)) return kn_error(KILN_ERR_FORMAT, "%s: tensor '%s': entry is not an object", path, name);
    const char *dt = json_string_value(json_object_get(v, "dtype"));
    if (!dt) return kn_error(KILN_ERR_FORMAT, "%s: tensor '%s': missing or non-string 'dtype'", path, name);
    int d = 0;
    while (d < KN_ST_DTYPE_COUNT && strcmp(dtypes[d].name, dt) != 0) d++;
    if (d == KN_ST_DTYPE_COUNT)
        return kn_error(KILN_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.32s'", path, name, dt);
    t->dtype = (kn_st_dtype)d;
    json_t *shape = json_object_get(v, "shape");
    if (!json_is_array(shape))
        return kn_error(KILN_ERR_FORMAT, "%s: tensor '%s': missing or non-array 'shape'", path, name);
    if (json_array_size(shape) > KN_ST_MAX_DIMS)
        return kn_error(KILN_ERR_FORMAT, "%s: tensor '%s': %zu dimensions (at most %d)", path, name,
                        json_array_size(shape), KN_ST_MAX_DIMS);
    t->n_dims = (int)json_array_size(shape);
    uint64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) {
        json_t *e = json_array_get(shape, (size_t)i);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return kn_error(KILN_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, i);
        t->shape[i] = (int64_t)json_integer_value(e);
        if (!kn_mul_ok(n, (uint64_t)t->shape[i], &n) || n > (uint64_t)INT64_MAX)
            return kn_error(KILN_ERR_FORMAT, "%s: tensor '%s': element count overflows", path, name);
    }
    t->n_elem = n;
    if (!kn_mul_ok(n, dtypes[d].size, &t->nbytes))
        return kn_error(KILN_ERR_FORMAT, "%s: tensor '%s': byte size overflows", path, name);
    json_t *off = json_object_get(v, "data_offsets");
    json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
    if (!json_is_array(off) || json_array_size(off) != 2 || !json_is_integer(b) || !json_is_integer(e) ||
        json_integer_value(b) < 0 || json_integer_value(e) < json_integer_value(b))
        return kn_error(KILN_ERR_FORMAT, "%s: tensor '%s': 'data_offsets' must be [begin, end] with 0 <= begin <= end",
                        path, name);
    *begin = (uint64_t)json_integer_value(b);
    *end = (uint64_t)json_integer_value(e);
    if (*end - *begin != t->nbytes)
        return kn_error(KILN_ERR_FORMAT,
                        "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but %s of %llu elements needs %llu",
                        path, name, (unsigned long long)*begin, (unsigned long long)*end,
                        (unsigned long long)(*end - *begin), dtypes[d].name, (unsigned long long)n,
                        (unsigned long long)t->nbytes);
    return KILN_OK;
}

typedef struct span {
    uint64_t begin, end;
    size_t idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Appends n entries to st->tensors (growing the array). */
static kiln_status grow(kn_safetensors *st, size_t n) {
    kn_st_tensor *t = realloc(st->tensors, (st->n_tensors + n + 1) * sizeof *t);
    if (!t) return kn_error(KILN_ERR_NOMEM, "out of memory reading a safetensors header");
    st->tensors = t;
    return KILN_OK;
}

static kiln_status add_file(kn_safetensors *st, const char *path, kn_mapping map) {
    if (st->n_files >= KN_ST_MAX_SHARDS)
        return kn_error(KILN_ERR_FORMAT, "more than %d safetensors files", KN_ST_MAX_SHARDS);
    char **p = realloc(st->paths, (size_t)(st->n_files + 1) * sizeof *p);
    if (p) st->paths = p;
    kn_mapping *m = realloc(st->maps, (size_t)(st->n_files + 1) * sizeof *m);
    if (m) st->maps = m;
    char *dup = p && m ? kn_strdup(path) : NULL;
    if (!dup) return kn_error(KILN_ERR_NOMEM, "out of memory");
    st->paths[st->n_files] = dup;
    st->maps[st->n_files] = map;
    st->n_files++;
    return KILN_OK;
}

/* Parses one file's header into st (tensors appended, not yet sorted). The mapping is recorded in st
 * first, so kn_st_close releases it on every path. */
static kiln_status parse_one(const char *path, kn_mapping map, kn_safetensors *st) {
    kiln_status s = add_file(st, path, map);
    if (s) {
        kn_unmap_file(&map);
        return s;
    }
    const int fi = st->n_files - 1;
    uint64_t hlen;
    if (map.size < 8)
        return kn_error(KILN_ERR_FORMAT, "%s: file truncated: %zu bytes, no header length", path, map.size);
    memcpy(&hlen, map.data, 8);
    if (hlen > KN_ST_MAX_HEADER)
        return kn_error(KILN_ERR_FORMAT, "%s: header length %llu is over the %llu-byte limit", path,
                        (unsigned long long)hlen, (unsigned long long)KN_ST_MAX_HEADER);
    if (hlen > map.size - 8)
        return kn_error(KILN_ERR_FORMAT, "%s: header length %llu runs past the end of the %zu-byte file (truncated?)",
                        path, (unsigned long long)hlen, map.size);
    if (hlen < 2 || map.data[8] != '{')
        return kn_error(KILN_ERR_FORMAT, "%s: not a safetensors file (the header is not a JSON object)", path);
    json_error_t jerr;
    json_t *root = kn_json_loadb((const char *)map.data + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return kn_error(kn_json_status(&jerr, KILN_ERR_FORMAT), "%s: bad header JSON at byte %d: %s", path,
                        jerr.position + 8, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return kn_error(KILN_ERR_FORMAT, "%s: the header is not a JSON object", path);
    }
    const uint64_t data_off = 8 + hlen, data_size = map.size - data_off;
    size_t n = json_object_size(root);
    span *spans = kn_calloc(n ? n : 1, sizeof *spans);
    if (!spans || (s = grow(st, n))) {
        free(spans);
        json_decref(root);
        return spans ? s : KILN_ERR_NOMEM;
    }
    size_t ns = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                s = kn_error(KILN_ERR_FORMAT, "%s: '__metadata__' is not an object", path);
                break;
            }
            continue;
        }
        if (!*key || strlen(key) > 1024) {
            s = kn_error(KILN_ERR_FORMAT, "%s: a tensor name is empty or over 1024 bytes", path);
            break;
        }
        kn_st_tensor t = {.file = fi};
        uint64_t b = 0, e = 0;
        if ((s = read_entry(path, key, v, &t, &b, &e))) break;
        if (e > data_size) {
            s = kn_error(KILN_ERR_FORMAT,
                         "%s: tensor '%s' (bytes %llu to %llu of the data) extends past the end of the file (data is "
                         "%llu bytes): truncated?",
                         path, key, (unsigned long long)b, (unsigned long long)e, (unsigned long long)data_size);
            break;
        }
        if (!(t.name = kn_strdup(key))) {
            s = KILN_ERR_NOMEM;
            break;
        }
        t.data = map.data + data_off + b;
        spans[ns] = (span){b, e, st->n_tensors};
        st->tensors[st->n_tensors++] = t;
        ns++;
    }
    if (!s) {
        /* the ranges must tile [0, data_size): sorted by start, each begins where the last ended */
        qsort(spans, ns, sizeof *spans, cmp_span);
        uint64_t at = 0;
        for (size_t i = 0; i < ns && !s; i++) {
            const char *nm = st->tensors[spans[i].idx].name;
            if (spans[i].begin < at)
                s = kn_error(KILN_ERR_FORMAT, "%s: tensor '%s' (bytes %llu to %llu) overlaps the tensor before it",
                             path, nm, (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end);
            else if (spans[i].begin > at)
                s = kn_error(KILN_ERR_FORMAT, "%s: a hole of %llu bytes in the data before tensor '%s'", path,
                             (unsigned long long)(spans[i].begin - at), nm);
            at = spans[i].end;
        }
        if (!s && at != data_size)
            s = kn_error(KILN_ERR_FORMAT, "%s: %llu bytes after the last tensor's data (the header says %llu)", path,
                         (unsigned long long)(data_size - at), (unsigned long long)at);
    }
    free(spans);
    json_decref(root);
    return s;
}

/* Sorts the tensors by name and rejects a name given twice (in one file or across shards). */
static kiln_status finish(kn_safetensors *st) {
    if (st->n_tensors > 1) qsort(st->tensors, st->n_tensors, sizeof *st->tensors, cmp_name);
    for (size_t i = 1; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0)
            return kn_error(KILN_ERR_FORMAT, "duplicate tensor '%s' (in %s and %s)", st->tensors[i].name,
                            st->paths[st->tensors[i - 1].file], st->paths[st->tensors[i].file]);
    return KILN_OK;
}

kiln_status kn_st_parse(const char *path, kn_mapping map, kn_safetensors *st) {
    kiln_status s = parse_one(path, map, st);
    if (!s) s = finish(st);
    if (s) kn_st_close(st);
    return s;
}

kiln_status kn_st_open_file(const char *path, kn_safetensors *st) {
    kn_mapping map;
    kiln_status s = kn_map_file(path, &map);
    if (s) return s;
    return kn_st_parse(path, map, st);
}

/* A shard name from an index must be a plain file name (no directories, no "..") ending in .safetensors. */
static bool plain_name(const char *s) {
    size_t n = strlen(s);
    return n > 12 && n < 256 && !strchr(s, '/') && !strchr(s, '\\') && s[0] != '.' &&
           strcmp(s + n - 12, ".safetensors") == 0;
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static kiln_status open_index(const char *dir, const char *ipath, kn_safetensors *st) {
    json_error_t jerr;
    json_t *root = kn_json_load_file(ipath, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return kn_error(kn_json_status(&jerr, KILN_ERR_FORMAT), "%s: line %d: %s", ipath, jerr.line, jerr.text);
    kiln_status s = KILN_OK;
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        json_decref(root);
        return kn_error(KILN_ERR_FORMAT, "%s: missing or non-object 'weight_map'", ipath);
    }
    /* distinct shard names, sorted */
    size_t n = json_object_size(wm), nf = 0;
    const char **files = kn_calloc(n ? n : 1, sizeof *files);
    if (!files) {
        json_decref(root);
        return KILN_ERR_NOMEM;
    }
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        const char *f = json_string_value(v);
        if (!f || !plain_name(f)) {
            s = kn_error(KILN_ERR_FORMAT, "%s: weight_map['%s'] is not a plain .safetensors file name", ipath, key);
            break;
        }
        files[nf++] = f;
    }
    if (!s) {
        qsort(files, nf, sizeof *files, cmp_cstr);
        size_t u = 0;
        for (size_t i = 0; i < nf; i++)
            if (!u || strcmp(files[u - 1], files[i]) != 0) files[u++] = files[i];
        nf = u;
        if (nf > KN_ST_MAX_SHARDS) s = kn_error(KILN_ERR_FORMAT, "%s: more than %d shards", ipath, KN_ST_MAX_SHARDS);
    }
    for (size_t i = 0; i < nf && !s; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        kn_mapping map;
        if ((s = kn_map_file(path, &map))) {
            char why[KN_ERRMSG_MAX];
            snprintf(why, sizeof why, "%s", kn_error_msg()); /* kn_error rewrites the message buffer */
            s = kn_error(KILN_ERR_IO, "%s names shard '%s', which cannot be opened: %s", ipath, files[i], why);
            break;
        }
        s = parse_one(path, map, st);
    }
    if (!s) s = finish(st);
    /* every tensor the map names is in the shard it names, and every tensor of a shard is in the map */
    json_object_foreach(wm, key, v) {
        if (s) break;
        const kn_st_tensor *t = kn_st_find(st, key);
        const char *f = json_string_value(v), *got = t ? strrchr(st->paths[t->file], '/') + 1 : NULL;
        if (!t) s = kn_error(KILN_ERR_FORMAT, "%s: tensor '%s' is not in its shard %s", ipath, key, f);
        else if (strcmp(got, f) != 0)
            s = kn_error(KILN_ERR_FORMAT, "%s: tensor '%s' is in %s, not in %s as the index says", ipath, key, got, f);
    }
    for (size_t i = 0; i < st->n_tensors && !s; i++)
        if (!json_object_get(wm, st->tensors[i].name))
            s = kn_error(KILN_ERR_FORMAT, "%s: tensor '%s' of %s is missing from the index", ipath, st->tensors[i].name,
                         st->paths[st->tensors[i].file]);
    free(files);
    json_decref(root);
    return s;
}

kiln_status kn_st_open_dir(const char *dir, kn_safetensors *st) {
    memset(st, 0, sizeof *st);
    char path[4096];
    struct stat sb;
    kiln_status s;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (stat(path, &sb) == 0) {
        s = open_index(dir, path, st);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (stat(path, &sb) == 0) {
            kn_mapping map;
            if ((s = kn_map_file(path, &map))) return s;
            s = parse_one(path, map, st);
        } else {
            /* every *.safetensors file of the directory, in name order */
            DIR *d = opendir(dir);
            if (!d) return kn_error(KILN_ERR_IO, "cannot read directory '%s'", dir);
            char **names = NULL;
            size_t nn = 0;
            s = KILN_OK;
            struct dirent *e;
            while ((e = readdir(d)) && !s) {
                if (!plain_name(e->d_name)) continue;
                char **nv = realloc(names, (nn + 1) * sizeof *nv);
                if (!nv || !(nv[nn] = kn_strdup(e->d_name))) {
                    if (nv) names = nv;
                    s = KILN_ERR_NOMEM;
                    break;
                }
                names = nv;
                nn++;
                if (nn > KN_ST_MAX_SHARDS) s = kn_error(KILN_ERR_FORMAT, "%s: too many safetensors files", dir);
            }
            closedir(d);
            if (!s && !nn) s = kn_error(KILN_ERR_IO, "'%s' holds no .safetensors file", dir);
            if (!s) qsort(names, nn, sizeof *names, cmp_cstr);
            for (size_t i = 0; i < nn && !s; i++) {
                snprintf(path, sizeof path, "%s/%s", dir, names[i]);
                kn_mapping map;
                if (!(s = kn_map_file(path, &map))) s = parse_one(path, map, st);
            }
            for (size_t i = 0; i < nn; i++) free(names[i]);
            free(names);
        }
        if (!s) s = finish(st);
    }
    if (s) kn_st_close(st);
    return s;
}

/*
 * gguf.c - validating GGUF v2/v3 reader.
 *
 * The file is hostile input. A cursor walks the mapping and every read checks that it stays inside
 * the file; counts are bounded by what the remaining bytes could possibly hold before anything is
 * allocated for them; tensor shapes are checked for overflow, block alignment and extent. Errors
 * name what is wrong and the file offset where it was found.
 */
#include "model/gguf.h"

#include <stdlib.h>
#include <string.h>

#define GGUF_MAGIC             "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ALIGNMENT     (1u << 20)
#define GGUF_MAX_KEY_LEN       65535

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
} cursor;

static size_t scalar_size[KN_GGUF_TYPE_COUNT] = {
    [KN_GGUF_UINT8] = 1,  [KN_GGUF_INT8] = 1,  [KN_GGUF_UINT16] = 2,  [KN_GGUF_INT16] = 2,
    [KN_GGUF_UINT32] = 4, [KN_GGUF_INT32] = 4, [KN_GGUF_FLOAT32] = 4, [KN_GGUF_BOOL] = 1,
    [KN_GGUF_UINT64] = 8, [KN_GGUF_INT64] = 8, [KN_GGUF_FLOAT64] = 8,
};

size_t kn_gguf_type_size(kn_gguf_type t) { return (unsigned)t < KN_GGUF_TYPE_COUNT ? scalar_size[t] : 0; }

static uint64_t remaining(const cursor *c) { return c->size - c->pos; }

static kiln_status need(const cursor *c, uint64_t n, const char *what) {
    if (remaining(c) < n)
        return kn_error(KILN_ERR_FORMAT, "file truncated: %s needs %llu bytes at offset %llu but only %llu remain",
                        what, (unsigned long long)n, (unsigned long long)c->pos, (unsigned long long)remaining(c));
    return KILN_OK;
}

static kiln_status rd_u32(cursor *c, uint32_t *v, const char *what) {
    kiln_status st = need(c, 4, what);
    if (st) return st;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return KILN_OK;
}

static kiln_status rd_u64(cursor *c, uint64_t *v, const char *what) {
    kiln_status st = need(c, 8, what);
    if (st) return st;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return KILN_OK;
}

static kiln_status rd_str(cursor *c, kn_str *s, const char *what) {
    uint64_t len;
    kiln_status st = rd_u64(c, &len, what);
    if (st) return st;
    if ((st = need(c, len, what))) return st;
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return KILN_OK;
}

/* Reads a scalar of type t into kv->v, widening it. */
static void rd_scalar(cursor *c, kn_gguf_type t, kn_gguf_kv *kv) {
    const uint8_t *p = c->base + c->pos;
    switch (t) {
        case KN_GGUF_UINT8: kv->v.u = p[0]; break;
        case KN_GGUF_INT8: kv->v.i = (int8_t)p[0]; break;
        case KN_GGUF_UINT16: {
            uint16_t x;
            memcpy(&x, p, 2);
            kv->v.u = x;
            break;
        }
        case KN_GGUF_INT16: {
            int16_t x;
            memcpy(&x, p, 2);
            kv->v.i = x;
            break;
        }
        case KN_GGUF_UINT32: {
            uint32_t x;
            memcpy(&x, p, 4);
            kv->v.u = x;
            break;
        }
        case KN_GGUF_INT32: {
            int32_t x;
            memcpy(&x, p, 4);
            kv->v.i = x;
            break;
        }
        case KN_GGUF_FLOAT32: {
            float x;
            memcpy(&x, p, 4);
            kv->v.f = x;
            break;
        }
        case KN_GGUF_BOOL: kv->v.b = p[0] != 0; break;
        case KN_GGUF_UINT64: memcpy(&kv->v.u, p, 8); break;
        case KN_GGUF_INT64: memcpy(&kv->v.i, p, 8); break;
        case KN_GGUF_FLOAT64: memcpy(&kv->v.f, p, 8); break;
        default: break;
    }
    c->pos += scalar_size[t];
}

static kiln_status read_kv(cursor *c, kn_gguf_kv *kv, uint64_t idx) {
    kiln_status st;
    uint64_t start = c->pos;
    if ((st = rd_str(c, &kv->key, "metadata key"))) return st;
    if (kv->key.len == 0 || kv->key.len > GGUF_MAX_KEY_LEN)
        return kn_error(KILN_ERR_FORMAT, "metadata entry %llu at offset %llu has a key of invalid length %llu",
                        (unsigned long long)idx, (unsigned long long)start, (unsigned long long)kv->key.len);
    uint32_t type;
    if ((st = rd_u32(c, &type, "metadata value type"))) return st;
    if (type >= KN_GGUF_TYPE_COUNT)
        return kn_error(KILN_ERR_FORMAT, "metadata key '%.*s' has unknown value type %u", (int)KN_MIN(kv->key.len, 200),
                        kv->key.ptr, type);
    kv->type = (kn_gguf_type)type;
    if (type == KN_GGUF_STRING) return rd_str(c, &kv->str, "metadata string");
    if (type != KN_GGUF_ARRAY) {
        if ((st = need(c, scalar_size[type], "metadata value"))) return st;
        rd_scalar(c, kv->type, kv);
        return KILN_OK;
    }
    uint32_t et;
    if ((st = rd_u32(c, &et, "array element type"))) return st;
    if ((st = rd_u64(c, &kv->arr_n, "array length"))) return st;
    if (et >= KN_GGUF_TYPE_COUNT || et == KN_GGUF_ARRAY)
        return kn_error(KILN_ERR_FORMAT, "metadata key '%.*s': %s array element type %u", (int)KN_MIN(kv->key.len, 200),
                        kv->key.ptr, et == KN_GGUF_ARRAY ? "unsupported nested" : "unknown", et);
    kv->arr_type = (kn_gguf_type)et;
    kv->arr_data = c->base + c->pos;
    if (et == KN_GGUF_STRING) {
        /* each string needs at least its 8-byte length */
        if (kv->arr_n > remaining(c) / 8)
            return kn_error(KILN_ERR_FORMAT, "metadata key '%.*s': string array of %llu entries cannot fit in the file",
                            (int)KN_MIN(kv->key.len, 200), kv->key.ptr, (unsigned long long)kv->arr_n);
        for (uint64_t i = 0; i < kv->arr_n; i++) {
            kn_str s;
            if ((st = rd_str(c, &s, "array string"))) return st;
        }
        return KILN_OK;
    }
    uint64_t bytes;
    if (!kn_mul_ok(kv->arr_n, scalar_size[et], &bytes) || bytes > remaining(c))
        return kn_error(
            KILN_ERR_FORMAT, "metadata key '%.*s': array of %llu elements at offset %llu runs past the end of the file",
            (int)KN_MIN(kv->key.len, 200), kv->key.ptr, (unsigned long long)kv->arr_n, (unsigned long long)c->pos);
    c->pos += bytes;
    return KILN_OK;
}

static kiln_status read_tensor_info(cursor *c, kn_gguf_tensor *t, uint64_t idx) {
    kiln_status st;
    if ((st = rd_str(c, &t->name, "tensor name"))) return st;
    if (t->name.len == 0 || t->name.len > 1024)
        return kn_error(KILN_ERR_FORMAT, "tensor %llu has a name of invalid length %llu", (unsigned long long)idx,
                        (unsigned long long)t->name.len);
    int nl = (int)t->name.len;
    if ((st = rd_u32(c, &t->n_dims, "tensor dimension count"))) return st;
    if (t->n_dims < 1 || t->n_dims > KN_MAX_DIMS)
        return kn_error(KILN_ERR_FORMAT, "tensor '%.*s' has %u dimensions (1 to %d allowed)", nl, t->name.ptr,
                        t->n_dims, KN_MAX_DIMS);
    uint64_t nelem = 1;
    for (int d = 0; d < KN_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        if ((st = rd_u64(c, &ne, "tensor dimension"))) return st;
        if (ne > (uint64_t)INT64_MAX || !kn_mul_ok(nelem, ne, &nelem) || nelem > (uint64_t)INT64_MAX)
            return kn_error(KILN_ERR_FORMAT, "tensor '%.*s' has an element count that overflows", nl, t->name.ptr);
        t->ne[d] = (int64_t)ne;
    }
    uint32_t type;
    if ((st = rd_u32(c, &type, "tensor type"))) return st;
    if ((st = rd_u64(c, &t->offset, "tensor offset"))) return st;
    const kn_type_traits *tr = type < KN_DTYPE_FILE_COUNT ? kn_type_traits_get((int32_t)type) : NULL;
    if (!tr)
        return kn_error(KILN_ERR_UNSUPPORTED, "tensor '%.*s' has type %s, which kiln does not support", nl, t->name.ptr,
                        type < KN_DTYPE_FILE_COUNT ? kn_dtype_name((int32_t)type) : "of an unknown id");
    t->type = (kn_dtype)type;
    if (t->ne[0] % tr->block_size != 0)
        return kn_error(KILN_ERR_FORMAT, "tensor '%.*s': row length %lld is not a multiple of the %s block size %d", nl,
                        t->name.ptr, (long long)t->ne[0], tr->name, tr->block_size);
    uint64_t blocks = nelem / (uint64_t)tr->block_size;
    if (!kn_mul_ok(blocks, tr->block_bytes, &t->nbytes))
        return kn_error(KILN_ERR_FORMAT, "tensor '%.*s' byte size overflows", nl, t->name.ptr);
    return KILN_OK;
}

static int cmp_str(const void *a, const void *b) {
    const kn_str *x = *(const kn_str *const *)a, *y = *(const kn_str *const *)b;
    int c = memcmp(x->ptr, y->ptr, KN_MIN(x->len, y->len));
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Finds a duplicate among n strings (sorting pointers to them: O(n log n), so a file with a
 * million keys cannot stall the parser). Returns the duplicate or NULL; NULL too on NOMEM, with
 * *nomem set. */
static const kn_str *find_duplicate(const kn_str *const *v, uint64_t n, const kn_str **scratch, bool *nomem) {
    *nomem = false;
    if (n < 2) return NULL;
    if (!scratch) {
        *nomem = true;
        return NULL;
    }
    memcpy(scratch, v, n * sizeof *scratch);
    qsort(scratch, n, sizeof *scratch, cmp_str);
    for (uint64_t i = 1; i < n; i++)
        if (cmp_str(&scratch[i - 1], &scratch[i]) == 0) return scratch[i];
    return NULL;
}

/* Metadata keys and tensor names must each be unique. */
static kiln_status check_unique(const kn_gguf *g) {
    uint64_t n = KN_MAX(g->n_kv, g->n_tensors);
    const kn_str **ptrs = kn_calloc(n ? n : 1, sizeof *ptrs), **scratch = kn_calloc(n ? n : 1, sizeof *scratch);
    kiln_status st = KILN_OK;
    bool nomem = !ptrs || !scratch;
    if (!nomem) {
        for (uint64_t i = 0; i < g->n_kv; i++) ptrs[i] = &g->kv[i].key;
        const kn_str *d = find_duplicate(ptrs, g->n_kv, scratch, &nomem);
        if (d) st = kn_error(KILN_ERR_FORMAT, "duplicate metadata key '%.*s'", (int)KN_MIN(d->len, 200), d->ptr);
    }
    if (!st && !nomem) {
        for (uint64_t i = 0; i < g->n_tensors; i++) ptrs[i] = &g->tensors[i].name;
        const kn_str *d = find_duplicate(ptrs, g->n_tensors, scratch, &nomem);
        if (d) st = kn_error(KILN_ERR_FORMAT, "duplicate tensor name '%.*s'", (int)KN_MIN(d->len, 200), d->ptr);
    }
    free(ptrs);
    free(scratch);
    return nomem ? KILN_ERR_NOMEM : st;
}

void kn_gguf_close(kn_gguf *g) {
    if (!g) return;
    free(g->kv);
    free(g->tensors);
    kn_unmap_file(&g->map);
    if (g->owner_free) g->owner_free(g->owner);
    memset(g, 0, sizeof *g);
}

kiln_status kn_gguf_parse(kn_mapping map, kn_gguf *g) {
    memset(g, 0, sizeof *g);
    g->map = map;
    cursor c = {map.data, map.size, 0};
    kiln_status st;
    if (map.size < 4 || memcmp(map.data, GGUF_MAGIC, 4) != 0) {
        st = kn_error(KILN_ERR_FORMAT, "not a GGUF file (bad magic)");
        goto fail;
    }
    c.pos = 4;
    if ((st = rd_u32(&c, &g->version, "version"))) goto fail;
    if (g->version != 2 && g->version != 3) {
        st = kn_error(g->version == 1 ? KILN_ERR_UNSUPPORTED : KILN_ERR_FORMAT,
                      "GGUF version %u is not supported (2 and 3 are)", g->version);
        goto fail;
    }
    if ((st = rd_u64(&c, &g->n_tensors, "tensor count"))) goto fail;
    if ((st = rd_u64(&c, &g->n_kv, "metadata count"))) goto fail;
    /* A key/value needs at least 8 (key length) + 1 (key) + 4 (type) + 1 (value) bytes; a tensor
     * info at least 8 + 1 + 4 + 8 + 4 + 8. Bound the counts before allocating for them. */
    if (g->n_kv > remaining(&c) / 14) {
        st = kn_error(KILN_ERR_FORMAT, "metadata count %llu cannot fit in a %llu-byte file",
                      (unsigned long long)g->n_kv, (unsigned long long)map.size);
        goto fail;
    }
    if (g->n_tensors > remaining(&c) / 33) {
        st = kn_error(KILN_ERR_FORMAT, "tensor count %llu cannot fit in a %llu-byte file",
                      (unsigned long long)g->n_tensors, (unsigned long long)map.size);
        goto fail;
    }
    g->kv = kn_calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->tensors = kn_calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) {
        st = KILN_ERR_NOMEM;
        goto fail;
    }

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        if ((st = read_kv(&c, &g->kv[i], i))) goto fail;
        if (kn_str_eq(g->kv[i].key, "general.alignment")) {
            const kn_gguf_kv *a = &g->kv[i];
            uint64_t al = a->v.u;
            bool is_int = a->type == KN_GGUF_UINT32 || a->type == KN_GGUF_UINT64 || a->type == KN_GGUF_UINT16 ||
                          a->type == KN_GGUF_UINT8;
            if (!is_int || al == 0 || (al & (al - 1)) != 0 || al > GGUF_MAX_ALIGNMENT) {
                st = kn_error(KILN_ERR_FORMAT, "general.alignment must be a power of two up to %u", GGUF_MAX_ALIGNMENT);
                goto fail;
            }
            g->alignment = al;
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if ((st = read_tensor_info(&c, &g->tensors[i], i))) goto fail;
    }
    if ((st = check_unique(g))) goto fail;
    g->data_offset = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    uint64_t data_size = g->data_offset <= map.size ? map.size - g->data_offset : 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        kn_gguf_tensor *t = &g->tensors[i];
        uint64_t end;
        if (t->offset % g->alignment != 0) {
            st = kn_error(KILN_ERR_FORMAT, "tensor '%.*s' offset %llu is not aligned to %llu", (int)t->name.len,
                          t->name.ptr, (unsigned long long)t->offset, (unsigned long long)g->alignment);
            goto fail;
        }
        if (!kn_add_ok(t->offset, t->nbytes, &end) || end > data_size) {
            st = kn_error(KILN_ERR_FORMAT,
                          "tensor '%.*s' (%llu bytes at data offset %llu) extends past the end of the file (data "
                          "section is %llu bytes): file truncated?",
                          (int)t->name.len, t->name.ptr, (unsigned long long)t->nbytes, (unsigned long long)t->offset,
                          (unsigned long long)data_size);
            goto fail;
        }
        t->data = map.data + g->data_offset + t->offset;
    }
    return KILN_OK;
fail:
    kn_gguf_close(g);
    return st;
}

kiln_status kn_gguf_open_file(const char *path, kn_gguf *out) {
    memset(out, 0, sizeof *out);
    kn_mapping map;
    kiln_status st = kn_map_file(path, &map);
    if (st) return st;
    return kn_gguf_parse(map, out);
}

kiln_status kn_gguf_open(const char *path, kn_gguf *out) {
    kiln_status st = kn_gguf_open_file(path, out);
    uint64_t count = 0;
    if (!st && kn_gguf_get_u64(out, "split.count", &count) && count > 1) st = kn_gguf_join_split(path, out);
    return st;
}

bool kn_str_eq(kn_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

const kn_gguf_kv *kn_gguf_find(const kn_gguf *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (kn_str_eq(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const kn_gguf_tensor *kn_gguf_find_tensor(const kn_gguf *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (kn_str_eq(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

static bool is_unsigned(kn_gguf_type t) {
    return t == KN_GGUF_UINT8 || t == KN_GGUF_UINT16 || t == KN_GGUF_UINT32 || t == KN_GGUF_UINT64;
}
static bool is_signed(kn_gguf_type t) {
    return t == KN_GGUF_INT8 || t == KN_GGUF_INT16 || t == KN_GGUF_INT32 || t == KN_GGUF_INT64;
}

bool kn_gguf_get_u64(const kn_gguf *g, const char *key, uint64_t *out) {
    const kn_gguf_kv *kv = kn_gguf_find(g, key);
    if (!kv) return false;
    if (is_unsigned(kv->type)) {
        *out = kv->v.u;
        return true;
    }
    if (is_signed(kv->type) && kv->v.i >= 0) {
        *out = (uint64_t)kv->v.i;
        return true;
    }
    return false;
}

bool kn_gguf_get_i64(const kn_gguf *g, const char *key, int64_t *out) {
    const kn_gguf_kv *kv = kn_gguf_find(g, key);
    if (!kv) return false;
    if (is_signed(kv->type)) {
        *out = kv->v.i;
        return true;
    }
    if (is_unsigned(kv->type) && kv->v.u <= (uint64_t)INT64_MAX) {
        *out = (int64_t)kv->v.u;
        return true;
    }
    return false;
}

bool kn_gguf_get_f64(const kn_gguf *g, const char *key, double *out) {
    const kn_gguf_kv *kv = kn_gguf_find(g, key);
    if (!kv) return false;
    if (kv->type == KN_GGUF_FLOAT32 || kv->type == KN_GGUF_FLOAT64) {
        *out = kv->v.f;
        return true;
    }
    if (is_signed(kv->type)) {
        *out = (double)kv->v.i;
        return true;
    }
    if (is_unsigned(kv->type)) {
        *out = (double)kv->v.u;
        return true;
    }
    return false;
}

bool kn_gguf_get_bool(const kn_gguf *g, const char *key, bool *out) {
    const kn_gguf_kv *kv = kn_gguf_find(g, key);
    if (!kv || kv->type != KN_GGUF_BOOL) return false;
    *out = kv->v.b;
    return true;
}

bool kn_gguf_get_str(const kn_gguf *g, const char *key, kn_str *out) {
    const kn_gguf_kv *kv = kn_gguf_find(g, key);
    if (!kv || kv->type != KN_GGUF_STRING) return false;
    *out = kv->str;
    return true;
}

bool kn_gguf_get_arr(const kn_gguf *g, const char *key, kn_gguf_type elem_type, uint64_t *n, const uint8_t **data) {
    const kn_gguf_kv *kv = kn_gguf_find(g, key);
    if (!kv || kv->type != KN_GGUF_ARRAY || kv->arr_type != elem_type) return false;
    *n = kv->arr_n;
    *data = kv->arr_data;
    return true;
}

kn_str kn_gguf_next_str(const uint8_t **cur) {
    kn_str s;
    memcpy(&s.len, *cur, 8);
    s.ptr = (const char *)*cur + 8;
    *cur += 8 + s.len;
    return s;
}

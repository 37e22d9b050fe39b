/*
 * gguf_write.c - GGUF v3 writer (see gguf_write.h for the layout and the error contract).
 *
 * Metadata is serialized into one growable byte buffer as it is added (capped at
 * KN_GGUFW_MAX_META_BYTES; every size is computed with overflow checks). Tensor infos are kept in a
 * growable array; their data offsets are assigned only when the file is written, so the alignment may
 * be set at any time. Output goes through a small buffered writer over a file descriptor to
 * "<path>.tmp", which is flushed, fsync'ed and renamed over path.
 */
#include "gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GGUFW_VERSION           3
#define GGUFW_DEFAULT_ALIGNMENT 32
#define GGUFW_MAX_ALIGNMENT     (1u << 20)
#define GGUFW_CHUNK_BYTES       ((uint64_t)16 << 20) /* target size of one fill-callback chunk */
#define GGUFW_OUTBUF_BYTES      ((size_t)1 << 20)

typedef struct wtensor {
    char *name;
    size_t name_len;
    uint32_t n_dims;
    int64_t ne[KN_MAX_DIMS];
    kn_dtype type;
    uint64_t row_bytes;
    int64_t n_rows;
    uint64_t nbytes;
    uint8_t *data; /* owned copy, or NULL when fill is set */
    kn_gguf_fill_fn fill;
    void *user;
    uint64_t offset; /* assigned at write time */
} wtensor;

typedef struct key_ref {
    uint64_t off; /* offset of the key's bytes in meta */
    uint64_t len;
} key_ref;

struct kn_gguf_writer {
    uint8_t *meta; /* serialized key/values */
    uint64_t meta_len, meta_cap;
    key_ref *keys;
    uint64_t n_kv, keys_cap;
    wtensor *tensors;
    uint64_t n_tensors, tensors_cap;
    uint32_t alignment;
    bool alignment_set;
    bool writing_alignment; /* kn_gguf_writer_set_alignment is adding the key */
};

/* ---- growable storage -------------------------------------------------------------------------- */

/* Grows *p (an array of *cap elements of size elem) so that it holds at least need elements, never
 * beyond max elements. */
static kiln_status grow(void **p, uint64_t *cap, uint64_t need, size_t elem, uint64_t max, const char *what) {
    if (need <= *cap) return KILN_OK;
    if (need > max)
        return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: too many %s (limit %llu)", what, (unsigned long long)max);
    uint64_t ncap = *cap ? *cap : 16;
    while (ncap < need) ncap = ncap > max / 2 ? max : ncap * 2;
    uint64_t bytes;
    if (!kn_mul_ok(ncap, elem, &bytes) || bytes > SIZE_MAX)
        return kn_error(KILN_ERR_NOMEM, "gguf writer: %s buffer size overflows", what);
    void *np = realloc(*p, (size_t)bytes);
    if (!np)
        return kn_error(KILN_ERR_NOMEM, "gguf writer: out of memory growing %s to %llu bytes", what,
                        (unsigned long long)bytes);
    *p = np;
    *cap = ncap;
    return KILN_OK;
}

static kiln_status meta_put(kn_gguf_writer *w, const void *src, uint64_t n) {
    uint64_t need;
    if (!kn_add_ok(w->meta_len, n, &need) || need > KN_GGUFW_MAX_META_BYTES)
        return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: metadata exceeds the %llu-byte limit",
                        (unsigned long long)KN_GGUFW_MAX_META_BYTES);
    void *p = w->meta;
    kiln_status st = grow(&p, &w->meta_cap, need, 1, KN_GGUFW_MAX_META_BYTES, "metadata bytes");
    w->meta = p;
    if (st) return st;
    if (n) memcpy(w->meta + w->meta_len, src, (size_t)n);
    w->meta_len = need;
    return KILN_OK;
}

static kiln_status meta_u32(kn_gguf_writer *w, uint32_t v) { return meta_put(w, &v, 4); }
static kiln_status meta_u64(kn_gguf_writer *w, uint64_t v) { return meta_put(w, &v, 8); }
static kiln_status meta_str(kn_gguf_writer *w, const char *s, uint64_t len) {
    kiln_status st = meta_u64(w, len);
    return st ? st : meta_put(w, s, len);
}

/* ---- lifecycle --------------------------------------------------------------------------------- */

kiln_status kn_gguf_writer_create(kn_gguf_writer **out) {
    *out = NULL;
    kn_gguf_writer *w = kn_calloc(1, sizeof *w);
    if (!w) return KILN_ERR_NOMEM;
    w->alignment = GGUFW_DEFAULT_ALIGNMENT;
    *out = w;
    return KILN_OK;
}

void kn_gguf_writer_free(kn_gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    free(w->keys);
    free(w->meta);
    free(w);
}

/* ---- metadata ---------------------------------------------------------------------------------- */

/* Validates key, checks it is new, and appends its serialized form and value type. On failure the
 * metadata buffer is restored to its previous length by the caller (see kv_end). */
static kiln_status kv_begin(kn_gguf_writer *w, const char *key, kn_gguf_type type, uint64_t *mark) {
    *mark = w->meta_len;
    if (!key) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: NULL key");
    size_t len = strlen(key);
    if (len == 0 || len > KN_GGUFW_MAX_KEY_LEN)
        return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: metadata key of invalid length %zu", len);
    /* the alignment must agree with the offsets the writer computes, so it has its own setter */
    if (!w->writing_alignment && strcmp(key, "general.alignment") == 0)
        return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: set general.alignment with kn_gguf_writer_set_alignment "
                                              "(a uint32 power of two)");
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (w->keys[i].len == len && memcmp(w->meta + w->keys[i].off, key, len) == 0)
            return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: duplicate metadata key '%s'", key);
    if (w->n_kv >= KN_GGUFW_MAX_KV)
        return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: more than %d metadata keys", KN_GGUFW_MAX_KV);
    void *p = w->keys;
    kiln_status st = grow(&p, &w->keys_cap, w->n_kv + 1, sizeof *w->keys, KN_GGUFW_MAX_KV, "metadata keys");
    w->keys = p;
    if (st) return st;
    if ((st = meta_str(w, key, len))) return st;
    return meta_u32(w, (uint32_t)type);
}

/* Commits the key/value started at mark when st is OK, else rolls the buffer back. */
static kiln_status kv_end(kn_gguf_writer *w, uint64_t mark, kiln_status st) {
    if (st) {
        w->meta_len = mark;
        return st;
    }
    w->keys[w->n_kv].off = mark + 8;
    w->keys[w->n_kv].len = 0;
    memcpy(&w->keys[w->n_kv].len, w->meta + mark, 8);
    w->n_kv++;
    return KILN_OK;
}

static kiln_status set_scalar(kn_gguf_writer *w, const char *key, kn_gguf_type t, const void *v) {
    uint64_t mark = 0;
    if (!w) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: NULL writer");
    kiln_status st = kv_begin(w, key, t, &mark);
    if (!st) st = meta_put(w, v, kn_gguf_type_size(t));
    return kv_end(w, mark, st);
}

kiln_status kn_gguf_writer_set_u8(kn_gguf_writer *w, const char *key, uint8_t v) {
    return set_scalar(w, key, KN_GGUF_UINT8, &v);
}
kiln_status kn_gguf_writer_set_i8(kn_gguf_writer *w, const char *key, int8_t v) {
    return set_scalar(w, key, KN_GGUF_INT8, &v);
}
kiln_status kn_gguf_writer_set_u16(kn_gguf_writer *w, const char *key, uint16_t v) {
    return set_scalar(w, key, KN_GGUF_UINT16, &v);
}
kiln_status kn_gguf_writer_set_i16(kn_gguf_writer *w, const char *key, int16_t v) {
    return set_scalar(w, key, KN_GGUF_INT16, &v);
}
kiln_status kn_gguf_writer_set_u32(kn_gguf_writer *w, const char *key, uint32_t v) {
    if (key && strcmp(key, "general.alignment") == 0) return kn_gguf_writer_set_alignment(w, v);
    return set_scalar(w, key, KN_GGUF_UINT32, &v);
}
kiln_status kn_gguf_writer_set_i32(kn_gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, KN_GGUF_INT32, &v);
}
kiln_status kn_gguf_writer_set_f32(kn_gguf_writer *w, const char *key, float v) {
    return set_scalar(w, key, KN_GGUF_FLOAT32, &v);
}
kiln_status kn_gguf_writer_set_bool(kn_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return set_scalar(w, key, KN_GGUF_BOOL, &b);
}
kiln_status kn_gguf_writer_set_u64(kn_gguf_writer *w, const char *key, uint64_t v) {
    return set_scalar(w, key, KN_GGUF_UINT64, &v);
}
kiln_status kn_gguf_writer_set_i64(kn_gguf_writer *w, const char *key, int64_t v) {
    return set_scalar(w, key, KN_GGUF_INT64, &v);
}
kiln_status kn_gguf_writer_set_f64(kn_gguf_writer *w, const char *key, double v) {
    return set_scalar(w, key, KN_GGUF_FLOAT64, &v);
}

kiln_status kn_gguf_writer_set_strn(kn_gguf_writer *w, const char *key, const char *s, size_t len) {
    uint64_t mark = 0;
    if (!w) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: NULL writer");
    if (!s && len) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: NULL string for key '%s'", key ? key : "");
    kiln_status st = kv_begin(w, key, KN_GGUF_STRING, &mark);
    if (!st) st = meta_str(w, s, len);
    return kv_end(w, mark, st);
}

kiln_status kn_gguf_writer_set_str(kn_gguf_writer *w, const char *key, const char *s) {
    if (!s) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: NULL string for key '%s'", key ? key : "");
    return kn_gguf_writer_set_strn(w, key, s, strlen(s));
}

kiln_status kn_gguf_writer_set_arr(kn_gguf_writer *w, const char *key, kn_gguf_type elem_type, const void *data,
                                   uint64_t n) {
    uint64_t mark = 0, bytes;
    if (!w) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: NULL writer");
    size_t es = kn_gguf_type_size(elem_type);
    if (es == 0)
        return kn_error(KILN_ERR_INVALID_ARG,
                        "gguf writer: key '%s': arrays of type %d must use a scalar type "
                        "(string arrays: kn_gguf_writer_set_arr_str)",
                        key ? key : "", (int)elem_type);
    if (!kn_mul_ok(n, es, &bytes) || bytes > KN_GGUFW_MAX_META_BYTES)
        return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: key '%s': array of %llu elements is too large",
                        key ? key : "", (unsigned long long)n);
    if (!data && n) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: key '%s': NULL array data", key ? key : "");
    kiln_status st = kv_begin(w, key, KN_GGUF_ARRAY, &mark);
    if (!st) st = meta_u32(w, (uint32_t)elem_type);
    if (!st) st = meta_u64(w, n);
    if (!st && elem_type == KN_GGUF_BOOL) {
        /* normalize to 0/1 bytes */
        const uint8_t *b = data;
        for (uint64_t i = 0; i < n && !st; i++) {
            uint8_t v = b[i] ? 1 : 0;
            st = meta_put(w, &v, 1);
        }
    } else if (!st) {
        st = meta_put(w, data, bytes);
    }
    return kv_end(w, mark, st);
}

kiln_status kn_gguf_writer_set_arr_str(kn_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    uint64_t mark = 0;
    if (!w) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: NULL writer");
    if (!strs && n) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: key '%s': NULL string array", key ? key : "");
    for (uint64_t i = 0; i < n; i++)
        if (!strs[i])
            return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: key '%s': string %llu is NULL", key ? key : "",
                            (unsigned long long)i);
    kiln_status st = kv_begin(w, key, KN_GGUF_ARRAY, &mark);
    if (!st) st = meta_u32(w, (uint32_t)KN_GGUF_STRING);
    if (!st) st = meta_u64(w, n);
    for (uint64_t i = 0; i < n && !st; i++) st = meta_str(w, strs[i], strlen(strs[i]));
    return kv_end(w, mark, st);
}

kiln_status kn_gguf_writer_set_alignment(kn_gguf_writer *w, uint32_t alignment) {
    if (!w) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: NULL writer");
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > GGUFW_MAX_ALIGNMENT)
        return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: alignment %u is not a power of two from 1 to %u", alignment,
                        GGUFW_MAX_ALIGNMENT);
    if (w->alignment_set) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: general.alignment is already set");
    w->writing_alignment = true;
    kiln_status st = set_scalar(w, "general.alignment", KN_GGUF_UINT32, &alignment);
    w->writing_alignment = false;
    if (st) return st;
    w->alignment = alignment;
    w->alignment_set = true;
    return KILN_OK;
}

/* ---- tensors ----------------------------------------------------------------------------------- */

/* Checks a shape and type; on success sets *row_bytes, *n_rows and *nbytes. */
static kiln_status check_shape(const char *name, uint32_t n_dims, const int64_t *ne, kn_dtype type, uint64_t *row_bytes,
                               int64_t *n_rows, uint64_t *nbytes) {
    if (n_dims < 1 || n_dims > KN_MAX_DIMS || !ne)
        return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: tensor '%s' has %u dimensions (1 to %d allowed)", name,
                        n_dims, KN_MAX_DIMS);
    /* kiln's own types (MLX8...) exist only in memory: no file may hold them */
    const kn_type_traits *tr = (int32_t)type < KN_DTYPE_FILE_COUNT ? kn_type_traits_get((int32_t)type) : NULL;
    if (!tr)
        return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: tensor '%s' has unsupported type %s", name,
                        kn_dtype_name((int32_t)type));
    uint64_t rows = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 1)
            return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: tensor '%s' dimension %u is %lld", name, d,
                            (long long)ne[d]);
        if (d > 0 && (!kn_mul_ok(rows, (uint64_t)ne[d], &rows) || rows > (uint64_t)INT64_MAX))
            return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: tensor '%s' element count overflows", name);
    }
    if (ne[0] % tr->block_size != 0)
        return kn_error(KILN_ERR_INVALID_ARG,
                        "gguf writer: tensor '%s': row length %lld is not a multiple of the %s block size %d", name,
                        (long long)ne[0], tr->name, tr->block_size);
    uint64_t rb, total, nelem;
    if (!kn_mul_ok((uint64_t)(ne[0] / tr->block_size), tr->block_bytes, &rb) || !kn_mul_ok(rb, rows, &total) ||
        !kn_mul_ok((uint64_t)ne[0], rows, &nelem) || nelem > (uint64_t)INT64_MAX || total > (uint64_t)INT64_MAX)
        return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: tensor '%s' byte size overflows", name);
    *row_bytes = rb;
    *n_rows = (int64_t)rows;
    *nbytes = total;
    return KILN_OK;
}

uint64_t kn_gguf_writer_tensor_bytes(uint32_t n_dims, const int64_t *ne, kn_dtype type) {
    uint64_t rb, nb;
    int64_t rows;
    char msg[KN_ERRMSG_MAX];
    kn_error_save(msg); /* a size query must not clobber the caller's error message */
    kiln_status st = check_shape("?", n_dims, ne, type, &rb, &rows, &nb);
    if (st) {
        kn_error(KILN_OK, "%s", msg);
        return 0;
    }
    return nb;
}

static kiln_status add_tensor(kn_gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne, kn_dtype type,
                              const void *data, kn_gguf_fill_fn fill, void *user) {
    if (!w || !name) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: NULL writer or tensor name");
    size_t nl = strlen(name);
    if (nl == 0 || nl > KN_GGUFW_MAX_NAME_LEN)
        return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: tensor name of invalid length %zu", nl);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (w->tensors[i].name_len == nl && memcmp(w->tensors[i].name, name, nl) == 0)
            return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: duplicate tensor name '%s'", name);
    wtensor t;
    memset(&t, 0, sizeof t);
    kiln_status st = check_shape(name, n_dims, ne, type, &t.row_bytes, &t.n_rows, &t.nbytes);
    if (st) return st;
    if (!data && !fill) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: tensor '%s' has no data", name);
    if (t.nbytes > SIZE_MAX && data)
        return kn_error(KILN_ERR_NOMEM, "gguf writer: tensor '%s' is too large to copy", name);
    void *p = w->tensors;
    st = grow(&p, &w->tensors_cap, w->n_tensors + 1, sizeof *w->tensors, KN_GGUFW_MAX_TENSORS, "tensors");
    w->tensors = p;
    if (st) return st;
    t.name = kn_strdup(name);
    if (!t.name) return KILN_ERR_NOMEM;
    t.name_len = nl;
    t.n_dims = n_dims;
    for (int d = 0; d < KN_MAX_DIMS; d++) t.ne[d] = d < (int)n_dims ? ne[d] : 1;
    t.type = type;
    if (data) {
        t.data = malloc(t.nbytes ? (size_t)t.nbytes : 1);
        if (!t.data) {
            free(t.name);
            return kn_error(KILN_ERR_NOMEM, "gguf writer: out of memory copying tensor '%s' (%llu bytes)", name,
                            (unsigned long long)t.nbytes);
        }
        memcpy(t.data, data, (size_t)t.nbytes);
    } else {
        t.fill = fill;
        t.user = user;
    }
    w->tensors[w->n_tensors++] = t;
    return KILN_OK;
}

kiln_status kn_gguf_writer_add_tensor(kn_gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne,
                                      kn_dtype type, const void *data) {
    if (!data) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: tensor '%s' has NULL data", name ? name : "");
    return add_tensor(w, name, n_dims, ne, type, data, NULL, NULL);
}

kiln_status kn_gguf_writer_add_tensor_fn(kn_gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne,
                                         kn_dtype type, kn_gguf_fill_fn fill, void *user) {
    if (!fill) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: tensor '%s' has no fill callback", name ? name : "");
    return add_tensor(w, name, n_dims, ne, type, NULL, fill, user);
}

/* ---- output ------------------------------------------------------------------------------------ */

typedef struct outbuf {
    int fd;
    const char *path;
    uint8_t *buf;
    size_t len;
    uint64_t written; /* bytes handed to out_put so far (the file position) */
} outbuf;

static kiln_status out_flush(outbuf *o) {
    size_t done = 0;
    while (done < o->len) {
        ssize_t n = write(o->fd, o->buf + done, o->len - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            return kn_error(KILN_ERR_IO, "cannot write '%s': %s", o->path, strerror(errno));
        }
        done += (size_t)n;
    }
    o->len = 0;
    return KILN_OK;
}

static kiln_status out_put(outbuf *o, const void *src, uint64_t n) {
    const uint8_t *s = src;
    o->written += n;
    while (n > 0) {
        if (o->len == GGUFW_OUTBUF_BYTES) {
            kiln_status st = out_flush(o);
            if (st) return st;
        }
        size_t k = (size_t)KN_MIN(n, (uint64_t)(GGUFW_OUTBUF_BYTES - o->len));
        memcpy(o->buf + o->len, s, k);
        o->len += k;
        s += k;
        n -= k;
    }
    return KILN_OK;
}

static kiln_status out_zeros(outbuf *o, uint64_t n) {
    static const uint8_t zeros[256];
    while (n > 0) {
        uint64_t k = KN_MIN(n, (uint64_t)sizeof zeros);
        kiln_status st = out_put(o, zeros, k);
        if (st) return st;
        n -= k;
    }
    return KILN_OK;
}

static uint64_t pad_to(uint64_t x, uint64_t al) { return (al - x % al) % al; }

/* Writes the whole file body to o. */
static kiln_status write_body(kn_gguf_writer *w, outbuf *o) {
    kiln_status st;
    const uint64_t al = w->alignment;
    /* assign offsets */
    uint64_t cur = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        t->offset = cur;
        if (!kn_add_ok(cur, t->nbytes, &cur) || !kn_add_ok(cur, pad_to(cur, al), &cur))
            return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: total tensor data size overflows");
    }
    uint32_t version = GGUFW_VERSION;
    uint64_t n_tensors = w->n_tensors, n_kv = w->n_kv;
    if ((st = out_put(o, "GGUF", 4)) || (st = out_put(o, &version, 4)) || (st = out_put(o, &n_tensors, 8)) ||
        (st = out_put(o, &n_kv, 8)) || (st = out_put(o, w->meta, w->meta_len)))
        return st;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        uint64_t nl = t->name_len;
        uint32_t type = (uint32_t)t->type;
        if ((st = out_put(o, &nl, 8)) || (st = out_put(o, t->name, nl)) || (st = out_put(o, &t->n_dims, 4))) return st;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne = (uint64_t)t->ne[d];
            if ((st = out_put(o, &ne, 8))) return st;
        }
        if ((st = out_put(o, &type, 4)) || (st = out_put(o, &t->offset, 8))) return st;
    }
    if ((st = out_zeros(o, pad_to(o->written, al)))) return st;
    const uint64_t data_start = o->written;

    /* one chunk buffer for every callback tensor: the largest chunk any of them needs */
    uint64_t chunk_cap = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        if (!t->fill) continue;
        uint64_t rows = KN_MAX((uint64_t)1, GGUFW_CHUNK_BYTES / KN_MAX(t->row_bytes, (uint64_t)1));
        rows = KN_MIN(rows, (uint64_t)t->n_rows);
        chunk_cap = KN_MAX(chunk_cap, rows * t->row_bytes);
    }
    if (chunk_cap > SIZE_MAX) return kn_error(KILN_ERR_NOMEM, "gguf writer: a single tensor row is too large");
    uint8_t *chunk = NULL;
    if (chunk_cap) {
        chunk = kn_alloc_aligned((size_t)chunk_cap);
        if (!chunk) return KILN_ERR_NOMEM;
    }
    st = KILN_OK;
    for (uint64_t i = 0; i < w->n_tensors && !st; i++) {
        const wtensor *t = &w->tensors[i];
        if (o->written != data_start + t->offset) {
            st = kn_error(KILN_ERR_INTERNAL, "gguf writer: tensor '%s' lands at the wrong offset", t->name);
            break;
        }
        if (t->data) {
            st = out_put(o, t->data, t->nbytes);
        } else {
            uint64_t rows_per = KN_MAX((uint64_t)1, chunk_cap / KN_MAX(t->row_bytes, (uint64_t)1));
            for (int64_t r = 0; r < t->n_rows && !st; r += (int64_t)rows_per) {
                int64_t n = (int64_t)KN_MIN(rows_per, (uint64_t)(t->n_rows - r));
                st = t->fill(t->user, r, n, chunk);
                if (st) {
                    if (!kn_error_msg()[0]) kn_error(st, "gguf writer: producing tensor '%s' failed", t->name);
                    break;
                }
                st = out_put(o, chunk, (uint64_t)n * t->row_bytes);
            }
        }
        if (!st) st = out_zeros(o, pad_to(o->written, al));
    }
    kn_free_aligned(chunk);
    return st;
}

kiln_status kn_gguf_writer_write(kn_gguf_writer *w, const char *path) {
    if (!w || !path || !*path) return kn_error(KILN_ERR_INVALID_ARG, "gguf writer: no output path");
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 5);
    if (!tmp) return kn_error(KILN_ERR_NOMEM, "gguf writer: out of memory");
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".tmp", 5);
    outbuf o = {.fd = -1, .path = tmp};
    o.buf = malloc(GGUFW_OUTBUF_BYTES);
    if (!o.buf) {
        free(tmp);
        return kn_error(KILN_ERR_NOMEM, "gguf writer: out of memory");
    }
    kiln_status st = KILN_OK;
    o.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o.fd < 0) {
        st = kn_error(KILN_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
        goto done;
    }
    kn_error_clear();
    st = write_body(w, &o);
    if (!st) st = out_flush(&o);
    if (!st && fsync(o.fd) != 0) st = kn_error(KILN_ERR_IO, "cannot sync '%s': %s", tmp, strerror(errno));
    if (close(o.fd) != 0 && !st) st = kn_error(KILN_ERR_IO, "cannot close '%s': %s", tmp, strerror(errno));
    o.fd = -1;
    if (!st && rename(tmp, path) != 0)
        st = kn_error(KILN_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (st) unlink(tmp);
done:
    free(o.buf);
    free(tmp);
    return st;
}

/*
 * kv.c - per-row key/value cache storage (see kv.h): formats of the public KV types, sizes, the
 * store of a position (rotation, then the format's quantizer) and attention over a row's cache
 * (query rotation, the kernel set's kernel for the format, output rotation).
 */
#include "cache/kv.h"

#include "tensor/hadamard.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *kiln_kv_type_name(kiln_kv_type type) {
    const kn_kvq_traits *t = (int)type >= 0 ? kn_kvq_traits_get((kn_kvt)type) : NULL;
    return t ? t->name : NULL;
}

static char g_list[256];
static pthread_once_t g_list_once = PTHREAD_ONCE_INIT;

static void build_list(void) {
    size_t n = 0;
    for (int t = 0; t < KN_KVT_COUNT; t++)
        n += (size_t)snprintf(g_list + n, sizeof g_list - n, "%s%s", t ? ", " : "", kn_kvq_traits_get((kn_kvt)t)->name);
}

const char *kiln_kv_type_list(void) {
    pthread_once(&g_list_once, build_list);
    return g_list;
}

kiln_status kiln_kv_type_parse(const char *name, kiln_kv_type *out) {
    for (int t = 0; name && t < KN_KVT_COUNT; t++)
        if (strcasecmp(name, kn_kvq_traits_get((kn_kvt)t)->name) == 0) {
            *out = (kiln_kv_type)t;
            return KILN_OK;
        }
    return kn_error(KILN_ERR_INVALID_ARG, "unknown KV type '%s' (types: %s)", name ? name : "", kiln_kv_type_list());
}

static bool rotates(kn_kvt t, kiln_kv_rotation rot) {
    const kn_kvq_rot r = kn_kvq_traits_get(t)->rot;
    return r == KN_KVQ_ROT_ALWAYS || (rot == KILN_KV_ROTATE_ON) || (rot != KILN_KV_ROTATE_OFF && r == KN_KVQ_ROT_ON);
}

kiln_status kn_kv_format_of(kiln_kv_type k, kiln_kv_type v, kiln_kv_rotation rot, kn_kv_format *out) {
    if (v == KILN_KV_SAME) v = k;
    if (!kiln_kv_type_name(k) || !kiln_kv_type_name(v))
        return kn_error(KILN_ERR_INVALID_ARG, "unknown KV type %d (types: %s)", (int)(kiln_kv_type_name(k) ? v : k),
                        kiln_kv_type_list());
    if (rot != KILN_KV_ROTATE_AUTO && rot != KILN_KV_ROTATE_OFF && rot != KILN_KV_ROTATE_ON)
        return kn_error(KILN_ERR_INVALID_ARG, "unknown KV rotation %d", (int)rot);
    out->k = (kn_kvt)k;
    out->v = (kn_kvt)v;
    out->rot_k = rotates(out->k, rot);
    out->rot_v = rotates(out->v, rot);
    return KILN_OK;
}

kn_kv_format kn_kv_format_plain(kn_dtype type) {
    const kn_kvt t = type == KN_F32 ? KN_KVT_F32 : KN_KVT_F16;
    return (kn_kv_format){.k = t, .v = t};
}

bool kn_kv_format_eq(const kn_kv_format *a, const kn_kv_format *b) {
    return a->k == b->k && a->v == b->v && a->rot_k == b->rot_k && a->rot_v == b->rot_v;
}

uint32_t kn_kv_format_code(const kn_kv_format *f, int32_t head_dim) {
    if (f->k == f->v && !f->rot_k && !f->rot_v && (f->k == KN_KVT_F16 || f->k == KN_KVT_F32))
        return f->k == KN_KVT_F16 ? 1 : 2;
    return (1u + (uint32_t)f->k) | (1u + (uint32_t)f->v) << 8 | (uint32_t)f->rot_k << 16 | (uint32_t)f->rot_v << 17 |
           (uint32_t)head_dim << 18;
}

bool kn_kv_format_decode(uint32_t code, uint32_t kv_dim, kn_kv_format *f, uint64_t *k_row, uint64_t *v_row) {
    uint32_t hd = kv_dim;
    if (code == 1 || code == 2) {
        *f = kn_kv_format_plain(code == 1 ? KN_F16 : KN_F32);
    } else {
        const uint32_t k = (code & 255) - 1, v = (code >> 8 & 255) - 1;
        hd = code >> 18;
        if (k >= KN_KVT_COUNT || v >= KN_KVT_COUNT) return false;
        *f = (kn_kv_format){.k = (kn_kvt)k, .v = (kn_kvt)v, .rot_k = code >> 16 & 1, .rot_v = code >> 17 & 1};
    }
    if (!hd || !kv_dim || kv_dim % hd || kv_dim / hd > INT32_MAX) return false;
    *k_row = kn_kv_row_bytes(f->k, (int32_t)(kv_dim / hd), (int32_t)hd);
    *v_row = kn_kv_row_bytes(f->v, (int32_t)(kv_dim / hd), (int32_t)hd);
    return *k_row && *v_row && *k_row != UINT64_MAX && *v_row != UINT64_MAX &&
           kn_kv_format_code(f, (int32_t)hd) == code;
}

uint64_t kn_kv_row_bytes(kn_kvt t, int32_t n_head_kv, int32_t head_dim) {
    if (n_head_kv <= 0 || head_dim <= 0 || (unsigned)t >= KN_KVT_COUNT) return 0;
    uint64_t b;
    return kn_mul_ok(kn_kvq_head_bytes(t, head_dim), (uint64_t)n_head_kv, &b) ? b : UINT64_MAX;
}

uint64_t kn_kv_bytes_per_token_fmt(const kn_kv_format *f, int32_t n_layer, int32_t n_head_kv, int32_t head_dim) {
    const uint64_t k = kn_kv_row_bytes(f->k, n_head_kv, head_dim), v = kn_kv_row_bytes(f->v, n_head_kv, head_dim);
    if (n_layer <= 0 || !k || !v) return 0;
    uint64_t row, b;
    if (!kn_add_ok(k, v, &row) || !kn_mul_ok(row, (uint64_t)n_layer, &b)) return UINT64_MAX;
    return b;
}

size_t kn_kv_block_bytes(const kn_kv_format *f, int32_t n_layer, int32_t n_head_kv, int32_t head_dim, int32_t bt) {
    const uint64_t k = kn_kv_row_bytes(f->k, n_head_kv, head_dim), v = kn_kv_row_bytes(f->v, n_head_kv, head_dim);
    uint64_t kb, vb;
    if (!k || !v || n_layer <= 0 || bt <= 0 || !kn_mul_ok(k * (uint64_t)n_layer, (uint64_t)bt, &kb) ||
        !kn_mul_ok(v * (uint64_t)n_layer, (uint64_t)bt, &vb) || kb > SIZE_MAX / 4 || vb > SIZE_MAX / 4)
        return 0;
    return (size_t)((kb + 63) / 64 * 64 + (vb + 63) / 64 * 64);
}

/* The shape fields of kv for format f (everything but the block table); its status. */
static kiln_status set_shape(kn_kv *kv, const kn_kv_format *f, int32_t n_layer, int32_t n_ctx, int32_t n_head_kv,
                             int32_t head_dim, int32_t bt) {
    memset(kv, 0, sizeof *kv);
    if ((unsigned)f->k >= KN_KVT_COUNT || (unsigned)f->v >= KN_KVT_COUNT)
        return kn_error(KILN_ERR_INVALID_ARG, "unknown KV format");
    if (n_layer <= 0 || n_ctx <= 0 || n_head_kv <= 0 || head_dim <= 0)
        return kn_error(KILN_ERR_INVALID_ARG, "KV cache of %d layers, %d positions, %d x %d elements", n_layer, n_ctx,
                        n_head_kv, head_dim);
    if ((f->rot_k || f->rot_v) && head_dim > KN_KV_MAX_ROT_HD)
        return kn_error(KILN_ERR_INVALID_ARG, "a rotated KV cache takes heads of at most %d elements (not %d)",
                        KN_KV_MAX_ROT_HD, head_dim);
    kv->fmt = *f;
    kv->n_layer = n_layer;
    kv->n_ctx = n_ctx;
    kv->n_head_kv = n_head_kv;
    kv->head_dim = head_dim;
    kv->kv_dim = n_head_kv * head_dim;
    kv->k_head = kn_kvq_head_bytes(f->k, head_dim);
    kv->v_head = kn_kvq_head_bytes(f->v, head_dim);
    kv->k_elt = kv->k_head % (size_t)head_dim == 0 && f->k <= KN_KVT_BF16 ? kv->k_head / (size_t)head_dim : 0;
    kv->v_elt = kv->v_head % (size_t)head_dim == 0 && f->v <= KN_KVT_BF16 ? kv->v_head / (size_t)head_dim : 0;
    kv->k_row = kv->k_head * (size_t)n_head_kv;
    kv->v_row = kv->v_head * (size_t)n_head_kv;
    kv->bt = bt;
    kv->n_blk = (int32_t)(((int64_t)n_ctx + bt - 1) / bt);
    kv->blk_bytes = kn_kv_block_bytes(f, n_layer, n_head_kv, head_dim, bt);
    uint64_t bytes;
    if (!kv->blk_bytes ||
        !kn_mul_ok(kn_kv_bytes_per_token_fmt(f, n_layer, n_head_kv, head_dim), (uint64_t)n_ctx, &bytes) ||
        bytes > SIZE_MAX / 2)
        return kn_error(KILN_ERR_NOMEM, "KV cache size overflows");
    kv->k_blk = ((size_t)n_layer * (size_t)bt * kv->k_row + 63) / 64 * 64;
    kv->blk = kn_calloc((size_t)kv->n_blk, sizeof *kv->blk);
    if (f->rot_k || f->rot_v) {
        kv->signs = malloc((size_t)n_layer * (size_t)kv->kv_dim * sizeof *kv->signs);
        if (kv->signs)
            for (int32_t l = 0; l < n_layer; l++)
                for (int32_t g = 0; g < n_head_kv; g++)
                    kn_hadamard_signs(KN_KV_ROT_SEED, l, g, head_dim,
                                      kv->signs + ((size_t)l * (size_t)n_head_kv + (size_t)g) * (size_t)head_dim);
    }
    if (!kv->blk || ((f->rot_k || f->rot_v) && !kv->signs)) {
        kn_kv_free(kv);
        return kn_error(KILN_ERR_NOMEM, "out of memory for a KV cache's tables");
    }
    return KILN_OK;
}

kiln_status kn_kv_init_fmt(kn_kv *kv, const kn_kv_format *f, int32_t n_layer, int32_t n_ctx, int32_t n_head_kv,
                           int32_t head_dim) {
    kiln_status st = set_shape(kv, f, n_layer, n_ctx, n_head_kv, head_dim, n_ctx);
    if (st) return st;
    kv->blk[0] = kn_alloc_aligned(kv->blk_bytes);
    if (!kv->blk[0]) {
        const double mib = (double)kv->blk_bytes / 1048576.0;
        kn_kv_free(kv);
        return kn_error(KILN_ERR_NOMEM, "cannot allocate a KV cache of %.1f MiB (%d positions); try a smaller -c", mib,
                        n_ctx);
    }
    kv->k = kv->blk[0];
    kv->v = kv->blk[0] + kv->k_blk;
    kv->bytes = (size_t)kn_kv_bytes_per_token_fmt(f, n_layer, n_head_kv, head_dim) * (size_t)n_ctx;
    return KILN_OK;
}

kiln_status kn_kv_init_paged(kn_kv *kv, kn_kv_pool *pool, const kn_kv_format *f, int32_t n_layer, int32_t n_ctx,
                             int32_t n_head_kv, int32_t head_dim) {
    kiln_status st = set_shape(kv, f, n_layer, n_ctx, n_head_kv, head_dim, pool->bt);
    if (st) return st;
    if (kv->blk_bytes != pool->blk_bytes) {
        kn_kv_free(kv);
        return kn_error(KILN_ERR_INVALID_ARG, "a KV pool of blocks of %zu bytes for a cache of %zu-byte blocks",
                        pool->blk_bytes, kn_kv_block_bytes(f, n_layer, n_head_kv, head_dim, pool->bt));
    }
    kv->ids = malloc((size_t)kv->n_blk * sizeof *kv->ids);
    if (!kv->ids) {
        kn_kv_free(kv);
        return kn_error(KILN_ERR_NOMEM, "out of memory for a KV block table");
    }
    for (int32_t i = 0; i < kv->n_blk; i++) kv->ids[i] = -1;
    kv->pool = pool;
    return KILN_OK;
}

/* Drops every block of a paged cache. */
static void unmap_all(kn_kv *kv) {
    for (int32_t i = 0; i < kv->n_blk; i++)
        if (kv->ids[i] >= 0) {
            kn_kvp_unref(kv->pool, kv->ids[i]);
            kv->ids[i] = -1;
            kv->blk[i] = NULL;
        }
}

void kn_kv_reset(kn_kv *kv) {
    kv->n_past = 0;
    if (kv->pool) unmap_all(kv);
}

void kn_kv_set_quota(kn_kv *kv, int32_t n) {
    if (!kv->pool) return;
    kn_kvp_unreserve(kv->pool, kv->quota);
    kv->quota = n;
}

kiln_status kn_kv_prepare(kn_kv *kv, int32_t p0, int32_t n) {
    if (p0 < 0 || n < 0 || p0 > kv->n_ctx - n)
        return kn_error(KILN_ERR_INVALID_ARG, "KV positions %d .. %d are outside the cache of %d", p0, p0 + n,
                        kv->n_ctx);
    if (!kv->pool || n == 0) return KILN_OK;
    for (int32_t b = p0 / kv->bt; b <= (p0 + n - 1) / kv->bt; b++) {
        const int32_t old = kv->ids[b];
        if (old >= 0 && kn_kvp_refs(kv->pool, old) == 1) continue; /* its own */
        const bool res = kv->quota > 0;
        const int32_t id = old >= 0 ? kn_kvp_cow(kv->pool, old, res) : kn_kvp_alloc(kv->pool, res);
        if (id < 0) return kn_error(KILN_ERR_BUSY, "the KV pool is out of blocks (%d in all)", kv->pool->cap);
        if (res) kv->quota--;
        kv->ids[b] = id;
        kv->blk[b] = kn_kvp_data(kv->pool, id);
    }
    return KILN_OK;
}

void kn_kv_map(kn_kv *kv, const int32_t *ids, int32_t m) {
    unmap_all(kv);
    for (int32_t b = 0; b < (m + kv->bt - 1) / kv->bt; b++) {
        kn_kvp_ref(kv->pool, ids[b]);
        kv->ids[b] = ids[b];
        kv->blk[b] = kn_kvp_data(kv->pool, ids[b]);
    }
    kv->n_past = m;
}

int32_t kn_kv_blocks_mapped(const kn_kv *kv) {
    int32_t n = 0;
    for (int32_t i = 0; kv->pool && i < kv->n_blk; i++) n += kv->ids[i] >= 0;
    return n;
}

void kn_kv_get_rows(const kn_kv *kv, int32_t m, uint8_t *k, size_t k_stride, uint8_t *v, size_t v_stride) {
    for (int32_t l = 0; l < kv->n_layer; l++)
        for (int32_t p = 0; p < m;) { /* one run per block */
            const int32_t run = KN_MIN(m - p, kv->bt - p % kv->bt);
            memcpy(k + (size_t)l * k_stride + (size_t)p * kv->k_row, kn_kv_k_at(kv, l, p, 0), (size_t)run * kv->k_row);
            memcpy(v + (size_t)l * v_stride + (size_t)p * kv->v_row, kn_kv_v_at(kv, l, p, 0), (size_t)run * kv->v_row);
            p += run;
        }
}

kiln_status kn_kv_put_rows(kn_kv *kv, int32_t m, const uint8_t *k, size_t k_stride, const uint8_t *v, size_t v_stride) {
    kiln_status st = kn_kv_prepare(kv, 0, m);
    if (st) return st;
    for (int32_t l = 0; l < kv->n_layer; l++)
        for (int32_t p = 0; p < m;) {
            const int32_t run = KN_MIN(m - p, kv->bt - p % kv->bt);
            memcpy((void *)kn_kv_k_at(kv, l, p, 0), k + (size_t)l * k_stride + (size_t)p * kv->k_row,
                   (size_t)run * kv->k_row);
            memcpy((void *)kn_kv_v_at(kv, l, p, 0), v + (size_t)l * v_stride + (size_t)p * kv->v_row,
                   (size_t)run * kv->v_row);
            p += run;
        }
    kv->n_past = m;
    return KILN_OK;
}

kiln_status kn_kv_init(kn_kv *kv, kn_dtype type, int32_t n_layer, int32_t n_ctx, int32_t kv_dim) {
    if (type != KN_F16 && type != KN_F32) {
        memset(kv, 0, sizeof *kv);
        return kn_error(KILN_ERR_INVALID_ARG, "KV cache type must be F16 or F32");
    }
    const kn_kv_format f = kn_kv_format_plain(type);
    return kn_kv_init_fmt(kv, &f, n_layer, n_ctx, 1, kv_dim);
}

void kn_kv_free(kn_kv *kv) {
    if (kv->pool) {
        kn_kv_reset(kv);
        kn_kv_set_quota(kv, 0);
    } else if (kv->blk) kn_free_aligned(kv->blk[0]);
    free(kv->blk);
    free(kv->ids);
    free(kv->signs);
    memset(kv, 0, sizeof *kv);
}

size_t kn_kv_bytes(const kn_kv *kv) { return kv->bytes; }

static const float *signs_of(const kn_kv *kv, int32_t l, int32_t g) {
    return kv->signs + ((size_t)l * (size_t)kv->n_head_kv + (size_t)g) * (size_t)kv->head_dim;
}

/* Stores src[kv_dim] as the n_head_kv head vectors of row dst in format t, rotated when rot. */
static void put(const kn_kv *kv, int32_t l, kn_kvt t, bool rot, size_t head_bytes, uint8_t *dst, const float *src) {
    const int hd = kv->head_dim;
    float x[KN_KV_MAX_ROT_HD];
    for (int32_t g = 0; g < kv->n_head_kv; g++) {
        const float *h = src + (size_t)g * (size_t)hd;
        if (rot) {
            memcpy(x, h, (size_t)hd * sizeof *x);
            kn_hadamard_fwd(x, signs_of(kv, l, g), hd);
            h = x;
        }
        kn_kvq_store(t, h, dst + (size_t)g * head_bytes, hd);
    }
}

void kn_kv_store(kn_kv *kv, int32_t l, int32_t pos, const float *k, const float *v) {
    put(kv, l, kv->fmt.k, kv->fmt.rot_k, kv->k_head, (uint8_t *)kn_kv_k_at(kv, l, pos, 0), k);
    put(kv, l, kv->fmt.v, kv->fmt.rot_v, kv->v_head, (uint8_t *)kn_kv_v_at(kv, l, pos, 0), v);
}

void kn_kv_attend(const kn_kernels *ks, const kn_kv *kv, int32_t l, int32_t p0, int32_t n, int32_t kv_off, int hd,
                  int nkv, const float *q, int nq, float scale, float cap, float *out) {
    const int32_t off = kv_off, g0 = kv_off / kv->head_dim; /* g0: the first head, when rotated (hd = head_dim) */
    const int nh = nkv * nq;
    float qr[KN_ATTEND_MAX_Q * KN_KV_MAX_ROT_HD];
    if (kv->fmt.rot_k) {
        if ((size_t)nh * (size_t)hd > sizeof qr / sizeof *qr) { /* too many to rotate at once: a head a call */
            for (int g = 0; g < nkv; g++)
                kn_kv_attend(ks, kv, l, p0, n, kv_off + g * hd, hd, 1, q + (size_t)g * nq * hd, nq, scale, cap,
                             out + (size_t)g * nq * hd);
            return;
        }
        memcpy(qr, q, (size_t)nh * (size_t)hd * sizeof *qr);
        for (int h = 0; h < nh; h++) kn_hadamard_fwd(qr + (size_t)h * (size_t)hd, signs_of(kv, l, g0 + h / nq), hd);
        q = qr;
    }
    /* The rows in place, block by block (one block when contiguous). */
    const uint8_t *const *blk = (const uint8_t *const *)kv->blk + p0 / kv->bt;
    const size_t bt = (size_t)kv->bt;
    const size_t koff = kn_kv__off(kv->k_head, kv->k_elt, kv->head_dim, off),
                 voff = kn_kv__off(kv->v_head, kv->v_elt, kv->head_dim, off);
    const kn_attend_rows rows = {.kb = blk,
                                 .vb = blk,
                                 .koff = (size_t)l * bt * kv->k_row + koff,
                                 .voff = kv->k_blk + (size_t)l * bt * kv->v_row + voff,
                                 .kstride = kv->k_row,
                                 .vstride = kv->v_row,
                                 .first = p0 % kv->bt,
                                 .bt = kv->bt,
                                 .nkv = nkv,
                                 .khead = kn_kv__off(kv->k_head, kv->k_elt, kv->head_dim, off + hd) - koff,
                                 .vhead = kn_kv__off(kv->v_head, kv->v_elt, kv->head_dim, off + hd) - voff};
    if (cap > 0 || kv->fmt.k != kv->fmt.v) kn_attend_kv_ref(kv->fmt.k, kv->fmt.v, &rows, n, q, nq, hd, scale, cap, out);
    else kn_kernels_attend(ks, kv->fmt.k)(&rows, n, q, nq, hd, scale, out);
    if (kv->fmt.rot_v)
        for (int h = 0; h < nh; h++) kn_hadamard_inv(out + (size_t)h * (size_t)hd, signs_of(kv, l, g0 + h / nq), hd);
}

const float *kn_kv_query(const kn_kv *kv, int32_t l, int32_t kv_off, int hd, const float *q, float *dst) {
    if (!kv->fmt.rot_k) return q;
    memcpy(dst, q, (size_t)hd * sizeof *dst);
    kn_hadamard_fwd(dst, signs_of(kv, l, kv_off / kv->head_dim), hd);
    return dst;
}

float kn_kv_key_dot(const kn_kv *kv, int32_t l, int32_t pos, int32_t kv_off, int hd, const float *q_stored) {
    const kn_kvq_traits *t = kn_kvq_traits_get(kv->fmt.k);
    const uint8_t *k = kn_kv_k_at(kv, l, pos, kv_off);
    float dot = 0;
    for (int i = 0; i < hd; i++) dot += t->elem(k, i, hd) * q_stored[i];
    return dot;
}

/*
 * kv.c - per-row key/value cache storage (see kv.h).
 */
#include "cache/kv.h"

#include <stdlib.h>
#include <string.h>

kn_dtype kn_kv_dtype(kiln_kv_type type) {
    switch (type) {
        case KILN_KV_F16: return KN_F16;
        case KILN_KV_F32: return KN_F32;
    }
    return KN_DTYPE_COUNT;
}

size_t kn_kv_elt(kn_dtype type) { return type == KN_F16 ? 2 : type == KN_F32 ? 4 : 0; }

uint64_t kn_kv_bytes_per_token(kn_dtype type, int32_t n_layer, int32_t kv_dim) {
    if (n_layer <= 0 || kv_dim <= 0) return 0;
    uint64_t b; /* K and V; the factors are below 2^31, 2^31 and 8, so only the last product can overflow */
    return kn_mul_ok(2 * (uint64_t)n_layer * kn_kv_elt(type), (uint64_t)kv_dim, &b) ? b : UINT64_MAX;
}

kiln_status kn_kv_init(kn_kv *kv, kn_dtype type, int32_t n_layer, int32_t n_ctx, int32_t kv_dim) {
    memset(kv, 0, sizeof *kv);
    if (!kn_kv_elt(type)) return kn_error(KILN_ERR_INVALID_ARG, "KV cache type must be F16 or F32");
    if (n_layer <= 0 || n_ctx <= 0 || kv_dim <= 0)
        return kn_error(KILN_ERR_INVALID_ARG, "KV cache of %d layers, %d positions, %d elements", n_layer, n_ctx,
                        kv_dim);
    kv->type = type;
    kv->n_layer = n_layer;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    kv->elt = kn_kv_elt(type);
    uint64_t bytes; /* K and V together */
    if (!kn_mul_ok(kn_kv_bytes_per_token(type, n_layer, kv_dim), (uint64_t)n_ctx, &bytes) || bytes > SIZE_MAX)
        return kn_error(KILN_ERR_NOMEM, "KV cache size overflows");
    kv->k = kn_alloc_aligned(bytes / 2);
    kv->v = kn_alloc_aligned(bytes / 2);
    if (!kv->k || !kv->v) {
        kn_kv_free(kv);
        return kn_error(KILN_ERR_NOMEM, "cannot allocate a KV cache of 2 x %.1f MiB (%d positions); try a smaller -c",
                        (double)bytes / 2 / 1048576.0, n_ctx);
    }
    kv->bytes = (size_t)bytes;
    return KILN_OK;
}

void kn_kv_free(kn_kv *kv) {
    kn_free_aligned(kv->k);
    kn_free_aligned(kv->v);
    memset(kv, 0, sizeof *kv);
}

size_t kn_kv_bytes(const kn_kv *kv) { return kv->bytes; }

static void put(const kn_kv *kv, uint8_t *dst, const float *src) {
    if (kv->type == KN_F32) {
        memcpy(dst, src, (size_t)kv->kv_dim * 4);
        return;
    }
    uint16_t *h = (uint16_t *)dst;
    for (int32_t i = 0; i < kv->kv_dim; i++) h[i] = kn_fp32_to_fp16(src[i]);
}

void kn_kv_store(kn_kv *kv, int32_t l, int32_t pos, const float *k, const float *v) {
    put(kv, (uint8_t *)kn_kv_k_at(kv, l, pos, 0), k);
    put(kv, (uint8_t *)kn_kv_v_at(kv, l, pos, 0), v);
}

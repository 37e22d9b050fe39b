/*
 * kv.c - per-row key/value cache storage (see kv.h).
 */
#include "cache/kv.h"

#include <stdlib.h>
#include <string.h>

kiln_status kn_kv_init(kn_kv *kv, kn_dtype type, int32_t n_layer, int32_t n_ctx, int32_t kv_dim) {
    memset(kv, 0, sizeof *kv);
    if (type != KN_F16 && type != KN_F32) return kn_error(KILN_ERR_INVALID_ARG, "KV cache type must be F16 or F32");
    kv->type = type;
    kv->n_layer = n_layer;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    kv->elt = type == KN_F16 ? 2 : 4;
    uint64_t bytes;
    if (!kn_mul_ok((uint64_t)n_layer * (uint64_t)n_ctx, (uint64_t)kv_dim * kv->elt, &bytes) || bytes > SIZE_MAX)
        return kn_error(KILN_ERR_NOMEM, "KV cache size overflows");
    kv->k = kn_alloc_aligned(bytes);
    kv->v = kn_alloc_aligned(bytes);
    if (!kv->k || !kv->v) {
        kn_kv_free(kv);
        return kn_error(KILN_ERR_NOMEM, "cannot allocate a KV cache of 2 x %.1f MiB (%d positions); try a smaller -c",
                        (double)bytes / 1048576.0, n_ctx);
    }
    return KILN_OK;
}

void kn_kv_free(kn_kv *kv) {
    kn_free_aligned(kv->k);
    kn_free_aligned(kv->v);
    memset(kv, 0, sizeof *kv);
}

size_t kn_kv_bytes(const kn_kv *kv) {
    return 2 * (size_t)kv->n_layer * (size_t)kv->n_ctx * (size_t)kv->kv_dim * kv->elt;
}

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

/*
 * kv.h - the active key/value cache of one row (one sequence).
 *
 * Layout per tensor: [n_layer][n_ctx][kv_dim] in F16 (default) or F32, where kv_dim =
 * n_head_kv * head_dim and keys are stored after RoPE. A row owns its KV; a batch is several rows,
 * each with its own KV and position (n_past).
 */
#ifndef KN_KV_H
#define KN_KV_H

#include "base/base.h"
#include "tensor/dtype.h"

typedef struct kn_kv {
    kn_dtype type; /* KN_F16 or KN_F32 */
    int32_t n_layer;
    int32_t n_ctx; /* capacity in positions */
    int32_t kv_dim;
    int32_t n_past; /* positions filled */
    size_t elt;     /* bytes per element */
    size_t bytes;   /* bytes allocated for k and v together */
    uint8_t *k, *v; /* [n_layer][n_ctx][kv_dim] */
} kn_kv;

/* The storage type of a public KV type (KN_F16 for KILN_KV_F16, KN_F32 for KILN_KV_F32);
 * KN_DTYPE_COUNT for a value outside the enum. */
kn_dtype kn_kv_dtype(kiln_kv_type type);

/* Bytes of one element of a KV storage type; 0 for a type the KV cache does not store. */
size_t kn_kv_elt(kn_dtype type);

/* The one formula for KV memory: bytes one position takes in the cache of n_layer layers of kv_dim
 * (= n_head_kv * head_dim) elements per position, K and V together. 0 for a type the KV cache does
 * not store or a non-positive size; UINT64_MAX when it overflows. kn_kv_init allocates exactly
 * n_ctx times this. */
uint64_t kn_kv_bytes_per_token(kn_dtype type, int32_t n_layer, int32_t kv_dim);

/* Allocates the cache. KILN_ERR_NOMEM (with the size in the message) on failure. */
kiln_status kn_kv_init(kn_kv *kv, kn_dtype type, int32_t n_layer, int32_t n_ctx, int32_t kv_dim);
void kn_kv_free(kn_kv *kv);
/* Bytes allocated for the cache (K and V together); 0 when not allocated. */
size_t kn_kv_bytes(const kn_kv *kv);

/* Stores k[kv_dim] and v[kv_dim] of layer l at position pos (converting to the cache type). */
void kn_kv_store(kn_kv *kv, int32_t l, int32_t pos, const float *k, const float *v);
/* Raw pointers to the K or V row of (l, pos), head slice starting at element off. */
static inline const void *kn_kv_k_at(const kn_kv *kv, int32_t l, int32_t pos, int32_t off) {
    return kv->k + (((size_t)l * (size_t)kv->n_ctx + (size_t)pos) * (size_t)kv->kv_dim + (size_t)off) * kv->elt;
}
static inline const void *kn_kv_v_at(const kn_kv *kv, int32_t l, int32_t pos, int32_t off) {
    return kv->v + (((size_t)l * (size_t)kv->n_ctx + (size_t)pos) * (size_t)kv->kv_dim + (size_t)off) * kv->elt;
}

#endif

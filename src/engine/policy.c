/*
 * policy.c - the library's resource policy in one place: the default context of a session or
 * engine row, the automatic size of the prompt cache, and the KV memory a model needs per token of
 * context. The library resolves its own defaults with these functions, and front ends (kiln ls,
 * the automatic model choice, kiln serve's memory plan) call the same ones through kiln.h, so an
 * estimate and what the engine then allocates cannot drift apart.
 */
#include "cache/kv.h"
#include "model/model.h"

int32_t kiln_default_n_ctx(int32_t n_ctx_train) {
    const int32_t train = n_ctx_train > 0 ? n_ctx_train : KILN_N_CTX_TRAIN_ASSUMED;
    return KN_MIN(train, KILN_N_CTX_DEFAULT_MAX);
}

uint64_t kiln_default_prompt_cache(uint64_t memory_bytes) {
    return KN_MIN(memory_bytes / KILN_PROMPT_CACHE_MEMORY_SHARE, KILN_PROMPT_CACHE_MAX_AUTO);
}

uint64_t kiln_kv_bytes_per_token_kv(const kiln_model_info *info, kiln_kv_type k, kiln_kv_type v) {
    if (!info || info->n_head_kv <= 0 || info->head_dim <= 0) return 0;
    uint64_t kv_dim;
    if (!kn_mul_ok((uint64_t)info->n_head_kv, (uint64_t)info->head_dim, &kv_dim) || kv_dim > INT32_MAX)
        return UINT64_MAX; /* a hostile header: too large for any machine */
    kn_kv_format f;
    if (kn_kv_format_of(k, v, KILN_KV_ROTATE_AUTO, &f)) return 0;
    return kn_kv_bytes_per_token_fmt(&f, info->n_layer, info->n_head_kv, info->head_dim);
}

uint64_t kiln_kv_bytes_per_token(const kiln_model_info *info, kiln_kv_type type) {
    return kiln_kv_bytes_per_token_kv(info, type, type);
}

uint64_t kiln_model_kv_bytes_per_token_kv(const kiln_model *model, kiln_kv_type k, kiln_kv_type v) {
    if (!model || model->vocab_only) return 0;
    kn_kv_format f;
    if (kn_kv_format_of(k, v, KILN_KV_ROTATE_AUTO, &f)) return 0;
    return kn_kv_bytes_per_token_fmt(&f, model->hp.n_layer, model->hp.n_head_kv, model->hp.head_dim);
}

uint64_t kiln_model_kv_bytes_per_token(const kiln_model *model, kiln_kv_type type) {
    return kiln_model_kv_bytes_per_token_kv(model, type, type);
}

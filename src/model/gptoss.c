/*
 * gptoss.c - gpt-oss (general.architecture "gpt-oss", e.g. gpt-oss-20b: 24 layers, 32 experts, 4 per
 * token). Pre-norm decoder blocks (model/block.h kn_block_decoder) whose pieces differ from Llama's:
 *   - attention: biases on q, k, v and the output projection; a learned sink logit per head in the
 *     softmax denominator (kn_layer_attn.sinks); even layers attend over a sliding window of
 *     {arch}.attention.sliding_window positions, odd layers over everything; NEOX RoPE with YaRN
 *     scaling ({arch}.rope.scaling.factor, original_context_length);
 *   - the FFN: a mixture of experts (model/moe.h) with biases on the router and every expert, the
 *     softmax over the chosen experts' logits, and the clamped SwiGLU (KN_ACT_SWIGLU_CLAMP);
 *     the norm before it is stored as attn_post_norm.
 */
#include "model/block.h"
#include "model/load.h"
#include "model/moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* YaRN's defaults (the ramp between the dims that keep their frequency and those that interpolate). */
#define YARN_BETA_FAST 32.0f
#define YARN_BETA_SLOW 1.0f

/* The dim (of n_rot) whose wavelength makes n_turns turns over the original context. */
static float yarn_corr_dim(int n_rot, int32_t n_ctx_orig, float n_turns, float base) {
    return (float)n_rot * logf((float)n_ctx_orig / (n_turns * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

/* YaRN as per-frequency divisors for kn_rope (theta = pos * freq / div[j]): frequency pair j keeps
 * its frequency (extrapolation) below the ramp, is divided by the factor (interpolation) above it,
 * and mixes linearly between; q and k are both scaled by 1 + 0.1 ln(factor), which the layers fold
 * into their score scale. */
static kiln_status yarn(kiln_model *m, float factor, int32_t n_ctx_orig) {
    const kn_hparams *hp = &m->hp;
    const int n_rot = hp->n_rot, half = n_rot / 2;
    m->rope_yarn = malloc(sizeof(float) * (size_t)half);
    if (!m->rope_yarn) return KILN_ERR_NOMEM;
    const float lo = fmaxf(0.0f, floorf(yarn_corr_dim(n_rot, n_ctx_orig, YARN_BETA_FAST, hp->rope_base)));
    const float hi = fminf((float)(n_rot - 1), ceilf(yarn_corr_dim(n_rot, n_ctx_orig, YARN_BETA_SLOW, hp->rope_base)));
    const float fs = 1.0f / factor;
    for (int j = 0; j < half; j++) {
        const float y = ((float)j - lo) / fmaxf(0.001f, hi - lo);
        const float mix = 1.0f - fminf(1.0f, fmaxf(0.0f, y)); /* 1: extrapolate, 0: interpolate */
        m->rope_yarn[j] = 1.0f / (fs * (1.0f - mix) + mix);
    }
    return KILN_OK;
}

static kiln_status gptoss_hparams(kiln_model *m) {
    kn_hparams *hp = &m->hp;
    kiln_status st = kn_moe_hparams(m, hp->n_ff);
    if (st) return st;
    if (hp->n_expert == 0) return kn_error(KILN_ERR_FORMAT, "missing metadata '%s.expert_count'", m->arch_name);
    kn_str stype;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
    if (kn_gguf_get_str(&m->gguf, key, &stype) && kn_str_eq(stype, "yarn")) {
        float factor = 1.0f;
        int32_t orig = hp->n_ctx_train;
        if ((st = kn_meta_float(m, "rope.scaling.factor", &factor))) return st;
        if ((st = kn_meta_int(m, "rope.scaling.original_context_length", false, 1, 1 << 24, &orig))) return st;
        if (factor > 1.0f) {
            if ((st = yarn(m, factor, orig))) return st;
            hp->rope_yarn_factor = factor;
        }
        hp->rope_scale = 1.0f;
    }
    if (hp->n_rot != hp->head_dim) /* YaRN's magnitude scale is folded into the scores (gptoss_tensors) */
        return kn_error(KILN_ERR_UNSUPPORTED, "rope dimension count %d differs from the head dimension %d", hp->n_rot,
                        hp->head_dim);
    return kn_meta_int(m, "attention.sliding_window", true, 1, 1 << 24, &hp->n_swa);
}

static kiln_status gptoss_tensors(kn_loader *L, int l) {
    if (l < 0) return KILN_OK;
    kiln_model *m = kn_loader_model(L);
    const kn_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    kn_layer *ly = &m->layers[l];
    char n[96];
    kiln_status st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_norm.weight"), d, true, &ly->attn_norm))) return st;
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_q.weight"), d, qd, &ly->wq))) return st;
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_k.weight"), d, kvd, &ly->wk))) return st;
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_v.weight"), d, kvd, &ly->wv))) return st;
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_output.weight"), qd, d, &ly->wo))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_q.bias"), qd, true, &ly->bq))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_k.bias"), kvd, true, &ly->bk))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_v.bias"), kvd, true, &ly->bv))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_output.bias"), d, true, &ly->bo))) return st;
    kn_layer_attn *a = &ly->attn;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_sinks.weight"), hp->n_head, true, &a->sinks))) return st;
    /* YaRN's magnitude scale of q and k, 1 + 0.1 ln(factor) each, as a factor of the scores */
    float mscale = 1.0f;
    if (hp->rope_yarn_factor > 0) mscale = 1.0f + 0.1f * logf(hp->rope_yarn_factor);
    a->scale = mscale * mscale / sqrtf((float)hp->head_dim);
    a->window = l % 2 == 0 ? m->hp.n_swa : 0;
    a->rope = (kn_rope_cfg){.style = hp->rope_style,
                            .n_rot = hp->n_rot,
                            .base = hp->rope_base,
                            .pos_scale = 1.0f,
                            .freq_div = m->rope_yarn};
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_post_norm.weight"), d, true, &ly->ffn_norm))) return st;
    return kn_moe_load(L, l, KN_ACT_SWIGLU_CLAMP, KN_MOE_SOFTMAX_TOPK, false, true);
}

const kn_arch_def kn_arch_gptoss = {.name = "gpt-oss",
                                    .rope_style = KN_ROPE_NEOX,
                                    .norm_eps = 1e-5f,
                                    .rope_base = 150000.0f,
                                    .rope_yarn = true,
                                    .hparams = gptoss_hparams,
                                    .tensors = gptoss_tensors,
                                    .block = kn_block_decoder};

/*
 * gptoss.c - gpt-oss (general.architecture "gpt-oss", e.g. gpt-oss-20b: 24 layers, 32 experts, 4 per
 * token). Pre-norm decoder blocks (model/block.h kn_block_decoder) whose pieces differ from Llama's:
 *   - attention: biases on q, k, v and the output projection; a learned sink logit per head in the
 *     softmax denominator (kn_layer_attn.sinks); even layers attend over a sliding window of
 *     {arch}.attention.sliding_window positions, odd layers over everything; NEOX RoPE with YaRN
 *     scaling ({arch}.rope.scaling.type "yarn", factor, original_context_length), which model.c reads
 *     for every family;
 *   - the FFN: a mixture of experts (model/moe.h) with biases on the router and every expert, the
 *     softmax over the chosen experts' logits, and the clamped SwiGLU (KN_ACT_SWIGLU_CLAMP);
 *     the norm before it is stored as blk.N.post_attention_norm (the name of llama.cpp's attention
 *     post-norm tensor; real gpt-oss files hold it so).
 */
#include "model/block.h"
#include "model/load.h"
#include "model/moe.h"

static kiln_status gptoss_hparams(kiln_model *m) {
    kn_hparams *hp = &m->hp;
    kiln_status st = kn_moe_hparams(m, hp->n_ff);
    if (st) return st;
    if (hp->n_expert == 0) return kn_error(KILN_ERR_FORMAT, "missing metadata '%s.expert_count'", m->arch_name);
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
    a->scale = hp->attn_scale;
    a->window = l % 2 == 0 ? m->hp.n_swa : 0;
    a->rope = kn_rope_default(m); /* YaRN when the file says so (model.c read_yarn) */
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "post_attention_norm.weight"), d, true, &ly->ffn_norm))) return st;
    return kn_moe_load(L, l, KN_ACT_SWIGLU_CLAMP, KN_MOE_SOFTMAX_TOPK, false, true);
}

const kn_arch_def kn_arch_gptoss = {.name = "gpt-oss",
                                    .rope_style = KN_ROPE_NEOX,
                                    .norm_eps = 1e-5f,
                                    .rope_base = 150000.0f,
                                    .hparams = gptoss_hparams,
                                    .tensors = gptoss_tensors,
                                    .block = kn_block_decoder};

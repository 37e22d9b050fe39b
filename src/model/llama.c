/*
 * llama.c - the Llama family: llama (also Mistral files of that architecture), qwen2 (biases on q,
 * k and v), qwen3 (per-head RMSNorm of q and k) and smollm3 (every fourth layer without RoPE: layer l
 * when (l + 1) % 4 == 0, a constant of the architecture that no GGUF key holds, as in llama.cpp).
 * Pre-norm decoder blocks of grouped-query attention with RoPE and a SiLU-gated FFN (model/block.h
 * kn_block_decoder); the rows differ only in flags, defaults and the NoPE layers. A llama file with
 * experts (Mixtral) has a mixture-of-experts FFN (model/moe.h) in every layer.
 */
#include "model/block.h"
#include "model/load.h"
#include "model/moe.h"

/* The attention every layer of a file of this family has: full causal attention, RoPE over n_rot
 * dims with the file's base, linear scale and llama3 factors, scores scaled by 1/sqrt(head_dim). */
static kn_layer_attn plain_attn(const kiln_model *m) {
    const kn_hparams *hp = &m->hp;
    kn_layer_attn a = {.window = 0, .scale = hp->attn_scale, .rope = kn_rope_default(m)};
    return a;
}

kiln_status kn_llama_tensors(kn_loader *L, int l) {
    if (l < 0) return KILN_OK;
    kiln_model *m = kn_loader_model(L);
    const kn_hparams *hp = &m->hp;
    const kn_arch_def *a = m->arch;
    const int64_t d = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim,
                  ff = hp->n_ff;
    kn_layer *ly = &m->layers[l];
    char n[96];
    kiln_status st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_norm.weight"), d, true, &ly->attn_norm))) return st;
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_q.weight"), d, qd, &ly->wq))) return st;
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_k.weight"), d, kvd, &ly->wk))) return st;
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_v.weight"), d, kvd, &ly->wv))) return st;
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_output.weight"), qd, d, &ly->wo))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_q.bias"), qd, a->qkv_bias, &ly->bq))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_k.bias"), kvd, a->qkv_bias, &ly->bk))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_v.bias"), kvd, a->qkv_bias, &ly->bv))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_q_norm.weight"), hp->head_dim, a->qk_norm, &ly->q_norm)))
        return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_k_norm.weight"), hp->head_dim, a->qk_norm, &ly->k_norm)))
        return st;
    ly->attn = plain_attn(m);
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "ffn_norm.weight"), d, true, &ly->ffn_norm))) return st;
    if (hp->n_expert > 0) /* Mixtral, Qwen3-MoE: softmax router, top-k renormalized */
        return kn_moe_load(L, l, KN_ACT_SILU, KN_MOE_SOFTMAX, true, false);
    ly->ffn = KN_FFN_DENSE;
    ly->act = KN_ACT_SILU;
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "ffn_gate.weight"), d, ff, &ly->w_gate))) return st;
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "ffn_up.weight"), d, ff, &ly->w_up))) return st;
    return kn_load_matrix(L, kn_blk_name(n, l, "ffn_down.weight"), ff, d, &ly->w_down);
}

/* llama files with experts (Mixtral): {arch}.expert_count and expert_used_count, experts as wide as
 * feed_forward_length. */
static kiln_status llama_hparams(kiln_model *m) { return kn_moe_hparams(m, m->hp.n_ff); }

/* SmolLM3: the llama layout; layers (l + 1) % SMOLLM3_NOPE_STEP == 0 have no RoPE. */
#define SMOLLM3_NOPE_STEP 4

static kiln_status smollm3_tensors(kn_loader *L, int l) {
    kiln_status st = kn_llama_tensors(L, l);
    if (!st && l >= 0 && (l + 1) % SMOLLM3_NOPE_STEP == 0) kn_loader_model(L)->layers[l].attn.rope.n_rot = 0;
    return st;
}

const kn_arch_def kn_arch_llama = {.name = "llama",
                                   .rope_style = KN_ROPE_NORM,
                                   .norm_eps = 1e-5f,
                                   .rope_base = 10000.0f,
                                   .hparams = llama_hparams,
                                   .tensors = kn_llama_tensors,
                                   .block = kn_block_decoder};

const kn_arch_def kn_arch_qwen2 = {.name = "qwen2",
                                   .rope_style = KN_ROPE_NEOX,
                                   .qkv_bias = true,
                                   .norm_eps = 1e-6f,
                                   .rope_base = 1000000.0f,
                                   .tensors = kn_llama_tensors,
                                   .block = kn_block_decoder};

const kn_arch_def kn_arch_qwen3 = {.name = "qwen3",
                                   .rope_style = KN_ROPE_NEOX,
                                   .qk_norm = true,
                                   .norm_eps = 1e-6f,
                                   .rope_base = 1000000.0f,
                                   .tensors = kn_llama_tensors,
                                   .block = kn_block_decoder};

const kn_arch_def kn_arch_smollm3 = {.name = "smollm3",
                                     .rope_style = KN_ROPE_NORM,
                                     .norm_eps = 1e-6f,
                                     .rope_base = 10000.0f,
                                     .tensors = smollm3_tensors,
                                     .block = kn_block_decoder};

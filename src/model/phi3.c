/*
 * phi3.c - the Phi-3 family (phi3: Phi-3, Phi-3.5 and Phi-4 mini files), as llama.cpp's converter and
 * loader define its GGUF files: the pre-norm decoder block with a SiLU-gated FFN and NEOX RoPE, where
 * q, k and v are one fused tensor (attn_qkv: q rows, then k, then v; separate attn_q/k/v are accepted
 * too) and the FFN's gate and up are one tensor (ffn_up: gate rows, then up rows). The fused tensors
 * become views over one copy (model/load.h kn_load_matrix_parts), so the forward pass is the shared
 * one.
 *
 * LongRoPE: the model-wide rope_factors_short / rope_factors_long tensors divide the RoPE frequencies,
 * the long ones for rows whose context exceeds {arch}.rope.scaling.original_context_length, and
 * {arch}.rope.scaling.attn_factor scales the rotation's magnitude (model.c). The file's sliding
 * window key is ignored, as llama.cpp ignores it: every layer attends over the whole context.
 */
#include "model/block.h"
#include "model/load.h"

/* The model-wide LongRoPE factors, both or neither. */
static kiln_status phi3_globals(kn_loader *L) {
    kiln_model *m = kn_loader_model(L);
    const int64_t n = m->hp.n_rot / 2;
    const bool has_long = kn_load_has(L, "rope_factors_long.weight");
    const bool has_short = kn_load_has(L, "rope_factors_short.weight");
    if (has_long != has_short)
        return kn_error(KILN_ERR_FORMAT, "tensor 'rope_factors_%s.weight' is missing (LongRoPE needs both)",
                        has_long ? "short" : "long");
    if (!has_long) return KILN_OK;
    if (m->rope_freqs) return kn_error(KILN_ERR_FORMAT, "both rope_freqs and LongRoPE factors are present");
    kiln_status st = kn_load_vector(L, "rope_factors_short.weight", n, true, &m->rope_freqs);
    if (st) return st;
    return kn_load_vector(L, "rope_factors_long.weight", n, true, &m->rope_freqs_long);
}

static kiln_status phi3_tensors(kn_loader *L, int l) {
    if (l < 0) return phi3_globals(L);
    kiln_model *m = kn_loader_model(L);
    const kn_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim,
                  ff = hp->n_ff;
    kn_layer *ly = &m->layers[l];
    char n[96];
    kiln_status st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_norm.weight"), d, true, &ly->attn_norm))) return st;
    if (kn_load_has(L, kn_blk_name(n, l, "attn_qkv.weight"))) {
        const int64_t rows[3] = {qd, kvd, kvd};
        kn_weight parts[3];
        if ((st = kn_load_matrix_parts(L, n, d, 3, rows, parts))) return st;
        ly->wq = parts[0];
        ly->wk = parts[1];
        ly->wv = parts[2];
    } else {
        if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_q.weight"), d, qd, &ly->wq))) return st;
        if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_k.weight"), d, kvd, &ly->wk))) return st;
        if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_v.weight"), d, kvd, &ly->wv))) return st;
    }
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_output.weight"), qd, d, &ly->wo))) return st;
    ly->attn = (kn_layer_attn){.window = 0, .scale = hp->attn_scale, .rope = kn_rope_default(m)};
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "ffn_norm.weight"), d, true, &ly->ffn_norm))) return st;
    ly->ffn = KN_FFN_DENSE;
    ly->act = KN_ACT_SILU;
    const int64_t rows[2] = {ff, ff};
    kn_weight parts[2];
    if ((st = kn_load_matrix_parts(L, kn_blk_name(n, l, "ffn_up.weight"), d, 2, rows, parts))) return st;
    ly->w_gate = parts[0];
    ly->w_up = parts[1];
    return kn_load_matrix(L, kn_blk_name(n, l, "ffn_down.weight"), ff, d, &ly->w_down);
}

const kn_arch_def kn_arch_phi3 = {.name = "phi3",
                                  .rope_style = KN_ROPE_NEOX,
                                  .norm_eps = 1e-5f,
                                  .rope_base = 10000.0f,
                                  .tensors = phi3_tensors,
                                  .block = kn_block_decoder};

/*
 * gemma.c - the Gemma family: gemma2 and gemma3, as llama.cpp's converter and loader define their
 * GGUF files.
 *
 * Both: token embeddings scaled by sqrt(n_embd); pre- and post-norms around attention and FFN
 * (attn_norm, post_attention_norm, ffn_norm, post_ffw_norm); a GELU-gated FFN (tanh approximation);
 * NEOX RoPE; q scaled by 1/sqrt(head_dim), or 1/sqrt(n_embd / n_head) for the 27B models (whose
 * query_pre_attn_scalar is that; the value is not in a converted GGUF, so it is told by the layer count as
 * llama.cpp does; {arch}.attention.scale, which a Hugging Face directory's query_pre_attn_scalar becomes,
 * overrides it); interleaved sliding-window and global layers: layer l slides when
 * l % pattern < pattern - 1 (gemma2: every other layer from 0; gemma3: five of six), over the last
 * {arch}.attention.sliding_window positions. The RMSNorm of Gemma multiplies by (1 + weight); the
 * converter stores 1 + weight, so the file's norm weights are used as they are.
 *
 * gemma2: attention scores and final logits soft-capped ({arch}.attn_logit_softcapping, default 50;
 * {arch}.final_logit_softcapping, default 30); every layer has the file's RoPE base.
 * gemma3: per-head q/k RMSNorm; global layers use the file's RoPE base and linear scaling, the
 * sliding-window layers base 10000 and no scaling; no soft-capping.
 */
#include "model/block.h"
#include "model/load.h"

#include <math.h>
#include <string.h>

/* Layer counts of the 27B models, whose query scale is 1/sqrt(n_embd / n_head). */
#define GEMMA2_27B_LAYERS    46
#define GEMMA3_27B_LAYERS    62
/* Sliding-window layer patterns (see above) and gemma3's local RoPE base. */
#define GEMMA2_PATTERN       2
#define GEMMA3_PATTERN       6
#define GEMMA3_LOCAL_BASE    10000.0f
#define GEMMA2_WINDOW        4096
#define GEMMA2_ATTN_SOFTCAP  50.0f
#define GEMMA2_FINAL_SOFTCAP 30.0f

static void common_hparams(kiln_model *m, int n_layer_27b) {
    kn_hparams *hp = &m->hp;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->attn_scale =
        hp->n_layer == n_layer_27b ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head)) : 1.0f / sqrtf((float)hp->head_dim);
}

static kiln_status gemma2_hparams(kiln_model *m) {
    kn_hparams *hp = &m->hp;
    common_hparams(m, GEMMA2_27B_LAYERS);
    hp->n_swa = GEMMA2_WINDOW;
    hp->attn_softcap = GEMMA2_ATTN_SOFTCAP;
    hp->logit_softcap = GEMMA2_FINAL_SOFTCAP;
    kiln_status st;
    if ((st = kn_meta_float(m, "attention.scale", &hp->attn_scale))) return st;
    if ((st = kn_meta_int(m, "attention.sliding_window", false, 0, INT32_MAX, &hp->n_swa))) return st;
    if ((st = kn_meta_float(m, "attn_logit_softcapping", &hp->attn_softcap))) return st;
    return kn_meta_float(m, "final_logit_softcapping", &hp->logit_softcap);
}

static kiln_status gemma3_hparams(kiln_model *m) {
    common_hparams(m, GEMMA3_27B_LAYERS);
    kiln_status st = kn_meta_float(m, "attention.scale", &m->hp.attn_scale);
    if (st) return st;
    m->hp.n_swa = 0; /* absent: every layer is global */
    return kn_meta_int(m, "attention.sliding_window", false, 0, INT32_MAX, &m->hp.n_swa);
}

/* Layer l's tensors and attention; pattern: the sliding-window layer pattern; local_base: the RoPE
 * base of sliding-window layers (0: the file's, with its scaling). */
static kiln_status gemma_layer(kn_loader *L, int l, int pattern, float local_base) {
    if (l < 0) return KILN_OK;
    kiln_model *m = kn_loader_model(L);
    const kn_hparams *hp = &m->hp;
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
    const bool qk = m->arch->qk_norm;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_q_norm.weight"), hp->head_dim, qk, &ly->q_norm))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_k_norm.weight"), hp->head_dim, qk, &ly->k_norm))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "post_attention_norm.weight"), d, true, &ly->post_attn_norm)))
        return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "ffn_norm.weight"), d, true, &ly->ffn_norm))) return st;
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "ffn_gate.weight"), d, ff, &ly->w_gate))) return st;
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "ffn_up.weight"), d, ff, &ly->w_up))) return st;
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "ffn_down.weight"), ff, d, &ly->w_down))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "post_ffw_norm.weight"), d, true, &ly->post_ffn_norm))) return st;
    ly->ffn = KN_FFN_DENSE;
    ly->act = KN_ACT_GELU_TANH;
    const bool local = hp->n_swa > 0 && l % pattern < pattern - 1;
    ly->attn = (kn_layer_attn){.window = local ? hp->n_swa : 0, .scale = hp->attn_scale, .softcap = hp->attn_softcap};
    ly->attn.rope = kn_rope_default(m);
    if (local && local_base > 0) { /* the local layers' own base, unscaled */
        ly->attn.rope = (kn_rope_cfg){
            .style = hp->rope_style, .n_rot = hp->n_rot, .base = local_base, .pos_scale = 1.0f, .mscale = 1.0f};
    }
    return KILN_OK;
}

static kiln_status gemma2_tensors(kn_loader *L, int l) { return gemma_layer(L, l, GEMMA2_PATTERN, 0); }
static kiln_status gemma3_tensors(kn_loader *L, int l) { return gemma_layer(L, l, GEMMA3_PATTERN, GEMMA3_LOCAL_BASE); }

const kn_arch_def kn_arch_gemma2 = {.name = "gemma2",
                                    .rope_style = KN_ROPE_NEOX,
                                    .norm_eps = 1e-6f,
                                    .rope_base = 10000.0f,
                                    .hparams = gemma2_hparams,
                                    .tensors = gemma2_tensors,
                                    .block = kn_block_decoder};

const kn_arch_def kn_arch_gemma3 = {.name = "gemma3",
                                    .rope_style = KN_ROPE_NEOX,
                                    .qk_norm = true,
                                    .norm_eps = 1e-6f,
                                    .rope_base = 1000000.0f,
                                    .hparams = gemma3_hparams,
                                    .tensors = gemma3_tensors,
                                    .block = kn_block_decoder};

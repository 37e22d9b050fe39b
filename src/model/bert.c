/*
 * bert.c - the BERT family of encoders, embedding models: bert (absolute position embeddings, q/k/v
 * with biases, a plain GELU FFN with biases) and nomic-bert (RoPE instead of position embeddings,
 * one fused q/k/v matrix, a SiLU-gated FFN). Both embed a token as its row of token_embd plus the
 * embedding of token type 0 (and, for bert, of its position), LayerNormed; then every layer is a
 * post-norm block of bidirectional attention (a token sees every token of its input, later ones
 * too) and an FFN, each added to the residual stream and LayerNormed:
 *     x = LN(x + wo . attention(x) + bo);  x = LN(x + ffn(x))
 * There is no output head: the model's output is the token states, pooled per input into one vector
 * ({arch}.pooling_type; the mean when the file does not say). Such a model does not generate.
 */
#include "model/block.h"
#include "model/load.h"
#include "tensor/ops.h"

#include <string.h>

/* bert files name their LayerNorm epsilon {arch}.attention.layer_norm_epsilon; pooling defaults to
 * the mean; attention is bidirectional. */
static kiln_status bert_hparams(kiln_model *m) {
    kn_hparams *hp = &m->hp;
    kiln_status st = kn_meta_float(m, "attention.layer_norm_epsilon", &hp->norm_eps);
    if (st) return st;
    hp->causal = false;
    if (hp->pooling == KN_POOL_NONE) hp->pooling = KN_POOL_MEAN;
    return KILN_OK;
}

/* A matrix of the file whose row count is the file's own (token types, positions): rows 0 when
 * the tensor is absent. */
static kiln_status load_table(kn_loader *L, const char *name, kn_weight *w) {
    kiln_model *m = kn_loader_model(L);
    const kn_gguf_tensor *t = kn_gguf_find_tensor(&m->gguf, name);
    memset(w, 0, sizeof *w);
    if (!t) return KILN_OK;
    if (t->n_dims != 2 || t->ne[1] < 1) return kn_error(KILN_ERR_FORMAT, "tensor '%s' is not a matrix", name);
    return kn_load_matrix(L, name, m->hp.n_embd, t->ne[1], w);
}

static kiln_status bert_tensors(kn_loader *L, int l) {
    kiln_model *m = kn_loader_model(L);
    const kn_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim,
                  ff = hp->n_ff;
    kiln_status st;
    if (l < 0) {
        if ((st = load_table(L, "token_types.weight", &m->tok_types))) return st;
        if ((st = load_table(L, "position_embd.weight", &m->pos_embd))) return st;
        if ((st = kn_load_vector(L, "token_embd_norm.weight", d, true, &m->embd_norm))) return st;
        return kn_load_vector(L, "token_embd_norm.bias", d, false, &m->embd_norm_b);
    }
    kn_layer *ly = &m->layers[l];
    char n[96];
    if (kn_load_has(L, kn_blk_name(n, l, "attn_qkv.weight"))) {
        const int64_t rows[3] = {qd, kvd, kvd};
        kn_weight parts[3];
        if ((st = kn_load_matrix_parts(L, n, d, 3, rows, parts))) return st;
        ly->wq = parts[0], ly->wk = parts[1], ly->wv = parts[2];
    } else {
        if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_q.weight"), d, qd, &ly->wq))) return st;
        if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_k.weight"), d, kvd, &ly->wk))) return st;
        if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_v.weight"), d, kvd, &ly->wv))) return st;
        if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_q.bias"), qd, false, &ly->bq))) return st;
        if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_k.bias"), kvd, false, &ly->bk))) return st;
        if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_v.bias"), kvd, false, &ly->bv))) return st;
    }
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "attn_output.weight"), qd, d, &ly->wo))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_output.bias"), d, false, &ly->bo))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_output_norm.weight"), d, true, &ly->post_attn_norm))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "attn_output_norm.bias"), d, false, &ly->post_attn_norm_b)))
        return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "layer_output_norm.weight"), d, true, &ly->post_ffn_norm))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "layer_output_norm.bias"), d, false, &ly->post_ffn_norm_b)))
        return st;
    ly->attn = (kn_layer_attn){.window = 0, .scale = hp->attn_scale, .rope = kn_rope_default(m), .bidir = true};
    if (m->pos_embd.rows) ly->attn.rope.n_rot = 0;              /* absolute positions: no rotation */
    if (kn_load_has(L, kn_blk_name(n, l, "ffn_gate.weight"))) { /* nomic-bert: SiLU-gated */
        ly->ffn = KN_FFN_DENSE;
        ly->act = KN_ACT_SILU;
        if ((st = kn_load_matrix(L, n, d, ff, &ly->w_gate))) return st;
    } else {
        ly->ffn = KN_FFN_PLAIN;
        ly->act = KN_ACT_GELU;
        if ((st = kn_load_vector(L, kn_blk_name(n, l, "ffn_up.bias"), ff, false, &ly->b_up))) return st;
        if ((st = kn_load_vector(L, kn_blk_name(n, l, "ffn_down.bias"), d, false, &ly->b_down))) return st;
    }
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "ffn_up.weight"), d, ff, &ly->w_up))) return st;
    return kn_load_matrix(L, kn_blk_name(n, l, "ffn_down.weight"), ff, d, &ly->w_down);
}

/* x[N][d] += token type 0's embedding (+ the token's position embedding), then the LayerNorm. A
 * position beyond the table (the caller bounds inputs by it) adds nothing. */
static void bert_embed_input(const kiln_model *m, kn_scratch *s, int64_t N) {
    const int64_t d = m->hp.n_embd;
    float *tmp = s->xb; /* [d], free until the first block */
    for (int64_t t = 0; t < N; t++) {
        float *x = s->x + t * d;
        if (m->tok_types.rows) {
            kn_weight_row_f32(&m->tok_types, 0, tmp);
            kn_add(x, tmp, d);
        }
        if (m->pos_embd.rows && s->tok_pos[t] < m->pos_embd.rows) {
            kn_weight_row_f32(&m->pos_embd, s->tok_pos[t], tmp);
            kn_add(x, tmp, d);
        }
    }
    kn_layernorm(s->x, s->x, m->embd_norm, m->embd_norm_b, N, d, m->hp.norm_eps);
}

/* The post-norm encoder block:
 *   x = LN(x + wo . attention(x) + bo, post_attn_norm);  x = LN(x + ffn(x), post_ffn_norm) */
static void bert_block(const kiln_model *m, kn_scratch *s, kn_batch_row *rows, int l, int64_t N) {
    const kn_hparams *hp = &m->hp;
    const kn_layer *ly = &m->layers[l];
    const int64_t d = hp->n_embd;
    memcpy(s->xb, s->x, (size_t)(N * d) * sizeof(float));
    kn_block_qkv(m, s, l, N);
    kn_block_attend(m, s, rows, l, N);
    kn_matmul(&ly->wo, s->att, s->xb2, N, s->qbuf, s->pool, m->kernels);
    if (ly->bo) kn_add_bias(s->xb2, ly->bo, N, d);
    kn_add(s->x, s->xb2, N * d);
    kn_layernorm(s->x, s->x, ly->post_attn_norm, ly->post_attn_norm_b, N, d, hp->norm_eps);
    memcpy(s->xb, s->x, (size_t)(N * d) * sizeof(float));
    kn_block_ffn(m, s, l, N);
    kn_add(s->x, s->xb2, N * d);
    kn_layernorm(s->x, s->x, ly->post_ffn_norm, ly->post_ffn_norm_b, N, d, hp->norm_eps);
}

const kn_arch_def kn_arch_bert = {.name = "bert",
                                  .rope_style = KN_ROPE_NORM,
                                  .norm_eps = 1e-12f,
                                  .rope_base = 10000.0f,
                                  .hparams = bert_hparams,
                                  .tensors = bert_tensors,
                                  .block = bert_block,
                                  .embed_input = bert_embed_input};

const kn_arch_def kn_arch_nomic_bert = {.name = "nomic-bert",
                                        .rope_style = KN_ROPE_NEOX,
                                        .norm_eps = 1e-12f,
                                        .rope_base = 1000.0f,
                                        .hparams = bert_hparams,
                                        .tensors = bert_tensors,
                                        .block = bert_block,
                                        .embed_input = bert_embed_input};

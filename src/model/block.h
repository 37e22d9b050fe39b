/*
 * block.h - the shared pieces of a decoder block, which every family (model/arch.h) composes:
 * the q/k/v projections, grouped-query attention over each row's KV cache (per-head q/k norms, RoPE,
 * sliding windows and score scale as the layer's kn_layer_attn says), the layer's FFN (dense gated,
 * or another kn_ffn_kind), and kn_block_decoder, the pre-norm block most families run whole.
 *
 * All of them work on the scratch (forward.h) of one forward call over N stacked tokens, split work
 * only over independent outputs, and give bit-identical values for any thread count, batch
 * composition and prefill chunking (see forward.h).
 */
#ifndef KN_BLOCK_H
#define KN_BLOCK_H

#include "model/forward.h"

/* q[N][q_dim], k[N][kv_dim], v[N][kv_dim] = xb . Wq/Wk/Wv (+ biases when the layer has them), one
 * conversion of xb and one parallel run. */
void kn_block_qkv(const kiln_model *m, kn_scratch *s, int l, int64_t N);

/* Attention of layer l from s->q, s->k, s->v: per token, the per-head q/k norms (when the layer has
 * them) and RoPE, k and v appended to the token's row cache at its position; then every query head
 * attends over its row's cached positions (the layer's window of them, with the layer's attention
 * sinks when it has them) into att[N][q_dim]. */
void kn_block_attend(const kiln_model *m, kn_scratch *s, kn_batch_row *rows, int l, int64_t N);

/* xb2[N][n_embd] = the FFN of layer l applied to xb[N][n_embd] (hb, hb2 as scratch). */
void kn_block_ffn(const kiln_model *m, kn_scratch *s, int l, int64_t N);

/* The pre-norm decoder block (a kn_arch_def block function):
 *   x += post_attn_norm(wo . attention(attn_norm(x)) (+ bo));  x += post_ffn_norm(ffn(ffn_norm(x)))
 * where a post-norm the layer does not have is the identity (and bo the attn_output bias when the
 * layer has one). */
void kn_block_decoder(const kiln_model *m, kn_scratch *s, kn_batch_row *rows, int l, int64_t N);

#endif

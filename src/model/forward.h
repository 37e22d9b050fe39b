/*
 * forward.h - the batched forward pass of every family kiln runs (model/arch.h; forward.c, with the
 * shared block pieces of block.h).
 *
 * A forward call advances B rows by T_b tokens each. Each row has its own KV cache and position
 * (kv->n_past); the tokens of all rows are stacked into one [N = sum T_b][n_embd] activation matrix
 * so that every weight matrix is read once per call, while attention runs per row over that row's
 * own KV. Prefill is a row with many tokens; decode is a row with one; a batch of one is a batch.
 */
#ifndef KN_FORWARD_H
#define KN_FORWARD_H

#include "base/pool.h"
#include "cache/kv.h"
#include "model/model.h"

typedef struct kn_batch_row {
    kn_kv *kv;             /* the row's cache; its tokens go to positions kv->n_past, ... */
    const int32_t *tokens; /* [n_tokens], each in [0, n_vocab) */
    int32_t n_tokens;
    int32_t logits_from; /* logits are produced for tokens [logits_from, n_tokens) */
} kn_batch_row;

/* Activation buffers for up to n_max tokens per call, attention over up to n_ctx positions, and
 * the executor's own thread pool of n_threads (the calling thread + n_threads - 1 workers; two
 * scratches never share workers). Allocated once (per session or engine); forward calls allocate
 * nothing. One thread at a time may run kn_forward on a scratch. */
typedef struct kn_scratch {
    int32_t n_max;
    int32_t n_ctx;
    int n_threads;
    kn_pool *pool; /* NULL when n_threads == 1 (every operation runs on the caller) */
    float *x;      /* [n_max][n_embd]   residual stream */
    float *xb;     /* [n_max][n_embd]   normed input of a sub-block */
    float *xb2;    /* [n_max][n_embd]   sub-block output */
    float *q;      /* [n_max][q_dim] */
    float *k;      /* [n_max][kv_dim] */
    float *v;      /* [n_max][kv_dim] */
    float *att;    /* [n_max][q_dim]    attention output */
    float *hb;     /* [n_max][ff]       gate, then gated product (ff: the larger of n_ff, n_ff_exp) */
    float *hb2;    /* [n_max][ff]       up */
    /* mixture of experts (model/moe.h; NULL for a dense model): E = n_expert, k = n_expert_used */
    float *moe_logits;  /* [n_max][E]      router logits */
    int32_t *moe_ids;   /* [n_max][k]      each token's experts, ascending */
    float *moe_w;       /* [n_max][k]      and their weights */
    int32_t *moe_tok;   /* [n_max * k]     (token * k + slot) grouped by expert */
    int32_t *moe_start; /* [E + 1]         each expert's first entry in moe_tok */
    int32_t *moe_fill;  /* [E]             grouping cursor */
    float *moe_x;       /* [n_max][n_embd] an expert's gathered input rows */
    float *moe_y;       /* [n_max][n_embd] and its output rows */
    void *qbuf;         /* activations converted to a weight's vec_dot format */
    int32_t *tok_row;   /* [n_max] row index of each stacked token */
    int32_t *tok_pos;   /* [n_max] position of each stacked token */
} kn_scratch;

kiln_status kn_scratch_init(kn_scratch *s, const kiln_model *m, int32_t n_max, int32_t n_ctx, int n_threads);
void kn_scratch_free(kn_scratch *s);

/* Runs the forward pass for n_rows rows. The logits of the requested tokens are written to
 * logits[i][n_vocab] in row order, then token order (logits_cap rows available). Caller guarantees:
 * total tokens <= s->n_max, each row's n_past + n_tokens <= its kv->n_ctx <= s->n_ctx, tokens in
 * range, requested logits <= logits_cap. On return each row's kv->n_past has advanced. */
void kn_forward(const kiln_model *m, kn_scratch *s, kn_batch_row *rows, int n_rows, float *logits, int32_t logits_cap);

/* The embedding pass (an encoder pass, or a decoder's prefill without logits): runs every row's
 * tokens (each row an input of its own, n_tokens >= 1, from an empty kv for bidirectional models:
 * the row's whole input in this call), applies the final norm when the model has one, and pools
 * each row's token states as `pooling` says (MEAN, CLS or LAST) into out[n_rows][n_embd]. Not
 * normalized. A row's vector is the same bits whatever rows run with it. Same caller guarantees as
 * kn_forward; each row's kv->n_past advances. */
void kn_forward_embed(const kiln_model *m, kn_scratch *s, kn_batch_row *rows, int n_rows, kn_pooling pooling,
                      float *out);

#endif

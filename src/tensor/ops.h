/*
 * ops.h - the numeric operations of the forward pass, over F32 activations and typed weights.
 *
 * Activations are row-major [N][width] F32 matrices, one row per token. Weights are kn_weight views
 * (model/model.h) in their file type. These are the reference implementations: every result of one
 * token's row depends only on that row (never on N or on other rows), which keeps greedy output
 * bit-identical across batch sizes and prefill chunking.
 *
 * Threads: an operation given a pool (base/pool.h) splits its outputs into tasks of whole weight
 * rows, whole tokens or fixed element ranges. No output is written by two tasks and no task reads
 * another's output, and each output is computed by the same code in the same order wherever it
 * runs, so results are bit-identical for any thread count and any task-to-thread assignment. A
 * NULL pool (or one of one thread) runs everything on the caller; small operations run inline
 * when a parallel run would cost more than it saves.
 */
#ifndef KN_OPS_H
#define KN_OPS_H

#include "base/pool.h"
#include "model/model.h"
#include "tensor/kernels.h"

/* Bytes of scratch kn_matmul needs to hold N activation rows of width cols converted for w. */
size_t kn_matmul_scratch(kn_dtype wtype, int64_t cols, int64_t N);

/* y[N][w->rows] = x[N][w->cols] . W^T with the kernels of set ks. qbuf: kn_matmul_scratch bytes
 * (activations converted to the weight's vec_dot format). Parallel over weight rows on pool (NULL:
 * the caller alone); each output depends only on its weight row and token row (see the tile
 * contract in kernels.h). */
void kn_matmul(const kn_weight *w, const float *x, float *y, int64_t N, void *qbuf, kn_pool *pool,
               const kn_kernels *ks);

/* One product of kn_matmul_multi: y[N][w->rows] = x . W^T. */
typedef struct kn_matmul_out {
    const kn_weight *w;
    float *y;
} kn_matmul_out;

/* Up to KN_MATMUL_MAX_OUTS products of the same input, every weight with x's width as cols (the
 * q/k/v projections; gate and up): each y equals what kn_matmul gives, but consecutive weights whose
 * activation formats agree share one conversion of x and one parallel run. qbuf: the largest
 * kn_matmul_scratch of the weights. */
#define KN_MATMUL_MAX_OUTS 4
void kn_matmul_multi(const kn_matmul_out *outs, int n_outs, const float *x, int64_t N, void *qbuf, kn_pool *pool,
                     const kn_kernels *ks);

/* out[N][n] = x / sqrt(mean(x^2) + eps) * weight, row by row (rows in parallel on pool when there
 * are many; pool may be NULL). out may equal x. */
void kn_rmsnorm(float *out, const float *x, const float *weight, int64_t N, int64_t n, float eps, kn_pool *pool);

/* x[N][n] += b[n] */
void kn_add_bias(float *x, const float *b, int64_t N, int64_t n);

/* x[N][n] += y[N][n] */
void kn_add(float *x, const float *y, int64_t n_total);

/* gate[n] = silu(gate[n]) * up[n] by the kernel set's kn_glu_fn (its exponential is kn_expf_ref's;
 * element ranges in parallel on pool when large; pool may be NULL) */
void kn_swiglu(float *gate, const float *up, int64_t n_total, kn_pool *pool, const kn_kernels *ks);

/* gate[n] = gelu(gate[n]) * up[n], GELU with the tanh approximation
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (parallel as kn_swiglu) */
void kn_geglu(float *gate, const float *up, int64_t n_total, kn_pool *pool, const kn_kernels *ks);

/* x[n] = gelu(x[n]) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), the exact GELU (bert's FFN). */
void kn_gelu(float *x, int64_t n_total);

/* out[N][n] = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias, row by row (LayerNorm; the mean and
 * variance summed in row order, in double). weight and bias may be NULL (1 and 0). out may equal x. */
void kn_layernorm(float *out, const float *x, const float *weight, const float *bias, int64_t N, int64_t n, float eps);

/* Rotates the first r->n_rot dims of each of n_heads heads of width head_dim in
 * x[n_heads*head_dim], at position pos, as r says (model/model.h kn_rope_cfg); long_ctx: the row's
 * context exceeds r->n_ctx_orig (LongRoPE takes the long divisors). */
void kn_rope(float *x, int n_heads, int head_dim, int32_t pos, const kn_rope_cfg *r, bool long_ctx);

/* The most rotated pairs per head. */
#define KN_ROPE_MAX_HALF (KN_MAX_HEAD_DIM / 2)

/* kn_rope in two steps, so that the q and k rows of one token share the angles: cs[j] and sn[j]
 * (j < r->n_rot / 2) = cos and sin of pair j's angle at pos, times r->mscale ... */
void kn_rope_angles(const kn_rope_cfg *r, int32_t pos, bool long_ctx, float *cs, float *sn);

/* ... and x's heads rotated by them (the same values kn_rope gives). */
void kn_rope_apply(float *x, int n_heads, int head_dim, const kn_rope_cfg *r, const float *cs, const float *sn);

/* x[n] = cap * tanh(x[n] / cap): soft-capping of logits (cap > 0). */
void kn_softcap(float *x, int64_t n, float cap);

/* In-place softmax of x[n]. */
void kn_softmax(float *x, int64_t n);

#endif

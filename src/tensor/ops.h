/*
 * ops.h - the numeric operations of the forward pass, over F32 activations and typed weights.
 *
 * Activations are row-major [N][width] F32 matrices, one row per token. Weights are kn_weight views
 * (model/model.h) in their file type. These are the reference implementations: every result of one
 * token's row depends only on that row (never on N or on other rows), which keeps greedy output
 * bit-identical across batch sizes and prefill chunking.
 */
#ifndef KN_OPS_H
#define KN_OPS_H

#include "model/model.h"
#include "tensor/kernels.h"

/* Bytes of scratch kn_matmul needs to hold N activation rows of width cols converted for w. */
size_t kn_matmul_scratch(kn_dtype wtype, int64_t cols, int64_t N);

/* y[N][w->rows] = x[N][w->cols] . W^T with the kernels of set ks. qbuf: kn_matmul_scratch bytes
 * (activations converted to the weight's vec_dot format). Parallel over weight rows with n_threads;
 * each output depends only on its weight row and token row (see the tile contract in kernels.h). */
void kn_matmul(const kn_weight *w, const float *x, float *y, int64_t N, void *qbuf, int n_threads,
               const kn_kernels *ks);

/* out[N][n] = x / sqrt(mean(x^2) + eps) * weight, row by row (rows in parallel when there are
 * many). out may equal x. */
void kn_rmsnorm(float *out, const float *x, const float *weight, int64_t N, int64_t n, float eps, int n_threads);

/* x[N][n] += b[n] */
void kn_add_bias(float *x, const float *b, int64_t N, int64_t n);

/* x[N][n] += y[N][n] */
void kn_add(float *x, const float *y, int64_t n_total);

/* gate[n] = silu(gate[n]) * up[n] */
void kn_swiglu(float *gate, const float *up, int64_t n_total, int n_threads);

/* Rotates the first n_rot dims of each of n_heads heads of width head_dim in x[n_heads*head_dim],
 * at position pos. freq_div: per-frequency divisors (llama3 scaling) or NULL. */
void kn_rope(float *x, int n_heads, int head_dim, int n_rot, int32_t pos, float base, float pos_scale,
             const float *freq_div, kn_rope_style style);

/* In-place softmax of x[n]. */
void kn_softmax(float *x, int64_t n);

#endif

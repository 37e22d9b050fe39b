/*
 * ops.c - reference implementations of the forward-pass operations (see ops.h).
 *
 * Parallelism is over independent output elements only (weight rows in matmul), so the value of
 * each output never depends on the thread count.
 */
#include "tensor/ops.h"

#include <math.h>
#include <omp.h>
#include <string.h>

size_t kn_matmul_scratch(kn_dtype wtype, int64_t cols, int64_t N) {
    const kn_type_traits *tr = kn_type_traits_get(wtype);
    if (!tr || tr->vec_dot_type == KN_F32) return 0;
    return kn_row_bytes(tr->vec_dot_type, cols) * (size_t)N;
}

/* Tokens per cache block: the activations of one block stay in L2 while the weight rows of a
 * thread stream past them. */
#define TOKEN_BLOCK 64

void kn_matmul(const kn_weight *w, const float *x, float *y, int64_t N, void *qbuf, int n_threads,
               const kn_kernels *ks) {
    const kn_type_traits *tr = kn_type_traits_get(w->type);
    const int64_t rows = w->rows, cols = w->cols;
    const uint8_t *act = (const uint8_t *)x;
    size_t act_stride = (size_t)cols * sizeof(float);
    const bool par = n_threads > 1 && rows * N * cols > (1 << 20);   /* ~1M multiply-adds per region */
    if (tr->vec_dot_type != KN_F32) {
        const kn_from_float_fn quant = kn_kernels_quantize(ks, tr->vec_dot_type);
        act_stride = kn_row_bytes(tr->vec_dot_type, cols);
        #pragma omp parallel for num_threads(n_threads) schedule(static) if (par && N > 1)
        for (int64_t n = 0; n < N; n++) quant(x + n * cols, (uint8_t *)qbuf + (size_t)n * act_stride, cols);
        act = qbuf;
    }
    const kn_gemm_fn gemm = kn_kernels_gemm(ks, w->type);
    const int TR = ks->tile_r, TT = ks->tile_t;
    const int64_t n_tiles = (rows + TR - 1) / TR;
    const uint8_t *wd = w->data;
    const size_t rb = w->row_bytes;
    /* Each thread owns a contiguous range of weight-row tiles (so decode streams disjoint parts of
     * the matrix); within it, token blocks outer, row tiles, then token tiles. */
    #pragma omp parallel num_threads(n_threads) if (par)
    {
        const int64_t tid = par ? omp_get_thread_num() : 0, nth = par ? omp_get_num_threads() : 1;
        const int64_t t0 = n_tiles * tid / nth, t1 = n_tiles * (tid + 1) / nth;
        for (int64_t b0 = 0; b0 < N; b0 += TOKEN_BLOCK) {
            const int64_t b1 = KN_MIN(N, b0 + TOKEN_BLOCK);
            for (int64_t ti = t0; ti < t1; ti++) {
                const int64_t r0 = ti * TR;
                const int nr = (int)KN_MIN((int64_t)TR, rows - r0);
                for (int64_t n = b0; n < b1; n += TT) {
                    const int nt = (int)KN_MIN((int64_t)TT, b1 - n);
                    gemm(cols, wd + (size_t)r0 * rb, rb, nr, act + (size_t)n * act_stride, act_stride, nt,
                         y + n * rows + r0, (size_t)rows);
                }
            }
        }
    }
}

void kn_rmsnorm(float *out, const float *x, const float *weight, int64_t N, int64_t n, float eps, int n_threads) {
    #pragma omp parallel for num_threads(n_threads) schedule(static) if (n_threads > 1 && N * n >= (1 << 16))
    for (int64_t t = 0; t < N; t++) {
        const float *xr = x + t * n;
        float *o = out + t * n;
        float ss = 0.0f;
        for (int64_t i = 0; i < n; i++) ss += xr[i] * xr[i];
        ss /= (float)n;
        ss += eps;
        ss = 1.0f / sqrtf(ss);
        for (int64_t i = 0; i < n; i++) o[i] = weight[i] * (ss * xr[i]);
    }
}

void kn_add_bias(float *x, const float *b, int64_t N, int64_t n) {
    for (int64_t t = 0; t < N; t++)
        for (int64_t i = 0; i < n; i++) x[t * n + i] += b[i];
}

void kn_add(float *x, const float *y, int64_t n_total) {
    for (int64_t i = 0; i < n_total; i++) x[i] += y[i];
}

void kn_swiglu(float *gate, const float *up, int64_t n_total, int n_threads) {
    #pragma omp parallel for num_threads(n_threads) schedule(static) if (n_threads > 1 && n_total >= (1 << 16))
    for (int64_t i = 0; i < n_total; i++) {
        float g = gate[i];
        gate[i] = g * (1.0f / (1.0f + expf(-g))) * up[i];
    }
}

void kn_rope(float *x, int n_heads, int head_dim, int n_rot, int32_t pos, float base, float pos_scale,
             const float *freq_div, kn_rope_style style) {
    const int half = n_rot / 2;
    for (int j = 0; j < half; j++) {
        float freq = 1.0f / powf(base, (float)(2 * j) / (float)n_rot);
        if (freq_div) freq /= freq_div[j];
        float theta = (float)pos * pos_scale * freq;
        float c = cosf(theta), s = sinf(theta);
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (int64_t)h * head_dim;
            int i0 = style == KN_ROPE_NORM ? 2 * j : j;
            int i1 = style == KN_ROPE_NORM ? 2 * j + 1 : j + half;
            float a = v[i0], b = v[i1];
            v[i0] = a * c - b * s;
            v[i1] = a * s + b * c;
        }
    }
}

void kn_softmax(float *x, int64_t n) {
    float max = x[0];
    for (int64_t i = 1; i < n; i++)
        if (x[i] > max) max = x[i];
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int64_t i = 0; i < n; i++) x[i] /= sum;
}

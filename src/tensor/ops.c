/*
 * ops.c - reference implementations of the forward-pass operations (see ops.h).
 *
 * Parallelism is over independent outputs only (weight rows in matmul, tokens in the activation
 * conversion and rmsnorm, element ranges in swiglu), claimed as tasks from a kn_pool. Each output
 * is computed by the same code in the same order in whichever task and thread it lands, so its
 * value never depends on the thread count or on which thread ran it.
 */
#include "tensor/ops.h"

#include <math.h>
#include <string.h>

size_t kn_matmul_scratch(kn_dtype wtype, int64_t cols, int64_t N) {
    const kn_type_traits *tr = kn_type_traits_get(wtype);
    if (!tr || tr->vec_dot_type == KN_F32) return 0;
    size_t row = kn_row_bytes(tr->vec_dot_type, cols);
    if (kn_p16_type(wtype)) row = KN_MAX(row, kn_q8x_row_bytes(wtype, cols)); /* a packed matrix's Q8X rows */
    return row * (size_t)N;
}

/* Tokens per cache block: the activations of one block stay in L2 while the weight rows of a
 * task stream past them. */
#define TOKEN_BLOCK             64
/* A matmul below this much work runs on the caller alone: a parallel run would cost more than it
 * saves. Work counts multiply-adds, or MATMUL_BYTE_WORK per byte of weights where that is more (one
 * token streaming a matrix from memory: a small F32 or Q8_0 matrix is quick to multiply but slow to
 * read, and a second thread doubles the read rate; with one thread the split only costs). */
#define MATMUL_PAR_WORK         ((int64_t)1 << 20)
#define MATMUL_BYTE_WORK        4
/* Tasks per thread of a parallel matmul, and the least multiply-adds per task. Several tasks per
 * thread let the caller take over the share of a thread that is descheduled, and keep the wait at
 * the end (for the last task in flight) short; the minimum keeps the claims cheap next to the work. */
#define MATMUL_TASKS_PER_THREAD 8
#define MATMUL_TASK_WORK        ((int64_t)1 << 18)
/* Element-wise work (norms, conversions, swiglu) below this many elements runs inline. */
#define ELEM_PAR_WORK           ((int64_t)1 << 16)
/* Tasks per thread of the element-wise and per-token operations. */
#define ELEM_TASKS_PER_THREAD   4

/* Task count for `items` independent items of `work` total cost: at most per_thread tasks per
 * pool thread, at least min_work per task, at most one per item, at least 1. */
static int64_t task_count(const kn_pool *pool, int64_t items, int64_t work, int64_t min_work, int per_thread) {
    int64_t n = KN_MIN(items, (int64_t)per_thread * kn_pool_threads(pool));
    n = KN_MIN(n, work / KN_MAX(min_work, 1));
    return KN_MAX(n, 1);
}

/* Activation conversion: tokens [N*task/n_tasks, N*(task+1)/n_tasks) of x[N][cols] into
 * q[N][stride] (each token's row converted on its own). */
typedef struct quant_ctx {
    kn_from_float_fn quant;
    kn_dtype q8x_for; /* != KN_F32: panel-kernel rows for packed weights of this type (pack.h) */
    const float *x;
    uint8_t *q;
    int64_t N, cols, n_tasks;
    size_t stride;
} quant_ctx;

static void quant_task(void *arg, int64_t task, int worker) {
    const quant_ctx *c = arg;
    const int64_t n0 = c->N * task / c->n_tasks, n1 = c->N * (task + 1) / c->n_tasks;
    for (int64_t n = n0; n < n1; n++) {
        if (c->q8x_for != KN_F32)
            kn_q8x_quantize(c->q8x_for, c->quant, c->x + n * c->cols, c->q + (size_t)n * c->stride, c->cols);
        else c->quant(c->x + n * c->cols, c->q + (size_t)n * c->stride, c->cols);
    }
}

/* One parallel matmul run over several weights of the same width: their row tiles are numbered
 * consecutively (weight 0's tiles, then weight 1's ...), and task t owns the contiguous tile range
 * [n_tiles*t/n_tasks, n_tiles*(t+1)/n_tasks). Within it: token blocks outer, row tiles, token tiles. */
typedef struct mm_ctx {
    const kn_matmul_out *outs;
    kn_gemm_fn gemm[KN_MATMUL_MAX_OUTS];
    kn_p16_fn p16[KN_MATMUL_MAX_OUTS];     /* packed weights (all of the run's or none): panel kernels */
    int64_t tile0[KN_MATMUL_MAX_OUTS + 1]; /* first global tile of each weight; [n_outs] = total */
    int n_outs;
    int TR, TT;           /* TT: tokens per gemm call (plain weights) */
    const kn_kernels *ks; /* packed weights: the panel kernels' widths (kn_p16_tile) */
    const uint8_t *act;   /* [N][act_stride] activations in the vec_dot format */
    size_t act_stride;
    int64_t N, cols, n_tasks;
} mm_ctx;

static void mm_tiles(const mm_ctx *c, int64_t t0, int64_t t1) {
    const int TR = c->TR;
    for (int64_t b0 = 0; b0 < c->N; b0 += TOKEN_BLOCK) {
        const int64_t b1 = KN_MIN(c->N, b0 + TOKEN_BLOCK);
        const int TT = c->p16[0] ? kn_p16_tile(c->ks, b1 - b0) : c->TT;
        int o = 0;
        for (int64_t ti = t0; ti < t1; ti++) {
            while (ti >= c->tile0[o + 1]) o++;
            const kn_weight *w = c->outs[o].w;
            const kn_gemm_fn gemm = c->gemm[o];
            const kn_p16_fn p16 = c->p16[o];
            const int64_t rows = w->rows, r0 = (ti - c->tile0[o]) * TR;
            const int nr = (int)KN_MIN((int64_t)TR, rows - r0);
            const uint8_t *wd = w->data;
            const size_t rb = w->row_bytes;
            float *y = c->outs[o].y;
            for (int64_t n = b0; n < b1; n += TT) {
                const int nt = (int)KN_MIN((int64_t)TT, b1 - n);
                if (p16) /* TR = 16 x KN_P16_PANELS: up to that many panels */
                    p16(c->cols, wd + (size_t)r0 * rb, nr / KN_P16_ROWS, c->act + (size_t)n * c->act_stride,
                        c->act_stride, nt, y + n * rows + r0, (size_t)rows);
                else
                    gemm(c->cols, wd + (size_t)r0 * rb, rb, nr, c->act + (size_t)n * c->act_stride, c->act_stride, nt,
                         y + n * rows + r0, (size_t)rows);
            }
        }
    }
}

static void mm_task(void *arg, int64_t task, int worker) {
    const mm_ctx *c = arg;
    const int64_t total = c->tile0[c->n_outs];
    mm_tiles(c, total * task / c->n_tasks, total * (task + 1) / c->n_tasks);
}

/* outs[0..n) share one activation format: convert x once, then one run over all their tiles. */
static void matmul_group(const kn_matmul_out *outs, int n, const float *x, int64_t N, void *qbuf, kn_pool *pool,
                         const kn_kernels *ks) {
    const kn_type_traits *tr = kn_type_traits_get(outs[0].w->type);
    const int64_t cols = outs[0].w->cols;
    const bool packed = outs[0].w->packed; /* then every weight of the run is (see act_format) */
    mm_ctx c = {.outs = outs,
                .n_outs = n,
                .TR = packed ? KN_P16_ROWS * KN_P16_PANELS : ks->tile_r,
                .TT = ks->tile_t,
                .ks = ks,
                .N = N,
                .cols = cols};
    c.act = (const uint8_t *)x;
    c.act_stride = (size_t)cols * sizeof(float);
    if (tr->vec_dot_type != KN_F32) {
        quant_ctx q = {.quant = kn_kernels_quantize(ks, tr->vec_dot_type),
                       .x = x,
                       .q = qbuf,
                       .N = N,
                       .cols = cols,
                       .stride =
                           packed ? kn_q8x_row_bytes(outs[0].w->type, cols) : kn_row_bytes(tr->vec_dot_type, cols),
                       .q8x_for = packed ? outs[0].w->type : KN_F32};
        q.n_tasks =
            N * cols >= ELEM_PAR_WORK ? task_count(pool, N, N * cols, ELEM_PAR_WORK / 4, ELEM_TASKS_PER_THREAD) : 1;
        kn_pool_run(pool, q.n_tasks, quant_task, &q);
        c.act = qbuf;
        c.act_stride = q.stride;
    }
    /* tile0: running sum of the weights' tile counts */
    int64_t all_rows = 0, bytes = 0;
    for (int i = 0; i < n; i++) {
        c.gemm[i] = kn_kernels_gemm(ks, outs[i].w->type);
        c.p16[i] = packed ? ks->p16[outs[i].w->type] : NULL;
        c.tile0[i + 1] = c.tile0[i] + (outs[i].w->rows + c.TR - 1) / c.TR;
        all_rows += outs[i].w->rows;
        bytes += outs[i].w->rows * (int64_t)outs[i].w->row_bytes;
    }
    const int64_t macs = all_rows * N * cols;
    const int64_t work = kn_pool_threads(pool) > 1 ? KN_MAX(macs, bytes * MATMUL_BYTE_WORK) : macs;
    c.n_tasks =
        work > MATMUL_PAR_WORK ? task_count(pool, c.tile0[n], work, MATMUL_TASK_WORK, MATMUL_TASKS_PER_THREAD) : 1;
    kn_pool_run(pool, c.n_tasks, mm_task, &c);
}

/* The activation format a weight's kernels read: its vec_dot type, or for a packed matrix the Q8X
 * rows of its type (whose offsets differ by type), numbered apart from the dtypes. Weights with equal
 * formats can share one conversion of x. */
static int act_format(const kn_weight *w) {
    return w->packed ? KN_DTYPE_COUNT + (int)w->type : (int)kn_type_traits_get(w->type)->vec_dot_type;
}

void kn_matmul_multi(const kn_matmul_out *outs, int n_outs, const float *x, int64_t N, void *qbuf, kn_pool *pool,
                     const kn_kernels *ks) {
    for (int i = 0; i < n_outs;) {
        const int fmt = act_format(outs[i].w);
        int j = i + 1;
        while (j < n_outs && j - i < KN_MATMUL_MAX_OUTS && act_format(outs[j].w) == fmt) j++;
        matmul_group(outs + i, j - i, x, N, qbuf, pool, ks);
        i = j;
    }
}

void kn_matmul(const kn_weight *w, const float *x, float *y, int64_t N, void *qbuf, kn_pool *pool,
               const kn_kernels *ks) {
    const kn_matmul_out o = {w, y};
    matmul_group(&o, 1, x, N, qbuf, pool, ks);
}

/* rmsnorm of tokens [N*task/n_tasks, N*(task+1)/n_tasks). */
typedef struct norm_ctx {
    float *out;
    const float *x, *weight;
    int64_t N, n, n_tasks;
    float eps;
} norm_ctx;

static void norm_rows(float *out, const float *x, const float *weight, int64_t t0, int64_t t1, int64_t n, float eps) {
    for (int64_t t = t0; t < t1; t++) {
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

static void norm_task(void *arg, int64_t task, int worker) {
    const norm_ctx *c = arg;
    norm_rows(c->out, c->x, c->weight, c->N * task / c->n_tasks, c->N * (task + 1) / c->n_tasks, c->n, c->eps);
}

void kn_rmsnorm(float *out, const float *x, const float *weight, int64_t N, int64_t n, float eps, kn_pool *pool) {
    if (N < 2 || N * n < ELEM_PAR_WORK || kn_pool_threads(pool) < 2) {
        norm_rows(out, x, weight, 0, N, n, eps);
        return;
    }
    norm_ctx c = {.out = out, .x = x, .weight = weight, .N = N, .n = n, .eps = eps};
    c.n_tasks = task_count(pool, N, N * n, ELEM_PAR_WORK / 4, ELEM_TASKS_PER_THREAD);
    kn_pool_run(pool, c.n_tasks, norm_task, &c);
}

void kn_add_bias(float *x, const float *b, int64_t N, int64_t n) {
    for (int64_t t = 0; t < N; t++)
        for (int64_t i = 0; i < n; i++) x[t * n + i] += b[i];
}

void kn_add(float *x, const float *y, int64_t n_total) {
    for (int64_t i = 0; i < n_total; i++) x[i] += y[i];
}

void kn_gelu(float *x, int64_t n_total) {
    for (int64_t i = 0; i < n_total; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

void kn_layernorm(float *out, const float *x, const float *weight, const float *bias, int64_t N, int64_t n, float eps) {
    for (int64_t t = 0; t < N; t++) {
        const float *xr = x + t * n;
        float *o = out + t * n;
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < n; i++) sum += xr[i];
        const double mean = sum / (double)n;
        for (int64_t i = 0; i < n; i++) sq += (xr[i] - mean) * (xr[i] - mean);
        const float inv = (float)(1.0 / sqrt(sq / (double)n + eps)), mu = (float)mean;
        for (int64_t i = 0; i < n; i++) {
            const float v = (xr[i] - mu) * inv;
            o[i] = (weight ? v * weight[i] : v) + (bias ? bias[i] : 0.0f);
        }
    }
}

/* Elements per gated-activation task are a multiple of this (whole cache lines per task). */
#define GLU_ALIGN 16

typedef struct glu_ctx {
    float *gate;
    const float *up;
    int64_t n_total, chunk;
    kn_glu_fn fn;
    bool gelu;
} glu_ctx;

static void glu_task(void *arg, int64_t task, int worker) {
    const glu_ctx *c = arg;
    const int64_t i0 = task * c->chunk;
    c->fn(c->gate + i0, c->up + i0, KN_MIN(c->n_total, i0 + c->chunk) - i0, c->gelu);
}

/* gate = act(gate) * up by the set's kernel (act.c), in tasks of whole cache lines on pool. */
static void glu(float *gate, const float *up, int64_t n_total, kn_pool *pool, const kn_kernels *ks, bool gelu) {
    if (n_total < ELEM_PAR_WORK || kn_pool_threads(pool) < 2) {
        ks->glu(gate, up, n_total, gelu);
        return;
    }
    const int64_t tasks = task_count(pool, n_total, n_total, ELEM_PAR_WORK / 4, ELEM_TASKS_PER_THREAD);
    glu_ctx c = {.gate = gate, .up = up, .n_total = n_total, .fn = ks->glu, .gelu = gelu};
    c.chunk = ((n_total + tasks - 1) / tasks + GLU_ALIGN - 1) / GLU_ALIGN * GLU_ALIGN;
    kn_pool_run(pool, (n_total + c.chunk - 1) / c.chunk, glu_task, &c);
}

void kn_swiglu(float *gate, const float *up, int64_t n_total, kn_pool *pool, const kn_kernels *ks) {
    glu(gate, up, n_total, pool, ks, false);
}

void kn_geglu(float *gate, const float *up, int64_t n_total, kn_pool *pool, const kn_kernels *ks) {
    glu(gate, up, n_total, pool, ks, true);
}

void kn_rope_angles(const kn_rope_cfg *r, int32_t pos, bool long_ctx, float *cs, float *sn) {
    const int n_rot = r->n_rot, half = n_rot / 2;
    const float base = r->base, pos_scale = r->pos_scale;
    const float *freq_div = long_ctx && r->freq_div_long ? r->freq_div_long : r->freq_div;
    for (int j = 0; j < half; j++) {
        float freq = 1.0f / powf(base, (float)(2 * j) / (float)n_rot);
        if (freq_div) freq /= freq_div[j];
        float theta = (float)pos * pos_scale * freq;
        if (r->yarn_ext != 0) { /* mix in the extrapolated angle where the ramp says */
            const float y = ((float)j - r->yarn_lo) / KN_MAX(0.001f, r->yarn_hi - r->yarn_lo);
            const float mix = (1.0f - KN_MIN(1.0f, KN_MAX(0.0f, y))) * r->yarn_ext;
            theta = theta * (1.0f - mix) + (float)pos * freq * mix;
        }
        cs[j] = cosf(theta) * r->mscale;
        sn[j] = sinf(theta) * r->mscale;
    }
}

void kn_rope_apply(float *x, int n_heads, int head_dim, const kn_rope_cfg *r, const float *cs, const float *sn) {
    const int half = r->n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * head_dim;
        if (r->style == KN_ROPE_NORM) { /* pairs (2j, 2j + 1) */
            for (int j = 0; j < half; j++) {
                const float a = v[2 * j], b = v[2 * j + 1];
                v[2 * j] = a * cs[j] - b * sn[j];
                v[2 * j + 1] = a * sn[j] + b * cs[j];
            }
        } else { /* pairs (j, j + half) */
            for (int j = 0; j < half; j++) {
                const float a = v[j], b = v[j + half];
                v[j] = a * cs[j] - b * sn[j];
                v[j + half] = a * sn[j] + b * cs[j];
            }
        }
    }
}

void kn_rope(float *x, int n_heads, int head_dim, int32_t pos, const kn_rope_cfg *r, bool long_ctx) {
    float cs[KN_ROPE_MAX_HALF], sn[KN_ROPE_MAX_HALF];
    kn_rope_angles(r, pos, long_ctx, cs, sn);
    kn_rope_apply(x, n_heads, head_dim, r, cs, sn);
}

void kn_softcap(float *x, int64_t n, float cap) {
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] * inv);
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

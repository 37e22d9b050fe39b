/*
 * moe.c - the mixture-of-experts FFN (see moe.h): routing, grouping of the step's tokens by expert,
 * the per-expert gated FFN over the gathered rows, and the weighted sum back into each token's row.
 *
 * Steps of one call over N tokens (n_used experts per token, E experts):
 *   logits[N][E] = router . xb (+ bias); per token: ids[N][n_used], weights[N][n_used]
 *   the N * k (token, expert) rows grouped by expert (ascending e, tokens ascending within);
 *   xb converted once into the activation format of the gate/up kernels (qbuf);
 *   per chunk of <= n_max grouped rows: gather their converted rows into moe_x;
 *     one parallel run over every expert of the chunk: hb[c][ff] = gate_e . x, hb2[c][ff] = up_e . x;
 *     (+ biases); hb = act(hb, hb2); hb converted for the down kernels (into hb2);
 *     one parallel run: moe_y[c][d] = down_e . hb (+ bias); xb2[token] += weight * moe_y[row]
 * The matrices of an expert are read once per step, by GEMM tiles over its rows; decode makes two
 * pool runs per layer (not two per expert). Each output is the kernel's output for its weight row and
 * activation row (the tile contract), and the sums run in grouped order, so the values equal the
 * plain one-expert-at-a-time path (kn_moe_ffn_plain) bit for bit.
 */
#include "model/moe.h"

#include "tensor/ops.h"
#include "tensor/pack.h"

#include <math.h>
#include <string.h>

void kn_moe_route(const kn_moe *moe, const float *logits, int32_t *ids, float *weights) {
    const int E = moe->n_expert, k = moe->n_used;
    /* top k by logit, ties to the lower index: a selection in descending order */
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken = taken || ids[i] == e;
            if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
        }
        ids[j] = best;
    }
    /* weights of the chosen, in that order */
    const float max = logits[ids[0]];
    if (moe->gating == KN_MOE_SOFTMAX_TOPK) {
        float sum = 0;
        for (int j = 0; j < k; j++) sum += weights[j] = expf(logits[ids[j]] - max);
        for (int j = 0; j < k; j++) weights[j] /= sum;
    } else {
        float sum = 0; /* softmax over all experts (max is the largest logit of all) */
        for (int e = 0; e < E; e++) sum += expf(logits[e] - max);
        float kept = 0;
        for (int j = 0; j < k; j++) kept += weights[j] = expf(logits[ids[j]] - max) / sum;
        if (moe->norm_topk)
            for (int j = 0; j < k; j++) weights[j] /= kept;
    }
    /* ascending expert order (insertion sort of k pairs) */
    for (int j = 1; j < k; j++) {
        const int32_t id = ids[j];
        const float w = weights[j];
        int i = j;
        for (; i > 0 && ids[i - 1] > id; i--) {
            ids[i] = ids[i - 1];
            weights[i] = weights[i - 1];
        }
        ids[i] = id;
        weights[i] = w;
    }
}

kn_weight kn_moe_expert(const kn_weight *stack, int32_t e, int64_t rows) {
    kn_weight w = *stack;
    w.rows = rows;
    w.data = stack->data + (size_t)e * (size_t)rows * stack->row_bytes; /* a panel holds its 16 rows' bytes */
    return w;
}

/* The clamped SwiGLU of gpt-oss over n elements: gate = min(g, 7); up = clamp(u, -7, 7);
 * gate[i] = gate * sigmoid(1.702 * gate) * (up + 1). */
static void swiglu_clamp(float *gate, const float *up, int64_t n) {
    const float alpha = 1.702f, limit = 7.0f;
    for (int64_t i = 0; i < n; i++) {
        const float g = fminf(gate[i], limit), u = fmaxf(fminf(up[i], limit), -limit);
        gate[i] = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
    }
}

/* ---- the step's experts in two parallel runs -------------------------------------------------- */

/* Tokens per cache block (as kn_matmul): the activations of one block stay in L2 while a task's
 * weight rows stream past them. */
#define TOKEN_BLOCK   64
/* A run below this many multiply-adds goes on the caller alone; tasks per thread and the least
 * multiply-adds per task otherwise (the trade-offs of kn_matmul's runs). */
#define PAR_WORK      ((int64_t)1 << 20)
#define TASKS_PER_THR 8
#define TASK_WORK     ((int64_t)1 << 18)
/* Elements of activation conversion below which it runs inline; tasks per thread above. */
#define ELEM_PAR_WORK ((int64_t)1 << 16)
#define ELEM_TASKS    4

/* The activation rows a weight's kernels read: stride and converter (ops.c does the same). */
typedef struct act_fmt {
    kn_from_float_fn quant; /* NULL: F32 rows as they are */
    kn_dtype q8x_for;       /* != KN_F32: panel-kernel rows for packed weights of this type */
    size_t stride;          /* bytes per row */
} act_fmt;

static act_fmt act_format(const kn_weight *w, const kn_kernels *ks) {
    const kn_dtype vdt = kn_type_traits_get(w->type)->vec_dot_type;
    if (vdt == KN_F32) return (act_fmt){NULL, KN_F32, (size_t)w->cols * sizeof(float)};
    if (w->packed) return (act_fmt){kn_kernels_quantize(ks, vdt), w->type, kn_q8x_row_bytes(w->type, w->cols)};
    return (act_fmt){kn_kernels_quantize(ks, vdt), KN_F32, kn_row_bytes(vdt, w->cols)};
}

static bool same_format(const kn_weight *a, const kn_weight *b, const kn_kernels *ks) {
    const act_fmt fa = act_format(a, ks), fb = act_format(b, ks);
    return a->packed == b->packed && fa.quant == fb.quant && fa.q8x_for == fb.q8x_for && fa.stride == fb.stride;
}

/* Conversion of rows [n*task/n_tasks, n*(task+1)/n_tasks) of x[n][cols] into q[n][f.stride]. */
typedef struct conv_ctx {
    act_fmt f;
    const float *x;
    uint8_t *q;
    int64_t n, cols, n_tasks;
} conv_ctx;

static void conv_task(void *arg, int64_t task, int worker) {
    (void)worker;
    const conv_ctx *c = arg;
    for (int64_t r = c->n * task / c->n_tasks; r < c->n * (task + 1) / c->n_tasks; r++) {
        const float *x = c->x + r * c->cols;
        uint8_t *q = c->q + (size_t)r * c->f.stride;
        if (c->f.q8x_for != KN_F32) kn_q8x_quantize(c->f.q8x_for, c->f.quant, x, q, c->cols);
        else c->f.quant(x, q, c->cols);
    }
}

/* q[n][f.stride] = x[n][cols] in format f (f.quant != NULL), in parallel on pool when large. */
static void convert(act_fmt f, const float *x, uint8_t *q, int64_t n, int64_t cols, kn_pool *pool) {
    conv_ctx c = {f, x, q, n, cols, 1};
    if (n * cols >= ELEM_PAR_WORK)
        c.n_tasks =
            KN_MAX(1, KN_MIN(n, KN_MIN((int64_t)ELEM_TASKS * kn_pool_threads(pool), n * cols / (ELEM_PAR_WORK / 4))));
    kn_pool_run(pool, c.n_tasks, conv_task, &c);
}

/* One run of the experts of a chunk of the grouped rows [p0, p1): segment s (expert[s], ascending)
 * owns the chunk's rows of that expert, in act and in each output. Its matrices
 * (n_w of them, `rows` rows each) are cut into tiles of TR rows: tile ti is segment
 * ti / (n_w * tpm), matrix (ti / tpm) % n_w, row tile ti % tpm. Task t owns the contiguous tile range
 * [n_tiles*t/n_tasks, n_tiles*(t+1)/n_tasks); within a segment: token blocks outer, row tiles,
 * token tiles, as kn_matmul. Every output is one gemm/panel output (the tile contract of kernels.h):
 * the value kn_matmul gives for that row of that expert's matrix. */
typedef struct run_ctx {
    const kn_weight *stack[2]; /* the stacked expert matrices */
    float *y[2];               /* [chunk rows][rows] outputs */
    kn_gemm_fn gemm[2];
    kn_p16_fn p16[2];     /* packed stacks: panel kernels */
    int n_w, TR, TT;      /* TT: tokens per gemm call (plain stacks) */
    const kn_kernels *ks; /* packed stacks: the panel kernels' widths (kn_p16_tile) */
    int64_t rows, cols, tpm, n_tiles, n_tasks;
    const int32_t *expert; /* [n_seg] segment -> expert, ascending */
    const int32_t *start;  /* [E + 1] each expert's first grouped row (moe.h scratch moe_start) */
    int64_t p0, p1;        /* the chunk: grouped rows [p0, p1), act row 0 = grouped row p0 */
    const uint8_t *act;    /* [chunk rows][act_stride] */
    size_t act_stride;
} run_ctx;

static void run_tiles(const run_ctx *c, int64_t t0, int64_t t1) {
    const int64_t per_seg = c->n_w * c->tpm;
    for (int64_t ti = t0; ti < t1;) {
        const int64_t s = ti / per_seg, seg_end = KN_MIN(t1, (s + 1) * per_seg);
        const int64_t e = c->expert[s];
        const int64_t n0 = KN_MAX((int64_t)c->start[e], c->p0) - c->p0,
                      n1 = KN_MIN((int64_t)c->start[e + 1], c->p1) - c->p0;
        for (int64_t b0 = n0; b0 < n1; b0 += TOKEN_BLOCK) {
            const int64_t b1 = KN_MIN(n1, b0 + TOKEN_BLOCK);
            const int TT = c->p16[0] ? kn_p16_tile(c->ks, b1 - b0) : c->TT;
            for (int64_t tj = ti; tj < seg_end; tj++) {
                const int mi = (int)((tj / c->tpm) % c->n_w);
                const kn_weight *w = c->stack[mi];
                const int64_t r0 = (tj % c->tpm) * c->TR;
                const int nr = (int)KN_MIN((int64_t)c->TR, c->rows - r0);
                const size_t rb = w->row_bytes;
                const uint8_t *wd = w->data + ((size_t)e * (size_t)c->rows + (size_t)r0) * rb;
                float *y = c->y[mi];
                for (int64_t n = b0; n < b1; n += TT) {
                    const int nt = (int)KN_MIN((int64_t)TT, b1 - n);
                    const uint8_t *x = c->act + (size_t)n * c->act_stride;
                    if (c->p16[mi])
                        c->p16[mi](c->cols, wd, nr / KN_P16_ROWS, x, c->act_stride, nt, y + n * c->rows + r0,
                                   (size_t)c->rows);
                    else c->gemm[mi](c->cols, wd, rb, nr, x, c->act_stride, nt, y + n * c->rows + r0, (size_t)c->rows);
                }
            }
        }
        ti = seg_end;
    }
}

static void run_task(void *arg, int64_t task, int worker) {
    (void)worker;
    const run_ctx *c = arg;
    run_tiles(c, c->n_tiles * task / c->n_tasks, c->n_tiles * (task + 1) / c->n_tasks);
}

/* ys[i][r][rows] = act row r . (matrix i of row r's expert)^T for the rows r of the chunk [p0, p1)
 * of the grouped rows (start: each expert's first; expert[n_seg]: the chunk's experts, ascending),
 * as one parallel run (n_w: 2 for gate and up, 1 for down). */
static void run_experts(const kn_weight *const *stacks, float *const *ys, int n_w, int64_t rows, const int32_t *expert,
                        int n_seg, const int32_t *start, int64_t p0, int64_t p1, const uint8_t *act, size_t act_stride,
                        kn_pool *pool, const kn_kernels *ks) {
    const bool packed = stacks[0]->packed;
    run_ctx c = {.n_w = n_w,
                 .TR = packed ? KN_P16_ROWS * KN_P16_PANELS : ks->tile_r,
                 .TT = ks->tile_t,
                 .ks = ks,
                 .rows = rows,
                 .cols = stacks[0]->cols,
                 .expert = expert,
                 .start = start,
                 .p0 = p0,
                 .p1 = p1,
                 .act = act,
                 .act_stride = act_stride};
    for (int i = 0; i < n_w; i++) {
        c.stack[i] = stacks[i];
        c.y[i] = ys[i];
        c.gemm[i] = kn_kernels_gemm(ks, stacks[i]->type);
        c.p16[i] = packed ? ks->p16[stacks[i]->type] : NULL;
    }
    c.tpm = (rows + c.TR - 1) / c.TR;
    c.n_tiles = (int64_t)n_seg * n_w * c.tpm;
    const int64_t work = (p1 - p0) * n_w * rows * c.cols;
    c.n_tasks = 1;
    if (work > PAR_WORK)
        c.n_tasks =
            KN_MAX(1, KN_MIN(c.n_tiles, KN_MIN((int64_t)TASKS_PER_THR * kn_pool_threads(pool), work / TASK_WORK)));
    kn_pool_run(pool, c.n_tasks, run_task, &c);
}

/* Routing of the step's N tokens (s->moe_logits, moe_ids, moe_w) and their grouping by expert:
 * moe_start[e] .. moe_start[e + 1] index moe_tok (token * k + slot), tokens ascending. */
static void route_and_group(const kiln_model *m, kn_scratch *s, const kn_moe *moe, int64_t N) {
    const int E = moe->n_expert, k = moe->n_used;
    kn_matmul(&moe->router, s->xb, s->moe_logits, N, s->qbuf, s->pool, m->kernels);
    if (moe->router_bias) kn_add_bias(s->moe_logits, moe->router_bias, N, E);
    for (int64_t t = 0; t < N; t++) kn_moe_route(moe, s->moe_logits + t * E, s->moe_ids + t * k, s->moe_w + t * k);
    int32_t *start = s->moe_start;
    memset(start, 0, sizeof(int32_t) * (size_t)(E + 1));
    for (int64_t i = 0; i < N * k; i++) start[s->moe_ids[i] + 1]++;
    for (int e = 0; e < E; e++) start[e + 1] += start[e];
    int32_t *fill = s->moe_fill;
    memcpy(fill, start, sizeof(int32_t) * (size_t)E);
    for (int64_t i = 0; i < N * k; i++) s->moe_tok[fill[s->moe_ids[i]]++] = (int32_t)i;
}

/* gate[n] = act(gate[n]) * up[n] with the layer's activation. */
static void gated(kn_ffn_act act, float *gate, const float *up, int64_t n, kn_pool *pool, const kn_kernels *ks) {
    if (act == KN_ACT_SWIGLU_CLAMP) swiglu_clamp(gate, up, n);
    else kn_swiglu(gate, up, n, pool, ks);
}

/* xb2 += each grouped row's weighted output: rows [p0, p1) of moe_tok, their outputs y[p1 - p0][d].
 * Called on chunks in grouped order, so every token sums its experts in ascending order. */
static void accumulate(kn_scratch *s, int k, int64_t d, int64_t p0, int64_t p1, const float *y) {
    for (int64_t i = p0; i < p1; i++) {
        const int32_t tk = s->moe_tok[i];
        const float w = s->moe_w[tk];
        float *out = s->xb2 + (tk / k) * d;
        const float *yi = y + (i - p0) * d;
        for (int64_t j = 0; j < d; j++) out[j] += w * yi[j];
    }
}

/* The plain path after routing: one expert at a time, two parallel runs each. */
static void ffn_per_expert(const kiln_model *m, kn_scratch *s, int l, int64_t N) {
    const kn_moe *moe = &m->layers[l].moe;
    const kn_ffn_act act = m->layers[l].act;
    const int E = moe->n_expert, k = moe->n_used;
    const int64_t d = m->hp.n_embd, ff = moe->n_ff;
    const int32_t *start = s->moe_start;
    memset(s->xb2, 0, sizeof(float) * (size_t)(N * d));
    for (int e = 0; e < E; e++) {
        const int64_t c = start[e + 1] - start[e];
        if (c == 0) continue;
        const int32_t *tok = s->moe_tok + start[e];
        for (int64_t i = 0; i < c; i++) memcpy(s->moe_x + i * d, s->xb + (tok[i] / k) * d, sizeof(float) * (size_t)d);
        const kn_weight g = kn_moe_expert(&moe->gate, e, ff), u = kn_moe_expert(&moe->up, e, ff),
                        dn = kn_moe_expert(&moe->down, e, d);
        const kn_matmul_out gate_up[2] = {{&g, s->hb}, {&u, s->hb2}};
        kn_matmul_multi(gate_up, 2, s->moe_x, c, s->qbuf, s->pool, m->kernels);
        if (moe->gate_bias) kn_add_bias(s->hb, moe->gate_bias + e * ff, c, ff);
        if (moe->up_bias) kn_add_bias(s->hb2, moe->up_bias + e * ff, c, ff);
        gated(act, s->hb, s->hb2, c * ff, s->pool, m->kernels);
        kn_matmul(&dn, s->hb, s->moe_y, c, s->qbuf, s->pool, m->kernels);
        if (moe->down_bias) kn_add_bias(s->moe_y, moe->down_bias + e * d, c, d);
        accumulate(s, k, d, start[e], start[e + 1], s->moe_y);
    }
}

/* The grouped path after routing: each token's row converted once into the gate/up activation
 * format (qbuf); then per chunk of at most n_max grouped rows (in grouped order): the rows gathered
 * (moe_x), every expert's gate and up in one run (hb, hb2), biases and the activation, hb converted
 * into the down format (into hb2, free by then), every expert's down in one run (moe_y), and the
 * weighted sums. Decode (N * k <= n_max) makes two runs per layer. */
static void ffn_grouped(const kiln_model *m, kn_scratch *s, int l, int64_t N) {
    const kn_moe *moe = &m->layers[l].moe;
    const kn_ffn_act act = m->layers[l].act;
    const kn_kernels *ks = m->kernels;
    const int E = moe->n_expert, k = moe->n_used;
    const int64_t d = m->hp.n_embd, ff = moe->n_ff, cap = s->n_max;
    const int32_t *start = s->moe_start;
    /* xq[N][fx.stride]: the tokens' rows in the gate/up format (a converted row is no wider than
     * its floats, so a chunk's gathered rows fit moe_x, and its converted hb rows fit hb2) */
    const act_fmt fx = act_format(&moe->gate, ks), fh = act_format(&moe->down, ks);
    const uint8_t *xq = (const uint8_t *)s->xb;
    if (fx.quant) {
        convert(fx, s->xb, s->qbuf, N, d, s->pool);
        xq = s->qbuf;
    }
    memset(s->xb2, 0, sizeof(float) * (size_t)(N * d));
    int32_t *experts = s->moe_fill; /* a chunk's experts (the grouping cursor is free now) */
    const kn_weight *gu[2] = {&moe->gate, &moe->up}, *dn = &moe->down;
    float *gu_y[2] = {s->hb, s->hb2};
    for (int64_t p0 = 0; p0 < N * k; p0 += cap) {
        const int64_t p1 = KN_MIN(N * k, p0 + cap), c = p1 - p0;
        uint8_t *xg = (uint8_t *)s->moe_x;
        for (int64_t i = p0; i < p1; i++)
            memcpy(xg + (size_t)(i - p0) * fx.stride, xq + (size_t)(s->moe_tok[i] / k) * fx.stride, fx.stride);
        int n_seg = 0;
        for (int e = 0; e < E; e++)
            if (start[e + 1] > p0 && start[e] < p1 && start[e + 1] > start[e]) experts[n_seg++] = e;
        run_experts(gu, gu_y, 2, ff, experts, n_seg, start, p0, p1, xg, fx.stride, s->pool, ks);
        for (int i = 0; i < n_seg; i++) {
            const int e = experts[i];
            const int64_t r0 = KN_MAX((int64_t)start[e], p0) - p0, r1 = KN_MIN((int64_t)start[e + 1], p1) - p0;
            if (moe->gate_bias) kn_add_bias(s->hb + r0 * ff, moe->gate_bias + e * ff, r1 - r0, ff);
            if (moe->up_bias) kn_add_bias(s->hb2 + r0 * ff, moe->up_bias + e * ff, r1 - r0, ff);
        }
        gated(act, s->hb, s->hb2, c * ff, s->pool, ks);
        const uint8_t *hq = (const uint8_t *)s->hb;
        if (fh.quant) {
            convert(fh, s->hb, (uint8_t *)s->hb2, c, ff, s->pool);
            hq = (const uint8_t *)s->hb2;
        }
        run_experts(&dn, &s->moe_y, 1, d, experts, n_seg, start, p0, p1, hq, fh.stride, s->pool, ks);
        if (moe->down_bias)
            for (int i = 0; i < n_seg; i++) {
                const int e = experts[i];
                const int64_t r0 = KN_MAX((int64_t)start[e], p0) - p0, r1 = KN_MIN((int64_t)start[e + 1], p1) - p0;
                kn_add_bias(s->moe_y + r0 * d, moe->down_bias + e * d, r1 - r0, d);
            }
        accumulate(s, k, d, p0, p1, s->moe_y);
    }
}

void kn_moe_ffn(const kiln_model *m, kn_scratch *s, int l, int64_t N) {
    const kn_moe *moe = &m->layers[l].moe;
    route_and_group(m, s, moe, N);
    if (same_format(&moe->gate, &moe->up, m->kernels)) ffn_grouped(m, s, l, N);
    else ffn_per_expert(m, s, l, N);
}

void kn_moe_ffn_plain(const kiln_model *m, kn_scratch *s, int l, int64_t N) {
    route_and_group(m, s, &m->layers[l].moe, N);
    ffn_per_expert(m, s, l, N);
}

kiln_status kn_moe_load(kn_loader *L, int l, kn_ffn_act act, kn_moe_gating gating, bool norm_topk, bool biases) {
    kiln_model *m = kn_loader_model(L);
    const kn_hparams *hp = &m->hp;
    kn_layer *ly = &m->layers[l];
    kn_moe *moe = &ly->moe;
    const int64_t d = hp->n_embd, E = hp->n_expert, ff = hp->n_ff_exp;
    ly->ffn = KN_FFN_MOE;
    ly->act = act;
    moe->n_expert = hp->n_expert;
    moe->n_used = hp->n_expert_used;
    moe->n_ff = hp->n_ff_exp;
    moe->gating = gating;
    moe->norm_topk = norm_topk;
    char n[96];
    kiln_status st;
    if ((st = kn_load_matrix(L, kn_blk_name(n, l, "ffn_gate_inp.weight"), d, E, &moe->router))) return st;
    if ((st = kn_load_experts(L, kn_blk_name(n, l, "ffn_gate_exps.weight"), d, ff, E, &moe->gate))) return st;
    if ((st = kn_load_experts(L, kn_blk_name(n, l, "ffn_up_exps.weight"), d, ff, E, &moe->up))) return st;
    if ((st = kn_load_experts(L, kn_blk_name(n, l, "ffn_down_exps.weight"), ff, d, E, &moe->down))) return st;
    if ((st = kn_load_vector(L, kn_blk_name(n, l, "ffn_gate_inp.bias"), E, biases, &moe->router_bias))) return st;
    if ((st = kn_load_vectors(L, kn_blk_name(n, l, "ffn_gate_exps.bias"), ff, E, biases, &moe->gate_bias))) return st;
    if ((st = kn_load_vectors(L, kn_blk_name(n, l, "ffn_up_exps.bias"), ff, E, biases, &moe->up_bias))) return st;
    return kn_load_vectors(L, kn_blk_name(n, l, "ffn_down_exps.bias"), d, E, biases, &moe->down_bias);
}

/* Experts per layer and per token at most (a file beyond: a format error naming the key). */
#define MAX_EXPERTS 1024

kiln_status kn_moe_hparams(kiln_model *m, int32_t ff_default) {
    kn_hparams *hp = &m->hp;
    kiln_status st;
    hp->n_expert = 0;
    if ((st = kn_meta_int(m, "expert_count", false, 0, MAX_EXPERTS, &hp->n_expert))) return st;
    if (hp->n_expert == 0) return KILN_OK;
    if ((st = kn_meta_int(m, "expert_used_count", true, 1, hp->n_expert, &hp->n_expert_used))) return st;
    hp->n_ff_exp = ff_default;
    return kn_meta_int(m, "expert_feed_forward_length", false, 1, 1 << 20, &hp->n_ff_exp);
}

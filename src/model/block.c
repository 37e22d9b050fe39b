/*
 * block.c - the shared pieces of a decoder block (see block.h): q/k/v projections, grouped-query
 * attention with per-head q/k norms, RoPE and sliding windows, the FFN of a layer, and the pre-norm
 * decoder block. Shapes are noted per step; N is the number of stacked tokens of all rows.
 *
 * Threads: every step runs on the scratch's pool, split only over independent outputs (weight rows,
 * tokens, (token, head) pairs), so every value is bit-identical for any thread count and any
 * assignment of tasks to threads. A decoder block is about five pool runs for decode (q/k/v,
 * attention, output projection, gate/up, down) and a few more for prefill (per-token RoPE, norms,
 * activation conversions, the gated activation).
 */
#include "model/block.h"

#include "model/moe.h"
#include "tensor/ops.h"

#include <math.h>
#include <string.h>

void kn_block_qkv(const kiln_model *m, kn_scratch *s, int l, int64_t N) {
    const kn_hparams *hp = &m->hp;
    const kn_layer *ly = &m->layers[l];
    const int64_t qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    const kn_matmul_out qkv[3] = {{&ly->wq, s->q}, {&ly->wk, s->k}, {&ly->wv, s->v}};
    kn_matmul_multi(qkv, 3, s->xb, N, s->qbuf, s->pool, m->kernels);
    if (ly->bq) kn_add_bias(s->q, ly->bq, N, qd);
    if (ly->bk) kn_add_bias(s->k, ly->bk, N, kvd);
    if (ly->bv) kn_add_bias(s->v, ly->bv, N, kvd);
}

/* The first cached position a token at pos attends to in a layer of the given window (0: all). */
static int32_t window_start(int32_t window, int32_t pos) { return window > 0 && pos >= window ? pos - window + 1 : 0; }

/* Causal attention of nq query heads of one token that share the KV head at kv_off, over its row's
 * KV positions [p0, pos] (p0: the window's first position): the kernel set's fused attention (online
 * softmax, no score vector; see tensor/attend.c), given the K and V rows from p0 on; soft-capped
 * scores (Gemma 2) take the reference kernel, the only one that caps.
 * q[nq][hd] -> out[nq][hd]. */
static void attend_heads(const kn_kernels *ks, const kn_kv *kv, int l, const kn_layer_attn *a, int32_t pos, int kv_off,
                         int nq, int hd, const float *q, float *out) {
    const int32_t p0 = window_start(a->window, pos);
    kn_kv_attend(ks, kv, l, p0, pos + 1 - p0, kv_off, hd, q, nq, a->scale, a->softcap, out);
}

/* Attention sinks: out[nq][hd] (the softmax over the row's positions [p0, pos]) becomes the softmax
 * with exp(sink[h]) added to head h's denominator: out * 1 / (1 + exp(sink - lse)), lse the log of
 * the sum of exp(score) over the positions, recomputed here from K in a fixed order. */
static void apply_sinks(const kn_kv *kv, int l, const kn_layer_attn *a, int32_t pos, int kv_off, int nq, int hd,
                        const float *q, const float *sinks, float *out) {
    const int32_t p0 = window_start(a->window, pos);
    float rq[KN_KV_MAX_ROT_HD];
    for (int h = 0; h < nq; h++) {
        const float *qh = kn_kv_query(kv, l, kv_off, hd, q + (int64_t)h * hd, rq); /* as the keys are stored */
        float max = -INFINITY, sum = 0;
        for (int pass = 0; pass < 2; pass++) {
            for (int32_t p = p0; p <= pos; p++) {
                const float dot = kn_kv_key_dot(kv, l, p, kv_off, hd, qh);
                const float sc = a->scale * dot;
                if (pass == 0) max = fmaxf(max, sc);
                else sum += expf(sc - max);
            }
        }
        const float lse = max + logf(sum), f = 1.0f / (1.0f + expf(sinks[h] - lse));
        for (int i = 0; i < hd; i++) out[(int64_t)h * hd + i] *= f;
    }
}

/* The per-token and per-(token, head chunk) steps of one block, as pool tasks. */
typedef struct block_ctx {
    const kiln_model *m;
    kn_scratch *s;
    kn_batch_row *rows;
    int l;
    int64_t N, n_tasks;
} block_ctx;

/* Tokens [t0, t1): q/k norm, RoPE, append k and v to the row's cache. Each token writes only its own
 * q/k rows and its own KV position. */
static void prep_tokens(const block_ctx *c, int64_t t0, int64_t t1) {
    const kiln_model *m = c->m;
    const kn_hparams *hp = &m->hp;
    const kn_layer *ly = &m->layers[c->l];
    kn_scratch *s = c->s;
    const int hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv;
    const int64_t qd = (int64_t)nh * hd, kvd = (int64_t)nkv * hd;
    for (int64_t t = t0; t < t1; t++) {
        float *q = s->q + t * qd, *k = s->k + t * kvd;
        if (ly->q_norm) kn_rmsnorm(q, q, ly->q_norm, nh, hd, hp->norm_eps, NULL);
        if (ly->k_norm) kn_rmsnorm(k, k, ly->k_norm, nkv, hd, hp->norm_eps, NULL);
        const int32_t pos = s->tok_pos[t];
        kn_kv *kv = c->rows[s->tok_row[t]].kv;
        if (ly->attn.rope.n_rot) {
            const bool long_ctx = kv->n_ctx > ly->attn.rope.n_ctx_orig;
            float cs[KN_ROPE_MAX_HALF], sn[KN_ROPE_MAX_HALF];
            kn_rope_angles(&ly->attn.rope, pos, long_ctx, cs, sn);
            kn_rope_apply(q, nh, hd, &ly->attn.rope, cs, sn);
            kn_rope_apply(k, nkv, hd, &ly->attn.rope, cs, sn);
        }
        kn_kv_store(kv, c->l, pos, k, s->v + t * kvd);
    }
}

static void prep_task(void *arg, int64_t task, int worker) {
    const block_ctx *c = arg;
    prep_tokens(c, c->N * task / c->n_tasks, c->N * (task + 1) / c->n_tasks);
}

/* A KV head's group of gqa = n_head / n_head_kv query heads is split into the fewest chunks of at
 * most KN_ATTEND_MAX_Q heads, of `chunk` heads each (the last may be shorter); one chunk of one token
 * is an attention unit. */
static int chunks_per_group(const kn_hparams *hp) {
    return (hp->n_head / hp->n_head_kv + KN_ATTEND_MAX_Q - 1) / KN_ATTEND_MAX_Q;
}

static int64_t units_per_token(const kn_hparams *hp) { return (int64_t)hp->n_head_kv * chunks_per_group(hp); }

/* Attention units [i0, i1) of att[N][qd]: unit i = (token i / units_per_token, chunk i % units_per_token).
 * Each unit writes only its own heads of its own token. */
static void attend_units(const block_ctx *c, int64_t i0, int64_t i1) {
    const kn_hparams *hp = &c->m->hp;
    const kn_layer_attn *a = &c->m->layers[c->l].attn;
    const kn_scratch *s = c->s;
    const int hd = hp->head_dim, nh = hp->n_head, gqa = nh / hp->n_head_kv, per_group = chunks_per_group(hp);
    const int chunk = (gqa + per_group - 1) / per_group, per_token = hp->n_head_kv * per_group;
    const int64_t qd = (int64_t)nh * hd;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t t = i / per_token;
        const int u = (int)(i % per_token), g = u / per_group, h0 = g * gqa + (u % per_group) * chunk;
        const int nq = KN_MIN(chunk, (g + 1) * gqa - h0);
        /* bidirectional: every position of the row's call, whose K and V prep_tokens stored first */
        const kn_batch_row *br = &c->rows[s->tok_row[t]];
        const int32_t pos = a->bidir ? br->kv->n_past + br->n_tokens - 1 : s->tok_pos[t];
        attend_heads(c->m->kernels, br->kv, c->l, a, pos, g * hd, nq, hd, s->q + t * qd + (int64_t)h0 * hd,
                     s->att + t * qd + (int64_t)h0 * hd);
        if (a->sinks)
            apply_sinks(c->rows[s->tok_row[t]].kv, c->l, a, s->tok_pos[t], g * hd, nq, hd,
                        s->q + t * qd + (int64_t)h0 * hd, a->sinks + h0, s->att + t * qd + (int64_t)h0 * hd);
    }
}

/* Task 0 takes the LAST range of units: later tokens attend over more positions, so the costly
 * tasks are claimed first and the cheap ones fill the end of the run. */
static void attend_task(void *arg, int64_t task, int worker) {
    const block_ctx *c = arg;
    const int64_t units = c->N * units_per_token(&c->m->hp), r = c->n_tasks - 1 - task;
    attend_units(c, units * r / c->n_tasks, units * (r + 1) / c->n_tasks);
}

/* Per-token steps below this many tokens, and attention below this many multiply-adds (roughly),
 * run on the caller: a parallel run would cost more than it saves. */
#define PREP_PAR_TOKENS       16
#define ATTN_PAR_WORK         200000
/* Least attention multiply-adds per task, and tasks per thread. */
#define ATTN_TASK_WORK        32768
#define ATTN_TASKS_PER_THREAD 16

void kn_block_attend(const kiln_model *m, kn_scratch *s, kn_batch_row *rows, int l, int64_t N) {
    const kn_hparams *hp = &m->hp;
    const kn_layer_attn *a = &m->layers[l].attn;
    const int hd = hp->head_dim, nh = hp->n_head;
    kn_pool *pool = s->pool;
    const int nt = kn_pool_threads(pool);
    block_ctx c = {.m = m, .s = s, .rows = rows, .l = l, .N = N};
    /* per token: q/k norm, RoPE, append k and v to the row's cache */
    if (nt > 1 && N >= PREP_PAR_TOKENS) {
        c.n_tasks = KN_MIN(N, (int64_t)nt * 4);
        kn_pool_run(pool, c.n_tasks, prep_task, &c);
    } else {
        prep_tokens(&c, 0, N);
    }
    /* att[N][qd]: every (token, head chunk) unit is independent */
    const int64_t units = N * units_per_token(hp);
    int64_t work = 0; /* multiply-adds, roughly */
    for (int64_t t = 0; t < N; t++)
        work += (int64_t)(s->tok_pos[t] + 1 - window_start(a->window, s->tok_pos[t])) * nh * hd;
    if (nt > 1 && units > 1 && work > ATTN_PAR_WORK) {
        c.n_tasks = KN_MAX(1, KN_MIN(KN_MIN(units, (int64_t)nt * ATTN_TASKS_PER_THREAD), work / ATTN_TASK_WORK));
        kn_pool_run(pool, c.n_tasks, attend_task, &c);
    } else {
        attend_units(&c, 0, units);
    }
}

void kn_block_ffn(const kiln_model *m, kn_scratch *s, int l, int64_t N) {
    const kn_layer *ly = &m->layers[l];
    const int64_t ff = m->hp.n_ff;
    switch (ly->ffn) {
        case KN_FFN_DENSE: {
            /* hb[N][ff] = gate . xb, hb2[N][ff] = up . xb; hb = act(hb) * hb2; xb2 = down . hb */
            const kn_matmul_out gate_up[2] = {{&ly->w_gate, s->hb}, {&ly->w_up, s->hb2}};
            kn_matmul_multi(gate_up, 2, s->xb, N, s->qbuf, s->pool, m->kernels);
            if (ly->act == KN_ACT_GELU_TANH) kn_geglu(s->hb, s->hb2, N * ff, s->pool, m->kernels);
            else kn_swiglu(s->hb, s->hb2, N * ff, s->pool, m->kernels);
            kn_matmul(&ly->w_down, s->hb, s->xb2, N, s->qbuf, s->pool, m->kernels);
            break;
        }
        case KN_FFN_PLAIN: {
            /* hb[N][ff] = act(up . xb + b_up); xb2 = down . hb + b_down */
            kn_matmul(&ly->w_up, s->xb, s->hb, N, s->qbuf, s->pool, m->kernels);
            if (ly->b_up) kn_add_bias(s->hb, ly->b_up, N, ff);
            kn_gelu(s->hb, N * ff);
            kn_matmul(&ly->w_down, s->hb, s->xb2, N, s->qbuf, s->pool, m->kernels);
            if (ly->b_down) kn_add_bias(s->xb2, ly->b_down, N, m->hp.n_embd);
            break;
        }
        case KN_FFN_MOE: kn_moe_ffn(m, s, l, N); break;
    }
}

void kn_block_decoder(const kiln_model *m, kn_scratch *s, kn_batch_row *rows, int l, int64_t N) {
    const kn_hparams *hp = &m->hp;
    const kn_layer *ly = &m->layers[l];
    const int64_t d = hp->n_embd;
    /* attention: xb[N][d] = norm(x); q, k, v; att[N][qd]; x += wo . att */
    kn_rmsnorm(s->xb, s->x, ly->attn_norm, N, d, hp->norm_eps, s->pool);
    kn_block_qkv(m, s, l, N);
    kn_block_attend(m, s, rows, l, N);
    kn_matmul(&ly->wo, s->att, s->xb2, N, s->qbuf, s->pool, m->kernels);
    if (ly->bo) kn_add_bias(s->xb2, ly->bo, N, d);
    if (ly->post_attn_norm) kn_rmsnorm(s->xb2, s->xb2, ly->post_attn_norm, N, d, hp->norm_eps, s->pool);
    kn_add(s->x, s->xb2, N * d);
    /* FFN: x += ffn(norm(x)) */
    kn_rmsnorm(s->xb, s->x, ly->ffn_norm, N, d, hp->norm_eps, s->pool);
    kn_block_ffn(m, s, l, N);
    if (ly->post_ffn_norm) kn_rmsnorm(s->xb2, s->xb2, ly->post_ffn_norm, N, d, hp->norm_eps, s->pool);
    kn_add(s->x, s->xb2, N * d);
}

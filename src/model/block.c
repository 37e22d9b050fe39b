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

/* Causal attention of one token's query heads for nkv consecutive KV heads from the one at kv_off, nq
 * query heads each, over its row's KV positions [p0, pos] (p0: the window's first position): the
 * kernel set's fused attention (online softmax, no score vector; see tensor/attend.c), given the K and
 * V rows from p0 on; soft-capped scores (Gemma 2) take the reference kernel, the only one that caps.
 * q[nkv][nq][hd] -> out[nkv][nq][hd]. */
static void attend_heads(const kn_kernels *ks, const kn_kv *kv, int l, const kn_layer_attn *a, int32_t pos, int kv_off,
                         int nkv, int nq, int hd, const float *q, float *out) {
    const int32_t p0 = window_start(a->window, pos);
    kn_kv_attend(ks, kv, l, p0, pos + 1 - p0, kv_off, hd, nkv, q, nq, a->scale, a->softcap, out);
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

/* How a token's attention is cut into units, one kernel call each (attn_split_of). */
typedef struct attn_split {
    int per_token; /* units per token */
    int kvh;       /* KV heads per unit (the last unit of a token may have fewer) when chunk == 0 */
    int chunk;     /* else: query heads per unit, one KV head's heads cut in chunks of this many */
} attn_split;

/* The per-token and per-(token, heads) steps of one block, as pool tasks. */
typedef struct block_ctx {
    const kiln_model *m;
    kn_scratch *s;
    kn_batch_row *rows;
    int l;
    int64_t N, n_tasks;
    attn_split split;
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

/* Query heads' accumulators of one attention call at most (floats): 16 KB, kept in L1. */
#define ATTN_CALL_FLOATS 4096

/* The units of N tokens' attention on nt threads. When a KV head's gqa = n_head / n_head_kv query heads
 * fit one call (KN_ATTEND_MAX_Q), a unit is a run of consecutive KV heads with all their query heads:
 * one sweep over the cache reads those heads' rows side by side (kn_attend_rows), as few runs per token
 * as the kernels' bounds allow (KN_ATTEND_MAX_HEADS heads, ATTN_CALL_FLOATS), more when the tokens
 * alone would leave threads idle (a decode step of one row on two threads: two halves). Otherwise a
 * unit is a chunk of one KV head's query heads, as few chunks of at most KN_ATTEND_MAX_Q as there can
 * be. Each head's values are the same whatever the units (the kernels' contract). */
static attn_split attn_split_of(const kn_hparams *hp, int64_t N, int nt) {
    const int nkv = hp->n_head_kv, gqa = hp->n_head / nkv;
    if (gqa > KN_ATTEND_MAX_Q) {
        const int per_group = (gqa + KN_ATTEND_MAX_Q - 1) / KN_ATTEND_MAX_Q;
        return (attn_split){.per_token = nkv * per_group, .kvh = 1, .chunk = (gqa + per_group - 1) / per_group};
    }
    const int most = KN_MAX(1, KN_MIN(KN_ATTEND_MAX_HEADS, ATTN_CALL_FLOATS / hp->head_dim) / gqa);
    int runs = (nkv + most - 1) / most;
    if (N * runs < nt) runs = (int)KN_MIN((int64_t)nkv, (nt + N - 1) / N);
    const int kvh = (nkv + runs - 1) / runs;
    return (attn_split){.per_token = (nkv + kvh - 1) / kvh, .kvh = kvh, .chunk = 0};
}

/* Attention units [i0, i1) of att[N][qd]: unit i is unit i % per_token of token i / per_token. Each
 * unit writes only its own heads of its own token. */
static void attend_units(const block_ctx *c, int64_t i0, int64_t i1) {
    const kn_hparams *hp = &c->m->hp;
    const kn_layer_attn *a = &c->m->layers[c->l].attn;
    const kn_scratch *s = c->s;
    const attn_split *sp = &c->split;
    const int hd = hp->head_dim, nh = hp->n_head, gqa = nh / hp->n_head_kv;
    const int64_t qd = (int64_t)nh * hd;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t t = i / sp->per_token;
        const int u = (int)(i % sp->per_token);
        int g, h0, nkv, nq; /* the unit: KV heads g .. g + nkv - 1, query heads from h0, nq per KV head */
        if (sp->chunk) {
            const int per_group = sp->per_token / hp->n_head_kv;
            g = u / per_group, h0 = g * gqa + (u % per_group) * sp->chunk, nkv = 1;
            nq = KN_MIN(sp->chunk, (g + 1) * gqa - h0);
        } else {
            g = u * sp->kvh, h0 = g * gqa, nkv = KN_MIN(sp->kvh, hp->n_head_kv - g), nq = gqa;
        }
        /* bidirectional: every position of the row's call, whose K and V prep_tokens stored first */
        const kn_batch_row *br = &c->rows[s->tok_row[t]];
        const int32_t pos = a->bidir ? br->kv->n_past + br->n_tokens - 1 : s->tok_pos[t];
        float *out = s->att + t * qd + (int64_t)h0 * hd;
        const float *q = s->q + t * qd + (int64_t)h0 * hd;
        attend_heads(c->m->kernels, br->kv, c->l, a, pos, g * hd, nkv, nq, hd, q, out);
        if (a->sinks)
            for (int k = 0; k < nkv; k++)
                apply_sinks(br->kv, c->l, a, s->tok_pos[t], (g + k) * hd, nq, hd, q + (int64_t)k * nq * hd,
                            a->sinks + h0 + k * nq, out + (int64_t)k * nq * hd);
    }
}

/* Task 0 takes the LAST range of units: later tokens attend over more positions, so the costly
 * tasks are claimed first and the cheap ones fill the end of the run. */
static void attend_task(void *arg, int64_t task, int worker) {
    const block_ctx *c = arg;
    const int64_t units = c->N * c->split.per_token, r = c->n_tasks - 1 - task;
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
    /* att[N][qd]: every (token, heads) unit is independent */
    c.split = attn_split_of(hp, N, nt);
    const int64_t units = N * c.split.per_token;
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

/*
 * llama.c - the forward pass of the Llama family: pre-norm decoder blocks of grouped-query
 * attention with RoPE and a SiLU-gated FFN. qwen2 adds biases to q/k/v; qwen3 RMS-normalizes each
 * q and k head before RoPE. Shapes are noted per step; N is the number of stacked tokens of all rows.
 *
 * Threads: every step runs on the scratch's pool, split only over independent outputs (weight rows,
 * tokens, (token, head) pairs), so every value is bit-identical for any thread count and any
 * assignment of tasks to threads. A decoder block is about five pool runs for decode (q/k/v,
 * attention, output projection, gate/up, down) and a few more for prefill (per-token RoPE, norms,
 * activation conversions, swiglu).
 */
#include "model/forward.h"

#include "tensor/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t max_qbuf(const kiln_model *m, int32_t n) {
    size_t best = 0;
    const kn_weight *ws[] = {&m->output};
    for (size_t i = 0; i < KN_ARRAY_LEN(ws); i++) best = KN_MAX(best, kn_matmul_scratch(ws[i]->type, ws[i]->cols, n));
    for (int l = 0; l < m->hp.n_layer; l++) {
        const kn_layer *ly = &m->layers[l];
        const kn_weight *lw[] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down};
        for (size_t i = 0; i < KN_ARRAY_LEN(lw); i++)
            best = KN_MAX(best, kn_matmul_scratch(lw[i]->type, lw[i]->cols, n));
    }
    return best;
}

kiln_status kn_scratch_init(kn_scratch *s, const kiln_model *m, int32_t n_max, int32_t n_ctx, int n_threads) {
    memset(s, 0, sizeof *s);
    const kn_hparams *hp = &m->hp;
    s->n_max = n_max;
    s->n_ctx = n_ctx;
    s->n_threads = n_threads;
    const size_t N = (size_t)n_max, qd = (size_t)hp->n_head * hp->head_dim, kvd = (size_t)hp->n_head_kv * hp->head_dim;
    s->x = kn_alloc_aligned(N * hp->n_embd * sizeof(float));
    s->xb = kn_alloc_aligned(N * hp->n_embd * sizeof(float));
    s->xb2 = kn_alloc_aligned(N * hp->n_embd * sizeof(float));
    s->q = kn_alloc_aligned(N * qd * sizeof(float));
    s->k = kn_alloc_aligned(N * kvd * sizeof(float));
    s->v = kn_alloc_aligned(N * kvd * sizeof(float));
    s->att = kn_alloc_aligned(N * qd * sizeof(float));
    s->hb = kn_alloc_aligned(N * hp->n_ff * sizeof(float));
    s->hb2 = kn_alloc_aligned(N * hp->n_ff * sizeof(float));
    s->qbuf = kn_alloc_aligned(KN_MAX(max_qbuf(m, n_max), 64));
    s->tok_row = kn_alloc_aligned(N * sizeof(int32_t));
    s->tok_pos = kn_alloc_aligned(N * sizeof(int32_t));
    if (n_threads > 1) {
        kiln_status st = kn_pool_new(n_threads, &s->pool);
        if (st) {
            kn_scratch_free(s);
            return st;
        }
    }
    if (!s->x || !s->xb || !s->xb2 || !s->q || !s->k || !s->v || !s->att || !s->hb || !s->hb2 || !s->qbuf ||
        !s->tok_row || !s->tok_pos) {
        kn_scratch_free(s);
        return kn_error(KILN_ERR_NOMEM, "cannot allocate activation buffers for %d tokens", n_max);
    }
    return KILN_OK;
}

void kn_scratch_free(kn_scratch *s) {
    void *bufs[] = {s->x, s->xb, s->xb2, s->q, s->k, s->v, s->att, s->hb, s->hb2, s->qbuf, s->tok_row, s->tok_pos};
    for (size_t i = 0; i < KN_ARRAY_LEN(bufs); i++) kn_free_aligned(bufs[i]);
    kn_pool_free(s->pool);
    memset(s, 0, sizeof *s);
}

/* Causal attention of nq query heads of one token that share the KV head at kv_off, over its row's
 * KV positions [0, pos]: the kernel set's fused attention (online softmax, no score vector; see
 * tensor/attend.c). q[nq][hd] -> out[nq][hd]. */
static void attend_heads(const kn_kernels *ks, const kn_kv *kv, int l, int32_t pos, int kv_off, int nq, int hd,
                         const float *q, float *out) {
    const kn_attend_fn attend = kv->type == KN_F16 ? ks->attend_f16 : ks->attend_f32;
    attend(kn_kv_k_at(kv, l, 0, kv_off), kn_kv_v_at(kv, l, 0, kv_off), (size_t)kv->kv_dim * kv->elt, pos + 1, q, nq, hd,
           1.0f / sqrtf((float)hd), out);
}

/* The per-token and per-(token, head chunk) steps of one block, as pool tasks. */
typedef struct block_ctx {
    const kiln_model *m;
    kn_scratch *s;
    kn_batch_row *rows;
    int l;
    int64_t N, n_tasks;
} block_ctx;

/* Tokens [t0, t1): q/k norm (qwen3), RoPE, append k and v to the row's cache. Each token writes
 * only its own q/k rows and its own KV position. */
static void prep_tokens(const block_ctx *c, int64_t t0, int64_t t1) {
    const kiln_model *m = c->m;
    const kn_hparams *hp = &m->hp;
    const kn_layer *ly = &m->layers[c->l];
    kn_scratch *s = c->s;
    const int hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv;
    const int64_t qd = (int64_t)nh * hd, kvd = (int64_t)nkv * hd;
    for (int64_t t = t0; t < t1; t++) {
        float *q = s->q + t * qd, *k = s->k + t * kvd;
        if (ly->q_norm) {
            kn_rmsnorm(q, q, ly->q_norm, nh, hd, hp->norm_eps, NULL);
            kn_rmsnorm(k, k, ly->k_norm, nkv, hd, hp->norm_eps, NULL);
        }
        const int32_t pos = s->tok_pos[t];
        kn_rope(q, nh, hd, hp->n_rot, pos, hp->rope_base, hp->rope_scale, m->rope_freqs, hp->rope_style);
        kn_rope(k, nkv, hd, hp->n_rot, pos, hp->rope_base, hp->rope_scale, m->rope_freqs, hp->rope_style);
        kn_kv_store(c->rows[s->tok_row[t]].kv, c->l, pos, k, s->v + t * kvd);
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
    const kn_scratch *s = c->s;
    const int hd = hp->head_dim, nh = hp->n_head, gqa = nh / hp->n_head_kv, per_group = chunks_per_group(hp);
    const int chunk = (gqa + per_group - 1) / per_group, per_token = hp->n_head_kv * per_group;
    const int64_t qd = (int64_t)nh * hd;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t t = i / per_token;
        const int u = (int)(i % per_token), g = u / per_group, h0 = g * gqa + (u % per_group) * chunk;
        const int nq = KN_MIN(chunk, (g + 1) * gqa - h0);
        attend_heads(c->m->kernels, c->rows[s->tok_row[t]].kv, c->l, s->tok_pos[t], g * hd, nq, hd,
                     s->q + t * qd + (int64_t)h0 * hd, s->att + t * qd + (int64_t)h0 * hd);
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

/* One decoder block over the N stacked tokens in s->x. */
static void block(const kiln_model *m, kn_scratch *s, kn_batch_row *rows, int l, int64_t N) {
    const kn_hparams *hp = &m->hp;
    const kn_layer *ly = &m->layers[l];
    const int hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv;
    const int64_t d = hp->n_embd, qd = (int64_t)nh * hd, kvd = (int64_t)nkv * hd, ff = hp->n_ff;
    kn_pool *pool = s->pool;
    const int nt = kn_pool_threads(pool);
    block_ctx c = {.m = m, .s = s, .rows = rows, .l = l, .N = N};

    /* attention: xb[N][d] = norm(x); q[N][qd], k[N][kvd], v[N][kvd] (one conversion of xb, one run) */
    kn_rmsnorm(s->xb, s->x, ly->attn_norm, N, d, hp->norm_eps, pool);
    const kn_matmul_out qkv[3] = {{&ly->wq, s->q}, {&ly->wk, s->k}, {&ly->wv, s->v}};
    kn_matmul_multi(qkv, 3, s->xb, N, s->qbuf, pool, m->kernels);
    if (ly->bq) {
        kn_add_bias(s->q, ly->bq, N, qd);
        kn_add_bias(s->k, ly->bk, N, kvd);
        kn_add_bias(s->v, ly->bv, N, kvd);
    }
    /* per token: q/k norm (qwen3), RoPE, append k and v to the row's cache */
    if (nt > 1 && N >= PREP_PAR_TOKENS) {
        c.n_tasks = KN_MIN(N, (int64_t)nt * 4);
        kn_pool_run(pool, c.n_tasks, prep_task, &c);
    } else {
        prep_tokens(&c, 0, N);
    }
    /* att[N][qd]: every (token, head chunk) unit is independent */
    const int64_t units = N * units_per_token(hp);
    int64_t work = 0; /* multiply-adds, roughly */
    for (int64_t t = 0; t < N; t++) work += (int64_t)(s->tok_pos[t] + 1) * nh * hd;
    if (nt > 1 && units > 1 && work > ATTN_PAR_WORK) {
        c.n_tasks = KN_MAX(1, KN_MIN(KN_MIN(units, (int64_t)nt * ATTN_TASKS_PER_THREAD), work / ATTN_TASK_WORK));
        kn_pool_run(pool, c.n_tasks, attend_task, &c);
    } else {
        attend_units(&c, 0, units);
    }
    kn_matmul(&ly->wo, s->att, s->xb2, N, s->qbuf, pool, m->kernels);
    kn_add(s->x, s->xb2, N * d);

    /* FFN: x += down(silu(gate(xb)) * up(xb)); hb[N][ff] = gate, hb2[N][ff] = up */
    kn_rmsnorm(s->xb, s->x, ly->ffn_norm, N, d, hp->norm_eps, pool);
    const kn_matmul_out gate_up[2] = {{&ly->w_gate, s->hb}, {&ly->w_up, s->hb2}};
    kn_matmul_multi(gate_up, 2, s->xb, N, s->qbuf, pool, m->kernels);
    kn_swiglu(s->hb, s->hb2, N * ff, pool);
    kn_matmul(&ly->w_down, s->hb, s->xb2, N, s->qbuf, pool, m->kernels);
    kn_add(s->x, s->xb2, N * d);
}

void kn_forward(const kiln_model *m, kn_scratch *s, kn_batch_row *rows, int n_rows, float *logits, int32_t logits_cap) {
    const kn_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd;
    int64_t N = 0;
    for (int r = 0; r < n_rows; r++) {
        for (int32_t i = 0; i < rows[r].n_tokens; i++, N++) {
            s->tok_row[N] = r;
            s->tok_pos[N] = rows[r].kv->n_past + i;
            kn_weight_row_f32(&m->tok_embd, rows[r].tokens[i], s->x + N * d); /* x[N][d] */
        }
    }
    for (int l = 0; l < hp->n_layer; l++) block(m, s, rows, l, N);

    /* Gather the tokens that want logits into xb (in row order), norm, project: logits[n][V]. */
    int64_t n_out = 0, t = 0;
    for (int r = 0; r < n_rows; r++) {
        for (int32_t i = 0; i < rows[r].n_tokens; i++, t++) {
            if (i < rows[r].logits_from || n_out >= logits_cap) continue;
            memcpy(s->xb + n_out * d, s->x + t * d, (size_t)d * sizeof(float));
            n_out++;
        }
        rows[r].kv->n_past += rows[r].n_tokens;
    }
    if (n_out == 0) return;
    kn_rmsnorm(s->xb, s->xb, m->output_norm, n_out, d, hp->norm_eps, s->pool);
    kn_matmul(&m->output, s->xb, logits, n_out, s->qbuf, s->pool, m->kernels);
}

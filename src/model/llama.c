/*
 * llama.c - the forward pass of the Llama family: pre-norm decoder blocks of grouped-query
 * attention with RoPE and a SiLU-gated FFN. qwen2 adds biases to q/k/v; qwen3 RMS-normalizes each
 * q and k head before RoPE. Shapes are noted per step; N is the number of stacked tokens of all rows.
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
    if (!s->x || !s->xb || !s->xb2 || !s->q || !s->k || !s->v || !s->att || !s->hb || !s->hb2 ||
        !s->qbuf || !s->tok_row || !s->tok_pos) {
        kn_scratch_free(s);
        return kn_error(KILN_ERR_NOMEM, "cannot allocate activation buffers for %d tokens", n_max);
    }
    return KILN_OK;
}

void kn_scratch_free(kn_scratch *s) {
    void *bufs[] = {s->x, s->xb, s->xb2, s->q, s->k, s->v, s->att, s->hb, s->hb2, s->qbuf,
                    s->tok_row, s->tok_pos};
    for (size_t i = 0; i < KN_ARRAY_LEN(bufs); i++) kn_free_aligned(bufs[i]);
    memset(s, 0, sizeof *s);
}

/* Causal attention of one query head of one token over its row's KV positions [0, pos], fused
 * with an online softmax (one pass over K and V, no score vector):
 *   m = running max score, l = running sum of exp(score - m), out = running sum of exp(...) * v.
 * q[hd] -> out[hd]. */
static void attend_head(const kn_kernels *ks, const kn_kv *kv, int l, int32_t pos, int kv_off, int hd,
                        const float *q, float *out) {
    const bool f16 = kv->type == KN_F16;
    const kn_kv_dot_fn dot = f16 ? ks->kv_dot_f16 : ks->kv_dot_f32;
    const kn_kv_axpy_fn axpy = f16 ? ks->kv_axpy_f16 : ks->kv_axpy_f32;
    const float scale = 1.0f / sqrtf((float)hd);
    float m = -INFINITY, sum = 0.0f;
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int32_t p = 0; p <= pos; p++) {
        const float sc = dot(kn_kv_k_at(kv, l, p, kv_off), q, hd) * scale;
        if (sc > m) {
            const float c = expf(m - sc);      /* rescale what was accumulated under the old max */
            sum *= c;
            for (int i = 0; i < hd; i++) out[i] *= c;
            m = sc;
        }
        const float w = expf(sc - m);
        sum += w;
        axpy(w, kn_kv_v_at(kv, l, p, kv_off), out, hd);
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < hd; i++) out[i] *= inv;
}

/* One decoder block over the N stacked tokens in s->x. */
static void block(const kiln_model *m, kn_scratch *s, kn_batch_row *rows, int l, int64_t N) {
    const kn_hparams *hp = &m->hp;
    const kn_layer *ly = &m->layers[l];
    const int hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv, gqa = nh / nkv;
    const int64_t d = hp->n_embd, qd = (int64_t)nh * hd, kvd = (int64_t)nkv * hd, ff = hp->n_ff;
    const int nt = s->n_threads;

    /* attention: xb[N][d] = norm(x); q[N][qd], k[N][kvd], v[N][kvd] */
    kn_rmsnorm(s->xb, s->x, ly->attn_norm, N, d, hp->norm_eps, nt);
    kn_matmul(&ly->wq, s->xb, s->q, N, s->qbuf, nt, m->kernels);
    kn_matmul(&ly->wk, s->xb, s->k, N, s->qbuf, nt, m->kernels);
    kn_matmul(&ly->wv, s->xb, s->v, N, s->qbuf, nt, m->kernels);
    if (ly->bq) {
        kn_add_bias(s->q, ly->bq, N, qd);
        kn_add_bias(s->k, ly->bk, N, kvd);
        kn_add_bias(s->v, ly->bv, N, kvd);
    }
    /* per token: q/k norm (qwen3), RoPE, append k and v to the row's cache */
    #pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && N >= 16)
    for (int64_t t = 0; t < N; t++) {
        float *q = s->q + t * qd, *k = s->k + t * kvd;
        if (ly->q_norm) {
            kn_rmsnorm(q, q, ly->q_norm, nh, hd, hp->norm_eps, 1);
            kn_rmsnorm(k, k, ly->k_norm, nkv, hd, hp->norm_eps, 1);
        }
        const int32_t pos = s->tok_pos[t];
        kn_rope(q, nh, hd, hp->n_rot, pos, hp->rope_base, hp->rope_scale, m->rope_freqs, hp->rope_style);
        kn_rope(k, nkv, hd, hp->n_rot, pos, hp->rope_base, hp->rope_scale, m->rope_freqs, hp->rope_style);
        kn_kv_store(rows[s->tok_row[t]].kv, l, pos, k, s->v + t * kvd);
    }
    /* att[N][qd]: every (token, head) pair is independent */
    const int64_t pairs = N * nh;
    const int64_t work = pairs * (s->tok_pos[N - 1] + 1) * hd;   /* multiply-adds, roughly */
    #pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1 && pairs > 1 && work > 200000)
    for (int64_t i = 0; i < pairs; i++) {
        const int64_t t = i / nh;
        const int h = (int)(i % nh);
        attend_head(m->kernels, rows[s->tok_row[t]].kv, l, s->tok_pos[t], (h / gqa) * hd, hd,
                    s->q + t * qd + (int64_t)h * hd, s->att + t * qd + (int64_t)h * hd);
    }
    kn_matmul(&ly->wo, s->att, s->xb2, N, s->qbuf, nt, m->kernels);
    kn_add(s->x, s->xb2, N * d);

    /* FFN: x += down(silu(gate(xb)) * up(xb)) */
    kn_rmsnorm(s->xb, s->x, ly->ffn_norm, N, d, hp->norm_eps, nt);
    kn_matmul(&ly->w_gate, s->xb, s->hb, N, s->qbuf, nt, m->kernels);
    kn_matmul(&ly->w_up, s->xb, s->hb2, N, s->qbuf, nt, m->kernels);
    kn_swiglu(s->hb, s->hb2, N * ff, nt);
    kn_matmul(&ly->w_down, s->hb, s->xb2, N, s->qbuf, nt, m->kernels);
    kn_add(s->x, s->xb2, N * d);
}

void kn_forward(const kiln_model *m, kn_scratch *s, kn_batch_row *rows, int n_rows, float *logits,
                int32_t logits_cap) {
    const kn_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd;
    int64_t N = 0;
    for (int r = 0; r < n_rows; r++) {
        for (int32_t i = 0; i < rows[r].n_tokens; i++, N++) {
            s->tok_row[N] = r;
            s->tok_pos[N] = rows[r].kv->n_past + i;
            kn_weight_row_f32(&m->tok_embd, rows[r].tokens[i], s->x + N * d);   /* x[N][d] */
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
    kn_rmsnorm(s->xb, s->xb, m->output_norm, n_out, d, hp->norm_eps, s->n_threads);
    kn_matmul(&m->output, s->xb, logits, n_out, s->qbuf, s->n_threads, m->kernels);
}

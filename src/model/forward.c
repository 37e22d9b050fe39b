/*
 * forward.c - the batched forward pass of every family (see forward.h): the activation scratch,
 * then per call the token embeddings (scaled when the family says so), the family's block function
 * for each layer (model/arch.h) and the final norm, output projection and optional logit soft-cap
 * of the tokens that want logits.
 */
#include "model/forward.h"

#include "tensor/ops.h"

#include <string.h>

static size_t max_qbuf(const kiln_model *m, int32_t n) {
    size_t best = 0;
    const kn_weight *ws[] = {&m->output};
    for (size_t i = 0; i < KN_ARRAY_LEN(ws); i++) best = KN_MAX(best, kn_matmul_scratch(ws[i]->type, ws[i]->cols, n));
    for (int l = 0; l < m->hp.n_layer; l++) {
        const kn_weight *lw[KN_LAYER_MAX_WEIGHTS];
        const int nw = kn_layer_weights(&m->layers[l], lw, KN_LAYER_MAX_WEIGHTS);
        for (int i = 0; i < nw; i++) best = KN_MAX(best, kn_matmul_scratch(lw[i]->type, lw[i]->cols, n));
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
    const size_t ff = (size_t)KN_MAX(hp->n_ff, hp->n_ff_exp);
    s->hb = kn_alloc_aligned(N * ff * sizeof(float));
    s->hb2 = kn_alloc_aligned(N * ff * sizeof(float));
    bool moe_ok = true;
    if (hp->n_expert > 0) {
        const size_t E = (size_t)hp->n_expert, k = (size_t)hp->n_expert_used;
        s->moe_logits = kn_alloc_aligned(N * E * sizeof(float));
        s->moe_ids = kn_alloc_aligned(N * k * sizeof(int32_t));
        s->moe_w = kn_alloc_aligned(N * k * sizeof(float));
        s->moe_tok = kn_alloc_aligned(N * k * sizeof(int32_t));
        s->moe_start = kn_alloc_aligned((E + 1) * sizeof(int32_t));
        s->moe_fill = kn_alloc_aligned(E * sizeof(int32_t));
        s->moe_x = kn_alloc_aligned(N * hp->n_embd * sizeof(float));
        s->moe_y = kn_alloc_aligned(N * hp->n_embd * sizeof(float));
        moe_ok = s->moe_logits && s->moe_ids && s->moe_w && s->moe_tok && s->moe_start && s->moe_fill && s->moe_x &&
                 s->moe_y;
    }
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
        !s->tok_row || !s->tok_pos || !moe_ok) {
        kn_scratch_free(s);
        return kn_error(KILN_ERR_NOMEM, "cannot allocate activation buffers for %d tokens", n_max);
    }
    return KILN_OK;
}

void kn_scratch_free(kn_scratch *s) {
    void *bufs[] = {s->x,     s->xb,      s->xb2,       s->q,        s->k,       s->v,          s->att,
                    s->hb,    s->hb2,     s->qbuf,      s->tok_row,  s->tok_pos, s->moe_logits, s->moe_ids,
                    s->moe_w, s->moe_tok, s->moe_start, s->moe_fill, s->moe_x,   s->moe_y};
    for (size_t i = 0; i < KN_ARRAY_LEN(bufs); i++) kn_free_aligned(bufs[i]);
    kn_pool_free(s->pool);
    memset(s, 0, sizeof *s);
}

/* The token embeddings of the rows' tokens stacked in s->x (with the family's input embeddings),
 * then every layer's block; returns N, the stacked tokens. */
static int64_t run_layers(const kiln_model *m, kn_scratch *s, kn_batch_row *rows, int n_rows) {
    const kn_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd;
    int64_t N = 0;
    for (int r = 0; r < n_rows; r++) {
        for (int32_t i = 0; i < rows[r].n_tokens; i++, N++) {
            s->tok_row[N] = r;
            s->tok_pos[N] = rows[r].kv->n_past + i;
            kn_weight_row_f32(&m->tok_embd, rows[r].tokens[i], s->x + N * d); /* x[N][d] */
            if (hp->embd_scale != 1.0f)
                for (int64_t j = 0; j < d; j++) s->x[N * d + j] *= hp->embd_scale;
        }
    }
    if (m->arch->embed_input) m->arch->embed_input(m, s, N);
    for (int l = 0; l < hp->n_layer; l++) m->arch->block(m, s, rows, l, N);
    return N;
}

void kn_forward(const kiln_model *m, kn_scratch *s, kn_batch_row *rows, int n_rows, float *logits, int32_t logits_cap) {
    const kn_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd;
    run_layers(m, s, rows, n_rows);

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
    if (hp->logit_softcap > 0) kn_softcap(logits, n_out * hp->n_vocab, hp->logit_softcap);
}

void kn_forward_embed(const kiln_model *m, kn_scratch *s, kn_batch_row *rows, int n_rows, kn_pooling pooling,
                      float *out) {
    const kn_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd;
    run_layers(m, s, rows, n_rows);
    /* the final norm of a decoder (an encoder has none) over every token: x[N][d] */
    int64_t N = 0;
    for (int r = 0; r < n_rows; r++) N += rows[r].n_tokens;
    if (m->output_norm) kn_rmsnorm(s->x, s->x, m->output_norm, N, d, hp->norm_eps, s->pool);
    int64_t t0 = 0;
    for (int r = 0; r < n_rows; r++) {
        const int64_t n = rows[r].n_tokens;
        float *o = out + (int64_t)r * d;
        if (pooling == KN_POOL_MEAN) {
            /* the sum in token order, so a row's vector does not depend on the rows around it */
            memset(o, 0, (size_t)d * sizeof(float));
            for (int64_t t = 0; t < n; t++)
                for (int64_t j = 0; j < d; j++) o[j] += s->x[(t0 + t) * d + j];
            for (int64_t j = 0; j < d; j++) o[j] /= (float)n;
        } else {
            const int64_t t = pooling == KN_POOL_LAST ? n - 1 : 0;
            memcpy(o, s->x + (t0 + t) * d, (size_t)d * sizeof(float));
        }
        rows[r].kv->n_past += rows[r].n_tokens;
        t0 += n;
    }
}

/*
 * moe.c - the mixture-of-experts FFN (see moe.h): routing, grouping of the step's tokens by expert,
 * the per-expert gated FFN over the gathered rows, and the weighted sum back into each token's row.
 *
 * Steps of one call over N tokens (n_used experts per token, E experts):
 *   logits[N][E] = router . xb (+ bias); per token: ids[N][n_used], weights[N][n_used]
 *   per expert e with tokens (ascending e): gather their rows of xb into moe_x[c][d];
 *     hb[c][ff] = gate_e . moe_x, hb2[c][ff] = up_e . moe_x (+ biases); hb = act(hb, hb2);
 *     moe_y[c][d] = down_e . hb (+ bias); xb2[token] += weight * moe_y[row]
 * The matrices of an expert are read once per step, by GEMMs over its c tokens.
 */
#include "model/moe.h"

#include "tensor/ops.h"

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

void kn_moe_ffn(const kiln_model *m, kn_scratch *s, int l, int64_t N) {
    const kn_moe *moe = &m->layers[l].moe;
    const kn_ffn_act act = m->layers[l].act;
    const int E = moe->n_expert, k = moe->n_used;
    const int64_t d = m->hp.n_embd, ff = moe->n_ff;
    /* routing: logits[N][E], ids[N][k], weights[N][k] */
    kn_matmul(&moe->router, s->xb, s->moe_logits, N, s->qbuf, s->pool, m->kernels);
    if (moe->router_bias) kn_add_bias(s->moe_logits, moe->router_bias, N, E);
    for (int64_t t = 0; t < N; t++) kn_moe_route(moe, s->moe_logits + t * E, s->moe_ids + t * k, s->moe_w + t * k);
    /* group by expert: moe_start[e] .. moe_start[e + 1] index moe_tok (token * k + slot), tokens ascending */
    int32_t *start = s->moe_start;
    memset(start, 0, sizeof(int32_t) * (size_t)(E + 1));
    for (int64_t i = 0; i < N * k; i++) start[s->moe_ids[i] + 1]++;
    for (int e = 0; e < E; e++) start[e + 1] += start[e];
    int32_t *fill = s->moe_fill;
    memcpy(fill, start, sizeof(int32_t) * (size_t)E);
    for (int64_t i = 0; i < N * k; i++) s->moe_tok[fill[s->moe_ids[i]]++] = (int32_t)i;
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
        if (act == KN_ACT_SWIGLU_CLAMP) swiglu_clamp(s->hb, s->hb2, c * ff);
        else kn_swiglu(s->hb, s->hb2, c * ff, s->pool);
        kn_matmul(&dn, s->hb, s->moe_y, c, s->qbuf, s->pool, m->kernels);
        if (moe->down_bias) kn_add_bias(s->moe_y, moe->down_bias + e * d, c, d);
        for (int64_t i = 0; i < c; i++) {
            const float w = s->moe_w[tok[i]];
            float *out = s->xb2 + (tok[i] / k) * d;
            const float *y = s->moe_y + i * d;
            for (int64_t j = 0; j < d; j++) out[j] += w * y[j];
        }
    }
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

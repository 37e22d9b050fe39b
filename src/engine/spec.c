/*
 * spec.c - the step's method seam and the speculative methods ngram and draft (see spec.h).
 *
 * One step: every decoding row gets its last token and, when the plan (kn_spec_plan, on the
 * measured pass costs) gives it k > 0, k proposals (ngram: a lookup in its tokens; draft: the draft
 * model catches up on the row's committed tokens, first from the draft's prefix cache, and extends
 * them greedily, all drafting rows batched in each draft pass); prefilling rows share the rest of
 * the budget (the draft of a row expected to speculate prefills the same chunk); one target forward
 * pass computes logits for every position of every decoding row; each row then commits tokens
 * position by position (kn_row_advance) until one differs from its proposal, and lowers n_past
 * (its KV and its draft's) to what it committed. The target's and the draft's passes are timed
 * for the cost model.
 */
#include "engine/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_EVERY  16    /* steps without speculation before the first probe */
#define PROBE_MAX    512   /* the longest probe interval (and the only one when nothing could pay) */
#define DECAY        0.8f  /* of a row's acceptance counts per step with proposals */
#define DECAY_METHOD 0.95f /* of the method's acceptance counts per row-step with proposals */
#define PRIOR_WEIGHT 2.0f  /* a new row's acceptance counts (hit + miss), at the method's rate */
#define PRIOR_HIT    3.0f  /* the method's acceptance counts before any proposal: 3 hits to 1 miss */
#define LEFT_UNKNOWN 256   /* tokens a row without max_tokens is assumed to have left */
#define DCACHE_SHARE 0.25  /* the draft's prefix cache: at most this share of the model's budget */
#define NGRAM_WINDOW 16384 /* tokens of a row's history the n-gram lookup searches */
#define FIT_DECAY    0.99  /* of the pass-cost sums per pass */
#define FIT_MIN_VAR  1.0   /* variance of the work (units^2) below which the slope keeps its ratio */
/* The prior per-token/per-pass cost ratio of a pass before measurements separate them: a step
 * reads every weight once (decode is bound by memory bandwidth), and a token adds its matmuls. */
#define PRIOR_RATIO  0.05

static const char *const method_names[KILN_SPEC_METHODS] = {"none", "ngram", "draft"};

kiln_status kiln_spec_method_parse(const char *name, kiln_spec_method *out) {
    kn_error_clear();
    for (int i = 0; name && i < KILN_SPEC_METHODS; i++)
        if (strcmp(name, method_names[i]) == 0) {
            if (out) *out = (kiln_spec_method)i;
            return KILN_OK;
        }
    return kn_error(KILN_ERR_INVALID_ARG, "unknown speculative method '%s' (none, ngram or draft)",
                    name ? name : "(null)");
}

const char *kiln_spec_method_name(kiln_spec_method method) {
    return (int)method >= 0 && method < KILN_SPEC_METHODS ? method_names[method] : "?";
}

kiln_status kn_spec_check(kiln_spec_method method, const kiln_model *target, const kiln_model *draft, int32_t *max_k) {
    if ((int)method < 0 || method >= KILN_SPEC_METHODS)
        return kn_error(KILN_ERR_INVALID_ARG, "unknown speculative method %d (none, ngram or draft)", (int)method);
    if (*max_k < 0 || *max_k > KILN_SPEC_MAX_LIMIT)
        return kn_error(KILN_ERR_INVALID_ARG, "spec_max %d is outside [1, %d] (0 = the default, %d)", *max_k,
                        KILN_SPEC_MAX_LIMIT, KILN_SPEC_MAX_DEFAULT);
    if (*max_k == 0) *max_k = KILN_SPEC_MAX_DEFAULT;
    if (method != KILN_SPEC_DRAFT) return KILN_OK;
    if (!draft) return kn_error(KILN_ERR_INVALID_ARG, "the draft method needs a draft model");
    if (draft->vocab_only) return kn_error(KILN_ERR_INVALID_ARG, "the draft model was loaded vocab-only");
    if (draft->hp.n_vocab != target->hp.n_vocab)
        return kn_error(KILN_ERR_INVALID_ARG,
                        "the draft model's vocabulary has %d tokens and the model's %d: a draft must have the same "
                        "vocabulary",
                        draft->hp.n_vocab, target->hp.n_vocab);
    if (memcmp(draft->tok_hash, target->tok_hash, sizeof draft->tok_hash) != 0)
        return kn_error(KILN_ERR_INVALID_ARG,
                        "the draft model's tokenizer differs from the model's (tokenizer hash %.12s... vs %.12s...): a "
                        "draft must have the same vocabulary",
                        draft->tokenizer_hash, target->tokenizer_hash);
    return KILN_OK;
}

/* The output projection's matmul work next to the rest of one token's (weights per token). */
static double out_share(const kiln_model *m) {
    const double out = (double)m->hp.n_vocab * (double)m->hp.n_embd;
    const double body = (double)m->n_params - out * (m->hp.tied_output ? 1.0 : 2.0);
    return body > out / 4 ? out / body : 4.0;
}

static void cost_init(kn_spec_cost *c, const kiln_model *m) {
    memset(c, 0, sizeof *c);
    c->c0 = 1.0;
    c->c1 = PRIOR_RATIO;
    c->out_share = out_share(m);
}

void kn_spec_cost_add(kn_spec_cost *c, double x, double ms) {
    c->sw = c->sw * FIT_DECAY + 1.0;
    c->sx = c->sx * FIT_DECAY + x;
    c->sy = c->sy * FIT_DECAY + ms;
    c->sxx = c->sxx * FIT_DECAY + x * x;
    c->sxy = c->sxy * FIT_DECAY + x * ms;
    c->n++;
    const double mx = c->sx / c->sw, my = c->sy / c->sw, var = c->sxx / c->sw - mx * mx;
    if (var >= FIT_MIN_VAR) {
        const double slope = (c->sxy / c->sw - mx * my) / var, icpt = my - slope * mx;
        if (slope > 0 && icpt > 0) {
            c->c0 = icpt;
            c->c1 = slope;
            c->fitted = true;
            return;
        }
    }
    /* one kind of pass so far (or a fit the noise bent): keep the ratio, follow the level */
    const double ratio = c->c1 / c->c0;
    c->c0 = my > 0 ? my / (1.0 + ratio * mx) : c->c0;
    c->c1 = ratio * c->c0;
    c->fitted = false;
}

kiln_status kn_spec_init(kn_spec *sp, kiln_spec_method method, const kiln_model *target, const kiln_model *draft,
                         int32_t max_k, int32_t n_rows, int32_t n_ctx, int32_t prefill_chunk, int n_threads) {
    memset(sp, 0, sizeof *sp);
    atomic_init(&sp->proposed, 0);
    atomic_init(&sp->accepted, 0);
    sp->method = method;
    sp->target = target;
    sp->max_k = max_k;
    sp->n_rows = n_rows;
    sp->n_ctx = n_ctx;
    sp->hit = PRIOR_HIT; /* a method is chosen because proposals are expected to be accepted */
    sp->miss = 1.0f;
    sp->probe_every = PROBE_EVERY;
    sp->force_k = -1;
    if (method == KILN_SPEC_NONE) return KILN_OK;
    cost_init(&sp->tcost, target);
    const size_t V = (size_t)target->hp.n_vocab;
    sp->vlogits = kn_alloc_aligned((size_t)n_rows * (size_t)(max_k + 1) * V * sizeof(float));
    if (!sp->vlogits) return kn_error(KILN_ERR_NOMEM, "out of memory for the speculative logits");
    if (method != KILN_SPEC_DRAFT) return KILN_OK;
    sp->draft = draft;
    cost_init(&sp->dcost, draft);
    kiln_status st = kn_scratch_init(&sp->dscratch, draft, prefill_chunk + n_rows, n_ctx, n_threads);
    if (!st) {
        sp->dkv = kn_calloc((size_t)n_rows, sizeof *sp->dkv);
        sp->dready = kn_calloc((size_t)n_rows, sizeof *sp->dready);
        sp->dlogits = kn_alloc_aligned((size_t)n_rows * V * sizeof(float));
        if (!sp->dkv || !sp->dready || !sp->dlogits)
            st = kn_error(KILN_ERR_NOMEM, "out of memory for the draft model's buffers");
    }
    if (st) kn_spec_free(sp);
    return st;
}

void kn_spec_cache_init(kn_spec *sp, size_t target_budget, uint64_t target_per_token) {
    if (sp->method != KILN_SPEC_DRAFT || sp->dcache_on || !target_budget || !target_per_token) return;
    const kn_hparams *hp = &sp->draft->hp;
    kn_kv_format fmt;
    if (kn_kv_format_of(KILN_KV_F16, KILN_KV_SAME, KILN_KV_ROTATE_AUTO, &fmt)) return;
    const double per_token = (double)kn_kv_bytes_per_token_fmt(&fmt, hp->n_layer, hp->n_head_kv, hp->head_dim);
    const double share = KN_MIN(DCACHE_SHARE, per_token / (double)target_per_token);
    kn_pc_init(&sp->dcache, (size_t)((double)target_budget * share));
    sp->dcache_on = true;
}

void kn_spec_free(kn_spec *sp) {
    if (sp->dkv)
        for (int32_t i = 0; i < sp->n_rows; i++) kn_kv_free(&sp->dkv[i]);
    free(sp->dkv);
    free(sp->dready);
    if (sp->dcache_on) kn_pc_free(&sp->dcache);
    if (sp->draft) kn_scratch_free(&sp->dscratch);
    kn_free_aligned(sp->vlogits);
    kn_free_aligned(sp->dlogits);
    memset(sp, 0, sizeof *sp);
}

int32_t kn_spec_scratch_tokens(const kn_spec *sp, int32_t n_rows, int32_t prefill_chunk) {
    const int32_t per_row = sp && sp->method != KILN_SPEC_NONE ? 1 + sp->max_k : 1;
    return prefill_chunk + n_rows * per_row;
}

kiln_status kn_spec_row_begin(kn_spec *sp, kn_row *r, int slot) {
    r->spec = sp && sp->method != KILN_SPEC_NONE && r->gp.speculative;
    r->dkv = NULL;
    if (!r->spec) return KILN_OK;
    /* the method's recent acceptance rate, with the weight of two proposals */
    const float a = sp->hit / (sp->hit + sp->miss);
    r->spec_hit = PRIOR_WEIGHT * a;
    r->spec_miss = PRIOR_WEIGHT * (1.0f - a);
    r->spec_wait = 0;
    if (sp->method != KILN_SPEC_DRAFT) return KILN_OK;
    kn_kv *kv = &sp->dkv[slot];
    if (!kv->k) {
        const kn_hparams *hp = &sp->draft->hp;
        kn_kv_format fmt; /* the draft's cache is F16, whatever the target's */
        kiln_status st = kn_kv_format_of(KILN_KV_F16, KILN_KV_SAME, KILN_KV_ROTATE_AUTO, &fmt);
        if (!st) st = kn_kv_init_fmt(kv, &fmt, hp->n_layer, sp->n_ctx, hp->n_head_kv, hp->head_dim);
        if (st) {
            r->spec = false; /* the row decodes one token per step */
            KN_LOGW("no memory for the draft model's cache of a row: it decodes without speculation");
            return st;
        }
    }
    kv->n_past = 0;
    sp->dready[slot] = 0;
    r->dkv = kv;
    return KILN_OK;
}

void kn_spec_row_end(kn_spec *sp, kn_row *r) {
    if (sp && sp->dcache_on && r->dkv && r->seq && r->dkv->n_past > 0)
        kn_pc_publish(&sp->dcache, r->seq, r->dkv->n_past, r->dkv, 2);
}

/* The row's draft cache, when first used in its request: the longest prefix of its tokens
 * seq[0, upto) the draft's prefix cache holds (none when the cache is off). */
static void draft_ready(kn_spec *sp, kn_row *r, int32_t upto) {
    const size_t slot = (size_t)(r->dkv - sp->dkv);
    if (sp->dready[slot]) return;
    sp->dready[slot] = 1;
    if (sp->dcache_on && r->dkv->n_past == 0 && upto > 1) kn_pc_restore(&sp->dcache, r->seq, upto, upto - 1, r->dkv);
}

int32_t kn_spec_ngram(const kiln_token *hist, int32_t n, int32_t k, kiln_token *out) {
    const int32_t lo = n > NGRAM_WINDOW ? n - NGRAM_WINDOW : 0;
    for (int32_t g = KN_MIN(KN_SPEC_NGRAM_MAX, n - 1); g >= 1; g--) {
        const kiln_token *suf = hist + n - g;
        for (int32_t i = n - g - 1; i >= lo; i--) { /* the latest earlier occurrence, followed by a token */
            if (hist[i] != suf[0] || memcmp(hist + i, suf, (size_t)g * sizeof *hist) != 0) continue;
            /* The text repeats with period (n - g) - i: past the end of the history the proposal
             * continues with itself (a loop of one token proposes k of it, not one). */
            for (int32_t j = 0; j < k; j++) out[j] = i + g + j < n ? hist[i + g + j] : out[i + g + j - n];
            return k;
        }
    }
    return 0;
}

/* Row c's expected saving (ms) with up to K proposals, at w ms a token and mc ms a proposal, less
 * its catch-up spread over the steps it has left; its proposals into c->k (0 when it saves nothing). */
static double row_saving(const kn_spec_model *cm, kn_spec_cand *c, int32_t K, double w, double mc) {
    double save = 0, p = 1, expect = 1;
    int32_t k = 0;
    for (; k < KN_MIN(K, c->kmax); k++) {
        p *= c->a;
        if (p * w <= mc) break; /* a^j falls with j: no deeper proposal pays either */
        save += p * w - mc;
        expect += p;
    }
    if (k > 0 && c->behind > 0) {
        const double steps = KN_MAX(1.0, (double)c->left / expect);
        save -= cm->dc * (double)c->behind / steps;
    }
    c->k = save > 0 ? k : 0;
    return c->k ? save : 0;
}

int32_t kn_spec_plan(const kn_spec_model *cm, int n_dec, kn_spec_cand *c, int n) {
    int32_t kmax = 0;
    for (int i = 0; i < n; i++) kmax = KN_MAX(kmax, c[i].kmax);
    const double w = (cm->t0 + cm->tv * (double)KN_MAX(n_dec, 1)) / (double)KN_MAX(n_dec, 1);
    const double mc = cm->tv + cm->dv;
    int32_t best_k = 0;
    double best = 0;
    for (int32_t K = 1; K <= kmax; K++) {
        double save = -cm->d0 * (double)K; /* the draft's passes, one per proposal depth */
        int32_t deepest = 0;
        for (int i = 0; i < n; i++) {
            save += row_saving(cm, &c[i], K, w, mc);
            deepest = KN_MAX(deepest, c[i].k);
        }
        if (deepest == K && save > best) {
            best = save;
            best_k = K;
        }
    }
    for (int i = 0; i < n; i++) {
        if (best_k) row_saving(cm, &c[i], best_k, w, mc);
        else c[i].k = 0;
    }
    return best_k;
}

/* The step's cost model from the measured passes (before any draft pass: the draft's weights and
 * work next to the target's). */
static kn_spec_model cost_model(const kn_spec *sp) {
    const kn_spec_cost *t = &sp->tcost;
    kn_spec_model cm = {.t0 = t->c0, .tv = t->c1 * (1.0 + t->out_share)};
    if (sp->method != KILN_SPEC_DRAFT) return cm;
    const kn_spec_cost *d = &sp->dcost;
    double d0 = d->c0, d1 = d->c1;
    if (!d->fitted) { /* the target's shape scaled by the weights, at the level the draft's passes show */
        const kiln_model *tm = sp->target, *dm = sp->draft;
        d0 = t->c0 * (tm->weight_bytes ? (double)dm->weight_bytes / (double)tm->weight_bytes : 1.0);
        d1 = t->c1 * (tm->n_params ? (double)dm->n_params / (double)tm->n_params : 1.0);
        const double guess = d0 + d1 * (d->sw > 0 ? d->sx / d->sw : 0);
        if (d->sw > 0 && guess > 0) {
            const double scale = d->sy / d->sw / guess;
            d0 *= scale;
            d1 *= scale;
        }
    }
    cm.d0 = d0;
    cm.dv = d1 * (1.0 + d->out_share);
    cm.dc = d1;
    return cm;
}

/* The most proposals row r may have: the method's limit, its context, its max_tokens and budget. */
static int32_t row_kmax(const kn_spec *sp, const kn_row *r, int32_t budget) {
    int32_t k = KN_MIN(sp->max_k, r->kv->n_ctx - r->kv->n_past - 1);
    if (r->gp.max_tokens >= 0) k = KN_MIN(k, r->gp.max_tokens - r->res.n_generated - 1);
    return KN_MAX(0, KN_MIN(k, budget));
}

static int32_t row_left(const kn_row *r) {
    const int32_t ctx_left = r->kv->n_ctx - r->kv->n_past;
    return r->gp.max_tokens >= 0 ? KN_MIN(ctx_left, r->gp.max_tokens - r->res.n_generated)
                                 : KN_MIN(ctx_left, LEFT_UNKNOWN);
}

/* Whether a row beginning to decode now, in a batch of n_dec rows, would speculate at the method's
 * recent acceptance rate (then its draft prefills with its prompt). */
static bool expect_spec(const kn_spec *sp, const kn_spec_model *cm, const kn_row *r, int n_dec) {
    if (sp->force_k >= 0) return sp->force_k > 0;
    int32_t left = r->gp.max_tokens >= 0 ? r->gp.max_tokens : LEFT_UNKNOWN;
    kn_spec_cand c = {.a = sp->hit / (sp->hit + sp->miss), .kmax = KN_MIN(sp->max_k, left - 1), .left = left};
    return c.kmax > 0 && kn_spec_plan(cm, n_dec, &c, 1) > 0;
}

/* kn_forward, timed into cost c (work: tokens, and positions with logits weighted by 1 + the
 * output projection's share). */
static void timed_forward(kn_spec_cost *c, const kiln_model *m, kn_scratch *s, kn_batch_row *b, int n, float *logits,
                          int32_t cap) {
    double x = 0;
    for (int i = 0; i < n; i++) x += b[i].n_tokens + c->out_share * (double)(b[i].n_tokens - b[i].logits_from);
    const double t = kn_now_ms();
    kn_forward(m, s, b, n, logits, cap);
    kn_spec_cost_add(c, x, kn_now_ms() - t);
}

/* Brings the draft's cache of rows dr[nd] up to position upto[i] (exclusive) over their tokens
 * (r->seq), first from the draft's prefix cache, then in passes of the draft scratch's size that
 * batch the rows together, without logits: the draft of a prefilling row expected to speculate
 * prefills the same chunk as the row, in the same step, so that its first proposals need no long
 * catch-up (and the draft's prompt work counts as prompt time). */
static void draft_prefill(kn_spec *sp, kn_row **dr, int nd, const int32_t *upto) {
    kn_batch_row b[nd];
    for (int i = 0; i < nd; i++) draft_ready(sp, dr[i], (int32_t)dr[i]->n_prompt);
    for (;;) {
        int nb = 0;
        int32_t budget = sp->dscratch.n_max;
        for (int i = 0; i < nd && budget > 0; i++) {
            const int32_t need = upto[i] - dr[i]->dkv->n_past;
            if (need <= 0) continue;
            const int32_t take = KN_MIN(need, budget);
            b[nb++] = (kn_batch_row){
                .kv = dr[i]->dkv, .tokens = dr[i]->seq + dr[i]->dkv->n_past, .n_tokens = take, .logits_from = take};
            budget -= take;
        }
        if (!nb) return;
        timed_forward(&sp->dcost, sp->draft, &sp->dscratch, b, nb, sp->dlogits, 0);
    }
}

/* The draft's proposals for rows dr[nd] wanting want[i] (>= 1) tokens each, into spec_toks[1..]:
 * the draft's cache first catches up on each row's committed tokens (seq[dkv->n_past .. n_past],
 * the last one included; a row's first catch-up in its request restores what the draft's prefix
 * cache holds), in passes of the draft scratch's size, then every row extends its proposals
 * greedily, one batched draft pass per token. */
static void draft_propose(kn_spec *sp, kn_row **dr, int nd, const int32_t *want) {
    const size_t V = (size_t)sp->draft->hp.n_vocab;
    kn_batch_row b[nd];
    kn_row *who[nd];
    for (;;) { /* catch-up */
        int nb = 0;
        int32_t budget = sp->dscratch.n_max;
        for (int i = 0; i < nd && budget > 0; i++) {
            kn_row *r = dr[i];
            const int32_t need = r->kv->n_past + 1 - r->dkv->n_past;
            if (r->n_prop > 0 || need <= 0) continue;
            const int32_t take = KN_MIN(need, budget);
            b[nb] = (kn_batch_row){.kv = r->dkv,
                                   .tokens = r->seq + r->dkv->n_past,
                                   .n_tokens = take,
                                   .logits_from = take == need ? take - 1 : take};
            who[nb++] = r;
            budget -= take;
        }
        if (!nb) break;
        timed_forward(&sp->dcost, sp->draft, &sp->dscratch, b, nb, sp->dlogits, nd);
        size_t li = 0;
        for (int i = 0; i < nb; i++) {
            if (b[i].logits_from == b[i].n_tokens) continue;
            who[i]->spec_toks[1] = kn_argmax(sp->dlogits + li++ * V, (int32_t)V);
            who[i]->n_prop = 1;
        }
    }
    for (int32_t j = 1;; j++) { /* extension: feed proposal j, read proposal j + 1 */
        int nb = 0;
        for (int i = 0; i < nd; i++) {
            kn_row *r = dr[i];
            if (r->n_prop != j || want[i] <= j) continue;
            b[nb] = (kn_batch_row){.kv = r->dkv, .tokens = &r->spec_toks[j], .n_tokens = 1, .logits_from = 0};
            who[nb++] = r;
        }
        if (!nb) break;
        timed_forward(&sp->dcost, sp->draft, &sp->dscratch, b, nb, sp->dlogits, nd);
        for (int i = 0; i < nb; i++) who[i]->spec_toks[++who[i]->n_prop] = kn_argmax(sp->dlogits + i * V, (int32_t)V);
    }
}

/* The proposals of the step's decoding rows in[nd] (their spec_toks[0] set, n_prop 0) within a
 * budget of stacked tokens: the plan on the measured costs, or a probe (see spec.h); ngram rows
 * without a match are not candidates, and their lookup is the proposal. Returns the tokens the
 * proposals take from the budget. */
static int32_t propose(kn_spec *sp, kn_row **in, int nd, int n_dec, int32_t budget) {
    kn_spec_cand c[nd];
    kn_row *cr[nd];
    kiln_token look[nd][KILN_SPEC_MAX_LIMIT];
    const bool draft = sp->method == KILN_SPEC_DRAFT;
    int nc = 0;
    for (int i = 0; i < nd; i++) {
        kn_row *r = in[i];
        if (!r->spec) continue;
        int32_t kmax = row_kmax(sp, r, budget);
        if (!draft && kmax > 0) kmax = kn_spec_ngram(r->seq, r->kv->n_past + 1, kmax, look[nc]);
        if (kmax <= 0) continue;
        if (draft) draft_ready(sp, r, r->kv->n_past + 1);
        c[nc] = (kn_spec_cand){.a = r->spec_hit / (r->spec_hit + r->spec_miss),
                               .kmax = kmax,
                               .behind = draft ? KN_MAX(0, r->kv->n_past - r->dkv->n_past - 1) : 0,
                               .left = row_left(r)};
        cr[nc++] = r;
    }
    if (!nc) return 0;
    const kn_spec_model cm = cost_model(sp);
    int32_t K;
    if (sp->force_k >= 0) {
        K = sp->force_k;
        for (int i = 0; i < nc; i++) c[i].k = KN_MIN(c[i].kmax, K);
    } else {
        K = kn_spec_plan(&cm, n_dec, c, nc);
    }
    if (K > 0) {
        sp->probe_wait = 0;
        sp->probe_every = PROBE_EVERY;
        for (int i = 0; i < nc; i++) /* a row left out while others speculate probes now and then */
            if (c[i].k == 0 && ++cr[i]->spec_wait >= PROBE_EVERY && (!draft || c[i].behind <= PROBE_EVERY)) c[i].k = 1;
    } else {
        /* Nothing pays. Could anything, at perfect acceptance? If not, probe only at the longest
         * interval (to refresh the measurements); else at the current one, doubling while probes fail. */
        kn_spec_cand u[nc];
        for (int i = 0; i < nc; i++)
            u[i] = (kn_spec_cand){.a = 1.0f, .kmax = c[i].kmax, .behind = c[i].behind, .left = c[i].left};
        const int32_t every = kn_spec_plan(&cm, n_dec, u, nc) > 0 ? sp->probe_every : PROBE_MAX;
        if (++sp->probe_wait < every) return 0;
        sp->probe_wait = 0;
        sp->probe_every = KN_MIN(2 * sp->probe_every, PROBE_MAX);
        int pick = 0; /* the draft probes the row it can catch up cheapest; ngram every matching row */
        for (int i = 1; i < nc; i++)
            if (c[i].behind < c[pick].behind) pick = i;
        for (int i = 0; i < nc; i++) c[i].k = !draft || i == pick ? 1 : 0;
    }
    int32_t used = 0;
    int nw = 0;
    kn_row *dr[nc];
    int32_t want[nc];
    for (int i = 0; i < nc; i++) {
        kn_row *r = cr[i];
        const int32_t k = KN_MIN(c[i].k, budget - used);
        if (k <= 0) continue;
        r->spec_wait = 0;
        used += k;
        if (!draft) {
            r->n_prop = k;
            memcpy(r->spec_toks + 1, look[i], (size_t)k * sizeof *look[i]);
        } else {
            want[nw] = k;
            dr[nw++] = r;
        }
    }
    if (nw) draft_propose(sp, dr, nw, want);
    return used;
}

int kn_spec_step(kn_spec *sp, const kiln_model *m, kn_scratch *s, kn_row **rows, int n, int32_t max_tokens,
                 int32_t prefill_chunk, float *logits, int32_t logits_cap) {
    if (!sp || sp->method == KILN_SPEC_NONE)
        return kn_step_rows(m, s, rows, n, max_tokens, prefill_chunk, logits, logits_cap);
    kn_batch_row br[n];
    kn_row *in[n], *dr[n];
    int32_t want[n];
    int nb = 0, nd = 0, n_dec = 0;
    int32_t budget = KN_MIN(max_tokens, s->n_max);
    for (int i = 0; i < n; i++) n_dec += !rows[i]->finished && rows[i]->decoding;
    for (int i = 0; i < n && budget > 0; i++) { /* decoding rows: the last token, then proposals */
        kn_row *r = rows[i];
        if (r->finished || !r->decoding) continue;
        in[nb++] = r;
        budget--;
        r->spec_toks[0] = r->last;
        r->n_prop = 0;
    }
    if (nb) budget -= propose(sp, in, nb, n_dec, budget); /* (its arrays are sized by nb) */
    for (int i = 0; i < nb; i++)
        br[i] = (kn_batch_row){
            .kv = in[i]->kv, .tokens = in[i]->spec_toks, .n_tokens = 1 + in[i]->n_prop, .logits_from = 0};
    const int n_dec_in = nb;
    int32_t extra = sp->n_rows * (sp->max_k + 1) - (n - nb); /* logits rows beyond one per prefilling row */
    for (int i = 0; i < nb; i++) extra -= br[i].n_tokens;
    bool expect = false, expect_known = false;
    for (int i = 0; i < n && budget > 0; i++) { /* prefilling rows share the rest, in order */
        kn_row *r = rows[i];
        if (r->finished || r->decoding) continue;
        kn_row_plan(r, kn_row_plan_max(r, KN_MIN(budget, prefill_chunk), &extra), &br[nb]);
        in[nb++] = r;
        budget -= br[nb - 1].n_tokens;
        if (!r->spec || !r->dkv) continue;
        if (!expect_known) { /* would a row joining the decoding rows now speculate? */
            const kn_spec_model cm = cost_model(sp);
            expect = expect_spec(sp, &cm, r, n);
            expect_known = true;
        }
        if (expect || r->dkv->n_past > 0) { /* its draft prefills the same tokens */
            want[nd] = (int32_t)r->n_fed + br[nb - 1].n_tokens;
            dr[nd++] = r;
        }
    }
    if (nd) draft_prefill(sp, dr, nd, want);
    if (nb == 0 || !kn_rows_prepare_kv(in, br, nb)) return 0; /* paged KV: the blocks the pass writes */
    timed_forward(&sp->tcost, m, s, br, nb, sp->vlogits, sp->n_rows * (sp->max_k + 1));
    const size_t V = (size_t)m->hp.n_vocab;
    int done = 0;
    size_t li = 0;
    for (int i = 0; i < nb; i++) {
        kn_row *r = in[i];
        if (i >= n_dec_in) { /* a prompt chunk */
            const bool has = br[i].logits_from < br[i].n_tokens;
            done += kn_row_advance(r, &br[i], has ? sp->vlogits + li * V : NULL);
            li += (size_t)(br[i].n_tokens - br[i].logits_from);
            continue;
        }
        const int32_t P = r->kv->n_past - br[i].n_tokens; /* position of the last token */
        int32_t acc = 0;
        bool fin = false;
        for (int32_t j = 0; j <= r->n_prop; j++) {
            r->kv->n_past = P + j + 1; /* positions P .. P+j hold committed tokens */
            if ((fin = kn_row_advance(r, &br[i], sp->vlogits + (li + (size_t)j) * V))) break;
            if (j == r->n_prop || r->last != r->spec_toks[j + 1]) break;
            acc++;
        }
        li += 1 + (size_t)r->n_prop;
        done += fin;
        if (r->dkv && r->dkv->n_past > r->kv->n_past) r->dkv->n_past = r->kv->n_past;
        if (r->n_prop) {
            const float miss = acc < r->n_prop ? 1.0f : 0.0f;
            r->spec_hit = r->spec_hit * DECAY + (float)acc;
            r->spec_miss = r->spec_miss * DECAY + miss;
            sp->hit = sp->hit * DECAY_METHOD + (float)acc;
            sp->miss = sp->miss * DECAY_METHOD + miss;
            r->res.n_spec_proposed += r->n_prop;
            r->res.n_spec_accepted += acc;
            atomic_fetch_add(&sp->proposed, (uint_fast64_t)r->n_prop);
            atomic_fetch_add(&sp->accepted, (uint_fast64_t)acc);
        }
    }
    (void)logits, (void)logits_cap;
    return done;
}

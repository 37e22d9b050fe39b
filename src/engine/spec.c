/*
 * spec.c - the step's method seam and the speculative methods ngram and draft (see spec.h).
 *
 * One step: every decoding row gets its last token and, when it speculates, up to k proposals
 * (ngram: a lookup in its tokens; draft: the draft model catches up on the row's committed tokens
 * and extends them greedily, all drafting rows batched in each draft pass); prefilling rows share
 * the rest of the budget (a drafting row's draft prefills the same chunk); one target forward
 * pass computes logits for every position of every decoding row; each row then commits tokens
 * position by position (kn_row_advance) until one differs from its proposal, and lowers n_past
 * (its KV and its draft's) to what it committed.
 */
#include "engine/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The cost of one verified token next to a one-token step, per decoding row of the batch: at batch
 * 1 the step reads every weight once whatever the tokens (decode is bound by memory bandwidth); in
 * a larger batch the extra tokens weigh more. */
#define TOKEN_COST   0.08f
#define PROBE_EVERY  16    /* steps a row without proposals waits before it tries one again */
#define DECAY        0.8f  /* of the acceptance counts per step with proposals */
#define NGRAM_WINDOW 16384 /* tokens of a row's history the n-gram lookup searches */

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
    if (method == KILN_SPEC_NONE) return KILN_OK;
    const size_t V = (size_t)target->hp.n_vocab;
    sp->vlogits = kn_alloc_aligned((size_t)n_rows * (size_t)(max_k + 1) * V * sizeof(float));
    if (!sp->vlogits) return kn_error(KILN_ERR_NOMEM, "out of memory for the speculative logits");
    if (method != KILN_SPEC_DRAFT) return KILN_OK;
    sp->draft = draft;
    sp->draft_cost = target->weight_bytes ? (float)draft->weight_bytes / (float)target->weight_bytes : 1.0f;
    kiln_status st = kn_scratch_init(&sp->dscratch, draft, prefill_chunk + n_rows, n_ctx, n_threads);
    if (!st) {
        sp->dkv = kn_calloc((size_t)n_rows, sizeof *sp->dkv);
        sp->dlogits = kn_alloc_aligned((size_t)n_rows * V * sizeof(float));
        if (!sp->dkv || !sp->dlogits) st = kn_error(KILN_ERR_NOMEM, "out of memory for the draft model's buffers");
    }
    if (st) kn_spec_free(sp);
    return st;
}

void kn_spec_free(kn_spec *sp) {
    if (sp->dkv)
        for (int32_t i = 0; i < sp->n_rows; i++) kn_kv_free(&sp->dkv[i]);
    free(sp->dkv);
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
    r->spec_hit = r->spec_miss = 1.0f; /* a = 1/2 until the row has shown otherwise */
    r->dkv = NULL;
    if (!r->spec || sp->method != KILN_SPEC_DRAFT) return KILN_OK;
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
    r->dkv = kv;
    return KILN_OK;
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

/* Proposals the row should try this step (0: none), within its context and max_tokens, from its
 * acceptance estimate and the cost of a verified token in a batch of n_dec decoding rows. */
static int32_t choose_k(const kn_spec *sp, kn_row *r, int n_dec) {
    int32_t k = KN_MIN(sp->max_k, r->kv->n_ctx - r->kv->n_past - 1);
    if (r->gp.max_tokens >= 0) k = KN_MIN(k, r->gp.max_tokens - r->res.n_generated - 1);
    if (k <= 0) return 0;
    const float a = r->spec_hit / (r->spec_hit + r->spec_miss);
    const float cost = TOKEN_COST * (float)n_dec + (sp->method == KILN_SPEC_DRAFT ? sp->draft_cost : 0.0f);
    int32_t want = 0;
    for (float gain = a; want < k && gain > cost; gain *= a) want++;
    if (want == 0 && ++r->spec_wait >= PROBE_EVERY) want = 1; /* a probe: has the text become predictable? */
    if (want) r->spec_wait = 0;
    return want;
}

/* Brings the draft's cache of rows dr[nd] up to position upto[i] (exclusive) over their tokens
 * (r->seq), in passes of the draft scratch's size, without logits: a prefilling row's draft
 * prefills the same chunk as the row, in the same step, so that its first proposals need no long
 * catch-up (and the draft's prompt work counts as prompt time). */
static void draft_prefill(kn_spec *sp, kn_row **dr, int nd, const int32_t *upto) {
    kn_batch_row b[nd];
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
        kn_forward(sp->draft, &sp->dscratch, b, nb, sp->dlogits, 0);
    }
}

/* The draft's proposals for rows dr[nd] wanting want[i] (>= 1) tokens each, into spec_toks[1..]:
 * the draft's cache first catches up on each row's committed tokens (seq[dkv->n_past .. n_past],
 * the last one included), in passes of the draft scratch's size, then every row extends its
 * proposals greedily, one batched draft pass per token. */
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
        kn_forward(sp->draft, &sp->dscratch, b, nb, sp->dlogits, nd);
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
        kn_forward(sp->draft, &sp->dscratch, b, nb, sp->dlogits, nd);
        for (int i = 0; i < nb; i++) who[i]->spec_toks[++who[i]->n_prop] = kn_argmax(sp->dlogits + i * V, (int32_t)V);
    }
}

int kn_spec_step(kn_spec *sp, const kiln_model *m, kn_scratch *s, kn_row **rows, int n, int32_t max_tokens,
                 int32_t prefill_chunk, float *logits) {
    if (!sp || sp->method == KILN_SPEC_NONE) return kn_step_rows(m, s, rows, n, max_tokens, prefill_chunk, logits);
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
        const int32_t k = r->spec ? KN_MIN(choose_k(sp, r, n_dec), budget) : 0;
        if (k <= 0) continue;
        if (sp->method == KILN_SPEC_NGRAM) {
            r->n_prop = kn_spec_ngram(r->seq, r->kv->n_past + 1, k, r->spec_toks + 1);
        } else {
            want[nd] = k;
            dr[nd++] = r;
        }
        budget -= sp->method == KILN_SPEC_NGRAM ? r->n_prop : k;
    }
    if (nd) draft_propose(sp, dr, nd, want);
    for (int i = 0; i < nb; i++)
        br[i] = (kn_batch_row){
            .kv = in[i]->kv, .tokens = in[i]->spec_toks, .n_tokens = 1 + in[i]->n_prop, .logits_from = 0};
    const int n_dec_in = nb;
    nd = 0;
    for (int i = 0; i < n && budget > 0; i++) { /* prefilling rows share the rest, in order */
        kn_row *r = rows[i];
        if (r->finished || r->decoding) continue;
        kn_row_plan(r, KN_MIN(budget, prefill_chunk), &br[nb]);
        in[nb++] = r;
        budget -= br[nb - 1].n_tokens;
        if (r->spec && r->dkv) { /* its draft prefills the same tokens */
            want[nd] = (int32_t)r->n_fed + br[nb - 1].n_tokens;
            dr[nd++] = r;
        }
    }
    if (nd) draft_prefill(sp, dr, nd, want);
    if (nb == 0 || !kn_rows_prepare_kv(in, br, nb)) return 0; /* paged KV: the blocks the pass writes */
    kn_forward(m, s, br, nb, sp->vlogits, sp->n_rows * (sp->max_k + 1));
    const size_t V = (size_t)m->hp.n_vocab;
    int done = 0;
    size_t li = 0;
    for (int i = 0; i < nb; i++) {
        kn_row *r = in[i];
        if (i >= n_dec_in) { /* a prompt chunk */
            const bool has = br[i].logits_from < br[i].n_tokens;
            done += kn_row_advance(r, &br[i], has ? sp->vlogits + li++ * V : NULL);
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
            r->spec_hit = r->spec_hit * DECAY + (float)acc;
            r->spec_miss = r->spec_miss * DECAY + (acc < r->n_prop ? 1.0f : 0.0f);
            r->res.n_spec_proposed += r->n_prop;
            r->res.n_spec_accepted += acc;
            atomic_fetch_add(&sp->proposed, (uint_fast64_t)r->n_prop);
            atomic_fetch_add(&sp->accepted, (uint_fast64_t)acc);
        }
    }
    (void)logits;
    return done;
}

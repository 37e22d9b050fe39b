/*
 * row.c - the per-row generation state machine and the executor step (see row.h).
 *
 * Order of events in a row, identical whether it runs alone or in a batch:
 *   begin -> prefill chunks -> [logits of the last prompt token] -> loop:
 *     limit reached? -> [grammar mask] -> sample -> end-of-generation token? -> [lazy grammar: trigger
 *     scan, re-draw] -> [grammar accept]
 *     -> count, emit text/logprobs -> stop string? -> [grammar complete?] -> limit? -> context full?
 *     -> feed the token at the next step
 *   -> end (flush held text, result, on_done).
 */
#include "engine/row.h"

#include "sample/logprobs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_status kn_exec_resolve(const kiln_model *m, int32_t *n_ctx, int32_t *n_threads, kiln_kv_type kv_type) {
    if (!m) return kn_error(KILN_ERR_INVALID_ARG, "the model is NULL");
    if (m->vocab_only) return kn_error(KILN_ERR_INVALID_ARG, "the model was loaded vocab-only; it cannot generate");
    if (*n_ctx < 0 || *n_ctx > KILN_N_CTX_MAX)
        return kn_error(KILN_ERR_INVALID_ARG, "context size %d is outside [0, %d]", *n_ctx, KILN_N_CTX_MAX);
    if (*n_ctx == 0) *n_ctx = kiln_default_n_ctx(m->hp.n_ctx_train);
    if (*n_ctx > m->hp.n_ctx_train)
        KN_LOGW("context size %d exceeds the %d tokens the model was trained on", *n_ctx, m->hp.n_ctx_train);
    if (*n_threads < 0 || *n_threads > KILN_N_THREADS_MAX)
        return kn_error(KILN_ERR_INVALID_ARG, "thread count %d is outside [0, %d]", *n_threads, KILN_N_THREADS_MAX);
    if (*n_threads == 0) *n_threads = kn_physical_cores();
    if (!kiln_kv_type_name(kv_type))
        return kn_error(KILN_ERR_INVALID_ARG, "unknown KV type %d (types: %s)", (int)kv_type, kiln_kv_type_list());
    return KILN_OK;
}

kiln_status kn_row_validate(const kiln_model *m, int32_t n_ctx, const kiln_token *prompt, size_t n,
                            const kiln_generate_params *gp) {
    if (!m->hp.causal)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "the model '%s' is an embedding model (an encoder); it does not generate text", m->arch_name);
    if (n == 0 || !prompt) return kn_error(KILN_ERR_INVALID_ARG, "the prompt is empty and the model has no BOS token");
    if (n >= (size_t)n_ctx)
        return kn_error(KILN_ERR_CONTEXT_FULL, "the prompt has %zu tokens; the context holds %d", n, n_ctx);
    const int32_t V = m->hp.n_vocab;
    for (size_t i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return kn_error(KILN_ERR_INVALID_ARG, "token %d at index %zu is outside the vocabulary [0, %d)", prompt[i],
                            i, V);
    if (gp->logprobs < -1 || gp->logprobs > KILN_MAX_TOP_LOGPROBS)
        return kn_error(KILN_ERR_INVALID_ARG, "logprobs %d is outside [-1, %d]", gp->logprobs, KILN_MAX_TOP_LOGPROBS);
    if (gp->prompt_logprobs < -1 || gp->prompt_logprobs > KILN_MAX_TOP_LOGPROBS)
        return kn_error(KILN_ERR_INVALID_ARG, "prompt_logprobs %d is outside [-1, %d]", gp->prompt_logprobs,
                        KILN_MAX_TOP_LOGPROBS);
    return KILN_OK;
}

/* Frees what kn_row_begin allocated (any part may be missing). */
static void free_buffers(kn_row *r) {
    kn_sampler_free(&r->smp);
    kn_stopper_free(&r->stop);
    free(r->seq);
    r->seq = NULL;
    kn_gmatch_free(r->gm);
    r->gm = NULL;
    free(r->masked);
    r->masked = NULL;
    free(r->scan);
    r->scan = NULL;
}

/* A stream starts a text when nothing but BOS precedes it. */
static bool starts_text(const kn_row *r) { return r->n_prompt == 1 && r->prompt[0] == kn_tok_bos(r->model->tok); }

/* Creates the row's grammar matcher and masked logits. At the start of a text, a SentencePiece
 * vocabulary's first space is not output (see kn_detok), so the matcher does not see it either. A
 * row that renders special tokens matches them by their texts (the special trie). */
static kiln_status begin_grammar(kn_row *r) {
    const kn_vtrie *vt = r->gp.render_special ? kn_model_vtrie_special(r->model) : kn_model_vtrie(r->model);
    if (!vt) return KILN_ERR_NOMEM;
    /* a lazy grammar starts at a trigger, never at the first byte of the text */
    const bool strip =
        starts_text(r) && kn_tok_strips_first_space(r->model->tok) && !kn_grammar_trigger_max(r->gp.grammar);
    kiln_status st = kn_gmatch_new(r->gp.grammar, vt, strip, &r->gm);
    if (st) return st;
    if (!(r->masked = malloc((size_t)r->model->hp.n_vocab * sizeof *r->masked)))
        return kn_error(KILN_ERR_NOMEM, "out of memory for a row's masked logits");
    const size_t tmax = kn_grammar_trigger_max(r->gp.grammar);
    if (tmax) {
        r->lazy = true;
        if (!(r->scan = malloc(tmax + KN_TOK_MAX_PIECE)))
            return kn_error(KILN_ERR_NOMEM, "out of memory for a row's trigger scan");
    }
    return KILN_OK;
}

kiln_status kn_row_begin(kn_row *r, const kiln_model *m, kn_kv *kv, const kiln_token *prompt, size_t n,
                         int32_t n_cached, const kiln_generate_params *gp) {
    memset(r, 0, sizeof *r);
    r->model = m;
    r->kv = kv;
    r->gp = *gp;
    r->prompt = prompt;
    r->n_prompt = n;
    r->res.stop_index = -1;
    r->res.error = "";
    kiln_status st = kn_row_validate(m, kv->n_ctx, prompt, n, gp);
    if (st) return st;
    if (n_cached < 0 || (size_t)n_cached >= n)
        return kn_error(KILN_ERR_INVALID_ARG, "bad cached prefix length %d", n_cached);
    st = kn_stopper_init(&r->stop, gp->stop, gp->n_stop, sizeof r->detok.out);
    if (!st) st = kn_sampler_init(&r->smp, &gp->sampling, m->hp.n_vocab);
    if (!st && !(r->seq = malloc((size_t)kv->n_ctx * sizeof *r->seq)))
        st = kn_error(KILN_ERR_NOMEM, "out of memory for a row's tokens");
    if (!st && gp->grammar) st = begin_grammar(r);
    if (st) {
        free_buffers(r);
        return st;
    }
    memcpy(r->seq, prompt, n * sizeof *prompt);
    for (size_t i = 0; i < n; i++) kn_sampler_accept(&r->smp, prompt[i]);
    kv->n_past = n_cached;
    r->n_fed = (size_t)n_cached;
    r->res.n_cached = n_cached;
    r->t_start = kn_now_ms();
    return KILN_OK;
}

void kn_row_plan(const kn_row *r, int32_t max, kn_batch_row *out) {
    out->kv = r->kv;
    if (r->decoding) {
        out->tokens = &r->last;
        out->n_tokens = 1;
        out->logits_from = 0;
        return;
    }
    const size_t left = r->n_prompt - r->n_fed;
    const int32_t n = (int32_t)KN_MIN(left, (size_t)max);
    out->tokens = r->prompt + r->n_fed;
    out->n_tokens = n;
    /* logits only for the prompt's last token; with prompt logprobs for every position */
    out->logits_from = r->gp.prompt_logprobs >= 0 ? 0 : (size_t)n == left ? n - 1 : n;
}

int32_t kn_row_plan_max(const kn_row *r, int32_t max, int32_t *extra) {
    if (r->decoding || r->gp.prompt_logprobs < 0) return max;
    const int32_t n = KN_MIN(max, 1 + KN_MAX(*extra, 0));
    *extra -= n - 1;
    return n;
}

/* Emits token tok (sampled from logits) with the text it releases; returns non-zero if the
 * callback cancels. */
static int emit(kn_row *r, kiln_token tok, const float *logits) {
    size_t len, n_rel;
    const char *text = kn_detok_push(&r->detok, tok, &len);
    const char *rel = kn_stopper_push(&r->stop, text, len, &n_rel);
    if (!r->gp.on_token) return 0;
    kiln_token_event ev = {.token = tok, .text = rel, .text_len = n_rel, .top = r->top};
    if (r->gp.logprobs >= 0) {
        ev.n_top = (size_t)r->gp.logprobs;
        if (r->gm) ev.n_top = KN_MIN(ev.n_top, (size_t)r->n_allowed); /* never a disallowed token */
        ev.logprob = kn_logprobs(r->model->kernels, logits, r->model->hp.n_vocab, tok, ev.n_top, r->top);
    }
    return r->gp.on_token(&ev, r->gp.user);
}

/* The events of the prompt tokens a chunk's logits predict (prompt_logprobs): logits[j] of the
 * chunk's position j gives the logprob of the prompt token after it. Non-zero if the callback
 * cancels. */
static int emit_prompt(kn_row *r, int32_t n, const float *logits) {
    const size_t V = (size_t)r->model->hp.n_vocab;
    if (!r->gp.on_token) return 0;
    for (int32_t j = 0; j < n && r->n_fed + (size_t)j + 1 < r->n_prompt; j++) {
        const kiln_token tok = r->prompt[r->n_fed + (size_t)j + 1];
        kiln_token_event ev = {.token = tok, .top = r->top, .n_top = (size_t)r->gp.prompt_logprobs, .prompt = true};
        ev.logprob = kn_logprobs(r->model->kernels, logits + (size_t)j * V, (int32_t)V, tok, ev.n_top, r->top);
        if (r->gp.on_token(&ev, r->gp.user)) return 1;
    }
    return 0;
}

static bool finish(kn_row *r, kiln_stop_reason why) {
    r->res.stop = why;
    r->finished = true;
    return true;
}

/* Ends the row with an error of its grammar: status st, the message kept in the row. */
static bool grammar_fail(kn_row *r, kiln_status st, const char *why) {
    char cause[KN_ERRMSG_MAX]; /* why may be the thread's error message, which kn_error rewrites */
    snprintf(cause, sizeof cause, "%s", why ? why : "no token is allowed");
    r->status = kn_error(st, "the grammar cannot continue: %s", cause);
    snprintf(r->err, sizeof r->err, "%s", kn_error_msg());
    r->res.error = r->err;
    return finish(r, KILN_STOP_NONE);
}

/* Copies logits[n_vocab] into r->masked with the tokens the grammar does not allow at -INFINITY;
 * *mask is the grammar's mask (valid until the matcher's next call). NULL when no token is allowed
 * (the row has then failed). */
static const float *mask_logits(kn_row *r, const float *logits, const uint64_t **mask) {
    const uint64_t *bits = kn_gmatch_mask(r->gm, &r->n_allowed);
    if (!r->n_allowed) {
        grammar_fail(r, kn_gmatch_failed(r->gm) ? kn_gmatch_fail_status(r->gm) : KILN_ERR_UNSUPPORTED,
                     kn_gmatch_error(r->gm));
        return NULL;
    }
    const int32_t V = r->model->hp.n_vocab;
    float *out = r->masked;
    for (int32_t base = 0; base < V; base += 64) {
        const uint64_t w = bits[base >> 6];
        const int32_t n = KN_MIN(64, V - base);
        if (w == ~0ull) {
            memcpy(out + base, logits + base, 64 * sizeof *out);
        } else if (!w) {
            for (int32_t i = 0; i < n; i++) out[base + i] = -INFINITY;
        } else {
            for (int32_t i = 0; i < n; i++) out[base + i] = w >> i & 1 ? logits[base + i] : -INFINITY;
        }
    }
    *mask = bits;
    return out;
}

/* The lowest allowed token of a mask with at least one. */
static kiln_token first_allowed(const uint64_t *mask) {
    int32_t w = 0;
    while (!mask[w]) w++;
    return w * 64 + __builtin_ctzll(mask[w]);
}

#define LAZY_REDRAWS 256 /* tokens a trigger check may exclude at one step before the row fails */

/* A lazy row (no trigger yet) that sampled tok from logits: scans tok's bytes after the text's
 * tail for a trigger. Without one, keeps the new tail and returns tok. With one, feeds the bytes
 * from the trigger on to the matcher and ends the lazy phase (the matcher has then seen tok); a
 * token whose bytes the grammar rejects there is excluded (r->masked) and the draw repeated, from
 * *logits, which then points to r->masked. -1 after failing the row. */
static kiln_token lazy_step(kn_row *r, const float **logits, kiln_token tok) {
    const size_t tmax = kn_grammar_trigger_max(r->gp.grammar);
    const int32_t V = r->model->hp.n_vocab;
    for (int attempt = 0;; attempt++) {
        const size_t n =
            kn_token_piece(r->model->tok, tok, r->gp.render_special, r->scan + r->n_tail, KN_TOK_MAX_PIECE);
        const size_t total = r->n_tail + KN_MIN(n, (size_t)KN_TOK_MAX_PIECE);
        size_t at;
        if (!kn_grammar_find_trigger(r->gp.grammar, r->scan, total, &at)) {
            const size_t keep = KN_MIN(total, tmax - 1);
            memmove(r->scan, r->scan + total - keep, keep);
            r->n_tail = keep;
            return tok;
        }
        kiln_status st = kn_gmatch_feed(r->gm, r->scan + at, total - at);
        if (!st) {
            r->lazy = false;
            return tok;
        }
        if (kn_gmatch_failed(r->gm)) {
            grammar_fail(r, st, kn_error_msg());
            return -1;
        }
        if (attempt == LAZY_REDRAWS) {
            grammar_fail(r, KILN_ERR_UNSUPPORTED, "every drawn token completes a trigger the grammar cannot continue");
            return -1;
        }
        if (*logits != r->masked) {
            memcpy(r->masked, *logits, (size_t)V * sizeof *r->masked);
            *logits = r->masked;
        }
        r->masked[tok] = -INFINITY;
        tok = kn_sampler_sample(&r->smp, r->masked);
        if (r->masked[tok] == -INFINITY) {
            grammar_fail(r, KILN_ERR_UNSUPPORTED, "no token is left after excluding those a trigger cannot continue");
            return -1;
        }
    }
}

bool kn_row_advance(kn_row *r, const kn_batch_row *planned, const float *logits) {
    if (r->finished) return true;
    if (!r->decoding) {
        if (r->gp.prompt_logprobs >= 0 && logits) {
            if (emit_prompt(r, planned->n_tokens, logits)) {
                r->status = KILN_ERR_CANCELLED;
                r->res.error = "the generation was cancelled by its token callback";
                return finish(r, KILN_STOP_CANCELLED);
            }
            logits += (size_t)(planned->n_tokens - 1) * (size_t)r->model->hp.n_vocab; /* the last position's */
        }
        r->n_fed += (size_t)planned->n_tokens;
        if (r->n_fed < r->n_prompt) return false;
        r->decoding = true;
        r->t_first = kn_now_ms();
        r->res.n_prompt = (int32_t)r->n_prompt;
        r->res.prompt_ms = r->t_first - r->t_start;
        kn_detok_init(&r->detok, r->model->tok, starts_text(r), r->gp.render_special);
    }
    const kiln_generate_params *p = &r->gp;
    if (p->max_tokens >= 0 && r->res.n_generated >= p->max_tokens) return finish(r, KILN_STOP_LENGTH);
    const uint64_t *mask = NULL;
    const bool masked = r->gm && !r->lazy;
    if (masked && !(logits = mask_logits(r, logits, &mask))) return true;
    if (r->lazy) r->n_allowed = r->model->hp.n_vocab;
    kiln_token tok = kn_sampler_sample(&r->smp, logits);
    if (mask && !(mask[tok >> 6] >> (tok & 63) & 1)) tok = first_allowed(mask); /* every allowed logit -inf */
    /* With a grammar an end-of-generation token is allowed only when the text is complete: it ends
     * the row even with ignore_eos. */
    if ((!p->ignore_eos || masked) && kn_tok_is_eog(r->model->tok, tok)) return finish(r, KILN_STOP_EOS);
    if (r->lazy && (tok = lazy_step(r, &logits, tok)) < 0) return true;
    if (masked) {
        kiln_status st = kn_gmatch_accept(r->gm, tok);
        if (st) return grammar_fail(r, kn_gmatch_failed(r->gm) ? st : KILN_ERR_INTERNAL, kn_error_msg());
    }
    kn_sampler_accept(&r->smp, tok);
    r->res.n_generated++;
    if (emit(r, tok, logits)) {
        r->status = KILN_ERR_CANCELLED;
        r->res.error = "the generation was cancelled by its token callback";
        return finish(r, KILN_STOP_CANCELLED);
    }
    if (r->stop.matched >= 0) {
        r->res.stop_index = r->stop.matched;
        return finish(r, KILN_STOP_STRING);
    }
    if (r->gm && !r->lazy && kn_gmatch_final(r->gm)) return finish(r, KILN_STOP_EOS); /* nothing may follow */
    if (p->max_tokens >= 0 && r->res.n_generated >= p->max_tokens) return finish(r, KILN_STOP_LENGTH);
    if (r->kv->n_past >= r->kv->n_ctx) return finish(r, KILN_STOP_CONTEXT);
    r->last = tok;
    r->seq[r->kv->n_past] = tok; /* its K/V go to this position at the next step */
    return false;
}

void kn_row_cancel(kn_row *r) {
    if (r->finished) return;
    r->status = KILN_ERR_CANCELLED;
    r->res.error = "the request was cancelled";
    finish(r, KILN_STOP_CANCELLED);
}

/* Sends released text as a final event without a token. */
static void emit_tail(kn_row *r, const char *text, size_t len) {
    if (!len || !r->gp.on_token) return;
    kiln_token_event ev = {.token = -1, .text = text, .text_len = len};
    r->gp.on_token(&ev, r->gp.user);
}

kiln_status kn_row_end(kn_row *r, kiln_generate_result *result) {
    if (r->status == KILN_OK && r->decoding) {
        /* Bytes of an unfinished character, then the text held back for stop strings. */
        size_t n;
        const char *tail = kn_detok_flush(&r->detok, &n);
        const char *rel = kn_stopper_push(&r->stop, tail, n, &n);
        emit_tail(r, rel, n);
        const char *held = kn_stopper_flush(&r->stop, &n);
        emit_tail(r, held, n);
    }
    if (r->decoding) r->res.gen_ms = kn_now_ms() - r->t_first;
    else r->res.prompt_ms = kn_now_ms() - r->t_start;
    free_buffers(r);
    if (result) *result = r->res;
    if (r->gp.on_done) r->gp.on_done(r->status, &r->res, r->gp.user);
    return r->status;
}

/* Makes the KV positions a planned pass writes writable (paged KV: blocks mapped, shared ones
 * copied); a row whose cache cannot have them ends with the error. */
static bool prepare_kv(kn_row *r, const kn_batch_row *b) {
    const kiln_status st = kn_kv_prepare(b->kv, b->kv->n_past, b->n_tokens);
    if (!st) return true;
    r->status = st;
    snprintf(r->err, sizeof r->err, "%s", kn_error_msg());
    r->res.error = r->err;
    finish(r, KILN_STOP_NONE);
    return false;
}

bool kn_rows_prepare_kv(kn_row **in, const kn_batch_row *br, int nb) {
    bool ok = true;
    for (int i = 0; i < nb; i++) ok &= prepare_kv(in[i], &br[i]);
    return ok;
}

int kn_step_rows(const kiln_model *m, kn_scratch *s, kn_row **rows, int n, int32_t max_tokens, int32_t prefill_chunk,
                 float *logits, int32_t logits_cap) {
    kn_batch_row br[n];
    kn_row *in[n];
    int nb = 0;
    int32_t budget = KN_MIN(max_tokens, s->n_max), extra = logits_cap - n;
    for (int i = 0; i < n && budget > 0; i++) { /* decoding rows: one token each */
        if (rows[i]->finished || !rows[i]->decoding) continue;
        kn_row_plan(rows[i], 1, &br[nb]);
        if (!prepare_kv(rows[i], &br[nb])) continue;
        in[nb++] = rows[i];
        budget--;
    }
    for (int i = 0; i < n && budget > 0; i++) { /* prefilling rows share the rest, in order */
        if (rows[i]->finished || rows[i]->decoding) continue;
        kn_row_plan(rows[i], kn_row_plan_max(rows[i], KN_MIN(budget, prefill_chunk), &extra), &br[nb]);
        if (!prepare_kv(rows[i], &br[nb])) continue;
        in[nb++] = rows[i];
        budget -= br[nb - 1].n_tokens;
    }
    if (nb == 0) return 0;
    kn_forward(m, s, br, nb, logits, logits_cap);
    int done = 0;
    size_t li = 0;
    for (int i = 0; i < nb; i++) {
        const bool has = br[i].logits_from < br[i].n_tokens;
        const float *lg = has ? logits + li * (size_t)m->hp.n_vocab : NULL;
        li += (size_t)(br[i].n_tokens - br[i].logits_from);
        done += kn_row_advance(in[i], &br[i], lg);
    }
    return done;
}

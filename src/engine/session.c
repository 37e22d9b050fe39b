/*
 * session.c - kiln_session: context creation, low-level eval, and the generation loop.
 *
 * The loop: tokenize the prompt, prefill it in n_batch chunks, then repeatedly sample one token,
 * hand its completed text to the caller's callback and evaluate it, until an end-of-generation
 * token, the token limit, a full context or cancellation. Every buffer is allocated when the
 * session is created (the sampler's when a generation starts); the token loop allocates nothing.
 */
#include "engine/session.h"
#include "engine/stop.h"
#include "sample/logprobs.h"

#include <stdlib.h>
#include <string.h>

kiln_session_params kiln_session_default_params(void) {
    kiln_session_params p = {.n_ctx = 0, .n_batch = 256, .n_threads = 0, .kv_type = KILN_KV_F16, .logits_all = false};
    return p;
}

kiln_generate_params kiln_generate_default_params(void) {
    kiln_generate_params p = {
        .max_tokens = 256, .ignore_eos = false, .add_special = true, .parse_special = false,
        .sampling = kiln_sampler_default_params(), .stop = NULL, .n_stop = 0, .logprobs = -1,
        .on_token = NULL, .user = NULL,
    };
    return p;
}

static kiln_status fail(kiln_session *s, kiln_status st) {
    kn_error_save(s->err);
    return st;
}

kiln_status kiln_session_new(kiln_model *model, const kiln_session_params *params, kiln_session **out) {
    kn_error_clear();
    if (!out) return kn_error(KILN_ERR_INVALID_ARG, "kiln_session_new: out is NULL");
    *out = NULL;
    if (!model) return kn_error(KILN_ERR_INVALID_ARG, "kiln_session_new: model is NULL");
    if (model->vocab_only) return kn_error(KILN_ERR_INVALID_ARG, "the model was loaded vocab-only; it cannot generate");
    kiln_session_params p = params ? *params : kiln_session_default_params();
    const kn_hparams *hp = &model->hp;
    if (p.n_ctx < 0 || p.n_ctx > (1 << 24)) return kn_error(KILN_ERR_INVALID_ARG, "context size %d is out of range", p.n_ctx);
    if (p.n_ctx == 0) p.n_ctx = KN_MIN(hp->n_ctx_train, 4096);
    if (p.n_ctx > hp->n_ctx_train)
        KN_LOGW("context size %d exceeds the %d tokens the model was trained on", p.n_ctx, hp->n_ctx_train);
    if (p.n_batch <= 0 || p.n_batch > 65536) return kn_error(KILN_ERR_INVALID_ARG, "batch size %d is out of range", p.n_batch);
    p.n_batch = KN_MIN(p.n_batch, p.n_ctx);
    if (p.n_threads < 0 || p.n_threads > 1024) return kn_error(KILN_ERR_INVALID_ARG, "thread count %d is out of range", p.n_threads);
    if (p.n_threads == 0) p.n_threads = kn_physical_cores();
    if (p.kv_type != KILN_KV_F16 && p.kv_type != KILN_KV_F32) return kn_error(KILN_ERR_INVALID_ARG, "unknown KV type");

    kiln_session *s = kn_calloc(1, sizeof *s);
    if (!s) return KILN_ERR_NOMEM;
    s->model = model;
    s->p = p;
    kiln_status st = kn_kv_init(&s->kv, p.kv_type == KILN_KV_F16 ? KN_F16 : KN_F32, hp->n_layer, p.n_ctx,
                                hp->n_head_kv * hp->head_dim);
    if (!st) st = kn_scratch_init(&s->scratch, model, p.n_batch, p.n_ctx, p.n_threads);
    if (!st) {
        s->n_logits_cap = p.logits_all ? p.n_batch : 1;
        s->logits = kn_alloc_aligned((size_t)s->n_logits_cap * (size_t)hp->n_vocab * sizeof(float));
        s->prompt_buf = kn_calloc((size_t)p.n_ctx, sizeof(kiln_token));
        if (!s->logits || !s->prompt_buf) st = KILN_ERR_NOMEM;
    }
    if (st) {
        kiln_session_free(s);
        return st;
    }
    *out = s;
    return KILN_OK;
}

void kiln_session_free(kiln_session *s) {
    if (!s) return;
    kn_kv_free(&s->kv);
    kn_scratch_free(&s->scratch);
    kn_free_aligned(s->logits);
    free(s->prompt_buf);
    free(s);
}

const char *kiln_session_last_error(const kiln_session *s) { return s ? s->err : kn_error_msg(); }
int32_t kiln_session_n_ctx(const kiln_session *s) { return s->p.n_ctx; }
int32_t kiln_session_n_threads(const kiln_session *s) { return s->p.n_threads; }
int32_t kiln_session_n_past(const kiln_session *s) { return s->kv.n_past; }

void kiln_session_reset(kiln_session *s) {
    s->kv.n_past = 0;
    s->n_logits = 0;
}

kiln_status kiln_session_eval(kiln_session *s, const kiln_token *tokens, size_t n, bool all_logits) {
    kn_error_clear();
    if (n == 0) return KILN_OK;
    if (!tokens) return fail(s, kn_error(KILN_ERR_INVALID_ARG, "tokens is NULL"));
    if (all_logits && (!s->p.logits_all || n > (size_t)s->p.n_batch))
        return fail(s, kn_error(KILN_ERR_INVALID_ARG,
                                "all_logits needs a session created with logits_all and at most n_batch (%d) tokens",
                                s->p.n_batch));
    if (n > (size_t)(s->kv.n_ctx - s->kv.n_past))
        return fail(s, kn_error(KILN_ERR_CONTEXT_FULL, "%zu tokens do not fit: %d of %d context positions are used", n,
                                s->kv.n_past, s->kv.n_ctx));
    const int32_t V = s->model->hp.n_vocab;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return fail(s, kn_error(KILN_ERR_INVALID_ARG, "token %d at index %zu is outside the vocabulary [0, %d)",
                                    tokens[i], i, V));
    for (size_t done = 0; done < n;) {
        int32_t chunk = (int32_t)KN_MIN(n - done, (size_t)s->p.n_batch);
        bool last = done + (size_t)chunk == n;
        kn_batch_row row = {
            .kv = &s->kv, .tokens = tokens + done, .n_tokens = chunk,
            .logits_from = !last ? chunk : (all_logits ? 0 : chunk - 1),
        };
        kn_forward(s->model, &s->scratch, &row, 1, s->logits, s->n_logits_cap);
        if (last) {
            s->n_logits = chunk - row.logits_from;
            s->logits_first = row.logits_from;
        }
        done += (size_t)chunk;
    }
    return KILN_OK;
}

const float *kiln_session_logits(const kiln_session *s, int32_t i) {
    if (s->n_logits == 0) return NULL;
    const int32_t n_eval = s->logits_first + s->n_logits;
    if (i < 0) i = n_eval - 1;
    if (i < s->logits_first || i >= n_eval) return NULL;
    return s->logits + (size_t)(i - s->logits_first) * (size_t)s->model->hp.n_vocab;
}

/* Per-generation output state: stop strings and logprobs, between the sampler and the callback. */
typedef struct gen_out {
    const kiln_generate_params *p;
    kn_stopper stop;
    kiln_top_logprob top[KILN_MAX_TOP_LOGPROBS];
} gen_out;

/* Emits token `tok` (sampled from `logits`) with the text it releases; returns non-zero if the
 * caller cancels. */
static int emit(kiln_session *s, gen_out *o, kiln_token tok, const float *logits) {
    size_t len, n_rel;
    const char *text = kn_detok_push(&s->detok, tok, &len);
    const char *rel = kn_stopper_push(&o->stop, text, len, &n_rel);
    if (!o->p->on_token) return 0;
    kiln_token_event ev = {.token = tok, .text = rel, .text_len = n_rel, .top = o->top};
    if (o->p->logprobs >= 0) {
        ev.n_top = (size_t)o->p->logprobs;
        ev.logprob = kn_logprobs(logits, s->model->hp.n_vocab, tok, ev.n_top, o->top);
    }
    return o->p->on_token(&ev, o->p->user);
}

kiln_status kiln_generate_tokens(kiln_session *s, const kiln_token *prompt, size_t n_prompt,
                                 const kiln_generate_params *params, kiln_generate_result *result) {
    kn_error_clear();
    kiln_generate_params p = params ? *params : kiln_generate_default_params();
    kiln_generate_result res = {.stop_index = -1};
    const kiln_model *m = s->model;
    if (n_prompt == 0) return fail(s, kn_error(KILN_ERR_INVALID_ARG, "the prompt is empty and the model has no BOS token"));
    if (n_prompt >= (size_t)s->p.n_ctx)
        return fail(s, kn_error(KILN_ERR_CONTEXT_FULL, "the prompt has %zu tokens; the context holds %d", n_prompt,
                                s->p.n_ctx));
    if (p.logprobs < -1 || p.logprobs > KILN_MAX_TOP_LOGPROBS)
        return fail(s, kn_error(KILN_ERR_INVALID_ARG, "logprobs %d is outside [-1, %d]", p.logprobs, KILN_MAX_TOP_LOGPROBS));
    gen_out o = {.p = &p};
    kiln_status st = kn_stopper_init(&o.stop, p.stop, p.n_stop, sizeof s->detok.out);
    if (st) return fail(s, st);
    kn_sampler smp;
    if ((st = kn_sampler_init(&smp, &p.sampling, m->hp.n_vocab))) {
        kn_stopper_free(&o.stop);
        return fail(s, st);
    }
    kiln_session_reset(s);
    double t0 = kn_now_ms();
    st = kiln_session_eval(s, prompt, n_prompt, false);
    if (st) {
        kn_sampler_free(&smp);
        kn_stopper_free(&o.stop);
        return st;
    }
    for (size_t i = 0; i < n_prompt; i++) kn_sampler_accept(&smp, prompt[i]);
    res.n_prompt = (int32_t)n_prompt;
    double t1 = kn_now_ms();
    res.prompt_ms = t1 - t0;
    /* A stream starts a text when nothing but BOS precedes it. */
    bool at_start = n_prompt == 1 && prompt[0] == kn_tok_bos(m->tok);
    kn_detok_init(&s->detok, m->tok, at_start, false);

    for (;;) {
        if (p.max_tokens >= 0 && res.n_generated >= p.max_tokens) { res.stop = KILN_STOP_LENGTH; break; }
        const float *logits = kiln_session_logits(s, -1);
        kiln_token tok = kn_sampler_sample(&smp, logits);
        if (!p.ignore_eos && kn_tok_is_eog(m->tok, tok)) { res.stop = KILN_STOP_EOS; break; }
        kn_sampler_accept(&smp, tok);
        res.n_generated++;
        if (emit(s, &o, tok, logits)) { res.stop = KILN_STOP_CANCELLED; st = KILN_ERR_CANCELLED; break; }
        if (o.stop.matched >= 0) { res.stop = KILN_STOP_STRING; res.stop_index = o.stop.matched; break; }
        if (s->kv.n_past >= s->kv.n_ctx) { res.stop = KILN_STOP_CONTEXT; break; }
        if ((st = kiln_session_eval(s, &tok, 1, false))) break;
    }
    /* Bytes of an unfinished character, then the text held back for stop strings. */
    size_t tail_len, held_len;
    const char *tail = kn_detok_flush(&s->detok, &tail_len);
    const char *rel = kn_stopper_push(&o.stop, tail, tail_len, &tail_len);
    if (tail_len && p.on_token && st == KILN_OK) {
        kiln_token_event ev = {.token = -1, .text = rel, .text_len = tail_len};
        p.on_token(&ev, p.user);
    }
    const char *held = kn_stopper_flush(&o.stop, &held_len);
    if (held_len && p.on_token && st == KILN_OK) {
        kiln_token_event ev = {.token = -1, .text = held, .text_len = held_len};
        p.on_token(&ev, p.user);
    }
    res.gen_ms = kn_now_ms() - t1;
    kn_sampler_free(&smp);
    kn_stopper_free(&o.stop);
    if (result) *result = res;
    if (st == KILN_ERR_CANCELLED) kn_error(st, "generation cancelled by the caller");
    return st ? fail(s, st) : KILN_OK;
}

kiln_status kiln_generate(kiln_session *s, const char *prompt, const kiln_generate_params *params,
                          kiln_generate_result *result) {
    kn_error_clear();
    kiln_generate_params p = params ? *params : kiln_generate_default_params();
    if (!prompt) prompt = "";
    size_t n = 0;
    kiln_status st = kn_tokenize(s->model->tok, prompt, strlen(prompt), p.add_special, p.parse_special, s->prompt_buf,
                                 (size_t)s->p.n_ctx, &n);
    if (st == KILN_ERR_BUFFER_SMALL)
        return fail(s, kn_error(KILN_ERR_CONTEXT_FULL, "the prompt has %zu tokens; the context holds %d", n, s->p.n_ctx));
    if (st) return fail(s, st);
    if (n == 0) {
        int32_t bos = kn_tok_bos(s->model->tok);
        if (bos >= 0) s->prompt_buf[n++] = bos;
    }
    return kiln_generate_tokens(s, s->prompt_buf, n, &p, result);
}

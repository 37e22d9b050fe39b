/*
 * session.c - kiln_session: context creation, low-level eval, and generation.
 *
 * kiln_generate runs the prompt as one row of the executor (engine/row.h): the same row state
 * machine and executor step the batching engine uses, with a batch of one. Every buffer is
 * allocated when the session is created (the sampler's and stop strings' when a generation
 * starts); the token loop allocates nothing.
 */
#include "engine/session.h"
#include "engine/row.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_N_BATCH    256 /* prompt tokens per forward chunk */
#define DEFAULT_MAX_TOKENS 256

kiln_session_params kiln_session_default_params(void) {
    kiln_session_params p = {.n_ctx = 0,
                             .n_batch = DEFAULT_N_BATCH,
                             .n_threads = 0,
                             .kv_type = KILN_KV_F16,
                             .logits_all = false,
                             .kv_type_v = KILN_KV_SAME,
                             .kv_rotate = KILN_KV_ROTATE_AUTO};
    p.spec = KILN_SPEC_NONE;
    p.draft_model = NULL;
    p.spec_max = 0;
    return p;
}

kiln_generate_params kiln_generate_default_params(void) {
    kiln_generate_params p = {
        .max_tokens = DEFAULT_MAX_TOKENS,
        .ignore_eos = false,
        .add_special = true,
        .parse_special = false,
        .render_special = false,
        .sampling = kiln_sampler_default_params(),
        .stop = NULL,
        .n_stop = 0,
        .logprobs = -1,
        .prompt_logprobs = -1,
        .grammar = NULL,
        .on_token = NULL,
        .on_done = NULL,
        .user = NULL,
        .speculative = true,
    };
    return p;
}

static kiln_status fail(kiln_session *s, kiln_status st) {
    kn_error_save(s->err);
    return st;
}

/* A generation that failed before it began: the session keeps the message and the caller's result
 * (may be NULL) says so. */
static kiln_status fail_before(kiln_session *s, kiln_status st, kiln_generate_result *result) {
    fail(s, st);
    if (result) *result = (kiln_generate_result){.stop = KILN_STOP_NONE, .stop_index = -1, .error = s->err};
    return st;
}

kiln_status kiln_session_new(kiln_model *model, const kiln_session_params *params, kiln_session **out) {
    kn_error_clear();
    if (!out) return kn_error(KILN_ERR_INVALID_ARG, "kiln_session_new: out is NULL");
    *out = NULL;
    kiln_session_params p = params ? *params : kiln_session_default_params();
    kiln_status st = kn_exec_resolve(model, &p.n_ctx, &p.n_threads, p.kv_type);
    if (st) return st;
    const kn_hparams *hp = &model->hp;
    if (p.n_batch <= 0 || p.n_batch > KILN_N_BATCH_MAX)
        return kn_error(KILN_ERR_INVALID_ARG, "batch size %d is outside [1, %d]", p.n_batch, KILN_N_BATCH_MAX);
    p.n_batch = KN_MIN(p.n_batch, p.n_ctx);
    if ((st = kn_spec_check(p.spec, model, p.draft_model, &p.spec_max))) return st;

    kiln_session *s = kn_calloc(1, sizeof *s);
    if (!s) return KILN_ERR_NOMEM;
    s->model = model;
    s->p = p;
    kn_kv_format fmt;
    st = kn_kv_format_of(p.kv_type, p.kv_type_v, p.kv_rotate, &fmt);
    if (!st) st = kn_kv_init_fmt(&s->kv, &fmt, hp->n_layer, p.n_ctx, hp->n_head_kv, hp->head_dim);
    if (!st) st = kn_spec_init(&s->spec, p.spec, model, p.draft_model, p.spec_max, 1, p.n_ctx, p.n_batch, p.n_threads);
    /* a speculative step verifies up to 1 + spec_max tokens in one pass */
    const int32_t n_max = p.spec ? KN_MAX(p.n_batch, 1 + p.spec_max) : p.n_batch;
    if (!st) st = kn_scratch_init(&s->scratch, model, n_max, p.n_ctx, p.n_threads);
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
    kn_spec_free(&s->spec);
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
            .kv = &s->kv,
            .tokens = tokens + done,
            .n_tokens = chunk,
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

kiln_status kiln_generate_tokens(kiln_session *s, const kiln_token *prompt, size_t n_prompt,
                                 const kiln_generate_params *params, kiln_generate_result *result) {
    kn_error_clear();
    kiln_generate_params p = params ? *params : kiln_generate_default_params();
    kn_row row;
    kiln_status st = kn_row_begin(&row, s->model, &s->kv, prompt, n_prompt, 0, &p);
    if (st) return fail_before(s, st, result);
    kn_spec_row_begin(&s->spec, &row, 0); /* without its draft cache the row decodes plainly */
    s->n_logits = 0;
    kn_row *rows[1] = {&row};
    while (!row.finished)
        kn_spec_step(&s->spec, s->model, &s->scratch, rows, 1, s->scratch.n_max, s->p.n_batch, s->logits,
                     s->n_logits_cap);
    st = kn_row_end(&row, result);
    if (st == KILN_ERR_CANCELLED) kn_error(st, "generation cancelled by the caller");
    if (st) fail(s, st);
    if (row.res.error == row.err) { /* the row's own message (a stuck grammar) outlives the row */
        memcpy(s->err, row.err, sizeof row.err);
        if (result) result->error = s->err;
    }
    return st;
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
        return fail_before(
            s, kn_error(KILN_ERR_CONTEXT_FULL, "the prompt has %zu tokens; the context holds %d", n, s->p.n_ctx),
            result);
    if (st) return fail_before(s, st, result);
    if (n == 0) {
        int32_t bos = kn_tok_bos(s->model->tok);
        if (bos >= 0) s->prompt_buf[n++] = bos;
    }
    return kiln_generate_tokens(s, s->prompt_buf, n, &p, result);
}

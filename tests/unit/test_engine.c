/*
 * test_engine.c - the public API on the real stories260K model: load errors, fingerprints,
 * evaluation bookkeeping, prefill chunking and batch-of-rows invariance, cancellation, prompt
 * logprobs.
 */
#include "harness.h"

#include "engine/session.h"
#include "kiln.h"
#include "model/forward.h"
#include "sample/logprobs.h"

#include <pthread.h>

static const char *model_path(void) { return kt_data("models/stories260K/stories260K.gguf"); }

static void test_load_errors(void) {
    kiln_model *m = (kiln_model *)1;
    CHECK(kiln_model_load("/nonexistent/x.gguf", NULL, &m) == KILN_ERR_IO);
    CHECK(m == NULL);
    CHECK(strstr(kiln_last_error(), "/nonexistent/x.gguf") != NULL);
    CHECK(kiln_model_load("/tmp", NULL, &m) == KILN_ERR_IO);
    CHECK(strstr(kiln_last_error(), "directory") != NULL);
    CHECK(kiln_model_load(NULL, NULL, &m) != KILN_OK);
    CHECK(kiln_model_load("x", NULL, NULL) == KILN_ERR_INVALID_ARG);
    for (int s = 0; s < KILN_STATUS_COUNT; s++) {
        CHECK(strlen(kiln_status_str((kiln_status)s)) > 0);
        for (int t = 0; t < s; t++)
            CHECK(strcmp(kiln_status_str((kiln_status)s), kiln_status_str((kiln_status)t)) != 0);
    }
    CHECK(strcmp(kiln_status_str((kiln_status)999), "unknown status") == 0);
}

static void test_model_info_and_fingerprint(void) {
    if (!kt_exists(model_path())) SKIP("no model");
    kiln_model *a = NULL, *b = NULL, *v = NULL;
    CHECK(kiln_model_load(model_path(), NULL, &a) == KILN_OK);
    kiln_model_params mp = kiln_model_default_params();
    mp.use_mmap = true;
    CHECK(kiln_model_load(model_path(), &mp, &b) == KILN_OK);
    CHECK(strcmp(kiln_model_arch(a), "llama") == 0);
    CHECK(kiln_model_n_vocab(a) == 512);
    CHECK(kiln_model_n_embd(a) == 64);
    CHECK(kiln_model_n_layer(a) == 5);
    CHECK(strlen(kiln_model_fingerprint(a)) == 64);
    CHECK(strcmp(kiln_model_fingerprint(a), kiln_model_fingerprint(b)) == 0);
    const char *r = kt_data("models/llama-2-tiny-random/llama-2-tiny-random.gguf");
    if (kt_exists(r)) {
        CHECK(kiln_model_load(r, NULL, &v) == KILN_OK);
        CHECK(strcmp(kiln_model_fingerprint(a), kiln_model_fingerprint(v)) != 0);
        CHECK(kiln_model_n_vocab(v) == 32000);
        kiln_model_free(v);
    }
    kiln_model_free(a);
    kiln_model_free(b);
}

static void test_eval_bookkeeping(void) {
    if (!kt_exists(model_path())) SKIP("no model");
    kiln_model *m = NULL;
    CHECK(kiln_model_load(model_path(), NULL, &m) == KILN_OK);
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 16;
    sp.n_batch = 4;
    sp.logits_all = true;
    kiln_session *s = NULL;
    CHECK(kiln_session_new(m, &sp, &s) == KILN_OK);
    kiln_token t[20];
    for (int i = 0; i < 20; i++) t[i] = 1 + i * 7;
    CHECK(kiln_session_eval(s, t, 10, false) == KILN_OK);
    CHECK(kiln_session_n_past(s) == 10);
    CHECK(kiln_session_eval(s, t, 7, false) == KILN_ERR_CONTEXT_FULL);
    CHECK(kiln_session_n_past(s) == 10);
    CHECK(strlen(kiln_session_last_error(s)) > 0);
    kiln_token bad = 512;
    CHECK(kiln_session_eval(s, &bad, 1, false) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_session_n_past(s) == 10);
    CHECK(kiln_session_eval(s, t, 5, true) == KILN_ERR_INVALID_ARG); /* more than n_batch */
    kiln_session_reset(s);
    CHECK(kiln_session_n_past(s) == 0);
    CHECK(kiln_session_logits(s, -1) == NULL);
    kiln_session_free(s);
    kiln_model_free(m);
}

/* Prefill of 12 tokens in one chunk, in chunks of 5, and token by token: bit-identical logits. */
static void test_chunking_bit_identical(void) {
    if (!kt_exists(model_path())) SKIP("no model");
    kiln_model *m = NULL;
    CHECK(kiln_model_load(model_path(), NULL, &m) == KILN_OK);
    const int n = 12, V = kiln_model_n_vocab(m);
    kiln_token t[12];
    for (int i = 0; i < n; i++) t[i] = (kiln_token)(1 + (i * 37) % 500);
    float ref[512], got[512];
    int batches[] = {12, 5, 1};
    for (int bi = 0; bi < 3; bi++) {
        kiln_session_params sp = kiln_session_default_params();
        sp.n_ctx = 32;
        sp.n_batch = batches[bi];
        sp.n_threads = bi == 1 ? 2 : 1;
        kiln_session *s = NULL;
        CHECK(kiln_session_new(m, &sp, &s) == KILN_OK);
        CHECK(kiln_session_eval(s, t, (size_t)n, false) == KILN_OK);
        memcpy(bi == 0 ? ref : got, kiln_session_logits(s, -1), sizeof(float) * (size_t)V);
        kiln_session_free(s);
        if (bi > 0) CHECKF(memcmp(ref, got, sizeof(float) * (size_t)V) == 0, "n_batch %d differs", batches[bi]);
    }
    kiln_model_free(m);
}

/* Two rows through one forward call give the same logits as each row alone. */
static void test_batch_rows_bit_identical(void) {
    if (!kt_exists(model_path())) SKIP("no model");
    kiln_model *m = NULL;
    CHECK(kiln_model_load(model_path(), NULL, &m) == KILN_OK);
    const int V = kiln_model_n_vocab(m);
    kiln_token a[6] = {1, 400, 261, 300, 99, 7}, b[3] = {1, 42, 17};
    kn_kv kva, kvb;
    kn_scratch sc;
    CHECK(kn_kv_init(&kva, KN_F16, m->hp.n_layer, 16, m->hp.n_head_kv * m->hp.head_dim) == KILN_OK);
    CHECK(kn_kv_init(&kvb, KN_F16, m->hp.n_layer, 16, m->hp.n_head_kv * m->hp.head_dim) == KILN_OK);
    CHECK(kn_scratch_init(&sc, m, 16, 16, 1) == KILN_OK);
    float *both = malloc(sizeof(float) * 2 * (size_t)V), *alone = malloc(sizeof(float) * (size_t)V);
    kn_batch_row rows[2] = {{&kva, a, 6, 5}, {&kvb, b, 3, 2}};
    kn_forward(m, &sc, rows, 2, both, 2);
    CHECK(kva.n_past == 6 && kvb.n_past == 3);
    kva.n_past = 0;
    kn_batch_row ra = {&kva, a, 6, 5};
    kn_forward(m, &sc, &ra, 1, alone, 1);
    int same_a = memcmp(alone, both, sizeof(float) * (size_t)V) == 0;
    kvb.n_past = 0;
    kn_batch_row rb = {&kvb, b, 3, 2};
    kn_forward(m, &sc, &rb, 1, alone, 1);
    int same_b = memcmp(alone, both + V, sizeof(float) * (size_t)V) == 0;
    free(both);
    free(alone);
    kn_scratch_free(&sc);
    kn_kv_free(&kva);
    kn_kv_free(&kvb);
    kiln_model_free(m);
    CHECK(same_a);
    CHECK(same_b);
}

static int cancel_after_3(const kiln_token_event *ev, void *user) {
    (void)ev;
    return ++*(int *)user >= 3;
}

static void test_cancel_and_limits(void) {
    if (!kt_exists(model_path())) SKIP("no model");
    kiln_model *m = NULL;
    kiln_session *s = NULL;
    CHECK(kiln_model_load(model_path(), NULL, &m) == KILN_OK);
    CHECK(kiln_session_new(m, NULL, &s) == KILN_OK);
    kiln_generate_params gp = kiln_generate_default_params();
    int n = 0;
    gp.on_token = cancel_after_3;
    gp.user = &n;
    gp.ignore_eos = true;
    kiln_generate_result r;
    CHECK(kiln_generate(s, "Once", &gp, &r) == KILN_ERR_CANCELLED);
    CHECK(r.stop == KILN_STOP_CANCELLED);
    CHECK(r.n_generated == 3);
    CHECK(strstr(r.error, "cancelled by its token callback") != NULL);
    gp.on_token = NULL;
    gp.max_tokens = 7;
    gp.sampling.temperature = 0;
    CHECK(kiln_generate(s, "Once", &gp, &r) == KILN_OK);
    CHECK(r.stop == KILN_STOP_LENGTH && r.n_generated == 7);
    CHECK(strcmp(r.error, "") == 0);
    gp.sampling.temperature = NAN;
    CHECK(kiln_generate(s, "Once", &gp, &r) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_session_last_error(s), "temperature") != NULL);
    CHECK(strstr(r.error, "temperature") != NULL);
    kiln_session_free(s);
    /* a context of 8 fills up: generation stops with KILN_STOP_CONTEXT */
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 8;
    CHECK(kiln_session_new(m, &sp, &s) == KILN_OK);
    gp.sampling.temperature = 0;
    gp.max_tokens = -1;
    CHECK(kiln_generate(s, "Once", &gp, &r) == KILN_OK);
    CHECK(r.stop == KILN_STOP_CONTEXT);
    kiln_session_free(s);
    kiln_model_free(m);
}

/* A failed call on the shared model is recorded on the model: the message survives later successful
 * calls on the thread (which clear kiln_last_error) and is readable from another thread. */
static void *read_model_error(void *m) { return (void *)kiln_model_last_error(m); }

static void test_model_last_error(void) {
    if (!kt_exists(model_path())) SKIP("no model");
    kiln_model *m = NULL;
    CHECK(kiln_model_load(model_path(), NULL, &m) == KILN_OK);
    CHECK(strcmp(kiln_model_last_error(m), "") == 0);
    char buf[8];
    size_t n = 0;
    CHECK(kiln_token_piece(m, 4096, false, buf, sizeof buf, &n) == KILN_ERR_INVALID_ARG);
    CHECKF(strstr(kiln_model_last_error(m), "outside the vocabulary") != NULL, "%s", kiln_model_last_error(m));
    kiln_token toks[64];
    CHECK(kiln_tokenize(m, "Once", 4, true, false, toks, 64, &n) == KILN_OK);
    CHECK(strcmp(kiln_last_error(), "") == 0);
    CHECK(strstr(kiln_model_last_error(m), "outside the vocabulary") != NULL);
    CHECK(kiln_tokenize(m, "Once upon a time", 16, true, false, toks, 1, &n) == KILN_ERR_BUFFER_SMALL);
    CHECK(strstr(kiln_model_last_error(m), "do not fit") != NULL || strstr(kiln_model_last_error(m), "buffer") != NULL);
    char *out = NULL;
    CHECK(kiln_chat_apply(m, "{\"messages\": 3}", 15, &out, NULL) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_model_last_error(m), "messages") != NULL);
    pthread_t th;
    void *seen = NULL;
    CHECK(pthread_create(&th, NULL, read_model_error, m) == 0);
    pthread_join(th, &seen);
    CHECK(seen && strstr(seen, "messages") != NULL);
    CHECK(kiln_tokenize_chat(m, "x", 1, toks, 0, &n) == KILN_ERR_BUFFER_SMALL);
    CHECK(strstr(kiln_model_last_error(m), "do not fit") != NULL);
    kiln_model_free(m);
}

/* A request's result says why it ended: cancelled while queued or running, with a message. */
static void test_request_error(void) {
    if (!kt_exists(model_path())) SKIP("no model");
    kiln_model *m = NULL;
    kiln_engine *e = NULL;
    CHECK(kiln_model_load(model_path(), NULL, &m) == KILN_OK);
    kiln_engine_params ep = kiln_engine_default_params();
    ep.max_rows = 1;
    ep.n_ctx = 64;
    ep.prompt_cache = 0;
    CHECK(kiln_engine_new(m, &ep, &e) == KILN_OK);
    kiln_generate_params gp = kiln_generate_default_params();
    gp.max_tokens = -1;
    gp.ignore_eos = true;
    kiln_token prompt[2] = {1, 100};
    kiln_request *a = NULL, *b = NULL;
    CHECK(kiln_engine_submit(e, prompt, 2, &gp, &a) == KILN_OK);
    CHECK(kiln_engine_submit(e, prompt, 2, &gp, &b) == KILN_OK); /* waits: one row */
    kiln_request_cancel(b);
    kiln_request_cancel(a);
    kiln_generate_result ra, rb;
    CHECK(kiln_request_wait(a, &ra) == KILN_ERR_CANCELLED);
    CHECK(kiln_request_wait(b, &rb) == KILN_ERR_CANCELLED);
    CHECKF(strstr(ra.error, "cancelled") != NULL, "%s", ra.error);
    CHECKF(strstr(rb.error, "cancelled") != NULL, "%s", rb.error);
    kiln_request_free(a);
    CHECK(kiln_engine_submit(e, prompt, 2, &gp, &a) == KILN_OK);
    kiln_request_free(b);
    kiln_request_cancel(a);
    CHECK(kiln_request_wait(a, &ra) == KILN_ERR_CANCELLED);
    kiln_request_free(a);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* What a request's token events said: the prompt events in order, then the generated tokens. */
#define PL_MAX 128
typedef struct {
    int n_prompt, n_gen;
    bool prompt_after_gen;
    kiln_token tok[PL_MAX], gen[8];
    float lp[PL_MAX];
    size_t n_top[PL_MAX];
    kiln_top_logprob top[PL_MAX][3];
} pl_log;

static int pl_collect(const kiln_token_event *ev, void *user) {
    pl_log *L = user;
    if (ev->prompt) {
        L->prompt_after_gen |= L->n_gen > 0;
        const int i = L->n_prompt++;
        if (i >= PL_MAX) return 0;
        L->tok[i] = ev->token;
        L->lp[i] = ev->logprob;
        L->n_top[i] = ev->n_top;
        memcpy(L->top[i], ev->top, KN_MIN(ev->n_top, (size_t)3) * sizeof *ev->top);
    } else if (ev->token >= 0 && L->n_gen < 8) {
        L->gen[L->n_gen++] = ev->token;
    }
    return 0;
}

/* Prompt logprobs through the engine (the prompt in chunks of at most KN_PROMPT_LOGITS tokens, beside
 * another row, after the same prompt went into the prefix cache; with contiguous and paged KV, and
 * under the n-gram speculative method) are kn_logprobs of the session's
 * all-position logits, bit for bit, token after token; the generated tokens are those of the same
 * request without them, and nothing was restored from the cache. */
static void test_prompt_logprobs(void) {
    if (!kt_exists(model_path())) SKIP("no model");
    kiln_model *m = NULL;
    CHECK(kiln_model_load(model_path(), NULL, &m) == KILN_OK);
    const int n = 90, V = kiln_model_n_vocab(m);
    kiln_token t[90], other[5] = {1, 42, 17, 300, 9};
    for (int i = 0; i < n; i++) t[i] = (kiln_token)(i == 0 ? 1 : 3 + (i * 37) % 500);
    /* the reference: one session pass with every position's logits */
    static float ref_lp[89];
    static kiln_top_logprob ref_top[89][3];
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 128;
    sp.n_batch = 128;
    sp.logits_all = true;
    kiln_session *s = NULL;
    CHECK(kiln_session_new(m, &sp, &s) == KILN_OK);
    CHECK(kiln_session_eval(s, t, (size_t)n, true) == KILN_OK);
    for (int i = 0; i + 1 < n; i++)
        ref_lp[i] = kn_logprobs(kn_kernels_get(KN_KERNELS_AUTO), kiln_session_logits(s, i), V, t[i + 1], 3, ref_top[i]);
    kiln_session_free(s);

    static pl_log plain, with, side;
    kiln_generate_params gp = kiln_generate_default_params();
    kiln_generate_result ra, rb;
    for (int mode = 0; mode < 3; mode++) { /* contiguous KV rows, paged, n-gram speculation */
        memset(&plain, 0, sizeof plain), memset(&with, 0, sizeof with), memset(&side, 0, sizeof side);
        kiln_engine_params ep = kiln_engine_default_params();
        ep.max_rows = 2;
        ep.n_ctx = 128;
        ep.kv_paging = mode == 1;
        if (mode == 2) ep.spec = KILN_SPEC_NGRAM;
        kiln_engine *e = NULL;
        CHECK(kiln_engine_new(m, &ep, &e) == KILN_OK);
        gp = kiln_generate_default_params();
        gp.sampling.temperature = 0;
        gp.max_tokens = 4;
        gp.ignore_eos = true;
        gp.on_token = pl_collect;
        gp.user = &plain;
        kiln_request *a = NULL, *b = NULL;
        CHECK(kiln_engine_submit(e, t, (size_t)n, &gp, &a) == KILN_OK); /* also fills the prefix cache */
        CHECK(kiln_request_wait(a, &ra) == KILN_OK);
        kiln_request_free(a);
        gp.user = &side;
        CHECK(kiln_engine_submit(e, other, 5, &gp, &b) == KILN_OK);
        gp.user = &with;
        gp.prompt_logprobs = 3;
        CHECK(kiln_engine_submit(e, t, (size_t)n, &gp, &a) == KILN_OK);
        CHECK(kiln_request_wait(a, &ra) == KILN_OK);
        CHECK(kiln_request_wait(b, &rb) == KILN_OK);
        kiln_request_free(a);
        kiln_request_free(b);
        CHECKF(plain.n_prompt == 0 && side.n_prompt == 0, "prompt events unasked: %d, %d", plain.n_prompt,
               side.n_prompt);
        CHECKF(with.n_prompt == n - 1, "%d prompt events for %d tokens", with.n_prompt, n);
        int same = 0;
        for (int i = 0; i + 1 < n && i < with.n_prompt; i++)
            same += with.tok[i] == t[i + 1] && memcmp(&with.lp[i], &ref_lp[i], sizeof(float)) == 0 &&
                    with.n_top[i] == 3 && memcmp(with.top[i], ref_top[i], sizeof ref_top[i]) == 0;
        CHECKF(same == n - 1, "%d of %d prompt events as the session's", same, n - 1);
        CHECK(!with.prompt_after_gen);
        CHECK(with.n_gen == 4 && memcmp(with.gen, plain.gen, sizeof plain.gen) == 0);
        CHECKF(ra.n_cached == 0, "%d tokens restored", ra.n_cached);
        gp.prompt_logprobs = KILN_MAX_TOP_LOGPROBS + 1;
        CHECK(kiln_engine_submit(e, t, (size_t)n, &gp, &a) == KILN_ERR_INVALID_ARG);
        kiln_engine_free(e);
    }
    /* a session (one logits row: the prompt advances a token a step) gives the same events */
    static pl_log sess;
    gp.prompt_logprobs = 3;
    gp.user = &sess;
    sp.logits_all = false;
    CHECK(kiln_session_new(m, &sp, &s) == KILN_OK);
    CHECK(kiln_generate_tokens(s, t, (size_t)n, &gp, &ra) == KILN_OK);
    kiln_session_free(s);
    CHECK(sess.n_prompt == n - 1 && memcmp(sess.lp, with.lp, sizeof(float) * (size_t)(n - 1)) == 0);
    CHECK(sess.n_gen == 4 && memcmp(sess.gen, plain.gen, sizeof plain.gen) == 0);
    kiln_model_free(m);
}

int main(void) {
    RUN(test_load_errors);
    RUN(test_model_info_and_fingerprint);
    RUN(test_eval_bookkeeping);
    RUN(test_chunking_bit_identical);
    RUN(test_batch_rows_bit_identical);
    RUN(test_cancel_and_limits);
    RUN(test_model_last_error);
    RUN(test_request_error);
    RUN(test_prompt_logprobs);
    return kt_summary();
}

/*
 * test_batch.c - the batching engine's invariants: greedy tokens of different prompts are
 * bit-identical whether each runs alone (a session), all start together, or they join at
 * staggered steps, at row caps 1, 2, 4 and 8; seeded sampling gives the same text alone and in a
 * batch; cancelling one row leaves the others unchanged; the queue limit, bad requests and
 * shutdown behave as documented. Runs on stories260K and on generated quantized models.
 */
#include "harness.h"

#include "kiln.h"

#include <pthread.h>
#include <stdatomic.h>

#define N_PROMPTS 6
#define MAX_GEN   24

typedef struct out {
    kiln_token toks[256];
    int n;
    atomic_int done;
    kiln_status st;
    /* staggered start: when this output reaches `at` tokens, submit `next` */
    int at;
    struct job *next;
    int cancel_at; /* the callback cancels after this many tokens (0: never) */
} out;

typedef struct job {
    kiln_engine *e;
    kiln_token prompt[64];
    size_t n_prompt;
    kiln_generate_params gp;
    kiln_request *req;
    out o;
} job;

static void submit(job *j);

static int on_tok(const kiln_token_event *ev, void *user) {
    out *o = user;
    if (ev->token < 0) return 0;
    if (o->n < 256) o->toks[o->n++] = ev->token;
    if (o->next && o->n == o->at) submit(o->next);
    return o->cancel_at && o->n >= o->cancel_at;
}

static void on_done(kiln_status st, const kiln_generate_result *res, void *user) {
    out *o = user;
    o->st = st;
    atomic_store(&o->done, 1);
}

static void submit(job *j) {
    j->gp.on_token = on_tok;
    j->gp.on_done = on_done;
    j->gp.user = &j->o;
    kiln_status st = kiln_engine_submit(j->e, j->prompt, j->n_prompt, &j->gp, &j->req);
    if (st) {
        j->o.st = st;
        atomic_store(&j->o.done, 1);
    }
}

/* Six different prompts of different lengths (token ids derived from the vocabulary size). */
static void make_prompts(job *jobs, int V, kiln_token bos) {
    static const int lens[N_PROMPTS] = {1, 3, 7, 12, 30, 50};
    for (int p = 0; p < N_PROMPTS; p++) {
        memset(&jobs[p], 0, sizeof jobs[p]);
        jobs[p].n_prompt = (size_t)lens[p];
        for (int i = 0; i < lens[p]; i++) jobs[p].prompt[i] = (kiln_token)((p * 977 + i * 131 + 17) % V);
        if (bos >= 0) jobs[p].prompt[0] = bos;
        jobs[p].gp = kiln_generate_default_params();
        jobs[p].gp.max_tokens = MAX_GEN;
        jobs[p].gp.ignore_eos = true;
        jobs[p].gp.sampling.temperature = 0;
    }
}

/* Reference: each prompt alone through a session. */
static int run_alone(kiln_model *m, job *jobs) {
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 128;
    sp.n_threads = 2;
    kiln_session *s;
    if (kiln_session_new(m, &sp, &s)) return -1;
    for (int p = 0; p < N_PROMPTS; p++) {
        jobs[p].o.n = 0;
        kiln_generate_params gp = jobs[p].gp;
        gp.on_token = on_tok;
        gp.user = &jobs[p].o;
        if (kiln_generate_tokens(s, jobs[p].prompt, jobs[p].n_prompt, &gp, NULL)) return -1;
    }
    kiln_session_free(s);
    return 0;
}

static kiln_engine *new_engine(kiln_model *m, int rows, int chunk) {
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 128;
    ep.max_rows = rows;
    ep.prefill_chunk = chunk;
    ep.n_threads = 2;
    kiln_engine *e = NULL;
    return kiln_engine_new(m, &ep, &e) == KILN_OK ? e : NULL;
}

static void wait_all(job *jobs, int n) {
    for (int p = 0; p < n; p++) {
        while (!atomic_load(&jobs[p].o.done)) usleep(1000);
        if (jobs[p].req) kiln_request_free(jobs[p].req);
        jobs[p].req = NULL;
    }
}

/* Checks one model: alone vs together vs staggered at caps 1, 2, 4, 8. */
static void check_model(const char *path) {
    kiln_model *m;
    CHECKF(kiln_model_load(path, NULL, &m) == KILN_OK, "%s", kiln_last_error());
    const int V = kiln_model_n_vocab(m);
    job ref[N_PROMPTS], jobs[N_PROMPTS];
    make_prompts(ref, V, kiln_token_bos(m));
    CHECK(run_alone(m, ref) == 0);
    for (int p = 0; p < N_PROMPTS; p++) CHECK(ref[p].o.n == MAX_GEN);
    static const int caps[] = {1, 2, 4, 8};
    for (int c = 0; c < 4; c++) {
        for (int mode = 0; mode < 2; mode++) {                      /* 0: all at once; 1: staggered joins */
            kiln_engine *e = new_engine(m, caps[c], mode ? 5 : 64); /* small chunks: prompts span steps */
            CHECK(e);
            make_prompts(jobs, V, kiln_token_bos(m));
            for (int p = 0; p < N_PROMPTS; p++) jobs[p].e = e;
            if (mode == 0) {
                for (int p = 0; p < N_PROMPTS; p++) submit(&jobs[p]);
            } else {
                for (int p = 0; p + 1 < N_PROMPTS; p++) {
                    jobs[p].o.at = 2 + p;
                    jobs[p].o.next = &jobs[p + 1];
                }
                submit(&jobs[0]);
            }
            wait_all(jobs, N_PROMPTS);
            kiln_engine_free(e);
            for (int p = 0; p < N_PROMPTS; p++) {
                CHECKF(jobs[p].o.st == KILN_OK, "cap %d mode %d prompt %d: status %d", caps[c], mode, p, jobs[p].o.st);
                CHECKF(jobs[p].o.n == MAX_GEN &&
                           memcmp(jobs[p].o.toks, ref[p].o.toks, sizeof(kiln_token) * MAX_GEN) == 0,
                       "cap %d mode %d prompt %d: tokens differ from the lone run", caps[c], mode, p);
            }
        }
    }
    kiln_model_free(m);
}

static void test_greedy_invariance_stories(void) {
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path)) SKIP("no model");
    check_model(path);
}

static const char *generate(const char *type) {
    static char path[512], gen[512];
    const char *b = getenv("BUILD");
    snprintf(gen, sizeof gen, "%s/kiln-gen", b && *b ? b : "build");
    snprintf(path, sizeof path, "%s/tiny-llama-%s.gguf", kt_tmpdir(), type);
    if (kt_exists(path)) return path;
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "%s --preset tiny-llama --type %s --seed 3 -o %s >/dev/null 2>&1", gen, type, path);
    return system(cmd) == 0 ? path : NULL;
}

static void test_greedy_invariance_quantized(void) {
    static const char *types[] = {"Q4_0", "Q8_0", "Q4_K", "F16"};
    for (size_t i = 0; i < 4; i++) {
        const char *path = generate(types[i]);
        if (!path) SKIP("kiln-gen unavailable");
        check_model(path);
        if (kt_cur_failed) {
            printf("  (type %s)\n", types[i]);
            return;
        }
    }
}

/* Seeded sampling: the same text alone and in a batch of different requests. */
static void test_seeded_sampling(void) {
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path)) SKIP("no model");
    kiln_model *m;
    CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
    job ref[N_PROMPTS], jobs[N_PROMPTS];
    make_prompts(ref, kiln_model_n_vocab(m), kiln_token_bos(m));
    for (int p = 0; p < N_PROMPTS; p++) {
        ref[p].gp.sampling.temperature = 1.0f;
        ref[p].gp.sampling.seed = 1000 + (uint64_t)p;
    }
    CHECK(run_alone(m, ref) == 0);
    kiln_engine *e = new_engine(m, 4, 16);
    CHECK(e);
    make_prompts(jobs, kiln_model_n_vocab(m), kiln_token_bos(m));
    for (int p = 0; p < N_PROMPTS; p++) {
        jobs[p].e = e;
        jobs[p].gp.sampling.temperature = 1.0f;
        jobs[p].gp.sampling.seed = 1000 + (uint64_t)p;
        submit(&jobs[p]);
    }
    wait_all(jobs, N_PROMPTS);
    kiln_engine_free(e);
    for (int p = 0; p < N_PROMPTS; p++)
        CHECKF(jobs[p].o.n == ref[p].o.n &&
                   memcmp(jobs[p].o.toks, ref[p].o.toks, sizeof(kiln_token) * (size_t)ref[p].o.n) == 0,
               "prompt %d differs", p);
    kiln_model_free(m);
}

/* Cancelling one row (by callback, and by kiln_request_cancel) leaves the others unchanged. */
static void test_cancel_one(void) {
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path)) SKIP("no model");
    kiln_model *m;
    CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
    job ref[N_PROMPTS], jobs[N_PROMPTS];
    make_prompts(ref, kiln_model_n_vocab(m), kiln_token_bos(m));
    CHECK(run_alone(m, ref) == 0);
    kiln_engine *e = new_engine(m, 8, 64);
    CHECK(e);
    make_prompts(jobs, kiln_model_n_vocab(m), kiln_token_bos(m));
    jobs[2].o.cancel_at = 3;
    jobs[4].gp.max_tokens = 100000; /* runs until cancelled from outside */
    for (int p = 0; p < N_PROMPTS; p++) {
        jobs[p].e = e;
        submit(&jobs[p]);
    }
    while (jobs[4].o.n < 40) usleep(1000);
    kiln_request_cancel(jobs[4].req);
    kiln_generate_result r4;
    CHECK(kiln_request_wait(jobs[4].req, &r4) == KILN_ERR_CANCELLED);
    CHECK(r4.stop == KILN_STOP_CANCELLED);
    wait_all(jobs, N_PROMPTS);
    CHECK(jobs[2].o.st == KILN_ERR_CANCELLED && jobs[2].o.n == 3);
    for (int p = 0; p < N_PROMPTS; p++) {
        if (p == 2 || p == 4) continue;
        CHECKF(jobs[p].o.st == KILN_OK && memcmp(jobs[p].o.toks, ref[p].o.toks, sizeof(kiln_token) * MAX_GEN) == 0,
               "prompt %d changed by another row's cancellation", p);
    }
    kiln_engine_stats st;
    kiln_engine_get_stats(e, &st);
    CHECK(st.active == 0 && st.queued == 0 && st.steps > 0 && st.kv_bytes > 0 && st.kv_bytes_used == 0);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* Bad requests are refused at submit; a full queue says BUSY; shutdown cancels what waits; a
 * request handle may outlive its engine. */
static void test_limits_and_shutdown(void) {
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path)) SKIP("no model");
    kiln_model *m;
    CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
    kiln_engine_params ep = kiln_engine_default_params();
    ep.n_ctx = 64;
    ep.max_rows = 1;
    ep.max_queue = 2;
    kiln_engine *e;
    CHECK(kiln_engine_new(m, &ep, &e) == KILN_OK);
    kiln_request *r = NULL;
    kiln_token long_prompt[64] = {0}, bad[2] = {1, 99999};
    kiln_generate_params gp = kiln_generate_default_params();
    CHECK(kiln_engine_submit(e, long_prompt, 64, &gp, &r) == KILN_ERR_CONTEXT_FULL && !r);
    CHECK(kiln_engine_submit(e, bad, 2, &gp, &r) == KILN_ERR_INVALID_ARG && !r);
    CHECK(kiln_engine_submit(e, bad, 0, &gp, &r) == KILN_ERR_INVALID_ARG);
    gp.sampling.min_p = 7;
    CHECK(kiln_engine_submit(e, bad, 1, &gp, &r) == KILN_ERR_INVALID_ARG);
    gp = kiln_generate_default_params();
    gp.ignore_eos = true;
    gp.max_tokens = 1 << 20; /* runs to the end of the context */
    job jobs[4];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 4; i++) {
        jobs[i].e = e;
        jobs[i].n_prompt = 1;
        jobs[i].prompt[0] = 1;
        jobs[i].gp = gp;
        jobs[i].o.cancel_at = 0;
    }
    jobs[0].gp.max_tokens = 1 << 20;
    submit(&jobs[0]);
    while (jobs[0].o.n < 1 && !atomic_load(&jobs[0].o.done)) usleep(500);
    submit(&jobs[1]);
    submit(&jobs[2]);
    submit(&jobs[3]); /* the queue holds 2 */
    CHECKF(jobs[3].o.st == KILN_ERR_BUSY || atomic_load(&jobs[0].o.done), "status %d", jobs[3].o.st);
    kiln_engine_shutdown(e, 0);
    for (int i = 0; i < 3; i++) CHECK(atomic_load(&jobs[i].o.done));
    CHECK(jobs[1].o.st == KILN_ERR_CANCELLED || jobs[1].o.st == KILN_OK);
    kiln_request *after = NULL;
    kiln_generate_params dp = kiln_generate_default_params();
    CHECK(kiln_engine_submit(e, bad, 1, &dp, &after) == KILN_ERR_BUSY);
    kiln_engine_free(e);
    for (int i = 0; i < 3; i++) kiln_request_free(jobs[i].req); /* handles outlive the engine */
    kiln_model_free(m);
}

int main(void) {
    RUN(test_greedy_invariance_stories);
    RUN(test_greedy_invariance_quantized);
    RUN(test_seeded_sampling);
    RUN(test_cancel_one);
    RUN(test_limits_and_shutdown);
    return kt_summary();
}

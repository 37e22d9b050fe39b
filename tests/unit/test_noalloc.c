/*
 * test_noalloc.c - the per-token loop allocates nothing: KV, activations and logits are allocated
 * when the session is made. The allocator is wrapped at link time (see the Makefile), and counting
 * runs from the first token callback to the end of the generation. The same wrapping makes
 * large aligned allocations fail on demand, so a request whose KV cannot be allocated is shown to
 * end with the library's message in its result.
 */
#include "harness.h"

#include "kiln.h"

#include <stddef.h>
#include <stdint.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void __real_free(void *p);

static int counting;
static long n_allocs;
static size_t fail_above = SIZE_MAX; /* aligned allocations larger than this fail */

void *__wrap_malloc(size_t n) {
    if (counting) n_allocs++;
    return __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t m) {
    if (counting) n_allocs++;
    return __real_calloc(n, m);
}
void *__wrap_realloc(void *p, size_t n) {
    if (counting) n_allocs++;
    return __real_realloc(p, n);
}
int __wrap_posix_memalign(void **p, size_t a, size_t n) {
    if (counting) n_allocs++;
    if (n > fail_above) return 12; /* ENOMEM */
    return __real_posix_memalign(p, a, n);
}
void __wrap_free(void *p) { __real_free(p); }

static int n_tokens;

static int on_token(const kiln_token_event *ev, void *user) {
    (void)ev;
    (void)user;
    n_tokens++;
    counting = 1; /* from the first token on */
    return 0;
}

static void run_one(int threads, float temp) {
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path)) SKIP("no %s", path);
    kiln_model *m = NULL;
    CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
    kiln_session_params sp = kiln_session_default_params();
    sp.n_threads = threads;
    kiln_session *s = NULL;
    CHECK(kiln_session_new(m, &sp, &s) == KILN_OK);
    kiln_generate_params gp = kiln_generate_default_params();
    gp.max_tokens = 100;
    gp.ignore_eos = true;
    gp.sampling.temperature = temp;
    gp.sampling.seed = 3;
    gp.sampling.repeat_penalty = 1.1f;
    gp.on_token = on_token;
    n_allocs = 0;
    n_tokens = 0;
    kiln_status st = kiln_generate(s, "Once upon a time", &gp, NULL);
    counting = 0;
    kiln_session_free(s);
    kiln_model_free(m);
    CHECK(st == KILN_OK);
    CHECK(n_tokens == 100);
    CHECKF(n_allocs == 0, "%ld allocations during the token loop", n_allocs);
}

static void test_no_alloc_greedy_1thread(void) { run_one(1, 0.0f); }
static void test_no_alloc_sampled_2threads(void) { run_one(2, 0.9f); }

/* The engine allocates a row's KV when the row is first used: when that fails, the request ends
 * with KILN_ERR_NOMEM and its result names the KV cache, and the engine goes on serving. */
static void request_error_names_kv(bool paging) {
    const char *path = kt_data("models/stories260K/stories260K.gguf");
    if (!kt_exists(path)) SKIP("no %s", path);
    kiln_model *m = NULL;
    kiln_engine *e = NULL;
    CHECK(kiln_model_load(path, NULL, &m) == KILN_OK);
    kiln_engine_params ep = kiln_engine_default_params();
    ep.max_rows = 1;
    ep.n_ctx = 256;
    ep.prompt_cache = 0;
    ep.kv_paging = paging;
    CHECK(kiln_engine_new(m, &ep, &e) == KILN_OK);
    kiln_generate_params gp = kiln_generate_default_params();
    gp.max_tokens = 4;
    gp.sampling.temperature = 0;
    kiln_token prompt[2] = {1, 100};
    kiln_request *r = NULL;
    kiln_generate_result res;
    /* a KV half of 256 positions is larger than 32 KiB, a block of 16 positions (10 KiB) larger than 8;
     * scratch is already allocated */
    fail_above = paging ? 8 * 1024 : 32 * 1024;
    CHECK(kiln_engine_submit(e, prompt, 2, &gp, &r) == KILN_OK);
    kiln_status st = kiln_request_wait(r, &res);
    fail_above = SIZE_MAX;
    CHECKF(st == KILN_ERR_NOMEM, "status %s", kiln_status_str(st));
    CHECKF(strstr(res.error, "KV cache") != NULL, "error '%s'", res.error);
    kiln_request_free(r);
    CHECK(kiln_engine_submit(e, prompt, 2, &gp, &r) == KILN_OK); /* the next request runs */
    CHECK(kiln_request_wait(r, &res) == KILN_OK);
    CHECK(res.n_generated == 4 && strcmp(res.error, "") == 0);
    kiln_request_free(r);
    kiln_engine_free(e);
    kiln_model_free(m);
}

static void test_request_error_names_kv(void) { request_error_names_kv(false); }
static void test_request_error_names_kv_paged(void) { request_error_names_kv(true); }

int main(void) {
    RUN(test_no_alloc_greedy_1thread);
    RUN(test_no_alloc_sampled_2threads);
    RUN(test_request_error_names_kv);
    RUN(test_request_error_names_kv_paged);
    return kt_summary();
}

/*
 * test_noalloc.c - the per-token loop allocates nothing: KV, activations and logits are allocated
 * when the session is made. The allocator is wrapped at link time (see the Makefile), and counting
 * runs from the first token callback to the end of the generation.
 */
#include "harness.h"

#include "kiln.h"

#include <stddef.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void __real_free(void *p);

static int counting;
static long n_allocs;

void *__wrap_malloc(size_t n) { if (counting) n_allocs++; return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { if (counting) n_allocs++; return __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { if (counting) n_allocs++; return __real_realloc(p, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { if (counting) n_allocs++; return __real_posix_memalign(p, a, n); }
void __wrap_free(void *p) { __real_free(p); }

static int n_tokens;

static int on_token(const kiln_token_event *ev, void *user) {
    (void)ev;
    (void)user;
    n_tokens++;
    counting = 1;   /* from the first token on */
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

int main(void) {
    RUN(test_no_alloc_greedy_1thread);
    RUN(test_no_alloc_sampled_2threads);
    return kt_summary();
}

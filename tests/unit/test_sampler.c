/*
 * test_sampler.c - the sampler chain: greedy ties and NaN, penalties, logit bias, top-k/top-p/min-p
 * truncation, seeded determinism, and parameter validation.
 */
#include "harness.h"

#include "sample/sampler.h"

#define V 8

static kn_sampler make(kiln_sampler_params p) {
    kn_sampler s;
    kiln_status st = kn_sampler_init(&s, &p, V);
    if (st) printf("  sampler init failed: %s\n", kn_error_msg());
    return s;
}

static void test_greedy_lowest_id_on_ties(void) {
    float l[V] = {0, 3, 1, 3, 2, 3, -1, 0};
    CHECK(kn_argmax(l, V) == 1);
    float n[V] = {NAN, NAN, 1, NAN, 1, 0, 0, 0};
    CHECK(kn_argmax(n, V) == 2);
    float inf[V] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK(kn_argmax(inf, V) == 0);
    kiln_sampler_params p = kiln_sampler_default_params();
    p.temperature = 0;
    kn_sampler s = make(p);
    CHECK(kn_sampler_sample(&s, l) == 1);
    kn_sampler_free(&s);
}

/* Greedy without penalties or bias takes the logits as they are (no copy); with a bias of 0 it takes
 * the adjusted copy. Both must pick the same token on logits with NaN, -inf, +inf, ties and signed
 * zeros, including all NaN and NaN-or-(-inf) rows (token 0). */
static void test_greedy_fast_path_matches_adjusted(void) {
    kiln_sampler_params p = kiln_sampler_default_params();
    p.temperature = 0;
    kn_sampler fast = make(p);
    kiln_logit_bias zero = {7, 0.0f};
    p.logit_bias = &zero;
    p.n_logit_bias = 1;
    kn_sampler slow = make(p);
    const float vals[] = {NAN, -INFINITY, INFINITY, 0.0f, -0.0f, 1.0f, -1.0f, 2.5f};
    uint32_t r = 12345;
    int same = 0;
    for (int it = 0; it < 4000; it++) {
        float l[V];
        for (int i = 0; i < V; i++) {
            r = r * 1664525u + 1013904223u;
            const uint32_t k = (r >> 24) % (it < 1000 ? 2 : 8); /* the first 1000: NaN and -inf only */
            l[i] = vals[k];
        }
        same += kn_sampler_sample(&fast, l) == kn_sampler_sample(&slow, l);
    }
    CHECK(same == 4000);
    float nan[V] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    CHECK(kn_sampler_sample(&fast, nan) == 0);
    float mix[V] = {NAN, -INFINITY, NAN, -INFINITY, -INFINITY, NAN, -INFINITY, -INFINITY};
    CHECK(kn_sampler_sample(&fast, mix) == 0);
    float n[V] = {NAN, NAN, 1, NAN, 1, 0, 0, 0};
    CHECK(kn_sampler_sample(&fast, n) == 2);
    kn_sampler_free(&fast);
    kn_sampler_free(&slow);
}

static void test_penalties(void) {
    kiln_sampler_params p = kiln_sampler_default_params();
    p.temperature = 0;
    p.repeat_penalty = 2.0f;
    kn_sampler s = make(p);
    float l[V] = {0, 4, 3, 0, 0, 0, 0, 0};
    kn_sampler_accept(&s, 1);
    CHECK(kn_sampler_sample(&s, l) == 2); /* 4 / 2 = 2 < 3 */
    kn_sampler_free(&s);

    p.repeat_penalty = 1.0f;
    p.frequency_penalty = 0.6f;
    p.penalty_last_n = 3;
    s = make(p);
    kn_sampler_accept(&s, 1);
    kn_sampler_accept(&s, 1);
    CHECK(kn_sampler_sample(&s, l) == 2); /* 4 - 2*0.6 = 2.8 < 3 */
    kn_sampler_accept(&s, 5);
    kn_sampler_accept(&s, 5);
    kn_sampler_accept(&s, 5); /* token 1 has left the 3-token window */
    CHECK(kn_sampler_sample(&s, l) == 1);
    kn_sampler_free(&s);

    p.frequency_penalty = 0;
    p.presence_penalty = 1.5f;
    p.penalty_last_n = 64;
    s = make(p);
    kn_sampler_accept(&s, 1);
    kn_sampler_accept(&s, 1);
    CHECK(kn_sampler_sample(&s, l) == 2); /* 4 - 1.5 = 2.5 < 3, once however often seen */
    kn_sampler_free(&s);
}

static void test_logit_bias(void) {
    kiln_sampler_params p = kiln_sampler_default_params();
    p.temperature = 0;
    kiln_logit_bias b[2] = {{1, -INFINITY}, {6, 10.0f}};
    p.logit_bias = b;
    p.n_logit_bias = 2;
    kn_sampler s = make(p);
    float l[V] = {0, 4, 3, 0, 0, 0, 0, 0};
    CHECK(kn_sampler_sample(&s, l) == 6);
    kn_sampler_free(&s);
    /* a banned token is never drawn when sampling either */
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0;
    b[1].bias = 0;
    p.seed = 7;
    s = make(p);
    for (int i = 0; i < 500; i++) CHECK(kn_sampler_sample(&s, l) != 1);
    kn_sampler_free(&s);
}

static void test_truncation(void) {
    float l[V] = {5, 4, 3, 2, 1, 0, -1, -2};
    kiln_sampler_params p = kiln_sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 2;
    p.top_p = 1.0f;
    p.min_p = 0;
    p.seed = 1;
    kn_sampler s = make(p);
    int seen[V] = {0};
    for (int i = 0; i < 2000; i++) seen[kn_sampler_sample(&s, l)]++;
    CHECK(seen[0] > 0 && seen[1] > 0);
    for (int i = 2; i < V; i++) CHECK(seen[i] == 0);
    CHECKF(seen[0] > seen[1] * 2 && seen[0] < seen[1] * 4, "e^1 ratio, got %d/%d", seen[0], seen[1]);
    kn_sampler_free(&s);

    /* top-p 0.5 over probs (0.63, 0.23, ...) keeps only the first */
    p.top_k = 0;
    p.top_p = 0.5f;
    s = make(p);
    for (int i = 0; i < 200; i++) CHECK(kn_sampler_sample(&s, l) == 0);
    kn_sampler_free(&s);

    /* min-p 0.3: tokens with p >= 0.3 * p0 = e^-1.2 ratio -> ids 0 and 1 (e^-1 = 0.37) */
    p.top_p = 1.0f;
    p.min_p = 0.3f;
    s = make(p);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 2000; i++) seen[kn_sampler_sample(&s, l)]++;
    CHECK(seen[0] > 0 && seen[1] > 0);
    for (int i = 2; i < V; i++) CHECK(seen[i] == 0);
    kn_sampler_free(&s);
}

static void test_seed_determinism(void) {
    float l[V] = {1, 1, 1, 1, 1, 1, 1, 1};
    kiln_sampler_params p = kiln_sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.min_p = 0;
    p.seed = 42;
    kn_sampler a = make(p), b = make(p);
    p.seed = 43;
    kn_sampler c = make(p);
    int same = 1, differs = 0;
    for (int i = 0; i < 100; i++) {
        int x = kn_sampler_sample(&a, l), y = kn_sampler_sample(&b, l), z = kn_sampler_sample(&c, l);
        if (x != y) same = 0;
        if (x != z) differs = 1;
    }
    kn_sampler_free(&a);
    kn_sampler_free(&b);
    kn_sampler_free(&c);
    CHECK(same);
    CHECK(differs);
}

static void test_validation(void) {
    kn_sampler s;
    kiln_sampler_params p = kiln_sampler_default_params();
    p.temperature = NAN;
    CHECK(kn_sampler_init(&s, &p, V) == KILN_ERR_INVALID_ARG);
    p = kiln_sampler_default_params();
    p.min_p = 2;
    CHECK(kn_sampler_init(&s, &p, V) == KILN_ERR_INVALID_ARG);
    p = kiln_sampler_default_params();
    kiln_logit_bias b = {V, 1.0f};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    CHECK(kn_sampler_init(&s, &p, V) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kn_error_msg(), "logit_bias") != NULL);
}

int main(void) {
    RUN(test_greedy_lowest_id_on_ties);
    RUN(test_greedy_fast_path_matches_adjusted);
    RUN(test_penalties);
    RUN(test_logit_bias);
    RUN(test_truncation);
    RUN(test_seed_determinism);
    RUN(test_validation);
    return kt_summary();
}

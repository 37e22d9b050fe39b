/*
 * test_sampler.c - the sampler chain: greedy ties and NaN, penalties, logit bias, top-k/top-p/min-p
 * truncation, seeded determinism, and parameter validation; the candidate sort against qsort, and
 * sampling over whole vocabularies (top-k off, where only a prefix is sorted) against a plain
 * reference that sorts everything.
 */
#include "harness.h"

#include "sample/sampler.h"
#include "tensor/kernels.h"

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

    /* a subnormal temperature (its inverse overflows) samples greedily, top-k on or off */
    p.temperature = 1e-45f;
    for (int k = 0; k < 2; k++) {
        p.top_k = k ? 3 : 0;
        s = make(p);
        for (int i = 0; i < 20; i++) CHECK(kn_sampler_sample(&s, l) == 0);
        kn_sampler_free(&s);
    }
    p.temperature = 1.0f;
    p.top_k = 0;

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

static int cmp_ref(const void *a, const void *b) {
    const kn_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

static uint32_t lcg(uint32_t *r) {
    *r = *r * 1664525u + 1013904223u;
    return *r >> 8;
}

/* A normal variate (Box-Muller) from the test's generator. */
static float gauss(uint32_t *r) {
    const double u1 = (lcg(r) + 1.0) / 16777218.0, u2 = (lcg(r) + 1.0) / 16777218.0;
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Logits of one of several shapes: flat, peaked, heavy ties, -inf holes, signed zeros, huge range,
 * few candidates. */
static void fill_logits(float *l, int n, int shape, uint32_t *r) {
    for (int i = 0; i < n; i++) {
        const float g = gauss(r);
        switch (shape) {
            case 0: l[i] = 0.1f * g; break;
            case 1: l[i] = 3.0f * g; break;
            case 2: l[i] = 12.0f * g; break;
            case 3: l[i] = (float)(int)(2 * g) * 0.5f; break; /* few distinct values: ties */
            case 4: l[i] = lcg(r) % 3 == 0 ? -INFINITY : 4.0f * g; break;
            case 5: l[i] = lcg(r) % 2 ? 0.0f : -0.0f; break;
            case 6: l[i] = ldexpf(g, (int)(lcg(r) % 60) - 30); break;
            default: l[i] = lcg(r) % 128 ? -INFINITY : 2.0f * g; break; /* a grammar's mask: few candidates */
        }
    }
}

/* kn_cand_sort equals qsort with the sampler's order (ids ascending on ties, -0.0 == +0.0) on short
 * arrays (qsort inside), long ones (the radix passes) and keys that leave digits constant. */
static void test_cand_sort(void) {
    enum { N = 40000 };
    kn_cand *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *tmp = malloc(N * sizeof *tmp);
    float *l = malloc(N * sizeof *l);
    CHECK(a && b && tmp && l);
    const int sizes[] = {1, 7, 255, 256, 1000, N};
    uint32_t r = 99;
    int bad = 0;
    for (int si = 0; si < 6; si++)
        for (int shape = 0; shape < 7; shape++) {
            const int n = sizes[si];
            fill_logits(l, n, shape, &r);
            if (shape == 6 && n > 2) l[1] = INFINITY, l[2] = -INFINITY;
            for (int i = 0; i < n; i++) a[i] = b[i] = (kn_cand){l[i], 0.0f, i};
            kn_cand_sort(a, (size_t)n, tmp);
            qsort(b, (size_t)n, sizeof *b, cmp_ref);
            for (int i = 0; i < n; i++) bad += a[i].id != b[i].id;
        }
    free(a);
    free(b);
    free(tmp);
    free(l);
    CHECKF(bad == 0, "%d misplaced", bad);
}

/* The sampler's rules written plainly (no penalties or bias): every finite candidate sorted; top-k
 * off: e = kn_expf_ref((logit - max) * (1 / temperature)) and their sum as kn_sumexp_ref gives them
 * over the candidates' logits in id order, p = (float)(e / sum), and with top-p and min-p off the draw
 * walks the exponentials in id order; top-k on: the k best, expf and the sum in sorted order. e and
 * cl are scratch of n_vocab floats. */
static int32_t ref_sample(const kiln_sampler_params *p, const float *l, int n_vocab, kn_rng *rng, kn_cand *c, float *e,
                          float *cl) {
    int32_t n = 0;
    float mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (l[i] > -INFINITY) c[n++] = (kn_cand){l[i], 0.0f, i};
        mx = l[i] > mx ? l[i] : mx;
    }
    if (n == 0) return 0;
    if (p->top_k <= 0 || p->top_k >= n) {
        for (int32_t i = 0; i < n; i++) cl[i] = c[i].logit;
        const double sum = kn_sumexp_ref(cl, n, mx, 1.0f / p->temperature, e);
        if (p->top_p >= 1.0f && p->min_p <= 0.0f) {
            double acc = 0;
            const double u = kn_rng_uniform(rng) * sum;
            for (int32_t i = 0; i < n; i++)
                if (u < (acc += e[i])) return c[i].id;
            return c[n - 1].id;
        }
        for (int32_t i = 0; i < n; i++) c[i].p = (float)(e[i] / sum);
        qsort(c, (size_t)n, sizeof *c, cmp_ref);
    } else {
        qsort(c, (size_t)n, sizeof *c, cmp_ref);
        n = p->top_k;
        double sum = 0;
        for (int32_t i = 0; i < n; i++) sum += c[i].p = expf((c[i].logit - mx) / p->temperature);
        for (int32_t i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
    }
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (int32_t i = 0; i < n; i++)
            if ((cum += c[i].p) >= p->top_p) {
                n = i + 1;
                break;
            }
    }
    if (p->min_p > 0.0f) {
        int32_t keep = 1;
        while (keep < n && c[keep].p >= p->min_p * c[0].p) keep++;
        n = keep;
    }
    double total = 0, acc = 0;
    for (int32_t i = 0; i < n; i++) total += c[i].p;
    const double u = kn_rng_uniform(rng) * total;
    for (int32_t i = 0; i < n; i++)
        if (u < (acc += c[i].p)) return c[i].id;
    return c[n - 1].id;
}

/* Whole-vocabulary sampling (top-k off or above the candidates), which sorts only what top-p and
 * min-p can keep, draws exactly what the plain reference draws, seed for seed, over vocabulary sizes,
 * logit shapes and settings; top-k on is checked the same way. */
static void test_wide_matches_reference(void) {
    enum { NV = 3000 };
    float *l = malloc(NV * sizeof *l);
    kn_cand *c = malloc(NV * sizeof *c);
    float *e = malloc(NV * sizeof *e), *cl = malloc(NV * sizeof *cl);
    CHECK(l && c && e && cl);
    const int vocabs[] = {40, 300, NV};
    const float temps[] = {0.5f, 1.0f, 1.7f}, top_ps[] = {0.5f, 0.95f, 0.999f, 1.0f}, min_ps[] = {0, 0.05f, 0.3f};
    const int top_ks[] = {0, 5, 1000000};
    uint32_t r = 7;
    int runs = 0, bad = 0;
    for (int vi = 0; vi < 3; vi++)
        for (int shape = 0; shape < 8; shape++) {
            const int nv = vocabs[vi];
            fill_logits(l, nv, shape, &r);
            for (int ki = 0; ki < 3; ki++)
                for (int ti = 0; ti < 3; ti++)
                    for (int pi = 0; pi < 4; pi++)
                        for (int mi = 0; mi < 3; mi++) {
                            kiln_sampler_params p = kiln_sampler_default_params();
                            p.top_k = top_ks[ki];
                            p.temperature = temps[ti];
                            p.top_p = top_ps[pi];
                            p.min_p = min_ps[mi];
                            p.penalty_last_n = 0;
                            p.seed = (uint64_t)runs + 1;
                            kn_sampler s;
                            CHECK(kn_sampler_init(&s, &p, nv) == KILN_OK);
                            kn_rng rng;
                            kn_rng_seed(&rng, p.seed);
                            for (int d = 0; d < 8; d++)
                                bad += kn_sampler_sample(&s, l) != ref_sample(&p, l, nv, &rng, c, e, cl);
                            kn_sampler_free(&s);
                            runs++;
                        }
        }
    free(l);
    free(c);
    free(e);
    free(cl);
    CHECKF(bad == 0, "%d of %d draws differ", bad, runs * 8);
}

int main(void) {
    RUN(test_greedy_lowest_id_on_ties);
    RUN(test_greedy_fast_path_matches_adjusted);
    RUN(test_penalties);
    RUN(test_logit_bias);
    RUN(test_truncation);
    RUN(test_seed_determinism);
    RUN(test_validation);
    RUN(test_cand_sort);
    RUN(test_wide_matches_reference);
    return kt_summary();
}

/*
 * sampler.c - the sampler chain (see sampler.h and kiln_sampler_params in kiln.h).
 */
#include "sample/sampler.h"

#include "tensor/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

kiln_status kn_sampler_init(kn_sampler *s, const kiln_sampler_params *p, int32_t n_vocab) {
    memset(s, 0, sizeof *s);
    kiln_status st = kn_sampler_check(p, n_vocab);
    if (st) return st;
    s->p = *p;
    s->p.logit_bias = NULL;
    s->n_vocab = n_vocab;
    s->cands = kn_calloc((size_t)n_vocab, sizeof *s->cands);
    s->scratch = kn_calloc((size_t)n_vocab, sizeof *s->scratch);
    s->work = kn_calloc((size_t)n_vocab, sizeof *s->work);
    s->counts = kn_calloc((size_t)n_vocab, sizeof *s->counts);
    s->hist = kn_calloc((size_t)KN_MAX(p->penalty_last_n, 1), sizeof *s->hist);
    s->bias = kn_calloc(KN_MAX(p->n_logit_bias, 1), sizeof *s->bias);
    if (!s->cands || !s->scratch || !s->work || !s->counts || !s->hist || !s->bias) {
        kn_sampler_free(s);
        return KILN_ERR_NOMEM;
    }
    if (p->n_logit_bias) memcpy(s->bias, p->logit_bias, p->n_logit_bias * sizeof *s->bias);
    s->n_bias = p->n_logit_bias;
    uint64_t seed = p->seed;
    if (seed == KILN_SEED_RANDOM) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)s;
    }
    kn_rng_seed(&s->rng, seed);
    return KILN_OK;
}

void kn_sampler_free(kn_sampler *s) {
    free(s->cands);
    free(s->scratch);
    free(s->work);
    free(s->counts);
    free(s->hist);
    free(s->bias);
    memset(s, 0, sizeof *s);
}

void kn_sampler_accept(kn_sampler *s, int32_t token) {
    const int32_t w = s->p.penalty_last_n;
    if (w == 0 || token < 0 || token >= s->n_vocab) return;
    if (s->n_hist == w) {
        s->counts[s->hist[s->hist_pos]]--;
    } else {
        s->n_hist++;
    }
    s->hist[s->hist_pos] = token;
    s->counts[token]++;
    s->hist_pos = (s->hist_pos + 1) % w;
}

int32_t kn_argmax(const float *x, int32_t n) {
    const int64_t i = kn_kernels_get(KN_KERNELS_AUTO)->argmax(x, n);
    return i < 0 ? 0 : (int32_t)i;
}

/* Applies penalties and bias into s->work, NaN read as -inf; returns the candidates (tokens above
 * -inf) and sets *mx to the greatest logit (-inf when none). With nothing to apply, the kernel set's
 * clean pass is the copy. */
static int32_t adjust(kn_sampler *s, const float *logits, float *mx) {
    const kiln_sampler_params *p = &s->p;
    bool pen =
        s->n_hist > 0 && (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
    const float *src = logits;
    if (pen || s->n_bias) {
        memcpy(s->work, logits, (size_t)s->n_vocab * sizeof(float));
        src = s->work;
    }
    if (pen) {
        /* Each distinct token of the window once: a visited token's count is negated while the
         * window is walked, then restored, so this stays O(window). */
        for (int32_t i = 0; i < s->n_hist; i++) {
            int32_t tok = s->hist[i];
            int32_t c = s->counts[tok];
            if (c <= 0) continue;
            float *l = &s->work[tok];
            if (*l > 0) *l /= p->repeat_penalty;
            else *l *= p->repeat_penalty;
            *l -= (float)c * p->frequency_penalty + p->presence_penalty;
            s->counts[tok] = -c;
        }
        for (int32_t i = 0; i < s->n_hist; i++)
            if (s->counts[s->hist[i]] < 0) s->counts[s->hist[i]] = -s->counts[s->hist[i]];
    }
    for (size_t i = 0; i < s->n_bias; i++) s->work[s->bias[i].token] += s->bias[i].bias;
    int64_t n;
    *mx = kn_kernels_get(KN_KERNELS_AUTO)->logits_clean(src, s->work, s->n_vocab, &n);
    return (int32_t)n;
}

/* kn_argmax of x[n] with every NaN read as -inf (what adjust() makes of it): the first index of the
 * greatest value, 0 when every value is NaN or -inf. */
static int32_t argmax_nan_as_ninf(const float *x, int32_t n) {
    const int64_t i = kn_kernels_get(KN_KERNELS_AUTO)->argmax(x, n);
    return i < 0 || x[i] == -INFINITY ? 0 : (int32_t)i;
}

/* The k (< the finite candidates) best of s->work into s->cands[0..k), sorted: the first k finite
 * ones sorted, then each later token greater than the k-th best, found by the kernel set's above
 * (ids ascend, so a later token must be strictly greater to enter; -inf never is), inserted. */
static void select_top_k(kn_sampler *s, int32_t k) {
    kn_cand *c = s->cands;
    const float *w = s->work;
    int32_t n = 0, i = 0;
    for (; n < k; i++)
        if (w[i] > -INFINITY) c[n++] = (kn_cand){w[i], 0.0f, i};
    kn_cand_sort(c, (size_t)k, s->scratch);
    const kn_above_fn above = kn_kernels_get(KN_KERNELS_AUTO)->above;
    float last = c[k - 1].logit;
    while ((i += (int32_t)above(w + i, s->n_vocab - i, last)) < s->n_vocab) {
        const float v = w[i];
        int32_t j = k - 1;
        while (j > 0 && v > c[j - 1].logit) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = (kn_cand){v, 0.0f, i++};
        last = c[k - 1].logit;
    }
}

/* Greedy with nothing to adjust: the logits need no copy. */
static bool plain_greedy(const kn_sampler *s) {
    const kiln_sampler_params *p = &s->p;
    return p->temperature <= 0.0f && s->n_bias == 0 &&
           (p->penalty_last_n == 0 || s->n_hist == 0 ||
            (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f));
}

/* top-p, min-p and the draw over cands[0..n): sorted, with probabilities, the max first; every
 * candidate the truncation can keep (a prefix of the sorted order may stand for them all when it
 * holds every candidate min-p keeps, or more than top_p of the mass). */
static int32_t truncate_and_draw(kn_sampler *s, int32_t n) {
    const kiln_sampler_params *p = &s->p;
    /* top-p: the smallest prefix whose mass reaches top_p */
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        for (int32_t i = 0; i < n; i++) {
            cum += s->cands[i].p;
            if (cum >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    /* min-p: drop candidates below min_p times the best probability */
    if (p->min_p > 0.0f) {
        const float floor = p->min_p * s->cands[0].p;
        int32_t keep = 1;
        while (keep < n && s->cands[keep].p >= floor) keep++;
        n = keep;
    }
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) total += s->cands[i].p;
    double r = kn_rng_uniform(&s->rng) * total, acc = 0.0;
    for (int32_t i = 0; i < n; i++) {
        acc += s->cands[i].p;
        if (r < acc) return s->cands[i].id;
    }
    return s->cands[n - 1].id;
}

/* The bar for top-p alone: the highest edge of a quarter octave (a float whose low 21 bits are 0)
 * such that the exponentials e[0..n) (each in [0, 1]) at or above it hold at least target of the
 * mass; 0 when none does. The candidates at or above it are a prefix of the sorted order that holds
 * the prefix top-p keeps, and at most a quarter octave of exponentials more. One pass, with no
 * branch on the values: the mass of each quarter octave, summed in double, indexed by the float's
 * exponent and top two mantissa bits. */
static float top_p_bar(const float *e, int32_t n, double target) {
    enum { SHIFT = 21, N_BINS = (0x3F800000 >> SHIFT) + 1 }; /* 1.0f is in the last bin */
    double mass[N_BINS] = {0};
    for (int32_t j = 0; j < n; j++) {
        uint32_t u;
        memcpy(&u, &e[j], sizeof u);
        mass[KN_MIN(u >> SHIFT, N_BINS - 1u)] += e[j];
    }
    double acc = 0.0;
    for (uint32_t b = N_BINS - 1; b > 0; b--)
        if ((acc += mass[b]) >= target) {
            const uint32_t u = b << SHIFT;
            float bar;
            memcpy(&bar, &u, sizeof bar);
            return bar;
        }
    return 0.0f;
}

/* Sampling with top-k off (or above the n finite candidates), mx the greatest finite logit. The
 * candidates' logits in id order (s->work itself when every token is one, else packed, as a grammar's
 * mask leaves few) give their exponentials e = e^((logit - mx) / temperature) and the sum S through
 * the kernel set's kn_sumexp_fn (the same bits on every set); a candidate's probability is (float)(e
 * / S). Only the prefix of the sorted order that top-p and min-p can keep is gathered and sorted: with
 * min-p on, the candidates whose e comes within 1e-4 of min_p (p >= min_p * the best, the best's e
 * being 1: expf_ref is monotonic, so they are a prefix); with top-p alone, the most likely ones holding
 * top_p of the mass and a margin over the rounding of the sums (top_p_bar); with neither, no order
 * at all: the draw walks the exponentials in id order. */
static int32_t sample_wide(kn_sampler *s, int32_t n, float mx) {
    const kiln_sampler_params *p = &s->p;
    const kn_kernels *ks = kn_kernels_get(KN_KERNELS_AUTO);
    float *logit = s->work, *e = (float *)(void *)s->scratch; /* scratch is free until the gather */
    int32_t *id = NULL;                                       /* NULL: candidate j is token j */
    if (n < s->n_vocab) {
        logit = e + n;
        id = (int32_t *)(void *)(logit + n);
        const float *w = s->work;
        for (int32_t i = 0, j = 0; j < n;) { /* a grammar's mask: a few candidates, runs of -inf between */
            i += (int32_t)ks->above(w + i, s->n_vocab - i, -INFINITY);
            do logit[j] = w[i], id[j++] = i++;
            while (j < n && w[i] > -INFINITY); /* stops at the last candidate */
        }
    }
    const double sum = ks->sumexp(logit, n, mx, 1.0f / p->temperature, e);
    if (p->top_p >= 1.0f && p->min_p <= 0.0f) {
        const double r = kn_rng_uniform(&s->rng) * sum;
        double acc = 0.0;
        int32_t j = 0;
        while (j < n - 1 && !(r < (acc += e[j]))) j++;
        return id ? id[j] : j;
    }
    const float theta = p->min_p > 0.0f ? p->min_p * (1.0f - 1e-4f) : top_p_bar(e, n, (p->top_p + 1e-6) * sum);
    int32_t g = 0; /* e[j] >= theta: found a vector at a time (no e is NaN), then taken in runs */
    const float bar = nextafterf(theta, -INFINITY);
    for (int32_t j = 0; (j += (int32_t)ks->above(e + j, n - j, bar)) < n;) {
        do s->cands[g++] = (kn_cand){logit[j], (float)(e[j] / sum), id ? id[j] : j};
        while (++j < n && e[j] >= theta);
    }
    kn_cand_sort(s->cands, (size_t)g, s->scratch);
    return truncate_and_draw(s, g);
}

int32_t kn_sampler_sample(kn_sampler *s, const float *logits) {
    const kiln_sampler_params *p = &s->p;
    if (plain_greedy(s)) return argmax_nan_as_ninf(logits, s->n_vocab);
    float mx;
    const int32_t n = adjust(s, logits, &mx); /* the candidates: tokens above -inf */
    /* greedy, also for a temperature so small (subnormal) that its inverse overflows */
    if (p->temperature <= 0.0f || isinf(1.0f / p->temperature)) return kn_argmax(s->work, s->n_vocab);
    if (n == 0) return kn_argmax(logits, s->n_vocab);
    if (mx == INFINITY) return kn_argmax(s->work, s->n_vocab); /* certain: the first +inf */
    if (p->top_k <= 0 || p->top_k >= n) return sample_wide(s, n, mx);

    /* top-k: the k best sorted, then temperature and softmax over them (the max is cands[0]) */
    const int32_t k = p->top_k;
    select_top_k(s, k);
    double sum = 0.0;
    for (int32_t i = 0; i < k; i++) {
        s->cands[i].p = expf((s->cands[i].logit - s->cands[0].logit) / p->temperature);
        sum += s->cands[i].p;
    }
    for (int32_t i = 0; i < k; i++) s->cands[i].p = (float)(s->cands[i].p / sum);
    return truncate_and_draw(s, k);
}

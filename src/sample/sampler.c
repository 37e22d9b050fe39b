/*
 * sampler.c - the sampler chain (see sampler.h and kiln_sampler_params in kiln.h).
 */
#include "sample/sampler.h"

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
    s->work = kn_calloc((size_t)n_vocab, sizeof *s->work);
    s->counts = kn_calloc((size_t)n_vocab, sizeof *s->counts);
    s->hist = kn_calloc((size_t)KN_MAX(p->penalty_last_n, 1), sizeof *s->hist);
    s->bias = kn_calloc(KN_MAX(p->n_logit_bias, 1), sizeof *s->bias);
    if (!s->cands || !s->work || !s->counts || !s->hist || !s->bias) {
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
    int32_t best = 0;
    float bv = -INFINITY;
    bool any = false;
    for (int32_t i = 0; i < n; i++) {
        if (x[i] > bv || (!any && x[i] == x[i])) { /* strict >: the lowest id wins ties */
            bv = x[i];
            best = i;
            any = true;
        }
    }
    return best;
}

static int cmp_cand(const void *a, const void *b) {
    const kn_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

/* Applies penalties and bias into s->work. */
static void adjust(kn_sampler *s, const float *logits) {
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof(float));
    const kiln_sampler_params *p = &s->p;
    bool pen = p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
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
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (s->work[i] != s->work[i]) s->work[i] = -INFINITY;
}

/* kn_argmax of x[n] with every NaN read as -inf (what adjust() makes of it): the first index of the
 * greatest value, 0 when every value is NaN or -inf. Two passes without a data-dependent branch in
 * the first (it vectorizes): the greatest value, then its first index. */
static int32_t argmax_nan_as_ninf(const float *x, int32_t n) {
    float m = -INFINITY;
    for (int32_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m; /* a NaN compares false: skipped */
    if (m == -INFINITY) return 0;
    int32_t i = 0;
    while (x[i] != m) i++;
    return i;
}

/* Greedy with nothing to adjust: the logits need no copy. */
static bool plain_greedy(const kn_sampler *s) {
    const kiln_sampler_params *p = &s->p;
    return p->temperature <= 0.0f && s->n_bias == 0 &&
           (p->penalty_last_n == 0 || s->n_hist == 0 ||
            (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f));
}

int32_t kn_sampler_sample(kn_sampler *s, const float *logits) {
    const kiln_sampler_params *p = &s->p;
    if (plain_greedy(s)) return argmax_nan_as_ninf(logits, s->n_vocab);
    adjust(s, logits);
    if (p->temperature <= 0.0f) return kn_argmax(s->work, s->n_vocab);

    /* Candidates with a finite logit, sorted descending (ties by id), cut to top-k. */
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (s->work[i] > -INFINITY) s->cands[n++] = (kn_cand){s->work[i], 0.0f, i};
    if (n == 0) return kn_argmax(logits, s->n_vocab);
    int32_t k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    if (k < n) {
        /* Partial selection: keep the k best at the front with a bounded insertion pass. */
        qsort(s->cands, (size_t)k, sizeof *s->cands, cmp_cand);
        for (int32_t i = k; i < n; i++) {
            kn_cand c = s->cands[i];
            if (cmp_cand(&c, &s->cands[k - 1]) >= 0) continue;
            int32_t j = k - 1;
            while (j > 0 && cmp_cand(&c, &s->cands[j - 1]) < 0) {
                s->cands[j] = s->cands[j - 1];
                j--;
            }
            s->cands[j] = c;
        }
    } else {
        qsort(s->cands, (size_t)n, sizeof *s->cands, cmp_cand);
    }
    n = k;
    /* temperature + softmax (the max is cands[0]) */
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        s->cands[i].p = expf((s->cands[i].logit - s->cands[0].logit) / p->temperature);
        sum += s->cands[i].p;
    }
    for (int32_t i = 0; i < n; i++) s->cands[i].p = (float)(s->cands[i].p / sum);
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

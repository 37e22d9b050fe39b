/*
 * candsort.c - sampling candidates in the sampler's order: logit descending, token id ascending on
 * ties (see candsort.h).
 *
 * A least-significant-digit radix sort over the logit's bits, three passes of 11 bits each through a
 * scratch array: with top-k off a step may sort tens of thousands of candidates (a flat distribution
 * under top-p), where qsort's comparisons cost as much as a decode step of a 1B model and three
 * linear passes a fraction of a millisecond. Each pass is stable, so candidates given in ascending id
 * order keep it among equal logits, which is the tie rule. A pass whose digit is the same for every
 * candidate is skipped (the high digits of logits in a narrow range usually are).
 */
#include "sample/candsort.h"

#include <stdlib.h>
#include <string.h>

#define DIGIT_BITS 11
#define N_DIGITS   3 /* 33 bits cover the 32-bit key */
#define N_BUCKETS  (1u << DIGIT_BITS)

/* An unsigned key that orders the candidates as the sampler wants: larger logits get smaller keys,
 * -0.0 and +0.0 are one value (they compare equal). NaN never reaches here. */
static inline uint32_t desc_key(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if (u == 0x80000000u) u = 0;
    const uint32_t asc = u & 0x80000000u ? ~u : u | 0x80000000u; /* ascending float order */
    return ~asc;
}

/* The qsort comparator of the same order, for short arrays. */
static int cmp_cand(const void *a, const void *b) {
    const kn_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

void kn_cand_sort(kn_cand *c, size_t n, kn_cand *tmp) {
    if (n < 256) { /* the histograms would cost more than the comparisons */
        qsort(c, n, sizeof *c, cmp_cand);
        return;
    }
    uint32_t hist[N_DIGITS][N_BUCKETS] = {{0}}; /* 24 KiB of stack */
    for (size_t i = 0; i < n; i++) {
        const uint32_t k = desc_key(c[i].logit);
        for (int d = 0; d < N_DIGITS; d++) hist[d][(k >> (d * DIGIT_BITS)) & (N_BUCKETS - 1)]++;
    }
    kn_cand *src = c, *dst = tmp;
    for (int d = 0; d < N_DIGITS; d++) {
        const int shift = d * DIGIT_BITS;
        uint32_t *h = hist[d];
        if (h[(desc_key(src[0].logit) >> shift) & (N_BUCKETS - 1)] == n) continue; /* one digit */
        uint32_t at = 0;                                                           /* bucket starts */
        for (uint32_t b = 0; b < N_BUCKETS; b++) {
            const uint32_t cnt = h[b];
            h[b] = at;
            at += cnt;
        }
        for (size_t i = 0; i < n; i++) dst[h[(desc_key(src[i].logit) >> shift) & (N_BUCKETS - 1)]++] = src[i];
        kn_cand *t = src;
        src = dst;
        dst = t;
    }
    if (src != c) memcpy(c, src, n * sizeof *c);
}

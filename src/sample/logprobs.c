/*
 * logprobs.c - log-softmax of one logits row and its top-N entries (see logprobs.h).
 *
 * logprob(i) = logit(i) - max - log(sum_j exp(logit(j) - max)): the sum is the kernel set's
 * kn_sumexp_fn (float exponentials summed in double lanes, so large vocabularies keep full float
 * precision, the same bits on every set); the maximum and the scan for tokens that enter the top-N
 * list are the kernel set's too (argmax, above). The top-N list is kept by insertion into a sorted
 * array of at most KILN_MAX_TOP_LOGPROBS entries.
 */
#include "sample/logprobs.h"

#include <math.h>

float kn_logprobs(const kn_kernels *ks, const float *logits, int32_t n_vocab, int32_t token, size_t n_top,
                  kiln_top_logprob *top) {
    if (n_top > KILN_MAX_TOP_LOGPROBS) n_top = KILN_MAX_TOP_LOGPROBS;
    if (n_top > (size_t)n_vocab) n_top = (size_t)n_vocab;
    const int64_t am = ks->argmax(logits, n_vocab); /* NaN never the greatest */
    float mx = am < 0 ? -INFINITY : logits[am];
    if (!isfinite(mx)) mx = 0;
    const float lse = (float)(mx + log(ks->sumexp(logits, n_vocab, mx, 1.0f, NULL)));
    size_t n = 0; /* entries filled in top[], sorted by logit descending, id ascending */
    int32_t i = 0;
    while (n_top && i < n_vocab) {
        const float v = logits[i];
        if (v == v) {                                 /* NaN never ranks */
            size_t k = n < n_top ? n++ : n - 1;       /* drop the last when full */
            while (k > 0 && v > top[k - 1].logprob) { /* strict: earlier (lower) ids win ties */
                top[k] = top[k - 1];
                k--;
            }
            top[k].token = i;
            top[k].logprob = v;
        }
        i++;
        if (n == n_top) i += (int32_t)ks->above(logits + i, n_vocab - i, top[n - 1].logprob); /* the next to enter */
    }
    for (size_t k = 0; k < n; k++) top[k].logprob -= lse;
    return token >= 0 && token < n_vocab ? logits[token] - lse : -INFINITY;
}

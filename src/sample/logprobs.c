/*
 * logprobs.c - log-softmax of one logits row and its top-N entries (see logprobs.h).
 *
 * logprob(i) = logit(i) - max - log(sum_j exp(logit(j) - max)): the sum is the kernel set's
 * kn_sumexp_fn (float exponentials summed in double lanes, so large vocabularies keep full float
 * precision, the same bits on every set). The top-N list is kept by insertion into a sorted array
 * of at most KILN_MAX_TOP_LOGPROBS entries, which costs one comparison for most tokens.
 */
#include "sample/logprobs.h"

#include <math.h>

float kn_logprobs(const kn_kernels *ks, const float *logits, int32_t n_vocab, int32_t token, size_t n_top,
                  kiln_top_logprob *top) {
    if (n_top > KILN_MAX_TOP_LOGPROBS) n_top = KILN_MAX_TOP_LOGPROBS;
    if (n_top > (size_t)n_vocab) n_top = (size_t)n_vocab;
    float mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    if (!isfinite(mx)) mx = 0;
    const float lse = (float)(mx + log(ks->sumexp(logits, n_vocab, mx, 1.0f, NULL)));
    size_t n = 0; /* entries filled in top[], sorted by logit descending, id ascending */
    for (int32_t i = 0; i < n_vocab && n_top; i++) {
        float v = logits[i];
        if (v != v) continue; /* NaN never ranks */
        if (n == n_top && !(v > top[n - 1].logprob)) continue;
        size_t k = n < n_top ? n++ : n - 1;       /* drop the last when full */
        while (k > 0 && v > top[k - 1].logprob) { /* strict: earlier (lower) ids win ties */
            top[k] = top[k - 1];
            k--;
        }
        top[k].token = i;
        top[k].logprob = v;
    }
    for (size_t k = 0; k < n; k++) top[k].logprob -= lse;
    return token >= 0 && token < n_vocab ? logits[token] - lse : -INFINITY;
}

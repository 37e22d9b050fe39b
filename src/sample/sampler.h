/*
 * sampler.h - the sampler chain: picks the next token of one row from its logits.
 *
 * Order (documented in kiln.h): penalties over the recent-token window, logit bias, then either
 * greedy (temperature 0: the highest adjusted logit, lowest id on ties) or top-k, temperature,
 * softmax, top-p, min-p and a draw from the seeded RNG. All buffers are allocated at init; sampling
 * allocates nothing.
 */
#ifndef KN_SAMPLER_H
#define KN_SAMPLER_H

#include "base/base.h"
#include "sample/candsort.h"
#include "sample/rng.h"

typedef struct kn_sampler {
    kiln_sampler_params p; /* logit_bias copied into bias_* */
    int32_t n_vocab;
    kn_rng rng;
    kn_cand *cands;   /* [n_vocab] */
    kn_cand *scratch; /* [n_vocab] for kn_cand_sort */
    float *work;      /* [n_vocab] adjusted logits */
    int32_t *hist;    /* [penalty_last_n] ring of recent tokens */
    int32_t n_hist, hist_pos;
    int32_t *counts;       /* [n_vocab] occurrences inside the window */
    kiln_logit_bias *bias; /* [n_bias] validated copy */
    size_t n_bias;
} kn_sampler;

/* Validates params without allocating: every numeric field against the table of ranges
 * (kiln_sampler_param_range, params.c), the bias token ids against n_vocab; KILN_ERR_INVALID_ARG
 * names the field. */
kiln_status kn_sampler_check(const kiln_sampler_params *p, int32_t n_vocab);

/* Validates params (kn_sampler_check) and allocates. */
kiln_status kn_sampler_init(kn_sampler *s, const kiln_sampler_params *p, int32_t n_vocab);
void kn_sampler_free(kn_sampler *s);

/* Records a token (prompt or generated) in the penalty window. */
void kn_sampler_accept(kn_sampler *s, int32_t token);

/* Picks a token from logits[n_vocab] (not modified). */
int32_t kn_sampler_sample(kn_sampler *s, const float *logits);

/* The greedy choice over x[n]: highest value, lowest index on ties (-0.0 equals +0.0); NaN never
 * wins (0 when every value is NaN). The kernel set's argmax (logit_scan.c). */
int32_t kn_argmax(const float *x, int32_t n);

#endif

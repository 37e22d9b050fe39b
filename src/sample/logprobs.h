/*
 * logprobs.h - log-probabilities of a generation step, as the OpenAI API reports them.
 *
 * The distribution is the softmax of the model's raw logits (before penalties, bias, temperature
 * or truncation), so a token's logprob describes the model, not the sampler settings.
 */
#ifndef KN_LOGPROBS_H
#define KN_LOGPROBS_H

#include "base/base.h"
#include "tensor/kernels.h"

/* logits[n_vocab] -> the logprob of `token`, and the n_top (<= KILN_MAX_TOP_LOGPROBS) most likely
 * tokens in top[], most likely first, lowest id on ties; the exponentials summed by ks->sumexp (the
 * same bits whichever set). Three passes over the vocabulary; no allocation. */
float kn_logprobs(const kn_kernels *ks, const float *logits, int32_t n_vocab, int32_t token, size_t n_top,
                  kiln_top_logprob *top);

#endif

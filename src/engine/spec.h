/*
 * spec.h - the executor step's method seam: how a step proposes and verifies tokens.
 *
 * Method none is the plain step (kn_step_rows: one token per decoding row). A speculative method
 * (ngram: prompt lookup in the row's own tokens; draft: a second model proposing greedily) gives a
 * decoding row up to k proposed tokens d1..dk after its last sampled token t0. The target runs
 * [t0, d1, .., dk] at positions P..P+k in the same batched forward pass as every other row
 * (kiln's kernels give a position the same bits whether it is computed alone or in a longer pass,
 * so the logits at P+i are those one-token decoding would see), and the row then advances on those
 * logits one position at a time with its own sampler (kn_row_advance: grammar mask, penalties,
 * stop strings, limits, logprobs as without speculation): while the committed token equals the
 * proposal, the next position's logits are valid too; at the first difference, or when the row
 * ends, the rest is discarded by lowering the KV's n_past (and the draft's), which is all a
 * rollback is. The committed tokens are exactly those of plain decoding (greedy: the argmax;
 * sampled: the same draws from the same RNG), so output and seeds do not depend on the method,
 * on k or on the batch.
 *
 * k adapts per row: a decayed estimate a of the probability that a proposal is accepted gives
 * k = the most proposals whose expected gain a^j still exceeds their cost (a verified token costs a
 * fraction of a step, more in a larger batch, plus a draft step for the draft method); k = 0 turns
 * speculation off, and such a row probes with one proposal now and then.
 */
#ifndef KN_SPEC_H
#define KN_SPEC_H

#include "engine/row.h"

#include <stdatomic.h>

typedef struct kn_spec {
    kiln_spec_method method;
    const kiln_model *target;
    const kiln_model *draft; /* KILN_SPEC_DRAFT */
    int32_t max_k;           /* proposals per row and step at most */
    int32_t n_rows;          /* rows the step may be given */
    int32_t n_ctx;           /* context of a row (the draft's KV has the same) */
    float draft_cost;        /* a draft step next to a target step (weight bytes) */
    kn_scratch dscratch;     /* the draft's activations */
    kn_kv *dkv;              /* [n_rows] the draft's caches, allocated on first use */
    float *vlogits;          /* [n_rows * (max_k + 1)][n_vocab] logits of the verified positions */
    float *dlogits;          /* [n_rows][n_vocab] the draft's logits */
    atomic_uint_fast64_t proposed, accepted;
} kn_spec;

/* Checks a method's parameters: a known method, *max_k in [0, KILN_SPEC_MAX_LIMIT] (0 becomes
 * KILN_SPEC_MAX_DEFAULT), and for draft a draft model that can generate and whose vocabulary
 * (size and tokenizer) is the target's. KILN_ERR_INVALID_ARG with a message otherwise. */
kiln_status kn_spec_check(kiln_spec_method method, const kiln_model *target, const kiln_model *draft, int32_t *max_k);

/* Sets up the method for up to n_rows rows of n_ctx positions (after kn_spec_check): the
 * verification logits, and for draft its scratch (prefill_chunk + n_rows tokens) with n_threads.
 * Method none allocates nothing. On failure nothing is held. */
kiln_status kn_spec_init(kn_spec *sp, kiln_spec_method method, const kiln_model *target, const kiln_model *draft,
                         int32_t max_k, int32_t n_rows, int32_t n_ctx, int32_t prefill_chunk, int n_threads);
void kn_spec_free(kn_spec *sp);

/* Tokens a target scratch must hold for n_rows rows with a prefill chunk, with speculation. */
int32_t kn_spec_scratch_tokens(const kn_spec *sp, int32_t n_rows, int32_t prefill_chunk);

/* Prepares a begun row (kn_row_begin) for the method: speculates when the method is not none and
 * gp.speculative; slot (< n_rows) chooses the draft's cache, allocated on first use. */
kiln_status kn_spec_row_begin(kn_spec *sp, kn_row *r, int slot);

/* One executor step with the method (sp NULL or none: kn_step_rows). Same contract as
 * kn_step_rows: plans within max_tokens stacked tokens (decoding rows first with their proposals,
 * prefilling rows share the rest at most prefill_chunk each), runs one target forward pass,
 * advances every row that took part; logits holds n rows of n_vocab (the plain step's). Returns the
 * number of rows that finished. */
int kn_spec_step(kn_spec *sp, const kiln_model *m, kn_scratch *s, kn_row **rows, int n, int32_t max_tokens,
                 int32_t prefill_chunk, float *logits);

/* The n-gram proposal: the tokens after the latest earlier occurrence of the longest suffix
 * (KN_SPEC_NGRAM_MAX tokens down to 1) of hist[n], continued periodically past the end of hist (the
 * text repeating with the distance between the occurrence and the suffix); k tokens into out.
 * Returns k, or 0 when no suffix occurs earlier. */
#define KN_SPEC_NGRAM_MAX 4
int32_t kn_spec_ngram(const kiln_token *hist, int32_t n, int32_t k, kiln_token *out);

#endif

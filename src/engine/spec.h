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
 * How many proposals a row gets is a cost decision for the whole step (kn_spec_plan): an accepted
 * proposal is worth what a token costs in a plain step of this batch (one target pass over the
 * decoding rows, divided by their number: at batch 1 a whole pass, at batch 8 an eighth), and a
 * proposal costs a verified position in the target's pass, a draft token, the draft's passes (one
 * per proposal depth, shared by the rows) and, for a draft that has fallen behind a row, catching
 * up on the row's tokens (spread over the steps the row has left). Each row's acceptance rate is a
 * decayed estimate a (new rows start from the method's recent rate); the j-th proposal is expected
 * to be accepted with probability a^j. The pass costs are measured online: each pass's time against
 * its work (tokens, verified positions weighted by the output projection's share of the matmuls)
 * fitted by decayed least squares, for the target and the draft. When nothing pays the batch
 * decodes plainly, and now and then one probe step gives speculating rows one proposal each (the
 * interval doubles while probes fail; far longer when even perfect acceptance could not pay).
 *
 * The draft's KV is filled lazily: during a row's prompt only when the row is expected to
 * speculate, otherwise when speculation is first chosen for it. In an engine the draft has a
 * prefix cache of its own (kn_spec_cache_init): a row's draft restores the longest cached prefix of
 * its tokens before computing the rest, and publishes its tokens when the row ends
 * (kn_spec_row_end), as the target does with the engine's cache.
 */
#ifndef KN_SPEC_H
#define KN_SPEC_H

#include "cache/prefix.h"
#include "engine/row.h"

#include <stdatomic.h>

/* A model's pass time as a linear function of its work, fitted online: ms = c0 + c1 * x, x = tokens
 * + positions with logits * out_share. Decayed least-squares sums; c0, c1 the current estimate. */
typedef struct kn_spec_cost {
    double sw, sx, sy, sxx, sxy; /* decayed sums of 1, x, ms, x^2, x*ms */
    double c0, c1;               /* ms per pass, ms per unit of work */
    double out_share;            /* the output projection's matmul work next to one token's */
    int32_t n;                   /* passes observed */
    bool fitted;                 /* the passes' work varied enough to fit both terms */
} kn_spec_cost;

/* The step's cost model (ms): a target pass costs t0 and tv more per position with logits (a
 * decoding row's token, a verified proposal); a draft pass d0, dv more per token with logits (a
 * proposal), dc per catch-up token (ngram: no draft, all 0). */
typedef struct kn_spec_model {
    double t0, tv, d0, dv, dc;
} kn_spec_model;

/* A decoding row offered to kn_spec_plan: its acceptance estimate, the proposals it may have, the
 * draft tokens it needs before its first proposal beyond the usual one (catch-up), the tokens it
 * may still generate; k is the plan's answer. */
typedef struct kn_spec_cand {
    float a;
    int32_t kmax, behind, left;
    int32_t k;
} kn_spec_cand;

typedef struct kn_spec {
    kiln_spec_method method;
    const kiln_model *target;
    const kiln_model *draft; /* KILN_SPEC_DRAFT */
    int32_t max_k;           /* proposals per row and step at most */
    int32_t n_rows;          /* rows the step may be given */
    int32_t n_ctx;           /* context of a row (the draft's KV has the same) */
    kn_scratch dscratch;     /* the draft's activations */
    kn_kv *dkv;              /* [n_rows] the draft's caches, allocated on first use */
    uint8_t *dready;         /* [n_rows] the row's draft cache has restored its prefix (dcache) */
    float *vlogits;          /* [n_rows * (max_k + 1)][n_vocab] logits of the verified positions */
    float *dlogits;          /* [n_rows][n_vocab] the draft's logits */
    kn_prefix_cache dcache;  /* the draft's prefix cache (kn_spec_cache_init), budget 0 without */
    bool dcache_on;
    kn_spec_cost tcost, dcost; /* measured pass costs of the target and the draft */
    float hit, miss;           /* the method's decayed acceptance counts (a new row's prior) */
    int32_t probe_wait;        /* steps since speculation last ran or probed */
    int32_t probe_every;       /* steps between probes while nothing pays */
    int32_t force_k;           /* < 0: the cost model decides; else every speculating row proposes
                                  this many (tests of the verification paths) */
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

/* Gives the draft method of an engine a prefix cache for the draft's KV: as many tokens as
 * target_budget bytes hold of the target's KV at target_per_token bytes a token, within a quarter
 * of target_budget (0: none). */
void kn_spec_cache_init(kn_spec *sp, size_t target_budget, uint64_t target_per_token);

/* Tokens a target scratch must hold for n_rows rows with a prefill chunk, with speculation. */
int32_t kn_spec_scratch_tokens(const kn_spec *sp, int32_t n_rows, int32_t prefill_chunk);

/* Prepares a begun row (kn_row_begin) for the method: speculates when the method is not none and
 * gp.speculative; slot (< n_rows) chooses the draft's cache, allocated on first use. */
kiln_status kn_spec_row_begin(kn_spec *sp, kn_row *r, int slot);

/* A row is ending (before kn_row_end): its draft's KV goes to the draft's prefix cache. */
void kn_spec_row_end(kn_spec *sp, kn_row *r);

/* One executor step with the method (sp NULL or none: kn_step_rows). Same contract as
 * kn_step_rows: plans within max_tokens stacked tokens (decoding rows first with their proposals,
 * prefilling rows share the rest at most prefill_chunk each), runs one target forward pass,
 * advances every row that took part; logits holds logits_cap >= n rows of n_vocab (the plain
 * step's; a speculative method uses its own). Returns the number of rows that finished. */
int kn_spec_step(kn_spec *sp, const kiln_model *m, kn_scratch *s, kn_row **rows, int n, int32_t max_tokens,
                 int32_t prefill_chunk, float *logits, int32_t logits_cap);

/* The n-gram proposal: the tokens after the latest earlier occurrence of the longest suffix
 * (KN_SPEC_NGRAM_MAX tokens down to 1) of hist[n], continued periodically past the end of hist (the
 * text repeating with the distance between the occurrence and the suffix); k tokens into out.
 * Returns k, or 0 when no suffix occurs earlier. */
#define KN_SPEC_NGRAM_MAX 4

/* The proposals of n candidate rows (c[i].k) in a step of n_dec decoding rows under cost model cm:
 * every row proposes up to the depth K that maximizes the step's expected saving (accepted tokens
 * worth a plain step's cost per token, less the verified positions, the draft tokens, K draft
 * passes and the rows' catch-up); K = 0 and every k = 0 when no depth saves anything. Returns K. */
int32_t kn_spec_plan(const kn_spec_model *cm, int n_dec, kn_spec_cand *c, int n);

/* Records a pass of x units of work taking ms; refits c0, c1. */
void kn_spec_cost_add(kn_spec_cost *c, double x, double ms);
int32_t kn_spec_ngram(const kiln_token *hist, int32_t n, int32_t k, kiln_token *out);

#endif

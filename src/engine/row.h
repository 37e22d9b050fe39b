/*
 * row.h - one generation as a row of the executor: the state machine both a session
 * (kiln_generate) and the batching engine drive, so a lone request and a batch of eight run the
 * same code.
 *
 * A row prefills its prompt in chunks, then decodes one token per step. Each step the executor
 * asks every active row for its tokens (kn_row_plan), runs one forward pass over all rows
 * (kn_step_rows), and hands each row the logits of its last position when it has any
 * (kn_row_advance): the row samples with its own sampler, emits text through its detokenizer,
 * stop-string matcher and logprobs, and decides whether it has finished. Rows never see each
 * other; the forward pass guarantees a row's logits do not depend on the batch around it.
 *
 * A row with a grammar (gp.grammar) also owns a token matcher (sample/gmask.h): before sampling,
 * its logits are copied with every token the grammar does not allow at -INFINITY, and sampling and
 * logprobs see only that copy (the constrained distribution). Rows without one pay nothing.
 * A lazy grammar (one with triggers) computes no mask until a trigger appears: each sampled
 * token's bytes are scanned together with the tail of the text before it (a trigger may span
 * tokens); the token that completes a trigger feeds the bytes from the trigger on to the matcher
 * (a token they cannot start a sentence with is excluded and the draw repeated), and from then on
 * the row is masked like any constrained row.
 */
#ifndef KN_ROW_H
#define KN_ROW_H

#include "engine/stop.h"
#include "model/forward.h"
#include "sample/gmask.h"
#include "sample/sampler.h"
#include "text/tokenizer.h"

typedef struct kn_row {
    const kiln_model *model;
    kn_kv *kv;                /* the row's cache (borrowed) */
    kiln_generate_params gp;  /* stop / logit_bias pointers must outlive the row */
    const kiln_token *prompt; /* [n_prompt] (borrowed) */
    kiln_token *seq;          /* [kv->n_ctx] tokens whose K/V are in the KV: prompt, then
                                 generated tokens as they are fed (for the prefix cache) */
    size_t n_prompt;
    size_t n_fed;    /* prompt tokens already in the KV */
    kiln_token last; /* sampled token to feed at the next decode step */
    bool decoding;   /* the whole prompt is in the KV */
    bool finished;
    kiln_status status; /* KILN_OK, or why the row ended early */
    kn_sampler smp;
    kn_detok detok;
    kn_stopper stop;
    kiln_top_logprob top[KILN_MAX_TOP_LOGPROBS];
    kn_gmatch *gm;           /* the grammar's matcher (gp.grammar set), else NULL */
    float *masked;           /* [n_vocab] logits with disallowed tokens at -INFINITY (with gm) */
    int32_t n_allowed;       /* tokens the last mask allowed (with gm) */
    bool lazy;               /* gm's grammar is lazy and no trigger has appeared yet: no mask */
    char *scan;              /* [trigger_max + KN_TOK_MAX_PIECE] (lazy): the tail of the text, then a token */
    size_t n_tail;           /* bytes of text tail at the start of scan (< trigger_max) */
    char err[KN_ERRMSG_MAX]; /* res.error when the row failed on its own (a stuck grammar) */
    kiln_generate_result res;
    double t_start, t_first; /* ms: begin, prompt done */
    /* speculative decoding (engine/spec.h); all zero without a method */
    bool spec;                                     /* the row may speculate */
    kn_kv *dkv;                                    /* the draft model's cache of the row (borrowed), or NULL */
    float spec_hit, spec_miss;                     /* decayed counts of accepted and rejected proposals */
    int32_t spec_wait;                             /* steps without proposals since the last probe */
    int32_t n_prop;                                /* proposals of the current step */
    kiln_token spec_toks[KILN_SPEC_MAX_LIMIT + 1]; /* the step's tokens: last, then the proposals */
} kn_row;

/* Checks and resolves what sessions and engines share: the model can generate, the context per
 * row (0 = kiln_default_n_ctx; beyond the training length warns), the thread count (0 = physical
 * cores) and the KV type. */
kiln_status kn_exec_resolve(const kiln_model *m, int32_t *n_ctx, int32_t *n_threads, kiln_kv_type kv_type);

/* The checks kn_row_begin makes before allocating anything: a model that generates (not an
 * encoder: KILN_ERR_UNSUPPORTED), a non-empty prompt shorter than n_ctx,
 * ids in the vocabulary, logprobs in range. */
kiln_status kn_row_validate(const kiln_model *m, int32_t n_ctx, const kiln_token *prompt, size_t n,
                            const kiln_generate_params *gp);

/* Starts a generation on kv for prompt[n] with params gp. kv holds the K/V of the first n_cached
 * prompt tokens already (restored from the prefix cache; 0: kv is emptied), so prefill starts
 * after them. Validates the prompt (non-empty, ids in the vocabulary, shorter than the context)
 * and parameters; allocates the sampler, stop-string and token buffers, and with a grammar its
 * matcher (which takes a reference to the grammar) and the masked logits (the only allocations of
 * a generation, apart from the matcher's caches). On failure nothing is held. */
kiln_status kn_row_begin(kn_row *r, const kiln_model *m, kn_kv *kv, const kiln_token *prompt, size_t n,
                         int32_t n_cached, const kiln_generate_params *gp);

/* The row's tokens for the next forward call, at most max (>= 1): the next prompt chunk while
 * prefilling (logits only when it completes the prompt), else the last sampled token. */
void kn_row_plan(const kn_row *r, int32_t max, kn_batch_row *out);

/* Records that the planned tokens were evaluated; logits is the row's last position (NULL when
 * the plan asked for none). A speculative step (engine/spec.h) calls it once per verified position
 * of a decoding row, with kv->n_past set to the positions that hold committed tokens. Samples and emits a token when
 * logits are given. Returns true once the row has finished (end of generation, a limit, a stop string, or cancellation
 * by the callback). With a grammar: the sample is drawn from the allowed tokens only; an end-of-generation token
 * (allowed only when the text is a whole sentence) ends the row with KILN_STOP_EOS even with
 * ignore_eos, and so does a token after which the grammar's sentence is complete (nothing may
 * follow), without another forward pass; when no token is allowed (the grammar is stuck, or its
 * matcher ran out of memory) the row fails with a status and res.error saying why. */
bool kn_row_advance(kn_row *r, const kn_batch_row *planned, const float *logits);

/* The most prompt tokens a prefilling row may plan this step within max, given the logits rows
 * *extra left beyond one per row: a row with prompt_logprobs needs one per token, so it takes at most
 * 1 + *extra and uses up what it takes beyond one; any other row takes max. */
int32_t kn_row_plan_max(const kn_row *r, int32_t max, int32_t *extra);

/* Marks an unfinished row cancelled (the caller's cancel request). */
void kn_row_cancel(kn_row *r);

/* Ends the row: releases held-back text (unless cancelled or failed), fills *result, calls
 * on_done, frees the row's buffers (and drops its grammar reference). Returns the row's status.
 * result->error may point into the row (r->err): a caller that keeps the result longer than the
 * row copies the message. */
kiln_status kn_row_end(kn_row *r, kiln_generate_result *result);

/* Makes the KV positions each planned pass br[i] of row in[i] writes writable (kn_kv_prepare: a
 * paged cache maps or copies blocks, out of the row's reservation); a row that cannot have them
 * ends with the error (finished, status set). False when any row failed: the caller then runs no
 * forward pass this step. kn_step_rows does this itself. */
bool kn_rows_prepare_kv(kn_row **in, const kn_batch_row *br, int nb);

/* One executor step over n active rows (1 <= n): the plain decoding method, one token per decoding
 * row per step (kn_spec_step in engine/spec.h is the seam that runs it or a speculative method). Plans
 * each row within a budget of max_tokens stacked tokens (decoding rows first, one token each;
 * prefilling rows share the rest, at most prefill_chunk each, in the order given), runs the forward
 * pass, and advances every row that took part. logits holds logits_cap >= n rows of n_vocab (rows
 * with prompt_logprobs take the ones beyond n for their chunks: kn_row_plan_max). Rows that got no
 * budget simply wait. Returns the number of rows that finished this step (their `finished` flag is
 * set). */
int kn_step_rows(const kiln_model *m, kn_scratch *s, kn_row **rows, int n, int32_t max_tokens, int32_t prefill_chunk,
                 float *logits, int32_t logits_cap);

#endif

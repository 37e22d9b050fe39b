/*
 * session.h - kiln_session: one generation context (a row's KV cache, activation scratch, logits,
 * prompt buffer). Generation runs the session's KV as one row of the executor (engine/row.h).
 */
#ifndef KN_SESSION_H
#define KN_SESSION_H

#include "cache/kv.h"
#include "engine/spec.h"
#include "model/forward.h"
#include "sample/sampler.h"
#include "text/tokenizer.h"

struct kiln_session {
    kiln_model *model;
    kiln_session_params p;
    kn_kv kv;
    kn_scratch scratch;
    float *logits; /* [n_logits_cap][n_vocab] */
    int32_t n_logits_cap;
    int32_t n_logits;       /* positions with logits from the last eval */
    int32_t logits_first;   /* index (within the last eval) of logits row 0 */
    kiln_token *prompt_buf; /* [n_ctx] tokenized prompt */
    kn_spec spec;           /* the speculative method of kiln_generate* (none: plain decoding) */
    char err[KN_ERRMSG_MAX];
};

#endif

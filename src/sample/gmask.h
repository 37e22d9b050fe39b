/*
 * gmask.h - the token mask of a constrained generation: which vocabulary tokens may come next.
 *
 * A kn_vtrie is a byte trie over a vocabulary's token texts (the bytes each token adds to the
 * output, as the detokenizer emits them), built once per model and shared read-only. A kn_gmatch
 * follows one generation: it walks the trie together with the grammar's state store (grammar.h),
 * pruning every subtree whose prefix the grammar rejects, and caches the mask of each parser state
 * it has seen, so states that recur (inside a string, between array items) cost a lookup.
 *
 * Token rules: a token is allowed when its whole text continues the language from the current
 * state. Tokens with empty text (control tokens, unused ids) are never allowed, except that the
 * model's end-of-generation tokens are allowed exactly when the state is accepting.
 */
#ifndef KN_GMASK_H
#define KN_GMASK_H

#include "sample/grammar.h"

typedef struct kn_vtrie kn_vtrie;

/* The trie of model m's vocabulary, built on first use (thread-safe) and kept with the model; NULL
 * when memory runs out (kn_error says so). */
const kn_vtrie *kn_model_vtrie(const kiln_model *m);

/* The same trie with the texts of special (control) tokens, for generations that render them
 * (kiln_generate_params.render_special): a grammar can then spell markup such as "<|channel|>"
 * with the model's own special token. End-of-generation tokens still have no text. */
const kn_vtrie *kn_model_vtrie_special(const kiln_model *m);

/* A trie over n tokens given as byte strings (text[i], len[i]; len 0 = never allowed) with the
 * end-of-generation ids eog[n_eog]: for benchmarks and tests without a model. */
kiln_status kn_vtrie_new(int32_t n, const char *const *text, const uint32_t *len, const int32_t *eog, int32_t n_eog,
                         kn_vtrie **out);
void kn_vtrie_free(kn_vtrie *t);

typedef struct kn_gmatch kn_gmatch;

/* A matcher for grammar g (retained) over vocabulary trie t (which must outlive it). With
 * strip_first_space, the first token's leading space is not part of the output (a SentencePiece
 * vocabulary at the start of a text: see detok.c), so the first mask and step skip it. */
kiln_status kn_gmatch_new(const kiln_grammar *g, const kn_vtrie *t, bool strip_first_space, kn_gmatch **out);
void kn_gmatch_free(kn_gmatch *m);

/* The allowed tokens of the current state as a bitmap (bit t % 64 of word t / 64, n_vocab bits),
 * owned by the matcher and valid until its next call; *n_allowed is their count (0: no token can
 * continue, the generation is stuck: kn_gmatch_error says why). */
const uint64_t *kn_gmatch_mask(kn_gmatch *m, int32_t *n_allowed);

/* Advances over token tok. KILN_ERR_INVALID_ARG when tok is not allowed (the state is unchanged). */
kiln_status kn_gmatch_accept(kn_gmatch *m, int32_t tok);

/* Advances over text[len] given as bytes (a lazy grammar's trigger and what followed it in the same
 * token). KILN_ERR_INVALID_ARG when the bytes do not continue the language (the state is unchanged);
 * the matcher's own failures as kn_gmatch_accept. */
kiln_status kn_gmatch_feed(kn_gmatch *m, const char *text, size_t len);

/* The output so far is a whole sentence / is complete (accepting, and nothing may follow). */
bool kn_gmatch_accepting(const kn_gmatch *m);
bool kn_gmatch_final(kn_gmatch *m);

/* Why the last mask or step failed (e.g. the store ran out of memory), or NULL. */
const char *kn_gmatch_error(const kn_gmatch *m);

/* Whether that failure was the matcher's (out of memory, a limit of the state store) rather than a
 * fact of the language (no token can continue). */
bool kn_gmatch_failed(const kn_gmatch *m);

/* The status of that failure: KILN_ERR_NOMEM (memory, the store's cap), KILN_ERR_UNSUPPORTED (the
 * grammar is too ambiguous for the matcher at this point of the text: a property of the grammar),
 * KILN_OK when kn_gmatch_failed is false. kn_gmatch_new and kn_gmatch_accept return the same
 * statuses for the same failures. */
kiln_status kn_gmatch_fail_status(const kn_gmatch *m);

/* ---- switches and counters (tests and benchmarks) -------------------------------------------- */

/* Each switch selects a plainer path that must give the same masks, bit for bit. */
enum {
    KN_GMATCH_PLAIN = 1,      /* the reference: every token walked through the store byte by byte
                                 (no trie, no cache) */
    KN_GMATCH_NO_CACHE = 2,   /* no per-state mask cache */
    KN_GMATCH_NO_SUBTREE = 4, /* the trie walk never accepts a whole subtree at once */
};

typedef struct kn_gmatch_opts {
    unsigned flags;   /* KN_GMATCH_*; 0 = the fast path */
    size_t store_cap; /* the state store's memory cap (kn_gstore_new; 0 = its default) */
    size_t cache_cap; /* bytes of cached masks at most (0 = a default of 4 MiB) */
} kn_gmatch_opts;

/* kn_gmatch_new with options (NULL = the defaults kn_gmatch_new uses). */
kiln_status kn_gmatch_new_ex(const kiln_grammar *g, const kn_vtrie *t, bool strip_first_space,
                             const kn_gmatch_opts *opts, kn_gmatch **out);

typedef struct kn_gmatch_stats {
    uint64_t masks;       /* kn_gmatch_mask calls */
    uint64_t cache_hits;  /* of those, answered from the cache */
    uint64_t nodes;       /* trie nodes stepped by the walks */
    uint64_t subtrees;    /* subtrees accepted whole */
    uint64_t inside;      /* subtrees inside a character checked on from where every ending of it leads */
    uint64_t plain;       /* masks that allowed every plain token at once (vtrie.h) and walked the rest */
    uint64_t probes;      /* store steps spent learning what states do (byte classes, UTF-8) */
    uint64_t compactions; /* times the store was compacted (the cache cleared) */
} kn_gmatch_stats;

void kn_gmatch_get_stats(const kn_gmatch *m, kn_gmatch_stats *out);

#endif

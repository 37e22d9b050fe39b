/*
 * grammar.h - compiled grammars (struct kiln_grammar) and the byte-level matcher that runs them.
 *
 * Every constraint kiln enforces (a GBNF grammar, a JSON Schema, JSON mode) becomes one GBNF text
 * (schema.h converts schemas), which kn_gbnf_compile turns into a program over BYTES: each terminal
 * matches one byte from a 256-bit set, and a character class over code points is compiled into the
 * alternatives of its UTF-8 byte sequences. The program is immutable and reference counted, so one
 * compiled grammar serves any number of generations on any threads.
 *
 * Matching is a pushdown automaton over that program: a parser state is a set of stacks of program
 * positions (alternatives are followed in parallel). A kn_gstore interns stacks and sets of stacks
 * as small integer ids and caches transitions between them, so that stepping a known state over a
 * byte is a table lookup: the pushdown automaton is determinized lazily, only where generation
 * goes. A store is mutable and belongs to one generation (one thread at a time); its memory is
 * capped, and kn_gstore_compact forgets everything but the current state when the cap is reached.
 *
 * token masks (which vocabulary tokens may come next) are built on the store: see gmask.h.
 */
#ifndef KN_GRAMMAR_H
#define KN_GRAMMAR_H

#include "base/base.h"

/* Compiles GBNF text[len] (at most KILN_GRAMMAR_MAX_TEXT bytes) into a grammar with one reference.
 * Accepts the dialect llama.cpp's server accepts: rules "name ::= alternatives" (names of letters,
 * digits and '-'), "root" required, '#' comments to end of line, literals "..." with escapes
 * (\n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH), character classes [...] with ranges and negation
 * [^...], '.', groups (...), alternation |, postfix * + ? {m} {m,} {m,n} (* + ? in a row are one:
 * e++ is e+, e?? is e?, any other mix e*), and rule references;
 * and kiln's counters (grammar_prog.h): "@count" pushes a counter, "@+N{lo,hi}" adds N to the
 * nearest one and goes on only when lo <= its value <= hi, "@{lo,hi}" only checks it. A branch whose
 * guards can never pass after it began is the grammar writer's to avoid (generation would then stop
 * with "no token ... can continue"); kiln's own JSON Schema grammars never hold one.
 * Errors (KILN_ERR_INVALID_ARG, message "line L, column C: ..." through kn_error): a syntax error,
 * an undefined rule, a missing root, left recursion (a rule that can reach itself without consuming
 * a byte), a program larger than the cap, a repetition bound above KN_GBNF_MAX_REPEAT, a grammar
 * too ambiguous for the matcher ("the grammar is too ambiguous: ...", see kn_gprog_check). gbnf is kept
 * (a copy) as the grammar's kiln_grammar_gbnf. */
kiln_status kn_gbnf_compile(const char *text, size_t len, kiln_grammar **out);
/* kn_gbnf_compile with kn_gbnf_parse_ex's flags (grammar_prog.h): KN_GBNF_GENERATED for a grammar
 * kiln wrote itself. */
kiln_status kn_gbnf_compile_ex(const char *text, size_t len, unsigned flags, kiln_grammar **out);

/* The largest m and n of x{m}, x{m,} and x{m,n} (each copy costs program size and parser states). */
#define KN_GBNF_MAX_REPEAT 10000
/* The largest N, lo and hi of a counter operation (a counter costs no program size per value). */
#define KN_GBNF_MAX_COUNT  (1 << 24)

/* Sets a lazy grammar's triggers (kiln_grammar_params.triggers): copies the n strings (each 1 to
 * KILN_GRAMMAR_MAX_TRIGGER_LEN bytes, n at most KILN_GRAMMAR_MAX_TRIGGERS) into g, after checking that
 * the grammar's language has a sentence that begins with each. KILN_ERR_INVALID_ARG names a bad one. */
kiln_status kn_grammar_set_triggers(kiln_grammar *g, const char *const *triggers, size_t n);

/* Records on g what its schema enforces only approximately (kiln_grammar_approximation): a copy of
 * what, which names the keyword; NULL or "" records nothing. KILN_ERR_NOMEM when the copy fails. */
kiln_status kn_grammar_set_approx(kiln_grammar *g, const char *what);

/* The longest trigger of a lazy grammar, 0 for an eager one. */
size_t kn_grammar_trigger_max(const kiln_grammar *g);

/* Where a lazy grammar's constraint starts in text[len]: the trigger occurrence that completes
 * first (the one that starts earlier on a tie), as *start; false when no trigger occurs. */
bool kn_grammar_find_trigger(const kiln_grammar *g, const char *text, size_t len, size_t *start);

/* Adds a reference (atomic); kiln_grammar_free drops one. */
void kn_grammar_retain(const kiln_grammar *g);

/* ---- the matcher's state store ---------------------------------------------------------------- */

typedef struct kn_gstore kn_gstore;

#define KN_GS_DEAD (-1) /* no sentence of the language continues the bytes so far */

/* A store for grammar g (which it retains). bytes_cap bounds the memory the store's caches hold
 * (0 = a default of 64 MiB; at least 64 KiB): once kn_gstore_full(), the owner compacts
 * (kn_gstore_compact) at its next point where it holds a single state, instead of failing. Steps
 * keep working meanwhile, up to twice the cap, past which they fail (kn_gstore_failed). */
kiln_status kn_gstore_new(const kiln_grammar *g, size_t bytes_cap, kn_gstore **out);
void kn_gstore_free(kn_gstore *s);

/* The state before any byte. */
int32_t kn_gstore_start(kn_gstore *s);

/* The head of every store, read by the inline fast path of kn_gstore_step (the rest is private). */
typedef struct kn_gstore_head {
    int32_t **trans;  /* per state: 256 memoized transitions (0 = not yet known, 1 = dead, next + 2) */
    int32_t n_states; /* live state ids are 0 .. n_states-1 */
} kn_gstore_head;

/* kn_gstore_step without looking at the memo (the plain path): computes the transition, memoizes it
 * and returns it. */
int32_t kn_gstore_step_slow(kn_gstore *s, int32_t state, uint8_t b);

/* The state after byte b from state, or KN_GS_DEAD. Memoized: a second call with the same
 * arguments is one load (inline: a bounds check and two loads; the slow path only for a transition
 * not yet known). state is a live id of this store or KN_GS_DEAD (which steps to KN_GS_DEAD); a
 * stale id returns KN_GS_DEAD with kn_gstore_failed set. When memory runs out or a state would hold
 * more stacks than the matcher allows (a pathologically ambiguous grammar), returns KN_GS_DEAD and
 * sets kn_gstore_failed(). */
static inline int32_t kn_gstore_step(kn_gstore *s, int32_t state, uint8_t b) {
    const kn_gstore_head *h = (const kn_gstore_head *)(const void *)s;
    if ((uint32_t)state < (uint32_t)h->n_states) {
        int32_t e = h->trans[state][b];
        if (e) return e - 2;
    }
    return kn_gstore_step_slow(s, state, b);
}

#define KN_GS_MIXED (-2) /* kn_gstore_step_range: the bytes of the range lead different ways */

/* The state every byte of [lo, hi] leads to from state (KN_GS_DEAD when none continues), computed
 * in one step and memoized for every byte of the range when each stack of the state takes all of
 * its bytes or none (a class of continuation bytes, a run of letters); else KN_GS_MIXED (the bytes
 * may lead different ways: step them one by one). A failure as kn_gstore_step's. */
int32_t kn_gstore_step_range(kn_gstore *s, int32_t state, uint8_t lo, uint8_t hi);

/* The text so far is a whole sentence of the language. */
bool kn_gstore_accepting(const kn_gstore *s, int32_t state);

/* The state is accepting and no byte can follow it (the sentence is complete). */
bool kn_gstore_final(kn_gstore *s, int32_t state);

/* Bytes held by the store's caches, and whether the cap has been reached. */
size_t kn_gstore_bytes(const kn_gstore *s);
bool kn_gstore_full(const kn_gstore *s);

/* A state that allows the same texts of up to span bytes as state does: state with each counter's
 * value moved to the first value of its class (kn_gprog_count_class), so that the token masks of
 * a string with a maxLength share one cache entry while the count is far from its bounds. state
 * itself when no value moves, when the grammar's count step is unbounded, when the store is full
 * or when memory runs out (the answer is then exact, only not shared). Memoized per state. */
int32_t kn_gstore_canon(kn_gstore *s, int32_t state, int32_t span);

/* Forgets every state but keep, which gets a new id (returned); ids from before are invalid. */
int32_t kn_gstore_compact(kn_gstore *s, int32_t keep);

/* Why a KN_GS_DEAD was not a language fact (NULL if none was): the first failure (out of memory,
 * the cap, too many stacks) since the store was made or last compacted. A failed step is not
 * memoized; a memoized KN_GS_DEAD is always a language fact. */
const char *kn_gstore_failed(const kn_gstore *s);

/* What kind of failure kn_gstore_failed is: KILN_OK (none), KILN_ERR_UNSUPPORTED (a state would
 * hold too many stacks: the grammar is too ambiguous for the matcher on this text, a property of the
 * grammar) or KILN_ERR_NOMEM (memory or the store's cap). */
kiln_status kn_gstore_fail_status(const kn_gstore *s);

#endif

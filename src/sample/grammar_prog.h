/*
 * grammar_prog.h - the compiled program of a grammar, shared by the GBNF compiler (gbnf.c), the
 * grammar object (grammar.c) and the matcher's state store (gstore.c). Not for other components:
 * they use grammar.h.
 *
 * A program is a flat array of elements. Each rule has one or more alternatives; an alternative is
 * a run of elements ended by KN_GP_END. An element is a terminal (0 <= e < KN_GP_OP_BASE: the index
 * of a 256-bit byte set, matching one byte), a reference to a rule (<= -2, KN_GP_REF(rule)) or a
 * counter operation (>= KN_GP_OP_BASE, KN_GP_OP(i): entry i of the op table, matching the empty
 * string). A position in the program is an element index; a parser stack is a list of positions
 * (the top is where matching continues, the others are return positions just after the references
 * that pushed them) and counter frames.
 *
 * Counters bound lengths without a rule per length (GBNF "@count" and "@+N{lo,hi}"): a push op
 * puts a counter frame (value 0) under the rest of its alternative, popped with it; a guard op adds
 * inc to the nearest counter frame below it on the stack and lets the stack go on only when
 * lo <= value <= hi (a stack with no counter below a guard dies). A string of at most 2,083
 * characters in a 170-state format is then 170 rules, not their product with the lengths.
 *
 * Invariants the compiler guarantees and the store relies on:
 *   - every rule reachable from the root has at least one alternative, every byte set in a kept
 *     alternative is non-empty, and every rule can derive a finite byte string (unproductive
 *     alternatives are removed), so a stack whose top is a terminal can always be completed to a
 *     sentence: a state that is not dead is a prefix of some sentence;
 *   - no rule reaches itself without consuming a byte (no left recursion), so following references
 *     and popping finished alternatives without consuming a byte terminates;
 *   - generated repetition rules are right-recursive with the recursive reference last in its
 *     alternative (a tail call: the store replaces the frame instead of pushing one).
 */
#ifndef KN_GRAMMAR_PROG_H
#define KN_GRAMMAR_PROG_H

#include "sample/grammar.h"

#include <stdatomic.h>

#define KN_GP_END      (-1)
#define KN_GP_REF(r)   (-2 - (int32_t)(r)) /* element that calls rule r */
#define KN_GP_RULE(e)  (-2 - (e))          /* the rule a reference element calls */
#define KN_GP_OP_BASE  (1 << 29)           /* byte sets are numbered below it */
#define KN_GP_OP(i)    (KN_GP_OP_BASE + (int32_t)(i))
#define KN_GP_IS_OP(e) ((e) >= KN_GP_OP_BASE)

/* A counter operation: push a counter frame (value 0), or add inc to the nearest one and require
 * lo <= value <= hi. Values stay within [0, KN_GBNF_MAX_COUNT]. */
typedef struct kn_gop {
    int32_t push;
    int32_t inc, lo, hi;
} kn_gop;

/* Limits of the compiler (hostile grammars fail with a message instead of exhausting memory). */
#define KN_GBNF_MAX_NESTING 100       /* nested groups (...) at most */
#define KN_GBNF_MAX_PROGRAM (1 << 22) /* program elements at most, after expanding repetitions */

typedef struct kn_gprog {
    int32_t n_elem;
    const int32_t *elem; /* [n_elem]: set index, KN_GP_REF(rule) or KN_GP_END */
    int32_t n_rule;
    const int32_t *alt_off; /* [n_rule + 1]: rule r's alternatives are alt_pos[alt_off[r] .. alt_off[r+1]) */
    const int32_t *alt_pos; /* [alt_off[n_rule]]: the position where each alternative starts */
    int32_t n_set;
    const uint64_t (*set)[4]; /* [n_set][4]: bit b % 64 of word b / 64 = byte b matches */
    int32_t n_op;
    const kn_gop *op; /* [n_op]: the counter operations KN_GP_OP(i) elements name */
    int32_t root;
    /* what counter values behave alike (gcount.c): the most the moves between two bytes add to one
     * counter (-1: unbounded or not known), and the guards' boundaries (0, each lo, each hi + 1) */
    int32_t count_step;
    int32_t n_bound;
    const int32_t *bound; /* [n_bound] ascending */
    void *mem;            /* the one allocation holding the arrays above */
} kn_gprog;

/* Whether byte b is in set s of program p. */
static inline bool kn_gp_match(const kn_gprog *p, int32_t s, uint8_t b) { return (p->set[s][b >> 6] >> (b & 63)) & 1; }

/* Fills in p's count_step, n_bound and bound (which points at bound_buf[2 * n_op + 1]); false when
 * memory runs out. Called by the compiler once the program is laid out. */
bool kn_gprog_count_facts(kn_gprog *p, int32_t *bound_buf);

/* The first value of v's class: a counter at v and one at the returned value pass and fail every
 * guard alike over any text that adds at most ahead to them (ahead: the bytes looked ahead times
 * count_step). v itself when no other value is known to behave alike. */
int32_t kn_gprog_count_class(const kn_gprog *p, int32_t v, int64_t ahead);

/* Parses and compiles GBNF text[len] into *out (see kn_gbnf_compile in grammar.h for the dialect and
 * the errors). On failure nothing is allocated and kn_error holds "line L, column C: ...". The
 * program is left-factored (alternatives of a rule that begin alike share that beginning, so a
 * set of literals is a byte trie) and checked with kn_gprog_check. */
kiln_status kn_gbnf_parse(const char *text, size_t len, kn_gprog *out);
void kn_gprog_free(kn_gprog *p);

/* kn_gbnf_parse with switches: for tests, the program as written (unfactored, the reference the
 * factored one must agree with), without the ambiguity check; for a grammar kiln wrote itself (a
 * request's tools: one JSON Schema's rules per tool or parameter), text up to KN_GBNF_MAX_GENERATED
 * bytes, its work still bounded by the program cap. */
enum {
    KN_GBNF_NO_FACTOR = 1, /* do not left-factor the alternatives */
    KN_GBNF_NO_CHECK = 2,  /* do not run kn_gprog_check */
    KN_GBNF_GENERATED = 4, /* the text may be up to KN_GBNF_MAX_GENERATED bytes */
};
#define KN_GBNF_MAX_GENERATED (16u << 20)
kiln_status kn_gbnf_parse_ex(const char *text, size_t len, unsigned flags, kn_gprog *out);

/* Whether the matcher can run program p: its start state and the states a breadth-first walk
 * reaches over the first KN_GS_CHECK_STATES states (one byte per class of bytes that every ready
 * stack treats alike) each hold at most KN_GS_MAX_STACKS stacks. KILN_ERR_INVALID_ARG when one
 * would hold more, with why[cap] saying after which text; KILN_ERR_NOMEM when memory runs out;
 * KILN_OK otherwise (also when the walk stops at its bounds: states further on may still be too
 * ambiguous, and the matcher then fails with KILN_ERR_UNSUPPORTED, see kn_gstore_fail_status). */
kiln_status kn_gprog_check(const kn_gprog *p, char *why, size_t cap);
#define KN_GS_CHECK_STATES 64

struct kiln_grammar {
    atomic_int refs;
    char *gbnf; /* NUL-terminated copy of the source text */
    size_t gbnf_len;
    kn_gprog prog;
    char **triggers; /* [n_triggers] NUL-terminated copies: a lazy grammar's triggers (none: eager) */
    size_t n_triggers;
    size_t trigger_max; /* the longest trigger's length */
    char *approx;       /* NULL, or the first keyword of the schema(s) it came from that it enforces only
                           approximately (kiln_grammar_approximation) */
};

/* Diagnostics for tests: the largest stack depth among a state's stacks (0 for a state that holds
 * only the empty stack), and the number of stacks it holds. */
int32_t kn_gstore_depth(const kn_gstore *s, int32_t state);
int32_t kn_gstore_n_stacks(const kn_gstore *s, int32_t state);

/* The store refuses a state with more stacks than this (pathological ambiguity). */
#define KN_GS_MAX_STACKS 4096

#endif

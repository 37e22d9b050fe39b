/*
 * schema_internal.h - the pieces of the JSON Schema converter (schema.c) shared between its files.
 *
 * - kn_sbuf: a growable text buffer with a cap (the GBNF being written).
 * - kn_gout: the GBNF output: unique rule names and the rules' text.
 * - kn_cset / kn_nfa / kn_dfa (schema_regex.c, schema_regex_dfa.c; written out by schema_dfa_emit.c):
 *   sets of code points, a pattern's NFA and
 *   deterministic automata over code points. Every string constraint (pattern, format, length, enum
 *   of strings, property-name rules, `not` of those) becomes one automaton, so constraints intersect
 *   and complement exactly, and an automaton is written out as one GBNF rule per state, matching the
 *   string's JSON text (quotes and escapes included).
 * - schema_num.c: integer and number ranges as digit grammars.
 * - schema_format.c: the string formats kiln knows, as regular expressions.
 */
#ifndef KN_SCHEMA_INTERNAL_H
#define KN_SCHEMA_INTERNAL_H

#include "base/base.h"
#include "sample/schema.h"

#include <stdarg.h>

#define KN_SCHEMA_MAX_GBNF (16u << 20) /* bytes of GBNF a schema may compile to */
/* JSON whitespace, bounded: nothing, one space, or a newline and up to 48 blanks (indentation). */
#define KN_SCHEMA_WS_RULE  "ws ::= | \" \" | \"\\n\" [ \\t]{0,48}\n"
#define KN_REGEX_MAX_NFA   60000 /* NFA states one pattern may expand into */
/* The automaton bounds are #ifndef: the fuzzing build sets its own (the Makefile's FUZZ_DEFS). */
#ifndef KN_DFA_MAX_STATES
#define KN_DFA_MAX_STATES 6000 /* states of one string automaton */
#endif
/* Transitions of one string automaton: each is a code point range written into the grammar (a byte at
 * least), and a schema's grammar is at most KILN_GRAMMAR_MAX_TEXT (1 MiB); a pattern's class of 1,000
 * characters under a maxLength of 5,000 made 5,000,000 and took 7 s to refuse as a grammar too large. */
#ifndef KN_DFA_MAX_TRANS
#define KN_DFA_MAX_TRANS 500000
#endif
/* The bounds on one pattern's subset construction besides its states: the steps it may take (the
 * pattern positions, NFA states, it visits: those of the state it leaves and of the state it reaches,
 * for every interval of every state) and the positions its states may hold in all (their memory, 4
 * bytes each). A few thousand states of a few thousand positions each is quadratic: ">*>{4890}" took
 * 2.5 s to compile without them, "[^a]{2003}$" 2.2 s; at them a pattern costs a quarter second. */
#ifndef KN_DFA_MAX_WORK
#define KN_DFA_MAX_WORK 20000000
#endif
#ifndef KN_DFA_MAX_HELD
#define KN_DFA_MAX_HELD 4000000
#endif
#define KN_CP_MAX 0x10FFFFu

/* Every JSON escape of a character that needs one ('"', '\\', control characters) and of '/'. */
#define KN_SCHEMA_JESC_RULE "jesc ::= \"\\\\\" ( [\"\\\\/bfnrt] | \"u00\" [01] [0-9a-fA-F] )\n"

/* ---- text buffer ----------------------------------------------------------------------------- */

typedef struct kn_sbuf {
    char *p;
    size_t len, cap;
    size_t limit; /* bytes at most; past it `over` is set and nothing more is appended */
    bool over, nomem;
} kn_sbuf;

void kn_sbuf_init(kn_sbuf *b, size_t limit);
void kn_sbuf_free(kn_sbuf *b);
void kn_sbuf_put(kn_sbuf *b, const char *s, size_t n);
void kn_sbuf_puts(kn_sbuf *b, const char *s);
/* Appends o's text to b; o's overflow or failed allocation becomes b's. */
void kn_sbuf_cat(kn_sbuf *b, const kn_sbuf *o);
void kn_sbuf_printf(kn_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s[n] as the body of a GBNF literal (without the quotes): \" \\ and control bytes
 * escaped, everything else (UTF-8 included) as is. */
void kn_sbuf_gbnf_lit(kn_sbuf *b, const char *s, size_t n);

/* ---- GBNF output ----------------------------------------------------------------------------- */

typedef struct kn_gout {
    kn_sbuf text;   /* the rules written so far */
    char **names;   /* open hash set of rule names in use */
    unsigned *next; /* next[i]: the suffix kn_gout_name tries first for the hint names[i] */
    size_t nnames, capnames;
    int nrules;
    bool used_jesc; /* a rule refers to "jesc" (JSON escapes), which the caller writes */
} kn_gout;

void kn_gout_init(kn_gout *g);
void kn_gout_free(kn_gout *g);
/* A fresh rule name derived from hint (letters, digits, '-'; anything else becomes '-'), unique in
 * g. Returned string is owned by g. NULL when out of memory, which fails g. */
const char *kn_gout_name(kn_gout *g, const char *hint);
/* Appends "name ::= body\n" (a NULL body, a buffer that could not be allocated, fails g). */
void kn_gout_rule(kn_gout *g, const char *name, const char *body);

/* ---- code point sets --------------------------------------------------------------------------- */

typedef struct kn_crange {
    uint32_t lo, hi; /* inclusive */
} kn_crange;

typedef struct kn_cset {
    kn_crange *r; /* sorted, disjoint, not adjacent */
    int n, cap;
} kn_cset;

void kn_cset_free(kn_cset *s);
bool kn_cset_add(kn_cset *s, uint32_t lo, uint32_t hi); /* false: out of memory */
bool kn_cset_add_set(kn_cset *s, const kn_cset *o);
bool kn_cset_negate(kn_cset *s); /* complement within [0, KN_CP_MAX] */
bool kn_cset_has(const kn_cset *s, uint32_t c);

/* ---- automata over code points --------------------------------------------------------------- */

typedef struct kn_dtrans {
    uint32_t lo, hi; /* inclusive code point range */
    int to;
} kn_dtrans;

typedef struct kn_dstate {
    kn_dtrans *tr; /* sorted by lo, disjoint */
    int ntr, cap;
    bool acc;
} kn_dstate;

/* A deterministic automaton; state 0 is the start; a missing transition is a dead end. */
typedef struct kn_dfa {
    kn_dstate *s;
    int n, cap;
    int ntr; /* transitions in all (at most KN_DFA_MAX_TRANS) */
} kn_dfa;

void kn_dfa_free(kn_dfa *d);

/* Building automata (schema_dfa.c), for schema_regex.c's subset construction and the operations. */
/* A new state, its id; -1 when out of memory or past KN_DFA_MAX_STATES (kn_dfa_toobig). */
int kn_dfa_add_state(kn_dfa *d, bool acc);
/* Appends a transition of state st; ranges must come in increasing order; merges with the previous
 * one when adjacent with the same target. False when out of memory or past KN_DFA_MAX_TRANS
 * (kn_dfa_toobig). */
bool kn_dfa_add_tr(kn_dfa *d, int st, uint32_t lo, uint32_t hi, int to);
/* The state after code point c from state st, -1 when none. */
int kn_dfa_next(const kn_dfa *d, int st, uint32_t c);
/* d trimmed (every state can reach acceptance) and minimized, as a new automaton; d is freed. NULL
 * when out of memory. */
kn_dfa *kn_dfa_trim_min(kn_dfa *d);
void kn_dfa_toobig_clear(void); /* before an operation that reports through kn_dfa_toobig */
/* The UTF-8 code point at text[*pos] (pos < len), *pos moved past it; bytes that do not form one stand
 * for themselves. */
uint32_t kn_cp_next(const char *text, size_t len, size_t *pos);

/* Sorts v[0..n) ascending; tmp has room for n values. A radix sort, one pass per byte in which the
 * values differ: the automata sort thousands of range ends and reversed edges per state. */
void kn_sort_u64(uint64_t *v, size_t n, uint64_t *tmp);

/* A hash map from int sequences (sets of states, pairs) to ids. */
typedef struct kn_imap {
    int **keys; /* keys[i][0] = length, then the ints */
    int *vals;
    size_t cap, n;
} kn_imap;
void kn_imap_free(kn_imap *m);
/* The id of k[0..n), -1 when absent. */
int kn_imap_get(const kn_imap *m, const int *k, int n);
const int *kn_imap_put(kn_imap *m, const int *k, int n, int v);

/* A Thompson NFA over code points, as schema_regex.c parses a pattern into it: edges on nothing (EPS),
 * on a set of code points (SET, an index into sets) and on the assertions ^ (BOL) and $ (EOL). */
enum { KN_NE_EPS, KN_NE_SET, KN_NE_BOL, KN_NE_EOL };

typedef struct kn_nedge {
    int kind, to, set; /* set: index into kn_nfa.sets (KN_NE_SET) */
} kn_nedge;

typedef struct kn_nstate {
    kn_nedge *e;
    int n, cap;
} kn_nstate;

typedef struct kn_nfa {
    kn_nstate *s;
    int n, cap;
    kn_cset *sets; /* distinct: a class parsed again (each copy of a counted atom) shares its id */
    int nsets, capsets;
    kn_imap setids; /* a set's ranges (lo, hi, lo, hi, ...) -> its index in sets */
    bool nomem, toobig;
} kn_nfa;
/* The DFA of NFA a (start, final state), trimmed and minimized (schema_regex_dfa.c); NULL when out of
 * memory, when it would pass KN_DFA_MAX_STATES or KN_DFA_MAX_TRANS (kn_dfa_toobig), or when building it
 * would take more than KN_DFA_MAX_WORK steps or its states would hold more than KN_DFA_MAX_HELD NFA
 * states in all (*too_complex). */
kn_dfa *kn_nfa_subset(const kn_nfa *a, int start, int final, bool *too_complex);

/* The strings in which the ECMAScript regex pattern finds a match (JSON Schema's `pattern`: a
 * search, anchored only where ^ and $ say so). NULL on error with err[errcap] filled ("unsupported
 * lookahead at offset 3", ...). */
kn_dfa *kn_dfa_regex(const char *pattern, char *err, size_t errcap);
/* Exactly the strings s[0..n-1] (UTF-8). NULL when out of memory. */
kn_dfa *kn_dfa_literals(const char *const *s, const size_t *len, int n);
/* Every string of min..max code points (max < 0: no maximum). */
kn_dfa *kn_dfa_length(long min, long max);
/* Intersection, complement (within all strings), both as new automata; NULL when out of memory or
 * the result would pass KN_DFA_MAX_STATES or KN_DFA_MAX_TRANS. Results are trimmed (every state can
 * reach acceptance) and minimized. */
kn_dfa *kn_dfa_and(const kn_dfa *a, const kn_dfa *b);
kn_dfa *kn_dfa_not(const kn_dfa *a);
/* Whether the latest kn_dfa_literals, _length, _and or _not of this thread that returned NULL did so
 * because the automaton would pass KN_DFA_MAX_STATES or KN_DFA_MAX_TRANS (a limit of the input: a
 * schema error) rather than for want of memory. */
bool kn_dfa_toobig(void);
/* cls[i] = the equivalence class (0 .. result-1) of each state i with live[i] (it can reach
 * acceptance), -1 for the others; states of one class accept the same strings. Returns the number
 * of classes, -1 when out of memory (schema_dfa_min.c). */
int kn_dfa_classes(const kn_dfa *d, const bool *live, int *cls);
bool kn_dfa_is_empty(const kn_dfa *d);
/* Whether the automaton accepts every string (so it constrains nothing). */
bool kn_dfa_is_all(const kn_dfa *d);
bool kn_dfa_match(const kn_dfa *d, const char *s, size_t n);

/* The guards of a string of min..max characters in d's language (schema_dfa_len.c): lo[q], hi[q]
 * (arrays of d->n) are the counts with which state q may be entered (lo > hi: never). KN_LEN_OK
 * when they are exact (every entry they allow can be completed, every completion is allowed);
 * KN_LEN_EMPTY when no such string exists; KN_LEN_NO when guards cannot say it exactly (a gap in
 * the completions' lengths, or more work than the bound: take the product); KN_LEN_NOMEM. */
typedef enum kn_len_guards { KN_LEN_OK, KN_LEN_EMPTY, KN_LEN_NO, KN_LEN_NOMEM } kn_len_guards;
kn_len_guards kn_dfa_len_guards(const kn_dfa *d, long min, long max, int *lo, int *hi);

/* A counted string for kn_dfa_emit_string: the length range and kn_dfa_len_guards' guards. */
typedef struct kn_dfa_count {
    long min, max;
    const int *lo, *hi;
} kn_dfa_count;

/* Writes the rules of a JSON string (from its opening quote to its closing one) whose content is in
 * d's language, one rule per state named prefix-N; returns the name of the first (owned by g), NULL
 * on error. A character is written as itself, or as JSON's escapes where it needs one (\" \\ \/ \b
 * \f \n \r \t and \u00XX for control characters); d must not be empty. The rules may refer to
 * "jesc" (sets g->used_jesc): KN_SCHEMA_JESC_RULE, which the caller writes once. With cnt (else
 * NULL), the content is also cnt->min..cnt->max characters long: a counter counts them, each state
 * entered under its guard. */
const char *kn_dfa_emit_string(kn_gout *g, const kn_dfa *d, const char *hint, const kn_dfa_count *cnt);

/* ---- numbers (schema_num.c) ---------------------------------------------------------------------- */

/* A bound of a numeric range: absent, or a value with its exclusiveness. */
typedef struct kn_nbound {
    bool set, excl;
    double v;
} kn_nbound;

/* Writes the body of a rule matching the JSON numbers in [lo, hi] to b (the digits of a long bound may
 * take rules of their own, written to g): integers only when integer
 * (no fraction, no exponent), else a decimal number; with a bound, no exponent is written (a subset
 * of JSON's notations for the same values). mult10: >= 0 limits fractions to that many digits
 * (multipleOf 10^-mult10), < 0 = no limit. A bound of a number with more fraction digits than kiln
 * compares is widened to an integer: *widened is then 1 (lo, first) or 2 (hi); else it is left as is.
 * Returns false when the range is empty. */
bool kn_num_body(kn_sbuf *b, kn_gout *g, kn_nbound lo, kn_nbound hi, bool integer, int mult10, int *widened);

/* ---- formats (schema_format.c) --------------------------------------------------------------- */

typedef enum kn_fmt_kind {
    KN_FMT_UNKNOWN, /* not a format JSON Schema defines: an annotation, ignored */
    KN_FMT_EXACT,   /* regex gives exactly the format's strings */
    KN_FMT_APPROX,  /* regex gives the format's usual shape (documented approximation) */
    KN_FMT_IGNORED, /* a format JSON Schema defines that kiln does not check (documented) */
} kn_fmt_kind;

/* The regex of format name (NULL unless EXACT or APPROX), and the length in characters the format
 * allows at most (hostname's 253; -1: none), which the regex does not say. */
kn_fmt_kind kn_format_regex(const char *name, const char **regex, long *maxlen);

/* ---- the converter's walk (schema.c, schema_merge.c, schema_emit.c) ------------------------------ */

#include <jansson.h>

enum { SKIP_ANYOF = 1, SKIP_ONEOF = 2, FLAT = 4 }; /* FLAT: its $ref, allOf, dependencies are in the list */

/* One schema object applying at a position, with the JSON pointer it was reached by. */
typedef struct sref {
    json_t *s;
    const char *path;
    unsigned skip; /* combinators already distributed */
} sref;

typedef struct conj {
    sref *v;
    int n, cap;
} conj;

typedef struct memo {
    uintptr_t *key; /* pointer, skip pairs, sorted */
    int n;
    const char *name; /* NULL: the language is empty */
} memo;

typedef struct patcache {
    const json_t *obj; /* a patternProperties object */
    const char *key;
    kn_dfa *dfa;
} patcache;

typedef struct keycache {
    char *sig; /* the sorted declared names, as JSON */
    const char *name;
} keycache;

enum { U_VALUE = 1, U_STRING = 2, U_NUMBER = 4, U_NEVER = 8, U_CHAR = 16 };

typedef struct ctx {
    json_t *root;
    bool strict;
    kn_gout g;
    memo *m;
    int nm, capm;
    char **paths;
    int npaths, cappaths;
    patcache *pc;
    int npc, cappc;
    bool failed;
    kiln_status st;
    char err[KN_SCHEMA_ERRMSG_MAX];
    bool approx;
    char approx_what[KN_SCHEMA_ERRMSG_MAX];
    int calls;
    unsigned used;
    keycache keys[256];
    int nkeys;
    bool cheap_keys;  /* additional property names need not differ from the declared ones */
    bool too_big;     /* the rules outgrew KILN_GRAMMAR_MAX_TEXT: the compile stopped there */
    long oneof_steps; /* schemas ks_oneof_disjoint looked at so far */
} ctx;

#define MAX_COMPILES 20000 /* conjunctions compiled per schema at most */
#define MAX_DEPTH    64    /* $ref and allOf chains, schema nesting */

#define SYNTH_DEPS "$kiln:dependencies" /* where the anyOf form of dependencies is kept */
#define SYNTH_NOT  "$kiln:not"          /* where a `not` rewritten by De Morgan's laws is kept */
#define SYNTH_IF   "$kiln:if"           /* where if / then / else as anyOf is kept */

/* Annotations and keywords handled outside the merge; keywords refused. */
extern const char *const ks_passive_kw[];
extern const size_t ks_n_passive_kw;
extern const char *const ks_refused_kw[];
extern const size_t ks_n_refused_kw;

enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_INT = 32, T_FRAC = 64, T_ALL = 127 };
#define T_NUM (T_INT | T_FRAC)

/* The merged constraints of a conjunction. */
typedef struct node {
    unsigned types;
    json_t *enums; /* allowed values, or NULL for any */
    kn_dfa *str;   /* allowed strings (content), or NULL for any */
    long minlen, maxlen;
    kn_nbound lo, hi;
    int mult10;
    conj osrc;    /* objects with properties / patternProperties / additionalProperties */
    json_t *req;  /* required names (array of strings) */
    kn_dfa *keys; /* propertyNames, or NULL */
    long minprops, maxprops;
    conj asrc; /* objects with items / prefixItems / additionalItems */
    long minitems, maxitems;
    bool unique;
    const char *path, *unique_path;
} node;

/* Resolves the $ref value ref of schema from (a local reference: "#", a JSON pointer, an anchor)
 * into *out. False when it does not resolve, after ks_fail naming from's path unless quiet (a quiet
 * resolution gives an anchor's target the path ""). */
bool ks_resolve(ctx *c, sref from, const json_t *ref, sref *out, bool quiet);
/* Whether no JSON value is valid under two of the oneOf branches in list, each conjoined with the
 * schemas of sib (the oneOf's own schema and the rest of its conjunction), so that anyOf enforces it
 * exactly: as far as their types, values and the values of the properties they both require show
 * (schema_oneof.c). False when not shown, never for branches that share a value. */
bool ks_oneof_disjoint(ctx *c, const json_t *list, const conj *sib);

/* Errors and approximations: the first of each is kept, with the JSON pointer and keyword. */
void ks_fail(ctx *c, const char *path, const char *kw, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void ks_nomem(ctx *c);
void ks_approx(ctx *c, const char *path, const char *kw, const char *how);
/* JSON pointers (owned by c) and conjunction lists. */
const char *ks_path_join(ctx *c, const char *base, const char *key);
const char *ks_path_idx(ctx *c, const char *base, const char *kw, size_t i);
void ks_conj_add(ctx *c, conj *k, sref x);
void ks_conj_free(conj *k);
conj ks_conj_copy(ctx *c, const conj *k);
sref ks_mk(json_t *s, const char *path);
int ks_hexdig(char c);
bool ks_in_list(const char *k, const char *const *list, size_t n);
bool ks_not_rewrites(const json_t *n);
unsigned ks_type_bit(const char *t);
bool ks_is_integral(const json_t *v);
unsigned ks_value_type(const json_t *v);
bool ks_values_equal(const json_t *a, const json_t *b);
bool ks_nonneg_int(const json_t *v, long *out);
void ks_node_free(node *n);
void ks_dfa_and_into(ctx *c, kn_dfa **slot, kn_dfa *d, const char *path, const char *kw);
kn_dfa *ks_pattern_dfa(ctx *c, const char *pattern, const char *path, const char *kw);
/* Exactly the strings of the JSON array strs; NULL after ks_dfa_fail(c, path, kw, what). */
kn_dfa *ks_literals_dfa(ctx *c, json_t *strs, const char *path, const char *kw, const char *what);
/* Reports a kn_dfa_ operation's NULL: at the automaton limit a schema error at path/kw ("<what> need
 * more than N automaton states"), else out of memory. */
void ks_dfa_fail(ctx *c, const char *path, const char *kw, const char *what);
/* Merges the keywords of schema object x into n (schema_merge.c). */
void ks_merge(ctx *c, node *n, sref x);
/* The name of a shared rule (value, string, number, never, char), marking it to be written. */
const char *ks_use(ctx *c, unsigned what);
void ks_value_text(ctx *c, kn_sbuf *b, const json_t *v);
bool ks_value_ok(const node *n, const json_t *v);
/* The grammar of n's values of one kind (schema_emit.c): a rule name, or the alternative appended to
 * b; NULL / false when n admits no such value. */
const char *ks_emit_enum(ctx *c, node *n, const char *hint);
bool ks_emit_string(ctx *c, node *n, kn_sbuf *b, const char *hint);
bool ks_emit_object(ctx *c, node *n, kn_sbuf *b, const char *hint, int depth);
bool ks_emit_array(ctx *c, node *n, kn_sbuf *b, int depth);
/* The values valid under every schema of in when they are a finite list of scalars (an enum or const
 * with no anyOf / oneOf left to distribute): a new array without two equal values; else NULL. */
json_t *ks_conj_values(ctx *c, const conj *in);
/* An array of distinct values of vals (scalars, pairwise different), lo to hi of them (hi < 0: any
 * number), in any order, into b: "[" ws ... "]", one rule per set of values written so far. 1 when
 * written, 0 when no such array exists (lo above the number of values), -1 when the sets would take
 * too many rules (the caller enforces the array without uniqueness then). (schema_unique.c) */
int ks_emit_unique(ctx *c, const json_t *vals, long lo, long hi, kn_sbuf *b);
/* The rule of the values valid under every schema of in; NULL when none is (or on failure). */
const char *ks_compile(ctx *c, conj *in, const char *hint, int depth);

#endif

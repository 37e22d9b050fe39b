/*
 * schema_internal.h - the pieces of the JSON Schema converter (schema.c) shared between its files.
 *
 * - kn_sbuf: a growable text buffer with a cap (the GBNF being written).
 * - kn_gout: the GBNF output: unique rule names and the rules' text.
 * - kn_cset / kn_dfa (schema_regex.c): sets of code points and deterministic automata over code
 *   points. Every string constraint (pattern, format, length, enum of strings, property-name rules,
 *   `not` of those) becomes one automaton, so constraints intersect and complement exactly, and an
 *   automaton is written out as one GBNF rule per state, matching the string's JSON text (quotes and
 *   escapes included).
 * - schema_num.c: integer and number ranges as digit grammars.
 * - schema_format.c: the string formats kiln knows, as regular expressions.
 */
#ifndef KN_SCHEMA_INTERNAL_H
#define KN_SCHEMA_INTERNAL_H

#include "base/base.h"

#include <stdarg.h>

#define KN_SCHEMA_MAX_GBNF   (16u << 20) /* bytes of GBNF a schema may compile to */
/* JSON whitespace, bounded: nothing, one space, or a newline and up to 48 blanks (indentation). */
#define KN_SCHEMA_WS_RULE    "ws ::= | \" \" | \"\\n\" [ \\t]{0,48}\n"
#define KN_REGEX_MAX_NFA     60000 /* NFA states one pattern may expand into */
#define KN_DFA_MAX_STATES    6000  /* states of one string automaton */
#define KN_CP_MAX            0x10FFFFu
#define KN_SCHEMA_ERRMSG_MAX 400

/* What a conversion did besides succeeding (for tests and tools). */
typedef struct kn_schema_info {
    bool approx;                            /* some keyword was enforced approximately */
    char approx_what[KN_SCHEMA_ERRMSG_MAX]; /* the first such: "#/pointer: keyword: how" */
    int rules;                              /* rules written */
} kn_schema_info;

/* kn_schema_to_gbnf, also filling *info (may be NULL). */
kiln_status kn_schema_to_gbnf_info(const char *json, size_t len, bool strict, char **gbnf, kn_schema_info *info);

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
void kn_sbuf_printf(kn_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s[n] as the body of a GBNF literal (without the quotes): \" \\ and control bytes
 * escaped, everything else (UTF-8 included) as is. */
void kn_sbuf_gbnf_lit(kn_sbuf *b, const char *s, size_t n);

/* ---- GBNF output ----------------------------------------------------------------------------- */

typedef struct kn_gout {
    kn_sbuf text; /* the rules written so far */
    char **names; /* open hash set of rule names in use */
    size_t nnames, capnames;
    int nrules;
    bool used_jesc; /* a rule refers to "jesc" (JSON escapes), which the caller writes */
} kn_gout;

void kn_gout_init(kn_gout *g);
void kn_gout_free(kn_gout *g);
/* A fresh rule name derived from hint (letters, digits, '-'; anything else becomes '-'), unique in
 * g. Returned string is owned by g. NULL when out of memory. */
const char *kn_gout_name(kn_gout *g, const char *hint);
/* Appends "name ::= body\n". */
void kn_gout_rule(kn_gout *g, const char *name, const char *body);
bool kn_gout_failed(const kn_gout *g);

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
} kn_dfa;

void kn_dfa_free(kn_dfa *d);

/* The strings in which the ECMAScript regex pattern finds a match (JSON Schema's `pattern`: a
 * search, anchored only where ^ and $ say so). NULL on error with err[errcap] filled ("unsupported
 * lookahead at offset 3", ...). */
kn_dfa *kn_dfa_regex(const char *pattern, char *err, size_t errcap);
/* Exactly the strings s[0..n-1] (UTF-8). NULL when out of memory. */
kn_dfa *kn_dfa_literals(const char *const *s, const size_t *len, int n);
/* Every string of min..max code points (max < 0: no maximum). */
kn_dfa *kn_dfa_length(long min, long max);
/* Intersection, complement (within all strings), both as new automata; NULL when out of memory or
 * the result would pass KN_DFA_MAX_STATES. Results are trimmed (every state can reach acceptance)
 * and minimized. */
kn_dfa *kn_dfa_and(const kn_dfa *a, const kn_dfa *b);
kn_dfa *kn_dfa_not(const kn_dfa *a);
bool kn_dfa_is_empty(const kn_dfa *d);
/* Whether the automaton accepts every string (so it constrains nothing). */
bool kn_dfa_is_all(const kn_dfa *d);
bool kn_dfa_match(const kn_dfa *d, const char *s, size_t n);

/* Writes the rules of a JSON string (from its opening quote to its closing one) whose content is in
 * d's language, one rule per state named prefix-N; returns the name of the first (owned by g), NULL
 * on error. A character is written as itself, or as JSON's escapes where it needs one (\" \\ \/ \b
 * \f \n \r \t and \u00XX for control characters); d must not be empty. The rules may refer to
 * "jesc" (sets g->used_jesc): KN_SCHEMA_JESC_RULE, which the caller writes once. */
const char *kn_dfa_emit_string(kn_gout *g, const kn_dfa *d, const char *hint);

/* ---- numbers (schema_num.c) ---------------------------------------------------------------------- */

/* A bound of a numeric range: absent, or a value with its exclusiveness. */
typedef struct kn_nbound {
    bool set, excl;
    double v;
} kn_nbound;

/* Writes the body of a rule matching the JSON numbers in [lo, hi] to b: integers only when integer
 * (no fraction, no exponent), else a decimal number; with a bound, no exponent is written (a subset
 * of JSON's notations for the same values). mult10: >= 0 limits fractions to that many digits
 * (multipleOf 10^-mult10), < 0 = no limit. *approx is set when a bound was not an integer and was
 * widened to one (numbers) or rounded inward exactly (integers do not need that: exact). Returns
 * false when the range is empty. */
bool kn_num_body(kn_sbuf *b, kn_nbound lo, kn_nbound hi, bool integer, int mult10, bool *approx);

/* ---- formats (schema_format.c) --------------------------------------------------------------- */

typedef enum kn_fmt_kind {
    KN_FMT_UNKNOWN, /* not a format JSON Schema defines: an annotation, ignored */
    KN_FMT_EXACT,   /* regex gives exactly the format's strings */
    KN_FMT_APPROX,  /* regex gives the format's usual shape (documented approximation) */
    KN_FMT_IGNORED, /* a format JSON Schema defines that kiln does not check (documented) */
} kn_fmt_kind;

/* The regex of format name (NULL unless EXACT or APPROX). */
kn_fmt_kind kn_format_regex(const char *name, const char **regex);

#endif

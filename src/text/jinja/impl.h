/*
 * impl.h - what the files of kiln's Jinja2 interpreter share (see jinja.h for the file map):
 * the value model, the syntax tree, the renderer's state and the entry points of each file.
 * Nothing here is visible outside src/text/jinja_*.c.
 *
 * Values. A kn_jv is a small tagged union passed by value. Strings, lists, tuples, dicts,
 * one-shot iterators ("generators") and bound methods live on the heap with a reference count;
 * they are immutable once built, so they never form cycles. So is the loop variable of a for
 * (refcounted, freed when the loop ends unless it was stored somewhere). Counts are not atomic:
 * values belong to one render on one thread. Literals of a parsed template are "immortal" (count
 * KN_J_IMMORTAL, never changed), which is what lets several threads render one template at once.
 * Namespaces, macros, loop objects and scopes are mutable and may form cycles (a macro stored in
 * the scope it closes over); they are "tracked": owned by the render and freed when it ends.
 *
 * Ownership convention: a function that produces a kn_jv into *out gives the caller one
 * reference; arguments are borrowed unless the comment says "consumed".
 */
#ifndef KN_JINJA_IMPL_H
#define KN_JINJA_IMPL_H

#include "text/jinja/jinja.h"
#include "text/unicode.h"

#include <stdarg.h>

/* ---- values ---------------------------------------------------------------------------------- */

typedef enum kn_jtype {
    KN_J_UNDEF = 0, /* jinja2.Undefined; u.s: optional hint for error messages */
    KN_J_NONE,
    KN_J_BOOL,
    KN_J_INT, /* int64 (Python ints beyond it are an error) */
    KN_J_FLOAT,
    KN_J_STR,
    KN_J_LIST,
    KN_J_TUPLE,  /* same layout as a list */
    KN_J_DICT,   /* insertion-ordered */
    KN_J_ITER,   /* one-shot iterator: the results of map/select/items..., consumed once */
    KN_J_NS,     /* namespace(): mutable attributes (tracked) */
    KN_J_MACRO,  /* a macro or a call block's caller (tracked) */
    KN_J_FUNC,   /* a global function (range, namespace, ...): u.i = its id */
    KN_J_METHOD, /* a bound method: "abc".upper, d.get */
    KN_J_LOOP,   /* the loop variable of a for */
} kn_jtype;

#define KN_J_IMMORTAL UINT32_MAX

typedef struct kn_jstr {
    uint32_t rc;
    uint8_t safe;  /* markupsafe.Markup: + escapes the other operand */
    uint8_t ascii; /* all bytes < 0x80: code point index = byte index */
    size_t len;
    char s[]; /* NUL-terminated */
} kn_jstr;

typedef struct kn_jv kn_jv;

typedef struct kn_jlist {
    uint32_t rc;
    uint16_t depth; /* 1 + the deepest element's depth (bounded by KN_JINJA_MAX_VALUE_DEPTH) */
    size_t n, cap;
    kn_jv *v;
    int64_t range_args[3]; /* start, stop, step of a range() (see kn_jv.range) */
} kn_jlist;

typedef struct kn_jdict {
    uint32_t rc;
    uint16_t depth;
    size_t n, cap;
    kn_jv *k, *v;
    uint32_t *idx; /* open-addressing index of entry + 1 (0 = empty), built past 8 entries */
    size_t idx_cap;
} kn_jdict;

typedef struct kn_jiter {
    uint32_t rc;
    uint16_t depth;
    kn_jlist *l; /* the items, computed eagerly */
    size_t pos;  /* items before pos were consumed */
} kn_jiter;

typedef struct kn_jmethod kn_jmethod;
typedef struct kn_jns kn_jns;
typedef struct kn_jmacro kn_jmacro;
typedef struct kn_jloop kn_jloop;

struct kn_jv {
    uint8_t t;      /* kn_jtype */
    uint8_t unsafe; /* KN_J_UNDEF from an attribute the sandbox blocks (calling it fails) */
    uint8_t range;  /* KN_J_TUPLE made by range(): prints as range(a, b), not JSON-able */
    union {
        bool b;
        int64_t i;
        double f;
        kn_jstr *s;
        kn_jlist *l;
        kn_jdict *d;
        kn_jiter *it;
        kn_jmethod *m;
        kn_jns *ns;
        kn_jmacro *mac;
        kn_jloop *loop;
        void *p;
    } u;
};

struct kn_jmethod {
    uint32_t rc;
    uint16_t depth;
    uint16_t id; /* method id (methods.c) */
    kn_jv self;
};

/* ---- syntax tree ----------------------------------------------------------------------------- */

typedef struct kn_jnode kn_jnode;
typedef struct kn_jnodes {
    kn_jnode **v;
    uint32_t n;
} kn_jnodes;

typedef enum kn_jkind {
    /* expressions */
    KN_N_LIT,    /* lit */
    KN_N_NAME,   /* sym */
    KN_N_INPUT,  /* the value a filter block or block set feeds its filter chain */
    KN_N_LIST,   /* kids: items */
    KN_N_TUPLE,  /* kids: items */
    KN_N_DICT,   /* kids: keys, kids2: values */
    KN_N_ATTR,   /* a.lit (lit: the name) */
    KN_N_ITEM,   /* a[b] */
    KN_N_SLICE,  /* a[kids[0]:kids[1]:kids[2]] (entries may be NULL) */
    KN_N_CALL,   /* a(kids..., names[i]=kids2[i]...) */
    KN_N_FILTER, /* a|filter id(kids..., names=kids2...) */
    KN_N_TEST,   /* a is [not] test id(...); op: negated */
    KN_N_NOT,    /* not a */
    KN_N_NEG,    /* -a */
    KN_N_POS,    /* +a */
    KN_N_BIN,    /* a op b (op: KN_OP_ADD...) */
    KN_N_AND,    /* a and b */
    KN_N_OR,     /* a or b */
    KN_N_CMP,    /* a ops[0] kids[0] ops[1] kids[1] ... (chained like Python) */
    KN_N_COND,   /* a if b else c (c may be NULL) */
    /* statements */
    KN_N_TEXT,        /* template data: lit */
    KN_N_PRINT,       /* {{ a }} */
    KN_N_IF,          /* if a: kids else kids2 (an elif is an IF alone in kids2) */
    KN_N_FOR,         /* for syms in a [if b]: kids else kids2; op: recursive */
    KN_N_SET,         /* syms = b, or (op == 1) sym.lit = b */
    KN_N_SETBLOCK,    /* syms / sym.lit = rendered kids, through filter chain c (may be NULL) */
    KN_N_MACRO,       /* macro sym(syms = kids2 defaults): kids; op: KN_MAC_* bits */
    KN_N_CALLBLOCK,   /* call(syms = kids2 defaults) a: kids */
    KN_N_FILTERBLOCK, /* filter c: kids */
    KN_N_WITH,        /* with syms = kids2: kids */
    KN_N_BREAK,
    KN_N_CONTINUE,
} kn_jkind;

enum {
    KN_OP_ADD = 1,
    KN_OP_SUB,
    KN_OP_MUL,
    KN_OP_DIV,
    KN_OP_FLOORDIV,
    KN_OP_MOD,
    KN_OP_POW,
    KN_OP_CONCAT,
    KN_OP_EQ,
    KN_OP_NE,
    KN_OP_LT,
    KN_OP_LE,
    KN_OP_GT,
    KN_OP_GE,
    KN_OP_IN,
    KN_OP_NOTIN,
};

/* Macro flags: the body refers to caller / varargs / kwargs. */
enum { KN_MAC_CALLER = 1, KN_MAC_VARARGS = 2, KN_MAC_KWARGS = 4 };

struct kn_jnode {
    uint8_t kind; /* kn_jkind */
    uint8_t op;
    uint16_t id;  /* FILTER / TEST: builtin index */
    uint32_t off; /* source offset, for error positions */
    int32_t sym;  /* NAME, MACRO, SET of an attribute: symbol */
    kn_jnode *a, *b, *c;
    kn_jnodes kids, kids2;
    kn_jstr **names; /* keyword names of CALL / FILTER / TEST (kids2.n of them) */
    uint8_t *ops;    /* CMP: kids.n operators */
    int32_t *syms;   /* FOR / SET / MACRO / CALLBLOCK / WITH: names */
    uint32_t n_syms;
    kn_jv lit;
};

/* A symbol: an identifier of the template, interned. */
typedef struct kn_jsym {
    kn_jstr *name;  /* immortal */
    int16_t global; /* global function id, -1 if none */
} kn_jsym;

struct kn_jtmpl {
    char *src; /* normalized source (newlines are \n), for error positions */
    size_t len;
    kn_jnodes body;
    kn_jsym *syms;
    uint32_t n_syms, cap_syms;
    uint32_t *sym_idx; /* open-addressing index of symbol + 1 */
    uint32_t sym_idx_cap;
    int32_t sym_loop, sym_caller, sym_varargs, sym_kwargs;
    void *arena;    /* nodes and arrays (parse.c) */
    kn_jstr **lits; /* immortal strings to free with the template */
    size_t n_lits, cap_lits;
};

/* The symbol named s[0..n), -1 when the template never mentions it (parse.c). */
int32_t kn_jsym_find(const kn_jtmpl *t, const char *s, size_t n);

/* ---- lexer (lex.c) --------------------------------------------------------------------- */

typedef enum kn_jtokt {
    KN_T_EOF,
    KN_T_DATA,
    KN_T_VAR_BEGIN,
    KN_T_VAR_END,
    KN_T_BLOCK_BEGIN,
    KN_T_BLOCK_END,
    KN_T_NAME,
    KN_T_STRING,
    KN_T_INT,
    KN_T_FLOAT,
    KN_T_OP,
} kn_jtokt;

/* Operator tokens. */
enum {
    KN_TO_ADD = 1,
    KN_TO_SUB,
    KN_TO_MUL,
    KN_TO_DIV,
    KN_TO_FLOORDIV,
    KN_TO_MOD,
    KN_TO_POW,
    KN_TO_TILDE,
    KN_TO_LBRACKET,
    KN_TO_RBRACKET,
    KN_TO_LPAREN,
    KN_TO_RPAREN,
    KN_TO_LBRACE,
    KN_TO_RBRACE,
    KN_TO_EQ,
    KN_TO_NE,
    KN_TO_GT,
    KN_TO_GE,
    KN_TO_LT,
    KN_TO_LE,
    KN_TO_ASSIGN,
    KN_TO_DOT,
    KN_TO_COLON,
    KN_TO_PIPE,
    KN_TO_COMMA,
    KN_TO_SEMICOLON,
};

typedef struct kn_jtok {
    uint8_t type;      /* kn_jtokt */
    uint8_t op;        /* KN_T_OP: KN_TO_* */
    uint8_t raw;       /* KN_T_DATA from a raw block */
    uint32_t off, len; /* bytes of the source (DATA: the text after whitespace control) */
} kn_jtok;

typedef struct kn_jtoks {
    kn_jtok *v;
    size_t n, cap;
} kn_jtoks;

/* Normalizes newlines (\r\n and \r become \n) and drops one trailing newline, as Jinja2 does
 * without keep_trailing_newline. Returns a malloc'd NUL-terminated copy (length in *out_len) or
 * NULL when memory runs out. */
char *kn_jlex_normalize(const char *src, size_t len, size_t *out_len);

/* Splits the normalized source into tokens, applying whitespace control ({%- -%}), lstrip_blocks
 * and trim_blocks, skipping comments and turning raw blocks into data. On a lexical error records
 * "line L, column C: ..." with kn_error and returns KILN_ERR_FORMAT. */
kiln_status kn_jlex(const char *src, size_t len, kn_jtoks *out);

/* 1-based line and column (in characters) of byte offset off of src. */
void kn_jlinecol(const char *src, size_t len, size_t off, unsigned *line, unsigned *col);

/* ---- rendering state (eval.c) ---------------------------------------------------------- */

typedef struct kn_jr kn_jr;

/* A growable byte buffer of one render: every append counts against the render's work budget and
 * fails (recording the error in the render) past KN_JINJA_MAX_OUTPUT or when memory runs out. */
typedef struct kn_jbuf {
    kn_jr *r;
    char *p;
    size_t n, cap;
} kn_jbuf;

typedef struct kn_jtracked {
    struct kn_jtracked *next;
    uint8_t kind; /* KN_J_NS or KN_J_MACRO */
} kn_jtracked;

typedef struct kn_jscope kn_jscope;

struct kn_jns {
    kn_jtracked tr;
    kn_jdict *attrs;
};

struct kn_jmacro {
    kn_jtracked tr;
    const kn_jnode *node; /* MACRO, or the CALLBLOCK of a caller */
    kn_jscope *scope;     /* where it was defined */
};

struct kn_jloop {
    uint32_t rc;
    kn_jlist *items;
    size_t i; /* index0 of the current item */
    int depth0;
    kn_jv last_changed;   /* loop.changed() memory (KN_J_UNDEF when unset) */
    const kn_jnode *node; /* the FOR, for recursive loops */
    kn_jscope *scope;     /* scope the FOR runs in, for recursive loops */
};

struct kn_jr {
    const kn_jtmpl *t;
    kn_jbuf *out;     /* where output goes now */
    kn_jscope *scope; /* current scope */
    kn_jscope *root;
    kn_jtracked *tracked;   /* every tracked object, freed at the end */
    kn_jscope *free_scopes; /* released scopes for reuse */
    kn_jscope *all_scopes;  /* every scope allocated, freed at the end */
    kn_jv input;            /* KN_N_INPUT's value while a filter block runs */
    uint64_t steps, work;
    uint64_t held; /* bytes of tracked objects and captured scopes (kept to the end) */
    int depth, calls;
    uint32_t pos; /* source offset of the node being evaluated (error position) */
    bool failed;
    kiln_status status;
    uint32_t err_pos;
    char err[KN_ERRMSG_MAX];
};

/* Records the render's error (the first one wins) at r->pos and returns false. */
bool kn_jfail(kn_jr *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records an out-of-memory error and returns false. */
bool kn_jnomem(kn_jr *r);
/* Adds n bytes copied to the work budget; false (error recorded) past it. kn_jwork_items counts
 * n values (list items, dict entries). */
bool kn_jwork(kn_jr *r, uint64_t n);
static inline bool kn_jwork_items(kn_jr *r, uint64_t n) { return kn_jwork(r, n * sizeof(kn_jv)); }

/* Allocates a tracked namespace with an empty attribute dict (NULL + error on failure). */
kn_jns *kn_jns_new(kn_jr *r);

/* Calls a callable value (macro, global function, method, recursive loop) with evaluated
 * arguments. */
typedef struct kn_jargs {
    kn_jv *pos;
    size_t n_pos;
    kn_jstr *const *kw_names;
    kn_jv *kw;
    size_t n_kw;
} kn_jargs;
bool kn_jcall(kn_jr *r, kn_jv fn, const kn_jargs *a, kn_jv *out);

/* Fails with the message an Undefined carries (jinja2.UndefinedError / SecurityError). */
bool kn_jundef_error(kn_jr *r, kn_jv u);

/* ---- operations on values (ops.c) ------------------------------------------------------ */

/* Materializes any iterable (list, tuple, dict keys, string characters, iterator (consumed),
 * Undefined = empty) as a list the caller holds one reference to (a list or tuple is shared, not
 * copied: call kn_jlist_own before changing it); TypeError for anything else. */
bool kn_jiterate(kn_jr *r, kn_jv v, kn_jlist **out);
/* Makes *l a list only the caller holds (copying it when shared). */
bool kn_jlist_own(kn_jr *r, kn_jlist **l);
/* Python `a in b`. */
bool kn_jcontains(kn_jr *r, kn_jv container, kn_jv item, bool *res);

/* a op b for the KN_OP_ADD ... KN_OP_CONCAT operators, with Python's semantics. */
bool kn_jbinop(kn_jr *r, int op, kn_jv a, kn_jv b, kn_jv *out);
/* One comparison of a chain (KN_OP_EQ ... KN_OP_NOTIN) into *res. */
bool kn_jcompare(kn_jr *r, int op, kn_jv a, kn_jv b, bool *res);
/* obj[b[0]:b[1]:b[2]] (KN_J_NONE for an omitted bound). Jinja2 compiles slices to plain Python
 * subscription, not the sandbox's getitem, so every failure raises. */
bool kn_jslice(kn_jr *r, kn_jv obj, const kn_jv *bounds, kn_jv *out);

/* Python-style attribute access obj.name (dict keys, namespace attributes, methods) and
 * subscription obj[key], through the immutable sandbox's rules; missing gives Undefined. */
bool kn_jgetattr(kn_jr *r, kn_jv obj, const kn_jstr *name, kn_jv *out);
bool kn_jgetitem(kn_jr *r, kn_jv obj, kn_jv key, kn_jv *out);

/* ---- buffers and values (value.c) ------------------------------------------------------ */

void kn_jbuf_init(kn_jbuf *b, kn_jr *r);
void kn_jbuf_free(kn_jbuf *b);
bool kn_jbuf_put(kn_jbuf *b, const void *p, size_t n);
static inline bool kn_jbuf_puts(kn_jbuf *b, const char *s) { return kn_jbuf_put(b, s, __builtin_strlen(s)); }
static inline bool kn_jbuf_putc(kn_jbuf *b, char c) { return kn_jbuf_put(b, &c, 1); }
/* Moves the buffer's bytes into a new string value (the buffer is emptied). */
bool kn_jbuf_take(kn_jbuf *b, bool safe, kn_jv *out);

static inline kn_jv kn_jv_undef(void) {
    kn_jv v = {0};
    return v;
}
static inline kn_jv kn_jv_none(void) {
    kn_jv v = {0};
    v.t = KN_J_NONE;
    return v;
}
static inline kn_jv kn_jv_bool(bool b) {
    kn_jv v = {0};
    v.t = KN_J_BOOL;
    v.u.b = b;
    return v;
}
static inline kn_jv kn_jv_int(int64_t i) {
    kn_jv v = {0};
    v.t = KN_J_INT;
    v.u.i = i;
    return v;
}
static inline kn_jv kn_jv_float(double f) {
    kn_jv v = {0};
    v.t = KN_J_FLOAT;
    v.u.f = f;
    return v;
}
static inline bool kn_jv_is_heap(kn_jv v) {
    return v.t == KN_J_STR || v.t == KN_J_LIST || v.t == KN_J_TUPLE || v.t == KN_J_DICT || v.t == KN_J_ITER ||
           v.t == KN_J_METHOD || v.t == KN_J_LOOP || (v.t == KN_J_UNDEF && v.u.s);
}
static inline kn_jv kn_jv_ref(kn_jv v) {
    if (kn_jv_is_heap(v) && *(uint32_t *)v.u.p != KN_J_IMMORTAL) ++*(uint32_t *)v.u.p;
    return v;
}
void kn_jv_drop(kn_jv v);
static inline bool kn_jv_is_num(kn_jv v) { return v.t == KN_J_INT || v.t == KN_J_FLOAT || v.t == KN_J_BOOL; }
static inline bool kn_jv_is_seq(kn_jv v) { return v.t == KN_J_LIST || v.t == KN_J_TUPLE; }
/* Value nesting depth (0 for scalars). */
int kn_jv_depth(kn_jv v);

/* New strings. kn_jstr_alloc gives an uninitialized string of n bytes (NUL set) or NULL; the
 * others record the error in r (and leave Undefined in *out, which may be dropped). */
kn_jstr *kn_jstr_alloc(size_t n);
void kn_jstr_finish(kn_jstr *s); /* computes the ascii flag */
bool kn_jmk_str(kn_jr *r, const char *p, size_t n, bool safe, kn_jv *out);
/* An immortal string (for template literals); NULL when memory runs out. */
kn_jstr *kn_jstr_immortal(const char *p, size_t n);
/* kn_jmk_str for one character (n bytes of UTF-8 at p): a one-byte character is a shared immortal
 * string (nothing allocated, no work counted), others a new string. */
bool kn_jmk_char(kn_jr *r, const char *p, size_t n, bool safe, kn_jv *out);
/* Undefined with a hint ("'x' is undefined"); unsafe marks a blocked attribute. */
kn_jv kn_jv_undef_hint(kn_jr *r, bool unsafe, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

kn_jlist *kn_jlist_new(kn_jr *r, size_t cap);
/* Appends v (consumed). */
bool kn_jlist_push(kn_jr *r, kn_jlist *l, kn_jv v);
static inline kn_jv kn_jv_list(kn_jlist *l, bool tuple) {
    kn_jv v = {0};
    v.t = tuple ? KN_J_TUPLE : KN_J_LIST;
    v.u.l = l;
    return v;
}
kn_jdict *kn_jdict_new(kn_jr *r);
/* Sets key (consumed; must be hashable) to val (consumed); an existing key keeps its position. */
bool kn_jdict_set(kn_jr *r, kn_jdict *d, kn_jv key, kn_jv val);
/* Borrowed value of key, NULL when absent. */
kn_jv *kn_jdict_get(const kn_jdict *d, kn_jv key);
kn_jv *kn_jdict_get_str(const kn_jdict *d, const char *s, size_t n);
static inline kn_jv kn_jv_dict(kn_jdict *d) {
    kn_jv v = {0};
    v.t = KN_J_DICT;
    v.u.d = d;
    return v;
}
/* A one-shot iterator over l (consumed). */
bool kn_jmk_iter(kn_jr *r, kn_jlist *l, kn_jv *out);

/* Python truthiness. */
bool kn_jv_truthy(kn_jv v);
/* Python ==. */
bool kn_jv_eq(kn_jv a, kn_jv b);
/* Python <, as -1/0/1 in *res; TypeError (recorded) for unordered types. */
bool kn_jv_cmp(kn_jr *r, kn_jv a, kn_jv b, int *res);
/* Whether v can be a dict key, and its hash (equal values hash equally, 1 == 1.0 == True). */
bool kn_jv_hashable(kn_jv v);
uint64_t kn_jv_hash(kn_jv v);
/* Python type name ("str", "int", "NoneType", ...). */
const char *kn_jv_typename(kn_jv v);

/* Appends Python str(v) / repr(v). */
bool kn_jv_str_to(kn_jr *r, kn_jv v, kn_jbuf *b);
bool kn_jv_repr_to(kn_jr *r, kn_jv v, kn_jbuf *b, int depth);
/* str(v) as a string value (a string is returned as is, with a new reference). */
bool kn_jv_to_str(kn_jr *r, kn_jv v, kn_jv *out);
/* Python repr of a float ("1.0", "1e+16", "0.30000000000000004", "inf"); returns the length. */
size_t kn_jfloat_repr(double f, char buf[40]);
/* Appends s with & < > ' " escaped as markupsafe does. */
bool kn_jescape_to(kn_jbuf *b, const char *s, size_t n);

/* UTF-8 by code point. Ill-formed bytes count as one character each (their maximal subpart). */
size_t kn_ju_next(const char *s, size_t len, size_t i);
uint32_t kn_ju_cp(const char *s, size_t len, size_t i, size_t *adv);
size_t kn_jstr_cplen(const kn_jstr *s);
/* Byte offset of code point index k (clamped to len). */
size_t kn_jstr_cpoff(const kn_jstr *s, size_t k);
/* Python str.isspace() for one code point. */
bool kn_ju_isspace(uint32_t cp);
uint32_t kn_ju_lower(uint32_t cp);
uint32_t kn_ju_upper(uint32_t cp);
bool kn_ju_isalpha(uint32_t cp);
bool kn_ju_isdigit(uint32_t cp);
/* Appends cp as UTF-8. */
bool kn_jbuf_putcp(kn_jbuf *b, uint32_t cp);

/* A staging area in front of a kn_jbuf for writers that make a character at a time (the case
 * mappings): the bytes reach kn_jbuf_put, its work count and output limit, 256 at a time instead of
 * one call per character. The text and the outcome are those of putting each piece in turn (a
 * budget or limit passed fails the put that reaches it, or kn_jstage_flush, which the writer calls
 * once at the end). */
typedef struct kn_jstage {
    kn_jbuf *b;
    size_t n;
    char s[256];
} kn_jstage;
static inline bool kn_jstage_flush(kn_jstage *st) {
    const size_t n = st->n;
    st->n = 0;
    return kn_jbuf_put(st->b, st->s, n);
}
static inline bool kn_jstage_put(kn_jstage *st, const void *p, size_t n) {
    if (n > sizeof st->s - st->n) {
        if (!kn_jstage_flush(st)) return false;
        if (n > sizeof st->s) return kn_jbuf_put(st->b, p, n);
    }
    __builtin_memcpy(st->s + st->n, p, n);
    st->n += n;
    return true;
}
static inline bool kn_jstage_putc(kn_jstage *st, char c) {
    if (st->n == sizeof st->s && !kn_jstage_flush(st)) return false;
    st->s[st->n++] = c;
    return true;
}
static inline bool kn_jstage_putcp(kn_jstage *st, uint32_t cp) {
    uint8_t u[4];
    return kn_jstage_put(st, u, kn_utf8_encode(cp, u));
}

/* ---- builtins (builtins.c, predicates.c, globals.c) ------------------------------------- */

/* Index of the filter / test / global function called name, -1 when there is none. */
int kn_jfilter_find(const char *name, size_t n);
int kn_jtest_find(const char *name, size_t n);
int kn_jglobal_find(const char *name, size_t n);
bool kn_jfilter_call(kn_jr *r, int id, kn_jv v, const kn_jargs *a, kn_jv *out);
bool kn_jtest_call(kn_jr *r, int id, kn_jv v, const kn_jargs *a, bool *res);
bool kn_jglobal_call(kn_jr *r, int id, const kn_jargs *a, kn_jv *out);
const char *kn_jglobal_name(int id);

/* Binds arguments to a builtin's parameters params[0..np) (Python rules: positional, then by
 * keyword); slots get borrowed values, given[i] says which were passed. The first nreq are
 * required. Errors name fname. */
bool kn_jbind(kn_jr *r, const char *fname, const kn_jargs *a, const char *const *params, size_t np, size_t nreq,
              kn_jv *slots, bool *given);
/* A string argument: *out borrows it; TypeError naming `what` for any other type. */
bool kn_jarg_str(kn_jr *r, kn_jv v, const char *what, const kn_jstr **out);

/* ---- methods (methods.c) --------------------------------------------------------------- */

/* Method of a value by name: the id (>= 0) and whether the immutable sandbox blocks it (list.append,
 * dict.update, ...); -1 when the type has no such method. */
int kn_jmethod_find(kn_jv self, const char *name, size_t n, bool *unsafe);
bool kn_jmethod_call(kn_jr *r, const kn_jmethod *m, const kn_jargs *a, kn_jv *out);
/* Python str.strip/lstrip/rstrip (chars NULL: whitespace); which: 1 left, 2 right, 3 both. */
bool kn_jstrip(kn_jr *r, const kn_jstr *s, const kn_jstr *chars, int which, kn_jv *out);
/* Python str.lower() / str.upper(). */
bool kn_jcase(kn_jr *r, const kn_jstr *s, bool upper, kn_jv *out);
/* Python str.replace(old, new, count) (count < 0: all). */
bool kn_jreplace(kn_jr *r, const kn_jstr *s, const kn_jstr *old, const kn_jstr *rep, int64_t count, kn_jv *out);
/* Python printf-style s % args. */
bool kn_jformat_percent(kn_jr *r, const kn_jstr *fmt, kn_jv args, kn_jv *out);

/* ---- JSON (json.c) --------------------------------------------------------------------- */

/* Converts a jansson value; KILN_ERR_INVALID_ARG (recorded in r) for too deep nesting. */
bool kn_jfrom_json(kn_jr *r, const json_t *j, kn_jv *out, int depth);
/* Python json.dumps(v, ensure_ascii, indent, separators, sort_keys): indent NULL for None (else
 * the indent string), item_sep / key_sep NULL for the defaults. */
typedef struct kn_jjson_opts {
    bool ensure_ascii;
    bool sort_keys;
    const char *indent;
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
} kn_jjson_opts;
bool kn_jtojson(kn_jr *r, kn_jv v, const kn_jjson_opts *o, kn_jbuf *b);

#endif

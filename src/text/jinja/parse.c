/*
 * parse.c - the Jinja2 parser: tokens -> syntax tree (kn_jnode, see impl.h).
 *
 * A recursive-descent parser with Jinja2's grammar and precedence, lowest first:
 *   conditional (a if c else b), or, and, not, comparisons (== != < <= > >= in, not in; chained),
 *   + -, ~, * / // %, ** (left-associative, as in Jinja2), unary - +, then primaries with postfix
 *   .attr [subscript/slice] (call), and filters "| f(args)" / tests "is [not] t args" which bind
 *   tighter than every binary operator.
 * Statements: if/elif/else, for (tuple targets, "if" filter, else, recursive), set (names, tuples,
 * namespace attributes, block set with filters), macro, call, filter, with, break/continue (inside
 * loops only), raw blocks (turned into data by the lexer), and Hugging Face's
 * {% generation %}...{% endgeneration %} (its body, rendered in place). Template inheritance and
 * loading (extends, block, include, import) are not supported: a chat template is one string.
 *
 * Identifiers are interned into the template's symbol table; filter and test names are resolved
 * here: an unknown one is a syntax error, except inside an {% if %} (its test and its branches,
 * not nested loops or macros), where Jinja2 3.x makes it an error only when evaluated. Nodes and
 * arrays come from an arena owned by the template; literal strings are immortal values.
 * Nesting is bounded by KN_JINJA_MAX_PARSE_DEPTH so that neither parsing nor rendering can
 * exhaust the C stack.
 */
#include "text/jinja/impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ----------------------------------------------------------------------------------- */

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} arena_chunk;

/* n zeroed bytes from the template's arena (16-byte aligned), NULL when memory runs out. */
static void *arena_alloc(kn_jtmpl *t, size_t n) {
    n = (n + 15) & ~(size_t)15;
    arena_chunk *c = t->arena;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        arena_chunk *nc = malloc(sizeof *nc + cap);
        if (!nc) return NULL;
        nc->next = c;
        nc->used = 0;
        nc->cap = cap;
        t->arena = nc;
        c = nc;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

static void arena_free(void *a) {
    arena_chunk *c = a;
    while (c) {
        arena_chunk *next = c->next;
        free(c);
        c = next;
    }
}

/* ---- parser state ---------------------------------------------------------------------------- */

typedef struct parser {
    kn_jtmpl *t;
    const char *s;
    size_t n;
    kn_jtoks toks;
    size_t i;
    int depth;
    int loops; /* for loops around the current statement (reset in macros) */
    bool soft; /* inside an if: unknown filters/tests fail only when evaluated */
    int macro_depth;
    kn_jnode *macros[KN_JINJA_MAX_PARSE_DEPTH]; /* macros being parsed (for KN_MAC_* flags) */
    bool failed;
} parser;

/* Growable node list used while parsing (copied into the arena when done). */
typedef struct nvec {
    kn_jnode **v;
    uint32_t n, cap;
} nvec;

/* Records a syntax error at source offset off (the first one wins); returns NULL. */
static kn_jnode *fail_at(parser *P, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static kn_jnode *fail_at(parser *P, size_t off, const char *fmt, ...) {
    if (P->failed) return NULL;
    P->failed = true;
    char msg[KN_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    unsigned line, col;
    kn_jlinecol(P->s, P->n, off, &line, &col);
    kn_error(KILN_ERR_FORMAT, "line %u, column %u: %s", line, col, msg);
    return NULL;
}

static kn_jnode *nomem(parser *P) {
    if (!P->failed) {
        P->failed = true;
        kn_error(KILN_ERR_NOMEM, "out of memory while parsing the template");
    }
    return NULL;
}

static bool nvec_push(parser *P, nvec *v, kn_jnode *x) {
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 8;
        kn_jnode **nv = realloc(v->v, cap * sizeof *nv);
        if (!nv) {
            nomem(P);
            return false;
        }
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return true;
}

static bool nvec_finish(parser *P, nvec *v, kn_jnodes *out) {
    out->n = v->n;
    out->v = NULL;
    if (v->n) {
        out->v = arena_alloc(P->t, v->n * sizeof *out->v);
        if (!out->v) {
            free(v->v);
            v->v = NULL;
            nomem(P);
            return false;
        }
        memcpy(out->v, v->v, v->n * sizeof *out->v);
    }
    free(v->v);
    v->v = NULL;
    v->n = v->cap = 0;
    return true;
}

static const kn_jtok *cur(const parser *P) { return &P->toks.v[P->i]; }
static const kn_jtok *peek(const parser *P, size_t k) {
    size_t j = P->i + k;
    return &P->toks.v[j < P->toks.n ? j : P->toks.n - 1];
}
static void advance(parser *P) {
    if (P->i + 1 < P->toks.n) P->i++;
}

static bool tok_is_name(const parser *P, const kn_jtok *t, const char *name) {
    size_t k = strlen(name);
    return t->type == KN_T_NAME && t->len == k && memcmp(P->s + t->off, name, k) == 0;
}
static bool is_name(const parser *P, const char *name) { return tok_is_name(P, cur(P), name); }
static bool is_op(const parser *P, uint8_t op) { return cur(P)->type == KN_T_OP && cur(P)->op == op; }

/* A short description of a token for error messages. */
static void describe(const parser *P, const kn_jtok *t, char *buf, size_t cap) {
    switch (t->type) {
        case KN_T_EOF: snprintf(buf, cap, "end of template"); break;
        case KN_T_VAR_END: snprintf(buf, cap, "end of print statement"); break;
        case KN_T_BLOCK_END: snprintf(buf, cap, "end of statement block"); break;
        case KN_T_DATA: snprintf(buf, cap, "template data"); break;
        case KN_T_VAR_BEGIN: snprintf(buf, cap, "begin of print statement"); break;
        case KN_T_BLOCK_BEGIN: snprintf(buf, cap, "begin of statement block"); break;
        default: {
            int len = (int)KN_MIN(t->len, 40u);
            snprintf(buf, cap, "'%.*s'", len, P->s + t->off);
        }
    }
}

static kn_jnode *unexpected(parser *P, const char *expected) {
    char d[64];
    describe(P, cur(P), d, sizeof d);
    if (expected) return fail_at(P, cur(P)->off, "expected %s, got %s", expected, d);
    return fail_at(P, cur(P)->off, "unexpected %s", d);
}

static bool expect_op(parser *P, uint8_t op, const char *what) {
    if (is_op(P, op)) {
        advance(P);
        return true;
    }
    unexpected(P, what);
    return false;
}

static bool expect_name(parser *P, const char *name) {
    if (is_name(P, name)) {
        advance(P);
        return true;
    }
    char what[48];
    snprintf(what, sizeof what, "'%s'", name);
    unexpected(P, what);
    return false;
}

static bool expect_block_end(parser *P) {
    if (cur(P)->type == KN_T_BLOCK_END) {
        advance(P);
        return true;
    }
    unexpected(P, "end of statement block");
    return false;
}

static kn_jnode *node(parser *P, uint8_t kind, size_t off) {
    kn_jnode *n = arena_alloc(P->t, sizeof *n);
    if (!n) return nomem(P);
    n->kind = kind;
    n->off = (uint32_t)off;
    n->sym = -1;
    return n;
}

/* ---- symbols and literals -------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

int32_t kn_jsym_find(const kn_jtmpl *t, const char *s, size_t n) {
    if (!t->sym_idx_cap) return -1;
    uint32_t mask = t->sym_idx_cap - 1;
    for (uint32_t h = (uint32_t)hash_bytes(s, n) & mask;; h = (h + 1) & mask) {
        uint32_t e = t->sym_idx[h];
        if (!e) return -1;
        const kn_jstr *name = t->syms[e - 1].name;
        if (name->len == n && memcmp(name->s, s, n) == 0) return (int32_t)(e - 1);
    }
}

static bool keep_lit(parser *P, kn_jstr *s) {
    kn_jtmpl *t = P->t;
    if (t->n_lits == t->cap_lits) {
        size_t cap = t->cap_lits ? t->cap_lits * 2 : 64;
        kn_jstr **v = realloc(t->lits, cap * sizeof *v);
        if (!v) {
            free(s);
            nomem(P);
            return false;
        }
        t->lits = v;
        t->cap_lits = cap;
    }
    t->lits[t->n_lits++] = s;
    return true;
}

static kn_jstr *lit_str(parser *P, const char *s, size_t n) {
    kn_jstr *x = kn_jstr_immortal(s, n);
    if (!x) {
        nomem(P);
        return NULL;
    }
    return keep_lit(P, x) ? x : NULL;
}

/* The symbol of identifier s[0..n), added to the table when new (-1 when memory runs out). */
static int32_t intern(parser *P, const char *s, size_t n) {
    kn_jtmpl *t = P->t;
    int32_t found = kn_jsym_find(t, s, n);
    if (found >= 0) return found;
    if ((t->n_syms + 1) * 2 > t->sym_idx_cap) {
        uint32_t cap = t->sym_idx_cap ? t->sym_idx_cap * 2 : 64;
        uint32_t *idx = calloc(cap, sizeof *idx);
        if (!idx) {
            nomem(P);
            return -1;
        }
        for (uint32_t k = 0; k < t->n_syms; k++) {
            uint32_t h = (uint32_t)hash_bytes(t->syms[k].name->s, t->syms[k].name->len) & (cap - 1);
            while (idx[h]) h = (h + 1) & (cap - 1);
            idx[h] = k + 1;
        }
        free(t->sym_idx);
        t->sym_idx = idx;
        t->sym_idx_cap = cap;
    }
    if (t->n_syms == t->cap_syms) {
        uint32_t cap = t->cap_syms ? t->cap_syms * 2 : 32;
        kn_jsym *v = realloc(t->syms, cap * sizeof *v);
        if (!v) {
            nomem(P);
            return -1;
        }
        t->syms = v;
        t->cap_syms = cap;
    }
    kn_jstr *name = lit_str(P, s, n);
    if (!name) return -1;
    uint32_t k = t->n_syms++;
    t->syms[k].name = name;
    t->syms[k].global = (int16_t)kn_jglobal_find(s, n);
    uint32_t mask = t->sym_idx_cap - 1;
    uint32_t h = (uint32_t)hash_bytes(s, n) & mask;
    while (t->sym_idx[h]) h = (h + 1) & mask;
    t->sym_idx[h] = k + 1;
    return (int32_t)k;
}

/* Decodes a string literal token (quotes included) as Python's unicode-escape does. */
static bool decode_string(parser *P, const kn_jtok *tk, kn_jbuf *b) {
    const char *s = P->s + tk->off + 1;
    size_t n = tk->len - 2;
    for (size_t i = 0; i < n;) {
        char c = s[i];
        if (c != '\\' || i + 1 >= n) {
            if (!kn_jbuf_putc(b, c)) return false;
            i++;
            continue;
        }
        char e = s[i + 1];
        uint32_t cp = 0;
        int hex = 0;
        char simple = 0;
        switch (e) {
            case '\n': i += 2; continue; /* line continuation */
            case '\\':
            case '\'':
            case '"': simple = e; break;
            case 'a': simple = '\a'; break;
            case 'b': simple = '\b'; break;
            case 'f': simple = '\f'; break;
            case 'n': simple = '\n'; break;
            case 'r': simple = '\r'; break;
            case 't': simple = '\t'; break;
            case 'v': simple = '\v'; break;
            case 'x': hex = 2; break;
            case 'u': hex = 4; break;
            case 'U': hex = 8; break;
            default:
                if (e >= '0' && e <= '7') {
                    size_t j = i + 1;
                    int k = 0;
                    while (j < n && k < 3 && s[j] >= '0' && s[j] <= '7') {
                        cp = cp * 8 + (uint32_t)(s[j] - '0');
                        j++;
                        k++;
                    }
                    if (!kn_jbuf_putcp(b, cp)) return false;
                    i = j;
                    continue;
                }
                /* unknown escapes stay as written */
                if (!kn_jbuf_putc(b, '\\')) return false;
                i++;
                continue;
        }
        if (simple) {
            if (!kn_jbuf_putc(b, simple)) return false;
            i += 2;
            continue;
        }
        size_t j = i + 2;
        for (int k = 0; k < hex; k++, j++) {
            char h = j < n ? s[j] : 0;
            int d = (h >= '0' && h <= '9')   ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
            if (d < 0) {
                fail_at(P, tk->off + 1 + i, "truncated \\%c escape in a string", e);
                return false;
            }
            cp = cp * 16 + (uint32_t)d;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            fail_at(P, tk->off + 1 + i, "invalid escape \\%c in a string", e);
            return false;
        }
        if (!kn_jbuf_putcp(b, cp)) return false;
        i = j;
    }
    return true;
}

/* ---- expressions ----------------------------------------------------------------------------- */

static kn_jnode *parse_expression(parser *P, bool with_condexpr);
/* Unary - and +, then a primary with its postfixes, then (with_filter) filters and tests. */
static kn_jnode *parse_unary(parser *P, bool with_filter);
/* Literals (strings, numbers, true/false/none), names, ( tuple ), [ list ], { dict }. */
static kn_jnode *parse_primary(parser *P);
/* .name, .0, [subscript], [slice] and (call) after a primary. */
static kn_jnode *parse_postfix(parser *P, kn_jnode *n);
/* Filters, tests and calls following a unary expression. */
static kn_jnode *parse_filter_expr(parser *P, kn_jnode *n);
static kn_jnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *end_name,
                             bool explicit_parens);

static bool enter(parser *P) {
    if (++P->depth > KN_JINJA_MAX_PARSE_DEPTH) {
        fail_at(P, cur(P)->off, "template nested too deeply");
        return false;
    }
    return true;
}
static void leave(parser *P) { P->depth--; }

/* a if cond [else b], right-nested. */
static kn_jnode *parse_condexpr(parser *P) {
    kn_jnode *e1 = parse_expression(P, false);
    while (e1 && is_name(P, "if")) {
        kn_jnode *n = node(P, KN_N_COND, cur(P)->off);
        advance(P);
        if (!n) return NULL;
        n->a = e1;
        if (!(n->b = parse_expression(P, false))) return NULL;
        if (is_name(P, "else")) {
            advance(P);
            if (!enter(P)) return NULL;
            n->c = parse_condexpr(P);
            leave(P);
            if (!n->c) return NULL;
        }
        e1 = n;
    }
    return e1;
}

/* Comparison chains: a < b <= c, in, not in. */
static kn_jnode *parse_compare(parser *P);

static kn_jnode *parse_not(parser *P) {
    if (is_name(P, "not")) {
        kn_jnode *n = node(P, KN_N_NOT, cur(P)->off);
        advance(P);
        if (!n || !enter(P)) return NULL;
        n->a = parse_not(P);
        leave(P);
        return n->a ? n : NULL;
    }
    return parse_compare(P);
}

static kn_jnode *parse_and(parser *P) {
    kn_jnode *l = parse_not(P);
    while (l && is_name(P, "and")) {
        kn_jnode *n = node(P, KN_N_AND, cur(P)->off);
        advance(P);
        if (!n) return NULL;
        n->a = l;
        if (!(n->b = parse_not(P))) return NULL;
        l = n;
    }
    return l;
}

static kn_jnode *parse_or(parser *P) {
    kn_jnode *l = parse_and(P);
    while (l && is_name(P, "or")) {
        kn_jnode *n = node(P, KN_N_OR, cur(P)->off);
        advance(P);
        if (!n) return NULL;
        n->a = l;
        if (!(n->b = parse_and(P))) return NULL;
        l = n;
    }
    return l;
}

static kn_jnode *parse_expression(parser *P, bool with_condexpr) {
    if (!enter(P)) return NULL;
    kn_jnode *n = with_condexpr ? parse_condexpr(P) : parse_or(P);
    leave(P);
    return n;
}

static kn_jnode *binary(parser *P, kn_jnode *l, uint8_t op, kn_jnode *(*sub)(parser *)) {
    kn_jnode *n = node(P, KN_N_BIN, cur(P)->off);
    advance(P);
    if (!n) return NULL;
    n->op = op;
    n->a = l;
    if (!(n->b = sub(P))) return NULL;
    return n;
}

static kn_jnode *parse_pow(parser *P) {
    kn_jnode *l = parse_unary(P, true);
    while (l && is_op(P, KN_TO_POW)) {
        kn_jnode *n = node(P, KN_N_BIN, cur(P)->off);
        advance(P);
        if (!n) return NULL;
        n->op = KN_OP_POW;
        n->a = l;
        if (!(n->b = parse_unary(P, true))) return NULL;
        l = n;
    }
    return l;
}

static kn_jnode *parse_math2(parser *P) {
    kn_jnode *l = parse_pow(P);
    while (l && cur(P)->type == KN_T_OP) {
        uint8_t o = cur(P)->op;
        uint8_t op = o == KN_TO_MUL        ? KN_OP_MUL
                     : o == KN_TO_DIV      ? KN_OP_DIV
                     : o == KN_TO_FLOORDIV ? KN_OP_FLOORDIV
                     : o == KN_TO_MOD      ? KN_OP_MOD
                                           : 0;
        if (!op) break;
        l = binary(P, l, op, parse_pow);
    }
    return l;
}

static kn_jnode *parse_concat(parser *P) {
    kn_jnode *l = parse_math2(P);
    while (l && is_op(P, KN_TO_TILDE)) l = binary(P, l, KN_OP_CONCAT, parse_math2);
    return l;
}

static kn_jnode *parse_math1(parser *P) {
    kn_jnode *l = parse_concat(P);
    while (l && (is_op(P, KN_TO_ADD) || is_op(P, KN_TO_SUB)))
        l = binary(P, l, is_op(P, KN_TO_ADD) ? KN_OP_ADD : KN_OP_SUB, parse_concat);
    return l;
}

static kn_jnode *parse_compare(parser *P) {
    size_t off = cur(P)->off;
    kn_jnode *e = parse_math1(P);
    if (!e) return NULL;
    nvec operands = {0};
    uint8_t opsbuf[64];
    uint32_t nops = 0;
    for (;;) {
        uint8_t op = 0;
        const kn_jtok *t = cur(P);
        if (t->type == KN_T_OP) {
            op = t->op == KN_TO_EQ   ? KN_OP_EQ
                 : t->op == KN_TO_NE ? KN_OP_NE
                 : t->op == KN_TO_LT ? KN_OP_LT
                 : t->op == KN_TO_LE ? KN_OP_LE
                 : t->op == KN_TO_GT ? KN_OP_GT
                 : t->op == KN_TO_GE ? KN_OP_GE
                                     : 0;
            if (op) advance(P);
        } else if (is_name(P, "in")) {
            op = KN_OP_IN;
            advance(P);
        } else if (is_name(P, "not") && tok_is_name(P, peek(P, 1), "in")) {
            op = KN_OP_NOTIN;
            advance(P);
            advance(P);
        }
        if (!op) break;
        if (nops == KN_ARRAY_LEN(opsbuf)) {
            free(operands.v);
            return fail_at(P, t->off, "comparison chain too long");
        }
        kn_jnode *r = parse_math1(P);
        if (!r || !nvec_push(P, &operands, r)) {
            free(operands.v);
            return NULL;
        }
        opsbuf[nops++] = op;
    }
    if (!nops) return e;
    kn_jnode *n = node(P, KN_N_CMP, off);
    if (!n) {
        free(operands.v);
        return NULL;
    }
    n->a = e;
    if (!nvec_finish(P, &operands, &n->kids)) return NULL;
    if (!(n->ops = arena_alloc(P->t, nops))) return nomem(P);
    memcpy(n->ops, opsbuf, nops);
    return n;
}

static kn_jnode *parse_unary(parser *P, bool with_filter) {
    if (!enter(P)) return NULL;
    kn_jnode *n;
    if (is_op(P, KN_TO_SUB) || is_op(P, KN_TO_ADD)) {
        n = node(P, is_op(P, KN_TO_SUB) ? KN_N_NEG : KN_N_POS, cur(P)->off);
        advance(P);
        if (n && !(n->a = parse_unary(P, false))) n = NULL;
    } else {
        n = parse_primary(P);
    }
    if (n) n = parse_postfix(P, n);
    if (n && with_filter) n = parse_filter_expr(P, n);
    leave(P);
    return n;
}

/* Call arguments "(a, b, k=v)" into n->kids / n->kids2 / n->names. */
static bool parse_call_args(parser *P, kn_jnode *n) {
    if (!expect_op(P, KN_TO_LPAREN, "'('")) return false;
    nvec pos = {0}, kwv = {0};
    kn_jstr *names[256];
    uint32_t nk = 0;
    bool need_comma = false;
    while (!is_op(P, KN_TO_RPAREN)) {
        if (need_comma) {
            if (!expect_op(P, KN_TO_COMMA, "','")) goto fail;
            if (is_op(P, KN_TO_RPAREN)) break;
        }
        if (is_op(P, KN_TO_MUL) || is_op(P, KN_TO_POW)) {
            fail_at(P, cur(P)->off, "*args and **kwargs in calls are not supported");
            goto fail;
        }
        if (cur(P)->type == KN_T_NAME && peek(P, 1)->type == KN_T_OP && peek(P, 1)->op == KN_TO_ASSIGN) {
            if (nk == KN_ARRAY_LEN(names)) {
                fail_at(P, cur(P)->off, "too many arguments");
                goto fail;
            }
            kn_jstr *k = lit_str(P, P->s + cur(P)->off, cur(P)->len);
            if (!k) goto fail;
            advance(P);
            advance(P);
            kn_jnode *v = parse_expression(P, true);
            if (!v || !nvec_push(P, &kwv, v)) goto fail;
            names[nk++] = k;
        } else {
            if (nk) {
                fail_at(P, cur(P)->off, "positional argument follows keyword argument");
                goto fail;
            }
            kn_jnode *v = parse_expression(P, true);
            if (!v || !nvec_push(P, &pos, v)) goto fail;
        }
        need_comma = true;
    }
    advance(P);
    if (!nvec_finish(P, &pos, &n->kids) || !nvec_finish(P, &kwv, &n->kids2)) goto fail;
    if (nk) {
        if (!(n->names = arena_alloc(P->t, nk * sizeof *n->names))) {
            nomem(P);
            goto fail;
        }
        memcpy(n->names, names, nk * sizeof *names);
    }
    return true;
fail:
    free(pos.v);
    free(kwv.v);
    return false;
}

/* A dotted filter or test name after "|" or "is". */
static bool parse_dotted_name(parser *P, char *buf, size_t cap, size_t *off) {
    if (cur(P)->type != KN_T_NAME) {
        unexpected(P, "a name");
        return false;
    }
    *off = cur(P)->off;
    size_t n = 0;
    for (;;) {
        const kn_jtok *t = cur(P);
        if (n + t->len + 2 > cap) {
            fail_at(P, t->off, "name too long");
            return false;
        }
        memcpy(buf + n, P->s + t->off, t->len);
        n += t->len;
        advance(P);
        if (!(is_op(P, KN_TO_DOT) && peek(P, 1)->type == KN_T_NAME)) break;
        buf[n++] = '.';
        advance(P);
    }
    buf[n] = 0;
    return true;
}

/* Resolves a filter or test name: the builtin index, or (inside an if) a deferred error. */
static bool resolve_builtin(parser *P, kn_jnode *n, const char *name, size_t off, bool test) {
    int id = test ? kn_jtest_find(name, strlen(name)) : kn_jfilter_find(name, strlen(name));
    if (id >= 0) {
        n->id = (uint16_t)id;
        return true;
    }
    if (!P->soft) {
        fail_at(P, off, "No %s named '%s'.", test ? "test" : "filter", name);
        return false;
    }
    n->id = UINT16_MAX; /* fails when evaluated */
    char msg[200];
    snprintf(msg, sizeof msg, "No %s named '%s' found.", test ? "test" : "filter", name);
    kn_jstr *m = lit_str(P, msg, strlen(msg));
    if (!m) return false;
    n->lit.t = KN_J_STR;
    n->lit.u.s = m;
    return true;
}

/* One or more "| filter[(args)]" (start_inline: the first has no pipe, as in {% filter %}). */
static kn_jnode *parse_filter(parser *P, kn_jnode *operand, bool start_inline) {
    while (is_op(P, KN_TO_PIPE) || start_inline) {
        if (!start_inline) advance(P);
        start_inline = false;
        char name[128];
        size_t off;
        if (!parse_dotted_name(P, name, sizeof name, &off)) return NULL;
        kn_jnode *f = node(P, KN_N_FILTER, off);
        if (!f) return NULL;
        f->a = operand;
        if (!resolve_builtin(P, f, name, off, false)) return NULL;
        if (is_op(P, KN_TO_LPAREN) && !parse_call_args(P, f)) return NULL;
        operand = f;
    }
    return operand;
}

/* "is [not] test" with its arguments: (args) or one primary argument. */
static kn_jnode *parse_test(parser *P, kn_jnode *operand) {
    size_t is_off = cur(P)->off;
    advance(P); /* "is" */
    bool negated = false;
    if (is_name(P, "not")) {
        negated = true;
        advance(P);
    }
    char name[128];
    size_t off;
    if (!parse_dotted_name(P, name, sizeof name, &off)) return NULL;
    kn_jnode *t = node(P, KN_N_TEST, is_off);
    if (!t) return NULL;
    t->a = operand;
    t->op = negated;
    if (!resolve_builtin(P, t, name, off, true)) return NULL;
    const kn_jtok *c = cur(P);
    if (is_op(P, KN_TO_LPAREN)) {
        if (!parse_call_args(P, t)) return NULL;
    } else if ((c->type == KN_T_NAME || c->type == KN_T_STRING || c->type == KN_T_INT || c->type == KN_T_FLOAT ||
                (c->type == KN_T_OP && (c->op == KN_TO_LBRACKET || c->op == KN_TO_LBRACE))) &&
               !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
        if (is_name(P, "is")) return fail_at(P, c->off, "You cannot chain multiple tests with is");
        kn_jnode *arg = parse_primary(P);
        if (arg) arg = parse_postfix(P, arg);
        if (!arg) return NULL;
        if (!(t->kids.v = arena_alloc(P->t, sizeof *t->kids.v))) return nomem(P);
        t->kids.v[0] = arg;
        t->kids.n = 1;
    }
    return t;
}

static kn_jnode *parse_filter_expr(parser *P, kn_jnode *n) {
    while (n) {
        if (is_op(P, KN_TO_PIPE)) n = parse_filter(P, n, false);
        else if (is_name(P, "is")) n = parse_test(P, n);
        else if (is_op(P, KN_TO_LPAREN)) {
            kn_jnode *c = node(P, KN_N_CALL, cur(P)->off);
            if (!c) return NULL;
            c->a = n;
            n = parse_call_args(P, c) ? c : NULL;
        } else break;
    }
    return n;
}

/* One subscript: an expression or a slice a:b:c. */
static kn_jnode *parse_subscribed(parser *P, kn_jnode *obj, size_t off) {
    kn_jnode *parts[3] = {NULL, NULL, NULL};
    if (!is_op(P, KN_TO_COLON)) {
        kn_jnode *e = parse_expression(P, true);
        if (!e) return NULL;
        if (!is_op(P, KN_TO_COLON)) {
            kn_jnode *n = node(P, KN_N_ITEM, off);
            if (!n) return NULL;
            n->a = obj;
            n->b = e;
            return n;
        }
        parts[0] = e;
    }
    advance(P); /* ":" */
    if (!is_op(P, KN_TO_COLON) && !is_op(P, KN_TO_RBRACKET) && !is_op(P, KN_TO_COMMA))
        if (!(parts[1] = parse_expression(P, true))) return NULL;
    if (is_op(P, KN_TO_COLON)) {
        advance(P);
        if (!is_op(P, KN_TO_RBRACKET) && !is_op(P, KN_TO_COMMA))
            if (!(parts[2] = parse_expression(P, true))) return NULL;
    }
    kn_jnode *n = node(P, KN_N_SLICE, off);
    if (!n) return NULL;
    n->a = obj;
    if (!(n->kids.v = arena_alloc(P->t, 3 * sizeof *n->kids.v))) return nomem(P);
    n->kids.n = 3;
    memcpy(n->kids.v, parts, sizeof parts);
    return n;
}

static kn_jnode *parse_postfix(parser *P, kn_jnode *n) {
    while (n) {
        if (is_op(P, KN_TO_DOT)) {
            size_t off = cur(P)->off;
            advance(P);
            const kn_jtok *t = cur(P);
            if (t->type == KN_T_NAME) {
                kn_jnode *a = node(P, KN_N_ATTR, off);
                if (!a) return NULL;
                a->a = n;
                kn_jstr *name = lit_str(P, P->s + t->off, t->len);
                if (!name) return NULL;
                a->lit.t = KN_J_STR;
                a->lit.u.s = name;
                advance(P);
                n = a;
            } else if (t->type == KN_T_INT) {
                kn_jnode *k = node(P, KN_N_LIT, t->off);
                kn_jnode *it = node(P, KN_N_ITEM, off);
                if (!k || !it) return NULL;
                char buf[32];
                size_t len = KN_MIN((size_t)t->len, sizeof buf - 1);
                memcpy(buf, P->s + t->off, len);
                buf[len] = 0;
                k->lit = kn_jv_int(strtoll(buf, NULL, 10));
                it->a = n;
                it->b = k;
                advance(P);
                n = it;
            } else {
                return unexpected(P, "a name or number");
            }
        } else if (is_op(P, KN_TO_LBRACKET)) {
            size_t off = cur(P)->off;
            advance(P);
            if (!enter(P)) return NULL;
            kn_jnode *sub = parse_subscribed(P, n, off);
            if (sub && is_op(P, KN_TO_COMMA)) {
                /* a tuple key: obj[a, b] */
                if (sub->kind != KN_N_ITEM) {
                    leave(P);
                    return fail_at(P, cur(P)->off, "slices in a tuple subscript are not supported");
                }
                kn_jnode *tup = node(P, KN_N_TUPLE, off);
                nvec items = {0};
                if (!tup || !nvec_push(P, &items, sub->b)) {
                    leave(P);
                    free(items.v);
                    return NULL;
                }
                while (is_op(P, KN_TO_COMMA)) {
                    advance(P);
                    if (is_op(P, KN_TO_RBRACKET)) break;
                    kn_jnode *e = parse_expression(P, true);
                    if (!e || !nvec_push(P, &items, e)) {
                        leave(P);
                        free(items.v);
                        return NULL;
                    }
                }
                if (!nvec_finish(P, &items, &tup->kids)) {
                    leave(P);
                    return NULL;
                }
                sub->b = tup;
            }
            leave(P);
            if (!sub || !expect_op(P, KN_TO_RBRACKET, "']'")) return NULL;
            n = sub;
        } else if (is_op(P, KN_TO_LPAREN)) {
            kn_jnode *c = node(P, KN_N_CALL, n->off);
            if (!c) return NULL;
            c->a = n;
            if (!enter(P)) return NULL;
            bool ok = parse_call_args(P, c);
            leave(P);
            n = ok ? c : NULL;
        } else {
            break;
        }
    }
    return n;
}

static kn_jnode *parse_number(parser *P, const kn_jtok *t) {
    kn_jnode *n = node(P, KN_N_LIT, t->off);
    if (!n) return NULL;
    char buf[128];
    size_t len = 0;
    for (size_t i = 0; i < t->len && len + 1 < sizeof buf; i++)
        if (P->s[t->off + i] != '_') buf[len++] = P->s[t->off + i];
    buf[len] = 0;
    if (t->type == KN_T_FLOAT) {
        n->lit = kn_jv_float(strtod(buf, NULL));
    } else {
        int base = 10;
        const char *d = buf;
        if (len > 2 && buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X')) {
            base = 16;
            d += 2;
        } else if (len > 2 && buf[0] == '0' && (buf[1] == 'o' || buf[1] == 'O')) {
            base = 8;
            d += 2;
        } else if (len > 2 && buf[0] == '0' && (buf[1] == 'b' || buf[1] == 'B')) {
            base = 2;
            d += 2;
        }
        uint64_t v = 0;
        for (; *d; d++) {
            int x = (*d >= '0' && *d <= '9') ? *d - '0' : (*d | 32) - 'a' + 10;
            if (v > (uint64_t)(INT64_MAX - x) / (uint64_t)base) return fail_at(P, t->off, "integer literal too large");
            v = v * (uint64_t)base + (uint64_t)x;
        }
        n->lit = kn_jv_int((int64_t)v);
    }
    advance(P);
    return n;
}

static kn_jnode *parse_primary(parser *P) {
    const kn_jtok *t = cur(P);
    if (!enter(P)) return NULL;
    kn_jnode *n = NULL;
    if (t->type == KN_T_NAME) {
        const char *s = P->s + t->off;
        size_t len = t->len;
        if ((len == 4 && (!memcmp(s, "true", 4) || !memcmp(s, "True", 4))) ||
            (len == 5 && (!memcmp(s, "false", 5) || !memcmp(s, "False", 5)))) {
            if ((n = node(P, KN_N_LIT, t->off))) n->lit = kn_jv_bool(len == 4);
        } else if (len == 4 && (!memcmp(s, "none", 4) || !memcmp(s, "None", 4))) {
            if ((n = node(P, KN_N_LIT, t->off))) n->lit = kn_jv_none();
        } else if ((n = node(P, KN_N_NAME, t->off))) {
            n->sym = intern(P, s, len);
            if (n->sym < 0) n = NULL;
            else if (n->sym == P->t->sym_caller || n->sym == P->t->sym_varargs || n->sym == P->t->sym_kwargs) {
                uint8_t flag = n->sym == P->t->sym_caller    ? KN_MAC_CALLER
                               : n->sym == P->t->sym_varargs ? KN_MAC_VARARGS
                                                             : KN_MAC_KWARGS;
                for (int k = 0; k < P->macro_depth; k++) P->macros[k]->op |= flag;
            }
        }
        advance(P);
    } else if (t->type == KN_T_STRING) {
        size_t off = t->off;
        kn_jbuf b;
        kn_jbuf_init(&b, NULL);
        bool ok = true;
        while (ok && cur(P)->type == KN_T_STRING) {
            ok = decode_string(P, cur(P), &b);
            advance(P);
        }
        if (ok && (n = node(P, KN_N_LIT, off))) {
            kn_jstr *s = lit_str(P, b.p ? b.p : "", b.n);
            if (s) {
                n->lit.t = KN_J_STR;
                n->lit.u.s = s;
            } else n = NULL;
        } else if (!ok && !P->failed) {
            nomem(P);
        }
        kn_jbuf_free(&b);
    } else if (t->type == KN_T_INT || t->type == KN_T_FLOAT) {
        n = parse_number(P, t);
    } else if (t->type == KN_T_OP && t->op == KN_TO_LPAREN) {
        advance(P);
        n = parse_tuple(P, false, true, NULL, true);
        if (n && !expect_op(P, KN_TO_RPAREN, "')'")) n = NULL;
    } else if (t->type == KN_T_OP && (t->op == KN_TO_LBRACKET || t->op == KN_TO_LBRACE)) {
        bool dict = t->op == KN_TO_LBRACE;
        uint8_t close = dict ? KN_TO_RBRACE : KN_TO_RBRACKET;
        n = node(P, dict ? KN_N_DICT : KN_N_LIST, t->off);
        advance(P);
        nvec keys = {0}, vals = {0};
        bool ok = n != NULL;
        while (ok && !is_op(P, close)) {
            if (keys.n || vals.n) {
                if (!expect_op(P, KN_TO_COMMA, "','")) {
                    ok = false;
                    break;
                }
                if (is_op(P, close)) break;
            }
            kn_jnode *k = parse_expression(P, true);
            if (!k) {
                ok = false;
                break;
            }
            if (dict) {
                if (!expect_op(P, KN_TO_COLON, "':'")) {
                    ok = false;
                    break;
                }
                kn_jnode *v = parse_expression(P, true);
                ok = v && nvec_push(P, &keys, k) && nvec_push(P, &vals, v);
            } else {
                ok = nvec_push(P, &vals, k);
            }
        }
        if (ok) advance(P);
        if (ok && dict) ok = nvec_finish(P, &keys, &n->kids) && nvec_finish(P, &vals, &n->kids2);
        else if (ok) ok = nvec_finish(P, &vals, &n->kids);
        if (!ok) {
            free(keys.v);
            free(vals.v);
            n = NULL;
        }
    } else {
        n = unexpected(P, NULL);
    }
    leave(P);
    return n;
}

/* Jinja2's parse_tuple: an expression, or a tuple when commas follow. simplified: primaries only
 * (assignment targets); end_name: a name that ends the tuple ("in" for for-targets). */
static kn_jnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *end_name,
                             bool explicit_parens) {
    size_t off = cur(P)->off;
    nvec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n && !expect_op(P, KN_TO_COMMA, "','")) {
            free(items.v);
            return NULL;
        }
        const kn_jtok *t = cur(P);
        if (t->type == KN_T_VAR_END || t->type == KN_T_BLOCK_END || (t->type == KN_T_OP && t->op == KN_TO_RPAREN) ||
            (end_name && is_name(P, end_name)))
            break;
        kn_jnode *e = simplified ? parse_primary(P) : parse_expression(P, with_condexpr);
        if (!e || !nvec_push(P, &items, e)) {
            free(items.v);
            return NULL;
        }
        if (is_op(P, KN_TO_COMMA)) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (items.n) {
            kn_jnode *e = items.v[0];
            free(items.v);
            return e;
        }
        if (!explicit_parens) {
            free(items.v);
            return unexpected(P, "an expression");
        }
    }
    kn_jnode *n = node(P, KN_N_TUPLE, off);
    if (!n || !nvec_finish(P, &items, &n->kids)) {
        free(items.v);
        return NULL;
    }
    return n;
}

/* ---- statements ------------------------------------------------------------------------------ */

static bool parse_body(parser *P, const char *const *ends, nvec *out);

static bool body_until(parser *P, const char *const *ends, kn_jnodes *out) {
    nvec v = {0};
    if (!parse_body(P, ends, &v)) {
        free(v.v);
        return false;
    }
    return nvec_finish(P, &v, out);
}

/* Assignment target names: one name or a tuple of names; sets n->syms. */
static bool parse_targets(parser *P, kn_jnode *n, const char *end_name) {
    size_t off = cur(P)->off;
    kn_jnode *t = parse_tuple(P, true, false, end_name, false);
    if (!t) return false;
    int32_t syms[64];
    uint32_t k = 0;
    if (t->kind == KN_N_NAME) {
        syms[k++] = t->sym;
    } else if (t->kind == KN_N_TUPLE) {
        for (uint32_t i = 0; i < t->kids.n; i++) {
            if (t->kids.v[i]->kind != KN_N_NAME || k == KN_ARRAY_LEN(syms)) {
                fail_at(P, t->kids.v[i]->off, "can't assign to this target");
                return false;
            }
            syms[k++] = t->kids.v[i]->sym;
        }
        n->op |= 2; /* tuple target */
    } else {
        fail_at(P, off, "can't assign to %s", t->kind == KN_N_LIT ? "a literal" : "this expression");
        return false;
    }
    if (!(n->syms = arena_alloc(P->t, k * sizeof *n->syms))) {
        nomem(P);
        return false;
    }
    memcpy(n->syms, syms, k * sizeof *syms);
    n->n_syms = k;
    return true;
}

static const char *const END_FOR[] = {"endfor", "else", NULL};
static const char *const END_FOR2[] = {"endfor", NULL};
static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_IF2[] = {"endif", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_CALL[] = {"endcall", NULL};
static const char *const END_FILTER[] = {"endfilter", NULL};
static const char *const END_WITH[] = {"endwith", NULL};
static const char *const END_GENERATION[] = {"endgeneration", NULL};

/* After a body, the current token is the end name (the block begin was consumed). */
static bool end_tag(parser *P, const char *name) { return expect_name(P, name) && expect_block_end(P); }

/* {% for targets in iterable [if cond] [recursive] %} body [{% else %} body] {% endfor %} */
static kn_jnode *parse_for(parser *P, size_t off) {
    kn_jnode *n = node(P, KN_N_FOR, off);
    if (!n || !parse_targets(P, n, "in") || !expect_name(P, "in")) return NULL;
    if (!(n->a = parse_tuple(P, false, false, "recursive", false))) return NULL;
    if (is_name(P, "if")) {
        advance(P);
        if (!(n->b = parse_expression(P, true))) return NULL;
    }
    if (is_name(P, "recursive")) {
        advance(P);
        n->op |= 1;
    }
    if (!expect_block_end(P)) return NULL;
    bool soft = P->soft;
    P->soft = false;
    P->loops++;
    bool ok = body_until(P, END_FOR, &n->kids);
    P->loops--;
    if (ok && is_name(P, "else")) {
        advance(P);
        ok = expect_block_end(P) && body_until(P, END_FOR2, &n->kids2);
    }
    P->soft = soft;
    return ok && end_tag(P, "endfor") ? n : NULL;
}

/* {% if %} ... {% elif %} ... {% else %} ... {% endif %}; an elif becomes a nested IF. */
static kn_jnode *parse_if(parser *P, size_t off) {
    kn_jnode *n = node(P, KN_N_IF, off);
    if (!n) return NULL;
    bool soft = P->soft;
    P->soft = true;
    bool ok =
        (n->a = parse_tuple(P, false, false, NULL, false)) && expect_block_end(P) && body_until(P, END_IF, &n->kids);
    if (ok && is_name(P, "elif")) {
        size_t eoff = cur(P)->off;
        advance(P);
        kn_jnode *e = enter(P) ? parse_if(P, eoff) : NULL; /* consumes through endif */
        leave(P);
        P->soft = soft;
        if (!e) return NULL;
        if (!(n->kids2.v = arena_alloc(P->t, sizeof *n->kids2.v))) return nomem(P);
        n->kids2.v[0] = e;
        n->kids2.n = 1;
        return n;
    }
    if (ok && is_name(P, "else")) {
        advance(P);
        ok = expect_block_end(P) && body_until(P, END_IF2, &n->kids2);
    }
    P->soft = soft;
    return ok && end_tag(P, "endif") ? n : NULL;
}

/* {% set targets = expr %}, {% set ns.attr = expr %} or {% set x [| filters] %} body {% endset %} */
static kn_jnode *parse_set(parser *P, size_t off) {
    kn_jnode *n = node(P, KN_N_SET, off);
    if (!n) return NULL;
    if (cur(P)->type == KN_T_NAME && peek(P, 1)->type == KN_T_OP && peek(P, 1)->op == KN_TO_DOT) {
        /* namespace attribute */
        n->sym = intern(P, P->s + cur(P)->off, cur(P)->len);
        advance(P);
        advance(P);
        if (cur(P)->type != KN_T_NAME) return unexpected(P, "a name");
        kn_jstr *attr = lit_str(P, P->s + cur(P)->off, cur(P)->len);
        if (n->sym < 0 || !attr) return NULL;
        n->lit.t = KN_J_STR;
        n->lit.u.s = attr;
        n->op = 1;
        advance(P);
    } else if (!parse_targets(P, n, NULL)) {
        return NULL;
    }
    if (is_op(P, KN_TO_ASSIGN)) {
        advance(P);
        if (!(n->b = parse_tuple(P, false, true, NULL, false))) return NULL;
        return expect_block_end(P) ? n : NULL;
    }
    if (n->n_syms > 1) return unexpected(P, "'='");
    n->kind = KN_N_SETBLOCK;
    if (is_op(P, KN_TO_PIPE)) {
        kn_jnode *in = node(P, KN_N_INPUT, cur(P)->off);
        if (!in || !(n->c = parse_filter(P, in, false))) return NULL;
    }
    if (!expect_block_end(P) || !body_until(P, END_SET, &n->kids)) return NULL;
    return end_tag(P, "endset") ? n : NULL;
}

/* Parameter list "(a, b=1)" for macros and call blocks into n->syms / n->kids2. */
static bool parse_params(parser *P, kn_jnode *n) {
    if (!expect_op(P, KN_TO_LPAREN, "'('")) return false;
    int32_t syms[256];
    nvec defs = {0};
    uint32_t k = 0;
    while (!is_op(P, KN_TO_RPAREN)) {
        if (k && !expect_op(P, KN_TO_COMMA, "','")) goto fail;
        if (k && is_op(P, KN_TO_RPAREN)) break;
        if (cur(P)->type != KN_T_NAME) {
            unexpected(P, "a parameter name");
            goto fail;
        }
        if (k == KN_ARRAY_LEN(syms)) {
            fail_at(P, cur(P)->off, "too many parameters");
            goto fail;
        }
        int32_t s = intern(P, P->s + cur(P)->off, cur(P)->len);
        if (s < 0) goto fail;
        advance(P);
        kn_jnode *def = NULL;
        if (is_op(P, KN_TO_ASSIGN)) {
            advance(P);
            if (!(def = parse_expression(P, true))) goto fail;
        } else if (defs.n && defs.v[defs.n - 1]) {
            fail_at(P, cur(P)->off, "non-default argument follows default argument");
            goto fail;
        }
        if (!nvec_push(P, &defs, def)) goto fail;
        syms[k++] = s;
    }
    advance(P);
    if (!nvec_finish(P, &defs, &n->kids2)) return false;
    if (k && !(n->syms = arena_alloc(P->t, k * sizeof *n->syms))) {
        nomem(P);
        return false;
    }
    if (k) memcpy(n->syms, syms, k * sizeof *syms);
    n->n_syms = k;
    return true;
fail:
    free(defs.v);
    return false;
}

/* The body of a macro or call block (loops and soft-if state reset inside). */
static kn_jnode *parse_macro_body(parser *P, kn_jnode *n, const char *const *ends) {
    if (P->macro_depth >= KN_JINJA_MAX_PARSE_DEPTH) return fail_at(P, n->off, "macros nested too deeply");
    P->macros[P->macro_depth++] = n;
    int loops = P->loops;
    bool soft = P->soft;
    P->loops = 0;
    P->soft = false;
    bool ok = expect_block_end(P) && body_until(P, ends, &n->kids);
    P->loops = loops;
    P->soft = soft;
    P->macro_depth--;
    return ok ? n : NULL;
}

/* {% macro name(params) %} body {% endmacro %} */
static kn_jnode *parse_macro(parser *P, size_t off) {
    kn_jnode *n = node(P, KN_N_MACRO, off);
    if (!n) return NULL;
    if (cur(P)->type != KN_T_NAME) return unexpected(P, "a macro name");
    n->sym = intern(P, P->s + cur(P)->off, cur(P)->len);
    kn_jstr *name = lit_str(P, P->s + cur(P)->off, cur(P)->len);
    if (n->sym < 0 || !name) return NULL;
    n->lit.t = KN_J_STR;
    n->lit.u.s = name;
    advance(P);
    if (!parse_params(P, n)) return NULL;
    if (!parse_macro_body(P, n, END_MACRO)) return NULL;
    return end_tag(P, "endmacro") ? n : NULL;
}

/* {% call[(params)] macro(args) %} body {% endcall %} */
static kn_jnode *parse_call_block(parser *P, size_t off) {
    kn_jnode *n = node(P, KN_N_CALLBLOCK, off);
    if (!n) return NULL;
    if (is_op(P, KN_TO_LPAREN) && !parse_params(P, n)) return NULL;
    kn_jstr *name = lit_str(P, "caller", 6);
    if (!name) return NULL;
    n->lit.t = KN_J_STR;
    n->lit.u.s = name;
    size_t coff = cur(P)->off;
    if (!(n->a = parse_expression(P, true))) return NULL;
    if (n->a->kind != KN_N_CALL) return fail_at(P, coff, "expected call");
    if (!parse_macro_body(P, n, END_CALL)) return NULL;
    return end_tag(P, "endcall") ? n : NULL;
}

/* A statement after "{%": dispatches on its tag name. */
static kn_jnode *parse_statement(parser *P) {
    const kn_jtok *t = cur(P);
    size_t off = t->off;
    if (t->type != KN_T_NAME) return unexpected(P, "a tag name");
    char name[32];
    size_t len = KN_MIN((size_t)t->len, sizeof name - 1);
    memcpy(name, P->s + t->off, len);
    name[len] = 0;
    if (t->len >= sizeof name) name[0] = 0;
    advance(P);
    if (!strcmp(name, "for")) return parse_for(P, off);
    if (!strcmp(name, "if")) return parse_if(P, off);
    if (!strcmp(name, "set")) return parse_set(P, off);
    if (!strcmp(name, "macro")) return parse_macro(P, off);
    if (!strcmp(name, "call")) return parse_call_block(P, off);
    if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (!P->loops) return fail_at(P, off, "'%s' outside loop", name);
        kn_jnode *n = node(P, name[0] == 'b' ? KN_N_BREAK : KN_N_CONTINUE, off);
        return n && expect_block_end(P) ? n : NULL;
    }
    if (!strcmp(name, "filter")) {
        kn_jnode *n = node(P, KN_N_FILTERBLOCK, off);
        kn_jnode *in = node(P, KN_N_INPUT, cur(P)->off);
        if (!n || !in) return NULL;
        bool soft = P->soft;
        if (!(n->c = parse_filter(P, in, true))) return NULL;
        P->soft = false;
        bool ok = expect_block_end(P) && body_until(P, END_FILTER, &n->kids);
        P->soft = soft;
        return ok && end_tag(P, "endfilter") ? n : NULL;
    }
    if (!strcmp(name, "with")) {
        kn_jnode *n = node(P, KN_N_WITH, off);
        if (!n) return NULL;
        int32_t syms[64];
        nvec vals = {0};
        uint32_t k = 0;
        while (cur(P)->type != KN_T_BLOCK_END) {
            if (k && !expect_op(P, KN_TO_COMMA, "','")) {
                free(vals.v);
                return NULL;
            }
            if (cur(P)->type != KN_T_NAME || k == KN_ARRAY_LEN(syms)) {
                free(vals.v);
                return unexpected(P, "a name");
            }
            int32_t s = intern(P, P->s + cur(P)->off, cur(P)->len);
            advance(P);
            kn_jnode *v = NULL;
            if (s < 0 || !expect_op(P, KN_TO_ASSIGN, "'='") || !(v = parse_expression(P, true)) ||
                !nvec_push(P, &vals, v)) {
                free(vals.v);
                return NULL;
            }
            syms[k++] = s;
        }
        if (!nvec_finish(P, &vals, &n->kids2)) return NULL;
        if (k && !(n->syms = arena_alloc(P->t, k * sizeof *n->syms))) return nomem(P);
        if (k) memcpy(n->syms, syms, k * sizeof *syms);
        n->n_syms = k;
        bool soft = P->soft;
        P->soft = false;
        bool ok = expect_block_end(P) && body_until(P, END_WITH, &n->kids);
        P->soft = soft;
        return ok && end_tag(P, "endwith") ? n : NULL;
    }
    if (!strcmp(name, "generation")) {
        /* Hugging Face's AssistantTracker extension marks assistant text with this block; it
         * renders its body like a call block does (in a scope of its own) */
        kn_jnode *n = node(P, KN_N_WITH, off);
        if (!n) return NULL;
        bool soft = P->soft;
        P->soft = false;
        bool ok = expect_block_end(P) && body_until(P, END_GENERATION, &n->kids);
        P->soft = soft;
        return ok && end_tag(P, "endgeneration") ? n : NULL;
    }
    return fail_at(P, off, "Encountered unknown tag '%.*s'.", (int)KN_MIN(t->len, 40u), P->s + t->off);
}

static bool in_list(const parser *P, const char *const *names) {
    for (; names && *names; names++)
        if (is_name(P, *names)) return true;
    return false;
}

/* Parses statements and data until a block tag whose name is in ends (consuming its "{%") or the
 * end of the template (an error when ends is not NULL). */
static bool parse_body(parser *P, const char *const *ends, nvec *out) {
    if (!enter(P)) return false;
    for (;;) {
        const kn_jtok *t = cur(P);
        if (t->type == KN_T_EOF) {
            leave(P);
            if (!ends) return true;
            char want[128] = "";
            size_t w = 0;
            for (const char *const *e = ends; *e; e++)
                w +=
                    (size_t)snprintf(want + w, sizeof want - KN_MIN(w, sizeof want - 1), "%s'%s'", w ? " or " : "", *e);
            fail_at(P, t->off, "unexpected end of template, expected %s", want);
            return false;
        }
        kn_jnode *n = NULL;
        if (t->type == KN_T_DATA) {
            if ((n = node(P, KN_N_TEXT, t->off))) {
                kn_jstr *s = lit_str(P, P->s + t->off, t->len);
                if (s) {
                    n->lit.t = KN_J_STR;
                    n->lit.u.s = s;
                } else n = NULL;
            }
            advance(P);
        } else if (t->type == KN_T_VAR_BEGIN) {
            advance(P);
            if ((n = node(P, KN_N_PRINT, t->off)) && (n->a = parse_tuple(P, false, true, NULL, false))) {
                if (cur(P)->type != KN_T_VAR_END) n = unexpected(P, "end of print statement");
                else advance(P);
            } else {
                n = NULL;
            }
        } else if (t->type == KN_T_BLOCK_BEGIN) {
            advance(P);
            if (in_list(P, ends)) {
                leave(P);
                return true;
            }
            n = parse_statement(P);
        } else {
            n = unexpected(P, NULL);
        }
        if (!n || !nvec_push(P, out, n)) {
            leave(P);
            return false;
        }
    }
}

kiln_status kn_jinja_parse(const char *src, size_t len, kn_jtmpl **out) {
    *out = NULL;
    if (!src && len) return kn_error(KILN_ERR_INVALID_ARG, "template is NULL");
    if (len > KN_JINJA_MAX_SOURCE) return kn_error(KILN_ERR_FORMAT, "template is too large (%zu bytes)", len);
    kn_jtmpl *t = calloc(1, sizeof *t);
    if (!t) return kn_error(KILN_ERR_NOMEM, "out of memory");
    if (!(t->src = kn_jlex_normalize(src ? src : "", len, &t->len))) {
        free(t);
        return kn_error(KILN_ERR_NOMEM, "out of memory");
    }
    parser P = {.t = t, .s = t->src, .n = t->len};
    kiln_status st = kn_jlex(t->src, t->len, &P.toks);
    if (!st) {
        t->sym_loop = intern(&P, "loop", 4);
        t->sym_caller = intern(&P, "caller", 6);
        t->sym_varargs = intern(&P, "varargs", 7);
        t->sym_kwargs = intern(&P, "kwargs", 6);
        nvec body = {0};
        if (!P.failed && parse_body(&P, NULL, &body)) nvec_finish(&P, &body, &t->body);
        else free(body.v);
        if (P.failed)
            st = kn_error_msg()[0] && strstr(kn_error_msg(), "out of memory") ? KILN_ERR_NOMEM : KILN_ERR_FORMAT;
    }
    free(P.toks.v);
    if (st) {
        kn_jinja_free(t);
        return st;
    }
    *out = t;
    return KILN_OK;
}

void kn_jinja_free(kn_jtmpl *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n_lits; i++) free(t->lits[i]);
    free(t->lits);
    free(t->syms);
    free(t->sym_idx);
    arena_free(t->arena);
    free(t->src);
    free(t);
}

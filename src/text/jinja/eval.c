/*
 * eval.c - the Jinja2 renderer: runs a parsed template over a context.
 *
 * Scoping follows Jinja2: the template's top level is the root scope (the context's variables,
 * then top-level {% set %}s); every for-loop iteration, macro call, call-block caller and
 * {% with %} opens a child scope, so a {% set %} inside a loop is gone after the iteration (hence
 * namespace()). Lookups walk the scope chain, then the globals (range, namespace, raise_exception,
 * ...), and end in Undefined. Macros close over the scope they were defined in and see its
 * variables as they are when called. A scope that a macro (or a recursive loop) closes over is
 * kept until the render ends; any other scope releases its values when it closes.
 *
 * Expressions are evaluated here; what an operation does to values (arithmetic, comparisons,
 * attribute access through the sandbox, slicing, iteration) is ops.c's, and the filters,
 * tests and globals are builtins.c's.
 *
 * Limits: evaluation depth, macro call depth, total steps and total work (bytes and items copied)
 * are bounded (jinja.h), so a hostile template fails cleanly instead of exhausting the stack, the
 * memory or the CPU. The first error stops the render and is reported with its source position.
 */
#include "text/jinja/impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EX_OK = 0, EX_ERR, EX_BREAK, EX_CONTINUE };

/* ---- errors and budgets ---------------------------------------------------------------------- */

bool kn_jfail(kn_jr *r, const char *fmt, ...) {
    if (r->failed) return false;
    r->failed = true;
    r->status = KILN_ERR_FORMAT;
    r->err_pos = r->pos;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    return false;
}

bool kn_jnomem(kn_jr *r) {
    if (r->failed) return false;
    kn_jfail(r, "out of memory");
    r->status = KILN_ERR_NOMEM;
    return false;
}

bool kn_jwork(kn_jr *r, uint64_t n) {
    r->work += n;
    if (r->work > KN_JINJA_MAX_WORK) return kn_jfail(r, "template exceeds the work limit (too much copying)");
    return true;
}

/* Counts one evaluation step against KN_JINJA_MAX_STEPS. */
static bool step(kn_jr *r) {
    if (++r->steps > KN_JINJA_MAX_STEPS)
        return kn_jfail(r, "template exceeds the limit of %llu evaluation steps",
                        (unsigned long long)KN_JINJA_MAX_STEPS);
    return true;
}

bool kn_jundef_error(kn_jr *r, kn_jv u) { return kn_jfail(r, "%s", u.u.s ? u.u.s->s : "undefined value"); }

/* ---- tracked objects ------------------------------------------------------------------------- */

/* Counts bytes that stay allocated until the render ends against KN_JINJA_MAX_HELD. */
static bool hold(kn_jr *r, uint64_t bytes) {
    r->held += bytes;
    if (r->held > KN_JINJA_MAX_HELD) return kn_jfail(r, "template keeps too much memory alive (namespaces, macros)");
    return true;
}

/* Allocates a zeroed tracked object of size bytes, freed when the render ends. */
static void *track(kn_jr *r, size_t size, uint8_t kind) {
    if (!hold(r, size + 64)) return NULL;
    kn_jtracked *t = calloc(1, size);
    if (!t) {
        kn_jnomem(r);
        return NULL;
    }
    t->kind = kind;
    t->next = r->tracked;
    r->tracked = t;
    return t;
}

kn_jns *kn_jns_new(kn_jr *r) {
    kn_jns *ns = track(r, sizeof *ns, KN_J_NS);
    if (ns && !(ns->attrs = kn_jdict_new(r))) return NULL;
    return ns;
}

/* Frees every tracked object (namespaces, macros) of the render. */
static void free_tracked(kn_jr *r) {
    kn_jtracked *t = r->tracked;
    while (t) {
        kn_jtracked *next = t->next;
        if (t->kind == KN_J_NS) {
            kn_jns *ns = (kn_jns *)t;
            if (ns->attrs) kn_jv_drop(kn_jv_dict(ns->attrs));
        }
        free(t);
        t = next;
    }
    r->tracked = NULL;
}

/* ---- scopes ---------------------------------------------------------------------------------- */

struct kn_jscope {
    kn_jscope *parent;
    kn_jscope *all_next;  /* every scope of the render, for the final release */
    kn_jscope *free_next; /* released scopes ready for reuse */
    int32_t *syms;        /* inner scopes: names and values, with an index past 8 entries */
    kn_jv *vals;
    uint32_t n, cap;
    uint32_t *idx;
    uint32_t idx_cap;
    uint8_t *present; /* root scope: vals is indexed by symbol, present says which are set */
    bool captured;
    bool root;
};

/* A scope whose parent is parent (reusing a released one when possible). */
static kn_jscope *scope_new(kn_jr *r, kn_jscope *parent) {
    kn_jscope *s = r->free_scopes;
    if (s) {
        r->free_scopes = s->free_next;
    } else {
        if (!(s = calloc(1, sizeof *s))) {
            kn_jnomem(r);
            return NULL;
        }
        s->all_next = r->all_scopes;
        r->all_scopes = s;
    }
    s->parent = parent;
    s->n = 0;
    s->captured = false;
    return s;
}

/* Releases the values of a scope. */
static void scope_clear(kn_jscope *s) {
    if (s->root) {
        for (uint32_t i = 0; i < s->n; i++)
            if (s->present[i]) {
                kn_jv_drop(s->vals[i]);
                s->present[i] = 0;
            }
        return;
    }
    for (uint32_t i = 0; i < s->n; i++) kn_jv_drop(s->vals[i]);
    s->n = 0;
    free(s->idx);
    s->idx = NULL;
    s->idx_cap = 0;
}

/* Closes a scope: its values are released unless a macro closed over it. */
static void scope_close(kn_jr *r, kn_jscope *s) {
    if (!s || s->captured) return;
    scope_clear(s);
    s->free_next = r->free_scopes;
    r->free_scopes = s;
}

/* Keeps s and its parents alive to the end of the render (a macro closes over them). */
static bool capture(kn_jr *r, kn_jscope *s) {
    for (; s && !s->captured; s = s->parent) {
        s->captured = true;
        if (!hold(r, sizeof *s + (uint64_t)s->cap * (sizeof *s->vals + sizeof *s->syms))) return false;
    }
    return true;
}

/* The value of sym in scope s itself, NULL when s does not set it. */
static kn_jv *scope_find(const kn_jscope *s, int32_t sym) {
    if (s->root) return s->present[sym] ? &s->vals[sym] : NULL;
    if (s->idx) {
        uint32_t mask = s->idx_cap - 1;
        for (uint32_t h = ((uint32_t)sym * 2654435761u) & mask;; h = (h + 1) & mask) {
            uint32_t e = s->idx[h];
            if (!e) return NULL;
            if (s->syms[e - 1] == sym) return &s->vals[e - 1];
        }
    }
    for (uint32_t i = 0; i < s->n; i++)
        if (s->syms[i] == sym) return &s->vals[i];
    return NULL;
}

/* Rebuilds a scope's hash index (false when memory runs out). */
static bool scope_reindex(kn_jscope *s) {
    uint32_t cap = 16;
    while (cap < s->n * 2 + 2) cap *= 2;
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx) return false;
    free(s->idx);
    s->idx = idx;
    s->idx_cap = cap;
    for (uint32_t e = 0; e < s->n; e++) {
        uint32_t h = ((uint32_t)s->syms[e] * 2654435761u) & (cap - 1);
        while (idx[h]) h = (h + 1) & (cap - 1);
        idx[h] = e + 1;
    }
    return true;
}

/* Sets sym to v (consumed) in scope s. */
static bool scope_set(kn_jr *r, kn_jscope *s, int32_t sym, kn_jv v) {
    if (s->root) {
        if (s->present[sym]) kn_jv_drop(s->vals[sym]);
        s->vals[sym] = v;
        s->present[sym] = 1;
        return true;
    }
    kn_jv *p = scope_find(s, sym);
    if (p) {
        kn_jv_drop(*p);
        *p = v;
        return true;
    }
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 8;
        int32_t *ns = realloc(s->syms, cap * sizeof *ns);
        if (ns) s->syms = ns;
        kn_jv *nv = ns ? realloc(s->vals, cap * sizeof *nv) : NULL;
        if (nv) s->vals = nv;
        if (!ns || !nv) {
            kn_jv_drop(v);
            return kn_jnomem(r);
        }
        s->cap = cap;
    }
    s->syms[s->n] = sym;
    s->vals[s->n] = v;
    s->n++;
    if (s->n > 8 && (!s->idx || s->n * 2 + 2 > s->idx_cap)) {
        if (!scope_reindex(s)) return kn_jnomem(r);
    } else if (s->idx) {
        uint32_t mask = s->idx_cap - 1;
        uint32_t h = ((uint32_t)sym * 2654435761u) & mask;
        while (s->idx[h]) h = (h + 1) & mask;
        s->idx[h] = s->n;
    }
    return true;
}

/* The value of sym in the current scope chain, NULL when no scope sets it. */
static kn_jv *lookup(const kn_jr *r, int32_t sym) {
    for (const kn_jscope *s = r->scope; s; s = s->parent) {
        kn_jv *p = scope_find(s, sym);
        if (p) return p;
    }
    return NULL;
}

/* Frees every scope of the render. */
static void free_scopes(kn_jr *r) {
    kn_jscope *s = r->all_scopes;
    while (s) {
        kn_jscope *next = s->all_next;
        scope_clear(s);
        free(s->syms);
        free(s->vals);
        free(s->idx);
        free(s->present);
        free(s);
        s = next;
    }
    r->all_scopes = r->free_scopes = NULL;
}

/* ---- output ---------------------------------------------------------------------------------- */

/* Runs the statements of a body in order; stops at an error, break or continue. */
static int exec_body(kn_jr *r, const kn_jnodes *b);

/* Runs body with output going to a fresh buffer; on success *out is the text as a string. */
static bool capture_body(kn_jr *r, const kn_jnodes *body, kn_jv *out) {
    kn_jbuf buf, *saved = r->out;
    kn_jbuf_init(&buf, r);
    r->out = &buf;
    int rc = exec_body(r, body);
    r->out = saved;
    if (rc == EX_ERR) {
        kn_jbuf_free(&buf);
        return false;
    }
    return kn_jbuf_take(&buf, false, out);
}

/* ---- calls ----------------------------------------------------------------------------------- */

/* Evaluated arguments of a call, filter or test node (plus room for one extra keyword). */
typedef struct evargs {
    kn_jargs a;
    kn_jv small[8];
    kn_jstr *small_names[8];
    kn_jv *vals;
    kn_jstr **names;
    size_t n;
} evargs;

/* Evaluates expression n into *out (one reference); counts the step and the nesting depth. */
static bool eval(kn_jr *r, const kn_jnode *n, kn_jv *out);

/* Releases evaluated arguments. */
static void evargs_free(evargs *e) {
    for (size_t i = 0; i < e->n; i++) kn_jv_drop(e->vals[i]);
    if (e->vals != e->small) free(e->vals);
    if (e->names != e->small_names) free(e->names);
}

/* Evaluates the arguments of a CALL / FILTER / TEST node, leaving room for extra keywords. */
static bool eval_args(kn_jr *r, const kn_jnode *n, size_t extra, evargs *e) {
    size_t np = n->kids.n, nk = n->kids2.n, total = np + nk + extra;
    e->n = 0;
    e->vals = total <= 8 ? e->small : malloc(total * sizeof *e->vals);
    e->names = nk + extra <= 8 ? e->small_names : malloc((nk + extra) * sizeof *e->names);
    if (!e->vals || !e->names) {
        if (e->vals && e->vals != e->small) free(e->vals);
        if (e->names && e->names != e->small_names) free(e->names);
        e->vals = e->small;
        e->names = e->small_names;
        return kn_jnomem(r);
    }
    for (size_t i = 0; i < np + nk; i++) {
        const kn_jnode *x = i < np ? n->kids.v[i] : n->kids2.v[i - np];
        if (!eval(r, x, &e->vals[i])) {
            evargs_free(e);
            e->n = 0;
            return false;
        }
        e->n++;
    }
    for (size_t i = 0; i < nk; i++) e->names[i] = n->names[i];
    e->a.pos = e->vals;
    e->a.n_pos = np;
    e->a.kw = e->vals + np;
    e->a.kw_names = e->names;
    e->a.n_kw = nk;
    return true;
}

static bool str_eq(const kn_jstr *a, const kn_jstr *b) { return a->len == b->len && memcmp(a->s, b->s, a->len) == 0; }

/* Calls a macro (or a call block's caller) with bound arguments; *out is its output. */
static bool call_macro(kn_jr *r, const kn_jmacro *m, const kn_jargs *a, kn_jv *out) {
    const kn_jnode *n = m->node;
    const kn_jtmpl *t = r->t;
    bool is_caller = n->kind == KN_N_CALLBLOCK;
    const char *name = n->lit.u.s->s;
    if (r->calls >= KN_JINJA_MAX_CALL_DEPTH)
        return kn_jfail(r, "maximum macro recursion depth (%d) exceeded", KN_JINJA_MAX_CALL_DEPTH);
    uint32_t np = n->n_syms;
    bool bound[256] = {0};
    kn_jscope *s = scope_new(r, m->scope);
    if (!s) return false;
    kn_jlist *varargs = NULL;
    kn_jdict *kwargs = NULL;
    bool ok = true, caller_given = false;
    for (size_t i = 0; ok && i < a->n_pos; i++) {
        if (i < np) {
            ok = scope_set(r, s, n->syms[i], kn_jv_ref(a->pos[i]));
            bound[i] = true;
        } else if (n->op & KN_MAC_VARARGS) {
            if (!varargs && !(varargs = kn_jlist_new(r, 0))) ok = false;
            else ok = kn_jlist_push(r, varargs, kn_jv_ref(a->pos[i]));
        } else {
            ok = kn_jfail(r, "macro '%s' takes not more than %u argument(s)", name, np);
        }
    }
    for (size_t i = 0; ok && i < a->n_kw; i++) {
        const kn_jstr *k = a->kw_names[i];
        uint32_t j;
        for (j = 0; j < np; j++)
            if (str_eq(t->syms[n->syms[j]].name, k)) break;
        if (j < np) {
            if (bound[j]) {
                ok = kn_jfail(r, "macro '%s' got multiple values for argument '%s'", name, k->s);
                break;
            }
            ok = scope_set(r, s, n->syms[j], kn_jv_ref(a->kw[i]));
            bound[j] = true;
        } else if (!is_caller && (n->op & KN_MAC_CALLER) && k->len == 6 && memcmp(k->s, "caller", 6) == 0) {
            ok = scope_set(r, s, t->sym_caller, kn_jv_ref(a->kw[i]));
            caller_given = true;
        } else if (n->op & KN_MAC_KWARGS) {
            kn_jv key;
            if (!kwargs && !(kwargs = kn_jdict_new(r))) ok = false;
            else ok = kn_jmk_str(r, k->s, k->len, false, &key) && kn_jdict_set(r, kwargs, key, kn_jv_ref(a->kw[i]));
        } else {
            ok = kn_jfail(r, "macro '%s' takes no keyword argument '%s'", name, k->s);
        }
    }
    kn_jscope *saved = r->scope;
    r->scope = s;
    for (uint32_t j = 0; ok && j < np; j++) {
        if (bound[j]) continue;
        kn_jv v;
        if (n->kids2.v && n->kids2.v[j]) ok = eval(r, n->kids2.v[j], &v);
        else v = kn_jv_undef_hint(r, false, "'%s' is undefined", t->syms[n->syms[j]].name->s);
        if (ok) ok = scope_set(r, s, n->syms[j], v);
    }
    if (ok && (n->op & KN_MAC_VARARGS)) {
        if (!varargs) varargs = kn_jlist_new(r, 0);
        ok = varargs && scope_set(r, s, t->sym_varargs, kn_jv_list(varargs, true));
        varargs = NULL;
    }
    if (ok && (n->op & KN_MAC_KWARGS)) {
        if (!kwargs) kwargs = kn_jdict_new(r);
        ok = kwargs && scope_set(r, s, t->sym_kwargs, kn_jv_dict(kwargs));
        kwargs = NULL;
    }
    if (ok && !is_caller && (n->op & KN_MAC_CALLER) && !caller_given)
        ok = scope_set(r, s, t->sym_caller, kn_jv_undef_hint(r, false, "No caller defined"));
    if (varargs) kn_jv_drop(kn_jv_list(varargs, true));
    if (kwargs) kn_jv_drop(kn_jv_dict(kwargs));
    if (ok) {
        r->calls++;
        ok = capture_body(r, &n->kids, out);
        r->calls--;
    }
    r->scope = saved;
    scope_close(r, s);
    return ok;
}

static int run_loop(kn_jr *r, const kn_jnode *n, kn_jv iterable, int depth0);

bool kn_jcall(kn_jr *r, kn_jv fn, const kn_jargs *a, kn_jv *out) {
    switch (fn.t) {
        case KN_J_MACRO: return call_macro(r, fn.u.mac, a, out);
        case KN_J_FUNC: return kn_jglobal_call(r, (int)fn.u.i, a, out);
        case KN_J_METHOD: return kn_jmethod_call(r, fn.u.m, a, out);
        case KN_J_LOOP: {
            kn_jloop *l = fn.u.loop;
            if (!(l->node->op & 1))
                return kn_jfail(r, "Tried to call non recursive loop. Maybe you forgot the 'recursive' modifier.");
            if (a->n_pos != 1 || a->n_kw) return kn_jfail(r, "loop() takes exactly one argument");
            if (r->calls >= KN_JINJA_MAX_CALL_DEPTH) return kn_jfail(r, "maximum loop recursion depth exceeded");
            kn_jbuf buf, *saved_out = r->out;
            kn_jscope *saved = r->scope;
            kn_jbuf_init(&buf, r);
            r->out = &buf;
            r->scope = l->scope;
            r->calls++;
            int rc = run_loop(r, l->node, a->pos[0], l->depth0 + 1);
            r->calls--;
            r->out = saved_out;
            r->scope = saved;
            if (rc == EX_ERR) {
                kn_jbuf_free(&buf);
                return false;
            }
            return kn_jbuf_take(&buf, false, out);
        }
        case KN_J_UNDEF: return kn_jundef_error(r, fn);
        default: return kn_jfail(r, "'%s' object is not callable", kn_jv_typename(fn));
    }
}

/* ---- expressions ----------------------------------------------------------------------------- */

/* The cases of eval_inner that need large frames live in functions of their own (not inlined),
 * so that the frame repeated at every level of a deeply nested expression stays small. */

/* fn(args...) */
static __attribute__((noinline)) bool eval_call(kn_jr *r, const kn_jnode *n, kn_jv *out) {
    kn_jv fn;
    evargs e;
    if (!eval(r, n->a, &fn)) return false;
    if (!eval_args(r, n, 0, &e)) {
        kn_jv_drop(fn);
        return false;
    }
    r->pos = n->off;
    bool ok = kn_jcall(r, fn, &e.a, out);
    evargs_free(&e);
    kn_jv_drop(fn);
    return ok;
}

/* value|filter(args) and value is test(args) */
static __attribute__((noinline)) bool eval_filter_test(kn_jr *r, const kn_jnode *n, kn_jv *out) {
    kn_jv v;
    evargs e;
    if (!eval(r, n->a, &v)) return false;
    if (!eval_args(r, n, 0, &e)) {
        kn_jv_drop(v);
        return false;
    }
    r->pos = n->off;
    bool ok;
    if (n->id == UINT16_MAX) {
        ok = kn_jfail(r, "%s", n->lit.u.s->s);
    } else if (n->kind == KN_N_FILTER) {
        ok = kn_jfilter_call(r, n->id, v, &e.a, out);
    } else {
        bool res = false;
        ok = kn_jtest_call(r, n->id, v, &e.a, &res);
        if (ok) *out = kn_jv_bool(n->op ? !res : res);
    }
    evargs_free(&e);
    kn_jv_drop(v);
    return ok;
}

/* obj[a:b:c] */
static __attribute__((noinline)) bool eval_slice(kn_jr *r, const kn_jnode *n, kn_jv *out) {
    kn_jv o, bv[3] = {kn_jv_none(), kn_jv_none(), kn_jv_none()};
    if (!eval(r, n->a, &o)) return false;
    bool ok = true;
    for (int k = 0; ok && k < 3; k++)
        if (n->kids.v[k]) ok = eval(r, n->kids.v[k], &bv[k]);
    r->pos = n->off;
    if (ok) ok = kn_jslice(r, o, bv, out);
    kn_jv_drop(o);
    for (int k = 0; k < 3; k++) kn_jv_drop(bv[k]);
    return ok;
}

static bool eval_inner(kn_jr *r, const kn_jnode *n, kn_jv *out) {
    switch (n->kind) {
        case KN_N_LIT: *out = kn_jv_ref(n->lit); return true;
        case KN_N_NAME: {
            kn_jv *v = lookup(r, n->sym);
            if (v) {
                *out = kn_jv_ref(*v);
                return true;
            }
            int g = r->t->syms[n->sym].global;
            if (g >= 0) {
                *out = (kn_jv){0};
                out->t = KN_J_FUNC;
                out->u.i = g;
                return true;
            }
            *out = kn_jv_undef_hint(r, false, "'%s' is undefined", r->t->syms[n->sym].name->s);
            return true;
        }
        case KN_N_INPUT: *out = kn_jv_ref(r->input); return true;
        case KN_N_LIST:
        case KN_N_TUPLE: {
            kn_jlist *l = kn_jlist_new(r, n->kids.n);
            if (!l) return false;
            for (uint32_t i = 0; i < n->kids.n; i++) {
                kn_jv v;
                if (!eval(r, n->kids.v[i], &v) || !kn_jlist_push(r, l, v)) {
                    kn_jv_drop(kn_jv_list(l, false));
                    return false;
                }
            }
            *out = kn_jv_list(l, n->kind == KN_N_TUPLE);
            return true;
        }
        case KN_N_DICT: {
            kn_jdict *d = kn_jdict_new(r);
            if (!d) return false;
            for (uint32_t i = 0; i < n->kids.n; i++) {
                kn_jv k, v;
                if (!eval(r, n->kids.v[i], &k)) {
                    kn_jv_drop(kn_jv_dict(d));
                    return false;
                }
                if (!eval(r, n->kids2.v[i], &v)) {
                    kn_jv_drop(k);
                    kn_jv_drop(kn_jv_dict(d));
                    return false;
                }
                if (!kn_jdict_set(r, d, k, v)) {
                    kn_jv_drop(kn_jv_dict(d));
                    return false;
                }
            }
            *out = kn_jv_dict(d);
            return true;
        }
        case KN_N_ATTR: {
            kn_jv o;
            if (!eval(r, n->a, &o)) return false;
            r->pos = n->off;
            bool ok = kn_jgetattr(r, o, n->lit.u.s, out);
            kn_jv_drop(o);
            return ok;
        }
        case KN_N_ITEM: {
            kn_jv o, k;
            if (!eval(r, n->a, &o)) return false;
            if (!eval(r, n->b, &k)) {
                kn_jv_drop(o);
                return false;
            }
            r->pos = n->off;
            bool ok = kn_jgetitem(r, o, k, out);
            kn_jv_drop(o);
            kn_jv_drop(k);
            return ok;
        }
        case KN_N_SLICE: return eval_slice(r, n, out);
        case KN_N_CALL: return eval_call(r, n, out);
        case KN_N_FILTER:
        case KN_N_TEST: return eval_filter_test(r, n, out);
        case KN_N_NOT: {
            kn_jv v;
            if (!eval(r, n->a, &v)) return false;
            *out = kn_jv_bool(!kn_jv_truthy(v));
            kn_jv_drop(v);
            return true;
        }
        case KN_N_NEG:
        case KN_N_POS: {
            kn_jv v;
            if (!eval(r, n->a, &v)) return false;
            bool ok = true;
            r->pos = n->off;
            if (v.t == KN_J_INT || v.t == KN_J_BOOL) {
                int64_t x = v.t == KN_J_INT ? v.u.i : (int64_t)v.u.b;
                if (n->kind == KN_N_NEG && x == INT64_MIN)
                    ok = kn_jfail(r, "integer overflow (kiln's integers are 64-bit)");
                else *out = kn_jv_int(n->kind == KN_N_NEG ? -x : x);
            } else if (v.t == KN_J_FLOAT) {
                *out = kn_jv_float(n->kind == KN_N_NEG ? -v.u.f : v.u.f);
            } else if (v.t == KN_J_UNDEF) {
                ok = kn_jundef_error(r, v);
            } else {
                ok = kn_jfail(r, "bad operand type for unary %c: '%s'", n->kind == KN_N_NEG ? '-' : '+',
                              kn_jv_typename(v));
            }
            kn_jv_drop(v);
            return ok;
        }
        case KN_N_BIN: {
            kn_jv a, b;
            if (!eval(r, n->a, &a)) return false;
            if (!eval(r, n->b, &b)) {
                kn_jv_drop(a);
                return false;
            }
            r->pos = n->off;
            bool ok = kn_jbinop(r, n->op, a, b, out);
            kn_jv_drop(a);
            kn_jv_drop(b);
            return ok;
        }
        case KN_N_AND:
        case KN_N_OR: {
            kn_jv a;
            if (!eval(r, n->a, &a)) return false;
            bool t = kn_jv_truthy(a);
            if ((n->kind == KN_N_AND) != t) {
                *out = a;
                return true;
            }
            kn_jv_drop(a);
            return eval(r, n->b, out);
        }
        case KN_N_CMP: {
            kn_jv left;
            if (!eval(r, n->a, &left)) return false;
            bool res = true;
            for (uint32_t i = 0; i < n->kids.n; i++) {
                kn_jv right;
                if (!eval(r, n->kids.v[i], &right)) {
                    kn_jv_drop(left);
                    return false;
                }
                r->pos = n->off;
                bool ok = kn_jcompare(r, n->ops[i], left, right, &res);
                kn_jv_drop(left);
                left = right;
                if (!ok) {
                    kn_jv_drop(left);
                    return false;
                }
                if (!res) break;
            }
            kn_jv_drop(left);
            *out = kn_jv_bool(res);
            return true;
        }
        case KN_N_COND: {
            kn_jv c;
            if (!eval(r, n->b, &c)) return false;
            bool t = kn_jv_truthy(c);
            kn_jv_drop(c);
            if (t) return eval(r, n->a, out);
            if (n->c) return eval(r, n->c, out);
            *out = kn_jv_undef_hint(r, false,
                                    "the inline if-expression evaluated to false and no else section was defined.");
            return true;
        }
        default: return kn_jfail(r, "internal error: node %d is not an expression", n->kind);
    }
}

static bool eval(kn_jr *r, const kn_jnode *n, kn_jv *out) {
    uint32_t saved = r->pos;
    r->pos = n->off;
    if (!step(r)) return false;
    if (++r->depth > KN_JINJA_MAX_EVAL_DEPTH) {
        r->depth--;
        return kn_jfail(r, "template nesting too deep while rendering");
    }
    *out = kn_jv_undef();
    bool ok = eval_inner(r, n, out);
    r->depth--;
    if (!ok) {
        *out = kn_jv_undef();
        return false;
    }
    r->pos = saved;
    return true;
}

/* ---- statements ------------------------------------------------------------------------------ */

/* Binds a for/set target (one name or a tuple of names) to item in the current scope. */
static bool bind_targets(kn_jr *r, const int32_t *syms, uint32_t n_syms, bool tuple, kn_jv item) {
    if (!tuple) return scope_set(r, r->scope, syms[0], kn_jv_ref(item));
    if (item.t == KN_J_UNDEF) return kn_jundef_error(r, item);
    kn_jlist *parts;
    if (!kn_jiterate(r, item, &parts)) return false;
    bool ok = true;
    if (parts->n != n_syms) {
        ok = parts->n > n_syms ? kn_jfail(r, "too many values to unpack (expected %u)", n_syms)
                               : kn_jfail(r, "not enough values to unpack (expected %u, got %zu)", n_syms, parts->n);
    }
    for (uint32_t i = 0; ok && i < n_syms; i++) ok = scope_set(r, r->scope, syms[i], kn_jv_ref(parts->v[i]));
    kn_jv_drop(kn_jv_list(parts, false));
    return ok;
}

/* The else block of a for loop, in its own scope. */
static int run_else(kn_jr *r, const kn_jnode *n, kn_jscope *outer) {
    if (!n->kids2.n) return EX_OK;
    kn_jscope *s = scope_new(r, outer);
    if (!s) return EX_ERR;
    r->scope = s;
    int rc = exec_body(r, &n->kids2);
    r->scope = outer;
    scope_close(r, s);
    return rc == EX_ERR ? EX_ERR : EX_OK;
}

/* Runs a for loop over iterable (recursive loops call this again through loop()). As in Jinja2,
 * the else block runs unless some iteration's body ran to its end (so a loop whose every
 * iteration ends in break or continue runs it too). */
static int run_loop(kn_jr *r, const kn_jnode *n, kn_jv iterable, int depth0) {
    kn_jlist *items;
    bool tuple = (n->op & 2) != 0;
    if (!kn_jiterate(r, iterable, &items)) return EX_ERR;
    kn_jscope *outer = r->scope;
    if (n->b) {
        kn_jlist *kept = kn_jlist_new(r, 0);
        bool ok = kept != NULL;
        for (size_t i = 0; ok && i < items->n; i++) {
            kn_jscope *s = scope_new(r, outer);
            if (!s) {
                ok = false;
                break;
            }
            r->scope = s;
            kn_jv c;
            ok = bind_targets(r, n->syms, n->n_syms, tuple, items->v[i]) && eval(r, n->b, &c);
            r->scope = outer;
            scope_close(r, s);
            if (!ok) break;
            if (kn_jv_truthy(c)) ok = kn_jlist_push(r, kept, kn_jv_ref(items->v[i]));
            kn_jv_drop(c);
        }
        kn_jv_drop(kn_jv_list(items, false));
        if (!ok) {
            if (kept) kn_jv_drop(kn_jv_list(kept, false));
            return EX_ERR;
        }
        items = kept;
    }
    if (items->n == 0) {
        kn_jv_drop(kn_jv_list(items, false));
        return run_else(r, n, outer);
    }
    kn_jloop *loop = calloc(1, sizeof *loop);
    if (!loop || ((n->op & 1) && !capture(r, outer))) {
        free(loop);
        kn_jv_drop(kn_jv_list(items, false));
        return loop ? EX_ERR : (kn_jnomem(r), EX_ERR);
    }
    loop->rc = 1;
    loop->items = items;
    loop->depth0 = depth0;
    loop->node = n;
    loop->scope = outer;
    kn_jv lv = {0};
    lv.t = KN_J_LOOP;
    lv.u.loop = loop;
    int result = EX_OK;
    bool completed = false;
    for (size_t i = 0; i < items->n; i++) {
        loop->i = i;
        if (!step(r)) {
            result = EX_ERR;
            break;
        }
        kn_jscope *s = scope_new(r, outer);
        if (!s) {
            result = EX_ERR;
            break;
        }
        r->scope = s;
        int rc = EX_ERR;
        if (bind_targets(r, n->syms, n->n_syms, tuple, items->v[i]) && scope_set(r, s, r->t->sym_loop, kn_jv_ref(lv)))
            rc = exec_body(r, &n->kids);
        r->scope = outer;
        scope_close(r, s);
        if (rc == EX_ERR) {
            result = EX_ERR;
            break;
        }
        if (rc == EX_BREAK) break;
        if (rc == EX_OK) completed = true;
    }
    if (result == EX_OK && !completed) result = run_else(r, n, outer);
    /* loop.changed() memory could hold the loop itself: let it go with the loop */
    kn_jv_drop(loop->last_changed);
    loop->last_changed = kn_jv_undef();
    kn_jv_drop(lv);
    return result;
}

/* Assigns v (consumed) to a SET / SETBLOCK target. */
static bool assign(kn_jr *r, const kn_jnode *n, kn_jv v) {
    if (n->op == 1) {
        kn_jv *ns = lookup(r, n->sym);
        if (!ns || ns->t != KN_J_NS) {
            kn_jv_drop(v);
            return kn_jfail(r, "cannot assign attribute on non-namespace object");
        }
        kn_jv key;
        if (!kn_jmk_str(r, n->lit.u.s->s, n->lit.u.s->len, false, &key)) {
            kn_jv_drop(v);
            return false;
        }
        return kn_jdict_set(r, ns->u.ns->attrs, key, v);
    }
    bool ok = bind_targets(r, n->syms, n->n_syms, (n->op & 2) != 0, v);
    kn_jv_drop(v);
    return ok;
}

/* Applies a filter chain (whose innermost operand is KN_N_INPUT) to v (consumed). */
static bool apply_chain(kn_jr *r, const kn_jnode *chain, kn_jv v, kn_jv *out) {
    kn_jv saved = r->input;
    r->input = v;
    bool ok = eval(r, chain, out);
    r->input = saved;
    kn_jv_drop(v);
    return ok;
}

/* A macro (or a call block's caller) closing over the current scope. */
static kn_jmacro *new_macro(kn_jr *r, const kn_jnode *n) {
    kn_jmacro *m = track(r, sizeof *m, KN_J_MACRO);
    if (!m) return NULL;
    m->node = n;
    m->scope = r->scope;
    return capture(r, r->scope) ? m : NULL;
}

/* {% call %}: calls the macro with an extra keyword argument caller (a macro made of the body). */
static __attribute__((noinline)) int exec_callblock(kn_jr *r, const kn_jnode *n) {
    const kn_jnode *call = n->a;
    kn_jmacro *m = new_macro(r, n);
    kn_jv fn, res;
    evargs e;
    if (!m || !eval(r, call->a, &fn)) return EX_ERR;
    if (!eval_args(r, call, 1, &e)) {
        kn_jv_drop(fn);
        return EX_ERR;
    }
    e.vals[e.n] = (kn_jv){0};
    e.vals[e.n].t = KN_J_MACRO;
    e.vals[e.n].u.mac = m;
    e.names[e.a.n_kw] = n->lit.u.s;
    e.n++;
    e.a.n_kw++;
    r->pos = n->off;
    bool ok = kn_jcall(r, fn, &e.a, &res);
    evargs_free(&e);
    kn_jv_drop(fn);
    if (!ok) return EX_ERR;
    ok = kn_jv_str_to(r, res, r->out);
    kn_jv_drop(res);
    return ok ? EX_OK : EX_ERR;
}

/* Runs one statement; returns EX_OK, EX_ERR (error recorded), EX_BREAK or EX_CONTINUE. */
static int exec_stmt(kn_jr *r, const kn_jnode *n) {
    switch (n->kind) {
        case KN_N_TEXT: return kn_jbuf_put(r->out, n->lit.u.s->s, n->lit.u.s->len) ? EX_OK : EX_ERR;
        case KN_N_PRINT: {
            kn_jv v;
            if (!eval(r, n->a, &v)) return EX_ERR;
            bool ok = kn_jv_str_to(r, v, r->out);
            kn_jv_drop(v);
            return ok ? EX_OK : EX_ERR;
        }
        case KN_N_IF: {
            kn_jv c;
            if (!eval(r, n->a, &c)) return EX_ERR;
            bool t = kn_jv_truthy(c);
            kn_jv_drop(c);
            return exec_body(r, t ? &n->kids : &n->kids2);
        }
        case KN_N_FOR: {
            kn_jv it;
            if (!eval(r, n->a, &it)) return EX_ERR;
            r->pos = n->off;
            int rc = run_loop(r, n, it, 0);
            kn_jv_drop(it);
            return rc;
        }
        case KN_N_SET: {
            kn_jv v;
            if (!eval(r, n->b, &v)) return EX_ERR;
            r->pos = n->off;
            return assign(r, n, v) ? EX_OK : EX_ERR;
        }
        case KN_N_SETBLOCK: {
            kn_jv v;
            if (!capture_body(r, &n->kids, &v)) return EX_ERR;
            if (n->c) {
                kn_jv f;
                if (!apply_chain(r, n->c, v, &f)) return EX_ERR;
                v = f;
            }
            r->pos = n->off;
            return assign(r, n, v) ? EX_OK : EX_ERR;
        }
        case KN_N_MACRO: {
            kn_jmacro *m = new_macro(r, n);
            if (!m) return EX_ERR;
            kn_jv v = {0};
            v.t = KN_J_MACRO;
            v.u.mac = m;
            return scope_set(r, r->scope, n->sym, v) ? EX_OK : EX_ERR;
        }
        case KN_N_CALLBLOCK: return exec_callblock(r, n);
        case KN_N_FILTERBLOCK: {
            kn_jv v, f;
            if (!capture_body(r, &n->kids, &v) || !apply_chain(r, n->c, v, &f)) return EX_ERR;
            bool ok = kn_jv_str_to(r, f, r->out);
            kn_jv_drop(f);
            return ok ? EX_OK : EX_ERR;
        }
        case KN_N_WITH: {
            kn_jscope *outer = r->scope;
            kn_jscope *s = scope_new(r, outer);
            if (!s) return EX_ERR;
            bool ok = true;
            for (uint32_t i = 0; ok && i < n->n_syms; i++) {
                kn_jv v;
                r->scope = outer;
                ok = eval(r, n->kids2.v[i], &v);
                if (ok) ok = scope_set(r, s, n->syms[i], v);
            }
            r->scope = s;
            int rc = ok ? exec_body(r, &n->kids) : EX_ERR;
            r->scope = outer;
            scope_close(r, s);
            return rc;
        }
        case KN_N_BREAK: return EX_BREAK;
        case KN_N_CONTINUE: return EX_CONTINUE;
        default: kn_jfail(r, "internal error: node %d is not a statement", n->kind); return EX_ERR;
    }
}

static int exec_body(kn_jr *r, const kn_jnodes *b) {
    if (++r->depth > KN_JINJA_MAX_EVAL_DEPTH) {
        r->depth--;
        kn_jfail(r, "template nesting too deep while rendering");
        return EX_ERR;
    }
    int rc = EX_OK;
    for (uint32_t i = 0; i < b->n; i++) {
        const kn_jnode *n = b->v[i];
        r->pos = n->off;
        if (!step(r)) {
            rc = EX_ERR;
            break;
        }
        rc = exec_stmt(r, n);
        if (rc != EX_OK) break;
    }
    r->depth--;
    return rc;
}

/* ---- entry point ----------------------------------------------------------------------------- */

kiln_status kn_jinja_render(const kn_jtmpl *t, const json_t *ctx, char **out, size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t) return kn_error(KILN_ERR_INVALID_ARG, "template is NULL");
    if (!json_is_object(ctx)) return kn_error(KILN_ERR_INVALID_ARG, "the template context must be a JSON object");
    kn_jr r = {0};
    r.t = t;
    kn_jscope *root = calloc(1, sizeof *root);
    if (!root) return kn_error(KILN_ERR_NOMEM, "out of memory");
    root->root = true;
    root->all_next = NULL;
    r.all_scopes = root;
    root->vals = calloc(t->n_syms ? t->n_syms : 1, sizeof *root->vals);
    root->present = calloc(t->n_syms ? t->n_syms : 1, 1);
    kiln_status st = KILN_OK;
    if (!root->vals || !root->present) st = kn_error(KILN_ERR_NOMEM, "out of memory");
    else root->n = t->n_syms; /* scope_clear walks n symbols of both arrays */
    r.root = r.scope = root;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)ctx, key, val) {
        if (st) break;
        int32_t sym = kn_jsym_find(t, key, strlen(key));
        if (sym < 0) continue; /* the template never mentions it */
        kn_jv v;
        if (!kn_jfrom_json(&r, val, &v, 0)) {
            st = r.status == KILN_ERR_NOMEM ? KILN_ERR_NOMEM : KILN_ERR_INVALID_ARG;
            kn_error(st, "context key '%.64s': %s", key, r.err);
            break;
        }
        if (!scope_set(&r, root, sym, v)) st = kn_error(KILN_ERR_NOMEM, "out of memory");
    }
    kn_jbuf buf;
    kn_jbuf_init(&buf, &r);
    if (!st) {
        r.out = &buf;
        int rc = exec_body(&r, &t->body);
        if (rc == EX_ERR || r.failed) {
            unsigned line, col;
            kn_jlinecol(t->src, t->len, r.err_pos, &line, &col);
            st = r.status ? r.status : KILN_ERR_FORMAT;
            kn_error(st, "line %u, column %u: %s", line, col, r.err);
        }
    }
    if (!st) {
        /* hand the buffer over: move the text to the start of its allocation */
        size_t n = buf.n;
        char *p;
        if (buf.p) {
            p = buf.p - offsetof(kn_jstr, s);
            memmove(p, buf.p, n + 1);
            buf.p = NULL;
            buf.n = buf.cap = 0;
        } else {
            p = calloc(1, 1);
        }
        if (!p) {
            st = kn_error(KILN_ERR_NOMEM, "out of memory");
        } else {
            *out = p;
            if (out_len) *out_len = n;
        }
    }
    kn_jbuf_free(&buf);
    kn_jv_drop(r.input);
    free_tracked(&r);
    free_scopes(&r);
    return st;
}

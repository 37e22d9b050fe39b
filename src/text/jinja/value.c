/*
 * value.c - the values of kiln's Jinja2 interpreter and their Python behaviour.
 *
 * Building blocks: the render's byte buffer (kn_jbuf, capped and counted against the work
 * budget), refcounted strings / lists / dicts / iterators (see impl.h for the model), and
 * the Python semantics templates observe: truthiness, == (1 == 1.0 == True, deep for containers),
 * ordering (TypeError across types), hashing for dict keys, str() and repr() (so that
 * {{ {'a': [1, None, 'it\'s']} }} prints {'a': [1, None, "it's"]} and {{ 0.1 + 0.2 }} prints
 * 0.30000000000000004), and code-point based UTF-8 helpers (Python strings index by character).
 * markupsafe.Markup is a string with the safe flag; its HTML escaping lives here too.
 */
#include "text/jinja/impl.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffers --------------------------------------------------------------------------------- */

#define STR_HDR offsetof(kn_jstr, s)

void kn_jbuf_init(kn_jbuf *b, kn_jr *r) {
    b->r = r;
    b->p = NULL;
    b->n = b->cap = 0;
}

void kn_jbuf_free(kn_jbuf *b) {
    if (b->p) free(b->p - STR_HDR);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* The bytes live after room for a kn_jstr header, so that kn_jbuf_take can hand them over. */
bool kn_jbuf_put(kn_jbuf *b, const void *p, size_t n) {
    if (n == 0) return true;
    if (b->r && !kn_jwork(b->r, n)) return false;
    if (n > KN_JINJA_MAX_OUTPUT - b->n) {
        if (b->r) kn_jfail(b->r, "output exceeds the limit of %u MiB", KN_JINJA_MAX_OUTPUT >> 20);
        return false;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        if (cap > (size_t)KN_JINJA_MAX_OUTPUT + 1) cap = (size_t)KN_JINJA_MAX_OUTPUT + 1;
        char *base = realloc(b->p ? b->p - STR_HDR : NULL, STR_HDR + cap);
        if (!base) {
            if (b->r) kn_jnomem(b->r);
            return false;
        }
        b->p = base + STR_HDR;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

bool kn_jbuf_putcp(kn_jbuf *b, uint32_t cp) {
    uint8_t u[4];
    size_t k = kn_utf8_encode(cp, u);
    return kn_jbuf_put(b, u, k);
}

bool kn_jbuf_take(kn_jbuf *b, bool safe, kn_jv *out) {
    if (!b->p) return kn_jmk_str(b->r, "", 0, safe, out);
    kn_jstr *s = (kn_jstr *)(b->p - STR_HDR);
    s->rc = 1;
    s->safe = safe;
    s->len = b->n;
    kn_jstr_finish(s);
    b->p = NULL;
    b->n = b->cap = 0;
    *out = (kn_jv){0};
    out->t = KN_J_STR;
    out->u.s = s;
    return true;
}

/* ---- construction and release ---------------------------------------------------------------- */

kn_jstr *kn_jstr_alloc(size_t n) {
    kn_jstr *s = malloc(sizeof *s + n + 1);
    if (!s) return NULL;
    s->rc = 1;
    s->safe = 0;
    s->ascii = 0;
    s->len = n;
    s->s[n] = 0;
    return s;
}

void kn_jstr_finish(kn_jstr *s) {
    uint8_t ascii = 1;
    for (size_t i = 0; i < s->len; i++)
        if ((unsigned char)s->s[i] >= 0x80) {
            ascii = 0;
            break;
        }
    s->ascii = ascii;
}

bool kn_jmk_str(kn_jr *r, const char *p, size_t n, bool safe, kn_jv *out) {
    *out = kn_jv_undef(); /* what a caller that drops its values after a failure drops */
    if (n > KN_JINJA_MAX_OUTPUT)
        return r ? kn_jfail(r, "string exceeds the limit of %u MiB", KN_JINJA_MAX_OUTPUT >> 20) : false;
    if (r && !kn_jwork(r, sizeof(kn_jstr) + n + 1)) return false; /* what it allocates */
    kn_jstr *s = kn_jstr_alloc(n);
    if (!s) return r ? kn_jnomem(r) : false;
    if (n) memcpy(s->s, p, n);
    s->safe = safe;
    kn_jstr_finish(s);
    *out = (kn_jv){0};
    out->t = KN_J_STR;
    out->u.s = s;
    return true;
}

/* The one-byte strings, plain and safe (Markup): immortal, made once per process and shared by every
 * render (their counts never change, so threads may share them). Iterating a string makes a value
 * per character (an ill-formed byte is a character of its own), and a template can iterate a string
 * of millions of them: with a heap string per character, a fuzz input that iterated a 13.7 M-character
 * string took 3.3 s and 750 MB (1.9 s and 311 MB with these). A one-byte character costs its list slot
 * alone. */
static kn_jstr *byte1[2][256];
static pthread_once_t byte1_once = PTHREAD_ONCE_INIT;

static void build_byte1(void) {
    for (int safe = 0; safe < 2; safe++)
        for (int c = 0; c < 256; c++) {
            const char ch = (char)c;
            kn_jstr *s = kn_jstr_immortal(&ch, 1);
            if (s) s->safe = (uint8_t)safe;
            byte1[safe][c] = s; /* NULL when out of memory: kn_jmk_char then allocates */
        }
}

bool kn_jmk_char(kn_jr *r, const char *p, size_t n, bool safe, kn_jv *out) {
    if (n == 1) {
        pthread_once(&byte1_once, build_byte1);
        kn_jstr *s = byte1[safe][(unsigned char)p[0]];
        if (s) {
            *out = (kn_jv){0};
            out->t = KN_J_STR;
            out->u.s = s;
            return true;
        }
    }
    return kn_jmk_str(r, p, n, safe, out);
}

kn_jstr *kn_jstr_immortal(const char *p, size_t n) {
    kn_jstr *s = kn_jstr_alloc(n);
    if (!s) return NULL;
    if (n) memcpy(s->s, p, n);
    s->rc = KN_J_IMMORTAL;
    kn_jstr_finish(s);
    return s;
}

kn_jv kn_jv_undef_hint(kn_jr *r, bool unsafe, const char *fmt, ...) {
    (void)r;
    kn_jv v = kn_jv_undef();
    v.unsafe = unsafe;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) return v;
    size_t len = KN_MIN((size_t)n, sizeof msg - 1);
    kn_jstr *s = kn_jstr_alloc(len);
    if (!s) return v;
    memcpy(s->s, msg, len);
    kn_jstr_finish(s);
    v.u.s = s;
    return v;
}

int kn_jv_depth(kn_jv v) {
    switch (v.t) {
        case KN_J_LIST:
        case KN_J_TUPLE: return v.u.l->depth;
        case KN_J_DICT: return v.u.d->depth;
        case KN_J_ITER: return v.u.it->depth;
        case KN_J_METHOD: return v.u.m->depth;
        default: return 0;
    }
}

kn_jlist *kn_jlist_new(kn_jr *r, size_t cap) {
    kn_jlist *l = calloc(1, sizeof *l);
    if (l && cap) {
        l->v = malloc(cap * sizeof *l->v);
        if (!l->v) {
            free(l);
            l = NULL;
        } else l->cap = cap;
    }
    if (!l) {
        if (r) kn_jnomem(r);
        return NULL;
    }
    l->rc = 1;
    return l;
}

bool kn_jlist_push(kn_jr *r, kn_jlist *l, kn_jv v) {
    int d = kn_jv_depth(v) + 1;
    if (d > KN_JINJA_MAX_VALUE_DEPTH) {
        kn_jv_drop(v);
        return kn_jfail(r, "value nested too deeply");
    }
    if (!kn_jwork_items(r, 1)) {
        kn_jv_drop(v);
        return false;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        kn_jv *nv = realloc(l->v, cap * sizeof *nv);
        if (!nv) {
            kn_jv_drop(v);
            return kn_jnomem(r);
        }
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    if (d > l->depth) l->depth = (uint16_t)d;
    return true;
}

kn_jdict *kn_jdict_new(kn_jr *r) {
    kn_jdict *d = calloc(1, sizeof *d);
    if (!d) {
        if (r) kn_jnomem(r);
        return NULL;
    }
    d->rc = 1;
    return d;
}

static void dict_index_insert(kn_jdict *d, size_t e) {
    size_t mask = d->idx_cap - 1;
    size_t h = (size_t)kn_jv_hash(d->k[e]) & mask;
    while (d->idx[h]) h = (h + 1) & mask;
    d->idx[h] = (uint32_t)(e + 1);
}

static bool dict_reindex(kn_jdict *d) {
    size_t cap = 16;
    while (cap < d->n * 2 + 2) cap *= 2;
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx) return false;
    free(d->idx);
    d->idx = idx;
    d->idx_cap = cap;
    for (size_t e = 0; e < d->n; e++) dict_index_insert(d, e);
    return true;
}

/* Entry index of key in d, SIZE_MAX when absent (linear below 9 entries, hashed above). */
static size_t dict_find(const kn_jdict *d, kn_jv key) {
    if (!d->idx) {
        for (size_t e = 0; e < d->n; e++)
            if (kn_jv_eq(d->k[e], key)) return e;
        return SIZE_MAX;
    }
    size_t mask = d->idx_cap - 1;
    for (size_t h = (size_t)kn_jv_hash(key) & mask;; h = (h + 1) & mask) {
        uint32_t e = d->idx[h];
        if (!e) return SIZE_MAX;
        if (kn_jv_eq(d->k[e - 1], key)) return e - 1;
    }
}

kn_jv *kn_jdict_get(const kn_jdict *d, kn_jv key) {
    if (!kn_jv_hashable(key)) return NULL;
    size_t e = dict_find(d, key);
    return e == SIZE_MAX ? NULL : &d->v[e];
}

kn_jv *kn_jdict_get_str(const kn_jdict *d, const char *s, size_t n) {
    if (!d->idx) {
        for (size_t e = 0; e < d->n; e++) {
            kn_jv k = d->k[e];
            if (k.t == KN_J_STR && k.u.s->len == n && memcmp(k.u.s->s, s, n) == 0) return &d->v[e];
        }
        return NULL;
    }
    /* build a temporary key on the stack */
    _Alignas(kn_jstr) char small[sizeof(kn_jstr) + 64];
    kn_jstr *tmp = n < 64 ? (kn_jstr *)small : kn_jstr_alloc(n);
    if (!tmp) return NULL;
    tmp->rc = KN_J_IMMORTAL;
    tmp->safe = 0;
    tmp->len = n;
    memcpy(tmp->s, s, n);
    tmp->s[n] = 0;
    kn_jv key = {0};
    key.t = KN_J_STR;
    key.u.s = tmp;
    size_t e = dict_find(d, key);
    if (tmp != (kn_jstr *)small) free(tmp);
    return e == SIZE_MAX ? NULL : &d->v[e];
}

bool kn_jdict_set(kn_jr *r, kn_jdict *d, kn_jv key, kn_jv val) {
    if (!kn_jv_hashable(key)) {
        bool ok = kn_jfail(r, "unhashable type: '%s'", kn_jv_typename(key));
        kn_jv_drop(key);
        kn_jv_drop(val);
        return ok;
    }
    int depth = KN_MAX(kn_jv_depth(key), kn_jv_depth(val)) + 1;
    if (depth > KN_JINJA_MAX_VALUE_DEPTH || !kn_jwork_items(r, 1)) {
        kn_jv_drop(key);
        kn_jv_drop(val);
        return r->failed ? false : kn_jfail(r, "value nested too deeply");
    }
    size_t e = dict_find(d, key);
    if (e != SIZE_MAX) {
        kn_jv_drop(d->v[e]);
        d->v[e] = val;
        kn_jv_drop(key);
    } else {
        if (d->n == d->cap) {
            size_t cap = d->cap ? d->cap * 2 : 4;
            kn_jv *nk = realloc(d->k, cap * sizeof *nk);
            if (nk) d->k = nk;
            kn_jv *nv = nk ? realloc(d->v, cap * sizeof *nv) : NULL;
            if (nv) d->v = nv;
            if (!nk || !nv) {
                kn_jv_drop(key);
                kn_jv_drop(val);
                return kn_jnomem(r);
            }
            d->cap = cap;
        }
        d->k[d->n] = key;
        d->v[d->n] = val;
        d->n++;
        if (d->n > 8) {
            if (!d->idx || d->n * 2 + 2 > d->idx_cap) {
                if (!dict_reindex(d)) return kn_jnomem(r);
            } else {
                dict_index_insert(d, d->n - 1);
            }
        }
    }
    if (depth > d->depth) d->depth = (uint16_t)depth;
    return true;
}

bool kn_jmk_iter(kn_jr *r, kn_jlist *l, kn_jv *out) {
    kn_jiter *it = calloc(1, sizeof *it);
    if (!it) {
        kn_jv_drop(kn_jv_list(l, false));
        return kn_jnomem(r);
    }
    it->rc = 1;
    it->l = l;
    it->depth = l->depth;
    *out = (kn_jv){0};
    out->t = KN_J_ITER;
    out->u.it = it;
    return true;
}

void kn_jv_drop(kn_jv v) {
    if (!kn_jv_is_heap(v)) return;
    uint32_t *rc = v.u.p;
    if (*rc == KN_J_IMMORTAL || --*rc) return;
    switch (v.t) {
        case KN_J_STR:
        case KN_J_UNDEF: free(v.u.s); break;
        case KN_J_LIST:
        case KN_J_TUPLE:
            for (size_t i = 0; i < v.u.l->n; i++) kn_jv_drop(v.u.l->v[i]);
            free(v.u.l->v);
            free(v.u.l);
            break;
        case KN_J_DICT:
            for (size_t i = 0; i < v.u.d->n; i++) {
                kn_jv_drop(v.u.d->k[i]);
                kn_jv_drop(v.u.d->v[i]);
            }
            free(v.u.d->k);
            free(v.u.d->v);
            free(v.u.d->idx);
            free(v.u.d);
            break;
        case KN_J_ITER:
            kn_jv_drop(kn_jv_list(v.u.it->l, false));
            free(v.u.it);
            break;
        case KN_J_METHOD:
            kn_jv_drop(v.u.m->self);
            free(v.u.m);
            break;
        case KN_J_LOOP:
            if (v.u.loop->items) kn_jv_drop(kn_jv_list(v.u.loop->items, false));
            kn_jv_drop(v.u.loop->last_changed);
            free(v.u.loop);
            break;
        default: break;
    }
}

/* ---- Python semantics ------------------------------------------------------------------------ */

bool kn_jv_truthy(kn_jv v) {
    switch (v.t) {
        case KN_J_UNDEF:
        case KN_J_NONE: return false;
        case KN_J_BOOL: return v.u.b;
        case KN_J_INT: return v.u.i != 0;
        case KN_J_FLOAT: return v.u.f != 0.0;
        case KN_J_STR: return v.u.s->len > 0;
        case KN_J_LIST:
        case KN_J_TUPLE: return v.u.l->n > 0;
        case KN_J_DICT: return v.u.d->n > 0;
        default: return true;
    }
}

static int64_t num_i(kn_jv v) { return v.t == KN_J_INT ? v.u.i : (int64_t)v.u.b; }

/* Compares an int with a float exactly (-1, 0, 1; 2 for NaN). */
static int cmp_int_float(int64_t i, double f) {
    if (isnan(f)) return 2;
    if (f >= 9223372036854775808.0) return -1;
    if (f < -9223372036854775808.0) return 1;
    double fl = floor(f);
    int64_t fi = (int64_t)fl;
    if (i < fi) return -1;
    if (i > fi) return 1;
    return f > fl ? -1 : 0;
}

/* Exact comparison of two numbers (-1, 0, 1; 2 when a NaN makes them unordered). */
static int num_cmp(kn_jv a, kn_jv b) {
    if (a.t != KN_J_FLOAT && b.t != KN_J_FLOAT) {
        int64_t x = num_i(a), y = num_i(b);
        return x < y ? -1 : x > y;
    }
    if (a.t != KN_J_FLOAT) return cmp_int_float(num_i(a), b.u.f);
    if (b.t != KN_J_FLOAT) {
        int c = cmp_int_float(num_i(b), a.u.f);
        return c == 2 ? 2 : -c;
    }
    double x = a.u.f, y = b.u.f;
    if (isnan(x) || isnan(y)) return 2;
    return x < y ? -1 : x > y;
}

bool kn_jv_eq(kn_jv a, kn_jv b) {
    if (kn_jv_is_num(a) && kn_jv_is_num(b)) return num_cmp(a, b) == 0;
    if (a.t != b.t || a.range != b.range) return false;
    switch (a.t) {
        case KN_J_UNDEF:
        case KN_J_NONE: return true;
        case KN_J_STR:
            return a.u.s == b.u.s || (a.u.s->len == b.u.s->len && memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0);
        case KN_J_LIST:
        case KN_J_TUPLE:
            if (a.u.l == b.u.l) return true;
            if (a.u.l->n != b.u.l->n) return false;
            for (size_t i = 0; i < a.u.l->n; i++)
                if (!kn_jv_eq(a.u.l->v[i], b.u.l->v[i])) return false;
            return true;
        case KN_J_DICT:
            if (a.u.d == b.u.d) return true;
            if (a.u.d->n != b.u.d->n) return false;
            for (size_t i = 0; i < a.u.d->n; i++) {
                kn_jv *o = kn_jdict_get(b.u.d, a.u.d->k[i]);
                if (!o || !kn_jv_eq(a.u.d->v[i], *o)) return false;
            }
            return true;
        case KN_J_FUNC: return a.u.i == b.u.i;
        case KN_J_METHOD: return a.u.m->id == b.u.m->id && kn_jv_eq(a.u.m->self, b.u.m->self);
        default: return a.u.p == b.u.p;
    }
}

bool kn_jv_cmp(kn_jr *r, kn_jv a, kn_jv b, int *res) {
    if (a.t == KN_J_UNDEF || b.t == KN_J_UNDEF) {
        kn_jv u = a.t == KN_J_UNDEF ? a : b;
        return kn_jfail(r, "%s", u.u.s ? u.u.s->s : "undefined value");
    }
    if (kn_jv_is_num(a) && kn_jv_is_num(b)) {
        int c = num_cmp(a, b);
        *res = c == 2 ? 2 : c; /* NaN: every ordering is false */
        return true;
    }
    if (a.t == KN_J_STR && b.t == KN_J_STR) {
        size_t n = KN_MIN(a.u.s->len, b.u.s->len);
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        *res = c < 0 ? -1 : c > 0 ? 1 : a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
        return true;
    }
    if ((a.t == KN_J_LIST || a.t == KN_J_TUPLE) && a.t == b.t) {
        size_t n = KN_MIN(a.u.l->n, b.u.l->n);
        for (size_t i = 0; i < n; i++) {
            if (kn_jv_eq(a.u.l->v[i], b.u.l->v[i])) continue;
            return kn_jv_cmp(r, a.u.l->v[i], b.u.l->v[i], res);
        }
        *res = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return true;
    }
    return kn_jfail(r, "'<' not supported between instances of '%s' and '%s'", kn_jv_typename(a), kn_jv_typename(b));
}

bool kn_jv_hashable(kn_jv v) {
    if (v.t == KN_J_LIST || v.t == KN_J_DICT) return false;
    if (v.t == KN_J_TUPLE) {
        for (size_t i = 0; i < v.u.l->n; i++)
            if (!kn_jv_hashable(v.u.l->v[i])) return false;
    }
    return true;
}

static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

uint64_t kn_jv_hash(kn_jv v) {
    switch (v.t) {
        case KN_J_BOOL: return mix((uint64_t)v.u.b);
        case KN_J_INT: return mix((uint64_t)v.u.i);
        case KN_J_FLOAT: {
            double f = v.u.f;
            if (f == floor(f) && fabs(f) < 9.2e18) return mix((uint64_t)(int64_t)f);
            uint64_t bits;
            memcpy(&bits, &f, sizeof bits);
            return mix(bits);
        }
        case KN_J_STR: {
            uint64_t h = 1469598103934665603ull;
            for (size_t i = 0; i < v.u.s->len; i++) h = (h ^ (unsigned char)v.u.s->s[i]) * 1099511628211ull;
            return h;
        }
        case KN_J_TUPLE: {
            uint64_t h = 0x345678;
            for (size_t i = 0; i < v.u.l->n; i++) h = mix(h * 1000003 ^ kn_jv_hash(v.u.l->v[i]));
            return h;
        }
        case KN_J_NONE: return 0x9e3779b97f4a7c15ull;
        case KN_J_UNDEF: return 0x1234567;
        case KN_J_FUNC: return mix((uint64_t)v.u.i + 77);
        case KN_J_METHOD: return mix(v.u.m->id) ^ kn_jv_hash(v.u.m->self);
        default: return mix((uint64_t)(uintptr_t)v.u.p);
    }
}

const char *kn_jv_typename(kn_jv v) {
    switch (v.t) {
        case KN_J_UNDEF: return "Undefined";
        case KN_J_NONE: return "NoneType";
        case KN_J_BOOL: return "bool";
        case KN_J_INT: return "int";
        case KN_J_FLOAT: return "float";
        case KN_J_STR: return v.u.s->safe ? "Markup" : "str";
        case KN_J_LIST: return "list";
        case KN_J_TUPLE: return v.range ? "range" : "tuple";
        case KN_J_DICT: return "dict";
        case KN_J_ITER: return "generator";
        case KN_J_NS: return "Namespace";
        case KN_J_MACRO: return "Macro";
        case KN_J_FUNC: return "function";
        case KN_J_METHOD: return "builtin_function_or_method";
        case KN_J_LOOP: return "LoopContext";
        default: return "object";
    }
}

/* ---- str() and repr() ------------------------------------------------------------------------ */

size_t kn_jfloat_repr(double f, char buf[40]) {
    if (isnan(f)) {
        memcpy(buf, "nan", 4);
        return 3;
    }
    if (isinf(f)) {
        strcpy(buf, f > 0 ? "inf" : "-inf");
        return strlen(buf);
    }
    if (f == 0) {
        strcpy(buf, signbit(f) ? "-0.0" : "0.0");
        return strlen(buf);
    }
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp: [-]d[.ddd]e(+|-)XX */
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.' && nd < 20) digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int exp = *p == 'e' ? atoi(p + 1) : 0;
    size_t n = 0;
    if (neg) buf[n++] = '-';
    if (exp >= -5 + 1 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) buf[n++] = i < nd ? digits[i] : '0';
            buf[n++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) buf[n++] = digits[i];
            else buf[n++] = '0';
        } else {
            buf[n++] = '0';
            buf[n++] = '.';
            for (int i = 0; i < -exp - 1; i++) buf[n++] = '0';
            for (int i = 0; i < nd; i++) buf[n++] = digits[i];
        }
    } else {
        buf[n++] = digits[0];
        if (nd > 1) {
            buf[n++] = '.';
            for (int i = 1; i < nd; i++) buf[n++] = digits[i];
        }
        n += (size_t)snprintf(buf + n, 40 - n, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    buf[n] = 0;
    return n;
}

bool kn_jescape_to(kn_jbuf *b, const char *s, size_t n) {
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rep;
        switch (s[i]) {
            case '&': rep = "&amp;"; break;
            case '<': rep = "&lt;"; break;
            case '>': rep = "&gt;"; break;
            case '\'': rep = "&#39;"; break;
            case '"': rep = "&#34;"; break;
            default: continue;
        }
        if (!kn_jbuf_put(b, s + start, i - start) || !kn_jbuf_puts(b, rep)) return false;
        start = i + 1;
    }
    return kn_jbuf_put(b, s + start, n - start);
}

/* Python str.isprintable() for one code point. */
static bool is_printable(uint32_t cp) {
    if (cp == ' ') return true;
    if (cp < 0x20 || cp == 0x7f) return false;
    if (cp < 0x7f) return true;
    uint8_t f = kn_ucd_flags(cp);
    return !(f & (KN_UCD_OTHER | KN_UCD_SEPARATOR));
}

/* Python repr() of a string: the quote it picks, its escapes, Markup('...'). */
static bool repr_str(kn_jbuf *b, const kn_jstr *s) {
    bool sq = memchr(s->s, '\'', s->len) != NULL, dq = memchr(s->s, '"', s->len) != NULL;
    char q = (sq && !dq) ? '"' : '\'';
    if (s->safe && !kn_jbuf_puts(b, "Markup(")) return false;
    if (!kn_jbuf_putc(b, q)) return false;
    size_t start = 0;
    for (size_t i = 0; i < s->len;) {
        unsigned char c = (unsigned char)s->s[i];
        size_t adv = 1;
        uint32_t cp = c;
        if (c >= 0x80) cp = kn_ju_cp(s->s, s->len, i, &adv);
        char esc[16];
        esc[0] = 0;
        if (c == '\\') strcpy(esc, "\\\\");
        else if (c == (unsigned char)q) snprintf(esc, sizeof esc, "\\%c", q);
        else if (c == '\n') strcpy(esc, "\\n");
        else if (c == '\r') strcpy(esc, "\\r");
        else if (c == '\t') strcpy(esc, "\\t");
        else if (cp != KN_UTF8_INVALID && !is_printable(cp)) {
            if (cp <= 0xff) snprintf(esc, sizeof esc, "\\x%02x", cp);
            else if (cp <= 0xffff) snprintf(esc, sizeof esc, "\\u%04x", cp);
            else snprintf(esc, sizeof esc, "\\U%08x", cp);
        }
        if (esc[0]) {
            if (!kn_jbuf_put(b, s->s + start, i - start) || !kn_jbuf_puts(b, esc)) return false;
            start = i + adv;
        }
        i += adv;
    }
    if (!kn_jbuf_put(b, s->s + start, s->len - start) || !kn_jbuf_putc(b, q)) return false;
    return !s->safe || kn_jbuf_putc(b, ')');
}

static bool put_num(kn_jbuf *b, kn_jv v) {
    char buf[40];
    if (v.t == KN_J_BOOL) return kn_jbuf_puts(b, v.u.b ? "True" : "False");
    if (v.t == KN_J_INT) return kn_jbuf_put(b, buf, (size_t)snprintf(buf, sizeof buf, "%lld", (long long)v.u.i));
    return kn_jbuf_put(b, buf, kn_jfloat_repr(v.u.f, buf));
}

bool kn_jv_repr_to(kn_jr *r, kn_jv v, kn_jbuf *b, int depth) {
    if (depth > KN_JINJA_MAX_VALUE_DEPTH) return kn_jfail(r, "value nested too deeply to print");
    switch (v.t) {
        case KN_J_UNDEF: return kn_jbuf_puts(b, "Undefined");
        case KN_J_STR: return repr_str(b, v.u.s);
        case KN_J_LIST:
        case KN_J_TUPLE: {
            bool t = v.t == KN_J_TUPLE;
            if (v.range) {
                const int64_t *ra = v.u.l->range_args;
                char buf[80];
                if (ra[2] == 1) snprintf(buf, sizeof buf, "range(%lld, %lld)", (long long)ra[0], (long long)ra[1]);
                else
                    snprintf(buf, sizeof buf, "range(%lld, %lld, %lld)", (long long)ra[0], (long long)ra[1],
                             (long long)ra[2]);
                return kn_jbuf_puts(b, buf);
            }
            if (!kn_jbuf_putc(b, t ? '(' : '[')) return false;
            for (size_t i = 0; i < v.u.l->n; i++) {
                if (i && !kn_jbuf_puts(b, ", ")) return false;
                if (!kn_jv_repr_to(r, v.u.l->v[i], b, depth + 1)) return false;
            }
            if (t && v.u.l->n == 1 && !kn_jbuf_putc(b, ',')) return false;
            return kn_jbuf_putc(b, t ? ')' : ']');
        }
        case KN_J_DICT: {
            if (!kn_jbuf_putc(b, '{')) return false;
            for (size_t i = 0; i < v.u.d->n; i++) {
                if (i && !kn_jbuf_puts(b, ", ")) return false;
                if (!kn_jv_repr_to(r, v.u.d->k[i], b, depth + 1) || !kn_jbuf_puts(b, ": ") ||
                    !kn_jv_repr_to(r, v.u.d->v[i], b, depth + 1))
                    return false;
            }
            return kn_jbuf_putc(b, '}');
        }
        case KN_J_NS:
            return kn_jbuf_puts(b, "<Namespace ") && kn_jv_repr_to(r, kn_jv_dict(v.u.ns->attrs), b, depth + 1) &&
                   kn_jbuf_putc(b, '>');
        default: return kn_jv_str_to(r, v, b);
    }
}

bool kn_jv_str_to(kn_jr *r, kn_jv v, kn_jbuf *b) {
    char buf[96];
    switch (v.t) {
        case KN_J_UNDEF: return true;
        case KN_J_NONE: return kn_jbuf_puts(b, "None");
        case KN_J_BOOL:
        case KN_J_INT:
        case KN_J_FLOAT: return put_num(b, v);
        case KN_J_STR: return kn_jbuf_put(b, v.u.s->s, v.u.s->len);
        case KN_J_LIST:
        case KN_J_TUPLE:
        case KN_J_DICT:
        case KN_J_NS: return kn_jv_repr_to(r, v, b, 0);
        case KN_J_ITER: return kn_jbuf_puts(b, "<generator object>");
        case KN_J_MACRO: {
            const kn_jstr *name = v.u.mac->node->lit.u.s;
            return kn_jbuf_puts(b, "<Macro ") && repr_str(b, name) && kn_jbuf_putc(b, '>');
        }
        case KN_J_FUNC:
            snprintf(buf, sizeof buf, "<function %s>", kn_jglobal_name((int)v.u.i));
            return kn_jbuf_puts(b, buf);
        case KN_J_METHOD:
            snprintf(buf, sizeof buf, "<built-in method of %s object>", kn_jv_typename(v.u.m->self));
            return kn_jbuf_puts(b, buf);
        case KN_J_LOOP:
            snprintf(buf, sizeof buf, "<LoopContext %zu/%zu>", v.u.loop->i + 1, v.u.loop->items->n);
            return kn_jbuf_puts(b, buf);
        default: return true;
    }
}

bool kn_jv_to_str(kn_jr *r, kn_jv v, kn_jv *out) {
    if (v.t == KN_J_STR) {
        *out = kn_jv_ref(v);
        return true;
    }
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    if (!kn_jv_str_to(r, v, &b)) {
        kn_jbuf_free(&b);
        return false;
    }
    return kn_jbuf_take(&b, false, out);
}

/* ---- UTF-8 and character classes ------------------------------------------------------------- */

size_t kn_ju_next(const char *s, size_t len, size_t i) {
    if (i >= len) return len;
    if ((unsigned char)s[i] < 0x80) return i + 1;
    size_t adv;
    kn_utf8_decode((const uint8_t *)s + i, len - i, &adv);
    return i + (adv ? adv : 1);
}

uint32_t kn_ju_cp(const char *s, size_t len, size_t i, size_t *adv) {
    if ((unsigned char)s[i] < 0x80) {
        *adv = 1;
        return (unsigned char)s[i];
    }
    uint32_t cp = kn_utf8_decode((const uint8_t *)s + i, len - i, adv);
    if (!*adv) *adv = 1;
    return cp;
}

size_t kn_jstr_cplen(const kn_jstr *s) {
    if (s->ascii) return s->len;
    size_t n = 0;
    for (size_t i = 0; i < s->len; i = kn_ju_next(s->s, s->len, i)) n++;
    return n;
}

size_t kn_jstr_cpoff(const kn_jstr *s, size_t k) {
    if (s->ascii) return KN_MIN(k, s->len);
    size_t i = 0;
    while (k-- > 0 && i < s->len) i = kn_ju_next(s->s, s->len, i);
    return i;
}

bool kn_ju_isspace(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f);
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

uint32_t kn_ju_lower(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    if (cp == KN_UTF8_INVALID) return cp;
    return kn_ucd_tolower(cp);
}

/* The inverse of the simple lowercase table, sorted by lowercase code point. */
static uint32_t (*upper_tab)[2];
static size_t n_upper;
static pthread_once_t upper_once = PTHREAD_ONCE_INIT;

static int cmp_pair(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* Builds the uppercase table (once, from the lowercase one). */
static void build_upper(void) {
    upper_tab = malloc(kn_ucd_n_lower * sizeof *upper_tab);
    if (!upper_tab) return;
    for (size_t i = 0; i < kn_ucd_n_lower; i++) {
        upper_tab[i][0] = kn_ucd_lower[i][1];
        upper_tab[i][1] = kn_ucd_lower[i][0];
    }
    qsort(upper_tab, kn_ucd_n_lower, sizeof *upper_tab, cmp_pair);
    n_upper = kn_ucd_n_lower;
}

/* Uppercase mappings the inverted lowercase table cannot give (letters that are not the lowercase
 * of anything, or whose inverse would be the wrong capital). */
static const uint32_t upper_extra[][2] = {
    {0x00B5, 0x039C}, {0x00DF, 0x00DF}, {0x0131, 0x0049}, {0x017F, 0x0053}, {0x01C5, 0x01C4},
    {0x01C8, 0x01C7}, {0x01CB, 0x01CA}, {0x01F2, 0x01F1}, {0x0345, 0x0399}, {0x03C2, 0x03A3},
    {0x03D0, 0x0392}, {0x03D1, 0x0398}, {0x03D5, 0x03A6}, {0x03D6, 0x03A0}, {0x03F0, 0x039A},
    {0x03F1, 0x03A1}, {0x03F5, 0x0395}, {0x1E9B, 0x1E60}, {0x1FBE, 0x0399},
};

uint32_t kn_ju_upper(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
    if (cp == KN_UTF8_INVALID) return cp;
    for (size_t i = 0; i < KN_ARRAY_LEN(upper_extra); i++)
        if (upper_extra[i][0] == cp) return upper_extra[i][1];
    pthread_once(&upper_once, build_upper);
    size_t lo = 0, hi = n_upper;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (upper_tab[mid][0] < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < n_upper && upper_tab[lo][0] == cp ? upper_tab[lo][1] : cp;
}

bool kn_ju_isalpha(uint32_t cp) {
    if (cp < 0x80) return (cp | 32) >= 'a' && (cp | 32) <= 'z';
    return cp != KN_UTF8_INVALID && (kn_ucd_flags(cp) & KN_UCD_LETTER);
}

bool kn_ju_isdigit(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    return cp != KN_UTF8_INVALID && (kn_ucd_flags(cp) & KN_UCD_NUMBER);
}

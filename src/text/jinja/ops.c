/*
 * ops.c - what the Python data model does with template values: iteration (for loops and
 * every filter that walks a sequence), `in`, attribute access and subscription through the
 * immutable sandbox's rules (d.key and d['key'] both read dict keys, d.items and s.split are bound
 * methods, list.append and the other mutators are blocked, a missing name is Undefined), slicing
 * with Python's index rules, and the binary operators: int/float arithmetic with Python's // % **
 * and 64-bit overflow checks, str + str (Markup escapes the other side), list/tuple concatenation
 * and repetition, printf-style str % args, and the comparisons of a chain.
 */
#include "text/jinja/impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- iteration helpers ----------------------------------------------------------------------- */

bool kn_jiterate(kn_jr *r, kn_jv v, kn_jlist **out) {
    kn_jlist *l = NULL;
    switch (v.t) {
        case KN_J_UNDEF: l = kn_jlist_new(r, 0); break;
        case KN_J_LIST:
        case KN_J_TUPLE:
            /* lists are immutable: share it (callers that reorder take a copy, see kn_jlist_own) */
            kn_jv_ref(v);
            l = v.u.l;
            break;
        case KN_J_DICT:
            if (!kn_jwork_items(r, v.u.d->n) || !(l = kn_jlist_new(r, v.u.d->n))) return false;
            for (size_t i = 0; i < v.u.d->n; i++) l->v[i] = kn_jv_ref(v.u.d->k[i]);
            l->n = v.u.d->n;
            l->depth = v.u.d->depth;
            break;
        case KN_J_ITER: {
            kn_jiter *it = v.u.it;
            size_t n = it->l->n - it->pos;
            if (it->pos == 0) {
                /* not started: hand over its items */
                l = it->l;
                l->rc++;
                it->pos = it->l->n;
                break;
            }
            if (!kn_jwork_items(r, n) || !(l = kn_jlist_new(r, n))) return false;
            for (size_t i = 0; i < n; i++) l->v[i] = kn_jv_ref(it->l->v[it->pos + i]);
            l->n = n;
            l->depth = it->depth;
            it->pos = it->l->n;
            break;
        }
        case KN_J_STR: {
            /* one string per character (kn_jmk_char), into a list sized and counted up front */
            const kn_jstr *s = v.u.s;
            const size_t n = kn_jstr_cplen(s);
            if (!kn_jwork_items(r, n) || !(l = kn_jlist_new(r, n))) return false;
            for (size_t i = 0; i < s->len; l->n++) {
                const size_t j = kn_ju_next(s->s, s->len, i);
                if (!kn_jmk_char(r, s->s + i, j - i, s->safe, &l->v[l->n])) {
                    kn_jv_drop(kn_jv_list(l, false));
                    return false;
                }
                i = j;
            }
            if (n) l->depth = 1;
            break;
        }
        default: return kn_jfail(r, "'%s' object is not iterable", kn_jv_typename(v));
    }
    if (!l) return false;
    *out = l;
    return true;
}

bool kn_jlist_own(kn_jr *r, kn_jlist **l) {
    kn_jlist *src = *l;
    if (src->rc == 1) return true;
    kn_jlist *c;
    if (!kn_jwork_items(r, src->n) || !(c = kn_jlist_new(r, src->n))) return false;
    for (size_t i = 0; i < src->n; i++) c->v[i] = kn_jv_ref(src->v[i]);
    c->n = src->n;
    c->depth = src->depth;
    kn_jv_drop(kn_jv_list(src, false));
    *l = c;
    return true;
}

bool kn_jcontains(kn_jr *r, kn_jv c, kn_jv item, bool *res) {
    *res = false;
    switch (c.t) {
        case KN_J_STR:
            if (item.t != KN_J_STR)
                return kn_jfail(r, "'in <string>' requires string as left operand, not %s", kn_jv_typename(item));
            if (item.u.s->len == 0) {
                *res = true;
                return true;
            }
            if (!kn_jwork(r, c.u.s->len)) return false;
            *res = c.u.s->len >= item.u.s->len && memmem(c.u.s->s, c.u.s->len, item.u.s->s, item.u.s->len) != NULL;
            return true;
        case KN_J_LIST:
        case KN_J_TUPLE:
            if (!kn_jwork_items(r, c.u.l->n)) return false;
            for (size_t i = 0; i < c.u.l->n; i++)
                if (kn_jv_eq(c.u.l->v[i], item)) {
                    *res = true;
                    break;
                }
            return true;
        case KN_J_DICT:
            if (!kn_jv_hashable(item)) return kn_jfail(r, "unhashable type: '%s'", kn_jv_typename(item));
            *res = kn_jdict_get(c.u.d, item) != NULL;
            return true;
        case KN_J_ITER: {
            kn_jiter *it = c.u.it;
            while (it->pos < it->l->n) {
                if (kn_jv_eq(it->l->v[it->pos++], item)) {
                    *res = true;
                    break;
                }
            }
            return true;
        }
        case KN_J_UNDEF: return true;
        default: return kn_jfail(r, "argument of type '%s' is not iterable", kn_jv_typename(c));
    }
}

/* ---- attribute and item access --------------------------------------------------------------- */

static bool make_method(kn_jr *r, kn_jv self, int id, kn_jv *out) {
    int depth = kn_jv_depth(self) + 1;
    if (depth > KN_JINJA_MAX_VALUE_DEPTH) return kn_jfail(r, "value nested too deeply");
    kn_jmethod *m = malloc(sizeof *m);
    if (!m) return kn_jnomem(r);
    m->rc = 1;
    m->id = (uint16_t)id;
    m->depth = (uint16_t)depth;
    m->self = kn_jv_ref(self);
    *out = (kn_jv){0};
    out->t = KN_J_METHOD;
    out->u.m = m;
    return true;
}

/* A method of obj named name[0..n): a bound method, an unsafe Undefined, or false in *found. */
static bool method_attr(kn_jr *r, kn_jv obj, const char *name, size_t n, bool *found, kn_jv *out) {
    bool unsafe = false;
    int id = kn_jmethod_find(obj, name, n, &unsafe);
    bool dunder = n > 4 && name[0] == '_' && name[1] == '_' && name[n - 1] == '_' && name[n - 2] == '_';
    *found = id >= 0 || dunder;
    if (!*found) return true;
    if (unsafe || dunder) {
        *out = kn_jv_undef_hint(r, true, "access to attribute '%.*s' of '%s' object is unsafe.", (int)KN_MIN(n, 64u),
                                name, kn_jv_typename(obj));
        return true;
    }
    return make_method(r, obj, id, out);
}

/* loop.index, loop.first, loop.previtem ... of a for loop's loop variable; loop.cycle and
 * loop.changed are methods. */
static bool loop_attr(kn_jr *r, kn_jv obj, const char *name, size_t n, kn_jv *out) {
    const kn_jloop *l = obj.u.loop;
    size_t i = l->i, len = l->items->n;
#define IS(s) (n == sizeof(s) - 1 && memcmp(name, s, n) == 0)
    if (IS("index")) *out = kn_jv_int((int64_t)i + 1);
    else if (IS("index0")) *out = kn_jv_int((int64_t)i);
    else if (IS("revindex")) *out = kn_jv_int((int64_t)(len - i));
    else if (IS("revindex0")) *out = kn_jv_int((int64_t)(len - i - 1));
    else if (IS("first")) *out = kn_jv_bool(i == 0);
    else if (IS("last")) *out = kn_jv_bool(i + 1 == len);
    else if (IS("length")) *out = kn_jv_int((int64_t)len);
    else if (IS("depth")) *out = kn_jv_int(l->depth0 + 1);
    else if (IS("depth0")) *out = kn_jv_int(l->depth0);
    else if (IS("previtem"))
        *out = i > 0 ? kn_jv_ref(l->items->v[i - 1]) : kn_jv_undef_hint(r, false, "there is no previous item");
    else if (IS("nextitem"))
        *out = i + 1 < len ? kn_jv_ref(l->items->v[i + 1]) : kn_jv_undef_hint(r, false, "there is no next item");
    else {
        bool found;
        if (!method_attr(r, obj, name, n, &found, out)) return false;
        if (!found)
            *out =
                kn_jv_undef_hint(r, false, "'LoopContext' object has no attribute '%.*s'", (int)KN_MIN(n, 64u), name);
    }
#undef IS
    return true;
}

bool kn_jgetattr(kn_jr *r, kn_jv obj, const kn_jstr *name, kn_jv *out) {
    const char *s = name->s;
    size_t n = name->len;
    int pn = (int)KN_MIN(n, 64u);
    bool found = false;
    switch (obj.t) {
        case KN_J_UNDEF: return kn_jundef_error(r, obj);
        case KN_J_DICT: {
            if (!method_attr(r, obj, s, n, &found, out)) return false;
            if (found) return true;
            kn_jv *v = kn_jdict_get_str(obj.u.d, s, n);
            *out = v ? kn_jv_ref(*v) : kn_jv_undef_hint(r, false, "'dict object' has no attribute '%.*s'", pn, s);
            return true;
        }
        case KN_J_NS: {
            kn_jv *v = kn_jdict_get_str(obj.u.ns->attrs, s, n);
            *out = v ? kn_jv_ref(*v) : kn_jv_undef_hint(r, false, "'Namespace' object has no attribute '%.*s'", pn, s);
            return true;
        }
        case KN_J_LOOP: return loop_attr(r, obj, s, n, out);
        default:
            if (!method_attr(r, obj, s, n, &found, out)) return false;
            if (!found)
                *out = kn_jv_undef_hint(r, false, "'%s object' has no attribute '%.*s'", kn_jv_typename(obj), pn, s);
            return true;
    }
}

/* An integer index (int or bool) from key. */
static bool index_of(kn_jv key, int64_t *i) {
    if (key.t == KN_J_INT) {
        *i = key.u.i;
        return true;
    }
    if (key.t == KN_J_BOOL) {
        *i = key.u.b;
        return true;
    }
    return false;
}

bool kn_jgetitem(kn_jr *r, kn_jv obj, kn_jv key, kn_jv *out) {
    int64_t i;
    bool found = false;
    switch (obj.t) {
        case KN_J_UNDEF: return kn_jundef_error(r, obj);
        case KN_J_DICT: {
            kn_jv *v = kn_jdict_get(obj.u.d, key);
            if (v) {
                *out = kn_jv_ref(*v);
                return true;
            }
            break;
        }
        case KN_J_LIST:
        case KN_J_TUPLE:
            if (index_of(key, &i)) {
                int64_t n = (int64_t)obj.u.l->n;
                if (i < 0) i += n;
                if (i >= 0 && i < n) {
                    *out = kn_jv_ref(obj.u.l->v[i]);
                    return true;
                }
                *out = kn_jv_undef_hint(r, false, "'%s object' has no element %lld", kn_jv_typename(obj),
                                        (long long)key.u.i);
                return true;
            }
            break;
        case KN_J_STR:
            if (index_of(key, &i)) {
                const kn_jstr *s = obj.u.s;
                int64_t n = (int64_t)kn_jstr_cplen(s);
                if (!kn_jwork(r, s->ascii ? 1 : s->len)) return false;
                if (i < 0) i += n;
                if (i >= 0 && i < n) {
                    size_t a = kn_jstr_cpoff(s, (size_t)i);
                    return kn_jmk_char(r, s->s + a, kn_ju_next(s->s, s->len, a) - a, s->safe, out);
                }
                *out = kn_jv_undef_hint(r, false, "'str object' has no element %lld", (long long)key.u.i);
                return true;
            }
            break;
        case KN_J_NS:
        case KN_J_LOOP:
            if (key.t == KN_J_STR) return kn_jgetattr(r, obj, key.u.s, out);
            break;
        default: break;
    }
    if (key.t == KN_J_STR && obj.t != KN_J_NS) {
        if (!method_attr(r, obj, key.u.s->s, key.u.s->len, &found, out)) return false;
        if (found) return true;
    }
    kn_jbuf b;
    kn_jbuf_init(&b, NULL);
    kn_jv_repr_to(r, key, &b, 0);
    *out = kn_jv_undef_hint(r, false, "'%s object' has no attribute %.64s", kn_jv_typename(obj), b.p ? b.p : "?");
    kn_jbuf_free(&b);
    return true;
}

/* Python slice bounds of a sequence of length len (TypeError for bounds that are not integers or
 * None). */
static bool slice_bounds(kn_jr *r, const kn_jv *bv, int64_t len, int64_t *start, int64_t *step, int64_t *count) {
    int64_t v[3];
    bool given[3];
    for (int k = 0; k < 3; k++) {
        given[k] = bv[k].t != KN_J_NONE;
        if (given[k] && !index_of(bv[k], &v[k]))
            return kn_jfail(r, "slice indices must be integers or None or have an __index__ method");
    }
    int64_t st = given[2] ? v[2] : 1;
    if (st == 0) return kn_jfail(r, "slice step cannot be zero");
    int64_t a, b;
    if (!given[0]) a = st < 0 ? len - 1 : 0;
    else {
        a = v[0];
        if (a < 0) {
            a += len;
            if (a < 0) a = st < 0 ? -1 : 0;
        } else if (a >= len) a = st < 0 ? len - 1 : len;
    }
    if (!given[1]) b = st < 0 ? -1 : len;
    else {
        b = v[1];
        if (b < 0) {
            b += len;
            if (b < 0) b = st < 0 ? -1 : 0;
        } else if (b >= len) b = st < 0 ? len - 1 : len;
    }
    int64_t c = 0;
    if (st > 0 && a < b) c = (b - a - 1) / st + 1;
    else if (st < 0 && b < a) c = (a - b - 1) / (-st) + 1;
    *start = a;
    *step = st;
    *count = c;
    return true;
}

bool kn_jslice(kn_jr *r, kn_jv obj, const kn_jv *bv, kn_jv *out) {
    int64_t start, st, count;
    if (obj.t == KN_J_UNDEF) return kn_jundef_error(r, obj);
    if (obj.t == KN_J_LIST || obj.t == KN_J_TUPLE) {
        if (!slice_bounds(r, bv, (int64_t)obj.u.l->n, &start, &st, &count)) return false;
        if (!kn_jwork_items(r, (uint64_t)count)) return false;
        kn_jlist *l = kn_jlist_new(r, (size_t)count);
        if (!l) return false;
        for (int64_t k = 0; k < count; k++) l->v[k] = kn_jv_ref(obj.u.l->v[start + k * st]);
        l->n = (size_t)count;
        l->depth = obj.u.l->depth;
        *out = kn_jv_list(l, obj.t == KN_J_TUPLE);
        return true;
    }
    if (obj.t == KN_J_STR) {
        const kn_jstr *s = obj.u.s;
        size_t n = kn_jstr_cplen(s);
        if (!slice_bounds(r, bv, (int64_t)n, &start, &st, &count)) return false;
        if (s->ascii) {
            kn_jbuf b;
            kn_jbuf_init(&b, r);
            bool good = true;
            if (st == 1) good = kn_jbuf_put(&b, s->s + start, (size_t)count);
            else
                for (int64_t k = 0; good && k < count; k++) good = kn_jbuf_putc(&b, s->s[start + k * st]);
            if (!good) {
                kn_jbuf_free(&b);
                return false;
            }
            return kn_jbuf_take(&b, s->safe, out);
        }
        /* offsets of every character */
        if (!kn_jwork(r, s->len)) return false;
        size_t *offs = malloc((n + 1) * sizeof *offs);
        if (!offs) return kn_jnomem(r);
        size_t k = 0;
        for (size_t i = 0; i < s->len; i = kn_ju_next(s->s, s->len, i)) offs[k++] = i;
        offs[k] = s->len;
        kn_jbuf b;
        kn_jbuf_init(&b, r);
        bool good = true;
        for (int64_t j = 0; good && j < count; j++) {
            size_t c = (size_t)(start + j * st);
            good = kn_jbuf_put(&b, s->s + offs[c], offs[c + 1] - offs[c]);
        }
        free(offs);
        if (!good) {
            kn_jbuf_free(&b);
            return false;
        }
        return kn_jbuf_take(&b, s->safe, out);
    }
    if (obj.t == KN_J_DICT) return kn_jfail(r, "unhashable type: 'slice'");
    return kn_jfail(r, "'%s' object is not subscriptable", kn_jv_typename(obj));
}

/* ---- operators ------------------------------------------------------------------------------- */

static bool type_error(kn_jr *r, const char *op, kn_jv a, kn_jv b) {
    return kn_jfail(r, "unsupported operand type(s) for %s: '%s' and '%s'", op, kn_jv_typename(a), kn_jv_typename(b));
}

static bool overflow(kn_jr *r) { return kn_jfail(r, "integer overflow (kiln's integers are 64-bit)"); }

/* A number's integer value: an int's, a bool's 0 / 1, and 0 for a float (whose union member is not the
 * bool: reading it was undefined; callers use the integer view only when neither operand is a float). */
static int64_t as_int(kn_jv v) { return v.t == KN_J_INT ? v.u.i : v.t == KN_J_BOOL ? (int64_t)v.u.b : 0; }
static double as_float(kn_jv v) { return v.t == KN_J_FLOAT ? v.u.f : (double)as_int(v); }

/* Python's float divmod, returning the floor quotient and the modulo. */
static void float_divmod(double x, double y, double *fdiv, double *fmod_out) {
    double mod = fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0) {
        if ((y < 0) != (mod < 0)) {
            mod += y;
            div -= 1.0;
        }
    } else {
        mod = copysign(0.0, y);
    }
    double fl;
    if (div != 0) {
        fl = floor(div);
        if (div - fl > 0.5) fl += 1.0;
    } else {
        fl = copysign(0.0, x / y);
    }
    *fdiv = fl;
    *fmod_out = mod;
}

/* Repeats a string or sequence count times. */
static bool repeat(kn_jr *r, kn_jv seq, int64_t count, kn_jv *out) {
    if (count < 0) count = 0;
    if (seq.t == KN_J_STR) {
        const kn_jstr *s = seq.u.s;
        if (s->len && (uint64_t)count > KN_JINJA_MAX_OUTPUT / s->len)
            return kn_jfail(r, "string exceeds the limit of %u MiB", KN_JINJA_MAX_OUTPUT >> 20);
        kn_jbuf b;
        kn_jbuf_init(&b, r);
        for (int64_t i = 0; i < count; i++)
            if (!kn_jbuf_put(&b, s->s, s->len)) {
                kn_jbuf_free(&b);
                return false;
            }
        return kn_jbuf_take(&b, s->safe, out);
    }
    const kn_jlist *l = seq.u.l;
    if (l->n && (uint64_t)count > (KN_JINJA_MAX_WORK / 8) / l->n) return kn_jfail(r, "sequence repetition too large");
    if (!kn_jwork_items(r, (uint64_t)count * l->n)) return false;
    kn_jlist *o = kn_jlist_new(r, (size_t)count * l->n);
    if (!o) return false;
    for (int64_t i = 0; i < count; i++)
        for (size_t k = 0; k < l->n; k++) o->v[o->n++] = kn_jv_ref(l->v[k]);
    o->depth = l->depth;
    *out = kn_jv_list(o, seq.t == KN_J_TUPLE);
    return true;
}

/* list + list / tuple + tuple. */
static bool concat_seq(kn_jr *r, kn_jv a, kn_jv b, kn_jv *out) {
    size_t n = a.u.l->n + b.u.l->n;
    if (!kn_jwork_items(r, n)) return false;
    kn_jlist *l = kn_jlist_new(r, n);
    if (!l) return false;
    for (size_t i = 0; i < a.u.l->n; i++) l->v[l->n++] = kn_jv_ref(a.u.l->v[i]);
    for (size_t i = 0; i < b.u.l->n; i++) l->v[l->n++] = kn_jv_ref(b.u.l->v[i]);
    l->depth = KN_MAX(a.u.l->depth, b.u.l->depth);
    *out = kn_jv_list(l, a.t == KN_J_TUPLE);
    return true;
}

/* str + str; when either side is Markup the other is escaped and the result is Markup. */
static bool add_strings(kn_jr *r, const kn_jstr *a, const kn_jstr *b, kn_jv *out) {
    kn_jbuf buf;
    kn_jbuf_init(&buf, r);
    bool safe = a->safe || b->safe;
    bool ok;
    if (safe) {
        ok = (a->safe ? kn_jbuf_put(&buf, a->s, a->len) : kn_jescape_to(&buf, a->s, a->len)) &&
             (b->safe ? kn_jbuf_put(&buf, b->s, b->len) : kn_jescape_to(&buf, b->s, b->len));
    } else {
        ok = kn_jbuf_put(&buf, a->s, a->len) && kn_jbuf_put(&buf, b->s, b->len);
    }
    if (!ok) {
        kn_jbuf_free(&buf);
        return false;
    }
    return kn_jbuf_take(&buf, safe, out);
}

bool kn_jbinop(kn_jr *r, int op, kn_jv a, kn_jv b, kn_jv *out) {
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (op == KN_OP_CONCAT) {
        kn_jbuf buf;
        kn_jbuf_init(&buf, r);
        if (!kn_jv_str_to(r, a, &buf) || !kn_jv_str_to(r, b, &buf)) {
            kn_jbuf_free(&buf);
            return false;
        }
        return kn_jbuf_take(&buf, false, out);
    }
    if (a.t == KN_J_UNDEF) return kn_jundef_error(r, a);
    if (b.t == KN_J_UNDEF) return kn_jundef_error(r, b);
    if (a.range || b.range) return type_error(r, names[op], a, b);
    bool na = kn_jv_is_num(a), nb = kn_jv_is_num(b);
    if (na && nb) {
        bool fl = a.t == KN_J_FLOAT || b.t == KN_J_FLOAT;
        int64_t x = as_int(a), y = as_int(b), z;
        double fx = as_float(a), fy = as_float(b);
        switch (op) {
            case KN_OP_ADD:
                if (fl) {
                    *out = kn_jv_float(fx + fy);
                    return true;
                }
                if (__builtin_add_overflow(x, y, &z)) return overflow(r);
                *out = kn_jv_int(z);
                return true;
            case KN_OP_SUB:
                if (fl) {
                    *out = kn_jv_float(fx - fy);
                    return true;
                }
                if (__builtin_sub_overflow(x, y, &z)) return overflow(r);
                *out = kn_jv_int(z);
                return true;
            case KN_OP_MUL:
                if (fl) {
                    *out = kn_jv_float(fx * fy);
                    return true;
                }
                if (__builtin_mul_overflow(x, y, &z)) return overflow(r);
                *out = kn_jv_int(z);
                return true;
            case KN_OP_DIV:
                if (fy == 0) return kn_jfail(r, "division by zero");
                *out = kn_jv_float(fx / fy);
                return true;
            case KN_OP_FLOORDIV:
            case KN_OP_MOD:
                if (!fl) {
                    if (y == 0) return kn_jfail(r, "integer division or modulo by zero");
                    if (x == INT64_MIN && y == -1) {
                        if (op == KN_OP_FLOORDIV) return overflow(r);
                        *out = kn_jv_int(0);
                        return true;
                    }
                    int64_t q = x / y, m = x % y;
                    if (m != 0 && ((m < 0) != (y < 0))) {
                        q -= 1;
                        m += y;
                    }
                    *out = kn_jv_int(op == KN_OP_FLOORDIV ? q : m);
                    return true;
                }
                if (fy == 0) return kn_jfail(r, op == KN_OP_MOD ? "float modulo" : "float floor division by zero");
                {
                    double d, m;
                    float_divmod(fx, fy, &d, &m);
                    *out = kn_jv_float(op == KN_OP_FLOORDIV ? d : m);
                }
                return true;
            case KN_OP_POW:
                if (!fl && y >= 0) {
                    int64_t res = 1, base = x;
                    int64_t e = y;
                    while (e > 0) {
                        if (e & 1) {
                            if (__builtin_mul_overflow(res, base, &res)) return overflow(r);
                        }
                        e >>= 1;
                        if (e && __builtin_mul_overflow(base, base, &base)) return overflow(r);
                    }
                    *out = kn_jv_int(res);
                    return true;
                }
                if (fx == 0 && fy < 0) return kn_jfail(r, "0.0 cannot be raised to a negative power");
                if (fx < 0 && fy != floor(fy)) return kn_jfail(r, "complex results are not supported");
                *out = kn_jv_float(pow(fx, fy));
                if (isinf(out->u.f) && !isinf(fx) && !isinf(fy)) return kn_jfail(r, "numerical result out of range");
                return true;
        }
    }
    if (op == KN_OP_ADD) {
        if (a.t == KN_J_STR && b.t == KN_J_STR) return add_strings(r, a.u.s, b.u.s, out);
        if ((a.t == KN_J_LIST || a.t == KN_J_TUPLE) && a.t == b.t) return concat_seq(r, a, b, out);
        if (a.t == KN_J_STR) return kn_jfail(r, "can only concatenate str (not \"%s\") to str", kn_jv_typename(b));
        if (a.t == KN_J_LIST) return kn_jfail(r, "can only concatenate list (not \"%s\") to list", kn_jv_typename(b));
        return type_error(r, "+", a, b);
    }
    if (op == KN_OP_MUL) {
        bool sa = a.t == KN_J_STR || a.t == KN_J_LIST || a.t == KN_J_TUPLE;
        bool sb = b.t == KN_J_STR || b.t == KN_J_LIST || b.t == KN_J_TUPLE;
        if (sa && (b.t == KN_J_INT || b.t == KN_J_BOOL)) return repeat(r, a, as_int(b), out);
        if (sb && (a.t == KN_J_INT || a.t == KN_J_BOOL)) return repeat(r, b, as_int(a), out);
        if (sa && b.t == KN_J_FLOAT) return kn_jfail(r, "can't multiply sequence by non-int of type 'float'");
        if (sb && a.t == KN_J_FLOAT) return kn_jfail(r, "can't multiply sequence by non-int of type 'float'");
    }
    if (op == KN_OP_MOD && a.t == KN_J_STR) return kn_jformat_percent(r, a.u.s, b, out);
    return type_error(r, names[op], a, b);
}

bool kn_jcompare(kn_jr *r, int op, kn_jv a, kn_jv b, bool *res) {
    int c;
    switch (op) {
        case KN_OP_EQ: *res = kn_jv_eq(a, b); return true;
        case KN_OP_NE: *res = !kn_jv_eq(a, b); return true;
        case KN_OP_IN: return kn_jcontains(r, b, a, res);
        case KN_OP_NOTIN:
            if (!kn_jcontains(r, b, a, res)) return false;
            *res = !*res;
            return true;
        default:
            if (!kn_jv_cmp(r, a, b, &c)) return false;
            if (c == 2) {
                *res = false;
                return true;
            }
            *res = op == KN_OP_LT ? c < 0 : op == KN_OP_LE ? c <= 0 : op == KN_OP_GT ? c > 0 : c >= 0;
            return true;
    }
}

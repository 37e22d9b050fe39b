/*
 * builtins.c - Jinja2's filters, as chat templates use them (the tests of `x is ...` are in
 * predicates.c, the global functions in globals.c).
 *
 * Each builtin takes its arguments the way the Python one does (positional, then by keyword;
 * kn_jbind reports unknown or missing ones) and returns what the Python one returns: map, select,
 * reject, selectattr, rejectattr, items, unique, batch, slice and reverse give one-shot
 * iterators (Python generators: tojson refuses them, |list materializes them), sort and dictsort
 * give lists. tojson is Hugging Face's override: json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False). The argument helpers here (kn_jbind, kn_jarg_str) serve the
 * tests and globals too. Not implemented: random, groupby, urlize, wordwrap, xmlattr,
 * filesizeformat, pprint, striptags, urlencode, lipsum, cycler, joiner.
 */
#include "text/jinja/impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- argument helpers ------------------------------------------------------------------------ */

bool kn_jbind(kn_jr *r, const char *fname, const kn_jargs *a, const char *const *params, size_t np, size_t nreq,
              kn_jv *slots, bool *given) {
    for (size_t i = 0; i < np; i++) {
        slots[i] = kn_jv_undef();
        given[i] = false;
    }
    if (a->n_pos > np) return kn_jfail(r, "%s() takes at most %zu argument(s) (%zu given)", fname, np, a->n_pos);
    for (size_t i = 0; i < a->n_pos; i++) {
        slots[i] = a->pos[i];
        given[i] = true;
    }
    for (size_t k = 0; k < a->n_kw; k++) {
        const kn_jstr *name = a->kw_names[k];
        size_t i;
        for (i = 0; i < np; i++)
            if (strlen(params[i]) == name->len && memcmp(params[i], name->s, name->len) == 0) break;
        if (i == np) return kn_jfail(r, "%s() got an unexpected keyword argument '%s'", fname, name->s);
        if (given[i]) return kn_jfail(r, "%s() got multiple values for argument '%s'", fname, name->s);
        slots[i] = a->kw[k];
        given[i] = true;
    }
    for (size_t i = 0; i < nreq; i++)
        if (!given[i]) return kn_jfail(r, "%s() missing required argument '%s'", fname, params[i]);
    return true;
}

#define BIND(fname, ...)                                                                                               \
    static const char *const params_[] = {__VA_ARGS__};                                                                \
    enum { NP_ = sizeof params_ / sizeof params_[0] };                                                                 \
    kn_jv arg[NP_];                                                                                                    \
    bool given[NP_];                                                                                                   \
    if (!kn_jbind(r, fname, a, params_, NP_, nreq_, arg, given)) return false

static bool arg_int(kn_jr *r, kn_jv v, const char *what, int64_t *out) {
    *out = 0;
    if (v.t == KN_J_INT) {
        *out = v.u.i;
        return true;
    }
    if (v.t == KN_J_BOOL) {
        *out = v.u.b;
        return true;
    }
    return kn_jfail(r, "%s must be an integer, not '%s'", what, kn_jv_typename(v));
}

bool kn_jarg_str(kn_jr *r, kn_jv v, const char *what, const kn_jstr **out) {
    *out = NULL;
    if (v.t == KN_J_STR) {
        *out = v.u.s;
        return true;
    }
    return kn_jfail(r, "%s must be a string, not '%s'", what, kn_jv_typename(v));
}

/* soft_str: a string as is, anything else through str(). */
static bool soft_str(kn_jr *r, kn_jv v, kn_jv *out) { return kn_jv_to_str(r, v, out); }

static bool new_list(kn_jr *r, kn_jlist **l) { return (*l = kn_jlist_new(r, 0)) != NULL; }

/* Lowercases strings (the "ignore case" key of sort/unique/min/max); anything else as is. */
static bool ignore_case(kn_jr *r, kn_jv v, kn_jv *out) {
    if (v.t == KN_J_STR) return kn_jcase(r, v.u.s, false, out);
    *out = kn_jv_ref(v);
    return true;
}

/* Jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0 (subscription rules). */
static bool attr_path(kn_jr *r, kn_jv item, kn_jv attr, kn_jv *out) {
    if (attr.t == KN_J_NONE || attr.t == KN_J_UNDEF) {
        *out = kn_jv_ref(item);
        return true;
    }
    if (attr.t != KN_J_STR) return kn_jgetitem(r, item, attr, out);
    const kn_jstr *s = attr.u.s;
    kn_jv cur = kn_jv_ref(item);
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < s->len && s->s[j] != '.') j++;
        bool digits = j > i;
        for (size_t k = i; k < j; k++)
            if (s->s[k] < '0' || s->s[k] > '9') digits = false;
        kn_jv key, next;
        bool ok;
        if (digits && j - i < 18) {
            key = kn_jv_int(strtoll(s->s + i, NULL, 10));
            ok = true;
        } else {
            ok = kn_jmk_str(r, s->s + i, j - i, false, &key);
        }
        if (ok) ok = kn_jgetitem(r, cur, key, &next);
        kn_jv_drop(key);
        kn_jv_drop(cur);
        if (!ok) return false;
        cur = next;
        if (j >= s->len) break;
        i = j + 1;
    }
    *out = cur;
    return true;
}

/* An item with its sort key. */
typedef struct kv {
    kn_jv key, item;
} kv;

/* Stable merge sort of n (key, item) pairs by key (Python's sorted: reverse keeps equal items in
 * their original order); TypeError for keys Python cannot order. */
static bool merge_sort(kn_jr *r, kv *v, size_t n, bool reverse) {
    if (n < 2) return true;
    kv *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return kn_jnomem(r);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = KN_MIN(lo + width, n), hi = KN_MIN(lo + 2 * width, n);
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int c;
                if (!kn_jv_cmp(r, v[j].key, v[i].key, &c)) {
                    free(tmp);
                    return false;
                }
                /* take from the right only when it is strictly before the left item */
                bool right_first = reverse ? (c == 1) : (c == -1);
                if (c == 2) right_first = false;
                tmp[k++] = right_first ? v[j++] : v[i++];
            }
            while (i < mid) tmp[k++] = v[i++];
            while (j < hi) tmp[k++] = v[j++];
        }
        memcpy(v, tmp, n * sizeof *v);
        if (!kn_jwork_items(r, n)) {
            free(tmp);
            return false;
        }
    }
    free(tmp);
    return true;
}

/* Items of v with their sort keys (attribute path, lowercased unless case_sensitive). */
static bool keyed_items(kn_jr *r, kn_jv v, kn_jv attr, bool case_sensitive, kv **out, size_t *n) {
    kn_jlist *l;
    if (!kn_jiterate(r, v, &l)) return false;
    kv *items = malloc((l->n ? l->n : 1) * sizeof *items);
    if (!items) {
        kn_jv_drop(kn_jv_list(l, false));
        return kn_jnomem(r);
    }
    size_t k = 0;
    bool ok = true;
    for (; ok && k < l->n; k++) {
        kn_jv key, raw;
        ok = attr_path(r, l->v[k], attr, &raw);
        if (!ok) break;
        if (!case_sensitive) {
            ok = ignore_case(r, raw, &key);
            kn_jv_drop(raw);
        } else {
            key = raw;
        }
        if (!ok) break;
        items[k].key = key;
        items[k].item = kn_jv_ref(l->v[k]);
    }
    kn_jv_drop(kn_jv_list(l, false));
    if (!ok) {
        for (size_t i = 0; i < k; i++) {
            kn_jv_drop(items[i].key);
            kn_jv_drop(items[i].item);
        }
        free(items);
        return false;
    }
    *out = items;
    *n = k;
    return true;
}

static void free_kv(kv *items, size_t n) {
    for (size_t i = 0; i < n; i++) {
        kn_jv_drop(items[i].key);
        kn_jv_drop(items[i].item);
    }
    free(items);
}

/* ---- filters --------------------------------------------------------------------------------- */

typedef bool (*filter_fn)(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out);

static bool no_args(kn_jr *r, const char *name, const kn_jargs *a) {
    if (a->n_pos || a->n_kw) return kn_jfail(r, "%s() takes no arguments", name);
    return true;
}

static bool f_abs(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    if (!no_args(r, "abs", a)) return false;
    if (v.t == KN_J_INT || v.t == KN_J_BOOL) {
        int64_t x = v.t == KN_J_INT ? v.u.i : v.u.b;
        if (x == INT64_MIN) return kn_jfail(r, "integer overflow");
        *out = kn_jv_int(x < 0 ? -x : x);
        return true;
    }
    if (v.t == KN_J_FLOAT) {
        *out = kn_jv_float(fabs(v.u.f));
        return true;
    }
    return kn_jfail(r, "bad operand type for abs(): '%s'", kn_jv_typename(v));
}

/* attr(obj, name): getattr only (unlike obj.name, a dict's keys are not its attributes). */
static bool f_attr(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 1 };
    BIND("attr", "name");
    const kn_jstr *name;
    if (!kn_jarg_str(r, arg[0], "attr name", &name)) return false;
    if (v.t == KN_J_DICT) {
        /* getattr only: dict keys are not attributes */
        bool unsafe;
        int id = kn_jmethod_find(v, name->s, name->len, &unsafe);
        if (id < 0) {
            *out = kn_jv_undef_hint(r, false, "'dict object' has no attribute '%.64s'", name->s);
            return true;
        }
    }
    return kn_jgetattr(r, v, name, out);
}

/* batch(value, linecount, fill_with=None): a generator of lists of linecount items. */
static bool f_batch(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 1 };
    BIND("batch", "linecount", "fill_with");
    int64_t count;
    if (!arg_int(r, arg[0], "linecount", &count)) return false;
    if (count <= 0) return kn_jfail(r, "batch() needs a positive line count");
    kn_jlist *l, *res, *cur = NULL;
    if (!kn_jiterate(r, v, &l)) return false;
    bool ok = new_list(r, &res);
    for (size_t i = 0; ok && i < l->n; i++) {
        if (!cur && !new_list(r, &cur)) {
            ok = false;
            break;
        }
        ok = kn_jlist_push(r, cur, kn_jv_ref(l->v[i]));
        if (ok && (int64_t)cur->n == count) {
            ok = kn_jlist_push(r, res, kn_jv_list(cur, false));
            cur = NULL;
        }
    }
    if (ok && cur) {
        if (given[1] && arg[1].t != KN_J_NONE)
            while (ok && (int64_t)cur->n < count) ok = kn_jlist_push(r, cur, kn_jv_ref(arg[1]));
        if (ok) ok = kn_jlist_push(r, res, kn_jv_list(cur, false));
        cur = NULL;
    }
    if (cur) kn_jv_drop(kn_jv_list(cur, false));
    kn_jv_drop(kn_jv_list(l, false));
    if (!ok) {
        if (res) kn_jv_drop(kn_jv_list(res, false));
        return false;
    }
    return kn_jmk_iter(r, res, out);
}

/* slice(value, slices, fill_with=None): a generator of slices columns, as Jinja2 cuts them. */
static bool f_slice(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 1 };
    BIND("slice", "slices", "fill_with");
    int64_t slices;
    if (!arg_int(r, arg[0], "slices", &slices)) return false;
    if (slices <= 0 || slices > 1000000) return kn_jfail(r, "slice() needs a positive number of slices");
    kn_jlist *l, *res;
    if (!kn_jiterate(r, v, &l)) return false;
    bool ok = new_list(r, &res);
    int64_t len = (int64_t)l->n, per = len / slices, extra = len % slices, offset = 0;
    for (int64_t s = 0; ok && s < slices; s++) {
        int64_t start = offset + s * per;
        if (s < extra) offset++;
        int64_t end = offset + (s + 1) * per;
        kn_jlist *part;
        if (!new_list(r, &part)) {
            ok = false;
            break;
        }
        for (int64_t i = start; ok && i < end; i++) ok = kn_jlist_push(r, part, kn_jv_ref(l->v[i]));
        if (ok && given[1] && arg[1].t != KN_J_NONE && s >= extra) ok = kn_jlist_push(r, part, kn_jv_ref(arg[1]));
        if (ok) ok = kn_jlist_push(r, res, kn_jv_list(part, false));
        else kn_jv_drop(kn_jv_list(part, false));
    }
    kn_jv_drop(kn_jv_list(l, false));
    if (!ok) {
        if (res) kn_jv_drop(kn_jv_list(res, false));
        return false;
    }
    return kn_jmk_iter(r, res, out);
}

/* Python str.capitalize() (Markup stays Markup) / Jinja2's title filter. */
static bool case_words(kn_jr *r, kn_jv v, bool title, kn_jv *out) {
    kn_jv s;
    if (!soft_str(r, v, &s)) return false;
    const kn_jstr *x = s.u.s;
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    kn_jstage st = {.b = &b};
    bool ok = true, start = true;
    for (size_t i = 0; ok && i < x->len;) {
        size_t adv;
        uint32_t cp = kn_ju_cp(x->s, x->len, i, &adv);
        if (cp == KN_UTF8_INVALID) ok = kn_jstage_put(&st, x->s + i, adv);
        else {
            bool boundary =
                title && (cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || kn_ju_isspace(cp));
            if (boundary) {
                ok = kn_jstage_putcp(&st, cp);
                start = true;
            } else {
                ok = kn_jstage_putcp(&st, start ? kn_ju_upper(cp) : kn_ju_lower(cp));
                start = false;
            }
        }
        i += adv;
    }
    ok = ok && kn_jstage_flush(&st);
    bool safe = !title && x->safe;
    kn_jv_drop(s);
    if (!ok) {
        kn_jbuf_free(&b);
        return false;
    }
    return kn_jbuf_take(&b, safe, out);
}

static bool f_capitalize(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    return no_args(r, "capitalize", a) && case_words(r, v, false, out);
}

static bool f_title(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    return no_args(r, "title", a) && case_words(r, v, true, out);
}

/* center(value, width=80) with spaces, as str.center. */
static bool f_center(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND("center", "width");
    int64_t width = 80;
    if (given[0] && !arg_int(r, arg[0], "width", &width)) return false;
    kn_jv s;
    if (!soft_str(r, v, &s)) return false;
    int64_t len = (int64_t)kn_jstr_cplen(s.u.s);
    if (width <= len) {
        *out = s;
        return true;
    }
    if (width > (int64_t)KN_JINJA_MAX_OUTPUT) {
        kn_jv_drop(s);
        return kn_jfail(r, "width too large");
    }
    int64_t marg = width - len, left = marg / 2 + (marg & width & 1);
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    bool ok = true;
    for (int64_t i = 0; ok && i < left; i++) ok = kn_jbuf_putc(&b, ' ');
    if (ok) ok = kn_jbuf_put(&b, s.u.s->s, s.u.s->len);
    for (int64_t i = 0; ok && i < marg - left; i++) ok = kn_jbuf_putc(&b, ' ');
    bool safe = s.u.s->safe;
    kn_jv_drop(s);
    if (!ok) {
        kn_jbuf_free(&b);
        return false;
    }
    return kn_jbuf_take(&b, safe, out);
}

/* default(value, default_value='', boolean=False): default_value for Undefined (or, with boolean,
 * for any falsy value). */
static bool f_default(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND("default", "default_value", "boolean");
    bool boolean = given[1] && kn_jv_truthy(arg[1]);
    if (v.t == KN_J_UNDEF || (boolean && !kn_jv_truthy(v))) {
        if (given[0]) *out = kn_jv_ref(arg[0]);
        else return kn_jmk_str(r, "", 0, false, out);
        return true;
    }
    *out = kn_jv_ref(v);
    return true;
}

/* dictsort(value, case_sensitive=False, by='key', reverse=False): a list of (key, value) tuples. */
static bool f_dictsort(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND("dictsort", "case_sensitive", "by", "reverse");
    if (v.t != KN_J_DICT) return kn_jfail(r, "dictsort() needs a mapping, not '%s'", kn_jv_typename(v));
    bool cs = given[0] && kn_jv_truthy(arg[0]), rev = given[2] && kn_jv_truthy(arg[2]);
    int pos = 0;
    if (given[1]) {
        const kn_jstr *by;
        if (!kn_jarg_str(r, arg[1], "by", &by)) return false;
        if (by->len == 5 && !memcmp(by->s, "value", 5)) pos = 1;
        else if (!(by->len == 3 && !memcmp(by->s, "key", 3)))
            return kn_jfail(r, "You can only sort by either \"key\" or \"value\"");
    }
    const kn_jdict *d = v.u.d;
    kv *items = malloc((d->n ? d->n : 1) * sizeof *items);
    if (!items) return kn_jnomem(r);
    size_t k = 0;
    bool ok = true;
    for (; ok && k < d->n; k++) {
        kn_jlist *pair = kn_jlist_new(r, 2);
        if (!pair) {
            ok = false;
            break;
        }
        pair->v[0] = kn_jv_ref(d->k[k]);
        pair->v[1] = kn_jv_ref(d->v[k]);
        pair->n = 2;
        pair->depth = (uint16_t)(KN_MAX(kn_jv_depth(d->k[k]), kn_jv_depth(d->v[k])) + 1);
        kn_jv key;
        ok = cs ? (key = kn_jv_ref(pair->v[pos]), true) : ignore_case(r, pair->v[pos], &key);
        if (!ok) {
            kn_jv_drop(kn_jv_list(pair, true));
            break;
        }
        items[k].key = key;
        items[k].item = kn_jv_list(pair, true);
    }
    if (ok) ok = merge_sort(r, items, k, rev);
    kn_jlist *res = NULL;
    if (ok) ok = new_list(r, &res);
    for (size_t i = 0; ok && i < k; i++) ok = kn_jlist_push(r, res, kn_jv_ref(items[i].item));
    free_kv(items, k);
    if (!ok) {
        if (res) kn_jv_drop(kn_jv_list(res, false));
        return false;
    }
    *out = kn_jv_list(res, false);
    return true;
}

/* markupsafe.escape(v) (force: escape a Markup string again, as forceescape does). */
static bool escape_value(kn_jr *r, kn_jv v, bool force, kn_jv *out) {
    if (v.t == KN_J_STR && v.u.s->safe && !force) {
        *out = kn_jv_ref(v);
        return true;
    }
    kn_jv s;
    if (!soft_str(r, v, &s)) return false;
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    bool ok = kn_jescape_to(&b, s.u.s->s, s.u.s->len);
    kn_jv_drop(s);
    if (!ok) {
        kn_jbuf_free(&b);
        return false;
    }
    return kn_jbuf_take(&b, true, out);
}

static bool f_escape(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    return no_args(r, "escape", a) && escape_value(r, v, false, out);
}
static bool f_forceescape(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    return no_args(r, "forceescape", a) && escape_value(r, v, true, out);
}

static bool f_safe(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    if (!no_args(r, "safe", a)) return false;
    if (v.t == KN_J_STR && v.u.s->safe) {
        *out = kn_jv_ref(v);
        return true;
    }
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    if (!kn_jv_str_to(r, v, &b)) {
        kn_jbuf_free(&b);
        return false;
    }
    return kn_jbuf_take(&b, true, out);
}

/* first item (consumes one item of a generator); Undefined when empty. */
static bool f_first(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    if (!no_args(r, "first", a)) return false;
    if (v.t == KN_J_ITER) {
        kn_jiter *it = v.u.it;
        if (it->pos < it->l->n) {
            *out = kn_jv_ref(it->l->v[it->pos++]);
            return true;
        }
    } else {
        kn_jlist *l;
        if (!kn_jiterate(r, v, &l)) return false;
        bool any = l->n > 0;
        if (any) *out = kn_jv_ref(l->v[0]);
        kn_jv_drop(kn_jv_list(l, false));
        if (any) return true;
    }
    *out = kn_jv_undef_hint(r, false, "No first item, sequence was empty.");
    return true;
}

/* last item; Undefined when empty; a generator is an error (not reversible). */
static bool f_last(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    if (!no_args(r, "last", a)) return false;
    if (v.t == KN_J_ITER) return kn_jfail(r, "'generator' object is not reversible");
    kn_jlist *l;
    if (!kn_jiterate(r, v, &l)) return false;
    bool any = l->n > 0;
    if (any) *out = kn_jv_ref(l->v[l->n - 1]);
    kn_jv_drop(kn_jv_list(l, false));
    if (!any) *out = kn_jv_undef_hint(r, false, "No last item, sequence was empty.");
    return true;
}

/* Python float(s) for a string: decimal or inf/nan, surrounding whitespace allowed. */
static bool parse_float_str(const kn_jstr *s, double *out) {
    char buf[128];
    size_t a = 0, b = s->len;
    while (a < b && kn_ju_isspace((unsigned char)s->s[a])) a++;
    while (b > a && kn_ju_isspace((unsigned char)s->s[b - 1])) b--;
    size_t n = 0;
    for (size_t i = a; i < b; i++) {
        char c = s->s[i];
        if (c == '_') {
            if (i == a || i + 1 >= b || !(s->s[i - 1] >= '0' && s->s[i - 1] <= '9') ||
                !(s->s[i + 1] >= '0' && s->s[i + 1] <= '9'))
                return false;
            continue;
        }
        if (n + 1 >= sizeof buf) return false;
        if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' || (c | 32) == 'i' ||
              (c | 32) == 'n' || (c | 32) == 'f' || (c | 32) == 't' || (c | 32) == 'y' || (c | 32) == 'a'))
            return false;
        buf[n++] = c;
    }
    buf[n] = 0;
    if (!n) return false;
    const char *p = buf + (buf[0] == '+' || buf[0] == '-');
    if (strcasecmp(p, "inf") == 0 || strcasecmp(p, "infinity") == 0 || strcasecmp(p, "nan") == 0) {
        *out = strcasecmp(p, "nan") == 0 ? NAN : INFINITY;
        if (buf[0] == '-') *out = -*out;
        return true;
    }
    if (strchr(p, 'n') || strchr(p, 'N') || strchr(p, 'x') || strchr(p, 'X')) return false;
    char *end;
    errno = 0;
    double d = strtod(buf, &end);
    if (*end || end == buf) return false;
    *out = d;
    return true;
}

/* Python int(s, base) for a string. */
static bool parse_int_str(const kn_jstr *s, int64_t base, int64_t *out) {
    size_t a = 0, b = s->len;
    while (a < b && kn_ju_isspace((unsigned char)s->s[a])) a++;
    while (b > a && kn_ju_isspace((unsigned char)s->s[b - 1])) b--;
    bool neg = false;
    if (a < b && (s->s[a] == '+' || s->s[a] == '-')) neg = s->s[a++] == '-';
    if (b - a >= 2 && s->s[a] == '0') {
        char p = (char)(s->s[a + 1] | 32);
        int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
        if (pb && (base == pb || base == 0)) {
            base = pb;
            a += 2;
            if (a < b && s->s[a] == '_') a++;
        }
    }
    if (base == 0) base = 10;
    if (base < 2 || base > 36 || a >= b) return false;
    uint64_t v = 0;
    for (size_t i = a; i < b; i++) {
        char c = s->s[i];
        if (c == '_' && i > a && i + 1 < b && s->s[i + 1] != '_') continue;
        int d = (c >= '0' && c <= '9') ? c - '0' : ((c | 32) >= 'a' && (c | 32) <= 'z') ? (c | 32) - 'a' + 10 : 99;
        if (d >= base) return false;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return false;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    if (v > (uint64_t)INT64_MAX + (neg ? 1 : 0)) return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* float(value, default=0.0): Python float(), default when that fails; Undefined is an error. */
static bool f_float(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND("float", "default");
    double d;
    if (v.t == KN_J_UNDEF) return kn_jfail(r, "%s", v.u.s ? v.u.s->s : "undefined value");
    if (kn_jv_is_num(v)) {
        *out = kn_jv_float(v.t == KN_J_FLOAT ? v.u.f : v.t == KN_J_INT ? (double)v.u.i : v.u.b);
        return true;
    }
    if (v.t == KN_J_STR && parse_float_str(v.u.s, &d)) {
        *out = kn_jv_float(d);
        return true;
    }
    *out = given[0] ? kn_jv_ref(arg[0]) : kn_jv_float(0.0);
    return true;
}

/* int(value, default=0, base=10): Python int() of numbers and strings (a string like '4.2' goes
 * through float), default when that fails; Undefined is an error. */
static bool f_int(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND("int", "default", "base");
    int64_t base = 10, i;
    if (given[1] && !arg_int(r, arg[1], "base", &base)) return false;
    if (v.t == KN_J_UNDEF) return kn_jfail(r, "%s", v.u.s ? v.u.s->s : "undefined value");
    if (v.t == KN_J_INT || v.t == KN_J_BOOL) {
        *out = kn_jv_int(v.t == KN_J_INT ? v.u.i : v.u.b);
        return true;
    }
    double d = 0;
    bool have_f = false;
    if (v.t == KN_J_FLOAT) {
        d = v.u.f;
        have_f = true;
    } else if (v.t == KN_J_STR) {
        if (parse_int_str(v.u.s, base, &i)) {
            *out = kn_jv_int(i);
            return true;
        }
        have_f = parse_float_str(v.u.s, &d);
    }
    if (have_f) {
        if (isnan(d)) return kn_jfail(r, "cannot convert float NaN to integer");
        if (isinf(d)) return kn_jfail(r, "cannot convert float infinity to integer");
        if (fabs(d) >= 9.2e18) return kn_jfail(r, "integer overflow");
        *out = kn_jv_int((int64_t)d);
        return true;
    }
    *out = given[0] ? kn_jv_ref(arg[0]) : kn_jv_int(0);
    return true;
}

/* Jinja2's indent(s, width=4, first=False, blank=False): width may be a string; lines are split
 * as str.splitlines() does; blank lines are indented only with blank. */
static bool f_indent(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND("indent", "width", "first", "blank");
    kn_jbuf ind;
    kn_jbuf_init(&ind, r);
    bool ok = true;
    if (given[0] && arg[0].t == KN_J_STR) ok = kn_jbuf_put(&ind, arg[0].u.s->s, arg[0].u.s->len);
    else {
        int64_t w = 4;
        if (given[0] && !arg_int(r, arg[0], "width", &w)) return false;
        if (w > 1 << 20) return kn_jfail(r, "indent width too large");
        for (int64_t i = 0; ok && i < w; i++) ok = kn_jbuf_putc(&ind, ' ');
    }
    bool first = given[1] && kn_jv_truthy(arg[1]), blank = given[2] && kn_jv_truthy(arg[2]);
    kn_jv sv;
    if (ok && v.t != KN_J_STR) {
        /* Jinja2 appends "\n" to the value itself */
        ok = v.t == KN_J_UNDEF ? kn_jfail(r, "%s", v.u.s ? v.u.s->s : "undefined value")
                               : kn_jfail(r, "unsupported operand type(s) for +=: '%s' and 'str'", kn_jv_typename(v));
    }
    if (!ok || !soft_str(r, v, &sv)) {
        kn_jbuf_free(&ind);
        return false;
    }
    const kn_jstr *s = sv.u.s;
    /* Jinja2 splits s + "\n" with str.splitlines(): the lines of s, the last one (after the final
     * line break, maybe empty) included */
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    size_t pos = 0;
    bool first_line = true;
    size_t ilen = ind.n;
    const char *istr = ind.p ? ind.p : "";
    while (ok && pos <= s->len) {
        /* the next line of s + "\n" */
        size_t e = pos, brk = 0;
        while (e < s->len) {
            unsigned char c = (unsigned char)s->s[e];
            if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
                brk = (c == '\r' && e + 1 < s->len && s->s[e + 1] == '\n') ? 2 : 1;
                break;
            }
            if (c == 0xc2 && e + 1 < s->len && (unsigned char)s->s[e + 1] == 0x85) {
                brk = 2;
                break;
            }
            if (c == 0xe2 && e + 2 < s->len && (unsigned char)s->s[e + 1] == 0x80 &&
                ((unsigned char)s->s[e + 2] == 0xa8 || (unsigned char)s->s[e + 2] == 0xa9)) {
                brk = 3;
                break;
            }
            e++;
        }
        bool last = e >= s->len; /* the line ended by the appended "\n" */
        if (!first_line) {
            ok = kn_jbuf_putc(&b, '\n');
            if (ok && (blank || e > pos)) ok = kn_jbuf_put(&b, istr, ilen);
        }
        if (ok) ok = kn_jbuf_put(&b, s->s + pos, e - pos);
        first_line = false;
        if (last) break;
        pos = e + brk;
    }
    if (ok && first) {
        kn_jbuf c;
        kn_jbuf_init(&c, r);
        ok = kn_jbuf_put(&c, istr, ilen) && kn_jbuf_put(&c, b.p ? b.p : "", b.n);
        kn_jbuf_free(&b);
        b = c;
    }
    bool safe = s->safe;
    kn_jv_drop(sv);
    kn_jbuf_free(&ind);
    if (!ok) {
        kn_jbuf_free(&b);
        return false;
    }
    return kn_jbuf_take(&b, safe, out);
}

/* items(mapping): a generator of (key, value) tuples; nothing for Undefined. */
static bool f_items(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    if (!no_args(r, "items", a)) return false;
    kn_jlist *l;
    if (!new_list(r, &l)) return false;
    if (v.t == KN_J_DICT) {
        for (size_t i = 0; i < v.u.d->n; i++) {
            kn_jlist *pair = kn_jlist_new(r, 2);
            bool ok = pair && kn_jlist_push(r, pair, kn_jv_ref(v.u.d->k[i])) &&
                      kn_jlist_push(r, pair, kn_jv_ref(v.u.d->v[i])) && kn_jlist_push(r, l, kn_jv_list(pair, true));
            if (!ok) {
                if (pair && pair->n < 2) kn_jv_drop(kn_jv_list(pair, true));
                kn_jv_drop(kn_jv_list(l, false));
                return false;
            }
        }
    } else if (v.t != KN_J_UNDEF) {
        kn_jv_drop(kn_jv_list(l, false));
        return kn_jfail(r, "Can only get item pairs from a mapping.");
    }
    return kn_jmk_iter(r, l, out);
}

/* join(value, d='', attribute=None): str() of every item, joined by d (a plain string). */
static bool f_join(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND("join", "d", "attribute");
    kn_jlist *l;
    if (!kn_jiterate(r, v, &l)) return false;
    kn_jv sep = kn_jv_undef();
    bool ok = given[0] ? soft_str(r, arg[0], &sep) : kn_jmk_str(r, "", 0, false, &sep);
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    for (size_t i = 0; ok && i < l->n; i++) {
        if (i) ok = kn_jbuf_put(&b, sep.u.s->s, sep.u.s->len);
        kn_jv item;
        if (ok && given[1]) {
            ok = attr_path(r, l->v[i], arg[1], &item);
            if (ok) {
                ok = kn_jv_str_to(r, item, &b);
                kn_jv_drop(item);
            }
        } else if (ok) {
            ok = kn_jv_str_to(r, l->v[i], &b);
        }
    }
    kn_jv_drop(sep);
    kn_jv_drop(kn_jv_list(l, false));
    if (!ok) {
        kn_jbuf_free(&b);
        return false;
    }
    return kn_jbuf_take(&b, false, out);
}

/* len(): characters of a string, items of a list or dict, 0 for Undefined. */
static bool f_length(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    if (!no_args(r, "length", a)) return false;
    switch (v.t) {
        case KN_J_STR: *out = kn_jv_int((int64_t)kn_jstr_cplen(v.u.s)); return true;
        case KN_J_LIST:
        case KN_J_TUPLE: *out = kn_jv_int((int64_t)v.u.l->n); return true;
        case KN_J_DICT: *out = kn_jv_int((int64_t)v.u.d->n); return true;
        case KN_J_UNDEF: *out = kn_jv_int(0); return true;
        case KN_J_LOOP: *out = kn_jv_int((int64_t)v.u.loop->items->n); return true;
        default: return kn_jfail(r, "object of type '%s' has no len()", kn_jv_typename(v));
    }
}

static bool f_list(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    if (!no_args(r, "list", a)) return false;
    kn_jlist *l;
    if (!kn_jiterate(r, v, &l)) return false;
    *out = kn_jv_list(l, false);
    return true;
}

static bool f_lower(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    kn_jv s;
    if (!no_args(r, "lower", a) || !soft_str(r, v, &s)) return false;
    bool ok = kn_jcase(r, s.u.s, false, out);
    kn_jv_drop(s);
    return ok;
}

static bool f_upper(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    kn_jv s;
    if (!no_args(r, "upper", a) || !soft_str(r, v, &s)) return false;
    bool ok = kn_jcase(r, s.u.s, true, out);
    kn_jv_drop(s);
    return ok;
}

static bool call_filter_by_name(kn_jr *r, kn_jv name, kn_jv v, const kn_jargs *a, kn_jv *out) {
    if (name.t != KN_J_STR) return kn_jfail(r, "filter name must be a string");
    int id = kn_jfilter_find(name.u.s->s, name.u.s->len);
    if (id < 0) return kn_jfail(r, "No filter named '%.64s'.", name.u.s->s);
    return kn_jfilter_call(r, id, v, a, out);
}

/* map(attribute=..., default=...) or map('filter', args...): a generator of the results; a falsy
 * value maps nothing. */
static bool f_map(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    kn_jv attribute = kn_jv_undef(), def = kn_jv_undef();
    bool by_attr = false, has_def = false;
    if (a->n_pos == 0) {
        for (size_t k = 0; k < a->n_kw; k++) {
            const kn_jstr *n = a->kw_names[k];
            if (n->len == 9 && !memcmp(n->s, "attribute", 9)) {
                attribute = a->kw[k];
                by_attr = true;
            } else if (n->len == 7 && !memcmp(n->s, "default", 7)) {
                def = a->kw[k];
                has_def = true;
            } else return kn_jfail(r, "Unexpected keyword argument '%s'", n->s);
        }
        if (!by_attr) return kn_jfail(r, "map requires a filter argument");
    }
    kn_jlist *l, *res;
    if (!kn_jv_truthy(v)) {
        /* Jinja2 maps nothing (and checks no arguments) when the value is falsy */
        return new_list(r, &res) && kn_jmk_iter(r, res, out);
    }
    if (!kn_jiterate(r, v, &l)) return false;
    bool ok = new_list(r, &res);
    kn_jargs rest = *a;
    if (!by_attr) {
        rest.pos = a->pos + 1;
        rest.n_pos = a->n_pos - 1;
    }
    for (size_t i = 0; ok && i < l->n; i++) {
        kn_jv x;
        if (by_attr) {
            ok = attr_path(r, l->v[i], attribute, &x);
            if (ok && has_def && def.t != KN_J_NONE && x.t == KN_J_UNDEF) {
                kn_jv_drop(x);
                x = kn_jv_ref(def);
            }
        } else {
            ok = call_filter_by_name(r, a->pos[0], l->v[i], &rest, &x);
        }
        if (ok) ok = kn_jlist_push(r, res, x);
    }
    kn_jv_drop(kn_jv_list(l, false));
    if (!ok) {
        if (res) kn_jv_drop(kn_jv_list(res, false));
        return false;
    }
    return kn_jmk_iter(r, res, out);
}

/* min / max over the items (attribute, case-insensitive unless asked). */
static bool min_max(kn_jr *r, kn_jv v, const kn_jargs *a, bool want_max, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND(want_max ? "max" : "min", "case_sensitive", "attribute");
    kv *items;
    size_t n;
    if (!keyed_items(r, v, given[1] ? arg[1] : kn_jv_none(), given[0] && kn_jv_truthy(arg[0]), &items, &n))
        return false;
    if (!n) {
        free(items);
        *out = kn_jv_undef_hint(r, false, "No aggregated item, sequence was empty.");
        return true;
    }
    size_t best = 0;
    for (size_t i = 1; i < n; i++) {
        int c;
        if (!kn_jv_cmp(r, items[i].key, items[best].key, &c)) {
            free_kv(items, n);
            return false;
        }
        if (want_max ? c == 1 : c == -1) best = i;
    }
    *out = kn_jv_ref(items[best].item);
    free_kv(items, n);
    return true;
}

static bool f_max(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) { return min_max(r, v, a, true, out); }
static bool f_min(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) { return min_max(r, v, a, false, out); }

/* select / reject / selectattr / rejectattr. */
static bool select_items(kn_jr *r, kn_jv v, const kn_jargs *a, bool keep, bool by_attr, kn_jv *out) {
    size_t off = by_attr ? 1 : 0;
    if (!kn_jv_truthy(v)) {
        /* Jinja2 selects nothing (and checks no arguments) when the value is falsy */
        kn_jlist *empty = kn_jlist_new(r, 0);
        return empty && kn_jmk_iter(r, empty, out);
    }
    if (by_attr && a->n_pos < 1) return kn_jfail(r, "Missing parameter for attribute name");
    int test = -1;
    if (a->n_pos > off) {
        kn_jv name = a->pos[off];
        if (name.t != KN_J_STR) return kn_jfail(r, "test name must be a string");
        if ((test = kn_jtest_find(name.u.s->s, name.u.s->len)) < 0)
            return kn_jfail(r, "No test named '%.64s'.", name.u.s->s);
    }
    kn_jargs rest = *a;
    rest.pos = a->pos + KN_MIN(off + 1, a->n_pos);
    rest.n_pos = a->n_pos > off + 1 ? a->n_pos - off - 1 : 0;
    kn_jlist *l, *res;
    if (!kn_jiterate(r, v, &l)) return false;
    bool ok = new_list(r, &res);
    for (size_t i = 0; ok && i < l->n; i++) {
        kn_jv x;
        if (by_attr) ok = attr_path(r, l->v[i], a->pos[0], &x);
        else x = kn_jv_ref(l->v[i]);
        if (!ok) break;
        bool t;
        if (test >= 0) ok = kn_jtest_call(r, test, x, &rest, &t);
        else t = kn_jv_truthy(x);
        kn_jv_drop(x);
        if (ok && t == keep) ok = kn_jlist_push(r, res, kn_jv_ref(l->v[i]));
    }
    kn_jv_drop(kn_jv_list(l, false));
    if (!ok) {
        if (res) kn_jv_drop(kn_jv_list(res, false));
        return false;
    }
    return kn_jmk_iter(r, res, out);
}

static bool f_select(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    return select_items(r, v, a, true, false, out);
}
static bool f_reject(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    return select_items(r, v, a, false, false, out);
}
static bool f_selectattr(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    return select_items(r, v, a, true, true, out);
}
static bool f_rejectattr(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    return select_items(r, v, a, false, true, out);
}

/* replace(s, old, new, count=None) on str() of each, giving a plain string. */
static bool f_replace(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 2 };
    BIND("replace", "old", "new", "count");
    int64_t count = -1;
    if (given[2] && arg[2].t != KN_J_NONE && !arg_int(r, arg[2], "count", &count)) return false;
    kn_jv s = kn_jv_undef(), o = kn_jv_undef(), n = kn_jv_undef();
    bool ok = soft_str(r, v, &s) && soft_str(r, arg[0], &o) && soft_str(r, arg[1], &n) &&
              kn_jreplace(r, s.u.s, o.u.s, n.u.s, count, out);
    kn_jv_drop(s);
    kn_jv_drop(o);
    kn_jv_drop(n);
    return ok;
}

/* A reversed string, a reverse iterator over a sequence, or a list for a generator. */
static bool f_reverse(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    if (!no_args(r, "reverse", a)) return false;
    kn_jlist *l;
    if (!kn_jiterate(r, v, &l)) return false;
    if (!kn_jlist_own(r, &l)) {
        kn_jv_drop(kn_jv_list(l, false));
        return false;
    }
    for (size_t i = 0; i < l->n / 2; i++) {
        kn_jv t = l->v[i];
        l->v[i] = l->v[l->n - 1 - i];
        l->v[l->n - 1 - i] = t;
    }
    if (v.t == KN_J_STR) {
        kn_jbuf b;
        kn_jbuf_init(&b, r);
        bool ok = true;
        for (size_t i = 0; ok && i < l->n; i++) ok = kn_jbuf_put(&b, l->v[i].u.s->s, l->v[i].u.s->len);
        kn_jv_drop(kn_jv_list(l, false));
        if (!ok) {
            kn_jbuf_free(&b);
            return false;
        }
        return kn_jbuf_take(&b, v.u.s->safe, out);
    }
    if (v.t == KN_J_ITER) {
        *out = kn_jv_list(l, false);
        return true;
    }
    return kn_jmk_iter(r, l, out);
}

/* round(value, precision=0, method='common'): common is Python's round (half to even on the
 * exact binary value); ceil and floor scale by 10^precision. */
static bool f_round(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND("round", "precision", "method");
    int64_t prec = 0;
    if (given[0] && !arg_int(r, arg[0], "precision", &prec)) return false;
    int method = 0; /* common, ceil, floor */
    if (given[1]) {
        const kn_jstr *m;
        if (!kn_jarg_str(r, arg[1], "method", &m)) return false;
        if (!strcmp(m->s, "ceil")) method = 1;
        else if (!strcmp(m->s, "floor")) method = 2;
        else if (strcmp(m->s, "common")) return kn_jfail(r, "method must be common, ceil or floor");
    }
    if (!kn_jv_is_num(v)) return kn_jfail(r, "type %s doesn't define __round__ method", kn_jv_typename(v));
    if (prec < -308 || prec > 308) prec = prec < 0 ? -308 : 308;
    double x = v.t == KN_J_FLOAT ? v.u.f : v.t == KN_J_INT ? (double)v.u.i : v.u.b;
    if (method == 0) {
        if (v.t != KN_J_FLOAT) {
            if (prec >= 0) {
                *out = kn_jv_int(v.t == KN_J_INT ? v.u.i : v.u.b);
                return true;
            }
            /* round(int, -n): to a multiple of 10^n, half to even */
            int64_t p = 1;
            for (int64_t k = 0; k < -prec && p <= INT64_MAX / 10; k++) p *= 10;
            int64_t q = (v.t == KN_J_INT ? v.u.i : v.u.b) / p, m = (v.t == KN_J_INT ? v.u.i : v.u.b) % p;
            if (m < 0) {
                m += p;
                q -= 1;
            }
            if (2 * m > p || (2 * m == p && (q & 1))) q += 1;
            *out = kn_jv_int(q * p);
            return true;
        }
        if (!isfinite(x)) {
            *out = kn_jv_float(x);
            return true;
        }
        if (prec >= 0) {
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", (int)KN_MIN(prec, 340), x);
            *out = kn_jv_float(strtod(buf, NULL));
        } else {
            double p = pow(10.0, (double)-prec);
            double y = x / p, fl = floor(y), d = y - fl;
            double rnd = d > 0.5 ? fl + 1 : d < 0.5 ? fl : (fmod(fl, 2) == 0 ? fl : fl + 1);
            *out = kn_jv_float(rnd * p);
        }
        return true;
    }
    double p = pow(10.0, (double)prec);
    double y = method == 1 ? ceil(x * p) : floor(x * p);
    *out = kn_jv_float(y / p);
    return true;
}

/* sort(value, reverse=False, case_sensitive=False, attribute=None): a new list, stable. */
static bool f_sort(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND("sort", "reverse", "case_sensitive", "attribute");
    kv *items;
    size_t n;
    if (!keyed_items(r, v, given[2] ? arg[2] : kn_jv_none(), given[1] && kn_jv_truthy(arg[1]), &items, &n))
        return false;
    bool ok = merge_sort(r, items, n, given[0] && kn_jv_truthy(arg[0]));
    kn_jlist *res = NULL;
    if (ok) ok = new_list(r, &res);
    for (size_t i = 0; ok && i < n; i++) ok = kn_jlist_push(r, res, kn_jv_ref(items[i].item));
    free_kv(items, n);
    if (!ok) {
        if (res) kn_jv_drop(kn_jv_list(res, false));
        return false;
    }
    *out = kn_jv_list(res, false);
    return true;
}

static bool f_string(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    return no_args(r, "string", a) && soft_str(r, v, out);
}

/* sum(iterable, attribute=None, start=0) with the + of numbers and lists. */
static bool f_sum(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND("sum", "attribute", "start");
    kn_jlist *l;
    if (!kn_jiterate(r, v, &l)) return false;
    kn_jv acc = given[1] ? kn_jv_ref(arg[1]) : kn_jv_int(0);
    bool ok = true;
    if (acc.t == KN_J_STR) ok = kn_jfail(r, "sum() can't sum strings [use ''.join(seq) instead]");
    for (size_t i = 0; ok && i < l->n; i++) {
        kn_jv x, res;
        if (given[0] && arg[0].t != KN_J_NONE) ok = attr_path(r, l->v[i], arg[0], &x);
        else x = kn_jv_ref(l->v[i]);
        if (!ok) break;
        /* acc + x through the template's + */
        if (kn_jv_is_num(acc) && kn_jv_is_num(x)) {
            if (acc.t != KN_J_FLOAT && x.t != KN_J_FLOAT) {
                int64_t s;
                int64_t p = acc.t == KN_J_INT ? acc.u.i : acc.u.b, q = x.t == KN_J_INT ? x.u.i : x.u.b;
                if (__builtin_add_overflow(p, q, &s)) ok = kn_jfail(r, "integer overflow");
                else res = kn_jv_int(s);
            } else {
                double p = acc.t == KN_J_FLOAT ? acc.u.f : acc.t == KN_J_INT ? (double)acc.u.i : acc.u.b;
                double q = x.t == KN_J_FLOAT ? x.u.f : x.t == KN_J_INT ? (double)x.u.i : x.u.b;
                res = kn_jv_float(p + q);
            }
        } else if ((acc.t == KN_J_LIST || acc.t == KN_J_TUPLE) && acc.t == x.t) {
            kn_jlist *m = kn_jlist_new(r, 0);
            ok = m != NULL;
            for (size_t k = 0; ok && k < acc.u.l->n; k++) ok = kn_jlist_push(r, m, kn_jv_ref(acc.u.l->v[k]));
            for (size_t k = 0; ok && k < x.u.l->n; k++) ok = kn_jlist_push(r, m, kn_jv_ref(x.u.l->v[k]));
            if (ok) res = kn_jv_list(m, acc.t == KN_J_TUPLE);
            else if (m) kn_jv_drop(kn_jv_list(m, false));
        } else {
            ok =
                kn_jfail(r, "unsupported operand type(s) for +: '%s' and '%s'", kn_jv_typename(acc), kn_jv_typename(x));
        }
        kn_jv_drop(x);
        if (ok) {
            kn_jv_drop(acc);
            acc = res;
        }
    }
    kn_jv_drop(kn_jv_list(l, false));
    if (!ok) {
        kn_jv_drop(acc);
        return false;
    }
    *out = acc;
    return true;
}

/* Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False). */
static bool f_tojson(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    kn_jjson_opts o = {0};
    o.ensure_ascii = given[0] && kn_jv_truthy(arg[0]);
    o.sort_keys = given[3] && kn_jv_truthy(arg[3]);
    char ind[256];
    if (given[1] && arg[1].t != KN_J_NONE) {
        if (arg[1].t == KN_J_STR) {
            o.indent = arg[1].u.s->s;
            o.indent_len = arg[1].u.s->len;
        } else {
            int64_t w;
            if (!arg_int(r, arg[1], "indent", &w)) return false;
            if (w > (int64_t)sizeof ind) return kn_jfail(r, "indent too large");
            if (w < 0) w = 0;
            memset(ind, ' ', (size_t)w);
            o.indent = ind;
            o.indent_len = (size_t)w;
        }
    }
    if (given[2] && arg[2].t != KN_J_NONE) {
        kn_jv s = arg[2];
        if (!kn_jv_is_seq(s) || s.u.l->n != 2 || s.u.l->v[0].t != KN_J_STR || s.u.l->v[1].t != KN_J_STR)
            return kn_jfail(r, "separators must be a pair of strings");
        o.item_sep = s.u.l->v[0].u.s->s;
        o.item_sep_len = s.u.l->v[0].u.s->len;
        o.key_sep = s.u.l->v[1].u.s->s;
        o.key_sep_len = s.u.l->v[1].u.s->len;
    }
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    if (!kn_jtojson(r, v, &o, &b)) {
        kn_jbuf_free(&b);
        return false;
    }
    return kn_jbuf_take(&b, false, out);
}

/* trim(value, chars=None): str.strip on str(value). */
static bool f_trim(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND("trim", "chars");
    const kn_jstr *chars = NULL;
    if (given[0] && arg[0].t != KN_J_NONE && !kn_jarg_str(r, arg[0], "chars", &chars)) return false;
    kn_jv s;
    if (!soft_str(r, v, &s)) return false;
    bool ok = kn_jstrip(r, s.u.s, chars, 3, out);
    kn_jv_drop(s);
    return ok;
}

/* truncate(s, length=255, killwords=False, end='...', leeway=5) by characters; without killwords
 * the cut moves back to the last space. */
static bool f_truncate(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND("truncate", "length", "killwords", "end", "leeway");
    int64_t length = 255, leeway = 5;
    if (given[0] && !arg_int(r, arg[0], "length", &length)) return false;
    if (given[3] && arg[3].t != KN_J_NONE && !arg_int(r, arg[3], "leeway", &leeway)) return false;
    bool kill = given[1] && kn_jv_truthy(arg[1]);
    const char *end = "...";
    size_t endlen = 3;
    if (given[2]) {
        const kn_jstr *e;
        if (!kn_jarg_str(r, arg[2], "end", &e)) return false;
        end = e->s;
        endlen = e->len;
    }
    kn_jv sv;
    if (v.t == KN_J_UNDEF) {
        *out = kn_jv_ref(v);
        return true;
    }
    if (v.t != KN_J_STR) {
        /* Jinja2 returns a short enough sequence as it is */
        size_t n = kn_jv_is_seq(v) ? v.u.l->n : v.t == KN_J_DICT ? v.u.d->n : SIZE_MAX;
        if (n == SIZE_MAX) return kn_jfail(r, "object of type '%s' has no len()", kn_jv_typename(v));
        if ((int64_t)n <= length + leeway) {
            *out = kn_jv_ref(v);
            return true;
        }
        return kn_jfail(r, "'%s' object has no attribute 'rsplit'", kn_jv_typename(v));
    }
    if (!soft_str(r, v, &sv)) return false;
    const kn_jstr *s = sv.u.s;
    int64_t n = (int64_t)kn_jstr_cplen(s);
    int64_t ecp = 0;
    for (size_t i = 0; i < endlen; i = kn_ju_next(end, endlen, i)) ecp++;
    if (length < ecp || leeway < 0) {
        kn_jv_drop(sv);
        return kn_jfail(r, "expected length >= %lld, got %lld", (long long)ecp, (long long)length);
    }
    if (n <= length + leeway) {
        *out = sv;
        return true;
    }
    size_t cut = kn_jstr_cpoff(s, (size_t)(length - ecp));
    if (!kill) {
        /* rsplit(" ", 1)[0] */
        size_t k = cut;
        while (k > 0 && s->s[k - 1] != ' ') k--;
        if (k > 0) cut = k - 1;
    }
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    bool ok = kn_jbuf_put(&b, s->s, cut) && kn_jbuf_put(&b, end, endlen);
    kn_jv_drop(sv);
    if (!ok) {
        kn_jbuf_free(&b);
        return false;
    }
    return kn_jbuf_take(&b, false, out);
}

/* unique(value, case_sensitive=False, attribute=None): first occurrences, as a generator. */
static bool f_unique(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    enum { nreq_ = 0 };
    BIND("unique", "case_sensitive", "attribute");
    kv *items;
    size_t n;
    if (!keyed_items(r, v, given[1] ? arg[1] : kn_jv_none(), given[0] && kn_jv_truthy(arg[0]), &items, &n))
        return false;
    kn_jdict *seen = kn_jdict_new(r);
    kn_jlist *res = NULL;
    bool ok = seen && new_list(r, &res);
    for (size_t i = 0; ok && i < n; i++) {
        if (!kn_jv_hashable(items[i].key)) {
            ok = kn_jfail(r, "unhashable type: '%s'", kn_jv_typename(items[i].key));
            break;
        }
        if (kn_jdict_get(seen, items[i].key)) continue;
        ok = kn_jdict_set(r, seen, kn_jv_ref(items[i].key), kn_jv_none()) &&
             kn_jlist_push(r, res, kn_jv_ref(items[i].item));
    }
    free_kv(items, n);
    if (seen) kn_jv_drop(kn_jv_dict(seen));
    if (!ok) {
        if (res) kn_jv_drop(kn_jv_list(res, false));
        return false;
    }
    return kn_jmk_iter(r, res, out);
}

/* wordcount: runs of word characters (letters, digits, marks, underscore), as re's \w+. */
static bool f_wordcount(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    kn_jv sv;
    if (!no_args(r, "wordcount", a) || !soft_str(r, v, &sv)) return false;
    const kn_jstr *s = sv.u.s;
    int64_t words = 0;
    bool in = false;
    for (size_t i = 0; i < s->len;) {
        size_t adv;
        uint32_t cp = kn_ju_cp(s->s, s->len, i, &adv);
        bool w = cp == '_' || (cp != KN_UTF8_INVALID &&
                               (kn_ju_isalpha(cp) || kn_ju_isdigit(cp) ||
                                (cp >= 0x80 && (kn_ucd_flags(cp) & (KN_UCD_MARK_NONSPACING | KN_UCD_MARK_OTHER)))));
        if (w && !in) words++;
        in = w;
        i += adv;
    }
    kn_jv_drop(sv);
    *out = kn_jv_int(words);
    return true;
}

/* s|format(*args) / s|format(**kwargs): printf-style s % args. */
static bool f_format(kn_jr *r, kn_jv v, const kn_jargs *a, kn_jv *out) {
    if (a->n_pos && a->n_kw) return kn_jfail(r, "can't handle positional and keyword arguments at the same time");
    kn_jv s;
    if (!soft_str(r, v, &s)) return false;
    kn_jv args;
    bool ok = true;
    if (a->n_kw) {
        kn_jdict *d = kn_jdict_new(r);
        ok = d != NULL;
        for (size_t k = 0; ok && k < a->n_kw; k++) {
            kn_jv key;
            ok = kn_jmk_str(r, a->kw_names[k]->s, a->kw_names[k]->len, false, &key) &&
                 kn_jdict_set(r, d, key, kn_jv_ref(a->kw[k]));
        }
        args = d ? kn_jv_dict(d) : kn_jv_undef();
    } else {
        kn_jlist *l = kn_jlist_new(r, a->n_pos);
        ok = l != NULL;
        for (size_t k = 0; ok && k < a->n_pos; k++) ok = kn_jlist_push(r, l, kn_jv_ref(a->pos[k]));
        args = l ? kn_jv_list(l, true) : kn_jv_undef();
    }
    if (ok) ok = kn_jformat_percent(r, s.u.s, args, out);
    kn_jv_drop(args);
    kn_jv_drop(s);
    return ok;
}

static const struct {
    const char *name;
    filter_fn fn;
} filters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_forceescape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"slice", f_slice},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

int kn_jfilter_find(const char *name, size_t n) {
    for (size_t i = 0; i < KN_ARRAY_LEN(filters); i++)
        if (strlen(filters[i].name) == n && memcmp(filters[i].name, name, n) == 0) return (int)i;
    return -1;
}

bool kn_jfilter_call(kn_jr *r, int id, kn_jv v, const kn_jargs *a, kn_jv *out) {
    if (id < 0 || (size_t)id >= KN_ARRAY_LEN(filters)) return kn_jfail(r, "internal error: bad filter id");
    return filters[id].fn(r, v, a, out);
}

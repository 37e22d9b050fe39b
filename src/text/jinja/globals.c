/*
 * globals.c - the global functions chat templates call: range (at most KN_JINJA_MAX_RANGE items,
 * as the sandbox allows), namespace, dict, raise_exception (its message becomes the render error)
 * and strftime_now, whose "now" is SOURCE_DATE_EPOCH (UTC) when that is set, for reproducible
 * output, and the local time otherwise.
 */
#include "text/jinja/impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME };
static const char *const globals[] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};

int kn_jglobal_find(const char *name, size_t n) {
    for (size_t i = 0; i < KN_ARRAY_LEN(globals); i++)
        if (strlen(globals[i]) == n && memcmp(globals[i], name, n) == 0) return (int)i;
    return -1;
}

const char *kn_jglobal_name(int id) { return id >= 0 && (size_t)id < KN_ARRAY_LEN(globals) ? globals[id] : "?"; }

/* dict(*args, **kwargs): a mapping or an iterable of pairs, then keywords. */
static bool build_dict(kn_jr *r, const char *fname, const kn_jargs *a, kn_jdict **out) {
    if (a->n_pos > 1) return kn_jfail(r, "%s expected at most 1 argument, got %zu", fname, a->n_pos);
    kn_jdict *d = kn_jdict_new(r);
    if (!d) return false;
    bool ok = true;
    if (a->n_pos == 1) {
        kn_jv src = a->pos[0];
        if (src.t == KN_J_DICT) {
            for (size_t i = 0; ok && i < src.u.d->n; i++)
                ok = kn_jdict_set(r, d, kn_jv_ref(src.u.d->k[i]), kn_jv_ref(src.u.d->v[i]));
        } else {
            kn_jlist *l = NULL;
            ok = kn_jiterate(r, src, &l);
            for (size_t i = 0; ok && i < l->n; i++) {
                kn_jv p = l->v[i];
                if (!kn_jv_is_seq(p) || p.u.l->n != 2) {
                    ok = kn_jfail(r, "dictionary update sequence element #%zu has the wrong length", i);
                    break;
                }
                ok = kn_jdict_set(r, d, kn_jv_ref(p.u.l->v[0]), kn_jv_ref(p.u.l->v[1]));
            }
            if (l) kn_jv_drop(kn_jv_list(l, false));
        }
    }
    for (size_t k = 0; ok && k < a->n_kw; k++) {
        kn_jv key;
        ok = kn_jmk_str(r, a->kw_names[k]->s, a->kw_names[k]->len, false, &key) &&
             kn_jdict_set(r, d, key, kn_jv_ref(a->kw[k]));
    }
    if (!ok) {
        kn_jv_drop(kn_jv_dict(d));
        return false;
    }
    *out = d;
    return true;
}

/* range(stop) / range(start, stop[, step]) as a list that prints as range(); more than
 * KN_JINJA_MAX_RANGE items is an error, as in Jinja2's sandbox. */
static bool g_range(kn_jr *r, const kn_jargs *a, kn_jv *out) {
    if (a->n_kw) return kn_jfail(r, "range() takes no keyword arguments");
    if (a->n_pos < 1 || a->n_pos > 3) return kn_jfail(r, "range expected 1 to 3 arguments, got %zu", a->n_pos);
    int64_t v[3] = {0, 0, 0}, start = 0, stop, st = 1;
    for (size_t i = 0; i < a->n_pos; i++) {
        kn_jv x = a->pos[i];
        if (x.t == KN_J_UNDEF) return kn_jfail(r, "%s", x.u.s ? x.u.s->s : "undefined value");
        if (x.t == KN_J_INT) v[i] = x.u.i;
        else if (x.t == KN_J_BOOL) v[i] = x.u.b;
        else return kn_jfail(r, "'%s' object cannot be interpreted as an integer", kn_jv_typename(x));
    }
    if (a->n_pos == 1) stop = v[0];
    else {
        start = v[0];
        stop = v[1];
        if (a->n_pos == 3) st = v[2];
    }
    if (st == 0) return kn_jfail(r, "range() arg 3 must not be zero");
    double count = 0;
    if (st > 0 && start < stop) count = ((double)stop - (double)start - 1) / (double)st + 1;
    else if (st < 0 && stop < start) count = ((double)start - (double)stop - 1) / (double)-st + 1;
    count = floor(count);
    if (count > KN_JINJA_MAX_RANGE)
        return kn_jfail(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", KN_JINJA_MAX_RANGE);
    kn_jlist *l = kn_jlist_new(r, (size_t)count);
    if (!l) return false;
    for (int64_t i = 0; i < (int64_t)count; i++) l->v[l->n++] = kn_jv_int(start + i * st);
    if (!kn_jwork_items(r, (uint64_t)count)) {
        kn_jv_drop(kn_jv_list(l, false));
        return false;
    }
    l->range_args[0] = start;
    l->range_args[1] = stop;
    l->range_args[2] = st;
    *out = kn_jv_list(l, true);
    out->range = 1;
    return true;
}

/* strftime_now(fmt): the time SOURCE_DATE_EPOCH names (UTC) when set, else the local time now. */
static bool g_strftime(kn_jr *r, const kn_jargs *a, kn_jv *out) {
    if (a->n_pos != 1 || a->n_kw) return kn_jfail(r, "strftime_now() takes exactly one argument");
    const kn_jstr *fmt;
    if (!kn_jarg_str(r, a->pos[0], "format", &fmt)) return false;
    if (fmt->len > 1024) return kn_jfail(r, "strftime_now() format too long");
    time_t now;
    struct tm tm;
    const char *epoch = getenv("SOURCE_DATE_EPOCH");
    char *end = NULL;
    long long e = epoch && *epoch ? strtoll(epoch, &end, 10) : 0;
    if (epoch && *epoch && end && !*end) {
        now = (time_t)e;
        if (!gmtime_r(&now, &tm)) return kn_jfail(r, "strftime_now(): bad SOURCE_DATE_EPOCH");
    } else {
        now = time(NULL);
        if (!localtime_r(&now, &tm)) return kn_jfail(r, "strftime_now(): cannot read the clock");
    }
    if (fmt->len == 0) return kn_jmk_str(r, "", 0, false, out);
    char buf[4096];
    size_t n = strftime(buf, sizeof buf, fmt->s, &tm);
    if (n == 0) return kn_jfail(r, "strftime_now(): result too long");
    return kn_jmk_str(r, buf, n, false, out);
}

bool kn_jglobal_call(kn_jr *r, int id, const kn_jargs *a, kn_jv *out) {
    switch (id) {
        case G_RANGE: return g_range(r, a, out);
        case G_NAMESPACE: {
            kn_jdict *d;
            if (!build_dict(r, "Namespace", a, &d)) return false;
            kn_jns *ns = kn_jns_new(r);
            if (!ns) {
                kn_jv_drop(kn_jv_dict(d));
                return false;
            }
            kn_jv_drop(kn_jv_dict(ns->attrs));
            ns->attrs = d;
            *out = (kn_jv){0};
            out->t = KN_J_NS;
            out->u.ns = ns;
            return true;
        }
        case G_DICT: {
            kn_jdict *d;
            if (!build_dict(r, "dict", a, &d)) return false;
            *out = kn_jv_dict(d);
            return true;
        }
        case G_RAISE: {
            kn_jv msg;
            if (a->n_pos < 1) return kn_jfail(r, "raise_exception() missing its message");
            if (!kn_jv_to_str(r, a->pos[0], &msg)) return false;
            kn_jfail(r, "%s", msg.u.s->s);
            kn_jv_drop(msg);
            return false;
        }
        case G_STRFTIME: return g_strftime(r, a, out);
        default: return kn_jfail(r, "internal error: bad global");
    }
}

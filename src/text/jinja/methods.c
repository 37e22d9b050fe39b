/*
 * methods.c - the Python methods templates call on values: "abc".split(","),
 * text.startswith("<"), d.get("k", 0), d.items(), list.index(x), loop.cycle("a", "b"), and
 * Python's two string-formatting mini-languages ("%s" % x and "{}".format(x)).
 *
 * Strings index by code point, as Python does (find() returns a character index). Methods that
 * would mutate a list or dict (append, pop, update, ...) are known but blocked, as in Jinja2's
 * ImmutableSandboxedEnvironment: reading them gives an Undefined that fails when called.
 * dict.items() / keys() / values() return lists (Python returns views; they iterate the same).
 */
#include "text/jinja/impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { R_STR = 1, R_DICT = 2, R_LIST = 4, R_TUPLE = 8, R_LOOP = 16 };

enum {
    M_CAPITALIZE,
    M_CASEFOLD,
    M_CENTER,
    M_COUNT,
    M_ENDSWITH,
    M_FIND,
    M_FORMAT,
    M_INDEX,
    M_ISALNUM,
    M_ISALPHA,
    M_ISDIGIT,
    M_ISLOWER,
    M_ISSPACE,
    M_ISUPPER,
    M_JOIN,
    M_LJUST,
    M_LOWER,
    M_LSTRIP,
    M_PARTITION,
    M_REPLACE,
    M_RFIND,
    M_RINDEX,
    M_RJUST,
    M_RPARTITION,
    M_RSPLIT,
    M_RSTRIP,
    M_SPLIT,
    M_SPLITLINES,
    M_STARTSWITH,
    M_STRIP,
    M_SWAPCASE,
    M_TITLE,
    M_UPPER,
    M_ZFILL,
    M_REMOVEPREFIX,
    M_REMOVESUFFIX,
    M_ISNUMERIC,
    M_ISDECIMAL,
    M_GET,
    M_ITEMS,
    M_KEYS,
    M_VALUES,
    M_COPY,
    M_LCOUNT,
    M_LINDEX,
    M_CYCLE,
    M_CHANGED,
    M_UNSAFE,
};

static const struct {
    uint8_t recv;
    uint8_t id;
    const char *name;
} methods[] = {
    {R_STR, M_CAPITALIZE, "capitalize"},
    {R_STR, M_CASEFOLD, "casefold"},
    {R_STR, M_CENTER, "center"},
    {R_STR, M_COUNT, "count"},
    {R_STR, M_ENDSWITH, "endswith"},
    {R_STR, M_FIND, "find"},
    {R_STR, M_FORMAT, "format"},
    {R_STR, M_INDEX, "index"},
    {R_STR, M_ISALNUM, "isalnum"},
    {R_STR, M_ISALPHA, "isalpha"},
    {R_STR, M_ISDIGIT, "isdigit"},
    {R_STR, M_ISLOWER, "islower"},
    {R_STR, M_ISSPACE, "isspace"},
    {R_STR, M_ISUPPER, "isupper"},
    {R_STR, M_JOIN, "join"},
    {R_STR, M_LJUST, "ljust"},
    {R_STR, M_LOWER, "lower"},
    {R_STR, M_LSTRIP, "lstrip"},
    {R_STR, M_PARTITION, "partition"},
    {R_STR, M_REPLACE, "replace"},
    {R_STR, M_RFIND, "rfind"},
    {R_STR, M_RINDEX, "rindex"},
    {R_STR, M_RJUST, "rjust"},
    {R_STR, M_RPARTITION, "rpartition"},
    {R_STR, M_RSPLIT, "rsplit"},
    {R_STR, M_RSTRIP, "rstrip"},
    {R_STR, M_SPLIT, "split"},
    {R_STR, M_SPLITLINES, "splitlines"},
    {R_STR, M_STARTSWITH, "startswith"},
    {R_STR, M_STRIP, "strip"},
    {R_STR, M_SWAPCASE, "swapcase"},
    {R_STR, M_TITLE, "title"},
    {R_STR, M_UPPER, "upper"},
    {R_STR, M_ZFILL, "zfill"},
    {R_STR, M_REMOVEPREFIX, "removeprefix"},
    {R_STR, M_REMOVESUFFIX, "removesuffix"},
    {R_STR, M_ISNUMERIC, "isnumeric"},
    {R_STR, M_ISDECIMAL, "isdecimal"},
    {R_DICT, M_GET, "get"},
    {R_DICT, M_ITEMS, "items"},
    {R_DICT, M_KEYS, "keys"},
    {R_DICT, M_VALUES, "values"},
    {R_DICT | R_LIST, M_COPY, "copy"},
    {R_LIST | R_TUPLE, M_LCOUNT, "count"},
    {R_LIST | R_TUPLE, M_LINDEX, "index"},
    {R_LOOP, M_CYCLE, "cycle"},
    {R_LOOP, M_CHANGED, "changed"},
    /* mutators: the immutable sandbox blocks them */
    {R_DICT, M_UNSAFE, "pop"},
    {R_DICT, M_UNSAFE, "popitem"},
    {R_DICT, M_UNSAFE, "setdefault"},
    {R_DICT, M_UNSAFE, "update"},
    {R_DICT | R_LIST, M_UNSAFE, "clear"},
    {R_DICT, M_UNSAFE, "fromkeys"},
    {R_LIST, M_UNSAFE, "append"},
    {R_LIST, M_UNSAFE, "extend"},
    {R_LIST, M_UNSAFE, "insert"},
    {R_LIST, M_UNSAFE, "pop"},
    {R_LIST, M_UNSAFE, "remove"},
    {R_LIST, M_UNSAFE, "reverse"},
    {R_LIST, M_UNSAFE, "sort"},
};

/* The receiver class (R_*) of a value, 0 when it has no methods. */
static int recv_class(kn_jv v) {
    switch (v.t) {
        case KN_J_STR: return R_STR;
        case KN_J_DICT: return R_DICT;
        case KN_J_LIST: return R_LIST;
        case KN_J_TUPLE: return R_TUPLE;
        case KN_J_LOOP: return R_LOOP;
        default: return 0;
    }
}

int kn_jmethod_find(kn_jv self, const char *name, size_t n, bool *unsafe) {
    int rc = recv_class(self);
    *unsafe = false;
    if (!rc) return -1;
    for (size_t i = 0; i < KN_ARRAY_LEN(methods); i++) {
        if (!(methods[i].recv & rc) || strlen(methods[i].name) != n || memcmp(methods[i].name, name, n) != 0) continue;
        *unsafe = methods[i].id == M_UNSAFE;
        return (int)i;
    }
    return -1;
}

/* ---- string helpers -------------------------------------------------------------------------- */

static bool take(kn_jbuf *b, bool ok, kn_jv *out) {
    if (!ok) {
        kn_jbuf_free(b);
        return false;
    }
    return kn_jbuf_take(b, false, out);
}

/* Whether code point cp is in the set of characters chars. */
static bool in_chars(const kn_jstr *chars, uint32_t cp, const char *raw, size_t rawlen) {
    for (size_t i = 0; i < chars->len;) {
        size_t adv;
        uint32_t c = kn_ju_cp(chars->s, chars->len, i, &adv);
        if (c == cp && (cp != KN_UTF8_INVALID || (adv == rawlen && memcmp(chars->s + i, raw, adv) == 0))) return true;
        i += adv;
    }
    return false;
}

bool kn_jstrip(kn_jr *r, const kn_jstr *s, const kn_jstr *chars, int which, kn_jv *out) {
    size_t a = 0, b = s->len;
    if (which & 1) {
        while (a < b) {
            size_t adv;
            uint32_t cp = kn_ju_cp(s->s, s->len, a, &adv);
            if (chars ? !in_chars(chars, cp, s->s + a, adv) : !kn_ju_isspace(cp)) break;
            a += adv;
        }
    }
    if (which & 2) {
        size_t keep = a;
        for (size_t i = a; i < b;) {
            size_t adv;
            uint32_t cp = kn_ju_cp(s->s, s->len, i, &adv);
            if (chars ? !in_chars(chars, cp, s->s + i, adv) : !kn_ju_isspace(cp)) keep = i + adv;
            i += adv;
        }
        b = keep;
    }
    return kn_jmk_str(r, s->s + a, b - a, s->safe, out);
}

/* Python's one-to-many case mappings (SpecialCasing) that templates may meet: the UTF-8 text, or
 * NULL when cp maps to one character. */
static const char *special_case(uint32_t cp, bool upper) {
    if (upper) {
        switch (cp) {
            case 0x00DF: return "SS";
            case 0x0149: return "\u02BCN";
            case 0xFB00: return "FF";
            case 0xFB01: return "FI";
            case 0xFB02: return "FL";
            case 0xFB03: return "FFI";
            case 0xFB04: return "FFL";
            case 0xFB05:
            case 0xFB06: return "ST";
            default: return NULL;
        }
    }
    return cp == 0x0130 ? "i\u0307" : NULL;
}

/* Maps every character: 0 lower, 1 upper, 2 swapcase. */
static bool map_case(kn_jr *r, const kn_jstr *s, int mode, kn_jv *out) {
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    kn_jstage st = {.b = &b};
    bool ok = true;
    for (size_t i = 0; ok && i < s->len;) {
        unsigned char c = (unsigned char)s->s[i];
        if (c < 0x80) {
            char d = (char)c;
            if (mode == 0 || (mode == 2 && c >= 'A' && c <= 'Z')) {
                if (c >= 'A' && c <= 'Z') d = (char)(c + 32);
            } else if (c >= 'a' && c <= 'z') d = (char)(c - 32);
            ok = kn_jstage_putc(&st, d);
            i++;
            continue;
        }
        size_t adv;
        uint32_t cp = kn_ju_cp(s->s, s->len, i, &adv);
        const char *special = special_case(cp, mode == 1 || (mode == 2 && kn_ju_lower(cp) == cp));
        if (cp == KN_UTF8_INVALID) ok = kn_jstage_put(&st, s->s + i, adv);
        else if (special) ok = kn_jstage_put(&st, special, strlen(special));
        else {
            uint32_t lo = kn_ju_lower(cp), up = kn_ju_upper(cp);
            uint32_t m = mode == 0 ? lo : mode == 1 ? up : (cp != lo ? lo : up);
            ok = kn_jstage_putcp(&st, m);
        }
        i += adv;
    }
    if (!ok || !kn_jstage_flush(&st)) {
        kn_jbuf_free(&b);
        return false;
    }
    return kn_jbuf_take(&b, s->safe, out);
}

bool kn_jcase(kn_jr *r, const kn_jstr *s, bool upper, kn_jv *out) { return map_case(r, s, upper ? 1 : 0, out); }

bool kn_jreplace(kn_jr *r, const kn_jstr *s, const kn_jstr *old, const kn_jstr *rep, int64_t count, kn_jv *out) {
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    bool ok = true;
    if (old->len == 0) {
        /* insert rep before every character and at the end */
        int64_t done = 0;
        size_t i = 0;
        for (; ok && i <= s->len; done++) {
            if (count >= 0 && done >= count) break;
            ok = kn_jbuf_put(&b, rep->s, rep->len);
            if (i == s->len) {
                i++;
                break;
            }
            size_t j = kn_ju_next(s->s, s->len, i);
            if (ok) ok = kn_jbuf_put(&b, s->s + i, j - i);
            i = j;
        }
        if (ok && i < s->len) ok = kn_jbuf_put(&b, s->s + i, s->len - i);
        return take(&b, ok, out);
    }
    size_t pos = 0;
    int64_t done = 0;
    while (ok && (count < 0 || done < count)) {
        const char *hit = s->len - pos >= old->len ? memmem(s->s + pos, s->len - pos, old->s, old->len) : NULL;
        if (!hit) break;
        size_t at = (size_t)(hit - s->s);
        ok = kn_jbuf_put(&b, s->s + pos, at - pos) && kn_jbuf_put(&b, rep->s, rep->len);
        pos = at + old->len;
        done++;
    }
    if (ok) ok = kn_jbuf_put(&b, s->s + pos, s->len - pos);
    return take(&b, ok, out);
}

/* Byte range of the Python slice s[start:end] given as optional argument values. */
static bool sub_range(kn_jr *r, const kn_jstr *s, const kn_jargs *a, size_t first, size_t *lo, size_t *hi) {
    int64_t n = (int64_t)kn_jstr_cplen(s), v[2] = {0, n};
    for (size_t k = 0; k < 2; k++) {
        if (a->n_pos <= first + k) continue;
        kn_jv x = a->pos[first + k];
        if (x.t == KN_J_NONE) continue;
        if (x.t == KN_J_INT || x.t == KN_J_BOOL) v[k] = x.t == KN_J_INT ? x.u.i : x.u.b;
        else return kn_jfail(r, "slice indices must be integers or None");
        if (v[k] < 0) {
            v[k] += n;
            if (v[k] < 0) v[k] = 0;
        }
        if (v[k] > n) v[k] = n;
    }
    *lo = kn_jstr_cpoff(s, (size_t)v[0]);
    *hi = v[1] < v[0] ? *lo : kn_jstr_cpoff(s, (size_t)v[1]);
    return true;
}

/* The character index of byte offset byte of s. */
static int64_t cp_index(const kn_jstr *s, size_t byte) {
    if (s->ascii) return (int64_t)byte;
    int64_t n = 0;
    for (size_t i = 0; i < byte; i = kn_ju_next(s->s, s->len, i)) n++;
    return n;
}

static bool need_str(kn_jr *r, kn_jv v, const char *what, const kn_jstr **out) {
    *out = NULL;
    if (v.t != KN_J_STR) return kn_jfail(r, "%s must be str, not %s", what, kn_jv_typename(v));
    *out = v.u.s;
    return true;
}

/* Positional-only arity check for a method. */
static bool args_between(kn_jr *r, const char *name, const kn_jargs *a, size_t lo, size_t hi) {
    if (a->n_kw) return kn_jfail(r, "%s() takes no keyword arguments", name);
    if (a->n_pos < lo || a->n_pos > hi) {
        if (lo == hi) return kn_jfail(r, "%s() takes exactly %zu argument(s) (%zu given)", name, lo, a->n_pos);
        return kn_jfail(r, "%s() takes %zu to %zu arguments (%zu given)", name, lo, hi, a->n_pos);
    }
    return true;
}

/* find / rfind: code point index of sub in s[start:end], -1 if absent. */
static bool find_sub(kn_jr *r, const kn_jstr *s, const kn_jargs *a, bool rev, int64_t *res) {
    const kn_jstr *sub;
    size_t lo, hi;
    if (!need_str(r, a->pos[0], "substring", &sub) || !sub_range(r, s, a, 1, &lo, &hi)) return false;
    *res = -1;
    if (hi < lo || hi - lo < sub->len) return true;
    if (!kn_jwork(r, hi - lo)) return false;
    if (!rev) {
        const char *hit = sub->len ? memmem(s->s + lo, hi - lo, sub->s, sub->len) : s->s + lo;
        if (hit) *res = cp_index(s, (size_t)(hit - s->s));
    } else {
        for (size_t i = hi - sub->len + 1; i-- > lo;) {
            if (memcmp(s->s + i, sub->s, sub->len) == 0) {
                *res = cp_index(s, i);
                break;
            }
        }
    }
    return true;
}

/* startswith / endswith with a string or a tuple of strings. */
static bool affix(kn_jr *r, const kn_jstr *s, const kn_jargs *a, bool end, bool *res) {
    size_t lo, hi;
    if (!sub_range(r, s, a, 1, &lo, &hi)) return false;
    kn_jv p = a->pos[0];
    size_t n = p.t == KN_J_TUPLE ? p.u.l->n : 1;
    *res = false;
    for (size_t i = 0; i < n; i++) {
        kn_jv x = p.t == KN_J_TUPLE ? p.u.l->v[i] : p;
        if (x.t != KN_J_STR)
            return kn_jfail(r, "%s first arg must be str or a tuple of str, not %s", end ? "endswith" : "startswith",
                            kn_jv_typename(x));
        const kn_jstr *f = x.u.s;
        if (hi < lo || hi - lo < f->len) continue;
        if (memcmp(s->s + (end ? hi - f->len : lo), f->s, f->len) == 0) {
            *res = true;
            break;
        }
    }
    return true;
}

/* Python str.split / rsplit. */
static bool split(kn_jr *r, const kn_jstr *s, const kn_jargs *a, bool rev, kn_jv *out) {
    static const char *const params[] = {"sep", "maxsplit"};
    kn_jv arg[2];
    bool given[2];
    if (!kn_jbind(r, rev ? "rsplit" : "split", a, params, 2, 0, arg, given)) return false;
    const kn_jstr *sep = NULL;
    int64_t maxsplit = -1;
    if (given[0] && arg[0].t != KN_J_NONE && !need_str(r, arg[0], "separator", &sep)) return false;
    if (given[1]) {
        if (arg[1].t == KN_J_INT) maxsplit = arg[1].u.i;
        else if (arg[1].t == KN_J_BOOL) maxsplit = arg[1].u.b;
        else return kn_jfail(r, "maxsplit must be an integer");
    }
    if (sep && sep->len == 0) return kn_jfail(r, "empty separator");
    kn_jlist *l = kn_jlist_new(r, 0);
    if (!l) return false;
    bool ok = true;
    /* pieces as byte ranges, collected in order (reversed for rsplit, then flipped) */
    if (sep) {
        if (!rev) {
            size_t pos = 0;
            int64_t done = 0;
            while (ok && (maxsplit < 0 || done < maxsplit)) {
                const char *hit = s->len - pos >= sep->len ? memmem(s->s + pos, s->len - pos, sep->s, sep->len) : NULL;
                if (!hit) break;
                size_t at = (size_t)(hit - s->s);
                kn_jv piece;
                ok = kn_jmk_str(r, s->s + pos, at - pos, false, &piece) && kn_jlist_push(r, l, piece);
                pos = at + sep->len;
                done++;
            }
            kn_jv piece;
            if (ok) ok = kn_jmk_str(r, s->s + pos, s->len - pos, false, &piece) && kn_jlist_push(r, l, piece);
        } else {
            size_t end = s->len;
            int64_t done = 0;
            while (ok && (maxsplit < 0 || done < maxsplit) && end >= sep->len) {
                size_t at = SIZE_MAX;
                for (size_t i = end - sep->len + 1; i-- > 0;)
                    if (memcmp(s->s + i, sep->s, sep->len) == 0) {
                        at = i;
                        break;
                    }
                if (at == SIZE_MAX) break;
                kn_jv piece;
                ok = kn_jmk_str(r, s->s + at + sep->len, end - at - sep->len, false, &piece) &&
                     kn_jlist_push(r, l, piece);
                end = at;
                done++;
                if (!kn_jwork(r, s->len)) ok = false;
            }
            kn_jv piece;
            if (ok) ok = kn_jmk_str(r, s->s, end, false, &piece) && kn_jlist_push(r, l, piece);
        }
    } else if (!rev) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            while (i < s->len) {
                size_t adv;
                if (!kn_ju_isspace(kn_ju_cp(s->s, s->len, i, &adv))) break;
                i += adv;
            }
            if (i >= s->len || !ok) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                kn_jv piece;
                ok = kn_jmk_str(r, s->s + i, s->len - i, false, &piece) && kn_jlist_push(r, l, piece);
                break;
            }
            size_t j = i;
            while (j < s->len) {
                size_t adv;
                if (kn_ju_isspace(kn_ju_cp(s->s, s->len, j, &adv))) break;
                j += adv;
            }
            kn_jv piece;
            ok = kn_jmk_str(r, s->s + i, j - i, false, &piece) && kn_jlist_push(r, l, piece);
            done++;
            i = j;
        }
    } else {
        /* rsplit on whitespace: scan from the end by characters */
        size_t n = kn_jstr_cplen(s);
        size_t *offs = malloc((n + 1) * sizeof *offs);
        if (!offs) {
            kn_jv_drop(kn_jv_list(l, false));
            return kn_jnomem(r);
        }
        size_t k = 0;
        for (size_t i = 0; i < s->len; i = kn_ju_next(s->s, s->len, i)) offs[k++] = i;
        offs[k] = s->len;
        size_t e = n; /* characters [0, e) remain */
        int64_t done = 0;
        for (;;) {
            while (e > 0) {
                size_t adv;
                if (!kn_ju_isspace(kn_ju_cp(s->s, s->len, offs[e - 1], &adv))) break;
                e--;
            }
            if (e == 0 || !ok) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                kn_jv piece;
                ok = kn_jmk_str(r, s->s, offs[e], false, &piece) && kn_jlist_push(r, l, piece);
                break;
            }
            size_t b = e;
            while (b > 0) {
                size_t adv;
                if (kn_ju_isspace(kn_ju_cp(s->s, s->len, offs[b - 1], &adv))) break;
                b--;
            }
            kn_jv piece;
            ok = kn_jmk_str(r, s->s + offs[b], offs[e] - offs[b], false, &piece) && kn_jlist_push(r, l, piece);
            done++;
            e = b;
        }
        free(offs);
    }
    if (!ok) {
        kn_jv_drop(kn_jv_list(l, false));
        return false;
    }
    if (rev)
        for (size_t i = 0; i < l->n / 2; i++) {
            kn_jv t = l->v[i];
            l->v[i] = l->v[l->n - 1 - i];
            l->v[l->n - 1 - i] = t;
        }
    *out = kn_jv_list(l, false);
    return true;
}

/* Python str.splitlines(keepends) with all of Python's line boundaries. */
static bool splitlines(kn_jr *r, const kn_jstr *s, bool keepends, kn_jv *out) {
    kn_jlist *l = kn_jlist_new(r, 0);
    if (!l) return false;
    bool ok = true;
    size_t start = 0, i = 0;
    while (ok && i < s->len) {
        size_t adv;
        uint32_t cp = kn_ju_cp(s->s, s->len, i, &adv);
        bool brk = cp == '\n' || cp == '\r' || cp == '\v' || cp == '\f' || (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 ||
                   cp == 0x2028 || cp == 0x2029;
        if (!brk) {
            i += adv;
            continue;
        }
        size_t end = i + adv;
        if (cp == '\r' && end < s->len && s->s[end] == '\n') end++;
        kn_jv piece;
        ok = kn_jmk_str(r, s->s + start, (keepends ? end : i) - start, false, &piece) && kn_jlist_push(r, l, piece);
        start = i = end;
    }
    if (ok && start < s->len) {
        kn_jv piece;
        ok = kn_jmk_str(r, s->s + start, s->len - start, false, &piece) && kn_jlist_push(r, l, piece);
    }
    if (!ok) {
        kn_jv_drop(kn_jv_list(l, false));
        return false;
    }
    *out = kn_jv_list(l, false);
    return true;
}

/* ljust / rjust / center / zfill. */
static bool pad(kn_jr *r, const kn_jstr *s, const kn_jargs *a, int mode, kn_jv *out) {
    int64_t width;
    kn_jv w = a->pos[0];
    if (w.t == KN_J_INT) width = w.u.i;
    else if (w.t == KN_J_BOOL) width = w.u.b;
    else return kn_jfail(r, "width must be an integer");
    const char *fill = " ";
    size_t fl = 1;
    if (a->n_pos > 1) {
        const kn_jstr *f;
        if (!need_str(r, a->pos[1], "fill character", &f)) return false;
        if (kn_jstr_cplen(f) != 1) return kn_jfail(r, "The fill character must be exactly one character long");
        fill = f->s;
        fl = f->len;
    }
    int64_t len = (int64_t)kn_jstr_cplen(s);
    if (width <= len) return kn_jmk_str(r, s->s, s->len, s->safe, out);
    if (width > (int64_t)KN_JINJA_MAX_OUTPUT) return kn_jfail(r, "width too large");
    int64_t marg = width - len, left;
    if (mode == 0) left = 0;                   /* ljust */
    else if (mode == 1) left = marg;           /* rjust, zfill */
    else left = marg / 2 + (marg & width & 1); /* center */
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    bool ok = true;
    size_t body = 0;
    if (mode == 3) { /* zfill: zeros after a sign */
        fill = "0";
        if (s->len && (s->s[0] == '+' || s->s[0] == '-')) {
            ok = kn_jbuf_putc(&b, s->s[0]);
            body = 1;
        }
        left = marg;
    }
    for (int64_t i = 0; ok && i < left; i++) ok = kn_jbuf_put(&b, fill, fl);
    if (ok) ok = kn_jbuf_put(&b, s->s + body, s->len - body);
    for (int64_t i = 0; ok && i < marg - left; i++) ok = kn_jbuf_put(&b, fill, fl);
    return take(&b, ok, out);
}

/* Python str.partition / rpartition: a 3-tuple. */
static bool partition(kn_jr *r, const kn_jstr *s, kn_jv sepv, bool rev, kn_jv *out) {
    const kn_jstr *sep;
    if (!need_str(r, sepv, "separator", &sep)) return false;
    if (!sep->len) return kn_jfail(r, "empty separator");
    size_t at = SIZE_MAX;
    if (!rev) {
        const char *hit = memmem(s->s, s->len, sep->s, sep->len);
        if (hit) at = (size_t)(hit - s->s);
    } else if (s->len >= sep->len) {
        for (size_t i = s->len - sep->len + 1; i-- > 0;)
            if (memcmp(s->s + i, sep->s, sep->len) == 0) {
                at = i;
                break;
            }
    }
    const char *part[3] = {s->s, sep->s, s->s}; /* no separator: the whole string first (last reversed) */
    size_t len[3] = {rev ? 0 : s->len, 0, rev ? s->len : 0};
    if (at != SIZE_MAX) {
        part[2] = s->s + at + sep->len;
        len[0] = at;
        len[1] = sep->len;
        len[2] = s->len - at - sep->len;
    }
    kn_jlist *l = kn_jlist_new(r, 3);
    if (!l) return false;
    /* each piece into the list as it is made: a failure (the work budget) drops what was made */
    for (int i = 0; i < 3; i++) {
        kn_jv piece;
        if (!kn_jmk_str(r, part[i], len[i], false, &piece) || !kn_jlist_push(r, l, piece)) {
            kn_jv_drop(kn_jv_list(l, true));
            return false;
        }
    }
    *out = kn_jv_list(l, true);
    return true;
}

/* Python str.title(): a letter after a cased character is lowered, any other is raised. */
static bool py_title(kn_jr *r, const kn_jstr *s, bool capitalize_only, kn_jv *out) {
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    kn_jstage st = {.b = &b};
    bool ok = true, prev_cased = false, first = true;
    for (size_t i = 0; ok && i < s->len;) {
        size_t adv;
        uint32_t cp = kn_ju_cp(s->s, s->len, i, &adv);
        if (cp == KN_UTF8_INVALID) {
            ok = kn_jstage_put(&st, s->s + i, adv);
            i += adv;
            prev_cased = false;
            first = false;
            continue;
        }
        uint32_t m;
        if (capitalize_only) m = first ? kn_ju_upper(cp) : kn_ju_lower(cp);
        else m = prev_cased ? kn_ju_lower(cp) : kn_ju_upper(cp);
        prev_cased = kn_ju_lower(cp) != cp || kn_ju_upper(cp) != cp;
        ok = kn_jstage_putcp(&st, m);
        first = false;
        i += adv;
    }
    return take(&b, ok && kn_jstage_flush(&st), out);
}

/* ---- str.format ------------------------------------------------------------------------------ */

/* Applies a format spec [[fill]align][sign][#][0][width][,][.precision][type] to v. */
static bool format_spec(kn_jr *r, kn_jv v, const char *spec, size_t n, kn_jbuf *b) {
    size_t i = 0;
    char fill[5] = " ";
    size_t fill_len = 1;
    char align = 0, sign = 0, type = 0;
    bool alt = false, zero = false;
    char group = 0;
    int64_t width = -1, prec = -1;
    if (n >= 2) {
        size_t adv = kn_ju_next(spec, n, 0);
        if (adv < n && strchr("<>=^", spec[adv])) {
            memcpy(fill, spec, adv);
            fill_len = adv;
            align = spec[adv];
            i = adv + 1;
        }
    }
    if (!align && i < n && strchr("<>=^", spec[i])) align = spec[i++];
    if (i < n && strchr("+- ", spec[i])) sign = spec[i++];
    if (i < n && spec[i] == '#') {
        alt = true;
        i++;
    }
    if (i < n && spec[i] == '0') {
        zero = true;
        i++;
    }
    while (i < n && spec[i] >= '0' && spec[i] <= '9') {
        width = (width < 0 ? 0 : width) * 10 + (spec[i++] - '0');
        if (width > 1 << 20) return kn_jfail(r, "format width too large");
    }
    if (i < n && (spec[i] == ',' || spec[i] == '_')) group = spec[i++];
    if (i < n && spec[i] == '.') {
        i++;
        prec = 0;
        while (i < n && spec[i] >= '0' && spec[i] <= '9') {
            prec = prec * 10 + (spec[i++] - '0');
            if (prec > 1000) return kn_jfail(r, "format precision too large");
        }
    }
    if (i < n) type = spec[i++];
    if (i != n) return kn_jfail(r, "Invalid format specifier");
    (void)alt;
    kn_jbuf body;
    kn_jbuf_init(&body, r);
    bool ok = true, numeric = false;
    char tmp[512];
    if (v.t == KN_J_STR && (!type || type == 's')) {
        size_t len = v.u.s->len;
        if (prec >= 0) len = kn_jstr_cpoff(v.u.s, (size_t)prec);
        ok = kn_jbuf_put(&body, v.u.s->s, len);
    } else if (kn_jv_is_num(v) && type != 's') {
        numeric = true;
        double f = v.t == KN_J_FLOAT ? v.u.f : v.t == KN_J_INT ? (double)v.u.i : v.u.b;
        int64_t iv = v.t == KN_J_INT ? v.u.i : v.t == KN_J_BOOL ? v.u.b : (int64_t)f;
        int len;
        if (!type && v.t != KN_J_FLOAT && prec < 0) len = snprintf(tmp, sizeof tmp, "%lld", (long long)iv);
        else if (type == 'd') {
            if (v.t == KN_J_FLOAT) {
                kn_jbuf_free(&body);
                return kn_jfail(r, "Unknown format code 'd' for object of type 'float'");
            }
            len = snprintf(tmp, sizeof tmp, "%lld", (long long)iv);
        } else if (type == 'x' || type == 'X' || type == 'o' || type == 'b') {
            if (v.t == KN_J_FLOAT) {
                kn_jbuf_free(&body);
                return kn_jfail(r, "Unknown format code '%c' for object of type 'float'", type);
            }
            uint64_t u = iv < 0 ? (uint64_t)0 - (uint64_t)iv : (uint64_t)iv;
            if (type == 'b') {
                char bits[70];
                int k = 0;
                do {
                    bits[k++] = (char)('0' + (u & 1));
                    u >>= 1;
                } while (u);
                len = 0;
                if (iv < 0) tmp[len++] = '-';
                while (k) tmp[len++] = bits[--k];
                tmp[len] = 0;
            } else {
                len = snprintf(tmp, sizeof tmp,
                               iv < 0 ? (type == 'x'   ? "-%llx"
                                         : type == 'X' ? "-%llX"
                                                       : "-%llo")
                                      : (type == 'x'   ? "%llx"
                                         : type == 'X' ? "%llX"
                                                       : "%llo"),
                               (unsigned long long)u);
            }
        } else if (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == 'g' || type == 'G' ||
                   type == '%') {
            double x = type == '%' ? f * 100 : f;
            char c = type == '%' ? 'f' : type;
            char fmt[8] = {'%', '.', '*', c, 0};
            len = snprintf(tmp, sizeof tmp, fmt, (int)(prec < 0 ? 6 : prec), x);
            if (type == '%' && len > 0 && len + 1 < (int)sizeof tmp) {
                tmp[len++] = '%';
                tmp[len] = 0;
            }
        } else if (!type) {
            if (prec >= 0) len = snprintf(tmp, sizeof tmp, "%.*g", (int)prec, f);
            else len = (int)kn_jfloat_repr(f, tmp);
        } else {
            kn_jbuf_free(&body);
            return kn_jfail(r, "Unknown format code '%c' for object of type '%s'", type, kn_jv_typename(v));
        }
        if (len < 0 || len >= (int)sizeof tmp) len = 0;
        if (group && type != 'x' && type != 'X' && type != 'o' && type != 'b') {
            /* thousands separators in the integer digits */
            size_t ds = tmp[0] == '-' ? 1 : 0, de = ds;
            while (de < (size_t)len && tmp[de] >= '0' && tmp[de] <= '9') de++;
            size_t nd = de - ds, seps = nd ? (nd - 1) / 3 : 0;
            if (seps && (size_t)len + seps < sizeof tmp) {
                memmove(tmp + de + seps, tmp + de, (size_t)len - de + 1);
                size_t w = de + seps;
                for (size_t k = 0; k < nd; k++) {
                    if (k && k % 3 == 0) tmp[--w] = group;
                    tmp[--w] = tmp[de - 1 - k];
                }
                len += (int)seps;
            }
        }
        if (sign == '+' && tmp[0] != '-') ok = kn_jbuf_putc(&body, '+');
        else if (sign == ' ' && tmp[0] != '-') ok = kn_jbuf_putc(&body, ' ');
        if (ok) ok = kn_jbuf_put(&body, tmp, (size_t)len);
    } else if (!type) {
        ok = kn_jv_str_to(r, v, &body);
    } else {
        kn_jbuf_free(&body);
        return kn_jfail(r, "Unknown format code '%c' for object of type '%s'", type, kn_jv_typename(v));
    }
    if (!ok) {
        kn_jbuf_free(&body);
        return false;
    }
    if (!align) align = numeric ? '>' : '<';
    if (zero && !align) align = '=';
    if (zero && numeric && fill_len == 1 && fill[0] == ' ') {
        fill[0] = '0';
        align = '=';
    }
    int64_t len = 0;
    for (size_t k = 0; k < body.n; k = kn_ju_next(body.p, body.n, k)) len++;
    int64_t marg = width > len ? width - len : 0, left = 0;
    if (align == '>') left = marg;
    else if (align == '^') left = marg / 2;
    size_t skip = 0;
    if (align == '=') {
        if (body.n && (body.p[0] == '-' || body.p[0] == '+' || body.p[0] == ' ')) {
            ok = kn_jbuf_putc(b, body.p[0]);
            skip = 1;
        }
        left = marg;
    }
    for (int64_t k = 0; ok && k < left; k++) ok = kn_jbuf_put(b, fill, fill_len);
    if (ok) ok = kn_jbuf_put(b, body.p ? body.p + skip : "", body.n - skip);
    for (int64_t k = 0; ok && k < marg - left; k++) ok = kn_jbuf_put(b, fill, fill_len);
    kn_jbuf_free(&body);
    return ok;
}

/* Python str.format: {} / {0} / {name} fields with .attr and [key] parts, !r / !s conversions and
 * format specs. */
static bool str_format(kn_jr *r, const kn_jstr *s, const kn_jargs *a, kn_jv *out) {
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    size_t auto_idx = 0;
    bool ok = true;
    for (size_t i = 0; ok && i < s->len;) {
        char c = s->s[i];
        if (c == '}') {
            if (i + 1 < s->len && s->s[i + 1] == '}') {
                ok = kn_jbuf_putc(&b, '}');
                i += 2;
                continue;
            }
            kn_jbuf_free(&b);
            return kn_jfail(r, "Single '}' encountered in format string");
        }
        if (c != '{') {
            ok = kn_jbuf_putc(&b, c);
            i++;
            continue;
        }
        if (i + 1 < s->len && s->s[i + 1] == '{') {
            ok = kn_jbuf_putc(&b, '{');
            i += 2;
            continue;
        }
        size_t e = i + 1;
        int depth = 1;
        while (e < s->len && depth) {
            if (s->s[e] == '{') depth++;
            else if (s->s[e] == '}') depth--;
            if (depth) e++;
        }
        if (e >= s->len) {
            kn_jbuf_free(&b);
            return kn_jfail(r, "Single '{' encountered in format string");
        }
        const char *f = s->s + i + 1;
        size_t fl = e - i - 1;
        size_t colon = fl, bang = fl;
        for (size_t k = 0; k < fl; k++) {
            if (f[k] == '!' && bang == fl && colon == fl) bang = k;
            if (f[k] == ':') {
                colon = k;
                break;
            }
        }
        size_t name_end = KN_MIN(bang, colon);
        /* field name: index or keyword, then .attr / [key] parts */
        size_t k = 0;
        while (k < name_end && f[k] != '.' && f[k] != '[') k++;
        kn_jv v;
        if (k == 0) {
            if (auto_idx >= a->n_pos) {
                kn_jbuf_free(&b);
                return kn_jfail(r, "Replacement index %zu out of range for positional args tuple", auto_idx);
            }
            v = kn_jv_ref(a->pos[auto_idx++]);
        } else if (f[0] >= '0' && f[0] <= '9') {
            size_t idx = (size_t)strtoul(f, NULL, 10);
            if (idx >= a->n_pos) {
                kn_jbuf_free(&b);
                return kn_jfail(r, "Replacement index %zu out of range for positional args tuple", idx);
            }
            v = kn_jv_ref(a->pos[idx]);
        } else {
            size_t j;
            for (j = 0; j < a->n_kw; j++)
                if (a->kw_names[j]->len == k && memcmp(a->kw_names[j]->s, f, k) == 0) break;
            if (j == a->n_kw) {
                kn_jbuf_free(&b);
                return kn_jfail(r, "KeyError: '%.*s'", (int)KN_MIN(k, 64u), f);
            }
            v = kn_jv_ref(a->kw[j]);
        }
        while (ok && k < name_end) {
            size_t p = k + 1, q = p;
            kn_jv key, next;
            if (f[k] == '.') {
                while (q < name_end && f[q] != '.' && f[q] != '[') q++;
                ok = kn_jmk_str(r, f + p, q - p, false, &key);
                if (ok) {
                    ok = kn_jgetattr(r, v, key.u.s, &next);
                    kn_jv_drop(key);
                }
                k = q;
            } else {
                while (q < name_end && f[q] != ']') q++;
                bool digits = q > p;
                for (size_t t = p; t < q; t++)
                    if (f[t] < '0' || f[t] > '9') digits = false;
                if (digits) {
                    key = kn_jv_int(strtoll(f + p, NULL, 10));
                    ok = true;
                } else ok = kn_jmk_str(r, f + p, q - p, false, &key);
                if (ok) {
                    ok = kn_jgetitem(r, v, key, &next);
                    kn_jv_drop(key);
                }
                k = q + 1;
            }
            kn_jv_drop(v);
            v = ok ? next : kn_jv_undef();
        }
        if (ok && bang < colon) {
            char conv = bang + 1 < fl ? f[bang + 1] : 0;
            kn_jbuf cb;
            kn_jbuf_init(&cb, r);
            if (conv == 'r' || conv == 'a') ok = kn_jv_repr_to(r, v, &cb, 0);
            else if (conv == 's') ok = kn_jv_str_to(r, v, &cb);
            else ok = kn_jfail(r, "Unknown conversion specifier %c", conv ? conv : '?');
            kn_jv_drop(v);
            v = kn_jv_undef();
            if (ok) ok = kn_jbuf_take(&cb, false, &v);
            else kn_jbuf_free(&cb);
        }
        if (ok) {
            if (colon < fl) ok = format_spec(r, v, f + colon + 1, fl - colon - 1, &b);
            else ok = kn_jv_str_to(r, v, &b);
        }
        kn_jv_drop(v);
        i = e + 1;
    }
    return take(&b, ok, out);
}

/* ---- printf-style formatting ----------------------------------------------------------------- */

bool kn_jformat_percent(kn_jr *r, const kn_jstr *fmt, kn_jv args, kn_jv *out) {
    const kn_jv *items = &args;
    size_t n_items = 1, next = 0;
    bool mapping = args.t == KN_J_DICT;
    if (args.t == KN_J_TUPLE) {
        items = args.u.l->v;
        n_items = args.u.l->n;
    }
    kn_jbuf b;
    kn_jbuf_init(&b, r);
    bool ok = true, used_map = false;
    for (size_t i = 0; ok && i < fmt->len;) {
        char c = fmt->s[i];
        if (c != '%') {
            ok = kn_jbuf_putc(&b, c);
            i++;
            continue;
        }
        i++;
        if (i >= fmt->len) {
            ok = kn_jfail(r, "incomplete format");
            break;
        }
        kn_jv v = kn_jv_undef();
        bool have = false;
        if (fmt->s[i] == '(') {
            size_t e = i + 1;
            while (e < fmt->len && fmt->s[e] != ')') e++;
            if (e >= fmt->len || !mapping) {
                ok = kn_jfail(r, e >= fmt->len ? "incomplete format key" : "format requires a mapping");
                break;
            }
            kn_jv *p = kn_jdict_get_str(args.u.d, fmt->s + i + 1, e - i - 1);
            if (!p) {
                ok = kn_jfail(r, "KeyError: '%.*s'", (int)KN_MIN(e - i - 1, 64u), fmt->s + i + 1);
                break;
            }
            v = *p;
            have = true;
            used_map = true;
            i = e + 1;
        }
        char spec[64] = "";
        size_t sl = 0;
        while (i < fmt->len && strchr("-+ #0123456789.*", fmt->s[i]) && sl + 1 < sizeof spec) {
            if (fmt->s[i] == '*') {
                ok = kn_jfail(r, "* in format is not supported");
                break;
            }
            spec[sl++] = fmt->s[i++];
        }
        spec[sl] = 0;
        while (i < fmt->len && strchr("hlL", fmt->s[i])) i++;
        if (!ok) break;
        if (i >= fmt->len) {
            ok = kn_jfail(r, "incomplete format");
            break;
        }
        char conv = fmt->s[i++];
        if (conv == '%') {
            ok = kn_jbuf_putc(&b, '%');
            continue;
        }
        if (!have) {
            if (mapping) v = args;
            else if (next >= n_items) {
                ok = kn_jfail(r, "not enough arguments for format string");
                break;
            } else v = items[next++];
        }
        char tmp[512], f[80];
        int len = -1;
        switch (conv) {
            case 's':
            case 'r':
            case 'a': {
                kn_jbuf sb;
                kn_jbuf_init(&sb, r);
                ok = conv == 's' ? kn_jv_str_to(r, v, &sb) : kn_jv_repr_to(r, v, &sb, 0);
                if (ok) {
                    /* width / precision by characters */
                    const char *p = spec;
                    bool left = strchr(spec, '-') != NULL;
                    while (*p && strchr("-+ #0", *p)) p++;
                    long width = strtol(p, (char **)&p, 10);
                    long prec = -1;
                    if (*p == '.') prec = strtol(p + 1, NULL, 10);
                    size_t bytes = sb.n;
                    if (prec >= 0) {
                        size_t k = 0;
                        long cnt = 0;
                        while (k < sb.n && cnt < prec) {
                            k = kn_ju_next(sb.p, sb.n, k);
                            cnt++;
                        }
                        bytes = k;
                    }
                    long chars = 0;
                    for (size_t k = 0; k < bytes; k = kn_ju_next(sb.p, bytes, k)) chars++;
                    long padn = width > chars ? width - chars : 0;
                    if (padn > (long)KN_JINJA_MAX_OUTPUT) ok = kn_jfail(r, "format width too large");
                    for (long k = 0; ok && !left && k < padn; k++) ok = kn_jbuf_putc(&b, ' ');
                    if (ok) ok = kn_jbuf_put(&b, sb.p ? sb.p : "", bytes);
                    for (long k = 0; ok && left && k < padn; k++) ok = kn_jbuf_putc(&b, ' ');
                }
                kn_jbuf_free(&sb);
                continue;
            }
            case 'd':
            case 'i':
            case 'u':
            case 'x':
            case 'X':
            case 'o':
            case 'c': {
                int64_t iv;
                if (v.t == KN_J_INT) iv = v.u.i;
                else if (v.t == KN_J_BOOL) iv = v.u.b;
                else if (v.t == KN_J_FLOAT && conv != 'c' && conv != 'x' && conv != 'X' && conv != 'o') {
                    if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) {
                        ok = kn_jfail(r, "cannot convert float to integer");
                        break;
                    }
                    iv = (int64_t)v.u.f;
                } else if (conv == 'c' && v.t == KN_J_STR) {
                    if (kn_jstr_cplen(v.u.s) != 1) {
                        ok = kn_jfail(r, "%%c requires int or char");
                        break;
                    }
                    ok = kn_jbuf_put(&b, v.u.s->s, v.u.s->len);
                    continue;
                } else {
                    ok = kn_jfail(r, "%%%c format: a real number is required, not %s", conv, kn_jv_typename(v));
                    break;
                }
                if (conv == 'c') {
                    if (iv < 0 || iv > 0x10FFFF) {
                        ok = kn_jfail(r, "%%c arg not in range(0x110000)");
                        break;
                    }
                    ok = kn_jbuf_putcp(&b, (uint32_t)iv);
                    continue;
                }
                char lc = conv == 'i' || conv == 'u' ? 'd' : conv;
                snprintf(f, sizeof f, "%%%sll%c", spec, lc);
                if (lc == 'd') len = snprintf(tmp, sizeof tmp, f, (long long)iv);
                else if (iv < 0) {
                    char f2[80];
                    snprintf(f2, sizeof f2, "-%%%sll%c", spec, lc);
                    len = snprintf(tmp, sizeof tmp, f2, (unsigned long long)(0 - (uint64_t)iv));
                } else len = snprintf(tmp, sizeof tmp, f, (unsigned long long)iv);
                break;
            }
            case 'e':
            case 'E':
            case 'f':
            case 'F':
            case 'g':
            case 'G': {
                if (!kn_jv_is_num(v)) {
                    ok = kn_jfail(r, "must be real number, not %s", kn_jv_typename(v));
                    break;
                }
                double d = v.t == KN_J_FLOAT ? v.u.f : v.t == KN_J_INT ? (double)v.u.i : v.u.b;
                snprintf(f, sizeof f, "%%%s%c", spec, conv);
                len = snprintf(tmp, sizeof tmp, f, d);
                break;
            }
            default: ok = kn_jfail(r, "unsupported format character '%c'", conv); break;
        }
        if (!ok) break;
        if (len < 0 || len >= (int)sizeof tmp) {
            ok = kn_jfail(r, "formatted value too long");
            break;
        }
        ok = kn_jbuf_put(&b, tmp, (size_t)len);
    }
    if (ok && !mapping && !used_map && args.t != KN_J_LIST && next < n_items)
        ok = kn_jfail(r, "not all arguments converted during string formatting");
    return take(&b, ok, out);
}

/* ---- dispatch -------------------------------------------------------------------------------- */

static bool str_method(kn_jr *r, int id, const kn_jstr *s, const kn_jargs *a, kn_jv *out) {
    int64_t idx;
    bool res;
    const kn_jstr *t;
    switch (id) {
        case M_CAPITALIZE: return args_between(r, "capitalize", a, 0, 0) && py_title(r, s, true, out);
        case M_TITLE: return args_between(r, "title", a, 0, 0) && py_title(r, s, false, out);
        case M_CASEFOLD:
        case M_LOWER: return args_between(r, "lower", a, 0, 0) && map_case(r, s, 0, out);
        case M_UPPER: return args_between(r, "upper", a, 0, 0) && map_case(r, s, 1, out);
        case M_SWAPCASE: return args_between(r, "swapcase", a, 0, 0) && map_case(r, s, 2, out);
        case M_CENTER: return args_between(r, "center", a, 1, 2) && pad(r, s, a, 2, out);
        case M_LJUST: return args_between(r, "ljust", a, 1, 2) && pad(r, s, a, 0, out);
        case M_RJUST: return args_between(r, "rjust", a, 1, 2) && pad(r, s, a, 1, out);
        case M_ZFILL: return args_between(r, "zfill", a, 1, 1) && pad(r, s, a, 3, out);
        case M_COUNT: {
            size_t lo, hi;
            if (!args_between(r, "count", a, 1, 3) || !need_str(r, a->pos[0], "substring", &t) ||
                !sub_range(r, s, a, 1, &lo, &hi))
                return false;
            int64_t cnt = 0;
            if (hi >= lo) {
                if (!t->len) cnt = cp_index(s, hi) - cp_index(s, lo) + 1;
                else
                    for (size_t p = lo; p + t->len <= hi;) {
                        const char *hit = memmem(s->s + p, hi - p, t->s, t->len);
                        if (!hit) break;
                        cnt++;
                        p = (size_t)(hit - s->s) + t->len;
                    }
            }
            *out = kn_jv_int(cnt);
            return true;
        }
        case M_ENDSWITH:
        case M_STARTSWITH:
            if (!args_between(r, id == M_ENDSWITH ? "endswith" : "startswith", a, 1, 3) ||
                !affix(r, s, a, id == M_ENDSWITH, &res))
                return false;
            *out = kn_jv_bool(res);
            return true;
        case M_FIND:
        case M_RFIND:
        case M_INDEX:
        case M_RINDEX:
            if (!args_between(r, "find", a, 1, 3) || !find_sub(r, s, a, id == M_RFIND || id == M_RINDEX, &idx))
                return false;
            if (idx < 0 && (id == M_INDEX || id == M_RINDEX)) return kn_jfail(r, "substring not found");
            *out = kn_jv_int(idx);
            return true;
        case M_FORMAT: return str_format(r, s, a, out);
        case M_ISALNUM:
        case M_ISALPHA:
        case M_ISDIGIT:
        case M_ISSPACE:
        case M_ISNUMERIC:
        case M_ISDECIMAL: {
            if (!args_between(r, "is...", a, 0, 0)) return false;
            bool all = s->len > 0;
            for (size_t i = 0; all && i < s->len;) {
                size_t adv;
                uint32_t cp = kn_ju_cp(s->s, s->len, i, &adv);
                i += adv;
                bool ok = cp != KN_UTF8_INVALID && (id == M_ISALPHA   ? kn_ju_isalpha(cp)
                                                    : id == M_ISSPACE ? kn_ju_isspace(cp)
                                                    : id == M_ISALNUM ? (kn_ju_isalpha(cp) || kn_ju_isdigit(cp))
                                                                      : kn_ju_isdigit(cp));
                if (!ok) all = false;
            }
            *out = kn_jv_bool(all);
            return true;
        }
        case M_ISLOWER:
        case M_ISUPPER: {
            if (!args_between(r, "islower", a, 0, 0)) return false;
            bool cased = false, good = true;
            for (size_t i = 0; i < s->len;) {
                size_t adv;
                uint32_t cp = kn_ju_cp(s->s, s->len, i, &adv);
                i += adv;
                uint32_t lo = kn_ju_lower(cp), up = kn_ju_upper(cp);
                if (cp == KN_UTF8_INVALID || lo == up) continue;
                if (id == M_ISUPPER ? cp != up : cp != lo) {
                    good = false;
                    break;
                }
                cased = true;
            }
            *out = kn_jv_bool(good && cased);
            return true;
        }
        case M_JOIN: {
            if (!args_between(r, "join", a, 1, 1)) return false;
            kn_jlist *l;
            if (!kn_jiterate(r, a->pos[0], &l)) return false;
            kn_jbuf b;
            kn_jbuf_init(&b, r);
            bool ok = true;
            for (size_t i = 0; ok && i < l->n; i++) {
                if (l->v[i].t != KN_J_STR) {
                    ok = kn_jfail(r, "sequence item %zu: expected str instance, %s found", i, kn_jv_typename(l->v[i]));
                    break;
                }
                ok = (!i || kn_jbuf_put(&b, s->s, s->len)) && kn_jbuf_put(&b, l->v[i].u.s->s, l->v[i].u.s->len);
            }
            kn_jv_drop(kn_jv_list(l, false));
            return take(&b, ok, out);
        }
        case M_LSTRIP:
        case M_RSTRIP:
        case M_STRIP: {
            const kn_jstr *chars = NULL;
            if (!args_between(r, "strip", a, 0, 1)) return false;
            if (a->n_pos && a->pos[0].t != KN_J_NONE && !need_str(r, a->pos[0], "chars", &chars)) return false;
            return kn_jstrip(r, s, chars, id == M_LSTRIP ? 1 : id == M_RSTRIP ? 2 : 3, out);
        }
        case M_PARTITION:
        case M_RPARTITION:
            return args_between(r, "partition", a, 1, 1) && partition(r, s, a->pos[0], id == M_RPARTITION, out);
        case M_REPLACE: {
            static const char *const params[] = {"old", "new", "count"};
            kn_jv arg[3];
            bool given[3];
            const kn_jstr *o, *nw;
            int64_t count = -1;
            if (!kn_jbind(r, "replace", a, params, 3, 2, arg, given) || !need_str(r, arg[0], "old", &o) ||
                !need_str(r, arg[1], "new", &nw))
                return false;
            if (given[2]) {
                if (arg[2].t == KN_J_INT) count = arg[2].u.i;
                else if (arg[2].t == KN_J_BOOL) count = arg[2].u.b;
                else return kn_jfail(r, "count must be an integer");
            }
            return kn_jreplace(r, s, o, nw, count, out);
        }
        case M_SPLIT: return split(r, s, a, false, out);
        case M_RSPLIT: return split(r, s, a, true, out);
        case M_SPLITLINES: {
            static const char *const params[] = {"keepends"};
            kn_jv arg[1];
            bool given[1];
            if (!kn_jbind(r, "splitlines", a, params, 1, 0, arg, given)) return false;
            return splitlines(r, s, given[0] && kn_jv_truthy(arg[0]), out);
        }
        case M_REMOVEPREFIX:
        case M_REMOVESUFFIX: {
            if (!args_between(r, "removeprefix", a, 1, 1) || !need_str(r, a->pos[0], "affix", &t)) return false;
            bool pre = id == M_REMOVEPREFIX;
            if (t->len <= s->len && memcmp(s->s + (pre ? 0 : s->len - t->len), t->s, t->len) == 0)
                return kn_jmk_str(r, s->s + (pre ? t->len : 0), s->len - t->len, false, out);
            return kn_jmk_str(r, s->s, s->len, false, out);
        }
        default: return kn_jfail(r, "internal error: bad string method");
    }
}

/* dict.keys() (which 0), values() (1) or items() (2) as a list. */
static bool dict_items(kn_jr *r, const kn_jdict *d, int which, kn_jv *out) {
    kn_jlist *l = kn_jlist_new(r, d->n);
    if (!l) return false;
    bool ok = true;
    for (size_t i = 0; ok && i < d->n; i++) {
        if (which == 0) ok = kn_jlist_push(r, l, kn_jv_ref(d->k[i]));
        else if (which == 1) ok = kn_jlist_push(r, l, kn_jv_ref(d->v[i]));
        else {
            kn_jlist *p = kn_jlist_new(r, 2);
            ok = p && kn_jlist_push(r, p, kn_jv_ref(d->k[i])) && kn_jlist_push(r, p, kn_jv_ref(d->v[i]));
            if (ok) ok = kn_jlist_push(r, l, kn_jv_list(p, true));
            else if (p) kn_jv_drop(kn_jv_list(p, true));
        }
    }
    if (!ok) {
        kn_jv_drop(kn_jv_list(l, false));
        return false;
    }
    *out = kn_jv_list(l, false);
    return true;
}

bool kn_jmethod_call(kn_jr *r, const kn_jmethod *m, const kn_jargs *a, kn_jv *out) {
    int id = methods[m->id].id;
    kn_jv self = m->self;
    switch (id) {
        case M_UNSAFE:
            return kn_jfail(r, "access to attribute '%s' of '%s' object is unsafe.", methods[m->id].name,
                            kn_jv_typename(self));
        case M_GET: {
            if (!args_between(r, "get", a, 1, 2)) return false;
            kn_jv *v = kn_jv_hashable(a->pos[0]) ? kn_jdict_get(self.u.d, a->pos[0]) : NULL;
            if (!v && !kn_jv_hashable(a->pos[0]))
                return kn_jfail(r, "unhashable type: '%s'", kn_jv_typename(a->pos[0]));
            *out = v ? kn_jv_ref(*v) : a->n_pos > 1 ? kn_jv_ref(a->pos[1]) : kn_jv_none();
            return true;
        }
        case M_KEYS: return args_between(r, "keys", a, 0, 0) && dict_items(r, self.u.d, 0, out);
        case M_VALUES: return args_between(r, "values", a, 0, 0) && dict_items(r, self.u.d, 1, out);
        case M_ITEMS: return args_between(r, "items", a, 0, 0) && dict_items(r, self.u.d, 2, out);
        case M_COPY:
            if (!args_between(r, "copy", a, 0, 0)) return false;
            if (self.t == KN_J_DICT) {
                kn_jdict *d = kn_jdict_new(r);
                bool ok = d != NULL;
                for (size_t i = 0; ok && i < self.u.d->n; i++)
                    ok = kn_jdict_set(r, d, kn_jv_ref(self.u.d->k[i]), kn_jv_ref(self.u.d->v[i]));
                if (!ok) {
                    if (d) kn_jv_drop(kn_jv_dict(d));
                    return false;
                }
                *out = kn_jv_dict(d);
                return true;
            } else {
                kn_jlist *l;
                if (!kn_jiterate(r, self, &l)) return false;
                *out = kn_jv_list(l, false);
                return true;
            }
        case M_LCOUNT: {
            if (!args_between(r, "count", a, 1, 1)) return false;
            int64_t c = 0;
            for (size_t i = 0; i < self.u.l->n; i++) c += kn_jv_eq(self.u.l->v[i], a->pos[0]);
            *out = kn_jv_int(c);
            return true;
        }
        case M_LINDEX: {
            if (!args_between(r, "index", a, 1, 1)) return false;
            for (size_t i = 0; i < self.u.l->n; i++)
                if (kn_jv_eq(self.u.l->v[i], a->pos[0])) {
                    *out = kn_jv_int((int64_t)i);
                    return true;
                }
            return kn_jfail(r, "value is not in %s", self.t == KN_J_TUPLE ? "tuple" : "list");
        }
        case M_CYCLE: {
            if (a->n_kw) return kn_jfail(r, "cycle() takes no keyword arguments");
            if (!a->n_pos) return kn_jfail(r, "no items for cycling given");
            *out = kn_jv_ref(a->pos[self.u.loop->i % a->n_pos]);
            return true;
        }
        case M_CHANGED: {
            kn_jloop *l = self.u.loop;
            kn_jlist *vals = kn_jlist_new(r, a->n_pos);
            if (!vals) return false;
            for (size_t i = 0; i < a->n_pos; i++) vals->v[vals->n++] = kn_jv_ref(a->pos[i]);
            kn_jv v = kn_jv_list(vals, true);
            bool changed = l->last_changed.t == KN_J_UNDEF || !kn_jv_eq(l->last_changed, v);
            if (changed) {
                kn_jv_drop(l->last_changed);
                l->last_changed = v;
            } else {
                kn_jv_drop(v);
            }
            *out = kn_jv_bool(changed);
            return true;
        }
        default:
            if (self.t != KN_J_STR) return kn_jfail(r, "internal error: bad method receiver");
            return str_method(r, id, self.u.s, a, out);
    }
}

/*
 * json.c - JSON in and out of kiln's Jinja2 interpreter.
 *
 * In: the render context arrives as a jansson value and becomes template values the way Python's
 * json.loads builds objects (objects keep their key order; integers stay integers, numbers with a
 * fraction or exponent are floats; nesting is bounded by KN_JINJA_MAX_VALUE_DEPTH).
 *
 * Out: tojson writes exactly what Python's json.dumps writes for the same value:
 * separators ", " and ": " (or "," and ": " with indent, or the caller's), indent as a number of
 * spaces or a string, sort_keys, ensure_ascii (\uXXXX escapes with surrogate pairs; otherwise
 * UTF-8 is written as is), floats as repr() with NaN / Infinity, tuples as arrays, and a
 * TypeError for anything JSON cannot hold (Undefined, generators, namespaces, macros...).
 * Dict keys that are numbers, booleans or None become strings as json.dumps makes them.
 */
#include "text/jinja/impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool kn_jfrom_json(kn_jr *r, const json_t *j, kn_jv *out, int depth) {
    if (depth >= KN_JINJA_MAX_VALUE_DEPTH)
        return kn_jfail(r, "JSON nested too deeply (more than %d levels)", KN_JINJA_MAX_VALUE_DEPTH);
    switch (json_typeof(j)) {
        case JSON_OBJECT: {
            kn_jdict *d = kn_jdict_new(r);
            if (!d) return false;
            const char *key;
            json_t *val;
            json_object_foreach((json_t *)j, key, val) {
                kn_jv k, v;
                if (!kn_jmk_str(r, key, strlen(key), false, &k)) {
                    kn_jv_drop(kn_jv_dict(d));
                    return false;
                }
                if (!kn_jfrom_json(r, val, &v, depth + 1)) {
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
        case JSON_ARRAY: {
            size_t n = json_array_size(j);
            kn_jlist *l = kn_jlist_new(r, n);
            if (!l) return false;
            for (size_t i = 0; i < n; i++) {
                kn_jv v;
                if (!kn_jfrom_json(r, json_array_get(j, i), &v, depth + 1) || !kn_jlist_push(r, l, v)) {
                    kn_jv_drop(kn_jv_list(l, false));
                    return false;
                }
            }
            *out = kn_jv_list(l, false);
            return true;
        }
        case JSON_STRING: return kn_jmk_str(r, json_string_value(j), json_string_length(j), false, out);
        case JSON_INTEGER: *out = kn_jv_int((int64_t)json_integer_value(j)); return true;
        case JSON_REAL: *out = kn_jv_float(json_real_value(j)); return true;
        case JSON_TRUE: *out = kn_jv_bool(true); return true;
        case JSON_FALSE: *out = kn_jv_bool(false); return true;
        case JSON_NULL:
        default: *out = kn_jv_none(); return true;
    }
}

/* A JSON string literal of s (json.dumps escaping). */
static bool dump_string(kn_jbuf *b, const char *s, size_t n, bool ascii) {
    if (!kn_jbuf_putc(b, '"')) return false;
    size_t start = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        char esc[16];
        size_t adv = 1;
        esc[0] = 0;
        if (c == '"') strcpy(esc, "\\\"");
        else if (c == '\\') strcpy(esc, "\\\\");
        else if (c == '\n') strcpy(esc, "\\n");
        else if (c == '\r') strcpy(esc, "\\r");
        else if (c == '\t') strcpy(esc, "\\t");
        else if (c == '\b') strcpy(esc, "\\b");
        else if (c == '\f') strcpy(esc, "\\f");
        else if (c < 0x20 || (ascii && c == 0x7f)) snprintf(esc, sizeof esc, "\\u%04x", c);
        else if (ascii && c >= 0x80) {
            uint32_t cp = kn_ju_cp(s, n, i, &adv);
            if (cp == KN_UTF8_INVALID) cp = 0xfffd;
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
        }
        if (esc[0]) {
            if (!kn_jbuf_put(b, s + start, i - start) || !kn_jbuf_puts(b, esc)) return false;
            start = i + adv;
        }
        i += adv;
    }
    return kn_jbuf_put(b, s + start, n - start) && kn_jbuf_putc(b, '"');
}

/* A newline and level indentation strings. */
static bool newline_indent(kn_jbuf *b, const kn_jjson_opts *o, int level) {
    if (!kn_jbuf_putc(b, '\n')) return false;
    for (int i = 0; i < level; i++)
        if (!kn_jbuf_put(b, o->indent, o->indent_len)) return false;
    return true;
}

/* The separator between items (with the newline and indentation when indenting). */
static bool item_sep(kn_jbuf *b, const kn_jjson_opts *o, int level) {
    if (o->item_sep) {
        if (!kn_jbuf_put(b, o->item_sep, o->item_sep_len)) return false;
    } else if (!kn_jbuf_puts(b, o->indent ? "," : ", ")) {
        return false;
    }
    return !o->indent || newline_indent(b, o, level);
}

static bool key_sep(kn_jbuf *b, const kn_jjson_opts *o) {
    return o->key_sep ? kn_jbuf_put(b, o->key_sep, o->key_sep_len) : kn_jbuf_puts(b, ": ");
}

/* A bool, int or float as JSON (float as repr(), NaN / Infinity as Python writes them). */
static bool dump_number(kn_jbuf *b, kn_jv v) {
    char buf[48];
    if (v.t == KN_J_BOOL) return kn_jbuf_puts(b, v.u.b ? "true" : "false");
    if (v.t == KN_J_INT) return kn_jbuf_put(b, buf, (size_t)snprintf(buf, sizeof buf, "%lld", (long long)v.u.i));
    if (isnan(v.u.f)) return kn_jbuf_puts(b, "NaN");
    if (isinf(v.u.f)) return kn_jbuf_puts(b, v.u.f > 0 ? "Infinity" : "-Infinity");
    return kn_jbuf_put(b, buf, kn_jfloat_repr(v.u.f, buf));
}

/* A dict key as json.dumps writes it (a string), or an error for other types. */
static bool dump_key(kn_jr *r, kn_jbuf *b, kn_jv k, const kn_jjson_opts *o) {
    if (k.t == KN_J_STR) return dump_string(b, k.u.s->s, k.u.s->len, o->ensure_ascii);
    if (k.t == KN_J_NONE) return kn_jbuf_puts(b, "\"null\"");
    if (kn_jv_is_num(k)) {
        kn_jbuf tmp;
        kn_jbuf_init(&tmp, r);
        bool ok = dump_number(&tmp, k) && kn_jbuf_putc(b, '"') && kn_jbuf_put(b, tmp.p, tmp.n) && kn_jbuf_putc(b, '"');
        kn_jbuf_free(&tmp);
        return ok;
    }
    return kn_jfail(r, "keys must be str, int, float, bool or None, not %s", kn_jv_typename(k));
}

/* json.dumps of v at nesting level (indentation) level. */
static bool dump(kn_jr *r, kn_jv v, const kn_jjson_opts *o, kn_jbuf *b, int level) {
    if (level > KN_JINJA_MAX_VALUE_DEPTH) return kn_jfail(r, "value nested too deeply for tojson");
    switch (v.t) {
        case KN_J_NONE: return kn_jbuf_puts(b, "null");
        case KN_J_BOOL:
        case KN_J_INT:
        case KN_J_FLOAT: return dump_number(b, v);
        case KN_J_STR: return dump_string(b, v.u.s->s, v.u.s->len, o->ensure_ascii);
        case KN_J_LIST:
        case KN_J_TUPLE: {
            const kn_jlist *l = v.u.l;
            if (v.range) return kn_jfail(r, "Object of type range is not JSON serializable");
            if (!l->n) return kn_jbuf_puts(b, "[]");
            if (!kn_jbuf_putc(b, '[') || (o->indent && !newline_indent(b, o, level + 1))) return false;
            for (size_t i = 0; i < l->n; i++) {
                if (i && !item_sep(b, o, level + 1)) return false;
                if (!dump(r, l->v[i], o, b, level + 1)) return false;
            }
            if (o->indent && !newline_indent(b, o, level)) return false;
            return kn_jbuf_putc(b, ']');
        }
        case KN_J_DICT: {
            const kn_jdict *d = v.u.d;
            if (!d->n) return kn_jbuf_puts(b, "{}");
            size_t *order = malloc(d->n * sizeof *order);
            if (!order) return kn_jnomem(r);
            for (size_t i = 0; i < d->n; i++) order[i] = i;
            bool ok = true;
            if (o->sort_keys) {
                /* insertion sort is quadratic; use a merge sort over indices */
                size_t *tmp = malloc(d->n * sizeof *tmp);
                if (!tmp) {
                    free(order);
                    return kn_jnomem(r);
                }
                for (size_t w = 1; ok && w < d->n; w *= 2) {
                    for (size_t lo = 0; ok && lo < d->n; lo += 2 * w) {
                        size_t mid = KN_MIN(lo + w, d->n), hi = KN_MIN(lo + 2 * w, d->n), i = lo, j = mid, k = lo;
                        while (ok && i < mid && j < hi) {
                            int c = 0;
                            ok = kn_jv_cmp(r, d->k[order[j]], d->k[order[i]], &c);
                            tmp[k++] = (ok && c == -1) ? order[j++] : order[i++];
                        }
                        while (i < mid) tmp[k++] = order[i++];
                        while (j < hi) tmp[k++] = order[j++];
                    }
                    memcpy(order, tmp, d->n * sizeof *order);
                }
                free(tmp);
            }
            ok = ok && kn_jbuf_putc(b, '{') && (!o->indent || newline_indent(b, o, level + 1));
            for (size_t i = 0; ok && i < d->n; i++) {
                size_t e = order[i];
                if (i) ok = item_sep(b, o, level + 1);
                ok = ok && dump_key(r, b, d->k[e], o) && key_sep(b, o) && dump(r, d->v[e], o, b, level + 1);
            }
            free(order);
            if (!ok) return false;
            if (o->indent && !newline_indent(b, o, level)) return false;
            return kn_jbuf_putc(b, '}');
        }
        default: return kn_jfail(r, "Object of type %s is not JSON serializable", kn_jv_typename(v));
    }
}

bool kn_jtojson(kn_jr *r, kn_jv v, const kn_jjson_opts *o, kn_jbuf *b) { return dump(r, v, o, b, 0); }

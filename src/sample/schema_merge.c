/*
 * schema_merge.c - the keywords of the schema objects that apply at one position, merged into one
 * node: the types, enum values, string automaton, numeric range, and the object and array sources
 * whose shapes schema_emit.c writes. `not` of type, enum / const and pattern is applied here (other
 * forms are rewritten into positive keywords by schema.c first).
 */
#include "sample/grammar.h"
#include "sample/schema_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned ks_type_bit(const char *t) {
    static const struct {
        const char *n;
        unsigned b;
    } tt[] = {{"null", T_NULL},  {"boolean", T_BOOL}, {"object", T_OBJ}, {"array", T_ARR},
              {"string", T_STR}, {"integer", T_INT},  {"number", T_NUM}};
    for (size_t i = 0; i < sizeof tt / sizeof *tt; i++)
        if (!strcmp(t, tt[i].n)) return tt[i].b;
    return 0;
}

bool ks_is_integral(const json_t *v) {
    if (json_is_integer(v)) return true;
    if (!json_is_real(v)) return false;
    double d = json_real_value(v);
    return floor(d) == d && fabs(d) < 9e15;
}

unsigned ks_value_type(const json_t *v) {
    switch (json_typeof(v)) {
        case JSON_NULL: return T_NULL;
        case JSON_TRUE:
        case JSON_FALSE: return T_BOOL;
        case JSON_OBJECT: return T_OBJ;
        case JSON_ARRAY: return T_ARR;
        case JSON_STRING: return T_STR;
        case JSON_INTEGER: return T_INT;
        case JSON_REAL: return ks_is_integral(v) ? T_INT : T_FRAC;
    }
    return 0;
}

/* JSON Schema equality: numbers by value, objects regardless of key order. */
bool ks_values_equal(const json_t *a, const json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    if (json_typeof(a) != json_typeof(b)) return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!ks_values_equal(json_array_get(a, i), json_array_get(b, i))) return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return false;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)a, k, v) {
            json_t *w = json_object_get(b, k);
            if (!w || !ks_values_equal(v, w)) return false;
        }
        return true;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

bool ks_nonneg_int(const json_t *v, long *out) {
    if (!json_is_number(v)) return false;
    double d = json_number_value(v);
    if (d < 0 || floor(d) != d) return false;
    *out = d > 1e9 ? 1000000000L : (long)d;
    return true;
}

void ks_node_free(node *n) {
    json_decref(n->enums);
    json_decref(n->req);
    kn_dfa_free(n->str);
    kn_dfa_free(n->keys);
    ks_conj_free(&n->osrc);
    ks_conj_free(&n->asrc);
}

void ks_dfa_fail(ctx *c, const char *path, const char *kw, const char *what) {
    if (kn_dfa_toobig())
        ks_fail(c, path, kw, "%s need more than %d automaton states or %d transitions", what, KN_DFA_MAX_STATES,
                KN_DFA_MAX_TRANS);
    else ks_nomem(c);
}

/* *slot = *slot AND d (takes d). */
void ks_dfa_and_into(ctx *c, kn_dfa **slot, kn_dfa *d, const char *path, const char *kw) {
    if (!d) return;
    if (!*slot) {
        *slot = d;
        return;
    }
    kn_dfa *r = kn_dfa_and(*slot, d);
    kn_dfa_free(d);
    if (!r) {
        ks_dfa_fail(c, path, kw, "the string constraints combined");
        return;
    }
    kn_dfa_free(*slot);
    *slot = r;
}

kn_dfa *ks_pattern_dfa(ctx *c, const char *pattern, const char *path, const char *kw) {
    char err[200];
    kn_dfa *d = kn_dfa_regex(pattern, err, sizeof err);
    if (!d) ks_fail(c, path, kw, "unsupported regular expression \"%.100s\": %s", pattern, err);
    return d;
}

kn_dfa *ks_literals_dfa(ctx *c, json_t *strs, const char *path, const char *kw, const char *what) {
    size_t n = json_array_size(strs);
    const char **s = calloc(n + 1, sizeof *s);
    size_t *l = calloc(n + 1, sizeof *l);
    kn_dfa *d = NULL;
    const bool arrays = s && l;
    if (arrays) {
        for (size_t i = 0; i < n; i++) {
            s[i] = json_string_value(json_array_get(strs, i));
            l[i] = json_string_length(json_array_get(strs, i));
        }
        d = kn_dfa_literals(s, l, (int)n);
    }
    free(s);
    free(l);
    if (!d && !arrays) ks_nomem(c);
    else if (!d) ks_dfa_fail(c, path, kw, what);
    return d;
}

static void bound_lo(kn_nbound *b, double v, bool excl) {
    if (!b->set || v > b->v || (v == b->v && excl)) *b = (kn_nbound){true, excl, v};
}

static void bound_hi(kn_nbound *b, double v, bool excl) {
    if (!b->set || v < b->v || (v == b->v && excl)) *b = (kn_nbound){true, excl, v};
}

static void enum_and(ctx *c, node *n, json_t *vals) {
    if (!n->enums) {
        n->enums = json_copy(vals);
        if (!n->enums) ks_nomem(c);
        return;
    }
    json_t *keep = json_array();
    size_t i, j;
    json_t *a, *b;
    json_array_foreach(n->enums, i, a) {
        json_array_foreach(vals, j, b) if (ks_values_equal(a, b)) {
            json_array_append(keep, a);
            break;
        }
    }
    json_decref(n->enums);
    n->enums = keep;
}

/* `not`: the forms kiln enforces exactly: not {} / true / false, not {type}, not {enum | const}
 * (with an optional type), not {pattern} (with an optional type "string"). */
static void merge_not(ctx *c, node *n, json_t *v, const char *path) {
    if (json_is_false(v)) return;
    if (json_is_true(v)) {
        n->types = 0;
        return;
    }
    if (!json_is_object(v)) {
        ks_fail(c, path, "not", "must be a schema");
        return;
    }
    json_t *type = NULL, *vals = NULL, *pattern = NULL;
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (!strcmp(k, "type")) type = x;
        else if (!strcmp(k, "enum")) vals = x;
        else if (!strcmp(k, "const")) vals = x;
        else if (!strcmp(k, "pattern")) pattern = x;
        else if (ks_in_list(k, ks_passive_kw, ks_n_passive_kw) && strcmp(k, "$ref") && strcmp(k, "allOf") &&
                 strcmp(k, "anyOf") && strcmp(k, "oneOf") && strcmp(k, "nullable"))
            continue;
        else {
            ks_fail(c, path, "not", "kiln enforces `not` only of type, enum, const or pattern (here: \"%.60s\")", k);
            return;
        }
    }
    unsigned tmask = T_ALL;
    if (type) {
        tmask = 0;
        if (json_is_string(type)) tmask = ks_type_bit(json_string_value(type));
        else if (json_is_array(type)) {
            size_t i;
            json_t *t;
            json_array_foreach(type, i, t) tmask |= json_is_string(t) ? ks_type_bit(json_string_value(t)) : 0;
        }
        if (!tmask) {
            ks_fail(c, ks_path_join(c, path, "not"), "type", "unknown type");
            return;
        }
    }
    if (!vals && !pattern) {
        /* not {type: T}: remove T; not {}: nothing is valid */
        if ((tmask & T_NUM) == T_INT && (n->types & T_FRAC)) {
            ks_fail(c, ks_path_join(c, path, "not"), "type", "\"not integer\" is not supported");
            return;
        }
        n->types &= ~tmask;
        return;
    }
    if (vals && pattern) {
        ks_fail(c, path, "not", "kiln enforces `not` of enum or pattern, not both");
        return;
    }
    if (pattern) {
        if (!json_is_string(pattern)) {
            ks_fail(c, ks_path_join(c, path, "not"), "pattern", "must be a string");
            return;
        }
        /* strings that match are excluded, and so is everything of the types the inner schema
         * admits besides strings (a pattern does not apply to them) */
        n->types &= ~(tmask & ~(unsigned)T_STR);
        if (!(tmask & T_STR)) return;
        kn_dfa *d = ks_pattern_dfa(c, json_string_value(pattern), ks_path_join(c, path, "not"), "pattern");
        if (!d) return;
        kn_dfa *nd = kn_dfa_not(d);
        kn_dfa_free(d);
        if (!nd) {
            ks_dfa_fail(c, path, "not", "the strings the pattern does not match");
            return;
        }
        ks_dfa_and_into(c, &n->str, nd, path, "not");
        return;
    }
    json_t *list = json_is_array(vals) ? json_incref(vals) : json_pack("[O]", vals);
    json_t *strs = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        unsigned t = ks_value_type(e);
        if (!(t & tmask)) continue;
        if (t == T_STR) json_array_append(strs, e);
        else if (t == T_NULL) n->types &= ~(unsigned)T_NULL;
        else {
            ks_fail(c, path, "not", "kiln enforces `not` of enum values that are strings or null only");
            break;
        }
    }
    if (!c->failed && json_array_size(strs)) {
        kn_dfa *d = ks_literals_dfa(c, strs, path, "not", "the strings together");
        kn_dfa *nd = d ? kn_dfa_not(d) : NULL;
        if (d && !nd) ks_dfa_fail(c, path, "not", "the strings besides these");
        kn_dfa_free(d);
        if (nd) ks_dfa_and_into(c, &n->str, nd, path, "not");
    }
    json_decref(strs);
    json_decref(list);
}

/* format into n; its own maximum length joins n's maxLength, or for property names (keys: an
 * automaton alone, no counter) is reported as not enforced. */
static void merge_format(ctx *c, node *n, json_t *v, const char *path, bool keys) {
    if (!json_is_string(v)) {
        ks_fail(c, path, "format", "must be a string");
        return;
    }
    const char *re;
    long maxlen;
    kn_fmt_kind k = kn_format_regex(json_string_value(v), &re, &maxlen);
    if (k == KN_FMT_UNKNOWN) return;
    if (k == KN_FMT_IGNORED) {
        ks_approx(c, path, "format", "this format is not checked");
        return;
    }
    if (k == KN_FMT_APPROX) ks_approx(c, path, "format", "the format's usual shape is enforced, not its full grammar");
    if (maxlen >= 0 && keys)
        ks_approx(c, path, "format", "the format's total length is not enforced on property names");
    else if (maxlen >= 0 && (n->maxlen < 0 || maxlen < n->maxlen)) n->maxlen = maxlen;
    ks_dfa_and_into(c, &n->str, ks_pattern_dfa(c, re, path, "format"), path, "format");
}

/* propertyNames: a schema of strings kiln can turn into an automaton. */
static void merge_propnames(ctx *c, node *n, json_t *v, const char *path) {
    if (json_is_true(v)) return;
    node k = {.types = T_ALL, .maxlen = -1};
    bool ok = json_is_object(v) || json_is_false(v);
    if (json_is_false(v)) {
        /* no property at all */
        kn_dfa *d = kn_dfa_literals(NULL, NULL, 0);
        ks_dfa_and_into(c, &n->keys, d, path, "propertyNames");
        return;
    }
    const char *kw;
    json_t *x;
    if (ok) json_object_foreach(v, kw, x) {
            if (!strcmp(kw, "pattern") && json_is_string(x))
                ks_dfa_and_into(c, &k.str,
                                ks_pattern_dfa(c, json_string_value(x), ks_path_join(c, path, "propertyNames"), kw),
                                path, "propertyNames");
            else if (!strcmp(kw, "format")) merge_format(c, &k, x, ks_path_join(c, path, "propertyNames"), true);
            else if (!strcmp(kw, "minLength")) ok = ks_nonneg_int(x, &k.minlen);
            else if (!strcmp(kw, "maxLength")) ok = ks_nonneg_int(x, &k.maxlen);
            else if (!strcmp(kw, "type")) ok = json_is_string(x) && !strcmp(json_string_value(x), "string");
            else if (ks_in_list(kw, ks_passive_kw, ks_n_passive_kw)) continue;
            else ok = false;
            if (!ok) break;
        }
    if (!ok) {
        kn_dfa_free(k.str);
        ks_fail(c, path, "propertyNames",
                "kiln enforces propertyNames of pattern, format, minLength and maxLength only");
        return;
    }
    kn_dfa *d = k.str;
    if (k.minlen > 0 || k.maxlen >= 0) {
        kn_dfa *l = kn_dfa_length(k.minlen, k.maxlen);
        if (!l) {
            kn_dfa_free(d);
            ks_fail(c, path, "propertyNames", "length bounds too large");
            return;
        }
        if (d) ks_dfa_and_into(c, &d, l, path, "propertyNames");
        else d = l;
    }
    if (d) ks_dfa_and_into(c, &n->keys, d, path, "propertyNames");
}

/* Merges the keywords of schema object x into n. */
void ks_merge(ctx *c, node *n, sref x) {
    json_t *s = x.s;
    const char *p = x.path;
    const char *k;
    json_t *v;
    json_t *nullable = json_object_get(s, "nullable");
    bool has_obj = false, has_arr = false;
    json_object_foreach(s, k, v) {
        if (c->failed) return;
        if (!strcmp(k, "type")) {
            unsigned m = 0;
            if (json_is_string(v)) m = ks_type_bit(json_string_value(v));
            else if (json_is_array(v)) {
                size_t i;
                json_t *t;
                json_array_foreach(v, i, t) {
                    unsigned b = json_is_string(t) ? ks_type_bit(json_string_value(t)) : 0;
                    if (!b) break;
                    m |= b;
                }
                if (!json_array_size(v)) m = 0;
            }
            if (!m) {
                ks_fail(c, p, k, "unknown type");
                return;
            }
            if (json_is_true(nullable)) m |= T_NULL;
            n->types &= m;
        } else if (!strcmp(k, "enum") || !strcmp(k, "const")) {
            if (!strcmp(k, "enum") && !json_is_array(v)) {
                ks_fail(c, p, k, "must be an array");
                return;
            }
            json_t *vals = !strcmp(k, "enum") ? json_incref(v) : json_pack("[O]", v);
            enum_and(c, n, vals);
            json_decref(vals);
        } else if (!strcmp(k, "minLength") || !strcmp(k, "maxLength")) {
            long l;
            if (!ks_nonneg_int(v, &l)) {
                ks_fail(c, p, k, "must be a non-negative integer");
                return;
            }
            if (k[1] == 'i') n->minlen = l > n->minlen ? l : n->minlen;
            else n->maxlen = (n->maxlen < 0 || l < n->maxlen) ? l : n->maxlen;
        } else if (!strcmp(k, "pattern")) {
            if (!json_is_string(v)) {
                ks_fail(c, p, k, "must be a string");
                return;
            }
            ks_dfa_and_into(c, &n->str, ks_pattern_dfa(c, json_string_value(v), p, k), p, k);
        } else if (!strcmp(k, "format")) {
            merge_format(c, n, v, p, false);
        } else if (!strcmp(k, "minimum") || !strcmp(k, "maximum")) {
            if (!json_is_number(v)) {
                ks_fail(c, p, k, "must be a number");
                return;
            }
            const char *ex = k[1] == 'i' ? "exclusiveMinimum" : "exclusiveMaximum";
            bool excl = json_is_true(json_object_get(s, ex)); /* draft 4 */
            if (k[1] == 'i') bound_lo(&n->lo, json_number_value(v), excl);
            else bound_hi(&n->hi, json_number_value(v), excl);
        } else if (!strcmp(k, "exclusiveMinimum") || !strcmp(k, "exclusiveMaximum")) {
            if (json_is_boolean(v)) continue; /* draft 4: read with minimum / maximum */
            if (!json_is_number(v)) {
                ks_fail(c, p, k, "must be a number");
                return;
            }
            if (!strcmp(k, "exclusiveMinimum")) bound_lo(&n->lo, json_number_value(v), true);
            else bound_hi(&n->hi, json_number_value(v), true);
        } else if (!strcmp(k, "multipleOf")) {
            double m = json_number_value(v);
            if (!json_is_number(v) || !(m > 0)) {
                ks_fail(c, p, k, "must be a positive number");
                return;
            }
            int dig = -1;
            for (int e = 0; e <= 12 && dig < 0; e++)
                if (fabs(m * pow(10, e) - 1) < 1e-9) dig = e;
            if (dig == 0) n->types &= ~(unsigned)T_FRAC;
            else if (dig > 0) n->mult10 = (n->mult10 < 0 || dig < n->mult10) ? dig : n->mult10;
            else if (n->types & T_NUM) {
                ks_fail(c, p, k, "kiln enforces multipleOf 1 and powers of ten below it (0.1, 0.01, ...) only");
                return;
            }
        } else if (!strcmp(k, "items") || !strcmp(k, "prefixItems") || !strcmp(k, "additionalItems")) {
            has_arr = true;
        } else if (!strcmp(k, "minItems") || !strcmp(k, "maxItems")) {
            long l;
            if (!ks_nonneg_int(v, &l)) {
                ks_fail(c, p, k, "must be a non-negative integer");
                return;
            }
            if (k[1] == 'i') n->minitems = l > n->minitems ? l : n->minitems;
            else n->maxitems = (n->maxitems < 0 || l < n->maxitems) ? l : n->maxitems;
        } else if (!strcmp(k, "uniqueItems")) {
            if (json_is_true(v)) n->unique = true, n->unique_path = p;
        } else if (!strcmp(k, "properties") || !strcmp(k, "patternProperties") || !strcmp(k, "additionalProperties")) {
            if (!strcmp(k, "additionalProperties") ? !(json_is_object(v) || json_is_boolean(v)) : !json_is_object(v)) {
                ks_fail(c, p, k, "must be %s", k[0] == 'a' ? "a schema" : "an object");
                return;
            }
            has_obj = true;
        } else if (!strcmp(k, "required")) {
            if (!json_is_array(v)) {
                ks_fail(c, p, k, "must be an array of names");
                return;
            }
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) {
                if (!json_is_string(e)) {
                    ks_fail(c, p, k, "must be an array of names");
                    return;
                }
                bool have = false;
                for (size_t j = 0; j < json_array_size(n->req) && !have; j++)
                    have = json_equal(json_array_get(n->req, j), e);
                if (!have) json_array_append(n->req, e);
            }
        } else if (!strcmp(k, "propertyNames")) {
            merge_propnames(c, n, v, p);
        } else if (!strcmp(k, "minProperties") || !strcmp(k, "maxProperties")) {
            long l;
            if (!ks_nonneg_int(v, &l)) {
                ks_fail(c, p, k, "must be a non-negative integer");
                return;
            }
            if (k[1] == 'i') n->minprops = l > n->minprops ? l : n->minprops;
            else n->maxprops = (n->maxprops < 0 || l < n->maxprops) ? l : n->maxprops;
            if (!n->path) n->path = p;
        } else if (!strcmp(k, "not")) {
            if (!ks_not_rewrites(v)) merge_not(c, n, v, p);
        } else if (ks_in_list(k, ks_refused_kw, ks_n_refused_kw)) {
            ks_fail(c, p, k, "this keyword is not supported");
            return;
        }
        /* anything else: an annotation, or not a JSON Schema keyword: ignored */
    }
    if (has_obj) ks_conj_add(c, &n->osrc, x);
    if (has_arr) ks_conj_add(c, &n->asrc, x);
}

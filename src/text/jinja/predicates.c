/*
 * predicates.c - Jinja2's tests, the `x is defined` / `n is divisibleby(3)` predicates, as chat
 * templates use them: each behaves as the Python one does on kiln's values (see value.c), with its
 * arguments bound by kn_jbind.
 */
#include "text/jinja/impl.h"

#include <math.h>
#include <string.h>

enum {
    T_BOOLEAN,
    T_CALLABLE,
    T_DEFINED,
    T_DIVISIBLEBY,
    T_EQ,
    T_ESCAPED,
    T_EVEN,
    T_FALSE,
    T_FILTER,
    T_FLOAT,
    T_GE,
    T_GT,
    T_IN,
    T_INTEGER,
    T_ITERABLE,
    T_LE,
    T_LOWER,
    T_LT,
    T_MAPPING,
    T_NE,
    T_NONE,
    T_NUMBER,
    T_ODD,
    T_SAMEAS,
    T_SEQUENCE,
    T_STRING,
    T_TEST,
    T_TRUE,
    T_UNDEFINED,
    T_UPPER,
};

static const struct {
    const char *name;
    int id;
    int nargs;
} tests[] = {
    {"boolean", T_BOOLEAN, 0},
    {"callable", T_CALLABLE, 0},
    {"defined", T_DEFINED, 0},
    {"divisibleby", T_DIVISIBLEBY, 1},
    {"eq", T_EQ, 1},
    {"equalto", T_EQ, 1},
    {"==", T_EQ, 1},
    {"escaped", T_ESCAPED, 0},
    {"even", T_EVEN, 0},
    {"false", T_FALSE, 0},
    {"filter", T_FILTER, 0},
    {"float", T_FLOAT, 0},
    {"ge", T_GE, 1},
    {">=", T_GE, 1},
    {"gt", T_GT, 1},
    {">", T_GT, 1},
    {"greaterthan", T_GT, 1},
    {"in", T_IN, 1},
    {"integer", T_INTEGER, 0},
    {"iterable", T_ITERABLE, 0},
    {"le", T_LE, 1},
    {"<=", T_LE, 1},
    {"lower", T_LOWER, 0},
    {"lt", T_LT, 1},
    {"<", T_LT, 1},
    {"lessthan", T_LT, 1},
    {"mapping", T_MAPPING, 0},
    {"ne", T_NE, 1},
    {"!=", T_NE, 1},
    {"none", T_NONE, 0},
    {"number", T_NUMBER, 0},
    {"odd", T_ODD, 0},
    {"sameas", T_SAMEAS, 1},
    {"sequence", T_SEQUENCE, 0},
    {"string", T_STRING, 0},
    {"test", T_TEST, 0},
    {"true", T_TRUE, 0},
    {"undefined", T_UNDEFINED, 0},
    {"upper", T_UPPER, 0},
};

int kn_jtest_find(const char *name, size_t n) {
    for (size_t i = 0; i < KN_ARRAY_LEN(tests); i++)
        if (strlen(tests[i].name) == n && memcmp(tests[i].name, name, n) == 0) return (int)i;
    return -1;
}

/* value % num == 0 (or == 1 for odd) with Python's modulo. */
static bool mod_is(kn_jr *r, kn_jv v, kn_jv num, int want, bool *res) {
    if (v.t == KN_J_UNDEF) return kn_jfail(r, "%s", v.u.s ? v.u.s->s : "undefined value");
    if (!kn_jv_is_num(v) || !kn_jv_is_num(num))
        return kn_jfail(r, "unsupported operand type(s) for %%: '%s' and '%s'", kn_jv_typename(v), kn_jv_typename(num));
    if (v.t != KN_J_FLOAT && num.t != KN_J_FLOAT) {
        int64_t x = v.t == KN_J_INT ? v.u.i : v.u.b, y = num.t == KN_J_INT ? num.u.i : num.u.b;
        if (y == 0) return kn_jfail(r, "integer division or modulo by zero");
        int64_t m = (y == -1) ? 0 : x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        *res = m == want;
        return true;
    }
    double x = v.t == KN_J_FLOAT ? v.u.f : v.t == KN_J_INT ? (double)v.u.i : v.u.b;
    double y = num.t == KN_J_FLOAT ? num.u.f : num.t == KN_J_INT ? (double)num.u.i : num.u.b;
    if (y == 0) return kn_jfail(r, "float modulo");
    double m = fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    *res = m == want;
    return true;
}

/* Python str.islower() / isupper() on str(v). */
static bool case_test(kn_jr *r, kn_jv v, bool upper, bool *res) {
    kn_jv sv;
    if (!kn_jv_to_str(r, v, &sv)) return false;
    const kn_jstr *s = sv.u.s;
    bool cased = false, ok = true;
    for (size_t i = 0; i < s->len;) {
        size_t adv;
        uint32_t cp = kn_ju_cp(s->s, s->len, i, &adv);
        i += adv;
        if (cp == KN_UTF8_INVALID) continue;
        uint32_t lo = kn_ju_lower(cp), up = kn_ju_upper(cp);
        if (lo == up) continue; /* not cased */
        if (upper ? cp != up : cp != lo) {
            ok = false;
            break;
        }
        cased = true;
    }
    kn_jv_drop(sv);
    *res = ok && cased;
    return true;
}

bool kn_jtest_call(kn_jr *r, int idx, kn_jv v, const kn_jargs *a, bool *res) {
    if (idx < 0 || (size_t)idx >= KN_ARRAY_LEN(tests)) return kn_jfail(r, "internal error: bad test id");
    int nargs = tests[idx].nargs;
    if (a->n_kw) return kn_jfail(r, "test '%s' takes no keyword arguments", tests[idx].name);
    if ((int)a->n_pos != nargs)
        return kn_jfail(r, "test '%s' takes %d argument(s), %zu given", tests[idx].name, nargs, a->n_pos);
    kn_jv x = nargs ? a->pos[0] : kn_jv_undef();
    int c;
    switch (tests[idx].id) {
        case T_BOOLEAN: *res = v.t == KN_J_BOOL; return true;
        case T_CALLABLE:
            *res = v.t == KN_J_MACRO || v.t == KN_J_FUNC || v.t == KN_J_METHOD || v.t == KN_J_LOOP || v.t == KN_J_UNDEF;
            return true;
        case T_DEFINED: *res = v.t != KN_J_UNDEF; return true;
        case T_UNDEFINED: *res = v.t == KN_J_UNDEF; return true;
        case T_DIVISIBLEBY: return mod_is(r, v, x, 0, res);
        case T_EVEN: return mod_is(r, v, kn_jv_int(2), 0, res);
        case T_ODD: return mod_is(r, v, kn_jv_int(2), 1, res);
        case T_EQ: *res = kn_jv_eq(v, x); return true;
        case T_NE: *res = !kn_jv_eq(v, x); return true;
        case T_ESCAPED: *res = v.t == KN_J_STR && v.u.s->safe; return true;
        case T_FALSE: *res = v.t == KN_J_BOOL && !v.u.b; return true;
        case T_TRUE: *res = v.t == KN_J_BOOL && v.u.b; return true;
        case T_FILTER: *res = v.t == KN_J_STR && kn_jfilter_find(v.u.s->s, v.u.s->len) >= 0; return true;
        case T_TEST: *res = v.t == KN_J_STR && kn_jtest_find(v.u.s->s, v.u.s->len) >= 0; return true;
        case T_FLOAT: *res = v.t == KN_J_FLOAT; return true;
        case T_INTEGER: *res = v.t == KN_J_INT; return true;
        case T_NUMBER: *res = kn_jv_is_num(v); return true;
        case T_GE:
        case T_GT:
        case T_LE:
        case T_LT: {
            int t = tests[idx].id;
            if (!kn_jv_cmp(r, v, x, &c)) return false;
            *res = c != 2 && (t == T_GE ? c >= 0 : t == T_GT ? c > 0 : t == T_LE ? c <= 0 : c < 0);
            return true;
        }
        case T_IN: return kn_jcontains(r, x, v, res);
        case T_ITERABLE:
            *res = v.t == KN_J_STR || v.t == KN_J_LIST || v.t == KN_J_TUPLE || v.t == KN_J_DICT || v.t == KN_J_ITER ||
                   v.t == KN_J_UNDEF || v.t == KN_J_LOOP;
            return true;
        case T_SEQUENCE:
            *res = v.t == KN_J_STR || v.t == KN_J_LIST || v.t == KN_J_TUPLE || v.t == KN_J_DICT || v.t == KN_J_UNDEF;
            return true;
        case T_MAPPING: *res = v.t == KN_J_DICT; return true;
        case T_NONE: *res = v.t == KN_J_NONE; return true;
        case T_STRING: *res = v.t == KN_J_STR; return true;
        case T_LOWER: return case_test(r, v, false, res);
        case T_UPPER: return case_test(r, v, true, res);
        case T_SAMEAS:
            if (v.t != x.t) {
                *res = false;
                return true;
            }
            if (kn_jv_is_heap(v) || v.t == KN_J_NS || v.t == KN_J_MACRO || v.t == KN_J_LOOP) *res = v.u.p == x.u.p;
            else *res = kn_jv_eq(v, x);
            return true;
    }
    return kn_jfail(r, "internal error: bad test");
}

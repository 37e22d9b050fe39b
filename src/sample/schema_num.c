/*
 * schema_num.c - numeric ranges as GBNF: minimum / maximum / exclusiveMinimum / exclusiveMaximum
 * and multipleOf 10^-k.
 *
 * Integers are exact: a range [lo, hi] of decimal digit strings of any length becomes alternatives
 * of digit classes (e.g. [17, 342] = "1" [7-9] | [2-9] [0-9] | [1-2] [0-9] [0-9] | "3" [0-3] [0-9] |
 * "3" "4" [0-2]), with a separate alternative for the negative half. Numbers split into an integer
 * part I (ranged like an integer) and a fraction F. For an integer bound B three fraction languages
 * do: any, zero (absent or all zeros) and non-zero: x >= B is I >= B with any F, x > B is I > B or
 * I = B with F non-zero, x <= B is I < B or I = B with F zero. A bound with fraction digits (the
 * shortest decimal that reads back as the bound's double: 2.5, 0.1) compares F with its digits, a
 * digit at a time (frac_rest): x >= 2.25 is I > 2, or I = 2 with F >= "25". Past FRAC_DIGITS of them
 * (1e-60) the bound is widened to the nearest integer outside it (documented approximation). A bounded
 * number is written without an exponent (the same values in plain notation).
 */
#include "sample/schema_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NUM_DIGITS 320 /* digits of a bound at most (a double reaches 309) */

typedef struct mag {
    char d[NUM_DIGITS + 2]; /* decimal digits, no leading zero ("0" for zero) */
} mag;

static int mag_cmp(const mag *a, const mag *b) {
    size_t la = strlen(a->d), lb = strlen(b->d);
    if (la != lb) return la < lb ? -1 : 1;
    int c = strcmp(a->d, b->d);
    return (c > 0) - (c < 0);
}

static void mag_inc(mag *a) {
    size_t n = strlen(a->d);
    for (size_t i = n; i-- > 0;) {
        if (a->d[i] != '9') {
            a->d[i]++;
            return;
        }
        a->d[i] = '0';
    }
    if (n + 1 <= NUM_DIGITS) {
        memmove(a->d + 1, a->d, n + 1);
        a->d[0] = '1';
    }
}

/* a >= 1 */
static void mag_dec(mag *a) {
    size_t n = strlen(a->d);
    for (size_t i = n; i-- > 0;) {
        if (a->d[i] != '0') {
            a->d[i]--;
            break;
        }
        a->d[i] = '9';
    }
    if (a->d[0] == '0' && a->d[1]) memmove(a->d, a->d + 1, n);
}

static void mag_of(mag *a, double v) { /* v >= 0, an integer */
    snprintf(a->d, sizeof a->d, "%.0f", v);
}

static bool all_of(const char *s, size_t n, char c) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != c) return false;
    return true;
}

/* Where digits_between writes: its groups nest a level per digit where the bounds differ (a double's
 * 309), past what the GBNF compiler takes (100 levels); every NUM_NEST levels the rest goes into a rule
 * of its own in g. */
#define NUM_NEST 16
typedef struct numout {
    kn_gout *g;
    int depth; /* groups open around the current point */
} numout;

static void digits_between(kn_sbuf *out, numout *no, const char *a, const char *b, size_t n);

/* digits_between one group deeper: in place, or as a new rule named in place when NUM_NEST groups
 * are open. */
static void digits_nested(kn_sbuf *out, numout *no, const char *a, const char *b, size_t n) {
    if (no->depth < NUM_NEST) {
        no->depth++;
        digits_between(out, no, a, b, n);
        no->depth--;
        return;
    }
    kn_sbuf sub;
    kn_sbuf_init(&sub, out->limit);
    numout inner = {no->g, 0};
    digits_between(&sub, &inner, a, b, n);
    const char *name = kn_gout_name(no->g, "num");
    if (!name || sub.nomem) out->nomem = true;
    else if (sub.over) out->over = true;
    else {
        kn_gout_rule(no->g, name, sub.p);
        kn_sbuf_puts(out, name);
    }
    kn_sbuf_free(&sub);
}

/* Digit strings of length n (leading zeros allowed) between a[0..n) and b[0..n), a <= b. Writes a
 * sequence, a parenthesized alternation or a rule's name (no). */
static void digits_between(kn_sbuf *out, numout *no, const char *a, const char *b, size_t n) {
    if (!n) return;
    if (!memcmp(a, b, n)) {
        kn_sbuf_printf(out, "\"%.*s\"", (int)n, a);
        return;
    }
    if (all_of(a, n, '0') && all_of(b, n, '9')) {
        if (n == 1) kn_sbuf_puts(out, "[0-9]");
        else kn_sbuf_printf(out, "[0-9]{%zu}", n);
        return;
    }
    if (a[0] == b[0]) {
        kn_sbuf_printf(out, "\"%c\" ", a[0]);
        digits_between(out, no, a + 1, b + 1, n - 1);
        return;
    }
    char nines[NUM_DIGITS + 1], zeros[NUM_DIGITS + 1];
    memset(nines, '9', n);
    memset(zeros, '0', n);
    bool lo_full = all_of(a + 1, n - 1, '0'), hi_full = all_of(b + 1, n - 1, '9');
    char first = lo_full ? a[0] : (char)(a[0] + 1), last = hi_full ? b[0] : (char)(b[0] - 1);
    int alts = 0;
    kn_sbuf_puts(out, "(");
    if (!lo_full) {
        kn_sbuf_printf(out, "\"%c\" ", a[0]);
        digits_nested(out, no, a + 1, nines, n - 1);
        alts++;
    }
    if (first <= last) {
        if (alts++) kn_sbuf_puts(out, " | ");
        if (first == last) kn_sbuf_printf(out, "\"%c\"", first);
        else kn_sbuf_printf(out, "[%c-%c]", first, last);
        if (n > 2) kn_sbuf_printf(out, " [0-9]{%zu}", n - 1);
        else if (n == 2) kn_sbuf_puts(out, " [0-9]");
    }
    if (!hi_full) {
        if (alts++) kn_sbuf_puts(out, " | ");
        kn_sbuf_printf(out, "\"%c\" ", b[0]);
        digits_nested(out, no, zeros, b + 1, n - 1);
    }
    kn_sbuf_puts(out, ")");
}

/* The integers in [lo, hi] (hi NULL: no maximum), written without leading zeros. lo <= hi. */
static void int_range(kn_sbuf *out, kn_gout *g, const mag *lo, const mag *hi) {
    numout no = {g, 0};
    size_t ll = strlen(lo->d), lh = hi ? strlen(hi->d) : 0;
    char nines[NUM_DIGITS + 1];
    int alts = 0;
    kn_sbuf_puts(out, "(");
    if (hi && ll == lh) {
        digits_between(out, &no, lo->d, hi->d, ll);
        alts++;
    } else {
        /* the lengths of lo: lo..99..9 */
        memset(nines, '9', ll);
        digits_between(out, &no, lo->d, nines, ll);
        alts++;
        /* the lengths in between, and above when unbounded */
        if (!hi) {
            kn_sbuf_printf(out, " | [1-9] [0-9]{%zu,}", ll);
        } else {
            for (size_t L = ll + 1; L < lh; L++) kn_sbuf_printf(out, " | [1-9] [0-9]{%zu}", L - 1);
            char lowest[NUM_DIGITS + 1];
            memset(lowest, '0', lh);
            lowest[0] = '1';
            kn_sbuf_puts(out, " | ");
            digits_between(out, &no, lowest, hi->d, lh);
        }
    }
    (void)alts;
    kn_sbuf_puts(out, ")");
}

enum { F_NONE, F_ZERO, F_NONZERO, F_ANY };

static int f_and(int a, int b) {
    if (a == F_ANY) return b;
    if (b == F_ANY) return a;
    if (a == b) return a;
    return F_NONE;
}

static void frac(kn_sbuf *out, int f, int mult10) {
    switch (f) {
        case F_ZERO: kn_sbuf_puts(out, " (\".\" \"0\"+)?"); break;
        case F_NONZERO:
            if (mult10 < 0) kn_sbuf_puts(out, " \".\" \"0\"* [1-9] [0-9]*");
            else kn_sbuf_printf(out, " \".\" [0-9]{0,%d} [1-9] \"0\"*", mult10 - 1);
            break;
        case F_ANY:
            if (mult10 < 0) kn_sbuf_puts(out, " (\".\" [0-9]+)?");
            else if (mult10 == 0) kn_sbuf_puts(out, " (\".\" \"0\"+)?");
            else kn_sbuf_printf(out, " (\".\" [0-9]{0,%d} [1-9] \"0\"* | \".\" \"0\"+)?", mult10 - 1);
            break;
        default: break;
    }
}

/* ---- fractions against a bound's digits ---------------------------------------------------- */

/* A bound of the fraction digits s (after the "."), compared digit by digit with f (padded with
 * zeros, as both are): s >= f or s > f for a lower bound, s <= f or s < f for an upper one. */
typedef struct fbound {
    const char *f; /* the bound's fraction digits, no trailing zero; NULL: no bound */
    bool excl;
} fbound;

/* The digit strings from position j on (possibly empty, unless nonempty) that keep lo and hi, those
 * tight (the digits so far equal to theirs) marked lo_t / hi_t, at most m significant fraction
 * digits in all (m < 0: any). Appends a GBNF expression to out; false when there are none. */
static bool frac_rest(kn_sbuf *out, fbound lo, fbound hi, int j, bool lo_t, bool hi_t, int m, bool nonempty) {
    const int nl = lo_t ? (int)strlen(lo.f) : 0, nh = hi_t ? (int)strlen(hi.f) : 0;
    if (lo_t && j >= nl && !lo.excl) lo_t = false; /* s >= f whatever follows */
    const bool lo_nz = lo_t && j >= nl;            /* s > f: a nonzero digit must follow */
    const bool hi_zero = hi_t && j >= nh;          /* s <= f: only zeros may follow; s < f: nothing */
    if (hi_zero && (hi.excl || lo_nz)) return false;
    if (hi_zero) return kn_sbuf_puts(out, nonempty ? "\"0\"+" : "\"0\"*"), true;
    const int r = m < 0 ? -1 : m > j ? m - j : 0; /* free positions left (m >= 0) */
    if (!lo_t && !hi_t) {
        if (r < 0) kn_sbuf_puts(out, nonempty ? "[0-9]+" : "[0-9]*");
        else if (r == 0) kn_sbuf_puts(out, nonempty ? "\"0\"+" : "\"0\"*");
        else if (nonempty) kn_sbuf_printf(out, "([0-9]{0,%d} [1-9] \"0\"* | \"0\"+)", r - 1);
        else kn_sbuf_printf(out, "([0-9]{0,%d} [1-9])? \"0\"*", r - 1);
        return true;
    }
    if (lo_nz && !hi_t) {
        if (r < 0) kn_sbuf_puts(out, "\"0\"* [1-9] [0-9]*");
        else if (r == 0) return false;
        else kn_sbuf_printf(out, "[0-9]{0,%d} [1-9] \"0\"*", r - 1);
        return true;
    }
    /* a digit at a time: ending here keeps hi (what is left of f > 0) but not a tight lo */
    int alts = 0;
    kn_sbuf_puts(out, "(");
    if (!lo_t && !nonempty) kn_sbuf_puts(out, "\"\""), alts++;
    const char dl = lo_t && j < nl ? lo.f[j] : '0', dh = hi_t && j < nh ? hi.f[j] : '0';
    const char top = r == 0 ? '0' : '9';
    for (char c = '0'; c <= top;) {
        /* the run of digits from c with the same outcome: loose (1), tight (2) or out (0) */
        const int ol = !lo_t || c > dl ? 1 : c == dl ? 2 : 0, oh = !hi_t || c < dh ? 1 : c == dh ? 2 : 0;
        char e = c;
        while (e < top) {
            const char d = (char)(e + 1);
            const int pl = !lo_t || d > dl ? 1 : d == dl ? 2 : 0, ph = !hi_t || d < dh ? 1 : d == dh ? 2 : 0;
            if (pl != ol || ph != oh || ol == 2 || oh == 2) break;
            e = d;
        }
        if (ol && oh) {
            kn_sbuf sub;
            kn_sbuf_init(&sub, out->limit);
            if (frac_rest(&sub, lo, hi, j + 1, ol == 2, oh == 2, m, false)) {
                if (alts++) kn_sbuf_puts(out, " | ");
                if (c == e) kn_sbuf_printf(out, "\"%c\" %s", c, sub.p);
                else kn_sbuf_printf(out, "[%c-%c] %s", c, e, sub.p);
            }
            if (sub.nomem) out->nomem = true;
            if (sub.over) out->over = true;
            kn_sbuf_free(&sub);
        }
        c = (char)(e + 1);
    }
    kn_sbuf_puts(out, ")");
    return alts > 0;
}

/* Writes sign I and a fraction that keeps lo and hi (a bound's digits, or NULL), as
 * " | "-separated alternatives after *alts. */
static void frac_bounded(kn_sbuf *out, int *alts, const char *sign, const mag *i, fbound lo, fbound hi, int m) {
    const bool lo_t = lo.f != NULL, hi_t = hi.f != NULL;
    if (!lo_t) lo.f = "";
    if (!hi_t) hi.f = "";
    kn_sbuf digits; /* at least one digit after the "." */
    kn_sbuf_init(&digits, out->limit);
    const bool any = frac_rest(&digits, lo, hi, 0, lo_t, hi_t, m, true);
    /* no fraction at all: the value is I, which keeps lo when lo is "I" itself (s >= 0) and keeps hi
     * unless hi is "I" exclusive */
    const bool bare = (!lo_t || (!lo.f[0] && !lo.excl)) && (!hi_t || hi.f[0] || !hi.excl);
    if (any || bare) {
        if ((*alts)++) kn_sbuf_puts(out, " | ");
        kn_sbuf_printf(out, "%s\"%s\"", sign, i->d);
        if (any) kn_sbuf_printf(out, bare ? " (\".\" %s)?" : " \".\" %s", digits.p);
    }
    if (digits.nomem) out->nomem = true;
    if (digits.over) out->over = true;
    kn_sbuf_free(&digits);
}

/* A magnitude as a decimal: integer digits and fraction digits (no trailing zero). */
#define FRAC_DIGITS 40
typedef struct dec {
    mag i;
    char f[FRAC_DIGITS + 1];
} dec;

/* |v| as the shortest decimal that reads back as v; false when its fraction passes FRAC_DIGITS. */
static bool dec_of(dec *d, double v) {
    char buf[64];
    v = fabs(v);
    if (floor(v) == v) { /* an integer: all of its digits, as the double holds it */
        mag_of(&d->i, v);
        d->f[0] = 0;
        return true;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    char digits[24];
    int nd = 0, e = 0;
    for (const char *q = buf; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && nd < 20) digits[nd++] = *q;
    const char *x = strchr(buf, 'e');
    if (x) e = atoi(x + 1);
    int point = e + 1; /* digits before the point */
    if (point > NUM_DIGITS || -point + nd > FRAC_DIGITS) return false;
    size_t k = 0;
    for (int p = 0; p < point; p++) d->i.d[k++] = p < nd ? digits[p] : '0';
    d->i.d[k] = 0;
    if (!k) snprintf(d->i.d, sizeof d->i.d, "0");
    size_t kf = 0;
    for (int p = point < 0 ? point : 0; p < 0; p++) d->f[kf++] = '0';
    for (int p = point > 0 ? point : 0; p < nd; p++) d->f[kf++] = digits[p];
    while (kf && d->f[kf - 1] == '0') kf--;
    d->f[kf] = 0;
    size_t z = 0; /* leading zeros of the integer part */
    while (d->i.d[z] == '0' && d->i.d[z + 1]) z++;
    memmove(d->i.d, d->i.d + z, strlen(d->i.d + z) + 1);
    return true;
}

/* Magnitudes a = I.F with lo <= a <= hi (exclusive per flags; hi NULL: no maximum), integer or
 * not. Appends alternatives to out, separated by " | " after *alts of them. */
static void half(kn_sbuf *out, kn_gout *g, int *alts, const char *sign, dec lo_d, bool lo_excl, const dec *hi_d,
                 bool hi_excl, bool integer, int mult10) {
    mag lo = lo_d.i;
    const mag *hi = hi_d ? &hi_d->i : NULL;
    if (integer) {
        mag a = lo, b = {{0}};
        if (lo_excl) mag_inc(&a);
        if (hi) {
            b = *hi;
            if (hi_excl) {
                if (!strcmp(b.d, "0")) return;
                mag_dec(&b);
            }
            if (mag_cmp(&a, &b) > 0) return;
        }
        if (!strcmp(sign, "-") && !strcmp(a.d, "0")) { /* no "-0" */
            if (hi && !strcmp(b.d, "0")) return;
            mag_inc(&a);
        }
        if ((*alts)++) kn_sbuf_puts(out, " | ");
        kn_sbuf_puts(out, sign);
        int_range(out, g, &a, hi ? &b : NULL);
        return;
    }
    int c = hi ? mag_cmp(&lo, hi) : -1;
    if (c > 0) return;
    /* I = lo: a bound with fraction digits takes frac_bounded; integer bounds the three languages */
    const bool lo_frac = lo_d.f[0], hi_frac = hi_d && hi_d->f[0];
    if (lo_frac || (c == 0 && hi_frac)) {
        frac_bounded(out, alts, sign, &lo, (fbound){lo_d.f, lo_excl},
                     c == 0 ? (fbound){hi_d->f, hi_excl} : (fbound){NULL, false}, mult10);
    } else {
        int f_lo = f_and(lo_excl ? F_NONZERO : F_ANY, c == 0 ? (hi_excl ? F_NONE : F_ZERO) : F_ANY);
        if (mult10 == 0 && f_lo == F_NONZERO) f_lo = F_NONE;
        if (f_lo != F_NONE) {
            if ((*alts)++) kn_sbuf_puts(out, " | ");
            kn_sbuf_printf(out, "%s\"%s\"", sign, lo.d);
            frac(out, f_lo, mult10);
        }
    }
    if (c == 0) return;
    /* lo < I < hi */
    mag a = lo;
    mag_inc(&a);
    mag b;
    bool mid = true;
    if (hi) {
        b = *hi;
        mag_dec(&b);
        mid = mag_cmp(&a, &b) <= 0;
    }
    if (mid) {
        if ((*alts)++) kn_sbuf_puts(out, " | ");
        kn_sbuf_puts(out, sign);
        int_range(out, g, &a, hi ? &b : NULL);
        frac(out, F_ANY, mult10);
    }
    /* I = hi */
    if (hi && hi_frac) {
        frac_bounded(out, alts, sign, hi, (fbound){NULL, false}, (fbound){hi_d->f, hi_excl}, mult10);
    } else if (hi && !hi_excl) {
        if ((*alts)++) kn_sbuf_puts(out, " | ");
        kn_sbuf_printf(out, "%s\"%s\"", sign, hi->d);
        frac(out, F_ZERO, mult10);
    }
}

bool kn_num_body(kn_sbuf *b, kn_gout *g, kn_nbound lo, kn_nbound hi, bool integer, int mult10, int *widened) {
    if (!lo.set && !hi.set && !integer && mult10 < 0) {
        kn_sbuf_puts(b, "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?");
        return true;
    }
    if (!lo.set && !hi.set && integer) {
        kn_sbuf_puts(b, "\"-\"? (\"0\" | [1-9] [0-9]*)");
        return true;
    }
    /* bounds that are not integers: integers round inward; numbers compare their fraction digits
     * with the bound's (written as the shortest decimal that reads back as it), or, past FRAC_DIGITS
     * of them, widen outward (approximation) */
    dec probe;
    if (lo.set && floor(lo.v) != lo.v) {
        if (integer) lo = (kn_nbound){true, false, ceil(lo.v)};
        else if (!dec_of(&probe, lo.v)) lo = (kn_nbound){true, false, floor(lo.v)}, *widened = 1;
    }
    if (hi.set && floor(hi.v) != hi.v) {
        if (integer) hi = (kn_nbound){true, false, floor(hi.v)};
        else if (!dec_of(&probe, hi.v)) hi = (kn_nbound){true, false, ceil(hi.v)}, *widened = *widened ? *widened : 2;
    }
    if (lo.set && hi.set && (lo.v > hi.v || (lo.v == hi.v && (lo.excl || hi.excl)))) return false;
    int alts = 0;
    kn_sbuf_puts(b, "(");
    /* non-negative magnitudes: x >= 0 */
    if (!hi.set || hi.v > 0 || (hi.v == 0 && !hi.excl)) {
        dec l = {{"0"}, ""}, h = {{"0"}, ""};
        bool lx = false;
        if (lo.set && lo.v >= 0) dec_of(&l, lo.v), lx = lo.excl;
        if (hi.set) dec_of(&h, hi.v);
        half(b, g, &alts, "", l, lx, hi.set ? &h : NULL, hi.set && hi.excl, integer, mult10);
    }
    /* negative values: x = -a, a > 0 */
    if (!lo.set || lo.v < 0) {
        dec l = {{"0"}, ""}, h = {{"0"}, ""};
        bool lx = true; /* a > 0 unless the upper bound says more */
        if (hi.set && hi.v < 0) dec_of(&l, -hi.v), lx = hi.excl;
        if (lo.set) dec_of(&h, -lo.v);
        half(b, g, &alts, "\"-\" ", l, lx, lo.set ? &h : NULL, lo.set && lo.excl, integer, mult10);
    }
    kn_sbuf_puts(b, ")");
    return alts > 0;
}
